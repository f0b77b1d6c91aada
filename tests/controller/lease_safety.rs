//! Lease safety on the embedded server: at no instant do two candidates lead, and no key is
//! reconciled by two replicas, when replies are slow, when Leases say other durations, when a
//! replica freezes past its lease duration, and while a reconcile hangs in a hand-off.
//!
//! Most cases run on tokio's paused clock with clients that reach the server in process
//! (`ApiServer::in_process_client`): Leases of the default 15 s play out in milliseconds and
//! every instant is exact. A frozen process needs two clocks (one that stops, one that goes
//! on): that case runs a replica on a runtime of its own, on the real clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlkit::leaderelection::{LeaderElectionConfig, LeaderElector, LeaseLock};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::Client;
use kube_client::client::Body;
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
            let delay = {
                let mut network = network.lock().unwrap();
                match *network {
                    Network::Open => None,
                    Network::Cut => {
                        return Err(kube_client::Error::Service("cut off from the server".into()));
                    }
                    Network::SlowReplyThenCut(delay) if lease_write => {
                        *network = Network::Cut;
                        Some(delay)
                    }
                    Network::SlowReplyThenCut(_) => None,
                }
            };
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
    // a's last renewal reaches the server at once, but its reply comes 4 s later; nothing
    // after it gets through. b saw that renewal when it was written, and may take over a
    // lease duration (15 s) after; a must have stopped by then, however late its reply was.
    let (a_stopped, b_started) = hand_over(
        LeaderElectionConfig::default(),
        timing(15, 10, 200),
        Network::SlowReplyThenCut(Duration::from_secs(4)),
    )
    .await;
    assert!(
        a_stopped <= b_started,
        "a led until {:?} after b started leading",
        a_stopped - b_started
    );
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

/// Reconcile starts, by replica, key and instant; and, once armed, one reconcile that
/// freezes its replica's whole runtime (its thread blocked, as a process stopped by SIGSTOP
/// or a long pause) after letting the informer queue what came meanwhile.
#[derive(Default)]
struct Starts {
    started: Mutex<Vec<(String, String, Instant)>>,
    freeze: Mutex<Option<Duration>>,
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
    let reconciler = Recording { replica: identity.to_owned(), starts: starts.clone() };
    manager.add_controller(controller.clone(), reconciler);
    (manager, controller)
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
