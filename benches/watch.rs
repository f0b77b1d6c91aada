//! Watch throughput: updates per second from the server through the cache and the queue to the
//! reconciler, and the delay from each write to the reconcile that saw it; ctrlkit,
//! kube-runtime 5 and client-go on the same embedded API server, in the same run.
//!
//! `scripts/bench-watch.sh [OBJECTS UPDATES RUNS]` builds client-go's harness and runs both
//! scenarios with it; `cargo bench --bench watch --features testing [-- OBJECTS UPDATES RUNS]
//! [catch-up]` runs the Rust peers alone (defaults 1,000 objects, 100,000 updates, 3 runs).
//! `WATCH_PEERS=ctrlkit,none` runs a subset; `none` is the server and its writers with no
//! peer watching, what bounds every peer's rate in the live scenario.
//!
//! The parent process serves the embedded API server, a fresh one for each measurement. For
//! each run and each peer it creates OBJECTS ConfigMaps in a namespace, starts the peer as a child process, which
//! syncs and reconciles each object once, then says `ready`; the parent tells it `go` with the
//! time, and 16 writers in the parent patch the ConfigMaps UPDATES times as fast as the server
//! takes them (update `j` sets object `j % OBJECTS`'s `data.seq` to `j / OBJECTS + 1` and
//! `data.t` to the write's wall-clock time; each object's updates come from one writer, in
//! order). Each peer runs its framework's usual controller with its defaults: ctrlkit's
//! `Controller` (1 worker), kube-runtime's `Controller` (unbounded concurrency), client-go's
//! shared informer + rate-limited workqueue + 1 worker (client-go's `examples/workqueue` controller). Its
//! reconciler reads the object from the cache, records `now - data.t`, and notes when the
//! object's final `seq` arrived. A peer is done when every object's final version was
//! reconciled; its figure is UPDATES / (done - go), so coalescing updates (every framework
//! does: a key waits in the queue once) counts, as it should, for the peer.
//!
//! Printed: per peer, the medians over the runs of updates reconciled per second, the p50 and
//! p99 delay from write to reconcile, the peer's CPU time per 1,000 updates (from `go` to
//! done: what the pipeline costs, which the rates hide when the server is the bound), the
//! writers' rate (what the server took), and the child's peak RSS.
//!
//! Live, every peer keeps up with the writers, so the rate is the server's (it shares the
//! two cores with the writers and the peer). `catch-up` measures the peer's own rate: the
//! parent stops the ready peer (SIGSTOP), the writers write every update, then it sends `go`
//! and resumes the peer (SIGCONT). With more updates than the server buffers for one watch
//! (16,384, and the sockets' buffers), the peer's watch fell too far behind and the server
//! closed it; the peer resumes from its last resourceVersion and reads the rest from the
//! server's history (which holds them all), as fast as it can take them. The figure is
//! UPDATES over the time from resume to done. The list and watch requests of each run are
//! printed, so that a peer that relisted (and skipped the history) would show.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use ctrlkit::cache::ObjectKey;
use ctrlkit::controller::{Action, Controller, Reconciler};
use ctrlkit_apiserver::ApiServer;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube_client::api::{Patch, PatchParams, PostParams};
use kube_client::{Api, Client, Config};
use serde_json::json;
use tokio::sync::Notify;

#[allow(dead_code)] // the pod fixtures serve the other benches
#[path = "../apiserver/benches/support/mod.rs"]
mod support;
use support::{runtime, status_kib};

const WRITERS: usize = 16;

fn now_nanos() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// This process's CPU time (user + system), from `/proc/self/stat` (clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map_or("", |(_, r)| r).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn peak_rss_mib() -> f64 {
    status_kib("VmHWM:") as f64 / 1024.0
}

/// Each object's last `seq`, as the writers' round robin gives it.
fn finals(objects: usize, updates: usize) -> Vec<u64> {
    (0..objects).map(|i| (updates / objects + usize::from(i < updates % objects)) as u64).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().filter(|a| !a.starts_with("--bench")).collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let (peer, url, ns) = (&args[i + 1], &args[i + 2], &args[i + 3]);
        let (objects, updates) = (args[i + 4].parse().unwrap(), args[i + 5].parse().unwrap());
        return child(peer, url, ns, objects, updates);
    }
    let numbers: Vec<usize> = args.iter().skip(1).filter_map(|a| a.parse().ok()).collect();
    let objects = numbers.first().copied().unwrap_or(1_000);
    let updates = numbers.get(1).copied().unwrap_or(100_000);
    let runs = numbers.get(2).copied().unwrap_or(3);
    let scenario =
        if args.iter().any(|a| a == "catch-up") { Scenario::CatchUp } else { Scenario::Live };
    parent(objects, updates, runs, scenario);
}

/// When the writers write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// While the peer watches: the peer follows the server, which the writers keep busy.
    Live,
    /// While the peer is stopped (SIGSTOP), so that on SIGCONT it meets all the updates at
    /// once: its watch, fallen too far behind, is closed, and it resumes from its last
    /// resourceVersion through the server's history. The rate is then the peer's own.
    CatchUp,
}

#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    writes_per_second: f64,
    peak_mib: f64,
    /// The peer's CPU time per 1,000 updates, from `go` to done.
    cpu_ms_per_thousand: f64,
    /// The list and watch requests the server answered from the peer's `ready` to its result.
    lists: u64,
    watches: u64,
}

fn parent(objects: usize, updates: usize, runs: usize, scenario: Scenario) {
    let rt = runtime();
    let exe = std::env::current_exe().unwrap();
    let client_go = std::env::var("CTRLKIT_PEER_CLIENT_GO_WATCH").ok();
    let mut peers = vec!["ctrlkit", "kube-runtime"];
    if client_go.is_some() {
        peers.push("client-go");
    } else {
        eprintln!(
            "client-go skipped: CTRLKIT_PEER_CLIENT_GO_WATCH is not set (scripts/bench-watch.sh sets it)"
        );
    }
    // `WATCH_PEERS=ctrlkit,none`: a subset (in the usual order); `none` is the server and its
    // writers with no peer watching, what bounds every peer's rate.
    if let Ok(chosen) = std::env::var("WATCH_PEERS") {
        peers = ["ctrlkit", "kube-runtime", "client-go", "none"]
            .into_iter()
            .filter(|p| chosen.split(',').any(|c| c == *p))
            .filter(|p| *p != "client-go" || client_go.is_some())
            .filter(|p| *p != "none" || scenario == Scenario::Live)
            .collect();
    }
    let mut samples: Vec<(&str, Sample)> = Vec::new();
    for run in 0..runs {
        for &peer in &peers {
            // A fresh server for each measurement, so that no peer meets the history and the
            // objects of the ones before it.
            // Catching up replays every update from the history: room for all of them.
            let mut builder = ApiServer::builder();
            if scenario == Scenario::CatchUp {
                builder = builder.history_limit(objects + updates + 1_000);
            }
            let server = rt.block_on(builder.start()).unwrap();
            let ns = format!("run-{run}-{peer}");
            rt.block_on(create_objects(&server, &ns, objects));
            if peer == "none" {
                let took = rt.block_on(write_updates(&server, &ns, objects, updates));
                let writes_per_second = updates as f64 / took.as_secs_f64();
                let sample = Sample { writes_per_second, ..Sample::default() };
                rt.block_on(server.shutdown());
                eprintln!("run {run}, {peer}: {sample:?}");
                samples.push((peer, sample));
                continue;
            }
            let mut command = match (peer, &client_go) {
                ("client-go", Some(path)) => {
                    let mut c = Command::new(path);
                    c.args([&server.url(), &ns, &objects.to_string(), &updates.to_string()]);
                    c
                }
                _ => {
                    let mut c = Command::new(&exe);
                    c.args(["--child", peer, &server.url(), &ns])
                        .args([objects.to_string(), updates.to_string()]);
                    c
                }
            };
            let mut child =
                command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("a child");
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let ready = lines.next().and_then(Result::ok).unwrap_or_default();
            assert_eq!(ready, "ready", "{peer} did not get ready");
            let mut stdin = child.stdin.take().unwrap();
            let before = server.requests();
            let took = match scenario {
                Scenario::Live => {
                    writeln!(stdin, "go {}", now_nanos()).unwrap();
                    stdin.flush().unwrap();
                    rt.block_on(write_updates(&server, &ns, objects, updates))
                }
                Scenario::CatchUp => {
                    signal(child.id(), "-STOP");
                    let took = rt.block_on(write_updates(&server, &ns, objects, updates));
                    // `go` waits in the pipe; the child reads it as it wakes.
                    writeln!(stdin, "go {}", now_nanos()).unwrap();
                    stdin.flush().unwrap();
                    signal(child.id(), "-CONT");
                    took
                }
            };
            let result = lines
                .find_map(|l| l.ok().filter(|l| l.starts_with("result ")))
                .unwrap_or_else(|| panic!("{peer} printed no result"));
            let _ = child.wait();
            let after = server.requests();
            let v: Vec<f64> =
                result.split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect();
            let sample = Sample {
                per_second: updates as f64 / v[0],
                p50_ms: v[1],
                p99_ms: v[2],
                writes_per_second: updates as f64 / took.as_secs_f64(),
                peak_mib: v[3],
                cpu_ms_per_thousand: v[4] * 1e6 / updates as f64,
                lists: after.list - before.list,
                watches: after.watch - before.watch,
            };
            rt.block_on(server.shutdown());
            eprintln!("run {run}, {peer}: {sample:?}");
            samples.push((peer, sample));
        }
    }
    match scenario {
        Scenario::Live => println!(
            "| peer | updates reconciled/s | delay p50 | delay p99 | peer's CPU per 1,000 updates | server took (writes/s) | peak RSS |\n|---|---|---|---|---|---|---|"
        ),
        Scenario::CatchUp => println!(
            "| peer | updates caught up/s | peer's CPU per 1,000 updates | peak RSS | lists, watches |\n|---|---|---|---|---|"
        ),
    }
    for peer in peers {
        let of: Vec<Sample> = samples.iter().filter(|(p, _)| *p == peer).map(|(_, s)| *s).collect();
        let median = |f: fn(&Sample) -> f64| {
            let mut v: Vec<f64> = of.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        if peer == "none" {
            let writes = median(|s| s.writes_per_second);
            println!("| none (the server and its writers alone) | | | | | {writes:.0} | |");
            continue;
        }
        if scenario == Scenario::CatchUp {
            println!(
                "| {peer} | {:.0} | {:.0} ms | {:.0} MiB | {} |",
                median(|s| s.per_second),
                median(|s| s.cpu_ms_per_thousand),
                median(|s| s.peak_mib),
                // Every run's, so that a relist (which would skip the history) shows.
                of.iter()
                    .map(|s| format!("{}, {}", s.lists, s.watches))
                    .collect::<Vec<_>>()
                    .join("; "),
            );
            continue;
        }
        println!(
            "| {peer} | {:.0} | {:.1} ms | {:.1} ms | {:.0} ms | {:.0} | {:.0} MiB |",
            median(|s| s.per_second),
            median(|s| s.p50_ms),
            median(|s| s.p99_ms),
            median(|s| s.cpu_ms_per_thousand),
            median(|s| s.writes_per_second),
            median(|s| s.peak_mib),
        );
    }
}

/// Sends a signal to a child with kill(1).
fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill").args([signal, &pid.to_string()]).status();
    assert!(status.is_ok_and(|s| s.success()), "kill {signal} {pid} failed");
}

async fn create_objects(server: &ApiServer, ns: &str, objects: usize) {
    let namespaces: Api<Namespace> = Api::all(server.client());
    let namespace = serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap();
    namespaces.create(&PostParams::default(), &namespace).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), ns);
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..WRITERS)
        .map(|_| {
            let (api, next) = (api.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= objects {
                        return;
                    }
                    let cm = serde_json::from_value(json!({
                        "metadata": { "name": format!("cm-{i}") },
                        "data": { "i": i.to_string(), "seq": "0", "t": "0" },
                    }))
                    .unwrap();
                    api.create(&PostParams::default(), &cm).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// The writers: writer `w` owns the objects `i % WRITERS == w` and writes their updates in
/// order. Returns how long they took.
async fn write_updates(server: &ApiServer, ns: &str, objects: usize, updates: usize) -> Duration {
    let api: Api<ConfigMap> = Api::namespaced(server.client(), ns);
    let started = Instant::now();
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let api = api.clone();
            tokio::spawn(async move {
                for j in (0..updates).filter(|j| (j % objects) % WRITERS == w) {
                    let (i, seq) = (j % objects, j / objects + 1);
                    let patch = Patch::Merge(json!({
                        "data": { "seq": seq.to_string(), "t": now_nanos().to_string() }
                    }));
                    api.patch(&format!("cm-{i}"), &PatchParams::default(), &patch).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    started.elapsed()
}

/// What a peer's reconciler records.
struct Tracker {
    finals: Vec<u64>,
    reached: Vec<AtomicBool>,
    reached_count: AtomicUsize,
    first_seen: Vec<AtomicBool>,
    seen_count: AtomicUsize,
    delays_ns: Mutex<Vec<u64>>,
    ready: Notify,
    done: Notify,
}

impl Tracker {
    fn new(objects: usize, updates: usize) -> Self {
        Self {
            finals: finals(objects, updates),
            reached: (0..objects).map(|_| AtomicBool::new(false)).collect(),
            reached_count: AtomicUsize::new(0),
            first_seen: (0..objects).map(|_| AtomicBool::new(false)).collect(),
            seen_count: AtomicUsize::new(0),
            delays_ns: Mutex::new(Vec::with_capacity(updates)),
            ready: Notify::new(),
            done: Notify::new(),
        }
    }

    /// One reconcile of `cm` as read from the cache.
    fn reconciled(&self, cm: &ConfigMap) {
        let now = now_nanos();
        let data = cm.data.as_ref();
        let field = |name: &str| -> u64 {
            data.and_then(|d| d.get(name)).and_then(|v| v.parse().ok()).unwrap_or(0)
        };
        let (i, seq, t) = (field("i") as usize, field("seq"), field("t"));
        if !self.first_seen[i].swap(true, Ordering::Relaxed)
            && self.seen_count.fetch_add(1, Ordering::SeqCst) + 1 == self.finals.len()
        {
            self.ready.notify_one();
        }
        if t > 0 {
            self.delays_ns.lock().unwrap().push(now.saturating_sub(t));
        }
        if seq >= self.finals[i]
            && seq > 0
            && !self.reached[i].swap(true, Ordering::Relaxed)
            && self.reached_count.fetch_add(1, Ordering::SeqCst) + 1 == self.finals.len()
        {
            self.done.notify_one();
        }
    }
}

struct Ctrlkit(Arc<Tracker>);

#[async_trait]
impl Reconciler for Ctrlkit {
    type Object = ConfigMap;
    type Error = std::convert::Infallible;
    async fn reconcile(
        &self,
        _: &ObjectKey,
        cm: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Self::Error> {
        if let Some(cm) = cm {
            self.0.reconciled(&cm);
        }
        Ok(Action::done())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

fn child(peer: &str, url: &str, ns: &str, objects: usize, updates: usize) {
    let rt = runtime();
    let tracker = Arc::new(Tracker::new(objects, updates));
    let (seconds, p50, p99, cpu) = rt.block_on(async {
        let client = Client::try_from(Config::new(url.parse().unwrap())).unwrap();
        let api: Api<ConfigMap> = Api::namespaced(client, ns);
        let ready = tracker.ready.notified();
        let done = tracker.done.notified();
        tokio::pin!(ready, done);
        let running = match peer {
            "ctrlkit" => {
                let controller = Controller::builder(api).build();
                let reconciler = Ctrlkit(tracker.clone());
                tokio::spawn(async move {
                    let _ = controller.run(reconciler, std::future::pending()).await;
                })
            }
            _ => {
                use kube_runtime::controller::{Action as KAction, Controller as KController};
                let controller = KController::new(api, kube_runtime::watcher::Config::default());
                tokio::spawn(
                    controller
                        .run(
                            |cm: Arc<ConfigMap>, tracker: Arc<Tracker>| async move {
                                tracker.reconciled(&cm);
                                Ok::<_, Never>(KAction::await_change())
                            },
                            |_, _, _| KAction::await_change(),
                            tracker.clone(),
                        )
                        .for_each(|_| async {}),
                )
            }
        };
        ready.await;
        println!("ready");
        let go = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).unwrap();
            line.split_whitespace().nth(1).and_then(|t| t.parse::<u64>().ok()).expect("go TIME")
        })
        .await
        .unwrap();
        let cpu_at_go = cpu_seconds();
        let finished = tokio::time::timeout(Duration::from_secs(600), done).await;
        assert!(
            finished.is_ok(),
            "{peer}: {} of {objects} objects reached their final version",
            tracker.reached_count.load(Ordering::SeqCst)
        );
        let seconds = (now_nanos() - go) as f64 / 1e9;
        let cpu = cpu_seconds() - cpu_at_go;
        running.abort();
        let mut delays = std::mem::take(&mut *tracker.delays_ns.lock().unwrap());
        delays.sort_unstable();
        let at = |q: f64| delays[((delays.len() - 1) as f64 * q) as usize] as f64 / 1e6;
        (seconds, at(0.5), at(0.99), cpu)
    });
    println!("result {seconds} {p50} {p99} {} {cpu}", peak_rss_mib());
}
