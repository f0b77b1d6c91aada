//! The manager: controllers over one factory, started after the caches sync, stopped in
//! order; a failing or panicking runnable stops it and is named; the graceful-shutdown
//! timeout abandons what is still running and reports it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use ctrlkit::cache::ObjectKey;
use ctrlkit::controller::{Action, Config, Reconciler};
use ctrlkit::manager::{Abandoned, Manager, ManagerError};
use ctrlkit::runnable::{Runnable, RunnableError, Stop};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube_client::Api;

use super::common::*;

#[tokio::test]
async fn a_manager_runs_its_controllers_over_one_factory_and_stops_them() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    create(&pods, &["a"]).await;
    create_configmap(&server, "c").await;
    let mut manager = Manager::new(server.client());
    let (by_pods, by_cms) = (ReconcileLog::default(), ReconcileLog::default());
    // Both controllers read pods and configmaps: one as primary, one as secondary.
    let pod_controller =
        manager.controller(pods.clone()).watches(cms.clone(), |_: &ConfigMap| None).build();
    let cm_controller =
        manager.controller(cms.clone()).watches(pods.clone(), |_: &Pod| None).build();
    let factory = manager.factory().clone();
    let pod_informer = pod_controller.informer().clone();
    manager
        .add_controller(pod_controller, by_pods.reconciler::<Pod>())
        .expect("the only controller of its name");
    manager
        .add_controller(cm_controller, by_cms.reconciler::<ConfigMap>())
        .expect("the only controller of its name");
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    eventually("both reconciled", || {
        by_pods.count("default/a") == 1 && by_cms.count("default/c") == 1
    })
    .await;
    let requests = server.requests();
    // Each kind synced by one streaming list, a watch that goes on: no list request.
    assert_eq!((requests.list, requests.watch), (0, 2), "one streaming list per kind");
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
    assert!(pod_informer.has_stopped(), "the manager stops the informers last");
    // The controllers are dropped with the run: their guards go, and with them the informers
    // no one else asked for.
    assert!(factory.informers().is_empty(), "{:#?}", factory.informers());
}

/// A runnable of the user's own that fails at once.
struct Failing;

#[async_trait]
impl Runnable for Failing {
    fn name(&self) -> String {
        "failing job".into()
    }
    async fn start(&self, _: Stop) -> Result<(), RunnableError> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Err("the job could not start".into())
    }
}

/// A runnable that panics.
struct Panicking;

#[async_trait]
impl Runnable for Panicking {
    fn name(&self) -> String {
        "panicking job".into()
    }
    async fn start(&self, _: Stop) -> Result<(), RunnableError> {
        panic!("job exploded")
    }
}

/// A runnable that runs until stopped and records that it was.
struct Polite(Arc<AtomicBool>);

#[async_trait]
impl Runnable for Polite {
    fn name(&self) -> String {
        "polite job".into()
    }
    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        stop.await;
        self.0.store(true, Ordering::SeqCst);
        Ok(())
    }
}

/// Runs a manager with `bad` beside a polite runnable; returns how it ended and whether the
/// polite one was stopped.
async fn run_with(
    server: &ctrlkit_apiserver::ApiServer,
    bad: impl Runnable,
) -> (Result<(), ManagerError>, bool) {
    let mut manager = Manager::new(server.client());
    let polite_stopped = Arc::new(AtomicBool::new(false));
    manager.add(Polite(polite_stopped.clone()));
    manager.add(bad);
    let result =
        tokio::time::timeout(Duration::from_secs(10), manager.run_until(std::future::pending()))
            .await
            .expect("the manager stops on the failure");
    (result, polite_stopped.load(Ordering::SeqCst))
}

#[tokio::test]
async fn a_failing_or_panicking_runnable_stops_the_manager_and_is_named() {
    let server = server().await;
    for (outcome, name, message) in [
        (run_with(&server, Failing).await, "failing job", "the job could not start"),
        (run_with(&server, Panicking).await, "panicking job", "panicked: job exploded"),
    ] {
        let (result, polite_stopped) = outcome;
        match result {
            Err(ManagerError::Runnable { runnable, source }) => {
                assert_eq!(runnable, name);
                assert_eq!(source.to_string(), message);
            }
            other => panic!("expected the runnable's failure, got {other:?}"),
        }
        assert!(polite_stopped, "the other runnables were stopped");
    }
}

/// Never finishes a reconcile.
struct Stuck;

#[async_trait]
impl Reconciler for Stuck {
    type Object = Pod;
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: &ObjectKey, _: Option<Arc<Pod>>) -> Result<Action, Self::Error> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn the_graceful_shutdown_timeout_abandons_what_still_runs_and_reports_it() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["stuck"]).await;
    let mut manager = Manager::builder(server.client())
        .graceful_shutdown_timeout(Duration::from_millis(300))
        .build();
    let controller = manager.controller(pods).build();
    let watching = controller.clone();
    manager.add_controller(controller, Stuck).expect("the only controller of its name");
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    eventually("the reconcile in flight", || !watching.in_flight().is_empty()).await;
    let asked = std::time::Instant::now();
    stop.send(()).unwrap();
    let result = run.await.unwrap();
    assert!(asked.elapsed() < Duration::from_secs(5), "the timeout bounds the stop");
    match result {
        Err(ManagerError::ShutdownTimeout { timeout, abandoned }) => {
            assert_eq!(timeout, Duration::from_millis(300));
            let found: Vec<(&str, &[String])> = abandoned
                .iter()
                .map(|a: &Abandoned| (a.runnable.as_str(), a.in_flight.as_slice()))
                .collect();
            assert_eq!(found, [("controller pods", &["default/stuck".to_owned()][..])]);
        }
        other => panic!("expected the timeout, got {other:?}"),
    }
}

fn quick_election() -> ctrlkit::leaderelection::LeaderElectionConfig {
    let mut config = ctrlkit::leaderelection::LeaderElectionConfig::default();
    config.lease_duration = Duration::from_millis(1200);
    config.renew_deadline = Duration::from_millis(800);
    config.retry_period = Duration::from_millis(200);
    config
}

/// One replica: a manager electing on the Lease `election`, with a controller that needs the
/// leader and one that does not, both over configmaps.
struct Replica {
    leader_only: ReconcileLog,
    everywhere: ReconcileLog,
    factory: ctrlkit::cache::SharedInformerFactory,
    elector: ctrlkit::leaderelection::LeaderElector,
    log: ctrlkit_apiserver::harness::RequestLog,
    stop: tokio::sync::oneshot::Sender<()>,
    run: tokio::task::JoinHandle<Result<(), ManagerError>>,
}

fn replica(server: &ctrlkit_apiserver::ApiServer, identity: &str) -> Replica {
    use ctrlkit::leaderelection::LeaseLock;
    let config = kube_client::Config::new(server.url().parse().unwrap());
    let (client, log) = ctrlkit_apiserver::harness::recording_client(config);
    let lock = LeaseLock::new(client.clone(), "default", "election", identity);
    let mut manager =
        Manager::builder(client.clone()).leader_election(lock, quick_election()).build();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let (leader_only, everywhere) = (ReconcileLog::default(), ReconcileLog::default());
    let leader_controller = manager.controller(cms.clone()).name("leader-only").build();
    let everywhere_controller = manager
        .controller(cms)
        .name("everywhere")
        .config(Config::default().needs_leader_election(false))
        .build();
    manager
        .add_controller(leader_controller, leader_only.reconciler::<ConfigMap>())
        .expect("the only controller of its name");
    manager
        .add_controller(everywhere_controller, everywhere.reconciler::<ConfigMap>())
        .expect("the only controller of its name");
    let factory = manager.factory().clone();
    let elector = manager.leader_elector().unwrap().clone();
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    Replica { leader_only, everywhere, factory, elector, log, stop, run }
}

#[tokio::test]
async fn only_the_leader_runs_its_controllers_and_a_successor_starts_from_warm_caches() {
    let server = server().await;
    create_configmap(&server, "c").await;
    let first = replica(&server, "first");
    eventually("the first replica leads", || first.elector.is_leader()).await;
    let second = replica(&server, "second");
    eventually("both replicas' caches synced and their leaderless controllers ran", || {
        first.everywhere.count("default/c") == 1 && second.everywhere.count("default/c") == 1
    })
    .await;
    eventually("the leader's controller ran", || first.leader_only.count("default/c") == 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(second.leader_only.count("default/c"), 0, "a follower ran a leader's controller");
    let cms_of = |r: &Replica| {
        r.factory.informer_for(Api::<ConfigMap>::namespaced(server.client(), "default"))
    };
    assert_eq!(cms_of(&second).indexer().len(), 1, "the follower's cache is warm");
    // The initial syncs: streaming lists (watches with sendInitialEvents), or lists.
    let configmap_lists = |r: &Replica| {
        let syncs = r.log.all().into_iter().filter(|l| {
            l.contains("/configmaps?") && (!l.contains("watch=") || l.contains("sendInitialEvents"))
        });
        syncs.count()
    };
    assert_eq!(configmap_lists(&second), 1);

    // The leader stops gracefully: it releases the lease after its controllers stopped.
    first.stop.send(()).unwrap();
    first.run.await.unwrap().expect("a clean stop");
    eventually("the second replica leads", || second.elector.is_leader()).await;
    eventually("and reconciles", || second.leader_only.count("default/c") == 1).await;
    assert_eq!(configmap_lists(&second), 1, "no list after the takeover: {:#?}", second.log.all());
    second.stop.send(()).unwrap();
    second.run.await.unwrap().expect("a clean stop");
}

/// A runnable that counts its starts and runs until stopped.
struct Counted {
    starts: Arc<std::sync::atomic::AtomicUsize>,
    leader: bool,
    member: bool,
}

#[async_trait]
impl Runnable for Counted {
    fn name(&self) -> String {
        "counted".into()
    }
    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        self.starts.fetch_add(1, Ordering::SeqCst);
        stop.await;
        Ok(())
    }
    fn needs_leader_election(&self) -> bool {
        self.leader
    }
    fn needs_shard_membership(&self) -> bool {
        self.member
    }
}

#[tokio::test]
async fn a_runnable_that_needs_a_leader_and_a_shard_runs_once_when_both_leases_are_held() {
    use ctrlkit::leaderelection::LeaseLock;
    use ctrlkit::sharding::Ring;
    use k8s_openapi::api::coordination::v1::Lease;
    let server = server().await;
    let client = server.client();
    let lock = LeaseLock::new(client.clone(), "default", "election", "only");
    let ring = Ring::new("sets").lease_config(quick_election());
    let mut manager = Manager::builder(client.clone())
        .leader_election(lock, quick_election())
        .sharding(ring, "only")
        .build();
    let starts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    manager.add(Counted { starts: starts.clone(), leader: true, member: true });
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    // Both Leases held, as the server has them.
    let leases: Api<Lease> = Api::namespaced(client, "default");
    let held = |name: &'static str| {
        let leases = leases.clone();
        async move {
            let lease = leases.get_opt(name).await.unwrap();
            let holder = lease.and_then(|l| l.spec).and_then(|s| s.holder_identity);
            holder.is_some_and(|h| !h.is_empty())
        }
    };
    crate::support::observe::eventually_async_within(
        Duration::from_secs(10),
        "the leader Lease and the shard Lease held",
        || async { held("election").await && held("only").await },
    )
    .await;
    eventually("the runnable started", || starts.load(Ordering::SeqCst) >= 1).await;
    // Time for a second start, had there been one: the manager starts a group's runnables as
    // soon as it sees its Lease held, and both were held before this wait.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(starts.load(Ordering::SeqCst), 1, "started once under each Lease");
    let _ = stop.send(());
    run.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_follower_keeps_its_controllers_informers_warm_without_leading() {
    let server = server().await;
    let first = replica(&server, "first");
    eventually("the first replica leads", || first.elector.is_leader()).await;
    // A follower whose only controller needs the leader, over a kind the leader does not read:
    // nothing but that controller's guard keeps its informer running.
    use ctrlkit::leaderelection::LeaseLock;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["p"]).await;
    let lock = LeaseLock::new(server.client(), "default", "election", "follower");
    let mut manager =
        Manager::builder(server.client()).leader_election(lock, quick_election()).build();
    let factory = manager.factory().clone();
    let log = ReconcileLog::default();
    let controller = manager.controller(pods.clone()).build();
    manager
        .add_controller(controller, log.reconciler::<Pod>())
        .expect("the only controller of its name");
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    eventually("the follower watches pods", || server.open_watches_of("pods") == 1).await;
    // Several renewals of the leader's Lease.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(log.count("default/p"), 0, "a follower ran a leader's controller");
    assert_eq!(server.open_watches_of("pods"), 1, "the follower's pod informer stopped");
    assert_eq!(factory.informers(), ["pods in namespace default"]);
    let held = factory.guarded_informer_for(pods);
    assert_eq!(held.indexer().len(), 1, "the follower's cache is warm");
    stop.send(()).unwrap();
    first.stop.send(()).unwrap();
    let _ = run.await;
    let _ = first.run.await;
}
