//! The reconcile context: why a reconcile runs (in the context and in its log span), and what
//! it wrote through a recording client, held against the caches that watch it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ctrlkit::cache::{HasSynced, ListWatch, ObjectKey, SharedInformerFactory};
use ctrlkit::controller::{
    Action, Config, Controller, Event, Reason, ReconcileContext, Reconciler, Verb, recording_client,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube_client::Api;
use kube_client::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::common::*;
use super::own_writes::Holds;
use crate::support::Failed;

/// Records each reconcile's reasons; logs a line inside its span; requeues once when asked.
#[derive(Clone, Default)]
struct Why {
    seen: Arc<Mutex<Vec<Vec<Reason>>>>,
    requeue_once: Arc<AtomicUsize>,
}

#[async_trait]
impl Reconciler for Why {
    type Object = ConfigMap;
    type Error = Failed;

    async fn reconcile(&self, _: &ObjectKey, _: Option<Arc<ConfigMap>>) -> Result<Action, Failed> {
        let context = ReconcileContext::current().expect("inside a reconcile");
        tracing::info!("reconciling");
        self.seen.lock().unwrap().push(context.reasons().to_vec());
        if self.requeue_once.fetch_sub(1, Ordering::SeqCst) == 1 {
            return Ok(Action::requeue_after(Duration::ZERO));
        }
        Ok(Action::done())
    }
}

impl Why {
    fn saw(&self, reason: &Reason) -> bool {
        self.seen.lock().unwrap().iter().any(|reasons| reasons.contains(reason))
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_reconcile_knows_why_it_runs_and_its_span_says_so() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = server().await;
    let client = server.client();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let controller = Controller::builder(configmaps.clone()).owns(secrets.clone()).build();
    let why = Why::default();
    let (stop, run) = run_controller(&controller, why.clone());
    eventually("the caches synced", || controller.informer().has_synced()).await;

    let parent = create_configmap(&server, "a").await;
    eventually("added", || why.saw(&Reason::Added { initial: false })).await;
    let patch = Patch::Merge(json!({"data": {"k": "v"}}));
    let patched = configmaps.patch("a", &PatchParams::default(), &patch).await.unwrap();
    // A real server gives a ConfigMap no generation (its data change is "other"); the
    // embedded one moves it on any change outside metadata and status (then it is "spec").
    let moved = patched.metadata.generation != parent.metadata.generation;
    eventually("updated: its data, as spec if its generation moved, else other", || {
        why.seen.lock().unwrap().iter().flatten().any(
            |r| matches!(r, Reason::Updated(c) if c.spec == moved && c.other != moved && !c.metadata),
        )
    })
    .await;
    let child = serde_json::from_value(json!({"metadata": {"name": "child", "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "a",
        "uid": parent.metadata.uid, "controller": true,
    }]}}))
    .unwrap();
    why.requeue_once.store(1, Ordering::SeqCst);
    secrets.create(&PostParams::default(), &child).await.unwrap();
    let owned = Reason::Owned {
        kind: "Secret".into(),
        key: ObjectKey::namespaced("default", "child"),
        event: Event::Added,
    };
    eventually("the owned secret named", || why.saw(&owned)).await;
    eventually("the requeue it asked for", || why.saw(&Reason::Requeue)).await;
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    let text = logs.text();
    let line = text.lines().find(|l| l.contains("reasons=owned Secret default/child added"));
    assert!(line.is_some_and(|l| l.contains("reconciling")), "the span names the reasons:\n{text}");
}

/// Creates a Secret with `generateName` through a recording client on its first reconcile,
/// and keeps what each reconcile's context recorded.
struct CreatesOnce {
    secrets: Api<Secret>,
    calls: Arc<AtomicUsize>,
    written: Arc<Mutex<Vec<ctrlkit::controller::Write>>>,
    /// When the first reconcile ended and the second began.
    times: Arc<Mutex<Vec<std::time::Instant>>>,
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
        if self.calls.fetch_add(1, Ordering::SeqCst) > 0 {
            self.times.lock().unwrap().push(std::time::Instant::now());
            return Ok(Action::done());
        }
        let child = serde_json::from_value(json!({"metadata": {"generateName": "a-"}})).unwrap();
        self.secrets.create(&PostParams::default(), &child).await?;
        let context = ReconcileContext::current().expect("inside a reconcile");
        self.written.lock().unwrap().extend(context.writes());
        self.times.lock().unwrap().push(std::time::Instant::now());
        Ok(Action::requeue_after(Duration::ZERO))
    }
}

/// A server that lists one ConfigMap and no Secrets, never sends a watch event, and answers a
/// Secret's create with "a-x1" at version 100.
async fn stalled_server() -> crate::support::scripted::Scripted {
    use crate::support::scripted::{Reply, Scripted, configmap, list};
    Scripted::start(|asked| match (asked.watch, asked.line.as_str()) {
        (true, _) => Reply::Stream { lines: Vec::new(), stall: true },
        (false, line) if line.starts_with("POST") => Reply::json(
            json!({"kind": "Secret", "apiVersion": "v1", "metadata": {
                "name": "a-x1", "generateName": "a-", "namespace": "default",
                "resourceVersion": "100",
            }})
            .to_string(),
        ),
        (false, line) if line.contains("/secrets") => Reply::json(
            json!({"kind": "SecretList", "apiVersion": "v1",
                "metadata": {"resourceVersion": "10"}, "items": []})
            .to_string(),
        ),
        _ => Reply::json(list(10, &[configmap("a", 5)])),
    })
    .await
}

/// A write of a watched kind whose cache never catches up holds the next reconcile for the
/// timeout, then runs it: counted, in the metrics. A kind written but not watched holds
/// nothing.
#[tokio::test]
async fn a_hold_that_times_out_runs_the_reconcile_counted_and_measured() {
    for watched in [true, false] {
        let server = stalled_server().await;
        let client = server.client();
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
        let factory = SharedInformerFactory::new(client.clone());
        let timeout = Duration::from_millis(300);
        let holds = Holds::default();
        let mut builder = Controller::builder(configmaps)
            .factory(&factory)
            .informer(|b| b.streaming_list(false))
            .metrics(Arc::new(holds.clone()))
            .config(Config::default().stale_cache_timeout(timeout));
        if watched {
            let lw = ListWatch::new(secrets.clone());
            factory.informer_with(lw.clone(), |b| b.streaming_list(false));
            builder = builder.owns(lw);
        }
        let controller = builder.build();
        let (stop_factory, factory_stopped) = shutdown();
        factory.start(factory_stopped);
        let (calls, written) = (Arc::new(AtomicUsize::new(0)), Arc::default());
        let times = Arc::<Mutex<Vec<std::time::Instant>>>::default();
        let reconciler = CreatesOnce {
            secrets: Api::namespaced(recording_client(client), "default"),
            calls: calls.clone(),
            written: Arc::clone(&written),
            times: Arc::clone(&times),
        };
        let (stop, run) = run_controller(&controller, reconciler);
        eventually("the reconcile after the write", || calls.load(Ordering::SeqCst) == 2).await;
        stop.send(()).unwrap();
        run.await.unwrap().unwrap();
        let _ = stop_factory.send(());
        let written = written.lock().unwrap().clone();
        assert_eq!(written.len(), 1, "the create, recorded in the context: {written:?}");
        assert_eq!(
            (written[0].verb, written[0].key.name.as_str(), written[0].resource_version),
            (Verb::Create, "a-x1", Some(100))
        );
        assert_eq!(written[0].generate_name.as_deref(), Some("a-"));
        let stats = controller.stats();
        let holds = holds.0.lock().unwrap().clone();
        if watched {
            assert_eq!((stats.holds, stats.stale_cache_timeouts), (1, 1), "{stats:?}");
            assert_eq!(holds.len(), 1);
            assert!(holds[0].1, "timed out");
            let times = times.lock().unwrap().clone();
            let gap = times[1] - times[0];
            assert!(gap >= timeout, "the requeue waited the whole timeout, by its clock: {gap:?}");
        } else {
            assert_eq!((stats.holds, stats.stale_cache_timeouts), (0, 0), "{stats:?}");
            assert!(holds.is_empty(), "a kind not watched holds nothing");
        }
    }
}

/// Creates a Secret for `a` on its first reconcile and requeues it; notes, when `b` runs,
/// how often `a` ran.
struct CreatesForA {
    secrets: Api<Secret>,
    a: Arc<AtomicUsize>,
    a_when_b: Arc<Mutex<Vec<usize>>>,
}

#[async_trait]
impl Reconciler for CreatesForA {
    type Object = ConfigMap;
    type Error = kube_client::Error;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        _: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Self::Error> {
        if key.name == "b" {
            self.a_when_b.lock().unwrap().push(self.a.load(Ordering::SeqCst));
            return Ok(Action::done());
        }
        if self.a.fetch_add(1, Ordering::SeqCst) > 0 {
            return Ok(Action::done());
        }
        let child = serde_json::from_value(json!({"metadata": {"generateName": "a-"}})).unwrap();
        self.secrets.create(&PostParams::default(), &child).await?;
        Ok(Action::requeue_after(Duration::ZERO))
    }
}

/// A key held for its own writes does not keep the only worker: a key queued after it is
/// reconciled while it waits. Queued again while parked, it still runs once, at its hold's
/// end, counted as one hold that timed out.
#[tokio::test]
async fn a_held_key_leaves_its_worker_to_the_next_key() {
    let server = stalled_server().await;
    let client = server.client();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let factory = SharedInformerFactory::new(client.clone());
    let timeout = Duration::from_secs(2);
    let holds = Holds::default();
    let lw = ListWatch::new(secrets.clone());
    factory.informer_with(lw.clone(), |b| b.streaming_list(false));
    let (trigger, triggered) = futures::channel::mpsc::unbounded();
    let controller = Controller::builder(configmaps)
        .factory(&factory)
        .informer(|b| b.streaming_list(false))
        .owns(lw)
        .trigger(triggered)
        .metrics(Arc::new(holds.clone()))
        .config(Config::default().workers(1).stale_cache_timeout(timeout))
        .build();
    let (stop_factory, factory_stopped) = shutdown();
    factory.start(factory_stopped);
    let (a, a_when_b) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::new())));
    let reconciler = CreatesForA {
        secrets: Api::namespaced(recording_client(client), "default"),
        a: a.clone(),
        a_when_b: a_when_b.clone(),
    };
    let (stop, run) = run_controller(&controller, reconciler);
    eventually("a's next reconcile is held", || controller.stats().holds == 1).await;
    trigger.unbounded_send(ObjectKey::namespaced("default", "a")).unwrap();
    trigger.unbounded_send(ObjectKey::namespaced("default", "b")).unwrap();
    eventually("b reconciled", || !a_when_b.lock().unwrap().is_empty()).await;
    assert_eq!(
        a_when_b.lock().unwrap()[0],
        1,
        "b ran while a's hold lasted (a had run once, its next run held)"
    );
    assert_eq!(controller.held(), [ObjectKey::namespaced("default", "a")], "a is parked");
    eventually_within(timeout * 5, "a's hold ended", || a.load(Ordering::SeqCst) == 2).await;
    let stats = controller.stats();
    assert_eq!((stats.holds, stats.stale_cache_timeouts), (1, 1), "{stats:?}");
    let held = holds.0.lock().unwrap().clone();
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(held[0].1, "timed out: {held:?}");
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    let _ = stop_factory.send(());
    assert_eq!(a.load(Ordering::SeqCst), 2, "a queued again while parked ran once, not twice");
}

/// A controller's run that ends (as a removal from a manager ends it) lets go of its keys'
/// pending writes: no key stays parked on a cache that goes on running without it.
#[tokio::test]
async fn a_stopped_controller_keeps_no_parked_keys() {
    let server = stalled_server().await;
    let client = server.client();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let factory = SharedInformerFactory::new(client.clone());
    let lw = ListWatch::new(secrets.clone());
    factory.informer_with(lw.clone(), |b| b.streaming_list(false));
    let controller = Controller::builder(configmaps)
        .factory(&factory)
        .informer(|b| b.streaming_list(false))
        .owns(lw)
        .config(Config::default().stale_cache_timeout(Duration::from_secs(3600)))
        .build();
    let (stop_factory, factory_stopped) = shutdown();
    factory.start(factory_stopped);
    let reconciler = CreatesForA {
        secrets: Api::namespaced(recording_client(client), "default"),
        a: Arc::default(),
        a_when_b: Arc::default(),
    };
    let (stop, run) = run_controller(&controller, reconciler);
    eventually("a is parked", || !controller.held().is_empty()).await;
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    assert_eq!(controller.held(), [], "the run's end let go of the parked key");
    let _ = stop_factory.send(());
}

/// A key reconciled, and its reasons.
type Reconciled = (String, Vec<Reason>);

/// Records each reconcile's reasons; fails the first reconcile of `fails`.
#[derive(Clone, Default)]
struct Failing {
    seen: Arc<Mutex<Vec<Reconciled>>>,
    failed: Arc<Mutex<std::collections::BTreeSet<String>>>,
}

#[async_trait]
impl Reconciler for Failing {
    type Object = ConfigMap;
    type Error = Failed;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        _: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Failed> {
        let context = ReconcileContext::current().expect("inside a reconcile");
        self.seen.lock().unwrap().push((key.name.clone(), context.reasons().to_vec()));
        if key.name == "fails" && self.failed.lock().unwrap().insert(key.name.clone()) {
            return Err(Failed::caused_by("once", "the test"));
        }
        Ok(Action::done())
    }
}

impl Failing {
    fn saw(&self, name: &str, reason: &Reason) -> bool {
        self.seen.lock().unwrap().iter().any(|(n, r)| n == name && r.contains(reason))
    }
}

/// Through the embedded server, each reason a reconcile can be told: a watched object named
/// (kind, key, event), an error's retry, the informer's resync, the object's deletion.
#[tokio::test(start_paused = true)]
async fn deleted_resync_watched_and_error_retry_reasons_reach_the_reconcile() {
    let server = server().await;
    let client = server.in_process_client();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    fn named<T: serde::de::DeserializeOwned>(name: &str) -> T {
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
    }
    for name in ["a", "fails"] {
        configmaps.create(&PostParams::default(), &named::<ConfigMap>(name)).await.unwrap();
    }
    let resync = Duration::from_secs(30);
    // A Secret maps to the ConfigMap of its own name.
    let controller = Controller::builder(configmaps.clone())
        .informer(move |b| b.resync(resync))
        .watches(secrets.clone(), |s: &Secret| {
            [ObjectKey::namespaced("default", s.metadata.name.as_deref().unwrap_or_default())]
        })
        .build();
    let failing = Failing::default();
    let (stop, run) = run_controller(&controller, failing.clone());
    eventually("the caches synced", || controller.informer().has_synced()).await;

    eventually("an error's retry", || failing.saw("fails", &Reason::ErrorRetry)).await;
    secrets.create(&PostParams::default(), &named::<Secret>("a")).await.unwrap();
    let watched = Reason::Watched {
        kind: "Secret".into(),
        key: ObjectKey::namespaced("default", "a"),
        event: Event::Added,
    };
    eventually("the watched secret named", || failing.saw("a", &watched)).await;
    tokio::time::sleep(resync).await;
    eventually("the resync", || failing.saw("a", &Reason::Resync)).await;
    configmaps.delete("a", &Default::default()).await.unwrap();
    eventually("the deletion", || failing.saw("a", &Reason::Deleted)).await;
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}
