//! Helpers of the end-to-end cases: pods, a recording handler, polling with a deadline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlkit::cache::{
    BackoffConfig, Deleted, Informer, InformerBuilder, InformerObject, ListWatch,
    ResourceEventHandler, wait_for_cache_sync,
};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Pod;
use kube_client::api::PostParams;
use kube_client::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::support::Target;
use crate::support::proxy::Proxy;
use crate::support::requests::RequestLog;

pub fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": { "containers": [{ "name": "main", "image": "busybox:1.36" }] }
    }))
    .expect("a valid pod")
}

pub async fn create(pods: &Api<Pod>, names: &[&str], labels: serde_json::Value) {
    for name in names {
        pods.create(&PostParams::default(), &pod(name, labels.clone())).await.expect("create");
    }
}

/// Milliseconds, so that a cut connection is retried at once.
pub fn fast_backoff() -> BackoffConfig {
    BackoffConfig {
        initial: Duration::from_millis(20),
        max: Duration::from_millis(200),
        reset_after: Duration::from_secs(60),
    }
}

/// Waits up to `limit` for `check` to hold.
pub async fn eventually_within(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits up to 20 s for `check` to hold.
pub async fn eventually(what: &str, check: impl FnMut() -> bool) {
    eventually_within(Duration::from_secs(20), what, check).await
}

/// What a handler was told, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Add(String),
    Update(String),
    Delete(String),
    /// A delete learnt from a relist, by key.
    Tombstone(String),
}

/// A handler that records every notification, for any kind.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<Seen>>>);

impl Recorder {
    pub fn seen(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }
    pub fn saw(&self, seen: &Seen) -> bool {
        self.0.lock().unwrap().contains(seen)
    }
}

impl<K: InformerObject> ResourceEventHandler<K> for Recorder {
    fn on_add(&self, o: &Arc<K>) {
        self.0.lock().unwrap().push(Seen::Add(o.name_any()));
    }
    fn on_update(&self, _old: &Arc<K>, new: &Arc<K>) {
        self.0.lock().unwrap().push(Seen::Update(new.name_any()));
    }
    fn on_delete(&self, d: &Deleted<K>) {
        let seen = match d {
            Deleted::Object(o) => Seen::Delete(o.name_any()),
            Deleted::Tombstone(t) => Seen::Tombstone(t.key.to_string()),
        };
        self.0.lock().unwrap().push(seen);
    }
}

/// An informer running through a proxy, synced, with a recorder of what it told handlers
/// and a log of its requests. Dropping it stops the informer.
pub struct Synced<K> {
    pub informer: Informer<K>,
    pub recorder: Recorder,
    pub proxy: Proxy,
    pub log: RequestLog,
    _running: (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>),
}

/// Starts an informer for `K` in the case's namespace, its connections through a proxy,
/// shaped by `configure`, and waits for its cache to sync.
pub async fn synced_informer<K>(
    t: &Target,
    configure: impl FnOnce(InformerBuilder<K>) -> InformerBuilder<K>,
    list_watch: impl FnOnce(ListWatch<K>) -> ListWatch<K>,
) -> Synced<K>
where
    K: InformerObject + Resource<Scope = NamespaceResourceScope>,
    K::DynamicType: Default,
{
    let (proxy, client, log) = t.through_proxy().await;
    let list_watch = list_watch(ListWatch::new(Api::namespaced(client, &t.ns)));
    let informer = configure(Informer::builder(list_watch).backoff(fast_backoff())).build();
    let recorder = Recorder::default();
    informer.add_event_handler(recorder.clone());
    let running = start(&informer);
    assert!(wait_for_cache_sync(&[&informer], std::future::pending()).await);
    Synced { informer, recorder, proxy, log, _running: running }
}

/// Runs `informer` on its own task until the returned sender is dropped or fired.
pub fn start<K: InformerObject>(
    informer: &Informer<K>,
) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let informer = informer.clone();
    let task = tokio::spawn(async move {
        informer
            .run(async move {
                let _ = stopped.await;
            })
            .await
    });
    (stop, task)
}

/// A resourceVersion as a number, to compare versions in tests (clients must not, in
/// general; both servers here use etcd-style increasing integers).
pub fn rv_number(rv: &str) -> u64 {
    rv.parse().unwrap_or_else(|_| panic!("a numeric resourceVersion, got {rv:?}"))
}
