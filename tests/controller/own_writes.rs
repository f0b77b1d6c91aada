//! Holds for a controller's own writes on the embedded server, on tokio's paused clock (an
//! in-process client): a hold that times out runs its reconcile exactly at the timeout,
//! counted and measured; a write the children's cache selects out holds nothing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ctrlkit::cache::{HasSynced, ListWatch, ObjectKey, SharedInformerFactory};
use ctrlkit::controller::{
    Action, Config, Controller, ControllerMetrics, ControllerMetricsProvider, ReconcileOutcome,
    Reconciler, recording_client,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube_client::api::PostParams;
use kube_client::client::Body;
use kube_client::{Api, Client};
use serde_json::json;
use tokio::time::Instant;

use super::common::*;

/// The holds reported to the metrics.
#[derive(Clone, Default)]
pub struct Holds(pub Arc<Mutex<Vec<(Duration, bool)>>>);

impl ControllerMetrics for Holds {
    fn max_concurrent_reconciles(&self, _: usize) {}
    fn worker_started(&self) {}
    fn worker_finished(&self) {}
    fn reconciled(&self, _: ReconcileOutcome, _: Duration) {}
    fn dropped(&self) {}
    fn held(&self, waited: Duration, timed_out: bool) {
        self.0.lock().unwrap().push((waited, timed_out));
    }
}

impl ControllerMetricsProvider for Holds {
    fn new_controller_metrics(&self, _: &str) -> Arc<dyn ControllerMetrics> {
        Arc::new(self.clone())
    }
}

/// Creates `child` through a recording client on its key's first reconcile and requeues at
/// once; notes when each reconcile starts.
struct CreatesOnce {
    secrets: Api<Secret>,
    child: serde_json::Value,
    started: Arc<Mutex<Vec<Instant>>>,
    /// When the first reconcile asks to run again.
    requeue: Duration,
}

#[async_trait]
impl Reconciler for CreatesOnce {
    type Object = ConfigMap;
    type Error = kube_client::Error;

    async fn reconcile(
        &self,
        _: &ObjectKey,
        _: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Self::Error> {
        let first = {
            let mut started = self.started.lock().unwrap();
            started.push(Instant::now());
            started.len() == 1
        };
        if !first {
            return Ok(Action::done());
        }
        let child = serde_json::from_value(self.child.clone()).expect("a valid secret");
        self.secrets.create(&PostParams::default(), &child).await?;
        Ok(Action::requeue_after(self.requeue))
    }
}

/// `client`, except that its watches of Secrets never answer: the Secrets' cache lists once
/// and never moves again.
pub(super) fn secrets_never_watched(client: Client) -> Client {
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let client = client.clone();
        async move {
            let uri = request.uri();
            let watch = uri.query().is_some_and(|q| q.contains("watch=true"));
            if watch && uri.path().ends_with("/secrets") {
                std::future::pending::<()>().await;
            }
            client.send(request).await
        }
    });
    Client::new(service, "default")
}

/// Runs a controller of ConfigMaps that owns the Secrets `children` lists and watches (through
/// a client whose Secret watches never answer), whose reconciler creates `child` once; returns
/// the gap between its first two reconciles, its stats' (holds, timeouts) and the metrics'
/// holds.
async fn second_reconcile_after(
    children: impl FnOnce(Api<Secret>) -> ListWatch<Secret>,
    child: serde_json::Value,
) -> (Duration, (u64, u64), Vec<(Duration, bool)>) {
    let server = server().await;
    let client = server.in_process_client();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let parent = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    configmaps.create(&PostParams::default(), &parent).await.unwrap();
    let stalled = Api::namespaced(secrets_never_watched(client.clone()), "default");
    let factory = SharedInformerFactory::new(client.clone());
    let children = children(stalled);
    factory.informer_with(children.clone(), |b| b.streaming_list(false));
    let holds = Holds::default();
    let controller = Controller::builder(configmaps)
        .factory(&factory)
        .owns(children)
        .metrics(Arc::new(holds.clone()))
        .config(Config::default().stale_cache_timeout(Duration::from_secs(5)))
        .build();
    factory.start(std::future::pending());
    let started = Arc::<Mutex<Vec<Instant>>>::default();
    let reconciler = CreatesOnce {
        secrets: Api::namespaced(recording_client(client), "default"),
        child,
        started: started.clone(),
        requeue: Duration::ZERO,
    };
    let (stop, run) = run_controller(&controller, reconciler);
    eventually("the caches synced", || controller.informer().has_synced()).await;
    eventually_within(Duration::from_secs(60), "the second reconcile", || {
        started.lock().unwrap().len() == 2
    })
    .await;
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    factory.shutdown().await;
    let started = started.lock().unwrap().clone();
    let stats = controller.stats();
    let held = holds.0.lock().unwrap().clone();
    (started[1] - started[0], (stats.holds, stats.stale_cache_timeouts), held)
}

/// A child its cache never shows holds the parent's next reconcile for exactly the hold's
/// timeout: then it runs, counted as a hold that timed out, with its time in the metrics.
#[tokio::test(start_paused = true)]
async fn a_hold_whose_cache_never_catches_up_ends_at_its_timeout() {
    let child = json!({"metadata": {"generateName": "a-", "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": "u", "controller": true,
    }]}});
    let (gap, stats, held) = second_reconcile_after(ListWatch::new, child).await;
    let timeout = Duration::from_secs(5);
    assert!(gap >= timeout && gap < timeout + Duration::from_secs(1), "held {gap:?}");
    assert_eq!(stats, (1, 1), "one hold, timed out");
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(held[0].1, "reported as timed out: {held:?}");
    assert!(held[0].0 >= timeout && held[0].0 < timeout + Duration::from_secs(1), "{held:?}");
}

/// A child the children's label selector leaves out never shows up in their cache: it holds
/// nothing, where it held every reconcile of its parent for the whole timeout.
#[tokio::test(start_paused = true)]
async fn a_write_the_childrens_selector_leaves_out_holds_nothing() {
    let child = json!({"metadata": {"name": "unselected", "labels": {"role": "other"}}});
    let selected = |api| ListWatch::new(api).labels("role=child");
    let (gap, stats, held) = second_reconcile_after(selected, child).await;
    assert_eq!(gap, Duration::ZERO, "not held");
    assert_eq!(stats, (0, 0));
    assert!(held.is_empty(), "{held:?}");
}

/// A controller whose run ended (as a removal from a manager ends it) while a key was parked
/// on its own writes lets go of its informers as soon as it is dropped: nothing that waited on
/// the parked key keeps the controller, and so its guards, alive.
#[tokio::test(start_paused = true)]
async fn a_controller_stopped_with_a_parked_key_lets_go_of_its_informers_when_dropped() {
    let server = server().await;
    let client = server.in_process_client();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let parent = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    configmaps.create(&PostParams::default(), &parent).await.unwrap();
    let mut config = ctrlkit::cache::InformerConfig::default();
    config.streaming_list = false;
    let factory = SharedInformerFactory::builder(client.clone()).informer_config(config).build();
    let stalled: Api<Secret> = Api::namespaced(secrets_never_watched(client.clone()), "default");
    let controller = Controller::builder(configmaps)
        .factory(&factory)
        .owns(stalled)
        .config(Config::default().stale_cache_timeout(Duration::from_secs(3600)))
        .build();
    factory.start(std::future::pending());
    let child = json!({"metadata": {"generateName": "a-"}});
    let started = Arc::<Mutex<Vec<Instant>>>::default();
    let secrets = Api::namespaced(recording_client(client), "default");
    let reconciler = CreatesOnce { secrets, child, started, requeue: Duration::ZERO };
    let (stop, run) = run_controller(&controller, reconciler);
    eventually("a parked", || !controller.held().is_empty()).await;
    assert_eq!(factory.informers().len(), 2, "{:?}", factory.informers());
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    assert_eq!(controller.held(), [], "the run's end let go of the parked key");
    drop(controller);
    assert_eq!(factory.informers(), Vec::<String>::new(), "the controller's guards are gone");
    factory.shutdown().await;
}

/// A hold with no end (`Duration::MAX`) parks its key until its caches catch up: working out
/// its deadline does not overflow (a panic in the worker, the key retried each second).
#[tokio::test(start_paused = true)]
async fn a_hold_without_end_parks_its_key_without_a_panic() {
    let server = server().await;
    let client = server.in_process_client();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let parent = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    configmaps.create(&PostParams::default(), &parent).await.unwrap();
    let factory = SharedInformerFactory::new(client.clone());
    let stalled: ListWatch<Secret> =
        ListWatch::new(Api::namespaced(secrets_never_watched(client.clone()), "default"));
    factory.informer_with(stalled.clone(), |b| b.streaming_list(false));
    let controller = Controller::builder(configmaps)
        .factory(&factory)
        .owns(stalled)
        .config(Config::default().stale_cache_timeout(Duration::MAX))
        .build();
    factory.start(std::future::pending());
    let started = Arc::<Mutex<Vec<Instant>>>::default();
    let secrets = Api::namespaced(recording_client(client), "default");
    let child = json!({"metadata": {"generateName": "a-"}});
    let reconciler =
        CreatesOnce { secrets, child, started: started.clone(), requeue: Duration::ZERO };
    let (stop, run) = run_controller(&controller, reconciler);
    eventually("a parked", || !controller.held().is_empty()).await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(controller.stats().panicked, 0, "{:?}", controller.stats());
    assert_eq!(started.lock().unwrap().len(), 1, "still held, an hour on");
    assert_eq!(controller.held(), [ObjectKey::namespaced("default", "a")]);
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    factory.shutdown().await;
}

/// Writes the caches hold already when the key's next reconcile comes hold nothing: no hold
/// counted, none in the metrics.
#[tokio::test(start_paused = true)]
async fn writes_the_caches_hold_at_the_next_reconcile_are_no_hold() {
    let server = server().await;
    let client = server.in_process_client();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let parent = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    configmaps.create(&PostParams::default(), &parent).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let holds = Holds::default();
    let controller = Controller::builder(configmaps)
        .owns(secrets.clone())
        .metrics(Arc::new(holds.clone()))
        .build();
    let started = Arc::<Mutex<Vec<Instant>>>::default();
    let reconciler = CreatesOnce {
        secrets: Api::namespaced(recording_client(client), "default"),
        child: json!({"metadata": {"name": "child"}}),
        started: started.clone(),
        requeue: Duration::from_secs(1),
    };
    let (stop, run) = run_controller(&controller, reconciler);
    eventually("the second reconcile", || started.lock().unwrap().len() == 2).await;
    let cached = controller.stats();
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    assert_eq!((cached.holds, cached.stale_cache_timeouts), (0, 0), "{cached:?}");
    assert!(holds.0.lock().unwrap().is_empty(), "{:?}", holds.0.lock().unwrap());
}
