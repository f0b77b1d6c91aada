//! A chaos harness for leader election and rings, beside the seeded convergence harness:
//! replicas run as processes (this test binary, run again as one replica), a seeded writer
//! changes their objects, and a seeded schedule kills replicas (SIGKILL), stops them
//! gracefully (SIGTERM), starts new ones, freezes them whole past their lease duration
//! (SIGSTOP, then SIGCONT) and cuts their connections to the server (through a proxy of
//! each). A replica that exits (a lost Lease stops its manager) is started again, as a
//! kubelet would.
//!
//! - **Modes**: plain leader election (one leader reconciles), a ring of labels (a sharder on
//!   the elected leader labels the objects, each shard reconciles its own), a ring of shard
//!   selectors (each shard lists its hash ranges).
//! - **The replicas' reconciler** reads its cached object, takes a while (seeded: mostly
//!   milliseconds, some longer than a lease duration), and when the object's `data.ack`
//!   lags its `data.gen` writes `ack = gen` with an update that carries the resourceVersion
//!   it read. Every reconcile's start and end and every write is printed (JSON lines) with
//!   the replica, the key, the version read, the wall-clock instant.
//! - **Recorded by the harness**: every version of the Leases (holder, renew time, duration,
//!   views) and of the objects, as its own informers see them, and when it froze, resumed,
//!   cut and killed which replica.
//!
//! Once the schedule ends, everything is resumed and reopened, the writer stops, and the run
//! waits until every object's `ack` equals its `gen`. Then it checks, from the records:
//! - **no start without the Lease**: a replica starts a reconcile only while the Lease it
//!   runs under names it, by the Lease's own record (the last version whose renew time is
//!   before the start, and the start within its duration): the leader's Lease, or in a ring
//!   its shard's; in a ring of labels, the version it read is labelled to it; in a ring of
//!   shard selectors, a key another shard started moves only once that shard's acknowledged
//!   ring stopped giving it the key, or its Lease stopped being held;
//! - **no key reconciled by two replicas at once**, but for reconciles frozen across a
//!   pause, which are **reported** instead: each one that ended is counted by its replica's
//!   controller as having outlived its Lease, or was aborted (dropped unfinished);
//! - **no write lost**: every object's final `gen` is the last the writer wrote (a stale
//!   update that went through would have put an older one back), and its `ack` matches it.
//!
//! The same seed replays the same schedule, writes and reconcile lengths (their interleaving
//! with the processes is up to the machine). `CTRLKIT_CHAOS_SEEDS` and `CTRLKIT_CHAOS_SECONDS`
//! choose others.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use ctrlkit::cache::{Informer, ListWatch, ObjectKey, ResourceEventHandlerFuncs};
use ctrlkit::controller::{Action, Config, Reconciler};
use ctrlkit::leaderelection::{LeaderElectionConfig, LeaseLock};
use ctrlkit::manager::Manager;
use ctrlkit::sharding::{
    Assignment, HashRing, Ring, Sharder, fnv1a64, shard_label, view_annotation,
};
use ctrlkit_apiserver::harness::{Proxy, Target};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::{ListParams, Patch, PatchParams, PostParams};
use kube_client::config::{KubeConfigOptions, Kubeconfig};
use kube_client::{Api, Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::convergence::Rng;

/// The environment variable that makes this binary one replica (its value: a [`Spec`]).
pub const REPLICA_ENV: &str = "CTRLKIT_CHAOS_REPLICA";
/// The label of the harness's objects, whose value is the run's seed: runs of several seeds
/// share a namespace, each with objects, Leases and a ring of its own.
const OBJECT_LABEL: &str = "chaos.ctrlkit.dev/seed";
/// The leader's Lease of the run of `seed` (plain leader election; the sharder's in a ring of
/// labels).
fn leader_lease(seed: u64) -> String {
    format!("chaos-leader-{seed}")
}

/// The ring of the run of `seed`.
fn ring_name(seed: u64) -> String {
    format!("chaos-{seed}")
}

/// The objects of the run of `seed`.
fn selector(seed: u64) -> String {
    format!("{OBJECT_LABEL}={seed}")
}

/// How the replicas share the objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// One leader reconciles every object.
    Leader,
    /// A ring of labels: the sharder (on the leader) labels, each shard reconciles its own.
    Labels,
    /// A ring of shard selectors: each shard lists its hash ranges.
    Selectors,
}

/// What one replica process runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    pub mode: Mode,
    pub id: String,
    pub kubeconfig: String,
    pub namespace: String,
    pub seed: u64,
    pub lease_ms: u64,
    pub renew_ms: u64,
    pub retry_ms: u64,
    /// Percent of reconciles that take longer than a lease duration.
    pub long_percent: u64,
}

impl Spec {
    fn timing(&self) -> LeaderElectionConfig {
        let mut timing = LeaderElectionConfig::default();
        timing.lease_duration = Duration::from_millis(self.lease_ms);
        timing.renew_deadline = Duration::from_millis(self.renew_ms);
        timing.retry_period = Duration::from_millis(self.retry_ms);
        timing
    }

    fn ring(&self) -> Ring {
        let assignment = match self.mode {
            Mode::Selectors => Assignment::ShardSelectors,
            _ => Assignment::Labels,
        };
        Ring::new(&ring_name(self.seed))
            .namespace(&self.namespace)
            .lease_config(self.timing())
            .assignment(assignment)
    }
}

/// Microseconds since the epoch, the clock every process of the run shares.
fn now_us() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    since.as_micros().try_into().unwrap_or(i64::MAX)
}

/// A deterministic hash of anything hashable, mixed with the seed.
fn hash_of(seed: u64, value: impl std::hash::Hash) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one((seed, value))
}

/// What a replica prints, one JSON object a line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "lowercase")]
enum Event {
    /// A reconcile started: the key, the version it read and its shard label, if any.
    Start { key: String, rv: u64, label: Option<String>, t: i64 },
    /// It ended: finished, or dropped unfinished (aborted).
    End { key: String, finished: bool, t: i64 },
    /// It wrote `ack` over the version it read: the answer's code (0: no answer).
    Write { key: String, rv: u64, code: u16, t: i64 },
    /// The controller reported a reconcile that outlived its Lease (its error log line).
    Outlived { t: i64 },
    /// The manager stopped with an error.
    Exit { error: String, t: i64 },
}

fn emit(event: &Event) {
    // Stdout is line-buffered: a line is out whole before a SIGKILL can come after it.
    println!("{}", serde_json::to_string(event).expect("an event serializes"));
}

/// Emits the end of a reconcile when dropped: finished, or dropped unfinished.
struct EndGuard {
    key: String,
    finished: bool,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        emit(&Event::End { key: self.key.clone(), finished: self.finished, t: now_us() });
    }
}

/// The replicas' reconciler; see the module docs.
struct Chaos {
    spec: Spec,
    api: Api<ConfigMap>,
}

#[async_trait]
impl Reconciler for Chaos {
    type Object = ConfigMap;
    type Error = std::convert::Infallible;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        object: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Self::Error> {
        let Some(object) = object else { return Ok(Action::done()) };
        let t = now_us();
        let rv: u64 = object.resource_version().and_then(|rv| rv.parse().ok()).unwrap_or(0);
        let label = object.labels().get(&shard_label(&ring_name(self.spec.seed))).cloned();
        emit(&Event::Start { key: key.name.clone(), rv, label, t });
        let mut end = EndGuard { key: key.name.clone(), finished: false };
        let draw = hash_of(self.spec.seed, (&key.name, rv, &self.spec.id)) % 100;
        let length = match draw < self.spec.long_percent {
            true => Duration::from_millis(self.spec.lease_ms * 3 / 2),
            false => Duration::from_millis(5 + draw % 40),
        };
        tokio::time::sleep(length).await;
        let data = object.data.clone().unwrap_or_default();
        let generation = data.get("gen").cloned().unwrap_or_default();
        if data.get("ack") != Some(&generation) {
            let mut updated = (*object).clone();
            updated.data.get_or_insert_with(Default::default).insert("ack".into(), generation);
            let code = match self.api.replace(&key.name, &PostParams::default(), &updated).await {
                Ok(_) => 200,
                Err(kube_client::Error::Api(status)) => status.code,
                Err(_) => 0,
            };
            emit(&Event::Write { key: key.name.clone(), rv, code, t: now_us() });
        }
        end.finished = true;
        Ok(Action::done())
    }
}

/// Prints an [`Event::Outlived`] for each reconcile the controller reports as having
/// outlived its Lease, as the report is logged (a kill right after cannot lose it).
struct Reports;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Reports {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        if *event.metadata().level() != tracing::Level::ERROR {
            return;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        if message.0.contains("this reconcile ended after the replica's") {
            emit(&Event::Outlived { t: now_us() });
        }
    }
}

/// Runs one replica as `spec` says, until SIGTERM (exit 0) or a failure (exit 1).
pub fn replica_main(spec: &str) -> ExitCode {
    let spec: Spec = match serde_json::from_str(spec) {
        Ok(spec) => spec,
        Err(err) => {
            eprintln!("{REPLICA_ENV}: {err}");
            return ExitCode::from(2);
        }
    };
    use tracing_subscriber::layer::SubscriberExt;
    let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Reports));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run_replica(spec)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            emit(&Event::Exit { error, t: now_us() });
            ExitCode::FAILURE
        }
    }
}

async fn run_replica(spec: Spec) -> Result<(), String> {
    let kubeconfig = Kubeconfig::read_from(&spec.kubeconfig).map_err(|e| e.to_string())?;
    let config =
        kube_client::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| e.to_string())?;
    let client = Client::try_from(config).map_err(|e| e.to_string())?;
    let ns = spec.namespace.as_str();
    let mut builder =
        Manager::builder(client.clone()).graceful_shutdown_timeout(Duration::from_secs(5));
    if spec.mode != Mode::Selectors {
        let lock = LeaseLock::new(client.clone(), ns, &leader_lease(spec.seed), &spec.id);
        builder = builder.leader_election(lock, spec.timing());
    }
    if spec.mode != Mode::Leader {
        builder = builder.sharding(spec.ring(), &spec.id);
    }
    let mut manager = builder.build();
    if spec.mode == Mode::Labels {
        manager.add(Sharder::<ConfigMap>::new(client.clone(), spec.ring(), Some(ns)));
    }
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let objects = ListWatch::new(api.clone()).labels(&selector(spec.seed));
    let controller = manager.controller(objects).config(Config::default().workers(3)).build();
    manager.add_controller(controller, Chaos { spec, api }).map_err(|e| e.to_string())?;
    manager.run().await.map_err(|e| e.to_string())
}

/// What one run does.
#[derive(Debug, Clone)]
pub struct Settings {
    pub mode: Mode,
    /// Replays a run: the same schedule, writes and reconcile lengths.
    pub seed: u64,
    /// Replicas at the start, and the most that run at once.
    pub replicas: usize,
    pub max_replicas: usize,
    pub objects: usize,
    /// How long the schedule runs.
    pub chaos: Duration,
    /// An event of the schedule every this long, on average.
    pub every: Duration,
    /// A write every this long.
    pub write_every: Duration,
    /// The Leases' timing, in milliseconds: duration, renew deadline, retry period.
    pub lease_ms: (u64, u64, u64),
    pub long_percent: u64,
    /// The events the schedule may draw: `kill`, `stop`, `join`, `pause`, `cut`, `roll`.
    pub events: Vec<String>,
    /// How long convergence may take once the schedule ended.
    pub settle: Duration,
}

/// What a run did and found.
#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub mode: Option<Mode>,
    /// Replica processes started in all.
    pub replicas: usize,
    pub reconciles: usize,
    pub writes: usize,
    pub conflicts: usize,
    pub kills: usize,
    pub stops: usize,
    pub joins: usize,
    /// Rolling updates: a replica started as another stopped.
    pub rolls: usize,
    pub pauses: usize,
    pub cuts: usize,
    /// Replicas that exited on their own (a lost Lease) and were started again.
    pub exits: usize,
    /// Reconciles frozen across a pause, and how many of them their replica reported.
    pub frozen: usize,
    pub reported: usize,
    /// The writer's writes.
    pub mutations: usize,
    /// From the end of the schedule to convergence (or the deadline).
    pub converging: Duration,
    pub violations: Vec<String>,
}

impl Report {
    /// Panics with the seed and the violations, unless there are none.
    pub fn assert_clean(&self) {
        let shown: Vec<&String> = self.violations.iter().take(10).collect();
        assert!(
            self.violations.is_empty(),
            "{} violations (replay with seed {}): {shown:#?}\n{self:?}",
            self.violations.len(),
            self.seed
        );
    }
}

/// One replica process, its proxy and what it printed.
struct Replica {
    id: String,
    child: Child,
    proxy: Proxy,
    events: Arc<Mutex<Vec<Event>>>,
    reader: tokio::task::JoinHandle<()>,
    /// When it was frozen (SIGSTOP), until it is resumed.
    frozen: Option<i64>,
    /// When its connections were cut, until they are opened again.
    cut: Option<(tokio::time::Instant, i64)>,
}

/// What the harness did to a replica, and when.
#[derive(Debug, Clone)]
enum Done {
    Killed { id: String, t: i64 },
    Paused { id: String, from: i64, to: i64 },
    Cut { id: String, from: i64, to: i64 },
    Stopped { id: String, t: i64 },
}

impl Done {
    fn of(&self) -> &str {
        match self {
            Done::Killed { id, .. }
            | Done::Paused { id, .. }
            | Done::Cut { id, .. }
            | Done::Stopped { id, .. } => id,
        }
    }
}

/// A Lease version as the harness saw it.
#[derive(Debug, Clone)]
struct LeaseVersion {
    name: String,
    rv: u64,
    holder: String,
    renewed: i64,
    duration_us: i64,
    /// The ring its shard says it serves (a ring of shard selectors), sorted members.
    view: Option<String>,
    /// When the harness saw it.
    seen: i64,
}

/// Signals `pid` with `signal` (`-STOP`, `-CONT`, `-KILL`, `-TERM`).
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill").args([signal, &pid.to_string()]).status();
    assert!(status.is_ok_and(|s| s.success()), "kill {signal} {pid}");
}

struct Run<'a> {
    t: &'a Target,
    settings: Settings,
    rng: Rng,
    next_id: usize,
    replicas: Vec<Replica>,
    /// Every replica's events, by id, once it is gone.
    gone: Vec<(String, Vec<Event>)>,
    done: Vec<Done>,
    report: Report,
}

impl Run<'_> {
    /// Starts a new replica process behind a proxy of its own.
    async fn spawn(&mut self) {
        let id = format!("s{}-r{}", self.settings.seed, self.next_id);
        self.next_id += 1;
        let url = self.t.config().cluster_url;
        let upstream: std::net::SocketAddr =
            format!("{}:{}", url.host().expect("a host"), url.port_u16().unwrap_or(443))
                .parse()
                .expect("the server is at an IP address");
        let proxy = Proxy::start(upstream).await;
        // The case's kubeconfig, with the proxy as the server (JSON is YAML).
        let mut kubeconfig = Kubeconfig::read_from(self.t.kubeconfig()).expect("the kubeconfig");
        let proxied = format!("{}://{}", url.scheme_str().unwrap_or("https"), proxy.addr());
        for cluster in &mut kubeconfig.clusters {
            if let Some(cluster) = cluster.cluster.as_mut() {
                cluster.server = Some(proxied.clone());
            }
        }
        let path = self.t.dir().join(format!("{id}.kubeconfig"));
        std::fs::write(&path, serde_json::to_string(&kubeconfig).unwrap()).unwrap();
        let (lease_ms, renew_ms, retry_ms) = self.settings.lease_ms;
        let spec = Spec {
            mode: self.settings.mode,
            id: id.clone(),
            kubeconfig: path.display().to_string(),
            namespace: self.t.ns.clone(),
            seed: self.settings.seed,
            lease_ms,
            renew_ms,
            retry_ms,
            long_percent: self.settings.long_percent,
        };
        let mut child = Command::new(std::env::current_exe().expect("this binary"))
            .env(REPLICA_ENV, serde_json::to_string(&spec).unwrap())
            .env("RUST_LOG", "off")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("a replica starts");
        let events: Arc<Mutex<Vec<Event>>> = Arc::default();
        let stdout = child.stdout.take().unwrap();
        let sink = events.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(event) = serde_json::from_str(&line) {
                    sink.lock().unwrap().push(event);
                }
            }
        });
        self.report.replicas += 1;
        self.replicas.push(Replica { id, child, proxy, events, reader, frozen: None, cut: None });
    }

    /// Takes replica `i` out of the run, its events kept.
    async fn retire(&mut self, i: usize) {
        let mut replica = self.replicas.remove(i);
        let _ = replica.child.wait().await;
        let _ = (&mut replica.reader).await;
        let events = std::mem::take(&mut *replica.events.lock().unwrap());
        self.gone.push((replica.id, events));
    }

    /// Replicas that run, neither frozen nor cut off.
    fn healthy(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|i| self.replicas[*i].frozen.is_none() && self.replicas[*i].cut.is_none())
            .collect()
    }

    /// Resumes a frozen replica, reopens a cut one, restarts those that exited.
    async fn tend(&mut self, pause: Duration, cut: Duration) {
        let now = tokio::time::Instant::now();
        for replica in &mut self.replicas {
            if let Some(from) = replica.frozen
                && now_us() - from >= pause.as_micros() as i64
            {
                // Stamped before the signal: the replica runs again as soon as it arrives.
                let to = now_us();
                signal(replica.child.id().expect("a frozen replica lives"), "-CONT");
                self.done.push(Done::Paused { id: replica.id.clone(), from, to });
                replica.frozen = None;
            }
            if let Some((at, from)) = replica.cut
                && now - at >= cut
            {
                replica.proxy.open();
                self.done.push(Done::Cut { id: replica.id.clone(), from, to: now_us() });
                replica.cut = None;
            }
        }
        let mut i = 0;
        while i < self.replicas.len() {
            if matches!(self.replicas[i].child.try_wait(), Ok(Some(_))) {
                self.retire(i).await;
                self.report.exits += 1;
                self.spawn().await;
            } else {
                i += 1;
            }
        }
    }

    /// One event of the schedule (of those `settings.events` allows).
    async fn act(&mut self) {
        let healthy = self.healthy();
        let pick = |rng: &mut Rng| healthy[rng.below(healthy.len() as u64) as usize];
        let event = self.rng.below(7);
        let allowed = ["kill", "stop", "join", "pause", "pause", "cut", "roll"][event as usize];
        if !self.settings.events.iter().any(|e| e == allowed) {
            return;
        }
        match event {
            0 if healthy.len() > 1 => {
                let i = pick(&mut self.rng);
                let pid = self.replicas[i].child.id().expect("alive");
                signal(pid, "-KILL");
                self.done.push(Done::Killed { id: self.replicas[i].id.clone(), t: now_us() });
                self.report.kills += 1;
                self.retire(i).await;
                self.spawn().await;
            }
            1 if healthy.len() > 1 => {
                let i = pick(&mut self.rng);
                signal(self.replicas[i].child.id().expect("alive"), "-TERM");
                self.done.push(Done::Stopped { id: self.replicas[i].id.clone(), t: now_us() });
                let stopped =
                    tokio::time::timeout(Duration::from_secs(20), self.replicas[i].child.wait())
                        .await;
                assert!(stopped.is_ok(), "{} did not stop within 20 s", self.replicas[i].id);
                self.report.stops += 1;
                self.retire(i).await;
                self.spawn().await;
            }
            2 if self.replicas.len() < self.settings.max_replicas => {
                self.report.joins += 1;
                self.spawn().await;
            }
            3 | 4 if !healthy.is_empty() => {
                let i = pick(&mut self.rng);
                // Stamped before the signal: what started before it may be frozen by it.
                let from = now_us();
                signal(self.replicas[i].child.id().expect("alive"), "-STOP");
                self.replicas[i].frozen = Some(from);
                self.report.pauses += 1;
            }
            6 if healthy.len() > 1 => {
                // A rolling update: a new replica starts as an old one stops gracefully, so
                // that the others see one shard leave and one join at about once.
                let i = pick(&mut self.rng);
                let pid = self.replicas[i].child.id().expect("alive");
                self.spawn().await;
                signal(pid, "-TERM");
                self.done.push(Done::Stopped { id: self.replicas[i].id.clone(), t: now_us() });
                let stopped =
                    tokio::time::timeout(Duration::from_secs(20), self.replicas[i].child.wait())
                        .await;
                assert!(stopped.is_ok(), "{} did not stop within 20 s", self.replicas[i].id);
                self.report.rolls += 1;
                self.retire(i).await;
            }
            5 if !healthy.is_empty() => {
                let i = pick(&mut self.rng);
                self.replicas[i].proxy.refuse();
                self.replicas[i].cut = Some((tokio::time::Instant::now(), now_us()));
                self.report.cuts += 1;
            }
            _ => {}
        }
    }
}

/// Records every version of the Leases and objects the harness's informers see.
#[derive(Default)]
struct Records {
    leases: Mutex<Vec<LeaseVersion>>,
    /// Each object's `gen` by version, as seen.
    gens: Mutex<BTreeMap<String, Vec<(u64, u64)>>>,
    /// Each object's uid (they are never created again).
    uids: Mutex<HashMap<String, String>>,
}

fn micros(time: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>) -> i64 {
    time.map_or(0, |t| t.0.as_microsecond())
}

fn record_lease(records: &Records, lease: &Lease) {
    let spec = lease.spec.clone().unwrap_or_default();
    let version = LeaseVersion {
        name: lease.name_any(),
        rv: lease.resource_version().and_then(|rv| rv.parse().ok()).unwrap_or(0),
        holder: spec.holder_identity.unwrap_or_default(),
        renewed: micros(spec.renew_time.as_ref()),
        duration_us: i64::from(spec.lease_duration_seconds.unwrap_or(0)) * 1_000_000,
        view: lease.annotations().get(&view_annotation("configmaps")).cloned(),
        seen: now_us(),
    };
    records.leases.lock().unwrap().push(version);
}

fn record_object(records: &Records, object: &ConfigMap) {
    let rv = object.resource_version().and_then(|rv| rv.parse().ok()).unwrap_or(0);
    let generation = object.data.as_ref().and_then(|d| d.get("gen")?.parse().ok()).unwrap_or(0);
    records.gens.lock().unwrap().entry(object.name_any()).or_default().push((rv, generation));
    if let Some(uid) = object.uid() {
        records.uids.lock().unwrap().insert(object.name_any(), uid);
    }
}

/// Runs the harness on `t` as `settings` say; see the module docs.
pub async fn run(t: &Target, settings: Settings) -> Report {
    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    for i in 0..settings.objects {
        let object = json!({
            "metadata": {
                "name": format!("s{}-obj-{i}", settings.seed),
                "labels": { OBJECT_LABEL: settings.seed.to_string() },
            },
            "data": { "gen": "0" },
        });
        let object = serde_json::from_value(object).unwrap();
        configmaps.create(&PostParams::default(), &object).await.expect("an object");
    }
    let records = Arc::new(Records::default());
    let leases = Informer::new(ListWatch::new(Api::<Lease>::namespaced(t.client.clone(), &t.ns)));
    let (a, u) = (records.clone(), records.clone());
    leases.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .on_add(move |l: &Arc<Lease>| record_lease(&a, l))
            .on_update(move |_, l: &Arc<Lease>| record_lease(&u, l)),
    );
    let objects =
        Informer::new(ListWatch::new(configmaps.clone()).labels(&selector(settings.seed)));
    let (a, u) = (records.clone(), records.clone());
    objects.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .on_add(move |o: &Arc<ConfigMap>| record_object(&a, o))
            .on_update(move |_, o: &Arc<ConfigMap>| record_object(&u, o)),
    );
    let (stop_informers, stopped) = tokio::sync::watch::channel(false);
    let until = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let leases_run = {
        let leases = leases.clone();
        tokio::spawn(async move { leases.run(until(stopped.clone())).await })
    };
    let objects_run = {
        let objects = objects.clone();
        let stopped = stop_informers.subscribe();
        tokio::spawn(async move { objects.run(until(stopped)).await })
    };

    let mut run = Run {
        t,
        rng: Rng::new(settings.seed),
        settings: settings.clone(),
        next_id: 0,
        replicas: Vec::new(),
        gone: Vec::new(),
        done: Vec::new(),
        report: Report { seed: settings.seed, mode: Some(settings.mode), ..Report::default() },
    };
    for _ in 0..settings.replicas {
        run.spawn().await;
    }
    let written: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let mutations = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // The writer stops between writes, so that its last write of each object is known.
    let writer_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (api, written, seed) = (configmaps.clone(), written.clone(), settings.seed);
        let count = mutations.clone();
        let stopping = writer_stop.clone();
        let (objects, every) = (settings.objects as u64, settings.write_every);
        tokio::spawn(async move {
            let mut rng = Rng::new(seed ^ 0x5eed);
            for generation in 1.. {
                if stopping.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let name = format!("s{seed}-obj-{}", rng.below(objects));
                let patch = Patch::Merge(json!({ "data": { "gen": generation.to_string() } }));
                // Retried until it lands: the writer's last generation of each object is known.
                while api.patch(&name, &PatchParams::default(), &patch).await.is_err() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                written.lock().unwrap().insert(name, generation);
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(every).await;
            }
        })
    };
    let lease = Duration::from_millis(settings.lease_ms.0);
    // A pause outlasts the lease duration; a cut outlasts the renew deadline.
    let (pause, cut) = (lease * 2, lease * 3 / 2);
    let end = tokio::time::Instant::now() + settings.chaos;
    while tokio::time::Instant::now() < end {
        let wait = settings.every.mul_f64(0.5 + run.rng.below(100) as f64 / 100.0);
        tokio::time::sleep(wait).await;
        run.tend(pause, cut).await;
        run.act().await;
    }
    // Everything resumed and reopened.
    run.tend(Duration::ZERO, Duration::ZERO).await;
    writer_stop.store(true, std::sync::atomic::Ordering::SeqCst);
    writer.await.expect("the writer stops");
    run.report.mutations = mutations.load(std::sync::atomic::Ordering::Relaxed);
    let settling = tokio::time::Instant::now();
    let mut behind = Vec::new();
    while settling.elapsed() < settings.settle {
        run.tend(Duration::ZERO, Duration::ZERO).await;
        let listed = configmaps.list(&ListParams::default().labels(&selector(settings.seed))).await;
        if let Ok(list) = listed {
            let written = written.lock().unwrap().clone();
            behind = list
                .items
                .iter()
                .filter_map(|o| {
                    let data = o.data.clone().unwrap_or_default();
                    let want = written.get(&o.name_any()).copied().unwrap_or(0).to_string();
                    let ok = data.get("gen") == Some(&want) && data.get("ack") == Some(&want);
                    (!ok).then(|| {
                        format!(
                            "{}: generation {:?} ack {:?}, last written {want}",
                            o.name_any(),
                            data.get("gen"),
                            data.get("ack")
                        )
                    })
                })
                .collect();
            if behind.is_empty() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    run.report.converging = settling.elapsed();
    for replica in &run.replicas {
        signal(replica.child.id().expect("alive"), "-TERM");
    }
    while !run.replicas.is_empty() {
        let _ = tokio::time::timeout(Duration::from_secs(20), run.replicas[0].child.wait()).await;
        run.retire(0).await;
    }
    stop_informers.send_replace(true);
    let _ = (leases_run.await, objects_run.await);
    let mut report = std::mem::take(&mut run.report);
    report.violations.extend(behind.into_iter().map(|b| format!("not converged: {b}")));
    check(&settings, &run.gone, &run.done, &records, &mut report);
    report
}

/// How long around an instant the harness looks at Leases' views: its watch sees a change
/// some milliseconds after the replicas do.
const VIEW_MARGIN_US: i64 = 500_000;

/// Whether the Lease versions of `shard` seen from `from` to `to` (and the one standing at
/// `from`) all say it serves a ring that gives it `place`.
fn claims_throughout(
    versions: &[LeaseVersion],
    shard: &str,
    place: u64,
    from: i64,
    to: i64,
) -> bool {
    let claims = |v: &LeaseVersion| {
        v.view.as_deref().is_some_and(|view| {
            let ring = HashRing::new(view.split(',').filter(|s| !s.is_empty()));
            ring.hash_ranges(shard).contains(place)
        })
    };
    let standing = versions.iter().filter(|v| v.seen <= from).max_by_key(|v| v.rv);
    standing.is_some_and(claims)
        && versions.iter().filter(|v| v.seen > from && v.seen <= to).all(claims)
}

/// The reconciles of one replica: start, end (`None`: never ended), the version read, the
/// label read, whether it finished.
struct Reconcile<'a> {
    replica: &'a str,
    key: &'a str,
    rv: u64,
    label: Option<&'a String>,
    start: i64,
    end: Option<i64>,
    finished: bool,
}

/// The checks of the module docs, from the records.
fn check(
    settings: &Settings,
    replicas: &[(String, Vec<Event>)],
    done: &[Done],
    records: &Records,
    report: &mut Report,
) {
    let mut leases: HashMap<String, Vec<LeaseVersion>> = HashMap::new();
    for version in records.leases.lock().unwrap().iter() {
        leases.entry(version.name.clone()).or_default().push(version.clone());
    }
    for versions in leases.values_mut() {
        versions.sort_by_key(|v| v.rv);
        versions.dedup_by_key(|v| v.rv);
    }
    // Whether `who` holds the Lease `name` at `t`, by the Lease's records.
    let holds = |name: &str, who: &str, t: i64| -> Result<(), String> {
        let versions = leases.get(name).map(Vec::as_slice).unwrap_or_default();
        let Some(last) = versions.iter().filter(|v| v.renewed <= t).max_by_key(|v| v.rv) else {
            return Err(format!("no version of the Lease {name} before"));
        };
        if last.holder != who {
            return Err(format!("the Lease {name} names {:?} (rv {})", last.holder, last.rv));
        }
        if t >= last.renewed + last.duration_us {
            let late = (t - last.renewed - last.duration_us) as f64 / 1e6;
            return Err(format!("the Lease {name} expired {late:.3} s before (rv {})", last.rv));
        }
        Ok(())
    };
    let mut all: Vec<Reconcile> = Vec::new();
    for (id, events) in replicas {
        let killed = done.iter().find_map(|d| match d {
            Done::Killed { id: k, t } if k == id => Some(*t),
            _ => None,
        });
        let mut open: HashMap<&str, usize> = HashMap::new();
        let mut outlived = 0;
        let first = all.len();
        for event in events {
            match event {
                Event::Start { key, rv, label, t } => {
                    open.insert(key, all.len());
                    all.push(Reconcile {
                        replica: id,
                        key,
                        rv: *rv,
                        label: label.as_ref(),
                        start: *t,
                        end: None,
                        finished: false,
                    });
                }
                Event::End { key, finished, t } => {
                    if let Some(i) = open.remove(key.as_str()) {
                        all[i].end = Some(*t);
                        all[i].finished = *finished;
                    }
                }
                Event::Write { code, .. } => {
                    report.writes += 1;
                    report.conflicts += usize::from(*code == 409);
                }
                Event::Outlived { .. } => outlived += 1,
                Event::Exit { .. } => {}
            }
        }
        // A killed replica's open reconciles ended with it.
        for reconcile in &mut all[first..] {
            if reconcile.end.is_none() {
                reconcile.end = killed;
            }
        }
        // Reconciles frozen across a pause past the lease duration: reported (counted as
        // outliving the Lease) when they finished, or dropped unfinished by the manager's
        // fencing. (The last pauses of the schedule may be cut short when it ends.)
        let lease = settings.lease_ms.0 as i64 * 1000;
        let pauses: Vec<(i64, i64)> = done
            .iter()
            .filter_map(|d| match d {
                Done::Paused { id: p, from, to } if p == id && to - from >= lease => {
                    Some((*from, *to))
                }
                _ => None,
            })
            .collect();
        let frozen: Vec<&Reconcile> = all[first..]
            .iter()
            .filter(|r| {
                pauses.iter().any(|(from, to)| r.start < *from && r.end.is_none_or(|e| e > *to))
            })
            .collect();
        let finished = frozen.iter().filter(|r| r.finished).count();
        report.frozen += frozen.len();
        report.reported += (frozen.len() - finished) + finished.min(outlived);
        if finished > outlived {
            report.violations.push(format!(
                "{id}: {finished} reconciles frozen across a pause finished, {outlived} reported"
            ));
        }
    }
    report.reconciles = all.len();
    let leader_lease = leader_lease(settings.seed);
    // In flight at some instant of a pause of its replica.
    let spanned_pause = |r: &Reconcile| {
        done.iter().any(|d| match d {
            Done::Paused { id, from, to } => {
                id == r.replica && r.start < *to && r.end.is_none_or(|e| e > *from)
            }
            _ => false,
        })
    };
    for r in &all {
        // No start without the Lease it runs under.
        let name = match settings.mode {
            Mode::Leader => &leader_lease,
            _ => r.replica,
        };
        if let Err(why) = holds(name, r.replica, r.start) {
            report
                .violations
                .push(format!("{} started {} at {}: {why}", r.replica, r.key, r.start));
        }
        if settings.mode == Mode::Labels && r.label.map(String::as_str) != Some(r.replica) {
            report.violations.push(format!(
                "{} started {} (rv {}) labelled {:?}",
                r.replica, r.key, r.rv, r.label
            ));
        }
    }
    // In a ring of shard selectors, a key moves from a shard that started it only once that
    // shard's acknowledged ring no longer gives it the key, or its Lease is no longer held.
    if settings.mode == Mode::Selectors {
        let uids = records.uids.lock().unwrap();
        for r in &all {
            let Some(place) = uids.get(r.key).map(|uid| fnv1a64(uid.as_bytes())) else {
                continue;
            };
            let holder = all
                .iter()
                .filter(|s| s.key == r.key && s.replica != r.replica && s.start < r.start)
                .max_by_key(|s| s.start);
            let Some(s) = holder else { continue };
            let versions = leases.get(s.replica).map(Vec::as_slice).unwrap_or_default();
            let (from, to) = (s.start - VIEW_MARGIN_US, r.start + VIEW_MARGIN_US);
            if claims_throughout(versions, s.replica, place, from, to)
                && holds(s.replica, s.replica, r.start).is_ok()
            {
                report.violations.push(format!(
                    "{} started {} at {}, held by {} (started at {}; its ring and Lease unchanged since)",
                    r.replica, r.key, r.start, s.replica, s.start
                ));
            }
        }
    }
    // No key reconciled by two replicas at once (but across a pause, reported above).
    let mut by_key: HashMap<&str, Vec<&Reconcile>> = HashMap::new();
    for r in all.iter().filter(|r| !spanned_pause(r)) {
        by_key.entry(r.key).or_default().push(r);
    }
    for (key, runs) in by_key {
        for (i, a) in runs.iter().enumerate() {
            for b in &runs[i + 1..] {
                let apart =
                    a.end.is_some_and(|e| e <= b.start) || b.end.is_some_and(|e| e <= a.start);
                if a.replica != b.replica && !apart {
                    let fate = |id: &str| -> Vec<String> {
                        done.iter().filter(|d| d.of() == id).map(|d| format!("{d:?}")).collect()
                    };
                    report.violations.push(format!(
                        "{key} reconciled by {} ({}..{:?}, {:?}) and {} ({}..{:?}, {:?}) at once",
                        a.replica,
                        a.start,
                        a.end,
                        fate(a.replica),
                        b.replica,
                        b.start,
                        b.end,
                        fate(b.replica)
                    ));
                }
            }
        }
    }
    // Every object's generation only went forward.
    for (name, versions) in records.gens.lock().unwrap().iter() {
        let mut versions = versions.clone();
        versions.sort();
        versions.dedup();
        for pair in versions.windows(2) {
            if pair[1].1 < pair[0].1 {
                report.violations.push(format!(
                    "{name}: generation went back from {} (rv {}) to {} (rv {}): a write was lost",
                    pair[0].1, pair[0].0, pair[1].1, pair[1].0
                ));
            }
        }
    }
}
