//! The sharding bench: one controller's objects shared by 1 to 4 replicas of a ring, each a
//! process of its own, on the embedded API server. Not a criterion bench: each figure is one
//! scenario of tens of seconds, run three times (the medians are printed).
//!
//! `cargo bench --bench sharding [-- OBJECTS ROUNDS]` (default 10,000 ConfigMaps, 3 rounds;
//! about 15 minutes on a 2-core machine). Writes the throughput chart to
//! `docs/sharding-throughput.svg`. To look into one scenario: `CTRLKIT_BENCH_ONLY=<replicas>`
//! runs it alone, `CTRLKIT_BENCH_LOGS=<dir>` keeps each replica's log there, and
//! `CTRLKIT_BENCH_REPLICA_LOG` is their log filter (`warn` by default).
//!
//! Each replica is this binary run again (`CTRLKIT_BENCH_REPLICA=<shard id>`), written as an
//! operator writes one: a Manager with leader election (for the [`Sharder`], which runs on the
//! leader) and `sharding(ring, id)`, a controller from `manager.controller(api)` with 4
//! workers and every other setting at its default, and a reconciler that awaits 20 ms (an API
//! call's latency). It prints a line as each reconcile starts and ends (wall-clock
//! microseconds: one clock for every process of the machine) and its cache's size twice a
//! second. The bench process holds the server and the writer, and reads those lines.
//!
//! A scenario of `n` replicas, on a fresh server with OBJECTS unlabelled ConfigMaps:
//! - **cold start**: the `n` processes start together; the time until every object has been
//!   reconciled once (the sharder labels them as the shards' Leases appear);
//! - **churn**: a writer patches the objects round-robin at 1,000 a second (above what 4
//!   replicas can reconcile: 4 × 4 workers / 20 ms = 800 a second), so every queue stays full;
//!   reconciles a second over 10 s, after 3 s of warming up; it writes on to the end;
//! - the replicas' **cached objects** and **peak RSS** (`VmHWM`), each process's own;
//! - for `n < 4`, a **join**: one more replica starts; the objects whose shard label changed,
//!   and the time until every object is labelled to its shard on the ring of the `n + 1`
//!   ready members; then that replica's **graceful leave** (SIGTERM), the time until every
//!   object is back on the ring of `n`;
//! - for `n > 1`, a **kill** (SIGKILL) of a replica that is not the sharder's leader, the time
//!   until every object is on the ring of the others (a lease duration, 15 s, at the least);
//! - **overlaps**: any key two replicas reconciled at once, over the whole scenario (a killed
//!   replica's reconcile in flight counts until the kill). Must be 0.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use ctrlkit::cache::ObjectKey;
use ctrlkit::controller::{Action, Config, Reconciler};
use ctrlkit::leaderelection::{LeaderElectionConfig, LeaseLock};
use ctrlkit::manager::Manager;
use ctrlkit::sharding::{HashRing, Ring, Sharder, ring_key, shard_label};
use ctrlkit_apiserver::ApiServer;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::{ListParams, Patch, PatchParams, PostParams};
use kube_client::{Api, Client, ResourceExt};
use tokio::time::Instant;

#[allow(dead_code)] // the pod fixtures serve the other benches
#[path = "../apiserver/benches/support/mod.rs"]
mod support;

const RING: &str = "bench";
const NAMESPACE: &str = "default";
const SHARDER_LEASE: &str = "bench-sharder";
const RECONCILE: Duration = Duration::from_millis(20);
const WORKERS: usize = 4;
const CHURN_PER_SECOND: u64 = 1_000;
const MAX_REPLICAS: usize = 4;

fn now_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_micros() as u64
}

fn main() {
    if let Ok(id) = std::env::var("CTRLKIT_BENCH_REPLICA") {
        return replica_main(&id);
    }
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let arg =
        |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (objects, rounds) = (arg(0, 10_000), arg(1, 3));
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let mut results: BTreeMap<usize, Vec<Scenario>> = BTreeMap::new();
    for round in 1..=rounds {
        // `CTRLKIT_BENCH_ONLY=<n>` runs the scenario of n replicas alone (to look into one).
        let only: Option<usize> =
            std::env::var("CTRLKIT_BENCH_ONLY").ok().and_then(|n| n.parse().ok());
        for n in (1..=MAX_REPLICAS).filter(|n| only.is_none_or(|only| only == *n)) {
            let scenario = runtime.block_on(scenario(n, objects));
            eprintln!("round {round}, {n} replica(s): {scenario:?}");
            results.entry(n).or_default().push(scenario);
        }
    }
    report(objects, &results);
}

// ---- a replica -------------------------------------------------------------------------

/// Writes each line to stdout as it comes, from a thread of its own: a reconcile never waits
/// on the pipe (a full pipe would block the runtime's threads, and with them the Lease's
/// renewals), and each line is written whole as soon as that thread gets to it.
fn say(line: String) {
    static LINES: std::sync::OnceLock<std::sync::mpsc::Sender<String>> = std::sync::OnceLock::new();
    let lines = LINES.get_or_init(|| {
        let (send, receive) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            let mut out = std::io::stdout().lock();
            for line in receive {
                let _ = writeln!(out, "{line}");
            }
        });
        send
    });
    let _ = lines.send(line);
}

struct Sleeper;

#[async_trait]
impl Reconciler for Sleeper {
    type Object = ConfigMap;
    type Error = std::convert::Infallible;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        _: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Self::Error> {
        say(format!("s {} {}", key.name, now_micros()));
        tokio::time::sleep(RECONCILE).await;
        say(format!("e {} {}", key.name, now_micros()));
        Ok(Action::done())
    }
}

fn replica_main(id: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let kubeconfig = std::env::var("CTRLKIT_BENCH_KUBECONFIG").expect("CTRLKIT_BENCH_KUBECONFIG");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let kubeconfig = kube_client::config::Kubeconfig::read_from(&kubeconfig).unwrap();
        let options = kube_client::config::KubeConfigOptions::default();
        let config =
            kube_client::Config::from_custom_kubeconfig(kubeconfig, &options).await.unwrap();
        let client = Client::try_from(config).unwrap();
        let ring = Ring::new(RING).namespace(NAMESPACE);
        let lock = LeaseLock::new(client.clone(), NAMESPACE, SHARDER_LEASE, id);
        let mut manager = Manager::builder(client.clone())
            .leader_election(lock, LeaderElectionConfig::default())
            .sharding(ring.clone(), id)
            .build();
        manager.add(Sharder::<ConfigMap>::new(client.clone(), ring, Some(NAMESPACE)));
        let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
        let controller = manager.controller(api).config(Config::default().workers(WORKERS)).build();
        let indexer = controller.indexer();
        manager.add_controller(controller, Sleeper).expect("the only controller of its name");
        let sizes = tokio::spawn(async move {
            loop {
                say(format!("c {}", indexer.len()));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        if let Err(err) = manager.run().await {
            eprintln!("replica {id}: {err}");
        }
        sizes.abort();
    });
}

// ---- the bench process --------------------------------------------------------------------

/// What the replicas' lines told, in the bench process.
#[derive(Default)]
struct Record {
    /// Per key: `(replica, start, end)` of each reconcile (`end` = `u64::MAX` while running).
    reconciles: HashMap<String, Vec<(usize, u64, u64)>>,
    /// Reconciles finished, per replica.
    finished: Vec<usize>,
    /// Keys reconciled at least once.
    reconciled: std::collections::HashSet<String>,
    /// The last cache size each replica printed.
    cached: Vec<usize>,
}

impl Record {
    fn reconciled_keys(&self) -> usize {
        self.reconciled.len()
    }

    fn total_finished(&self) -> usize {
        self.finished.iter().sum()
    }

    /// Keys two replicas reconciled at once.
    fn overlaps(&self, killed: &HashMap<usize, u64>) -> Vec<String> {
        let mut found = Vec::new();
        for (key, reconciles) in &self.reconciles {
            let mut spans: Vec<(u64, u64, usize)> = reconciles
                .iter()
                .map(|(r, start, end)| {
                    let end = if *end == u64::MAX {
                        killed.get(r).copied().unwrap_or(*end)
                    } else {
                        *end
                    };
                    (*start, end, *r)
                })
                .collect();
            spans.sort();
            let mut latest: Option<(u64, usize)> = None;
            for (start, end, replica) in spans {
                if let Some((until, by)) = latest
                    && start < until
                    && by != replica
                {
                    found.push(format!("{key}: replicas {by} and {replica}"));
                }
                if latest.is_none_or(|(until, _)| end > until) {
                    latest = Some((end, replica));
                }
            }
        }
        found
    }
}

/// A replica process and its shard id.
struct Process {
    id: String,
    child: Child,
}

impl Process {
    fn peak_rss_mib(&self) -> f64 {
        support::process_status_kib(&self.child.id().to_string(), "VmHWM:") as f64 / 1024.0
    }

    fn signal(&self, signal: &str) {
        let _ = Command::new("kill").args([signal, &self.child.id().to_string()]).status();
    }
}

/// Where a replica's log goes: `$CTRLKIT_BENCH_LOGS/<id>.log` when set, else nowhere (its
/// filter: `$CTRLKIT_BENCH_REPLICA_LOG`, `warn` by default).
fn replica_log(id: &str) -> Stdio {
    let Some(dir) = std::env::var_os("CTRLKIT_BENCH_LOGS") else { return Stdio::null() };
    let path = std::path::Path::new(&dir).join(format!("{id}.log"));
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path);
    file.map_or_else(|_| Stdio::null(), Stdio::from)
}

fn start_replica(
    index: usize,
    kubeconfig: &std::path::Path,
    record: &Arc<Mutex<Record>>,
) -> Process {
    let id = format!("replica-{index}");
    let mut child = Command::new(std::env::current_exe().expect("the bench binary"))
        .env("CTRLKIT_BENCH_REPLICA", &id)
        .env("CTRLKIT_BENCH_KUBECONFIG", kubeconfig)
        .env(
            "RUST_LOG",
            std::env::var("CTRLKIT_BENCH_REPLICA_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::piped())
        .stderr(replica_log(&id))
        .spawn()
        .expect("a replica process");
    let stdout = child.stdout.take().unwrap();
    let record = record.clone();
    {
        let mut r = record.lock().unwrap();
        if r.finished.len() <= index {
            r.finished.resize(index + 1, 0);
            r.cached.resize(index + 1, 0);
        }
    }
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let mut parts = line.split(' ');
            let (kind, a, b) = (parts.next(), parts.next(), parts.next());
            let mut r = record.lock().unwrap();
            match (kind, a, b.and_then(|t| t.parse::<u64>().ok())) {
                (Some("s"), Some(key), Some(at)) => {
                    r.reconciles.entry(key.to_owned()).or_default().push((index, at, u64::MAX));
                }
                (Some("e"), Some(key), Some(at)) => {
                    let open = r.reconciles.get_mut(key).and_then(|v| {
                        v.iter_mut().rev().find(|(i, _, end)| *i == index && *end == u64::MAX)
                    });
                    if let Some(open) = open {
                        open.2 = at;
                    }
                    r.finished[index] += 1;
                    if !r.reconciled.contains(key) {
                        r.reconciled.insert(key.to_owned());
                    }
                }
                (Some("c"), Some(n), None) => r.cached[index] = n.parse().unwrap_or(0),
                _ => {}
            }
        }
    });
    Process { id, child }
}

/// The figures of one scenario.
#[derive(Debug, Default, Clone)]
struct Scenario {
    cold_start: Duration,
    reconciles_per_second: f64,
    written_per_second: f64,
    cached: Vec<usize>,
    peak_rss_mib: Vec<f64>,
    moved_on_join: Option<usize>,
    join: Option<Duration>,
    leave: Option<Duration>,
    kill: Option<Duration>,
    overlaps: usize,
}

async fn create_objects(api: &Api<ConfigMap>, n: usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (api, next) = (api.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return;
                    }
                    let mut cm = ConfigMap::default();
                    cm.metadata.name = Some(format!("obj-{i}"));
                    cm.data = Some(BTreeMap::from([("n".to_owned(), "0".to_owned())]));
                    api.create(&PostParams::default(), &cm).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// Each object's shard label.
async fn labels(api: &Api<ConfigMap>) -> HashMap<String, Option<String>> {
    let label = shard_label(RING);
    let list = api.list_metadata(&ListParams::default()).await.unwrap();
    list.items.iter().map(|o| (o.name_any(), o.labels().get(&label).cloned())).collect()
}

/// Fails the bench if a replica exited on its own (its log is in `$CTRLKIT_BENCH_LOGS`, when
/// set): the figures would be of a smaller ring.
fn check_alive(replicas: &mut [Option<Process>]) {
    for process in replicas.iter_mut().flatten() {
        if let Ok(Some(status)) = process.child.try_wait() {
            panic!("replica {} exited on its own ({status})", process.id);
        }
    }
}

/// Waits until every object is labelled to its shard on the ring of the running `replicas`;
/// returns the labels then.
async fn settled(
    api: &Api<ConfigMap>,
    replicas: &mut [Option<Process>],
) -> HashMap<String, Option<String>> {
    let members: Vec<String> = replicas.iter().flatten().map(|p| p.id.clone()).collect();
    let ring = HashRing::new(members.clone());
    loop {
        check_alive(replicas);
        let labels = labels(api).await;
        let right = labels.iter().all(|(name, shard)| {
            let key = ring_key("", "ConfigMap", Some(NAMESPACE), name);
            shard.as_deref() == ring.shard_for(&key)
        });
        if right {
            return labels;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn sharder_leader(client: &Client) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    leases.get_opt(SHARDER_LEASE).await.ok().flatten()?.spec?.holder_identity
}

async fn scenario(n: usize, objects: usize) -> Scenario {
    let server = ApiServer::start().await.expect("the embedded server");
    let dir = std::env::temp_dir().join(format!("ctrlkit-bench-sharding-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let client = server.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    create_objects(&api, objects).await;

    let record = Arc::new(Mutex::new(Record::default()));
    let mut scenario = Scenario::default();
    let started = Instant::now();
    let mut replicas: Vec<Option<Process>> =
        (0..n).map(|i| Some(start_replica(i, &kubeconfig, &record))).collect();
    let mut killed: HashMap<usize, u64> = HashMap::new();
    while record.lock().unwrap().reconciled_keys() < objects {
        check_alive(&mut replicas);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    scenario.cold_start = started.elapsed();

    // Churn, paced at CHURN_PER_SECOND, round-robin over the objects, to the end.
    let written = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (api, written) = (api.clone(), written.clone());
        tokio::spawn(async move {
            let mut tick =
                tokio::time::interval(Duration::from_micros(1_000_000 / CHURN_PER_SECOND));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            for i in 0usize.. {
                tick.tick().await;
                let (api, written) = (api.clone(), written.clone());
                tokio::spawn(async move {
                    let patch = Patch::Merge(serde_json::json!({ "data": { "n": i.to_string() } }));
                    if api
                        .patch(&format!("obj-{}", i % objects), &PatchParams::default(), &patch)
                        .await
                        .is_ok()
                    {
                        written.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (from, written_from) =
        (record.lock().unwrap().total_finished(), written.load(Ordering::Relaxed));
    let window = Instant::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let seconds = window.elapsed().as_secs_f64();
    scenario.reconciles_per_second =
        (record.lock().unwrap().total_finished() - from) as f64 / seconds;
    scenario.written_per_second = (written.load(Ordering::Relaxed) - written_from) as f64 / seconds;
    scenario.cached = record.lock().unwrap().cached.clone();
    scenario.peak_rss_mib = replicas.iter().flatten().map(Process::peak_rss_mib).collect();

    let before = settled(&api, &mut replicas).await;
    if n < MAX_REPLICAS {
        let joined = Instant::now();
        replicas.push(Some(start_replica(n, &kubeconfig, &record)));
        let after = settled(&api, &mut replicas).await;
        scenario.join = Some(joined.elapsed());
        scenario.moved_on_join =
            Some(after.iter().filter(|(name, shard)| before.get(*name) != Some(shard)).count());
        let leaving = replicas[n].take().unwrap();
        let left = Instant::now();
        leaving.signal("-TERM");
        settled(&api, &mut replicas).await;
        scenario.leave = Some(left.elapsed());
        reap(leaving);
    }
    if n > 1 {
        let leader = sharder_leader(&client).await;
        let victim = (0..n)
            .find(|i| {
                replicas[*i].as_ref().map(|p| Some(&p.id) != leader.as_ref()).unwrap_or(false)
            })
            .unwrap();
        let process = replicas[victim].take().unwrap();
        let at = Instant::now();
        process.signal("-KILL");
        killed.insert(victim, now_micros());
        settled(&api, &mut replicas).await;
        scenario.kill = Some(at.elapsed());
        reap(process);
    }
    writer.abort();
    for process in replicas.into_iter().flatten() {
        process.signal("-TERM");
        reap(process);
    }
    scenario.overlaps = record.lock().unwrap().overlaps(&killed).len();
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    scenario
}

fn reap(mut process: Process) {
    let _ = process.child.wait();
}

// ---- the report ---------------------------------------------------------------------------

fn median<T: PartialOrd + Copy>(mut values: Vec<T>) -> Option<T> {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values.get(values.len() / 2).copied()
}

fn seconds(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.1} s", d.as_secs_f64())).unwrap_or_else(|| "–".to_owned())
}

fn report(objects: usize, results: &BTreeMap<usize, Vec<Scenario>>) {
    let rate = |n: usize| {
        let runs = results.get(&n).map(Vec::as_slice).unwrap_or_default();
        median(runs.iter().map(|s| s.reconciles_per_second).collect()).unwrap_or(0.0)
    };
    let rounds = results.values().next().map_or(0, Vec::len);
    println!(
        "sharding: {objects} ConfigMaps, a 20 ms reconcile, {WORKERS} workers a replica, medians of {rounds}"
    );
    println!(
        "| replicas | cold start | reconciles/s | × 1 replica | cached per replica | peak RSS per replica | moved when the next joins | join | leave | kill | overlaps |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (n, runs) in results {
        let cold = median(runs.iter().map(|s| s.cold_start).collect());
        let cached_min = median(
            runs.iter().map(|s| s.cached.iter().take(*n).copied().min().unwrap_or(0)).collect(),
        )
        .unwrap_or(0);
        let cached_max = median(
            runs.iter().map(|s| s.cached.iter().take(*n).copied().max().unwrap_or(0)).collect(),
        )
        .unwrap_or(0);
        let rss_min = median(
            runs.iter().map(|s| s.peak_rss_mib.iter().copied().fold(f64::MAX, f64::min)).collect(),
        )
        .unwrap_or(0.0);
        let rss_max = median(
            runs.iter().map(|s| s.peak_rss_mib.iter().copied().fold(0.0, f64::max)).collect(),
        )
        .unwrap_or(0.0);
        let moved = median(runs.iter().filter_map(|s| s.moved_on_join).collect());
        let overlaps: usize = runs.iter().map(|s| s.overlaps).sum();
        println!(
            "| {n} | {} | {:.0} (writer {:.0}/s) | {:.2} | {cached_min}–{cached_max} | {rss_min:.0}–{rss_max:.0} MiB | {} | {} | {} | {} | {overlaps} |",
            seconds(cold),
            rate(*n),
            median(runs.iter().map(|s| s.written_per_second).collect()).unwrap_or(0.0),
            rate(*n) / rate(1),
            moved
                .map(|m| format!(
                    "{m} ({:.2} × total/{})",
                    m as f64 / (objects as f64 / (*n + 1) as f64),
                    n + 1
                ))
                .unwrap_or_else(|| "–".to_owned()),
            seconds(median(runs.iter().filter_map(|s| s.join).collect())),
            seconds(median(runs.iter().filter_map(|s| s.leave).collect())),
            seconds(median(runs.iter().filter_map(|s| s.kill).collect())),
        );
    }
    let speedup = rate(MAX_REPLICAS) / rate(1);
    println!(
        "target: {MAX_REPLICAS} replicas reconcile at ≥ 3.5 × one replica's rate: {speedup:.2} × ({})",
        met(speedup >= 3.5)
    );
    let spread = results.iter().all(|(n, runs)| {
        let even = objects as f64 / *n as f64;
        runs.iter()
            .all(|s| s.cached.iter().take(*n).all(|c| (*c as f64 - even).abs() <= 0.15 * even))
    });
    println!("target: each caches total/N ± 15%: {}", met(spread));
    let moves = results.iter().all(|(n, runs)| {
        runs.iter()
            .filter_map(|s| s.moved_on_join)
            .all(|m| m as f64 <= 1.2 * objects as f64 / (*n + 1) as f64)
    });
    println!("target: a join moves ≤ 1.2 × total/N objects: {}", met(moves));
    let overlaps: usize = results.values().flatten().map(|s| s.overlaps).sum();
    println!("target: 0 overlaps: {overlaps} ({})", met(overlaps == 0));
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sharding-throughput.svg");
    let points: Vec<(usize, f64)> = results.keys().map(|n| (*n, rate(*n))).collect();
    let _ = std::fs::create_dir_all(path.parent().unwrap());
    match std::fs::write(&path, chart(&points)) {
        Ok(()) => println!("chart: {}", path.display()),
        Err(err) => println!("chart not written to {}: {err}", path.display()),
    }
}

fn met(yes: bool) -> &'static str {
    if yes { "met" } else { "missed" }
}

/// Reconciles a second against replicas, measured beside linear scaling from one replica.
fn chart(points: &[(usize, f64)]) -> String {
    let (w, h, left, bottom, top, right) = (560.0, 340.0, 70.0, 50.0, 30.0, 20.0);
    let max_n = points.iter().map(|p| p.0).max().unwrap_or(1) as f64;
    let one = points.first().map(|p| p.1).unwrap_or(1.0);
    let max_y = points.iter().map(|p| p.1).fold(one * max_n, f64::max) * 1.1;
    let x = |n: f64| left + (n - 1.0) / (max_n - 1.0).max(1.0) * (w - left - right);
    let y = |v: f64| h - bottom - v / max_y * (h - bottom - top);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">Reconciles per second against replicas (20 ms reconcile, 4 workers each)</text>\n",
        w / 2.0
    );
    svg += &format!(
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
        h - bottom,
        w - right,
        h - bottom
    );
    svg += &format!(
        "<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>\n",
        h - bottom
    );
    for (n, _) in points {
        let px = x(*n as f64);
        svg += &format!(
            "<text x=\"{px}\" y=\"{}\" text-anchor=\"middle\">{n}</text>\n",
            h - bottom + 18.0
        );
    }
    svg += &format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">replicas</text>\n",
        (left + w - right) / 2.0,
        h - 10.0
    );
    for i in 0..=4 {
        let v = max_y * i as f64 / 4.0;
        svg += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{v:.0}</text>\n",
            left - 6.0,
            y(v) + 4.0
        );
        svg += &format!(
            "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#ddd\"/>\n",
            y(v),
            w - right,
            y(v)
        );
    }
    let linear: Vec<String> =
        points.iter().map(|(n, _)| format!("{},{}", x(*n as f64), y(one * *n as f64))).collect();
    svg += &format!(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"#999\" stroke-dasharray=\"5,4\"/>\n",
        linear.join(" ")
    );
    let measured: Vec<String> =
        points.iter().map(|(n, v)| format!("{},{}", x(*n as f64), y(*v))).collect();
    svg += &format!(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\"/>\n",
        measured.join(" ")
    );
    for (n, v) in points {
        svg += &format!(
            "<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"#1f77b4\"/><text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{v:.0}</text>\n",
            x(*n as f64),
            y(*v),
            x(*n as f64),
            y(*v) - 10.0
        );
    }
    svg += &format!(
        "<text x=\"{}\" y=\"{}\" fill=\"#999\">dashed: one replica's rate × replicas</text>\n",
        left + 10.0,
        top + 14.0
    );
    svg + "</svg>\n"
}
