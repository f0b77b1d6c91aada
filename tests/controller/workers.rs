//! A worker count that changes while the controller runs: by hand (`set_workers`), and by the
//! adaptive policy (`Config::adaptive_workers`), on the paused clock over the embedded server's
//! in-process client; the CPU-bound case in real time on a multi-thread runtime.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ctrlkit::cache::{HasSynced, ObjectKey, SharedInformerFactory};
use ctrlkit::controller::{
    Action, AdaptiveWorkers, Config, Controller, ControllerMetrics, ControllerMetricsProvider,
    Reconciler, ScaleReason, recording_client,
};
use ctrlkit::manager::Manager;
use ctrlkit::rest_client::ClientPressure;
use ctrlkit::workqueue::WorkQueue;
use ctrlkit_apiserver::Failure;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube_client::api::PostParams;
use kube_client::{Api, Client};
use serde_json::json;
use tokio::sync::Semaphore;

use super::common::*;
use super::own_writes::secrets_never_watched;
use crate::support::Failed;

/// What the controller reported: the gauge's values and each scaling.
#[derive(Clone, Default)]
struct Recorded {
    gauge: Arc<Mutex<Vec<usize>>>,
    scaled: Arc<Mutex<Vec<(usize, usize, ScaleReason)>>>,
}

impl ControllerMetrics for Recorded {
    fn max_concurrent_reconciles(&self, workers: usize) {
        self.gauge.lock().unwrap().push(workers);
    }
    fn scaled(&self, from: usize, to: usize, reason: ScaleReason) {
        self.scaled.lock().unwrap().push((from, to, reason));
    }
}

impl ControllerMetricsProvider for Recorded {
    fn new_controller_metrics(&self, _: &str) -> Arc<dyn ControllerMetrics> {
        Arc::new(self.clone())
    }
}

impl Recorded {
    fn gauge(&self) -> Option<usize> {
        self.gauge.lock().unwrap().last().copied()
    }
    fn reasons(&self) -> Vec<ScaleReason> {
        self.scaled.lock().unwrap().iter().map(|s| s.2).collect()
    }
}

/// Reconciles wait at a gate; counts how many run at once, how many ran per key, and any
/// reconcile dropped before it ended (cancelled).
#[derive(Clone)]
struct Gated {
    gate: Arc<Semaphore>,
    now: Arc<AtomicUsize>,
    /// The most running at once among reconciles started since the last `reset_peak`.
    peak: Arc<AtomicUsize>,
    runs: Arc<Mutex<HashMap<String, usize>>>,
    cancelled: Arc<AtomicUsize>,
}

impl Default for Gated {
    fn default() -> Self {
        Self {
            gate: Arc::new(Semaphore::new(0)),
            now: Arc::default(),
            peak: Arc::default(),
            runs: Arc::default(),
            cancelled: Arc::default(),
        }
    }
}

/// Counts a reconcile dropped before it ended.
struct Running<'a>(&'a Gated, bool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
        if !self.1 {
            self.0.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl Reconciler for Gated {
    type Object = ConfigMap;
    type Error = Failed;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        _: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Failed> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let mut running = Running(self, false);
        self.gate.acquire().await.expect("the gate stays open").forget();
        *self.runs.lock().unwrap().entry(key.to_string()).or_default() += 1;
        running.1 = true;
        Ok(Action::done())
    }
}

impl Gated {
    fn running(&self) -> usize {
        self.now.load(Ordering::SeqCst)
    }
    fn reset_peak(&self) {
        self.peak.store(self.running(), Ordering::SeqCst);
    }
    fn open(&self) {
        self.gate.add_permits(1 << 20);
    }
    fn finished(&self) -> usize {
        self.runs.lock().unwrap().values().sum()
    }
}

/// A controller of ConfigMaps over `client`, reporting to `metrics`; keys are put in its queue
/// by the tests (their objects need not exist: a reconcile gets `None`).
fn controller(client: Client, config: Config, metrics: &Recorded) -> Controller<ConfigMap> {
    let configmaps: Api<ConfigMap> = Api::namespaced(client, "default");
    Controller::builder(configmaps).config(config).metrics(Arc::new(metrics.clone())).build()
}

fn add_keys(queue: &WorkQueue<ObjectKey>, prefix: &str, n: usize) {
    for i in 0..n {
        queue.add(ObjectKey::namespaced("default", &format!("{prefix}{i}")));
    }
}

/// Lets the runtime run what is ready without moving the paused clock, until `check` holds.
async fn without_time(what: &str, mut check: impl FnMut() -> bool) {
    let at = tokio::time::Instant::now();
    for _ in 0..10_000 {
        if check() {
            assert_eq!(tokio::time::Instant::now(), at, "the clock did not move");
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("{what}: not reached without the clock moving");
}

/// T1: more workers start at once: eight reconciles run with no time passing, the gauge says
/// eight, and the change is reported as manual.
#[tokio::test(start_paused = true)]
async fn set_workers_up_starts_workers_at_once_and_sets_the_gauge() {
    let server = server().await;
    let metrics = Recorded::default();
    let controller = controller(server.in_process_client(), Config::default(), &metrics);
    let gated = Gated::default();
    add_keys(controller.queue(), "k", 20);
    let (stop, run) = run_controller(&controller, gated.clone());
    eventually("one worker busy", || gated.running() == 1).await;
    assert_eq!(metrics.gauge(), Some(1));

    controller.set_workers(8);
    assert_eq!(controller.workers(), 8);
    let config = format!("{:?}", controller.config());
    assert!(config.contains("workers: 1,"), "the config keeps the start count: {config}");
    assert_eq!(metrics.gauge(), Some(8), "the gauge follows at once");
    assert_eq!(*metrics.scaled.lock().unwrap(), [(1, 8, ScaleReason::Manual)]);
    without_time("eight reconciles running", || gated.running() == 8).await;

    gated.open();
    eventually("every key reconciled", || gated.finished() == 20).await;
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// T2: fewer workers: the reconciles running finish (none cancelled, none abandoned, each key
/// once), and after them no more than the new count run at once.
#[tokio::test(start_paused = true)]
async fn set_workers_down_lets_running_reconciles_finish_then_runs_fewer() {
    let server = server().await;
    let metrics = Recorded::default();
    let config = Config::default().workers(8);
    let controller = controller(server.in_process_client(), config, &metrics);
    let gated = Gated::default();
    add_keys(controller.queue(), "first", 8);
    let (stop, run) = run_controller(&controller, gated.clone());
    eventually("eight reconciles running", || gated.running() == 8).await;

    controller.set_workers(2);
    assert_eq!(metrics.gauge(), Some(2), "the gauge follows at once");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(gated.running(), 8, "no reconcile cancelled");
    assert_eq!(gated.cancelled.load(Ordering::SeqCst), 0);

    add_keys(controller.queue(), "second", 10);
    // The first eight end; from then on at most two run.
    gated.gate.add_permits(8);
    eventually("the first eight finished", || gated.finished() == 8).await;
    gated.reset_peak();
    gated.open();
    eventually("every key reconciled", || gated.finished() == 18).await;
    assert!(gated.peak.load(Ordering::SeqCst) <= 2, "peak {}", gated.peak.load(Ordering::SeqCst));
    assert!(gated.runs.lock().unwrap().values().all(|n| *n == 1), "each key once");
    assert_eq!(gated.cancelled.load(Ordering::SeqCst), 0);
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    assert_eq!(controller.stats().abandoned, 0);
    assert_eq!(controller.stats().succeeded, 18);
}

/// T3: idle workers waiting on an empty queue leave at once, and the queue's wake-ups are not
/// lost with them: keys added next are served, two at a time.
#[tokio::test(start_paused = true)]
async fn idle_workers_leave_without_losing_a_queue_wake_up() {
    let server = server().await;
    let metrics = Recorded::default();
    let config = Config::default().workers(8);
    let controller = controller(server.in_process_client(), config, &metrics);
    let gated = Gated::default();
    let (stop, run) = run_controller(&controller, gated.clone());
    eventually("the caches synced", || controller.informer().has_synced()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    controller.set_workers(2);
    tokio::task::yield_now().await;
    add_keys(controller.queue(), "k", 1);
    eventually("the one key is taken", || gated.running() == 1).await;
    add_keys(controller.queue(), "more", 5);
    eventually("two running", || gated.running() == 2).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(gated.running(), 2, "only the two workers left take keys");
    gated.open();
    eventually("every key reconciled", || gated.finished() == 6).await;
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// T3b: through a Manager: a clone of the `ManagedController`, kept before it is added,
/// changes the running controller's count.
#[tokio::test(start_paused = true)]
async fn a_clone_kept_before_adding_to_a_manager_sets_the_running_controllers_workers() {
    let server = server().await;
    let client = server.in_process_client();
    let mut manager = Manager::new(client.clone());
    let managed = manager.controller(Api::<ConfigMap>::namespaced(client, "default")).build();
    let live = (*managed).clone();
    let gated = Gated::default();
    manager.add_controller(managed, gated.clone()).unwrap();
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    add_keys(live.queue(), "k", 10);
    eventually("one worker busy", || gated.running() == 1).await;

    live.set_workers(4);
    eventually("four running", || gated.running() == 4).await;
    assert_eq!(live.workers(), 4);
    gated.open();
    eventually("every key reconciled", || gated.finished() == 10).await;
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// Sleeps `work` (I/O) per reconcile, then asks to run again at once (a queue that stays
/// deep) unless `once`.
#[derive(Clone)]
struct Io {
    work: Duration,
    done: Arc<AtomicU64>,
    once: bool,
}

#[async_trait]
impl Reconciler for Io {
    type Object = ConfigMap;
    type Error = Failed;

    async fn reconcile(&self, _: &ObjectKey, _: Option<Arc<ConfigMap>>) -> Result<Action, Failed> {
        tokio::time::sleep(self.work).await;
        self.done.fetch_add(1, Ordering::Relaxed);
        match self.once {
            true => Ok(Action::done()),
            false => Ok(Action::requeue_after(Duration::ZERO)),
        }
    }
}

impl Io {
    fn new(work: Duration) -> Self {
        Self { work, done: Arc::default(), once: false }
    }
    fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }
}

/// Samples `workers()` every 100 ms for `span`; returns the highest seen.
async fn highest_workers(controller: &Controller<ConfigMap>, span: Duration) -> usize {
    let mut highest = controller.workers();
    let end = tokio::time::Instant::now() + span;
    while tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(100)).await;
        highest = highest.max(controller.workers());
    }
    highest
}

/// T4: the policy grows on the keys a worker may take, not on the queue's length: one
/// namespace capped at two in flight never grows the pool past two, though hundreds of keys
/// wait. (Mutation: with `len()` in place of `len_available()` the policy grows to 4.)
#[tokio::test(start_paused = true)]
async fn keys_held_back_by_an_in_flight_cap_do_not_grow_the_pool() {
    let server = server().await;
    let metrics = Recorded::default();
    let configmaps: Api<ConfigMap> = Api::namespaced(server.in_process_client(), "default");
    let config = Config::default().adaptive_workers(AdaptiveWorkers::new(1, 32));
    let controller = Controller::builder(configmaps)
        .queue(WorkQueue::builder().max_in_flight_per_key(2))
        .config(config)
        .metrics(Arc::new(metrics.clone()))
        .build();
    let io = Io::new(Duration::from_millis(20));
    add_keys(controller.queue(), "k", 300);
    let (stop, run) = run_controller(&controller, io.clone());
    eventually("reconciling", || io.done() > 0).await;

    let highest = highest_workers(&controller, Duration::from_secs(20)).await;
    assert_eq!(highest, 2, "grew to the cap, no further: {:?}", metrics.scaled.lock().unwrap());
    assert_eq!(controller.queue().len_available(), 0, "the one namespace is at its cap");
    assert!(controller.queue().len() > 250, "the keys still wait");
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// Creates a Secret through a recording client on each key's first reconcile, then asks to
/// run again at once: the key's next reconcile waits, parked, for a cache that never sees it.
#[derive(Clone)]
struct WritesOnce {
    secrets: Api<Secret>,
    written: Arc<Mutex<HashMap<String, usize>>>,
}

#[async_trait]
impl Reconciler for WritesOnce {
    type Object = ConfigMap;
    type Error = kube_client::Error;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        _: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Self::Error> {
        let seen = *self.written.lock().unwrap().entry(key.to_string()).or_default();
        if seen > 0 {
            return Ok(Action::done());
        }
        let child = serde_json::from_value(json!({"metadata": {"generateName": "child-"}}))
            .expect("a valid secret");
        self.secrets.create(&PostParams::default(), &child).await?;
        *self.written.lock().unwrap().entry(key.to_string()).or_default() += 1;
        Ok(Action::requeue_after(Duration::ZERO))
    }
}

/// T5: keys parked for the controller's own writes are neither waiting nor in flight: they
/// neither keep nor grow the pool, which goes back to its minimum and stays there.
#[tokio::test(start_paused = true)]
async fn keys_parked_on_their_own_writes_do_not_grow_the_pool() {
    let server = server().await;
    let client = server.in_process_client();
    let metrics = Recorded::default();
    let mut informers = ctrlkit::cache::InformerConfig::default();
    informers.streaming_list = false;
    let factory = SharedInformerFactory::builder(client.clone()).informer_config(informers).build();
    let stalled: Api<Secret> = Api::namespaced(secrets_never_watched(client.clone()), "default");
    let policy = AdaptiveWorkers::new(1, 32);
    let config =
        Config::default().stale_cache_timeout(Duration::from_secs(3600)).adaptive_workers(policy);
    let controller = Controller::builder(Api::<ConfigMap>::namespaced(client.clone(), "default"))
        .factory(&factory)
        .owns(stalled)
        .config(config)
        .metrics(Arc::new(metrics.clone()))
        .build();
    factory.start(std::future::pending());
    let secrets = Api::namespaced(recording_client(client), "default");
    let reconciler = WritesOnce { secrets, written: Arc::default() };
    add_keys(controller.queue(), "k", 40);
    let (stop, run) = run_controller(&controller, reconciler);
    eventually("every key parked", || controller.held().len() == 40).await;
    eventually_within(Duration::from_secs(30), "at the minimum", || controller.workers() == 1)
        .await;

    let highest = highest_workers(&controller, Duration::from_secs(20)).await;
    assert_eq!(highest, 1, "{:?}", metrics.scaled.lock().unwrap());
    assert_eq!(controller.held().len(), 40, "still parked");
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    factory.shutdown().await;
}

/// Keys per I/O test: more than the largest count, so the queue stays deep.
const DEEP: usize = 256;

/// Reconciles done per second by `config` on a deep queue of 20 ms reconciles, measured over
/// `window` from `after` on; and the controller, to read its count.
async fn throughput(
    client: Client,
    config: Config,
    after: Duration,
    window: Duration,
) -> (f64, Controller<ConfigMap>) {
    let controller = controller(client, config, &Recorded::default());
    let io = Io::new(Duration::from_millis(20));
    add_keys(controller.queue(), "k", DEEP);
    let (stop, run) = run_controller(&controller, io.clone());
    eventually("reconciling", || io.done() > 0).await;
    tokio::time::sleep(after).await;
    let before = io.done();
    tokio::time::sleep(window).await;
    let rate = (io.done() - before) as f64 / window.as_secs_f64();
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    (rate, controller)
}

/// T6: on 20 ms I/O reconciles with a deep queue, the policy (1..64) reaches at least 90% of
/// the best fixed count's throughput within 30 s.
#[tokio::test(start_paused = true)]
async fn adaptive_workers_reach_ninety_percent_of_the_best_fixed_count_within_30s() {
    let server = server().await;
    let window = Duration::from_secs(10);
    let mut best = (0.0, 0);
    for workers in [1, 8, 32, 64] {
        let config = Config::default().workers(workers);
        let client = server.in_process_client();
        let (rate, _) = throughput(client, config, Duration::from_secs(1), window).await;
        if rate > best.0 {
            best = (rate, workers);
        }
    }
    let config = Config::default().adaptive_workers(AdaptiveWorkers::new(1, 64));
    let client = server.in_process_client();
    // Measured from 20 s to 30 s: at 90% by 30 s at the latest.
    let (rate, controller) = throughput(client, config, Duration::from_secs(20), window).await;
    assert!(
        rate >= 0.9 * best.0,
        "adaptive {rate:.0}/s from 20 s to 30 s, at {} workers; best fixed {:.0}/s at {}",
        controller.workers(),
        best.0,
        best.1
    );
}

/// T7: once the queue drains, the policy is back at its minimum within 30 s.
#[tokio::test(start_paused = true)]
async fn adaptive_workers_shrink_to_the_minimum_within_30s_of_idle() {
    let server = server().await;
    let metrics = Recorded::default();
    let config = Config::default().adaptive_workers(AdaptiveWorkers::new(2, 64));
    let controller = controller(server.in_process_client(), config, &metrics);
    let once = Io { once: true, ..Io::new(Duration::from_millis(20)) };
    add_keys(controller.queue(), "k", 2000);
    let (stop, run) = run_controller(&controller, once.clone());
    eventually_within(Duration::from_secs(30), "grown", || controller.workers() >= 16).await;
    eventually_within(Duration::from_secs(60), "drained", || once.done() == 2000).await;
    let grown = controller.workers();
    eventually_within(Duration::from_secs(30), "back at the minimum", || controller.workers() == 2)
        .await;
    assert!(metrics.reasons().contains(&ScaleReason::Idle), "from {grown}");
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// A client that is pushed back on at every look: its 429 count rises each time it is read.
#[derive(Default)]
struct Rising(AtomicU64);

impl ClientPressure for Rising {
    fn throttled(&self) -> u64 {
        self.0.fetch_add(5, Ordering::SeqCst) + 5
    }
}

/// T8a: while the API server pushes back, the policy does not grow on a deep queue of I/O
/// reconciles; it steps down to its minimum, each step reported as throttled.
#[tokio::test(start_paused = true)]
async fn a_client_pushed_back_on_does_not_grow_and_steps_down_to_the_minimum() {
    let server = server().await;
    let metrics = Recorded::default();
    let policy = AdaptiveWorkers::new(1, 32).client_pressure(Arc::new(Rising::default()));
    let config = Config::default().workers(8).adaptive_workers(policy);
    let controller = controller(server.in_process_client(), config, &metrics);
    let io = Io::new(Duration::from_millis(20));
    add_keys(controller.queue(), "k", DEEP);
    let (stop, run) = run_controller(&controller, io.clone());
    eventually("reconciling", || io.done() > 0).await;

    let highest = highest_workers(&controller, Duration::from_secs(20)).await;
    assert_eq!(highest, 8, "never above the start count");
    assert_eq!(controller.workers(), 1, "stepped down to the minimum");
    let scaled = metrics.scaled.lock().unwrap().clone();
    assert_eq!(
        scaled,
        [
            (8, 4, ScaleReason::Throttled),
            (4, 2, ScaleReason::Throttled),
            (2, 1, ScaleReason::Throttled)
        ]
    );
    assert_eq!(metrics.gauge(), Some(1));
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// Holds the CPU `work` per reconcile, then asks to run again at once.
#[derive(Clone)]
struct Cpu {
    work: Duration,
}

#[async_trait]
impl Reconciler for Cpu {
    type Object = ConfigMap;
    type Error = Failed;

    async fn reconcile(&self, _: &ObjectKey, _: Option<Arc<ConfigMap>>) -> Result<Action, Failed> {
        let until = std::time::Instant::now() + self.work;
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        // A reconcile's write: the one await that lets its thread run other tasks.
        tokio::task::yield_now().await;
        Ok(Action::requeue_after(Duration::ZERO))
    }
}

/// T9: on CPU-bound reconciles (real time, two runtime threads) the policy stays at or under
/// the core count, though the queue stays deep and it may go to 64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_bound_reconciles_keep_the_pool_at_or_under_the_cores() {
    let server = server().await;
    let metrics = Recorded::default();
    let policy = AdaptiveWorkers::new(1, 64).interval(Duration::from_millis(200));
    let config = Config::default().adaptive_workers(policy);
    let controller = controller(server.in_process_client(), config, &metrics);
    add_keys(controller.queue(), "k", DEEP);
    let cores = tokio::runtime::Handle::current().metrics().num_workers();
    let (stop, run) = run_controller(&controller, Cpu { work: Duration::from_millis(5) });
    eventually("reconciling", || controller.stats().succeeded > 0).await;

    let highest = highest_workers(&controller, Duration::from_secs(10)).await;
    assert!(highest <= cores, "{highest} workers on {cores} cores: {:?}", metrics.scaled);
    assert!(!metrics.scaled.lock().unwrap().is_empty(), "it did decide: grew from 1");
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// T9b: a count above the cores (here the start count) comes down to them on CPU-bound
/// reconciles, and stays there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_bound_reconciles_bring_a_count_above_the_cores_down_to_them() {
    let server = server().await;
    let metrics = Recorded::default();
    let policy = AdaptiveWorkers::new(1, 64).interval(Duration::from_millis(200));
    let config = Config::default().workers(8).adaptive_workers(policy);
    let controller = controller(server.in_process_client(), config, &metrics);
    add_keys(controller.queue(), "k", DEEP);
    let cores = tokio::runtime::Handle::current().metrics().num_workers();
    let (stop, run) = run_controller(&controller, Cpu { work: Duration::from_millis(5) });
    // Two halvings, a look each 200 ms.
    eventually("down to the cores", || controller.workers() <= cores).await;
    let highest = highest_workers(&controller, Duration::from_secs(5)).await;
    assert!(highest <= cores, "{highest} workers on {cores} cores: {:?}", metrics.scaled);
    assert!(metrics.reasons().contains(&ScaleReason::CpuBound), "{:?}", metrics.scaled);
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// T9c: two CPU-bound controllers on one runtime: each holds about one core of two, which
/// alone would let it grow, but together they fill the cores, so neither grows past them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_cpu_bound_controllers_sharing_the_cores_stay_at_or_under_them() {
    let server = server().await;
    let cores = tokio::runtime::Handle::current().metrics().num_workers();
    let mut runs = Vec::new();
    for name in ["a", "b"] {
        let metrics = Recorded::default();
        let policy = AdaptiveWorkers::new(1, 64).interval(Duration::from_millis(200));
        let config = Config::default().adaptive_workers(policy);
        let configmaps: Api<ConfigMap> = Api::namespaced(server.in_process_client(), "default");
        let controller = Controller::builder(configmaps)
            .name(name)
            .config(config)
            .metrics(Arc::new(metrics.clone()))
            .build();
        add_keys(controller.queue(), name, DEEP);
        let (stop, run) = run_controller(&controller, Cpu { work: Duration::from_millis(5) });
        runs.push((controller, metrics, stop, run));
    }
    for (controller, ..) in &runs {
        eventually("reconciling", || controller.stats().succeeded > 0).await;
    }
    let (a, b) = (&runs[0].0, &runs[1].0);
    let (highest_a, highest_b) = tokio::join!(
        highest_workers(a, Duration::from_secs(10)),
        highest_workers(b, Duration::from_secs(10))
    );
    for (highest, (_, metrics, ..)) in [highest_a, highest_b].into_iter().zip(&runs) {
        assert!(highest <= cores, "{highest} workers on {cores} cores: {:?}", metrics.scaled);
    }
    for (_, _, stop, run) in runs {
        stop.send(()).unwrap();
        run.await.unwrap().unwrap();
    }
}

/// Waits `work` (I/O), then writes a ConfigMap through the Manager's client, whatever the
/// answer, and asks to run again at once.
#[derive(Clone)]
struct Writer {
    client: Client,
    work: Duration,
    done: Arc<AtomicU64>,
}

#[async_trait]
impl Reconciler for Writer {
    type Object = ConfigMap;
    type Error = Failed;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        _: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Failed> {
        tokio::time::sleep(self.work).await;
        let configmaps: Api<ConfigMap> = Api::namespaced(self.client.clone(), "default");
        let object = serde_json::from_value(json!({"metadata": {"name": key.name}}))
            .map_err(|e| e.to_string())?;
        // A 409 (written before) or a 429 both end the reconcile: the answer is what counts.
        let _ = configmaps.create(&PostParams::default(), &object).await;
        self.done.fetch_add(1, Ordering::Relaxed);
        Ok(Action::requeue_after(Duration::ZERO))
    }
}

/// T8b: the pressure comes from the Manager's own request layer. The same I/O-bound load grows
/// the pool while the server answers; once every request gets a 429, it never grows and steps
/// down to the minimum.
#[tokio::test(start_paused = true)]
async fn reconciles_whose_writes_get_429s_do_not_grow_a_managers_workers() {
    for throttled in [false, true] {
        let server = server().await;
        let client = server.in_process_client();
        let mut manager = Manager::new(client.clone());
        let policy = AdaptiveWorkers::new(1, 32);
        let managed = manager
            .controller(Api::<ConfigMap>::namespaced(client, "default"))
            .config(Config::default().workers(2).adaptive_workers(policy))
            .build();
        let live = (*managed).clone();
        let writer = Writer {
            client: manager.client().clone(),
            work: Duration::from_millis(20),
            done: Arc::default(),
        };
        manager.add_controller(managed, writer.clone()).unwrap();
        let (stop, stopped) = shutdown();
        let run = tokio::spawn(manager.run_until(stopped));
        add_keys(live.queue(), "k", DEEP);
        eventually("reconciling", || writer.done.load(Ordering::Relaxed) > 0).await;
        if throttled {
            let failure = Failure::TooManyRequests { retry_after_seconds: 0 };
            server.faults().fail_next(usize::MAX / 2, failure);
        }

        let highest = highest_workers(&live, Duration::from_secs(20)).await;
        match throttled {
            false => assert!(highest > 2, "grows while the server answers: {highest}"),
            true => {
                assert_eq!(highest, 2, "never above the start count under 429s");
                assert_eq!(live.workers(), 1, "stepped down to the minimum");
            }
        }
        stop.send(()).unwrap();
        let _ = run.await.unwrap();
    }
}
