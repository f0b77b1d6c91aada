//! Lease safety on the embedded server: at no instant do two candidates lead, and no key is
//! reconciled by two replicas, when replies are slow, when Leases say other durations, when a
//! replica freezes past its lease duration, while a reconcile hangs in a hand-off, and when
//! the leadership metrics hook panics.
//!
//! Most cases run on tokio's paused clock with clients that reach the server in process
//! (`ApiServer::in_process_client`): Leases of the default 15 s play out in milliseconds and
//! every instant is exact. A frozen process needs two clocks (one that stops, one that goes
//! on): that case runs a replica on a runtime of its own, on the real clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlkit::controller::Config;
use ctrlkit::leaderelection::{LeaderElectionConfig, LeaderElector, LeaderMetrics, LeaseLock};
use ctrlkit::manager::{Manager, ManagerError};
use ctrlkit::sharding::{Assignment, HashRing, Ring, fnv1a64};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::{Patch, PatchParams};
use kube_client::client::Body;
use kube_client::{Client, ResourceExt};
use tokio::time::Instant;

use super::common::*;

/// What the network between one client and the server does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Network {
    /// Requests and replies pass.
    Open,
    /// The next write of a Lease reaches the server, but its reply comes this much later;
    /// every request after it is refused.
    SlowReplyThenCut(Duration),
    /// Every request is refused, as by a partition.
    Cut,
    /// The next request never gets a reply; those after it pass.
    HangNext,
}

/// A client of `server` in process, whose network the test sets.
fn client_behind(server: &ctrlkit_apiserver::ApiServer) -> (Client, Arc<Mutex<Network>>) {
    let network = Arc::new(Mutex::new(Network::Open));
    let inner = server.in_process_client();
    let set = network.clone();
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let (inner, network) = (inner.clone(), set.clone());
        async move {
            let lease_write =
                request.method() == http::Method::PUT && request.uri().path().contains("/leases/");
            let (delay, hang) = {
                let mut network = network.lock().unwrap();
                let state = *network;
                let delay = match state {
                    Network::Open => None,
                    Network::Cut => {
                        return Err(kube_client::Error::Service("cut off from the server".into()));
                    }
                    Network::SlowReplyThenCut(delay) if lease_write => {
                        *network = Network::Cut;
                        Some(delay)
                    }
                    Network::SlowReplyThenCut(_) => None,
                    Network::HangNext => {
                        *network = Network::Open;
                        None
                    }
                };
                (delay, state == Network::HangNext)
            };
            if hang {
                return std::future::pending().await;
            }
            let response = inner.send(request).await?;
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            Ok::<_, kube_client::Error>(response)
        }
    });
    (Client::new(service, "default"), network)
}

fn timing(lease: u64, renew: u64, retry_millis: u64) -> LeaderElectionConfig {
    timing_millis(lease * 1000, renew * 1000, retry_millis)
}

fn timing_millis(lease: u64, renew: u64, retry: u64) -> LeaderElectionConfig {
    let mut config = LeaderElectionConfig::default();
    config.lease_duration = Duration::from_millis(lease);
    config.renew_deadline = Duration::from_millis(renew);
    config.retry_period = Duration::from_millis(retry);
    config
}

/// A candidate running on its own task, its leadership recorded as it changes: when it
/// started and stopped leading.
struct Candidate {
    elector: LeaderElector,
    led: Arc<Mutex<Vec<(bool, Instant)>>>,
    run: tokio::task::JoinHandle<()>,
}

impl Candidate {
    fn start(client: Client, identity: &str, config: LeaderElectionConfig) -> Candidate {
        let lock = LeaseLock::new(client, "default", "election", identity);
        let elector = LeaderElector::new(lock, config).expect("a valid configuration");
        let led = Arc::new(Mutex::new(Vec::new()));
        let mut status = elector.status();
        let record = led.clone();
        tokio::spawn(async move {
            while status.changed().await.is_ok() {
                let leading = status.borrow_and_update().leading;
                let mut led = record.lock().unwrap();
                if led.last().map(|(l, _)| *l) != Some(leading) {
                    led.push((leading, Instant::now()));
                }
            }
        });
        let running = elector.clone();
        let run = tokio::spawn(async move {
            let _ = running.run(std::future::pending()).await;
        });
        Candidate { elector, led, run }
    }

    fn started_leading(&self) -> Option<Instant> {
        self.led.lock().unwrap().iter().find(|(l, _)| *l).map(|(_, at)| *at)
    }

    fn stopped_leading(&self) -> Option<Instant> {
        self.led.lock().unwrap().iter().rev().find(|(l, _)| !*l).map(|(_, at)| *at)
    }
}

/// Runs `a` as the leader and `b` as its follower until `b` leads, with `a` cut off as
/// `network` says once `b` has followed for a while; returns when `a` stopped leading and
/// when `b` started.
async fn hand_over(
    a_config: LeaderElectionConfig,
    b_config: LeaderElectionConfig,
    network: Network,
) -> (Instant, Instant) {
    let server = server().await;
    let (a_client, a_network) = client_behind(&server);
    let mut a = Candidate::start(a_client, "a", a_config);
    eventually_within(Duration::from_secs(60), "a leads", || a.elector.is_leader()).await;
    let b = Candidate::start(server.in_process_client(), "b", b_config);
    // b follows, reading every renewal of a's.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!b.elector.is_leader());
    *a_network.lock().unwrap() = network;
    eventually_within(Duration::from_secs(120), "b leads", || b.elector.is_leader()).await;
    // a's run ends once it stops leading (it may do so after b started).
    let run = &mut a.run;
    tokio::time::timeout(Duration::from_secs(120), run).await.expect("a stops").unwrap();
    let stopped = a.stopped_leading().expect("a stopped leading");
    (stopped, b.started_leading().expect("b leads"))
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewal_reply_is_late_stops_before_a_follower_may_take_over() {
    // a's last renewal reaches the server at once, but its reply comes 6 s later; nothing
    // after it gets through. b saw that renewal when it was written, and may take over a
    // lease duration (15 s) after; a must have stopped by then, however late its reply was.
    // 6 s is more than lease duration − renew deadline (5 s), so a hold counted from the
    // reply (6 + 10 s) would run past b's take-over, and less than renew deadline − retry
    // period (8 s), so the reply comes before the attempt is cut.
    let (a_stopped, b_started) = hand_over(
        LeaderElectionConfig::default(),
        timing(15, 10, 200),
        Network::SlowReplyThenCut(Duration::from_secs(6)),
    )
    .await;
    assert!(
        a_stopped <= b_started,
        "a led until {:?} after b started leading",
        a_stopped - b_started
    );
}

/// The Lease deleted under its leader (`kubectl delete lease`, a GitOps prune): the leader
/// stops at its next renewal, which reads it absent, and the follower that saw it held waits
/// a lease duration before it creates it. Before, the follower created it and led at once
/// while the leader led on until its renew deadline.
#[tokio::test(start_paused = true)]
async fn a_lease_deleted_under_its_leader_never_makes_two_leaders() {
    let server = server().await;
    let a = Candidate::start(server.in_process_client(), "a", timing(15, 10, 2000));
    eventually_within(Duration::from_secs(60), "a leads", || a.elector.is_leader()).await;
    // b tries every 200 ms, so that after the delete it reads the Lease before a renews.
    let b = Candidate::start(server.in_process_client(), "b", timing(15, 10, 200));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!b.elector.is_leader());
    let leases = just_renewed(&server).await;
    // Just after a renewal: a's next one is 2 s away.
    leases.delete("election", &Default::default()).await.unwrap();
    eventually_within(Duration::from_secs(60), "b leads", || b.elector.is_leader()).await;
    let b_started = b.started_leading().expect("b leads");
    let a_stopped = a.stopped_leading();
    assert!(a_stopped.is_some_and(|a| a <= b_started), "a still led when b started leading");
}

/// The Leases of `default`, once the Lease `election` was just renewed.
async fn just_renewed(server: &ctrlkit_apiserver::ApiServer) -> kube_client::Api<Lease> {
    let leases: kube_client::Api<Lease> = kube_client::Api::namespaced(server.client(), "default");
    let renewed = |lease: &Lease| lease.spec.as_ref().and_then(|s| s.renew_time.clone());
    let before = renewed(&leases.get("election").await.unwrap());
    while renewed(&leases.get("election").await.unwrap()) == before {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    leases
}

/// A leader (renew deadline 10 s, retries every 2 s) whose Lease `change` changes just after
/// a renewal: asserts it stops leading at its next renewal, long before its renew deadline.
async fn a_leader_stops_at_its_next_renewal_once(
    change: impl AsyncFnOnce(&kube_client::Api<Lease>),
) {
    let server = server().await;
    let config = timing(15, 10, 2000);
    let a = Candidate::start(server.in_process_client(), "a", config);
    eventually_within(Duration::from_secs(60), "a leads", || a.elector.is_leader()).await;
    let leases = just_renewed(&server).await;
    change(&leases).await;
    let changed = Instant::now();
    eventually_within(Duration::from_secs(60), "a stops", || !a.elector.is_leader()).await;
    let led = a.stopped_leading().expect("a stopped leading") - changed;
    // Its next renewal is a jittered retry period away (2 to 2.4 s); its deadline is 10 s.
    assert!(led <= config.retry_period.mul_f64(1.2), "a led on for {led:?}");
}

/// The Lease deleted under its leader, and a candidate that never saw it held (a new
/// install's replica) may create it at once: the leader stops at its next renewal, which
/// reads it absent, not at its renew deadline. Mutation: a renewal that reads the Lease
/// absent returns false without ending the hold (elector.rs, the `if renewing` block of
/// the absent Lease) makes a lead on for about 10 s.
#[tokio::test(start_paused = true)]
async fn a_leader_whose_lease_was_deleted_stops_at_its_next_renewal() {
    a_leader_stops_at_its_next_renewal_once(async |leases| {
        leases.delete("election", &Default::default()).await.unwrap();
    })
    .await;
}

/// The Lease deleted and created again by another holder (a candidate that never saw it
/// held): the leader stops at its next renewal, which reads it held by another, not at its
/// renew deadline. Mutation: without the `renewing && !self.holds_lease()` block
/// (elector.rs), the renewal sees a fresh Lease of another and returns false keeping its
/// hold: a leads on for about 10 s beside c.
#[tokio::test(start_paused = true)]
async fn a_leader_whose_lease_another_created_again_stops_at_its_next_renewal() {
    a_leader_stops_at_its_next_renewal_once(async |leases| {
        leases.delete("election", &Default::default()).await.unwrap();
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            k8s_openapi::jiff::Timestamp::now(),
        );
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "election", "namespace": "default"},
            "spec": {
                "holderIdentity": "c",
                "leaseDurationSeconds": 15,
                "acquireTime": now,
                "renewTime": now,
            },
        }))
        .unwrap();
        leases.create(&Default::default(), &lease).await.unwrap();
    })
    .await;
}

/// An attempt to acquire whose request hangs is cut at the renew deadline, and the next one
/// acquires; before, the candidate waited on it for ever.
#[tokio::test(start_paused = true)]
async fn an_acquire_attempt_that_hangs_is_cut_at_the_renew_deadline() {
    let server = server().await;
    let (client, network) = client_behind(&server);
    *network.lock().unwrap() = Network::HangNext;
    let start = Instant::now();
    let a = Candidate::start(client, "a", LeaderElectionConfig::default());
    eventually_within(Duration::from_secs(60), "a leads", || a.elector.is_leader()).await;
    // Cut at 10 s, then one jittered retry period (2 to 4.4 s).
    let led = start.elapsed();
    assert!(led >= Duration::from_secs(10) && led <= Duration::from_secs(15), "{led:?}");
}

/// A blocking reconcile: says when it blocks its thread, then blocks it for `block`.
struct Blocking {
    block: Duration,
    blocking: tokio::sync::mpsc::UnboundedSender<()>,
    ended: Arc<Mutex<Option<Instant>>>,
}

/// Records when a reconcile ended (finished, or dropped after its abort).
struct EndsAt(Arc<Mutex<Option<Instant>>>);

impl Drop for EndsAt {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = Some(Instant::now());
    }
}

#[async_trait::async_trait]
impl ctrlkit::controller::Reconciler for Blocking {
    type Object = ConfigMap;
    type Error = std::convert::Infallible;

    async fn reconcile(
        &self,
        _: &ctrlkit::cache::ObjectKey,
        _: Option<Arc<Self::Object>>,
    ) -> Result<ctrlkit::controller::Action, Self::Error> {
        let _ends = EndsAt(self.ended.clone());
        let _ = self.blocking.send(());
        std::thread::sleep(self.block);
        tokio::task::yield_now().await;
        Ok(ctrlkit::controller::Action::done())
    }
}

/// An elected manager (graceful shutdown timeout `graceful`) running until its stop is sent,
/// once its reconcile blocks its thread; and when that reconcile ended.
async fn blocking_a_reconcile(
    server: &ctrlkit_apiserver::ApiServer,
    graceful: Duration,
) -> (
    tokio::task::JoinHandle<Result<(), ManagerError>>,
    tokio::sync::oneshot::Sender<()>,
    Arc<Mutex<Option<Instant>>>,
) {
    let client = server.client();
    let lock = LeaseLock::new(client.clone(), "default", "election", "a");
    let mut manager = ctrlkit::manager::Manager::builder(client.clone())
        .leader_election(lock, LeaderElectionConfig::default())
        .graceful_shutdown_timeout(graceful)
        .build();
    let controller =
        manager.controller(kube_client::Api::<ConfigMap>::namespaced(client, "default")).build();
    let (blocking, mut blocks) = tokio::sync::mpsc::unbounded_channel();
    let ended = Arc::new(Mutex::new(None));
    let block = Duration::from_secs(2);
    manager
        .add_controller(controller, Blocking { block, blocking, ended: ended.clone() })
        .expect("the only controller of its name");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(manager.run_until(async {
        let _ = stopped.await;
    }));
    create_configmap(server, "x").await;
    tokio::time::timeout(Duration::from_secs(30), blocks.recv()).await.expect("a reconcile");
    (run, stop, ended)
}

/// Asserts that the Lease `election` is released, and not before `ended` says the reconcile
/// ended.
async fn assert_released_after(
    server: &ctrlkit_apiserver::ApiServer,
    ended: &Mutex<Option<Instant>>,
) {
    let leases: kube_client::Api<Lease> = kube_client::Api::namespaced(server.client(), "default");
    let released = released_within(leases, Duration::from_secs(30)).await;
    let ended = ended.lock().unwrap().expect("the Lease was released while the reconcile ran");
    assert!(ended <= released, "released {:?} before the reconcile ended", ended - released);
}

/// The time the Lease `election` is seen released, polled every 10 ms for at most `within`.
async fn released_within(leases: kube_client::Api<Lease>, within: Duration) -> Instant {
    tokio::time::timeout(within, async {
        loop {
            let lease = leases.get("election").await.unwrap();
            if lease.spec.and_then(|s| s.holder_identity).unwrap_or_default().is_empty() {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the Lease is released")
}

/// The run future of an elected manager dropped while a reconcile blocks its thread: the
/// Lease is released only once that reconcile is gone. Before, the release went out at
/// once, and a successor could lead while the reconcile still ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_manager_dropped_releases_its_lease_only_after_its_reconciles_stopped() {
    let server = server().await;
    let (run, _stop, ended) = blocking_a_reconcile(&server, Duration::from_secs(30)).await;
    run.abort();
    assert_released_after(&server, &ended).await;
}

/// An elected manager stopped while a reconcile blocks its thread past the graceful shutdown
/// timeout: the manager aborts the controller, whose workers are dropped without being
/// waited for, and the Lease is released only once that reconcile is gone. Before, the
/// release went out as soon as the controller's task was aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_manager_past_its_shutdown_timeout_releases_its_lease_after_its_reconciles() {
    let server = server().await;
    let (run, stop, ended) = blocking_a_reconcile(&server, Duration::from_millis(100)).await;
    stop.send(()).unwrap();
    assert_released_after(&server, &ended).await;
    let result = run.await.unwrap();
    assert!(matches!(result, Err(ManagerError::ShutdownTimeout { .. })), "{result:?}");
}

/// A runnable under the leader Lease that moves its `Stop` into a task of its own, which
/// never ends: the mark of work under the Lease never goes.
struct KeepsItsStop;

#[async_trait::async_trait]
impl ctrlkit::runnable::Runnable for KeepsItsStop {
    fn name(&self) -> String {
        "keeps its stop".into()
    }

    async fn start(
        &self,
        stop: ctrlkit::runnable::Stop,
    ) -> Result<(), ctrlkit::runnable::RunnableError> {
        tokio::spawn(async move {
            let _stop = stop;
            std::future::pending::<()>().await
        });
        std::future::pending().await
    }

    fn needs_leader_election(&self) -> bool {
        true
    }
}

/// A dropped run whose work under the Lease never goes (a `Stop` kept by a detached task)
/// holds the Lease one lease duration at most, then releases it. Before, it held (and
/// renewed) the Lease for ever, and no other replica could ever lead.
#[tokio::test(start_paused = true)]
async fn a_dropped_run_whose_work_never_goes_releases_its_lease_after_a_lease_duration() {
    let server = server().await;
    let client = server.in_process_client();
    let config = LeaderElectionConfig::default();
    let lock = LeaseLock::new(client.clone(), "default", "election", "a");
    let mut manager = Manager::builder(client).leader_election(lock, config).build();
    manager.add(KeepsItsStop);
    let elector = manager.leader_elector().unwrap().clone();
    let run = tokio::spawn(manager.run_until(std::future::pending()));
    eventually_within(Duration::from_secs(60), "a leads", || elector.is_leader()).await;
    run.abort();
    let dropped = Instant::now();
    let leases = kube_client::Api::namespaced(server.in_process_client(), "default");
    let released = released_within(leases, config.lease_duration * 4).await;
    let held = released - dropped;
    assert!(
        held >= config.lease_duration && held <= config.lease_duration + Duration::from_secs(1),
        "released {held:?} after the run was dropped"
    );
}

/// Leadership hooks that panic.
struct PanickingLeaderMetrics;

impl LeaderMetrics for PanickingLeaderMetrics {
    fn on(&self, _: &str) {
        panic!("on hook");
    }
    fn off(&self, _: &str) {
        panic!("off hook");
    }
}

/// A metrics hook is user code. Its panic used to end the elector's run just after it had
/// set itself leading: it said it led while it renewed nothing, and a follower took the
/// lease over beside it.
#[tokio::test(start_paused = true)]
async fn a_leader_whose_metrics_hook_panics_keeps_renewing_its_lease() {
    let server = server().await;
    let config = timing(15, 10, 2000);
    let lock = LeaseLock::new(server.in_process_client(), "default", "election", "a");
    let metrics: Arc<dyn LeaderMetrics> = Arc::new(PanickingLeaderMetrics);
    let a = LeaderElector::with_metrics(lock, config, Some(metrics)).unwrap();
    let running = a.clone();
    let run = tokio::spawn(async move { running.run(std::future::pending()).await });
    eventually_within(Duration::from_secs(60), "a leads", || a.is_leader()).await;
    let b = Candidate::start(server.in_process_client(), "b", config);
    tokio::time::sleep(config.lease_duration * 4).await;
    assert!(!b.elector.is_leader(), "b took the lease over while a said it led");
    assert!(a.is_leader());
    assert!(!run.is_finished(), "a's run ended: {:?}", run.await);
}

#[tokio::test(start_paused = true)]
async fn a_follower_waits_out_the_lease_duration_the_leader_wrote() {
    // a leads with 30 s leases (renew deadline 25 s) and writes so on the Lease; b's own
    // configuration says 15 s. Cut off, a may lead 25 s after its last renewal: b must wait
    // the 30 s a wrote, not its own 15.
    let (a_stopped, b_started) =
        hand_over(timing(30, 25, 2000), timing(15, 10, 200), Network::Cut).await;
    assert!(
        a_stopped <= b_started,
        "a led until {:?} after b started leading",
        a_stopped - b_started
    );
}

/// Reconcile starts and ends (a reconcile dropped unfinished ends too), by replica, key and
/// instant; reconciles of some keys that take long; and, once armed, one reconcile that
/// freezes its replica's whole runtime (its thread blocked, as a process stopped by SIGSTOP
/// or a long pause) after letting the informer queue what came meanwhile.
#[derive(Default)]
struct Starts {
    started: Mutex<Vec<(String, String, Instant)>>,
    ended: Mutex<Vec<(String, String, Instant)>>,
    slow: Mutex<HashMap<String, Duration>>,
    freeze: Mutex<Option<Duration>>,
}

impl Starts {
    /// The first instant `replica` started reconciling `key`.
    fn first_start(&self, replica: &str, key: &str) -> Option<Instant> {
        let started = self.started.lock().unwrap();
        started.iter().find(|(r, k, _)| r == replica && k == key).map(|(_, _, at)| *at)
    }

    /// The instant `replica`'s reconcile of `key` ended (or was dropped), the last one.
    fn last_end(&self, replica: &str, key: &str) -> Option<Instant> {
        let ended = self.ended.lock().unwrap();
        ended.iter().rev().find(|(r, k, _)| r == replica && k == key).map(|(_, _, at)| *at)
    }
}

/// Records a reconcile's end when dropped: finished, or dropped unfinished.
struct Ends(Arc<Starts>, String, String);

impl Drop for Ends {
    fn drop(&mut self) {
        let entry = (self.1.clone(), self.2.clone(), Instant::now());
        self.0.ended.lock().unwrap().push(entry);
    }
}

struct Recording {
    replica: String,
    starts: Arc<Starts>,
}

#[async_trait::async_trait]
impl ctrlkit::controller::Reconciler for Recording {
    type Object = ConfigMap;
    type Error = std::convert::Infallible;

    async fn reconcile(
        &self,
        key: &ctrlkit::cache::ObjectKey,
        _: Option<Arc<Self::Object>>,
    ) -> Result<ctrlkit::controller::Action, Self::Error> {
        let entry = (self.replica.clone(), key.name.clone(), Instant::now());
        self.starts.started.lock().unwrap().push(entry);
        let _ends = Ends(self.starts.clone(), self.replica.clone(), key.name.clone());
        let slow = self.starts.slow.lock().unwrap().get(&key.name).copied();
        tokio::time::sleep(slow.unwrap_or(Duration::from_millis(100))).await;
        let freeze = self.starts.freeze.lock().unwrap().take();
        if let Some(freeze) = freeze {
            tokio::time::sleep(Duration::from_millis(500)).await;
            std::thread::sleep(freeze);
        }
        Ok(ctrlkit::controller::Action::done())
    }
}

/// A manager with leader election over the ConfigMaps of `default`, one worker; and its
/// controller.
fn elected_manager(
    client: Client,
    identity: &str,
    config: LeaderElectionConfig,
    starts: &Arc<Starts>,
) -> (ctrlkit::manager::Manager, ctrlkit::controller::Controller<ConfigMap>) {
    let lock = LeaseLock::new(client.clone(), "default", "election", identity);
    let mut manager =
        ctrlkit::manager::Manager::builder(client.clone()).leader_election(lock, config).build();
    let api = kube_client::Api::<ConfigMap>::namespaced(client, "default");
    let controller = manager.controller(api).build();
    let handle = (*controller).clone();
    let reconciler = Recording { replica: identity.to_owned(), starts: starts.clone() };
    manager.add_controller(controller, reconciler).expect("the only controller of its name");
    (manager, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_frozen_past_its_lease_starts_no_reconcile_when_it_resumes() {
    let server = server().await;
    let config = timing_millis(1200, 800, 200);
    let starts = Arc::new(Starts::default());
    // a runs on a runtime of its own, on a thread of its own: its freeze stops it alone.
    let (url, a_starts) = (server.url(), starts.clone());
    let (a_status_tx, a_status) = std::sync::mpsc::channel();
    let a = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let client = Client::try_from(kube_client::Config::new(url.parse().unwrap())).unwrap();
            let (manager, controller) = elected_manager(client, "a", config, &a_starts);
            a_status_tx.send(manager.leader_elector().unwrap().status()).unwrap();
            (manager.run_until(std::future::pending()).await, controller.stats())
        })
    });
    let mut a_status = a_status.recv().unwrap();
    tokio::time::timeout(Duration::from_secs(10), a_status.wait_for(|s| s.leading))
        .await
        .expect("a leads")
        .unwrap();
    let (b, _) = elected_manager(server.client(), "b", config, &starts);
    let mut b_status = b.leader_elector().unwrap().status();
    let b_run = tokio::spawn(b.run_until(std::future::pending()));
    let b_started = tokio::spawn(async move {
        let _ = b_status.wait_for(|s| s.leading).await;
        Instant::now()
    });

    // a reconciles x0, whose reconcile freezes a for 4 s (past the 2 s its Lease says)
    // once x1 to x5 wait in its queue. b takes over meanwhile.
    *starts.freeze.lock().unwrap() = Some(Duration::from_secs(4));
    for i in 0..6 {
        create_configmap(&server, &format!("x{i}")).await;
    }
    let b_started = tokio::time::timeout(Duration::from_secs(20), b_started)
        .await
        .expect("b takes over")
        .unwrap();
    let (a_ended, a_stats) = tokio::task::spawn_blocking(move || a.join().unwrap()).await.unwrap();
    assert!(a_ended.is_err(), "a lost its Lease: {a_ended:?}");
    // The reconcile that froze is reported; the keys queued behind it were not started.
    assert_eq!(a_stats.outlived_lease, 1, "{a_stats:?}");
    assert!(a_stats.fenced >= 1, "{a_stats:?}");
    let late: Vec<_> = starts
        .started
        .lock()
        .unwrap()
        .iter()
        .filter(|(replica, _, at)| replica == "a" && *at >= b_started)
        .map(|(_, key, at)| format!("{key} {:?} after b led", *at - b_started))
        .collect();
    assert!(late.is_empty(), "a started reconciles once b led: {late:?}");
    eventually("b reconciles what a was given", || {
        let started = starts.started.lock().unwrap();
        (0..6).all(|i| started.iter().any(|(r, k, _)| r == "b" && *k == format!("x{i}")))
    })
    .await;
    b_run.abort();
}

/// The default ring of shard selectors (15 s Leases) over the ConfigMaps of `default`.
fn selector_ring() -> Ring {
    Ring::new("sets").assignment(Assignment::ShardSelectors)
}

/// A manager that is shard `id` of `ring`, with four workers over the ConfigMaps of
/// `default`; its run, and the stop to send.
fn shard_replica(
    server: &ctrlkit_apiserver::ApiServer,
    ring: &Ring,
    id: &str,
    starts: &Arc<Starts>,
) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<Result<(), ManagerError>>) {
    let client = server.in_process_client();
    let mut manager = Manager::builder(client.clone()).sharding(ring.clone(), id).build();
    let api = kube_client::Api::<ConfigMap>::namespaced(client, "default");
    manager
        .controller(api)
        .config(Config::default().workers(4))
        .complete(Recording { replica: id.to_owned(), starts: starts.clone() })
        .expect("the only controller of its name");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(manager.run_until(async {
        let _ = stopped.await;
    }));
    (stop, run)
}

/// The shard of `members` that a ring of shard selectors gives `object`.
fn owner(members: &[&str], object: &ConfigMap) -> String {
    let place = fnv1a64(object.uid().expect("a stored object has a uid").as_bytes());
    HashRing::new(members.iter().copied()).shard_for_hash(place).unwrap().to_owned()
}

/// Creates `n` ConfigMaps and waits until `replica` reconciled each; returns them.
async fn sets_reconciled_by(
    server: &ctrlkit_apiserver::ApiServer,
    n: usize,
    starts: &Starts,
    replica: &str,
) -> Vec<ConfigMap> {
    let mut sets = Vec::new();
    for i in 0..n {
        sets.push(create_configmap(server, &format!("set-{i}")).await);
    }
    eventually_within(Duration::from_secs(60), "the first replica reconciles every set", || {
        sets.iter().all(|s| starts.first_start(replica, &s.name_any()).is_some())
    })
    .await;
    sets
}

/// Changes `name` so that it is reconciled again.
async fn touch(server: &ctrlkit_apiserver::ApiServer, name: &str, n: usize) {
    let api = kube_client::Api::<ConfigMap>::namespaced(server.in_process_client(), "default");
    let patch = Patch::Merge(serde_json::json!({ "data": { "n": n.to_string() } }));
    api.patch(name, &PatchParams::default(), &patch).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_that_hangs_in_a_hand_off_fences_its_shard_and_its_ranges_move() {
    let server = server().await;
    let ring = selector_ring();
    let starts = Arc::new(Starts::default());
    let (_a_stop, a_run) = shard_replica(&server, &ring, "a", &starts);
    let sets = sets_reconciled_by(&server, 40, &starts, "a").await;
    // a's reconcile of a set that b will hold never ends.
    let two = ["a", "b"];
    let hung = sets.iter().find(|s| owner(&two, s) == "b").unwrap().name_any();
    starts.slow.lock().unwrap().insert(hung.clone(), Duration::from_secs(86_400));
    let since = Instant::now();
    touch(&server, &hung, 0).await;
    eventually("a reconciles the hanging set", || {
        starts
            .started
            .lock()
            .unwrap()
            .iter()
            .any(|(r, k, at)| r == "a" && *k == hung && *at >= since)
    })
    .await;
    // Only a's reconcile hangs.
    starts.slow.lock().unwrap().clear();
    let (_b_stop, _b_run) = shard_replica(&server, &ring, "b", &starts);
    // a gives the set's range up, and cannot finish: past the hand-off bound it fences itself
    // (its reconciles aborted, its Lease released), and b reconciles the set.
    eventually_within(Duration::from_secs(600), "b reconciles the set a hung on", || {
        starts.first_start("b", &hung).is_some()
    })
    .await;
    let a_ended = tokio::time::timeout(Duration::from_secs(60), a_run).await.expect("a stopped");
    let err = a_ended.unwrap().expect_err("a fenced itself: an error");
    assert!(err.to_string().contains("it fenced itself"), "{err}");
    let dropped = starts.last_end("a", &hung).expect("a's reconcile was dropped");
    let taken = starts.first_start("b", &hung).unwrap();
    assert!(dropped <= taken, "b started {:?} before a's reconcile was dropped", dropped - taken);
    // b holds the whole ring: every set is reconciled by it from now on.
    for set in &sets {
        touch(&server, &set.name_any(), 1).await;
    }
    let now = Instant::now();
    eventually_within(Duration::from_secs(60), "b reconciles every set", || {
        let started = starts.started.lock().unwrap();
        sets.iter()
            .all(|s| started.iter().any(|(r, k, at)| r == "b" && *k == s.name_any() && *at >= now))
    })
    .await;
}
