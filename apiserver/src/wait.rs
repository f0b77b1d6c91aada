//! [`wait_for`]: wait, in a test, until an object reaches a state (kube-runtime's
//! `await_condition` with a deadline and a message).
//!
//! The object is read once, then watched by name from that read's version, so a change made
//! between the two is not missed; the condition is asked of every version seen (`None` while
//! the object does not exist, or once it is deleted). A watch that ends (its server-side
//! timeout, a dropped connection, a 410) is started again from a fresh read. The deadline is
//! tokio's clock.

use std::fmt::Debug;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube_client::Resource;
use kube_client::api::{Api, WatchEvent, WatchParams};
use serde::de::DeserializeOwned;

/// Why [`wait_for`] gave up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WaitError<K: Debug> {
    /// The deadline passed before the condition held.
    #[error("timed out after {timeout:?} waiting for {what} of {name}; last seen: {last:?}")]
    Timeout {
        /// What was waited for, as the caller described it.
        what: String,
        /// The object's name.
        name: String,
        /// How long it waited.
        timeout: Duration,
        /// The last version of the object seen (`None`: it did not exist).
        last: Option<Box<K>>,
    },
    /// The server refused the read or the watch request (a stream that ends or breaks
    /// afterwards is read afresh, not an error).
    #[error("waiting for {what} of {name}: {source}")]
    Api {
        /// What was waited for.
        what: String,
        /// The object's name.
        name: String,
        /// The server's answer.
        #[source]
        source: kube_client::Error,
    },
}

/// Waits until `condition` holds for the object `name` of `api` (given `None` while it does
/// not exist), for at most `timeout`; returns the object as it was then (`None` if the
/// condition held of its absence). `what` names the state in the error, as in
/// `wait_for(&pods, "web-0", "a Running phase", ..)`.
///
/// ```no_run
/// # async fn demo(server: ctrlkit_apiserver::ApiServer) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use ctrlkit_apiserver::wait_for;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube_client::Api;
///
/// let configmaps: Api<ConfigMap> = Api::namespaced(server.client(), "default");
/// let written = wait_for(&configmaps, "settings", "the controller's status key", Duration::from_secs(10), |cm| {
///     cm.and_then(|cm| cm.data.as_ref()).is_some_and(|d| d.contains_key("status"))
/// })
/// .await?;
/// assert!(written.is_some());
/// let gone = wait_for(&configmaps, "settings", "its deletion", Duration::from_secs(10), |cm| cm.is_none()).await?;
/// assert!(gone.is_none());
/// # Ok(()) }
/// ```
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    condition: impl Fn(Option<&K>) -> bool,
) -> Result<Option<K>, WaitError<K>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut last = None;
    let waited = tokio::time::timeout(timeout, watch_until(api, name, &condition, &mut last)).await;
    let fail = |source| WaitError::Api { what: what.to_owned(), name: name.to_owned(), source };
    match waited {
        Ok(result) => result.map_err(fail),
        Err(_) => Err(WaitError::Timeout {
            what: what.to_owned(),
            name: name.to_owned(),
            timeout,
            last: last.map(Box::new),
        }),
    }
}

/// Reads and watches until the condition holds, keeping the last version seen in `last`.
async fn watch_until<K>(
    api: &Api<K>,
    name: &str,
    condition: &impl Fn(Option<&K>) -> bool,
    last: &mut Option<K>,
) -> Result<Option<K>, kube_client::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    loop {
        let list = api.list(&kube_client::api::ListParams::default().fields(&field(name))).await?;
        *last = list.items.into_iter().next();
        if condition(last.as_ref()) {
            return Ok(last.take());
        }
        let version = list.metadata.resource_version.unwrap_or_default();
        let params = WatchParams::default().fields(&field(name)).timeout(60);
        let mut events = api.watch(&params, &version).await?.boxed();
        // A stream that fails mid-way (a dropped connection) is read afresh, as one that ends.
        while let Ok(Some(event)) = events.try_next().await {
            match event {
                WatchEvent::Added(object) | WatchEvent::Modified(object) => *last = Some(object),
                WatchEvent::Deleted(_) => *last = None,
                WatchEvent::Bookmark(_) => continue,
                // 410 and the like: read afresh.
                WatchEvent::Error(_) => break,
            }
            if condition(last.as_ref()) {
                return Ok(last.take());
            }
        }
        // Not at once: a server that ends every watch at once is not read in a tight loop.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn field(name: &str) -> String {
    format!("metadata.name={name}")
}
