//! The manager's handle: controllers and other runnables added and removed while the
//! manager runs. One that stays reconciles every change while others come and go; one
//! removed and added again reconciles every object; one added under the leader Lease is
//! fenced by it and aborted when it is lost; a removal's graceful stop is bounded; an add
//! after the manager stopped is refused.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ctrlkit::cache::ObjectKey;
use ctrlkit::controller::{Action, Reconciler};
use ctrlkit::manager::{Abandoned, HandleError, Manager, ManagerError, ManagerHandle};
use ctrlkit::runnable::{Runnable, RunnableError, Stop};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::{DeleteParams, Patch, PatchParams};
use kube_client::{Api, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;

use super::common::*;

/// Runs `manager` on a task of its own until the returned sender fires or is dropped: its
/// handle, that sender, and the run.
fn spawn_run(
    manager: Manager,
) -> (ManagerHandle, tokio::sync::oneshot::Sender<()>, JoinHandle<Result<(), ManagerError>>) {
    let handle = manager.handle();
    let (stop, stopped) = shutdown();
    (handle, stop, tokio::spawn(manager.run_until(stopped)))
}

fn version(cm: &ConfigMap) -> u64 {
    cm.resource_version().and_then(|v| v.parse().ok()).expect("a numeric resourceVersion")
}

async fn touch(cms: &Api<ConfigMap>, name: &str, n: usize) -> ConfigMap {
    let patch = Patch::Merge(json!({"data": {"n": n.to_string()}}));
    cms.patch(name, &PatchParams::default(), &patch).await.expect("patch")
}

/// A runnable of the user's own that runs until stopped, counting its starts and stops.
#[derive(Clone, Default)]
struct Job {
    starts: Arc<AtomicUsize>,
    stops: Arc<AtomicUsize>,
}

#[async_trait]
impl Runnable for Job {
    fn name(&self) -> String {
        "job".into()
    }
    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        self.starts.fetch_add(1, Ordering::SeqCst);
        stop.await;
        self.stops.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Waits until the manager runs past its caches' sync (a job added then started), so that
/// what is added next is added while it runs, not before `run` was first polled.
async fn running(handle: &ManagerHandle) {
    let job = Job::default();
    let id = handle.add(job.clone()).expect("added");
    eventually_within(Duration::from_secs(60), "the manager running", || {
        job.starts.load(Ordering::SeqCst) == 1
    })
    .await;
    handle.remove(id).await.expect("a graceful removal");
}

#[tokio::test]
async fn a_controller_that_stays_reconciles_every_change_while_others_come_and_go() {
    let server = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let mut manager = Manager::new(server.client());
    let stays = Versions::default();
    manager
        .controller(cms.clone())
        .name("stays")
        .complete(stays.clone())
        .expect("the only controller of its name");
    let (handle, stop, run) = spawn_run(manager);
    // Every write: the key and the version it made.
    let mut changes: Vec<(String, u64)> = Vec::new();
    for round in 0..6 {
        let name = format!("cm-{round}");
        changes.push((format!("default/{name}"), version(&create_configmap(&server, &name).await)));
        let passing = Versions::default();
        let id = handle
            .controller(cms.clone())
            .name(&format!("passing-{round}"))
            .complete(passing.clone())
            .expect("added while running");
        let job = Job::default();
        let job_id = handle.add(job.clone()).expect("added while running");
        // Changes while the others start, run and stop.
        for earlier in 0..=round {
            let name = format!("cm-{earlier}");
            changes.push((format!("default/{name}"), version(&touch(&cms, &name, round).await)));
        }
        eventually("the passing controller reconciled its first object", || {
            passing.keys_present().contains(&"default/cm-0".to_owned())
        })
        .await;
        assert_eq!(job.starts.load(Ordering::SeqCst), 1);
        handle.remove(id).await.expect("a graceful removal");
        handle.remove(job_id).await.expect("a graceful removal");
        assert_eq!(job.stops.load(Ordering::SeqCst), 1, "the job was stopped, not aborted");
        assert!(matches!(handle.remove(id).await, Ok(())), "removed already: gone is gone");
        let last = format!("cm-{round}");
        changes.push((format!("default/{last}"), version(&touch(&cms, &last, 100).await)));
    }
    eventually("the controller that stayed reconciled every change", || {
        changes.iter().all(|(key, version)| stays.saw_at_least(key, *version))
    })
    .await;
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
}

#[tokio::test]
async fn a_controller_removed_and_added_again_reconciles_every_object_of_its_kind() {
    let server = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    for name in ["a", "b"] {
        create_configmap(&server, name).await;
    }
    let manager = Manager::new(server.client());
    let (handle, stop, run) = spawn_run(manager);
    running(&handle).await;
    let first = Versions::default();
    let id = handle.controller(cms.clone()).name("again").complete(first.clone()).unwrap();
    eventually("the first controller reconciled both", || {
        first.keys_present() == ["default/a", "default/b"]
    })
    .await;
    handle.remove(id).await.expect("a graceful removal");
    // While it is away: one created, one changed, one deleted.
    let c = create_configmap(&server, "c").await;
    let a = touch(&cms, "a", 1).await;
    cms.delete("b", &DeleteParams::default()).await.unwrap();
    let second = Versions::default();
    let again = handle.controller(cms.clone()).name("again").complete(second.clone()).unwrap();
    assert_ne!(again, id, "ids are not reused");
    eventually("the controller added again reconciled every object of its kind", || {
        second.saw_at_least("default/a", version(&a))
            && second.saw_at_least("default/c", version(&c))
    })
    .await;
    let before = first.reconciles();
    touch(&cms, "a", 2).await;
    eventually("the second reconciles the change", || second.reconciles() >= 3).await;
    assert_eq!(first.reconciles(), before, "the removed controller reconciles nothing");
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
}

/// A runnable that ignores its stop (so that only an abort ends it), recording when it
/// started, whether its Lease was held then, and, when it is dropped, whether it was fenced
/// then and whether `start` ever returned.
#[derive(Clone, Default)]
struct Fenced {
    started: Arc<AtomicBool>,
    fenced_at_start: Arc<AtomicBool>,
    fenced_at_drop: Arc<Mutex<Option<bool>>>,
    returned: Arc<AtomicBool>,
}

struct OnDrop(Stop, Arc<Mutex<Option<bool>>>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        *self.1.lock().unwrap() = Some(self.0.is_fenced());
    }
}

#[async_trait]
impl Runnable for Fenced {
    fn name(&self) -> String {
        "fenced".into()
    }
    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        self.fenced_at_start.store(stop.is_fenced(), Ordering::SeqCst);
        self.started.store(true, Ordering::SeqCst);
        let _on_drop = OnDrop(stop, self.fenced_at_drop.clone());
        std::future::pending::<()>().await;
        self.returned.store(true, Ordering::SeqCst);
        Ok(())
    }
}

/// A runnable that needs no leader and runs until stopped.
#[derive(Clone, Default)]
struct Everywhere(Arc<AtomicBool>);

#[async_trait]
impl Runnable for Everywhere {
    fn name(&self) -> String {
        "everywhere".into()
    }
    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        self.0.store(true, Ordering::SeqCst);
        stop.await;
        Ok(())
    }
    fn needs_leader_election(&self) -> bool {
        false
    }
}

/// Runnables added under the leader Lease, one while another replica holds it and one
/// after this one took it over: the first waits for the Lease (while one that needs no
/// leader starts at once), both start with its fence held; the Lease deleted under the
/// leader (lost at its next renewal), the manager stops and both are aborted, fenced.
#[tokio::test(start_paused = true)]
async fn runnables_added_under_the_leader_lease_are_fenced_and_aborted_when_it_is_lost() {
    use ctrlkit::leaderelection::{LeaderElectionConfig, LeaseLock};
    use k8s_openapi::api::coordination::v1::Lease;
    let server = server().await;
    let leases: Api<Lease> = Api::namespaced(server.client(), "default");
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    );
    let held: Lease = serde_json::from_value(json!({
        "metadata": {"name": "election", "namespace": "default"},
        "spec": {"holderIdentity": "other", "leaseDurationSeconds": 15,
                 "acquireTime": now, "renewTime": now},
    }))
    .unwrap();
    leases.create(&Default::default(), &held).await.unwrap();
    let client = server.in_process_client();
    let lock = LeaseLock::new(client.clone(), "default", "election", "only");
    let mut config = LeaderElectionConfig::default();
    config.retry_period = Duration::from_secs(2);
    // A graceful stop would wait a minute for the runnables that ignore it; an abort does not.
    let manager = Manager::builder(client)
        .leader_election(lock, config)
        .graceful_shutdown_timeout(Duration::from_secs(60))
        .build();
    let (handle, elector) = (manager.handle(), manager.leader_elector().unwrap().clone());
    let run = tokio::spawn(manager.run_until(std::future::pending()));
    eventually_within(Duration::from_secs(10), "another replica seen leading", || {
        elector.status().borrow().leader.as_deref() == Some("other")
    })
    .await;
    let early = Fenced::default();
    handle.add(early.clone()).expect("added while running");
    let everywhere = Everywhere::default();
    handle.add(everywhere.clone()).expect("added while running");
    eventually("the runnable that needs no leader started", || everywhere.0.load(Ordering::SeqCst))
        .await;
    assert!(!elector.is_leader());
    assert!(!early.started.load(Ordering::SeqCst), "started before its Lease was held");
    eventually_within(Duration::from_secs(60), "leading", || elector.is_leader()).await;
    let late = Fenced::default();
    handle.add(late.clone()).expect("added while leading");
    for (which, fenced) in [("early", &early), ("late", &late)] {
        eventually(&format!("the {which} runnable started"), || {
            fenced.started.load(Ordering::SeqCst)
        })
        .await;
        assert!(!fenced.fenced_at_start.load(Ordering::SeqCst), "{which}: the Lease is held");
    }
    leases.delete("election", &DeleteParams::default()).await.unwrap();
    let deleted = tokio::time::Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(120), run).await.unwrap().unwrap();
    assert!(matches!(result, Err(ManagerError::LeaderElection(_))), "{result:?}");
    // Lost at its next renewal (a jittered 2 s retry): aborted then, not a minute later.
    assert!(deleted.elapsed() < Duration::from_secs(10), "stopped {:?} after", deleted.elapsed());
    for (which, fenced) in [("early", &early), ("late", &late)] {
        assert!(!fenced.returned.load(Ordering::SeqCst), "{which}: aborted, not stopped");
        assert_eq!(*fenced.fenced_at_drop.lock().unwrap(), Some(true), "{which}: fenced");
    }
    assert!(
        matches!(handle.add(Fenced::default()), Err(HandleError::Stopped { .. })),
        "nothing is added after the manager stopped"
    );
}

/// Sets its flag when dropped: what the test doubles below hold to tell their drop.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Never finishes a reconcile; records its drop.
struct Stuck {
    _dropped: DropFlag,
}

#[async_trait]
impl Reconciler for Stuck {
    type Object = ConfigMap;
    type Error = std::convert::Infallible;
    async fn reconcile(
        &self,
        _: &ObjectKey,
        _: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Self::Error> {
        std::future::pending().await
    }
}

/// A runnable that fails when it is stopped.
struct FailsOnStop;

#[async_trait]
impl Runnable for FailsOnStop {
    fn name(&self) -> String {
        "fails on stop".into()
    }
    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        stop.await;
        Err("could not flush".into())
    }
}

/// A controller whose reconcile never ends, removed: the removal returns after the
/// manager's graceful-shutdown timeout, naming the key it abandoned, and drops the
/// controller; one that fails as it stops hands its error to the remover; the manager and
/// its other controller run on.
#[tokio::test(start_paused = true)]
async fn a_removal_stops_one_runnable_within_its_timeout_and_the_rest_runs_on() {
    let server = server().await;
    let client = server.in_process_client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    create_configmap(&server, "x").await;
    let timeout = Duration::from_secs(5);
    let mut manager = Manager::builder(client).graceful_shutdown_timeout(timeout).build();
    let stays = Versions::default();
    manager
        .controller(cms.clone())
        .name("stays")
        .complete(stays.clone())
        .expect("the only controller of its name");
    let (handle, stop, run) = spawn_run(manager);
    running(&handle).await;
    let stuck = handle.controller(cms.clone()).name("stuck").build();
    let watching = stuck.clone();
    let dropped = Arc::new(AtomicBool::new(false));
    let id = handle.add_controller(stuck, Stuck { _dropped: DropFlag(dropped.clone()) }).unwrap();
    eventually_within(Duration::from_secs(60), "the reconcile in flight", || {
        !watching.in_flight().is_empty()
    })
    .await;
    let asked = tokio::time::Instant::now();
    let removed = tokio::time::timeout(Duration::from_secs(60), handle.remove(id)).await.unwrap();
    assert_eq!(asked.elapsed(), timeout, "the removal waited its timeout, no more");
    match removed {
        Err(HandleError::StopTimeout { timeout: waited, abandoned }) => {
            assert_eq!(waited, timeout);
            let Abandoned { runnable, in_flight, .. } = abandoned;
            assert_eq!(
                (runnable.as_str(), in_flight),
                ("controller stuck", vec!["default/x".to_owned()])
            );
        }
        other => panic!("expected the removal's timeout, got {other:?}"),
    }
    drop(watching);
    eventually("the removed controller's reconciler dropped", || dropped.load(Ordering::SeqCst))
        .await;

    let fails = handle.add(FailsOnStop).unwrap();
    match handle.remove(fails).await {
        Err(HandleError::Runnable { runnable, source }) => {
            assert_eq!(
                (runnable.as_str(), source.to_string().as_str()),
                ("fails on stop", "could not flush")
            );
        }
        other => panic!("expected its failure, got {other:?}"),
    }

    let y = create_configmap(&server, "y").await;
    eventually_within(Duration::from_secs(60), "the manager's other controller runs on", || {
        stays.saw_at_least("default/y", version(&y))
    })
    .await;
    assert!(!run.is_finished(), "the manager runs on");
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop: the removed runnables are not the manager's");
}

/// `/readyz` and `/metrics` follow runnables added and removed: a ready check added with its
/// runnable and gone with it, a controller's series present while it runs and gone after.
#[cfg(feature = "metrics")]
#[tokio::test]
async fn readyz_and_metrics_follow_runnables_added_and_removed() {
    use crate::support::http::{free_address, get};
    let server = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    create_configmap(&server, "c").await;
    let address = free_address();
    let mut manager = Manager::builder(server.client()).metrics_address(address).build();
    let stays = Versions::default();
    manager
        .controller(cms.clone())
        .name("stays")
        .complete(stays.clone())
        .expect("the only controller of its name");
    let (handle, stop, run) = spawn_run(manager);
    ready(address).await;

    let unready = Arc::new(AtomicBool::new(false));
    let check = NotReady(unready.clone());
    let id = handle.add(check).unwrap();
    let (status, body) = get(address, "/readyz").await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("[-]warming failed"), "{body}");
    let passing = Versions::default();
    let controller =
        handle.controller(cms.clone()).name("passing").complete(passing.clone()).unwrap();
    eventually("the passing controller reconciled", || !passing.keys_present().is_empty()).await;
    // A fair queue's level series, from its first refresh.
    let level =
        r#"ctrlkit_workqueue_fairness_groups{name="passing",controller="passing",level="0"}"#;
    eventually_async_within(Duration::from_secs(10), "the fairness series", || async {
        get(address, "/metrics").await.is_some_and(|(_, body)| body.contains(level))
    })
    .await;
    let metrics = get(address, "/metrics").await.unwrap().1;
    for series in [
        r#"controller_runtime_reconcile_total{controller="passing",result="success"}"#,
        r#"workqueue_adds_total{name="passing",controller="passing"}"#,
    ] {
        assert!(metrics.contains(series), "{series} in {metrics}");
    }

    handle.remove(id).await.unwrap();
    assert_eq!(get(address, "/readyz").await, Some((200, "ok".into())));
    let (status, body) = get(address, "/readyz/warming").await.unwrap();
    assert_eq!(status, 404, "its check is gone: {body}");
    handle.remove(controller).await.unwrap();
    let metrics = get(address, "/metrics").await.unwrap().1;
    assert!(!metrics.contains(r#""passing""#), "its series are gone: {metrics}");
    assert!(
        metrics
            .contains(r#"controller_runtime_reconcile_total{controller="stays",result="success"}"#),
        "the others' stay: {metrics}"
    );
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
}

/// A runnable never ready.
#[cfg(feature = "metrics")]
struct NotReady(Arc<AtomicBool>);

#[cfg(feature = "metrics")]
#[async_trait]
impl Runnable for NotReady {
    fn name(&self) -> String {
        "warming".into()
    }
    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        stop.await;
        Ok(())
    }
    fn ready_check(&self) -> Option<ctrlkit::runnable::ReadyCheck> {
        let ready = self.0.clone();
        Some(Arc::new(move || ready.load(Ordering::SeqCst)))
    }
}

/// A reconciler of `K` that records its drop.
struct Held<K = ConfigMap> {
    _dropped: DropFlag,
    kind: std::marker::PhantomData<fn() -> K>,
}

fn held<K>(dropped: &Arc<AtomicBool>) -> Held<K> {
    Held { _dropped: DropFlag(dropped.clone()), kind: std::marker::PhantomData }
}

#[async_trait]
impl<K: Send + Sync + 'static> Reconciler for Held<K> {
    type Object = K;
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: &ObjectKey, _: Option<Arc<K>>) -> Result<Action, Self::Error> {
        Ok(Action::done())
    }
}

/// What a removed controller holds is let go of by the time `remove` returns (a clone of
/// its `Controller` the user kept holds its informer until dropped); a manager dropped
/// while a handle lives lets go of its controllers all the same: their watches close.
#[tokio::test]
async fn a_removed_controller_and_a_dropped_manager_let_go_of_what_they_hold() {
    use k8s_openapi::api::core::v1::Secret;
    let server = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let secrets: Api<Secret> = Api::namespaced(server.client(), "default");
    create_configmap(&server, "c").await;
    let manager = Manager::new(server.client());
    let handle = manager.handle();
    let run = tokio::spawn(manager.run_until(std::future::pending()));
    running(&handle).await;
    let (removed, kept) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let controller = handle.controller(secrets.clone()).name("removed").build();
    let watching = controller.clone();
    let id = handle.add_controller(controller, held::<Secret>(&removed)).unwrap();
    handle.controller(cms).name("kept").complete(held::<ConfigMap>(&kept)).unwrap();
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
    secrets.create(&Default::default(), &secret).await.unwrap();
    eventually("reconciled", || watching.stats().succeeded == 1).await;
    eventually("both watches open", || {
        server.open_watches_of("secrets") == 1 && server.open_watches_of("configmaps") == 1
    })
    .await;
    handle.remove(id).await.unwrap();
    assert!(removed.load(Ordering::SeqCst), "the removed controller's reconciler is dropped");
    assert!(!kept.load(Ordering::SeqCst));
    // The clone kept here holds its informer guards: the watch stays until it goes.
    assert_eq!(server.open_watches_of("secrets"), 1, "the kept clone holds its informer");
    drop(watching);
    eventually("the removed controller's watch closed", || server.open_watches_of("secrets") == 0)
        .await;
    assert_eq!(server.open_watches_of("configmaps"), 1, "the kept controller watches on");
    run.abort();
    let _ = run.await;
    eventually("the dropped manager's controller let go", || kept.load(Ordering::SeqCst)).await;
    eventually("the dropped manager's controller's watch closed", || {
        server.open_watches_of("configmaps") == 0
    })
    .await;
    assert!(matches!(handle.add(Job::default()), Err(HandleError::Stopped { .. })));
}

/// Ignores its stop until aborted; tells when it started and when it was dropped.
struct Deaf {
    started: Arc<AtomicBool>,
    _dropped: DropFlag,
}

#[async_trait]
impl Runnable for Deaf {
    fn name(&self) -> String {
        "deaf".into()
    }
    async fn start(&self, _stop: Stop) -> Result<(), RunnableError> {
        self.started.store(true, Ordering::SeqCst);
        std::future::pending().await
    }
}

fn deaf() -> (Deaf, Arc<AtomicBool>, Arc<AtomicBool>) {
    let (started, dropped) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    (Deaf { started: started.clone(), _dropped: DropFlag(dropped.clone()) }, started, dropped)
}

/// A removal whose future is dropped midway (a timeout, a select!) goes on: the runnable
/// that ignores its stop is aborted at the removal's deadline all the same, and a second
/// remove of its id waits for that same outcome instead of answering NotFound.
#[tokio::test(start_paused = true)]
async fn a_removal_dropped_midway_still_aborts_and_a_second_remove_waits_for_it() {
    let server = server().await;
    let client = server.in_process_client();
    let timeout = Duration::from_secs(5);
    let manager = Manager::builder(client).graceful_shutdown_timeout(timeout).build();
    let handle = manager.handle();
    // Not started yet: its removal is at once, and it never starts.
    let (never, never_started, never_dropped) = deaf();
    let never = handle.add(never).unwrap();
    handle.remove(never).await.expect("a runnable not yet started leaves at once");
    assert!(never_dropped.load(Ordering::SeqCst), "the unstarted runnable was dropped");
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));

    let (first, started, dropped) = deaf();
    let first = handle.add(first).unwrap();
    eventually_within(Duration::from_secs(60), "it started", || started.load(Ordering::SeqCst))
        .await;
    let asked = tokio::time::Instant::now();
    let cancelled = tokio::time::timeout(Duration::from_secs(1), handle.remove(first)).await;
    assert!(cancelled.is_err(), "the first removal was cancelled midway");
    let again = handle.remove(first).await;
    assert!(
        matches!(&again, Err(HandleError::StopTimeout { timeout: t, .. }) if *t == timeout),
        "a second remove waits for the first's outcome, got {again:?}"
    );
    assert_eq!(asked.elapsed(), timeout, "aborted at the first removal's deadline");
    assert!(dropped.load(Ordering::SeqCst), "the aborted runnable was dropped");

    // A cancelled removal that nobody awaits again still aborts its runnable.
    let (second, started, dropped) = deaf();
    let second = handle.add(second).unwrap();
    eventually_within(Duration::from_secs(60), "it started", || started.load(Ordering::SeqCst))
        .await;
    let cancelled = tokio::time::timeout(Duration::from_secs(1), handle.remove(second)).await;
    assert!(cancelled.is_err(), "the removal was cancelled midway");
    eventually_within(Duration::from_secs(60), "the abandoned removal aborted it", || {
        dropped.load(Ordering::SeqCst)
    })
    .await;
    assert!(!never_started.load(Ordering::SeqCst), "a runnable removed before its start never ran");
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
}

/// The trait methods a manager reads of a runnable as it is added, each the one that panics
/// in one `Moody`.
const METHODS: [&str; 5] =
    ["name", "phase", "ready_check", "needs_shard_membership", "needs_leader_election"];

/// Its trait method of this name panics.
struct Moody(&'static str);

impl Moody {
    fn maybe_panic(&self, method: &str) {
        if self.0 == method {
            panic!("moody {method}");
        }
    }
}

#[async_trait]
impl Runnable for Moody {
    fn name(&self) -> String {
        self.maybe_panic("name");
        "moody".into()
    }
    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        stop.await;
        Ok(())
    }
    fn phase(&self) -> ctrlkit::runnable::Phase {
        self.maybe_panic("phase");
        ctrlkit::runnable::Phase::AfterCacheSync
    }
    fn ready_check(&self) -> Option<ctrlkit::runnable::ReadyCheck> {
        self.maybe_panic("ready_check");
        None
    }
    fn needs_shard_membership(&self) -> bool {
        self.maybe_panic("needs_shard_membership");
        false
    }
    fn needs_leader_election(&self) -> bool {
        self.maybe_panic("needs_leader_election");
        true
    }
}

/// A runnable whose trait method panics, whichever the manager reads of it, panics its
/// `add`, not the manager's table: the manager runs on, starts what is added next under the
/// leader Lease (where the Lease groups read what each runnable needs) and stops cleanly.
#[tokio::test(start_paused = true)]
async fn a_panicking_trait_method_panics_the_add_and_the_manager_runs_on() {
    use ctrlkit::leaderelection::{LeaderElectionConfig, LeaseLock};

    let server = server().await;
    let client = server.in_process_client();
    let lock = LeaseLock::new(client.clone(), "default", "election", "only");
    let manager = Manager::builder(client).leader_election(lock, LeaderElectionConfig::default());
    let manager = manager.build();
    let (handle, stop, run) = spawn_run(manager);
    // Under the leader Lease (a Job's default): started once the Lease is held.
    let first = Job::default();
    handle.add(first.clone()).unwrap();
    eventually_within(Duration::from_secs(60), "started under the Lease", || {
        first.starts.load(Ordering::SeqCst) == 1
    })
    .await;
    for method in METHODS {
        let moody = Moody(method);
        let added = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle.add(moody)));
        assert!(added.is_err(), "the panic of {method} reached the add");
        let next = Job::default();
        let id = handle.add(next.clone()).expect("added after the panic");
        eventually_within(Duration::from_secs(60), "the next runnable started", || {
            next.starts.load(Ordering::SeqCst) == 1
        })
        .await;
        handle.remove(id).await.unwrap();
    }
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
}

/// Returns on its own as soon as it starts; tells when it was dropped.
struct Quits {
    _dropped: DropFlag,
}

#[async_trait]
impl Runnable for Quits {
    fn name(&self) -> String {
        "quits".into()
    }
    async fn start(&self, _stop: Stop) -> Result<(), RunnableError> {
        Ok(())
    }
}

/// A runnable that returns on its own is let go of then, not at its removal; once the
/// manager stopped, a removal answers `Stopped`, whatever its runnable was doing.
#[tokio::test(start_paused = true)]
async fn a_finished_runnable_is_let_go_of_and_removals_after_the_stop_answer_stopped() {
    let server = server().await;
    let manager = Manager::new(server.in_process_client());
    let (handle, stop, run) = spawn_run(manager);
    let job = Job::default();
    let running = handle.add(job.clone()).unwrap();
    eventually_within(Duration::from_secs(60), "the job started", || {
        job.starts.load(Ordering::SeqCst) == 1
    })
    .await;
    let dropped = Arc::new(AtomicBool::new(false));
    let quits = handle.add(Quits { _dropped: DropFlag(dropped.clone()) }).unwrap();
    eventually_within(Duration::from_secs(60), "the finished runnable let go of", || {
        dropped.load(Ordering::SeqCst)
    })
    .await;
    let second = Arc::new(AtomicBool::new(false));
    let finished = handle.add(Quits { _dropped: DropFlag(second.clone()) }).unwrap();
    // Finished, not merely added, when the manager stops.
    eventually_within(Duration::from_secs(60), "the second finished runnable let go of", || {
        second.load(Ordering::SeqCst)
    })
    .await;
    handle.remove(quits).await.expect("a finished runnable's removal answers Ok while it runs");
    assert!(matches!(handle.remove(quits).await, Ok(())), "a second removal finds it gone");

    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
    for (which, id) in [("running", running), ("finished", finished)] {
        let removed = handle.remove(id).await;
        assert!(
            matches!(&removed, Err(HandleError::Stopped { .. })),
            "{which}: a removal after the stop answers Stopped, got {removed:?}"
        );
    }
}

/// Ignores its stop until aborted, and panics when asked what it has in flight.
struct DeafAndVague(Deaf);

#[async_trait]
impl Runnable for DeafAndVague {
    fn name(&self) -> String {
        "deaf and vague".into()
    }
    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        self.0.start(stop).await
    }
    fn in_flight(&self) -> Vec<String> {
        panic!("what is in flight?")
    }
}

/// A removal past its timeout aborts the runnable even when the runnable's own `in_flight`
/// panics as the removal names what it abandons: the remover hears the timeout, not that the
/// manager went away, and the runnable does not run on.
#[tokio::test(start_paused = true)]
async fn a_removal_past_its_timeout_aborts_a_runnable_whose_in_flight_panics() {
    let server = server().await;
    let client = server.in_process_client();
    let timeout = Duration::from_secs(5);
    let manager = Manager::builder(client).graceful_shutdown_timeout(timeout).build();
    let (handle, stop, run) = spawn_run(manager);
    let (deaf, started, dropped) = deaf();
    let id = handle.add(DeafAndVague(deaf)).unwrap();
    eventually_within(Duration::from_secs(60), "it started", || started.load(Ordering::SeqCst))
        .await;
    let removed = handle.remove(id).await;
    assert!(
        matches!(&removed, Err(HandleError::StopTimeout { timeout: t, .. }) if *t == timeout),
        "the removal timed out and said so, got {removed:?}"
    );
    assert!(dropped.load(Ordering::SeqCst), "the runnable was aborted and dropped");
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
}

/// A removal asked from another runtime, which then shuts down, is the manager's all the
/// same: it runs on the manager's runtime, aborts the runnable at its deadline, and a later
/// remove hears that outcome rather than that the manager went away.
#[tokio::test(start_paused = true)]
async fn a_removal_asked_from_a_runtime_that_goes_away_still_aborts_at_its_deadline() {
    let server = server().await;
    let client = server.in_process_client();
    let timeout = Duration::from_secs(5);
    let manager = Manager::builder(client).graceful_shutdown_timeout(timeout).build();
    let (handle, stop, run) = spawn_run(manager);
    let (deaf, started, dropped) = deaf();
    let id = handle.add(deaf).unwrap();
    eventually_within(Duration::from_secs(60), "it started", || started.load(Ordering::SeqCst))
        .await;
    let elsewhere = handle.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let asked = tokio::time::timeout(Duration::from_millis(10), elsewhere.remove(id));
            assert!(asked.await.is_err(), "the other runtime gave up on its removal");
        });
    })
    .join()
    .unwrap();
    let removed = handle.remove(id).await;
    assert!(
        matches!(&removed, Err(HandleError::StopTimeout { timeout: t, .. }) if *t == timeout),
        "the removal outlived the runtime it was asked from, got {removed:?}"
    );
    assert!(dropped.load(Ordering::SeqCst), "the runnable was aborted and dropped");
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
}

/// Widgets, a kind the server does not serve: an informer's lists of it fail and are
/// retried, and it never syncs.
fn unserved(
    client: kube_client::Client,
) -> ctrlkit::cache::ListWatch<kube_client::api::DynamicObject> {
    let widgets = kube_client::api::ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let api = Api::all_with(client, &widgets);
    ctrlkit::cache::ListWatch::new_with(api, &widgets)
}

/// Waits until `/readyz` at `address` answers 200.
#[cfg(feature = "metrics")]
async fn ready(address: std::net::SocketAddr) {
    use crate::support::http::get;
    eventually_async_within(Duration::from_secs(10), "ready", || async {
        get(address, "/readyz").await == Some((200, "ok".into()))
    })
    .await;
}

/// Reconciles nothing: a controller of a kind the server does not serve never gets a key.
struct Idle;

#[async_trait]
impl Reconciler for Idle {
    type Object = kube_client::api::DynamicObject;
    type Error = std::convert::Infallible;
    async fn reconcile(
        &self,
        _: &ObjectKey,
        _: Option<Arc<Self::Object>>,
    ) -> Result<Action, Self::Error> {
        Ok(Action::done())
    }
}

/// A controller whose caches cannot sync (its kind is not served: every list fails and is
/// retried) waits for them until stopped. Its removal, and the manager's stop, asked while it
/// waits, are clean stops: no error for the remover, none for the manager.
#[tokio::test(start_paused = true)]
async fn a_controller_stopped_before_its_caches_synced_stops_cleanly() {
    use ctrlkit_apiserver::harness::in_process_recording_client;

    let server = server().await;
    let (client, log) = in_process_recording_client(&server);
    let manager = Manager::new(client.clone());
    let (handle, stop, run) = spawn_run(manager);
    running(&handle).await;
    let controller = |name: &str| {
        let unserved = unserved(client.clone());
        handle.controller(unserved).name(name).complete(Idle).expect("added while running")
    };
    let removed = controller("removed");
    let stays = controller("stays");
    eventually_within(Duration::from_secs(60), "their informer asked for widgets", || {
        log.all().iter().any(|request| request.contains("widgets"))
    })
    .await;
    let answer = handle.remove(removed).await;
    assert!(matches!(answer, Ok(())), "a removal before the sync is a clean stop, got {answer:?}");
    stop.send(()).unwrap();
    let stopped = run.await.unwrap();
    assert!(stopped.is_ok(), "a stop before a controller's sync is a clean stop, got {stopped:?}");
    assert!(matches!(handle.remove(stays).await, Err(HandleError::Stopped { .. })));
}

/// A shard's controller as the manager sees it when a hand-off stalls as it stops: it
/// fences itself and ends with `HandOffTimeout`.
struct FencesItself;

#[async_trait]
impl Runnable for FencesItself {
    fn name(&self) -> String {
        "fences itself".into()
    }
    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        stop.await;
        Err(Box::new(ctrlkit::controller::ControllerError::HandOffTimeout {
            shard: "shard-0".into(),
            ring: "ring".into(),
            waited: Duration::from_secs(120),
            keys: "default/a".into(),
        }))
    }
}

/// A shard that fences itself as it is removed stops the manager at once, as the guide's
/// production chapter says of a lost Lease or a shard that fenced itself: the other
/// runnables are aborted (one that ignores its stop too, well before the graceful timeout),
/// and the remover hears the error as well.
#[tokio::test(start_paused = true)]
async fn a_shard_fencing_itself_as_it_is_removed_stops_the_manager_at_once() {
    let server = server().await;
    let client = server.in_process_client();
    let timeout = Duration::from_secs(60);
    let manager = Manager::builder(client).graceful_shutdown_timeout(timeout).build();
    let (handle, _stop, run) = spawn_run(manager);
    let (deaf, started, dropped) = deaf();
    handle.add(deaf).unwrap();
    eventually_within(Duration::from_secs(60), "it started", || started.load(Ordering::SeqCst))
        .await;
    let id = handle.add(FencesItself).unwrap();
    let removed = handle.remove(id).await;
    assert!(
        matches!(&removed, Err(HandleError::Runnable { source, .. }) if source.to_string().contains("fenced itself")),
        "the remover hears the fencing, got {removed:?}"
    );
    let ended = tokio::time::timeout(Duration::from_secs(10), run).await;
    let ended = ended.expect("the manager ran on after a shard fenced itself as it was removed");
    let err = ended.unwrap().expect_err("the manager stops with the fencing");
    assert!(
        matches!(&err, ManagerError::Runnable { source, .. } if source.to_string().contains("fenced itself")),
        "got {err:?}"
    );
    assert!(dropped.load(Ordering::SeqCst), "what ignored its stop was aborted at once");
}

/// `caches-synced` in `/readyz` counts the controllers added while the manager runs: one whose
/// caches have not synced (its kind is not served: they never do) fails the check until it is
/// removed; one whose caches sync joins it and leaves it passing.
#[cfg(feature = "metrics")]
#[tokio::test]
async fn caches_synced_waits_for_the_caches_of_a_controller_added_while_running() {
    use crate::support::http::{free_address, get};

    let server = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    create_configmap(&server, "c").await;
    let address = free_address();
    let manager = Manager::builder(server.client()).metrics_address(address).build();
    let (handle, stop, run) = spawn_run(manager);
    ready(address).await;
    let unserved = unserved(server.client());
    let unsynced = handle.controller(unserved).name("unsynced").complete(Idle).unwrap();
    let (status, body) = get(address, "/readyz/caches-synced").await.unwrap();
    assert_eq!(status, 503, "a controller added with caches not synced: {body}");
    let passing = Versions::default();
    handle.controller(cms).name("passing").complete(passing.clone()).unwrap();
    eventually("the passing controller reconciled", || !passing.keys_present().is_empty()).await;
    let (status, body) = get(address, "/readyz").await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("[-]caches-synced failed"), "{body}");
    handle.remove(unsynced).await.unwrap();
    assert_eq!(get(address, "/readyz").await, Some((200, "ok".into())), "once it is removed");
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
}
