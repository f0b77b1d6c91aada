//! The controller: retries, drops, requeues, panics, concurrency, shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ctrlkit::cache::{CacheSyncError, Informer, ListWatch, ObjectKey};
use ctrlkit::controller::{
    Action, Config, Controller, ControllerError, ReconcileFailure, Reconciler, enqueue_handler,
};
use ctrlkit::workqueue::{ItemExponentialFailureRateLimiter, WorkQueue};
use ctrlkit_apiserver::Failure;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube_client::Api;
use kube_client::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::common::*;
use crate::support::Failed;

/// Calls `f` for each reconcile and records when it happened.
struct Scripted<F> {
    calls: Arc<Mutex<Vec<(String, Instant)>>>,
    f: F,
}

#[async_trait]
impl<F> Reconciler for Scripted<F>
where
    F: Fn(&ObjectKey, usize) -> Result<Action, Failed> + Send + Sync + 'static,
{
    type Object = Pod;
    type Error = Failed;

    async fn reconcile(&self, key: &ObjectKey, _: Option<Arc<Pod>>) -> Result<Action, Failed> {
        let attempt = {
            let mut calls = self.calls.lock().unwrap();
            calls.push((key.to_string(), Instant::now()));
            calls.iter().filter(|(k, _)| *k == key.to_string()).count()
        };
        (self.f)(key, attempt)
    }
}

fn calls_for(calls: &Mutex<Vec<(String, Instant)>>, key: &str) -> Vec<Instant> {
    calls.lock().unwrap().iter().filter(|(k, _)| k == key).map(|(_, t)| *t).collect()
}

fn fast_limiter() -> ItemExponentialFailureRateLimiter<ObjectKey> {
    ItemExponentialFailureRateLimiter::new(Duration::from_millis(20), Duration::from_secs(5))
}

/// The keys a controller gave up on, with why.
type Drops = Arc<Mutex<Vec<(String, ReconcileFailure)>>>;

/// A controller over `pods` with millisecond retries, recording what it gives up on.
fn reporting_drops(pods: &Api<Pod>) -> (Controller<Pod>, Drops) {
    let dropped = Drops::default();
    let d = dropped.clone();
    let controller = Controller::builder(pods.clone())
        .queue(WorkQueue::builder().rate_limiter(fast_limiter()))
        .config(Config::default().on_dropped(move |key, failure| {
            d.lock().unwrap().push((key.to_string(), failure.clone()))
        }))
        .build();
    (controller, dropped)
}

#[tokio::test]
async fn a_failing_reconcile_is_retried_five_times_with_growing_delays_then_dropped_and_reported() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["bad", "good"]).await;
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (controller, dropped) = reporting_drops(&pods);
    let reconciler = Scripted {
        calls: calls.clone(),
        f: |key: &ObjectKey, attempt: usize| {
            if key.name == "bad" {
                Err(format!("attempt {attempt} failed").into())
            } else {
                Ok(Action::done())
            }
        },
    };
    let (stop, stopped) = shutdown();
    let run = tokio::spawn({
        let controller = controller.clone();
        async move { controller.run(reconciler, stopped).await }
    });
    // A key created while "bad" is retrying flows past it.
    eventually("bad's first attempt", || !calls_for(&calls, "default/bad").is_empty()).await;
    create(&pods, &["late"]).await;
    eventually("bad dropped", || !dropped.lock().unwrap().is_empty()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let attempts = calls_for(&calls, "default/bad");
    let late = calls_for(&calls, "default/late");
    assert!(late.len() == 1 && late[0] < attempts[5], "late waited for bad's retries");
    assert_eq!(attempts.len(), 6, "one try and five retries, then no more");
    let gaps: Vec<Duration> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
    for (i, pair) in gaps.windows(2).enumerate() {
        assert!(pair[1] > pair[0], "delays grow: gap {} {:?} then {:?}", i, pair[0], pair[1]);
    }
    assert!(
        gaps[0] >= Duration::from_millis(20) && gaps[4] >= Duration::from_millis(320),
        "{gaps:?}"
    );
    {
        let dropped = dropped.lock().unwrap();
        assert_eq!(dropped.len(), 1, "{dropped:?}");
        let (key, failure) = &dropped[0];
        assert_eq!(key, "default/bad");
        assert!(matches!(failure, ReconcileFailure::Error(_)), "{failure:?}");
        // The hook gets the reconciler's own error, not its text.
        let error = failure.error().and_then(|e| e.downcast_ref::<Failed>());
        assert_eq!(error, Some(&Failed::from("attempt 6 failed")));
    }
    assert_eq!(calls_for(&calls, "default/good").len(), 1);
    let stats = controller.stats();
    assert_eq!((stats.failed, stats.dropped, stats.succeeded), (6, 1, 2));
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// Fails "bad" with an error it calls terminal, and "flaky" with one it does not.
struct Judging(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl Reconciler for Judging {
    type Object = Pod;
    type Error = Failed;

    async fn reconcile(&self, key: &ObjectKey, _: Option<Arc<Pod>>) -> Result<Action, Failed> {
        self.0.lock().unwrap().push(key.name.clone());
        match key.name.as_str() {
            "bad" => Err("spec.size must be positive".into()),
            "flaky" => Err("the server is busy".into()),
            _ => Ok(Action::done()),
        }
    }

    fn is_terminal(&self, error: &Failed) -> bool {
        error.message.starts_with("spec.")
    }
}

#[tokio::test]
async fn a_terminal_error_is_not_retried_but_reported_while_others_retry() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["bad", "flaky"]).await;
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (controller, dropped) = reporting_drops(&pods);
    let (stop, run) = run_controller(&controller, Judging(calls.clone()));
    let count = |name: &str| calls.lock().unwrap().iter().filter(|n| *n == name).count();
    eventually("flaky retried to the end", || count("flaky") == 6).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(count("bad"), 1, "a terminal error is not retried");
    let reports = dropped.lock().unwrap().clone();
    let terminal = reports.iter().find(|(key, _)| key == "default/bad").map(|(_, f)| f);
    assert!(
        matches!(terminal, Some(ReconcileFailure::Terminal(e)) if e.to_string() == "spec.size must be positive"),
        "{reports:?}"
    );
    let stats = controller.stats();
    assert_eq!(
        (stats.terminal, stats.dropped),
        (1, 1),
        "bad terminal, flaky dropped after its retries"
    );
    // The key comes back when its object changes.
    let patch = Patch::Merge(json!({"metadata": {"labels": {"fixed": "yes"}}}));
    pods.patch("bad", &PatchParams::default(), &patch).await.unwrap();
    eventually("bad reconciled again", || count("bad") == 2).await;
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// Reconciles as [`Judging`], with an `is_terminal` that panics on "flaky"'s error.
struct PanickyJudge(Judging);

#[async_trait]
impl Reconciler for PanickyJudge {
    type Object = Pod;
    type Error = Failed;

    async fn reconcile(&self, key: &ObjectKey, pod: Option<Arc<Pod>>) -> Result<Action, Failed> {
        self.0.reconcile(key, pod).await
    }

    fn is_terminal(&self, error: &Failed) -> bool {
        assert!(error.message.starts_with("spec."), "an is_terminal that panics");
        true
    }
}

/// A panic in the `on_dropped` hook or in `is_terminal` (user code, as the reconcile is) is
/// logged and the worker goes on: with one worker, keys created after it are reconciled, a
/// key given up on comes back when its object changes, and an error whose `is_terminal`
/// panicked is retried as one that is not terminal.
#[tokio::test]
async fn a_panic_in_the_dropped_hook_or_in_is_terminal_leaves_the_worker_running() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["bad"]).await;
    let calls = Arc::new(Mutex::new(Vec::new()));
    let controller = Controller::builder(pods.clone())
        .queue(WorkQueue::builder().rate_limiter(fast_limiter()))
        .config(
            Config::default().workers(1).on_dropped(|key, _| panic!("a hook that panics on {key}")),
        )
        .build();
    let (stop, run) = run_controller(&controller, PanickyJudge(Judging(calls.clone())));
    let count = |name: &str| calls.lock().unwrap().iter().filter(|n| *n == name).count();
    eventually("bad given up on", || controller.stats().terminal == 1).await;
    create(&pods, &["late", "flaky"]).await;
    eventually("late reconciled after the hook panicked", || count("late") == 1).await;
    eventually("flaky retried to the end", || count("flaky") == 6).await;
    let patch = Patch::Merge(json!({"metadata": {"labels": {"fixed": "yes"}}}));
    pods.patch("bad", &PatchParams::default(), &patch).await.unwrap();
    eventually("bad reconciled again", || count("bad") == 2).await;
    let text = logs.text();
    assert!(text.contains("a hook that panics on default/bad"), "the hook's panic logged: {text}");
    assert!(text.contains("an is_terminal that panics"), "is_terminal's panic logged: {text}");
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

#[tokio::test]
async fn requeue_after_brings_a_key_back_after_the_delay() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["p"]).await;
    let calls = Arc::new(Mutex::new(Vec::new()));
    let reconciler = Scripted {
        calls: calls.clone(),
        f: |_: &ObjectKey, attempt: usize| {
            Ok(if attempt < 3 {
                Action::requeue_after(Duration::from_millis(150))
            } else {
                Action::done()
            })
        },
    };
    let (_stop, stopped) = shutdown();
    let controller = Controller::builder(pods).build();
    tokio::spawn(async move { controller.run(reconciler, stopped).await });
    eventually("three reconciles", || calls_for(&calls, "default/p").len() == 3).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let times = calls_for(&calls, "default/p");
    assert_eq!(times.len(), 3, "done() stops the requeues");
    assert!(times[1] - times[0] >= Duration::from_millis(150));
    assert!(times[2] - times[1] >= Duration::from_millis(150));
}

#[tokio::test]
async fn a_panicking_reconcile_is_caught_counted_and_retried_and_the_worker_lives_on() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["boom", "fine"]).await;
    let calls = Arc::new(Mutex::new(Vec::new()));
    let reconciler = Scripted {
        calls: calls.clone(),
        f: |key: &ObjectKey, attempt: usize| {
            if key.name == "boom" && attempt == 1 {
                panic!("reconcile exploded");
            }
            Ok(Action::done())
        },
    };
    // One worker (the default): if the panic killed it, nothing else would be reconciled.
    let controller = Controller::builder(pods.clone())
        .queue(WorkQueue::builder().rate_limiter(fast_limiter()))
        .build();
    let (_stop, stopped) = shutdown();
    tokio::spawn({
        let controller = controller.clone();
        async move { controller.run(reconciler, stopped).await }
    });
    eventually("boom retried after its panic", || calls_for(&calls, "default/boom").len() == 2)
        .await;
    create(&pods, &["later"]).await;
    eventually("the worker still works", || calls_for(&calls, "default/later").len() == 1).await;
    let stats = controller.stats();
    assert_eq!(stats.panicked, 1);
    assert_eq!(stats.dropped, 0);
}

/// Records, per key, the newest resourceVersion reconciled, and whether two workers ever held
/// one key at once.
#[derive(Default)]
struct Tracker {
    in_flight: Mutex<HashMap<String, bool>>,
    newest: Mutex<HashMap<String, u64>>,
    overlap: AtomicBool,
    reconciles: AtomicUsize,
}

struct Tracking(Arc<Tracker>);

#[async_trait]
impl Reconciler for Tracking {
    type Object = ConfigMap;
    type Error = Failed;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        cm: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Failed> {
        let k = key.to_string();
        if self.0.in_flight.lock().unwrap().insert(k.clone(), true) == Some(true) {
            self.0.overlap.store(true, Ordering::SeqCst);
        }
        tokio::task::yield_now().await;
        if let Some(cm) = cm {
            let rv: u64 = cm.metadata.resource_version.as_deref().unwrap_or("0").parse().unwrap();
            let mut newest = self.0.newest.lock().unwrap();
            let entry = newest.entry(k.clone()).or_default();
            *entry = (*entry).max(rv);
        }
        self.0.reconciles.fetch_add(1, Ordering::SeqCst);
        self.0.in_flight.lock().unwrap().insert(k, false);
        Ok(Action::done())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_objects_under_many_updates_all_reach_their_newest_version_with_no_key_held_twice()
 {
    let server = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let names: Vec<String> = (0..1000).map(|i| format!("cm-{i:04}")).collect();
    for name in &names {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": "0"}}))
                .unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    // client-go's explicit wiring.
    let queue: WorkQueue<ObjectKey> = WorkQueue::builder().name("configmaps").build();
    let informer = Informer::new(ListWatch::new(cms.clone()));
    informer.add_event_handler(enqueue_handler(queue.clone()));
    let controller = Controller::with_config(queue, informer, Config::default().workers(2));
    let tracker = Arc::new(Tracker::default());
    let (stop, stopped) = shutdown();
    let run = tokio::spawn({
        let (controller, tracker) = (controller.clone(), tracker.clone());
        async move { controller.run(Tracking(tracker), stopped).await }
    });
    for round in 1..=3 {
        for name in &names {
            let patch = Patch::Merge(json!({"data": {"v": round.to_string()}}));
            cms.patch(name, &PatchParams::default(), &patch).await.unwrap();
        }
    }
    let finals: HashMap<String, u64> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|cm| {
            (
                format!("default/{}", cm.metadata.name.as_deref().unwrap()),
                cm.metadata.resource_version.as_deref().unwrap().parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(finals.len(), 1000);
    eventually("every object reconciled at its newest version", || {
        let newest = tracker.newest.lock().unwrap();
        finals.iter().all(|(k, rv)| newest.get(k) == Some(rv))
    })
    .await;
    assert!(!tracker.overlap.load(Ordering::SeqCst), "a key was reconciled by two workers at once");
    let reconciles = tracker.reconciles.load(Ordering::SeqCst);
    assert!((1000..=4000).contains(&reconciles), "{reconciles} reconciles for 4,000 versions");
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

struct Slow {
    started: Arc<AtomicBool>,
    finished: Arc<AtomicBool>,
}

#[async_trait]
impl Reconciler for Slow {
    type Object = Pod;
    type Error = Failed;

    async fn reconcile(&self, _: &ObjectKey, _: Option<Arc<Pod>>) -> Result<Action, Failed> {
        self.started.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.finished.store(true, Ordering::SeqCst);
        Ok(Action::done())
    }
}

#[tokio::test]
async fn shutdown_stops_taking_keys_and_drains_the_reconciles_in_flight() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["p"]).await;
    let (started, finished) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let reconciler = Slow { started: started.clone(), finished: finished.clone() };
    let (stop, stopped) = shutdown();
    let controller = Controller::builder(pods).build();
    let run = tokio::spawn(async move { controller.run(reconciler, stopped).await });
    eventually("a reconcile in flight", || started.load(Ordering::SeqCst)).await;
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    assert!(
        finished.load(Ordering::SeqCst),
        "run returned before the reconcile in flight finished"
    );
}

/// Reconciles `stuck` forever, everything else at once.
struct Stuck;

#[async_trait]
impl Reconciler for Stuck {
    type Object = Pod;
    type Error = Failed;

    async fn reconcile(&self, key: &ObjectKey, _: Option<Arc<Pod>>) -> Result<Action, Failed> {
        if key.name == "stuck" {
            std::future::pending::<()>().await;
        }
        Ok(Action::done())
    }
}

#[tokio::test]
async fn reconciles_still_running_after_the_shutdown_grace_are_abandoned_and_listed() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["stuck", "fine"]).await;
    let controller = Controller::builder(pods)
        .config(Config::default().workers(2).shutdown_grace(Duration::from_millis(200)))
        .build();
    let (stop, stopped) = shutdown();
    let run = tokio::spawn({
        let controller = controller.clone();
        async move { controller.run(Stuck, stopped).await }
    });
    eventually("stuck in flight, fine done", || {
        controller.in_flight().len() == 1 && controller.stats().succeeded == 1
    })
    .await;
    let stopping = Instant::now();
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    let took = stopping.elapsed();
    assert!(took >= Duration::from_millis(200) && took < Duration::from_secs(2), "{took:?}");
    assert_eq!(controller.stats().abandoned, 1);
    assert!(controller.in_flight().is_empty());
    let text = logs.text();
    assert!(
        text.contains("abandoning the reconciles still running") && text.contains("default/stuck"),
        "{text}"
    );

    // Without a grace period, shutdown waits for the reconcile however long it takes.
    let server = super::common::server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["stuck"]).await;
    let controller = Controller::builder(pods).build();
    let (stop, stopped) = shutdown();
    let run = tokio::spawn({
        let controller = controller.clone();
        async move { controller.run(Stuck, stopped).await }
    });
    eventually("stuck in flight", || controller.in_flight().len() == 1).await;
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!run.is_finished(), "run returned with a reconcile in flight");
    run.abort();
}

#[tokio::test]
async fn run_fails_clearly_when_the_cache_cannot_sync() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    server.faults().fail_next(usize::MAX, Failure::InternalError);
    let reconciler =
        Scripted { calls: Arc::default(), f: |_: &ObjectKey, _: usize| Ok(Action::done()) };
    let result = Controller::builder(pods)
        .informer(|informer| informer.backoff(fast_backoff()))
        .build()
        .run(reconciler, tokio::time::sleep(Duration::from_millis(300)))
        .await;
    let unsynced = CacheSyncError::Shutdown(vec!["pods in namespace default".into()]);
    assert_eq!(result, Err(ControllerError::CacheSync(unsynced)));
    let message = result.unwrap_err().to_string();
    assert_eq!(
        message,
        "the controller's caches did not sync: shut down before these caches synced: pods in namespace default"
    );
    server.faults().fail_next(0, Failure::InternalError);
}

#[tokio::test]
async fn a_controller_whose_informer_stops_fails_and_names_it() {
    use ctrlkit::cache::SharedInformerFactory;
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a"]).await;
    let factory = SharedInformerFactory::new(server.client());
    let controller = Controller::builder(pods.clone()).factory(&factory).build();
    let (stop_factory, factory_stopped) = shutdown();
    factory.start(factory_stopped);
    let reconciler =
        Scripted { calls: Arc::default(), f: |_: &ObjectKey, _: usize| Ok(Action::done()) };
    let calls = reconciler.calls.clone();
    let run = tokio::spawn(async move { controller.run(reconciler, std::future::pending()).await });
    eventually("a reconciled", || calls_for(&calls, "default/a").len() == 1).await;
    // The factory's owner stops it under the controller: the controller's cache would freeze.
    stop_factory.send(()).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the controller stops instead of waiting")
        .unwrap();
    assert_eq!(
        result,
        Err(ControllerError::InformerStopped { informer: "pods in namespace default".into() })
    );
}

#[tokio::test]
async fn a_controller_runs_once() {
    // (An indexer of another informer, which client-go's wiring allowed, cannot be passed:
    // `Controller::new`'s compile-fail doc test.)
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let noop =
        || Scripted { calls: Arc::default(), f: |_: &ObjectKey, _: usize| Ok(Action::done()) };
    let controller = Controller::builder(pods).build();
    let clone = controller.clone();
    let _ = controller.run(noop(), tokio::time::sleep(Duration::from_millis(100))).await;
    // A clone is the same controller: its one run is over.
    assert_eq!(clone.run(noop(), std::future::ready(())).await, Err(ControllerError::AlreadyRun));
}

#[tokio::test]
async fn client_gos_wiring_leaves_an_informer_someone_else_runs() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a"]).await;
    let queue: WorkQueue<ObjectKey> = WorkQueue::new();
    let informer = Informer::new(ListWatch::new(pods.clone()));
    informer.add_event_handler(enqueue_handler(queue.clone()));
    let (_owner, _running) = start(&informer);
    eventually("running", || informer.is_running()).await;
    let controller = Controller::new(queue, informer.clone());
    let noop = Scripted { calls: Arc::default(), f: |_: &ObjectKey, _: usize| Ok(Action::done()) };
    controller.run(noop, tokio::time::sleep(Duration::from_millis(200))).await.unwrap();
    assert!(informer.is_running(), "the controller stopped an informer it did not start");
}

/// A reconcile's logs say which controller and which key.
#[tokio::test]
async fn reconcile_logs_name_the_controller_and_the_key() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["bad"]).await;
    let controller = Controller::builder(pods)
        .name("pod-checker")
        .queue(WorkQueue::builder().rate_limiter(fast_limiter()))
        .config(Config::default().max_retries(0))
        .build();
    let failing = Scripted {
        calls: Arc::default(),
        f: |_: &ObjectKey, _: usize| Err(Failed::caused_by("no good", "the disk is full")),
    };
    let calls = failing.calls.clone();
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(async move { controller.run(failing, stopped).await });
    eventually("the failure logged", || logs.text().contains("dropping key")).await;
    assert_eq!(calls.lock().unwrap().len(), 1);
    let line = logs.text().lines().find(|l| l.contains("dropping key")).unwrap().to_owned();
    for part in [
        "controller{name=pod-checker}",
        // And why it ran: the pod was listed when the informer started.
        "reconcile{controller=pod-checker key=default/bad reasons=added (initial list)}",
        // The error with its source chain.
        "no good: the disk is full",
    ] {
        assert!(line.contains(part), "{part:?} missing from {line:?}");
    }
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// Reports a write at version 100 on its first reconcile and asks to come back at once.
struct WritesOnce(Arc<AtomicUsize>);

#[async_trait]
impl Reconciler for WritesOnce {
    type Object = ConfigMap;
    type Error = Failed;

    async fn reconcile(&self, _: &ObjectKey, _: Option<Arc<ConfigMap>>) -> Result<Action, Failed> {
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            let written: ConfigMap =
                serde_json::from_value(crate::support::scripted::configmap("a", 100)).unwrap();
            assert!(ctrlkit::controller::report_written(&written));
            return Ok(Action::requeue_after(Duration::ZERO));
        }
        Ok(Action::done())
    }
}

/// A controller stopped while a key is held for the cache to hold its own last write (parked:
/// its worker free) stops at once: its informer stopped with it, so the cache will never hold the write,
/// and the reconcile is not run on a cache known to lack it. (It waited out the whole
/// stale-cache timeout, then reconciled on the stopped cache.)
#[tokio::test]
async fn a_stop_while_a_reconcile_waits_for_its_own_write_ends_the_wait_without_reconciling() {
    use crate::support::scripted::{Reply, Scripted, configmap, list};
    // Lists "a" at version 5; its watches never send an event.
    let server = Scripted::start(|asked| match asked.watch {
        false => Reply::json(list(10, &[configmap("a", 5)])),
        true => Reply::Stream { lines: Vec::new(), stall: true },
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let stale_cache_timeout = Duration::from_secs(30);
    let controller = Controller::builder(api)
        .informer(|b| b.streaming_list(false))
        .config(Config::default().stale_cache_timeout(stale_cache_timeout))
        .build();
    let calls = Arc::new(AtomicUsize::new(0));
    let (stop, run) = run_controller(&controller, WritesOnce(calls.clone()));
    eventually("the first reconcile", || calls.load(Ordering::SeqCst) == 1).await;
    // Requeued at once, "a" is now held for version 100, which this server never sends.
    eventually("a held", || controller.stats().holds == 1).await;
    stop.send(()).unwrap();
    let ended = tokio::time::timeout(stale_cache_timeout / 2, run).await;
    let ended = ended.expect("the controller stops without waiting out the stale-cache timeout");
    ended.unwrap().unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no reconcile on a cache known to lack its write");
    assert_eq!(controller.stats().stale_cache_timeouts, 0);
}

/// A rate limiter whose `when` panics (user code the worker calls after a failed reconcile).
struct PanickyLimiter;

impl ctrlkit::workqueue::RateLimiter<ObjectKey> for PanickyLimiter {
    fn when(&self, _: &ObjectKey) -> Duration {
        panic!("a rate limiter that panics")
    }
    fn forget(&self, _: &ObjectKey) {}
    fn num_requeues(&self, _: &ObjectKey) -> u32 {
        0
    }
}

/// A panic in the processing of a key outside the reconcile (here a user's rate limiter,
/// called to retry a failure) does not end the worker: it is logged and counted, the key is
/// retried a second later, and keys created after it are reconciled.
#[tokio::test]
async fn a_panic_in_a_rate_limiter_leaves_the_worker_running_and_retries_the_key() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["flaky"]).await;
    let calls = Arc::new(Mutex::new(Vec::new()));
    let controller = Controller::builder(pods.clone())
        .queue(WorkQueue::builder().rate_limiter(PanickyLimiter))
        .config(Config::default().workers(1))
        .build();
    let (stop, run) = run_controller(&controller, Judging(calls.clone()));
    let count = |name: &str| calls.lock().unwrap().iter().filter(|n| *n == name).count();
    eventually("flaky failed once", || count("flaky") == 1).await;
    create(&pods, &["late"]).await;
    eventually("late reconciled after the panic", || count("late") == 1).await;
    eventually("flaky retried", || count("flaky") >= 2).await;
    assert!(controller.stats().panicked >= 1, "counted: {:?}", controller.stats());
    assert!(logs.text().contains("a rate limiter that panics"), "logged: {}", logs.text());
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// Controller metrics hooks that panic, every one of them.
struct PanickingMetrics;

impl ctrlkit::controller::ControllerMetrics for PanickingMetrics {
    fn max_concurrent_reconciles(&self, _: usize) {
        panic!("max_concurrent_reconciles hook");
    }
    fn worker_started(&self) {
        panic!("worker_started hook");
    }
    fn worker_finished(&self) {
        panic!("worker_finished hook");
    }
    fn reconciled(&self, _: ctrlkit::controller::ReconcileOutcome, _: Duration) {
        panic!("reconciled hook");
    }
    fn dropped(&self) {
        panic!("dropped hook");
    }
}

impl ctrlkit::controller::ControllerMetricsProvider for PanickingMetrics {
    fn new_controller_metrics(&self, _: &str) -> Arc<dyn ctrlkit::controller::ControllerMetrics> {
        Arc::new(PanickingMetrics)
    }
}

/// A metrics hook is user code: its panic costs the metric, not the reconcile. The worker's
/// catch-all used to take it for a failed key: the key was put back before its reconcile
/// (`worker_started`) and retried every second, never reconciled.
#[tokio::test]
async fn metrics_hooks_that_panic_change_no_reconcile() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a", "flaky"]).await;
    let calls = Arc::new(Mutex::new(Vec::new()));
    let controller = Controller::builder(pods.clone())
        .metrics(Arc::new(PanickingMetrics))
        .config(Config::default().workers(1))
        .build();
    let (stop, run) = run_controller(&controller, Judging(calls.clone()));
    let count = |name: &str| calls.lock().unwrap().iter().filter(|n| *n == name).count();
    eventually("a reconciled", || count("a") == 1).await;
    eventually("flaky retried", || count("flaky") >= 2).await;
    assert_eq!(count("a"), 1, "a reconciled once: {:?}", calls.lock().unwrap());
    assert_eq!(controller.stats().panicked, 0, "{:?}", controller.stats());
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}
