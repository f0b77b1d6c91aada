//! Helpers: a server, pods, a recording handler, and polling with a deadline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlkit::cache::{BackoffConfig, Deleted, ResourceEventHandler};
use ctrlkit::testing::ApiServer;
use k8s_openapi::api::core::v1::Pod;
use kube_client::Api;
use kube_client::api::PostParams;
use serde_json::json;

pub async fn server() -> ApiServer {
    ApiServer::start().await.expect("the server starts")
}

pub fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": { "containers": [{ "name": "main", "image": "busybox:1.36" }] }
    }))
    .expect("a valid pod")
}

pub async fn create(pods: &Api<Pod>, names: &[&str]) {
    for name in names {
        pods.create(&PostParams::default(), &pod(name, json!({"app": "web"})))
            .await
            .expect("create");
    }
}

/// Milliseconds, so that failure tests do not wait for client-go's 800 ms.
pub fn fast_backoff() -> BackoffConfig {
    BackoffConfig {
        initial: Duration::from_millis(20),
        max: Duration::from_millis(100),
        reset_after: Duration::from_secs(60),
    }
}

/// Waits up to 10 s for `check` to hold.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What a handler was told, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Add(String),
    Update(String, bool),
    Delete(String),
    Tombstone(String),
}

/// A handler that records every notification.
#[derive(Clone, Default)]
pub struct Recorder(pub Arc<Mutex<Vec<Seen>>>);

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

impl Recorder {
    pub fn seen(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }
    pub fn count(&self, f: impl Fn(&Seen) -> bool) -> usize {
        self.0.lock().unwrap().iter().filter(|s| f(s)).count()
    }
}

impl ResourceEventHandler<Pod> for Recorder {
    fn on_add(&self, o: &Arc<Pod>) {
        self.0.lock().unwrap().push(Seen::Add(name(o)));
    }
    fn on_update(&self, old: &Arc<Pod>, new: &Arc<Pod>) {
        self.0.lock().unwrap().push(Seen::Update(name(new), Arc::ptr_eq(old, new)));
    }
    fn on_delete(&self, d: &Deleted<Pod>) {
        let seen = match d {
            Deleted::Object(o) => Seen::Delete(name(o)),
            Deleted::Tombstone(t) => Seen::Tombstone(t.key.to_string()),
        };
        self.0.lock().unwrap().push(seen);
    }
}

/// A shutdown signal and the means to fire it.
pub fn shutdown() -> (tokio::sync::oneshot::Sender<()>, impl std::future::Future<Output = ()> + Send)
{
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    (tx, async move {
        let _ = rx.await;
    })
}

/// Runs `informer` on its own task until the returned guard is dropped (or fired).
pub fn start<K: ctrlkit::cache::InformerObject>(
    informer: &ctrlkit::cache::Informer<K>,
) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let (stop, stopped) = shutdown();
    let informer = informer.clone();
    (stop, tokio::spawn(async move { informer.run(stopped).await }))
}
