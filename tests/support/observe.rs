//! What informer and controller cases share: a pod, millisecond backoffs, polling with a
//! deadline, a handler that records what it was told, and running an informer on a task.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlkit::cache::{BackoffConfig, Deleted, Informer, InformerObject, ResourceEventHandler};
use k8s_openapi::api::core::v1::Pod;
use kube_client::ResourceExt;
use serde_json::json;

/// A pod named `name` with `labels` and one container.
pub fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": { "containers": [{ "name": "main", "image": "busybox:1.36" }] }
    }))
    .expect("a valid pod")
}

/// Milliseconds, so that failure cases do not wait for client-go's 800 ms.
pub fn fast_backoff() -> BackoffConfig {
    BackoffConfig {
        initial: Duration::from_millis(20),
        max: Duration::from_millis(100),
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
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits up to `limit` for an async `check` (a request to a server, say) to hold.
pub async fn eventually_async_within<F, Fut>(limit: Duration, what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What a handler was told, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Add(String),
    /// An update, and whether old and new were the same object (a resync).
    Update(String, bool),
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
    pub fn count(&self, f: impl Fn(&Seen) -> bool) -> usize {
        self.0.lock().unwrap().iter().filter(|s| f(s)).count()
    }
}

impl<K: InformerObject> ResourceEventHandler<K> for Recorder {
    fn on_add(&self, o: &Arc<K>, _initial: bool) {
        self.0.lock().unwrap().push(Seen::Add(o.name_any()));
    }
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        self.0.lock().unwrap().push(Seen::Update(new.name_any(), Arc::ptr_eq(old, new)));
    }
    fn on_delete(&self, d: &Deleted<K>) {
        let seen = match d {
            Deleted::Object(o) => Seen::Delete(o.name_any()),
            Deleted::Tombstone(t) => Seen::Tombstone(t.key.to_string()),
        };
        self.0.lock().unwrap().push(seen);
    }
}

/// A shutdown signal and the means to fire it.
pub fn shutdown() -> (tokio::sync::oneshot::Sender<()>, impl Future<Output = ()> + Send) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    (tx, async move {
        let _ = rx.await;
    })
}

/// Runs `informer` on its own task until the returned sender is dropped or fired.
pub fn start<K: InformerObject>(
    informer: &Informer<K>,
) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let (stop, stopped) = shutdown();
    let informer = informer.clone();
    (stop, tokio::spawn(async move { informer.run(stopped).await }))
}

/// A reconciler of any kind that records each key it reconciled, and whether the object
/// existed then.
pub struct Reconciled<K> {
    log: Arc<Mutex<Vec<(String, bool)>>>,
    _kind: std::marker::PhantomData<fn() -> K>,
}

/// The shared record of a [`Reconciled`].
#[derive(Clone, Default)]
pub struct ReconcileLog(Arc<Mutex<Vec<(String, bool)>>>);

impl ReconcileLog {
    /// A reconciler writing into this log.
    pub fn reconciler<K>(&self) -> Reconciled<K> {
        Reconciled { log: self.0.clone(), _kind: std::marker::PhantomData }
    }
    /// How many times `key` was reconciled.
    pub fn count(&self, key: &str) -> usize {
        self.0.lock().unwrap().iter().filter(|(k, _)| k == key).count()
    }
    /// Whether `key` was reconciled as absent.
    pub fn saw_absent(&self, key: &str) -> bool {
        self.0.lock().unwrap().iter().any(|(k, present)| k == key && !present)
    }
    /// Every key reconciled, in order.
    pub fn keys(&self) -> Vec<String> {
        self.0.lock().unwrap().iter().map(|(k, _)| k.clone()).collect()
    }
}

#[async_trait::async_trait]
impl<K: InformerObject> ctrlkit::controller::Reconciler for Reconciled<K> {
    type Object = K;
    type Error = std::convert::Infallible;

    async fn reconcile(
        &self,
        key: &ctrlkit::cache::ObjectKey,
        object: Option<Arc<K>>,
    ) -> Result<ctrlkit::controller::Action, Self::Error> {
        self.log.lock().unwrap().push((key.to_string(), object.is_some()));
        Ok(ctrlkit::controller::Action::done())
    }
}

/// Log lines, as tracing's default format writes them, captured for a test to read.
///
/// One global subscriber (at `debug`) writes each line to the capture of the thread that
/// logged it; a test on a current-thread runtime runs all its tasks on its own thread. (A
/// per-test `set_default` subscriber is not enough: tracing caches whether a callsite is
/// enabled globally, and tests running beside it on other threads would switch spans off.)
#[derive(Clone, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<Arc<Mutex<Vec<u8>>>>> = const { std::cell::RefCell::new(None) };
}

impl CapturedLogs {
    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Captures what this thread logs until the guard drops.
    pub fn capture(&self) -> CaptureGuard {
        static INSTALLED: std::sync::Once = std::sync::Once::new();
        INSTALLED.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::DEBUG)
                .with_ansi(false)
                .with_writer(|| Writer)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber");
        });
        CAPTURE.with(|c| *c.borrow_mut() = Some(self.0.clone()));
        CaptureGuard
    }
}

/// Ends a capture when dropped.
pub struct CaptureGuard;

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CAPTURE.with(|c| *c.borrow_mut() = None);
    }
}

/// Writes to the current thread's capture, if any.
struct Writer;

impl std::io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(sink) = &*c.borrow() {
                sink.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `controller` with `reconciler` on its own task until the returned sender is fired
/// or dropped.
pub fn run_controller<K, R>(
    controller: &ctrlkit::controller::Controller<K>,
    reconciler: R,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), ctrlkit::controller::ControllerError>>,
)
where
    K: InformerObject,
    R: ctrlkit::controller::Reconciler<Object = K>,
{
    let (stop, stopped) = shutdown();
    let controller = controller.clone();
    (stop, tokio::spawn(async move { controller.run(reconciler, stopped).await }))
}

/// Each key reconciled, with the resourceVersion read (none: absent).
pub type VersionsSeen = Vec<(String, Option<u64>)>;

/// A reconciler of ConfigMaps recording the resourceVersion it read for each key: whether
/// every change was reconciled at least once.
#[derive(Clone, Default)]
pub struct Versions(Arc<Mutex<VersionsSeen>>);

impl Versions {
    /// Whether some reconcile of `key` read it at `version` or later.
    pub fn saw_at_least(&self, key: &str, version: u64) -> bool {
        let seen = self.0.lock().unwrap();
        seen.iter().any(|(k, v)| k == key && v.is_some_and(|v| v >= version))
    }
    /// The keys reconciled while their objects existed, sorted.
    pub fn keys_present(&self) -> Vec<String> {
        let seen = self.0.lock().unwrap();
        let mut keys: Vec<String> =
            seen.iter().filter(|(_, v)| v.is_some()).map(|(k, _)| k.clone()).collect();
        keys.sort();
        keys.dedup();
        keys
    }
    /// How many reconciles ran.
    pub fn reconciles(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

#[async_trait::async_trait]
impl ctrlkit::controller::Reconciler for Versions {
    type Object = k8s_openapi::api::core::v1::ConfigMap;
    type Error = std::convert::Infallible;
    async fn reconcile(
        &self,
        key: &ctrlkit::cache::ObjectKey,
        object: Option<Arc<k8s_openapi::api::core::v1::ConfigMap>>,
    ) -> Result<ctrlkit::controller::Action, Self::Error> {
        let version = object.and_then(|o| o.resource_version()?.parse().ok());
        self.0.lock().unwrap().push((key.to_string(), version));
        Ok(ctrlkit::controller::Action::done())
    }
}
