//! Informer initial sync and reconcile-all, ctrlkit against kube-runtime 5 (and client-go),
//! side by side.
//!
//! `cargo bench --bench informer --features testing [-- 10000 30000]`
//! `scripts/bench-informer.sh [10000 30000]`: on a real kube-apiserver, with client-go
//!
//! With `CTRLKIT_BENCH_KUBECONFIG` set, the pods are served by that server instead (a real
//! kube-apiserver: `scripts/bench-informer.sh` starts one), created once in a namespace per
//! size (`bench-10000`, …) and listed there; with `CTRLKIT_PEER_CLIENT_GO_INFORMER` naming the
//! binary of `benches/peers/client-go/informer/main.go`, client-go's informer is measured
//! too, alternating with the others.
//!
//! The parent process starts the embedded API server and fills it with realistic pods as a
//! real apiserver serves them (`fixtures::realistic_pod` with `managedFields`: about 6 KB of
//! JSON each). For each size it then runs one child process per measurement, alternating the
//! peers, five runs each (`CTRLKIT_BENCH_RUNS`; `CTRLKIT_BENCH_PEERS=a,b` runs those peers
//! alone), so each peer's peak memory is its own
//! process's high-water mark (VmHWM) and the server's memory is not counted. Each child:
//! - ctrlkit: an `Informer` over all pods with its defaults (its store: JSON, with a hot set;
//!   a streaming list where the server has them, Kubernetes 1.27 on; a paginated list where it
//!   refuses them), the key-enqueuing handler, a `WorkQueue` and a `Controller` with one worker and a no-op
//!   reconciler;
//! - ctrlkit-paginated: as ctrlkit, with streaming lists off (`streaming_list(false)`): pages
//!   of 500 on every server, for the same run's comparison;
//! - kube-runtime: `kube_runtime::Controller` (its reflector store and its scheduler) with the
//!   same no-op reconciler;
//! - ctrlkit-metadata: as ctrlkit, with a metadata-only informer (`PartialObjectMeta<Pod>`,
//!   listed and watched as `PartialObjectMetadata`), for the memory of caching metadata alone;
//! - ctrlkit-decoded: as ctrlkit, with the all-decoded store (`Indexer::decoded()`, the
//!   default before the hot set);
//! - ctrlkit-compact: as ctrlkit, with a compact store (`Indexer::compact()`: each pod kept as
//!   its JSON, decoded on every read, so each reconcile's read of its pod is a decode);
//! - ctrlkit-informer: the shape a user writes first, an `Informer` with its defaults run until
//!   synced: no handler, no queue, no controller;
//! - ctrlkit-json, ctrlkit-protobuf, ctrlkit-informer-json and ctrlkit-informer-protobuf: the
//!   ctrlkit and ctrlkit-informer shapes with their wire format set in code
//!   (`wire_format(WireFormat::Json | WireFormat::Protobuf)`); the other ctrlkit shapes read
//!   the default ([`WireFormat::default`], JSON unless `CTRLKIT_WIRE_FORMAT` says otherwise)
//!   and their rows say which it was;
//! - kube-runtime-reflector: the same shape in kube-runtime, a `reflector` filling a store from
//!   a `watcher` with its defaults;
//! - floor-read and floor-decode (JSON): the floor under every client, the streaming list's
//!   bytes read up to its initial-events-end bookmark through kube-client, without decoding
//!   them, and with a bare serde_json decode of each event (nothing stored);
//! - floor-read-protobuf, floor-decode-prost and floor-decode-transcoder (protobuf): the same
//!   streaming list asked for as client-go asks (`Accept: application/vnd.kubernetes.protobuf,
//!   application/json`; each fails unless the answer's `Content-Type` is protobuf watch
//!   frames, so a floor never measures JSON): its frames read (a 4-byte big-endian length,
//!   then a `WatchEvent`), only the bookmarks decoded, their type read from the frame's first
//!   field; each frame also decoded by prost into k8s-pb's types (the `WatchEvent`, its
//!   object's `runtime.Unknown` after the `k8s\0` magic, the `Pod` it holds); and each frame's
//!   `WatchEvent` decoded by prost, its object through `ctrlkit-protobuf`'s transcoder to a
//!   `serde_json::Value`, then into k8s-openapi's `Pod` by serde (nothing stored);
//! - with `CTRLKIT_PEER_CLIENT_GO_INFORMER`: client-go (its harness's `controller` shape: a
//!   shared informer from the informer factory, the enqueueing handler, a rate-limited
//!   workqueue, one worker), client-go-example-wiring (the same controller wired as client-go's
//!   `examples/workqueue` wires it: `NewListWatchFromClient` + `NewIndexerInformer`),
//!   client-go-protobuf (the first with protobuf set by hand, as kube-controller-manager runs),
//!   client-go-json (the first forced to JSON, the wire format ctrlkit reads) and
//!   client-go-informer (the informer alone until synced). Each client-go row names the wire
//!   format it reads (`wire`): client-go 1.36's generated clients prefer protobuf for pods.
//!
//! Each reports the time until its store holds the first list (`has_synced` / the reflector
//! store holding all pods, polled every 2 ms), the time until every pod was reconciled once
//! (none in the informer-only shapes), its CPU time (user + system) at that point, its peak
//! RSS, and its settled RSS (3 s after every pod was reconciled, or after the sync in the
//! informer-only shapes, the informer still running). Medians are printed at the end, then
//! the targets for ctrlkit against the best client-go row of each shape (the server's CPU
//! against the spread of that row's runs), then whether protobuf may be ctrlkit's default
//! (`ctrlkit-protobuf` and `ctrlkit-informer-protobuf` no worse than their `-json` twins).
//!
//! The server's CPU: with `CTRLKIT_BENCH_APISERVER_PID` naming a real kube-apiserver's process
//! (`scripts/bench-informer.sh` passes it), the parent reads that process's user + system time
//! just before it starts each child and again when the child prints `measured` (at the end of
//! its measured work, before its 3 s wait for the settled RSS); the difference is the "server
//! CPU" column. Nothing reaches the server before a child's timer starts (the pods are created
//! before any child runs; a child builds its client from the kubeconfig alone), so the window
//! holds the child's list and watch (and, in the controller shapes, the reconciles, which read
//! the cache alone), plus the server's own background work over those seconds and the child's
//! start: the parent measures that background over 3 idle seconds before each size's runs and
//! prints it under the table. The embedded server runs inside the parent, so it has no such
//! figure: the column says so.
//!
//! On a real server, before a child whose wire format (JSON or protobuf) is not the previous
//! child's, the parent runs an unmeasured read floor of that format: kube-apiserver's first
//! streaming list in a format after lists in the other costs it markedly more CPU and time
//! (docs/benchmarks/informer.md, "Protobuf floors"), which would otherwise fall on whichever
//! peer the order puts after a switch.

use std::collections::HashMap;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ctrlkit::cache::{
    Indexer, Informer, InformerObject, ListWatch, ObjectKey, WireFormat, wait_for_cache_sync,
};
use ctrlkit::controller::{Action, Controller, Reconciler, enqueue_handler};
use ctrlkit::workqueue::WorkQueue;
use ctrlkit_apiserver::ApiServer;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube_client::core::PartialObjectMeta;
use kube_client::{Api, Client, Config};
use prost::Message as _;
use tokio::sync::Notify;

#[path = "../apiserver/benches/support/mod.rs"]
mod support;
use support::{create_pods, create_pods_with, runtime, status_kib};

const PEERS: [&str; 17] = [
    "ctrlkit",
    "ctrlkit-json",
    "ctrlkit-protobuf",
    "ctrlkit-decoded",
    "kube-runtime",
    "ctrlkit-paginated",
    "ctrlkit-metadata",
    "ctrlkit-compact",
    "ctrlkit-informer",
    "ctrlkit-informer-json",
    "ctrlkit-informer-protobuf",
    "kube-runtime-reflector",
    "floor-read",
    "floor-decode",
    "floor-read-protobuf",
    "floor-decode-prost",
    "floor-decode-transcoder",
];
/// client-go's peers and the harness shape each runs.
const CLIENT_GO: [(&str, &str); 5] = [
    ("client-go", "controller"),
    ("client-go-example-wiring", "controller-example-wiring"),
    ("client-go-protobuf", "controller-protobuf"),
    ("client-go-json", "controller-json"),
    ("client-go-informer", "informer"),
];

/// The wire format a peer reads, for its row's label: client-go's generated clients' default
/// is protobuf for built-in kinds, a plain `RESTClient`'s is JSON; ctrlkit's shapes read their
/// default ([`WireFormat::default`], which `CTRLKIT_WIRE_FORMAT` sets) unless their name says
/// `-json` or `-protobuf`; kube-runtime reads JSON.
fn wire(peer: &str) -> &'static str {
    match peer {
        "floor-read" | "floor-decode" | "kube-runtime" | "kube-runtime-reflector" => "JSON",
        "floor-read-protobuf" | "floor-decode-prost" | "floor-decode-transcoder" => "protobuf",
        "client-go" | "client-go-informer" => "protobuf, its default",
        "client-go-protobuf" | "ctrlkit-protobuf" | "ctrlkit-informer-protobuf" => {
            "protobuf, set by hand"
        }
        "client-go-json" | "ctrlkit-json" | "ctrlkit-informer-json" => "JSON, set by hand",
        "client-go-example-wiring" => "JSON, a plain RESTClient",
        _ => match WireFormat::default() {
            WireFormat::Json => "JSON, its default",
            WireFormat::Protobuf => "protobuf, its default",
        },
    }
}

/// The wire format a ctrlkit peer sets in code, if its name says one.
fn format_of(peer: &str) -> Option<WireFormat> {
    if peer.ends_with("-protobuf") {
        Some(WireFormat::Protobuf)
    } else if peer.ends_with("-json") {
        Some(WireFormat::Json)
    } else {
        None
    }
}

/// Whether `peer` reads protobuf.
fn reads_protobuf(peer: &str) -> bool {
    wire(peer).starts_with("protobuf")
}

/// Whether `peer` is an informer-only shape (nothing reconciled).
fn informer_only(peer: &str) -> bool {
    peer.contains("-informer") || peer.ends_with("-reflector") || peer.starts_with("floor-")
}

/// Measurements of each peer (`CTRLKIT_BENCH_RUNS`, default 5), alternating.
fn runs() -> usize {
    std::env::var("CTRLKIT_BENCH_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(5)
}

/// This process's CPU time so far, user and system, in seconds.
fn cpu_s() -> f64 {
    cpu_of("self")
}

/// The CPU time of process `pid` (`self`: this one) so far, user and system, in seconds:
/// `/proc/PID/stat`'s utime and stime, in clock ticks (`sysconf(_SC_CLK_TCK)`).
fn cpu_of(pid: &str) -> f64 {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{path}: {stat}"))
    };
    // SAFETY: sysconf reads a constant of the system and touches no memory of ours.
    let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    assert!(per_s > 0, "sysconf(_SC_CLK_TCK) failed");
    // utime and stime: the 14th and 15th fields, the 12th and 13th after the name.
    (ticks(11) + ticks(12)) / per_s as f64
}

/// The real server's process (`CTRLKIT_BENCH_APISERVER_PID`), checked to be a kube-apiserver
/// so that its CPU is not some wrapper's.
fn apiserver_pid() -> Option<String> {
    let pid = std::env::var("CTRLKIT_BENCH_APISERVER_PID").ok()?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    assert!(
        comm.trim() == "kube-apiserver",
        "CTRLKIT_BENCH_APISERVER_PID={pid} is {comm:?}, not a running kube-apiserver"
    );
    Some(pid)
}

fn peak_rss_kib() -> u64 {
    status_kib("VmHWM:")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let (peer, url, n) = (&args[i + 1], &args[i + 2], args[i + 3].parse().unwrap());
        return child(peer, url, n, &args[i + 4]);
    }
    let sizes: Vec<usize> = args.iter().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![10_000, 30_000] } else { sizes };
    parent(&sizes);
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    sync_s: f64,
    all_s: f64,
    peak_mib: f64,
    settled_mib: f64,
    cpu_s: f64,
    /// The real server's CPU from the child's start to the end of its measured work (none
    /// on the embedded server).
    server_cpu_s: Option<f64>,
}

/// A client of the server `target` names: `kubeconfig:PATH` or a URL.
async fn client_of(target: &str) -> Client {
    let config = match target.strip_prefix("kubeconfig:") {
        Some(path) => {
            let kubeconfig = kube_client::config::Kubeconfig::read_from(path).unwrap();
            let options = kube_client::config::KubeConfigOptions::default();
            Config::from_custom_kubeconfig(kubeconfig, &options).await.unwrap()
        }
        None => Config::new(target.parse().unwrap()),
    };
    Client::try_from(config).unwrap()
}

/// Creates what is missing of `n` realistic pods in the namespace `ns` of a real server.
async fn fill_real_server(target: &str, ns: &str, n: usize) {
    use k8s_openapi::api::core::v1::Namespace;
    let client = client_of(target).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": ns } })).unwrap();
    match namespaces.create(&Default::default(), &namespace).await {
        Ok(_) | Err(kube_client::Error::Api(_)) => {}
        Err(e) => panic!("creating namespace {ns}: {e}"),
    }
    let pods: Api<PartialObjectMeta<Pod>> = Api::namespaced(client.clone(), ns);
    let have = pods.list_metadata(&Default::default()).await.unwrap().items.len();
    if have < n {
        eprintln!("creating pods {have}..{n} in {ns}");
        create_pods_with(client, ns, have..n, false).await;
    }
}

fn parent(sizes: &[usize]) {
    let rt = runtime();
    let exe = std::env::current_exe().unwrap();
    let real = std::env::var("CTRLKIT_BENCH_KUBECONFIG").ok();
    let client_go = std::env::var("CTRLKIT_PEER_CLIENT_GO_INFORMER").ok();
    let server = real.as_ref().and_then(|_| apiserver_pid());
    let mut peers = PEERS.to_vec();
    if client_go.is_some() {
        peers.extend(CLIENT_GO.iter().map(|(peer, _)| *peer));
    }
    // `CTRLKIT_BENCH_PEERS=a,b`: those peers alone.
    if let Ok(only) = std::env::var("CTRLKIT_BENCH_PEERS") {
        let only: Vec<&str> = only.split(',').collect();
        peers.retain(|peer| only.contains(peer));
    }
    let mut results = Vec::new();
    let mut targets = Vec::new();
    let mut idle = Vec::new();
    let mut decisions = Vec::new();
    for &n in sizes {
        // The embedded server (its pods in `default`, listed across namespaces), or the real
        // one (a namespace per size, listed alone).
        let (_server, target, ns) = match &real {
            Some(path) => {
                let (target, ns) = (format!("kubeconfig:{path}"), format!("bench-{n}"));
                rt.block_on(fill_real_server(&target, &ns, n));
                (None, target, ns)
            }
            None => {
                let server = rt.block_on(async {
                    let server = ApiServer::start().await.unwrap();
                    create_pods(&server, "default", n, true).await;
                    server
                });
                let url = server.url();
                (Some(server), url, String::new())
            }
        };
        if let Some(pid) = &server {
            let before = cpu_of(pid);
            std::thread::sleep(Duration::from_secs(3));
            idle.push(format!(
                "{n} pods: kube-apiserver used {:.2} s of CPU in 3 idle seconds before the runs",
                cpu_of(pid) - before
            ));
        }
        let mut samples: Vec<(&str, Sample)> = Vec::new();
        let command_of = |peer: &str| {
            let shape = CLIENT_GO.iter().find(|(p, _)| *p == peer).map(|(_, shape)| *shape);
            match (shape, &client_go) {
                (Some(shape), Some(path)) => {
                    let mut c = Command::new(path);
                    c.args([&target, &n.to_string(), &ns, shape]);
                    c
                }
                _ => {
                    let mut c = Command::new(&exe);
                    c.args(["--child", peer, &target, &n.to_string(), &ns]);
                    c
                }
            }
        };
        let mut last_protobuf = None;
        for run in 0..runs() {
            for &peer in &peers {
                // A real server's first list in a wire format after lists in the other costs
                // it more: an unmeasured read floor pays that, not the peer after a switch.
                let protobuf = reads_protobuf(peer);
                if real.is_some() && last_protobuf != Some(protobuf) {
                    let warm = if protobuf { "floor-read-protobuf" } else { "floor-read" };
                    run_child(command_of(warm), warm, None);
                }
                last_protobuf = Some(protobuf);
                let (line, server_cpu_s) = run_child(command_of(peer), peer, server.as_deref());
                let v: Vec<f64> =
                    line.split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect();
                let s = Sample {
                    sync_s: v[0],
                    all_s: v[1],
                    peak_mib: v[2],
                    settled_mib: v[3],
                    cpu_s: v[4],
                    server_cpu_s,
                };
                eprintln!(
                    "{n} pods, run {run}, {peer}: sync {:.2} s, all reconciled {:.2} s, CPU {:.2} s, server CPU {}, peak {:.0} MiB, settled {:.0} MiB",
                    s.sync_s,
                    s.all_s,
                    s.cpu_s,
                    server_cpu(s.server_cpu_s, real.is_some()),
                    s.peak_mib,
                    s.settled_mib
                );
                samples.push((peer, s));
            }
        }
        let mut medians = HashMap::new();
        for &peer in &peers {
            let mut of: Vec<Sample> =
                samples.iter().filter(|(p, _)| *p == peer).map(|(_, s)| *s).collect();
            let median = |f: fn(&Sample) -> f64, of: &mut Vec<Sample>| {
                of.sort_by(|a, b| f(a).total_cmp(&f(b)));
                f(&of[of.len() / 2])
            };
            let median = Sample {
                sync_s: median(|s| s.sync_s, &mut of),
                all_s: median(|s| s.all_s, &mut of),
                peak_mib: median(|s| s.peak_mib, &mut of),
                settled_mib: median(|s| s.settled_mib, &mut of),
                cpu_s: median(|s| s.cpu_s, &mut of),
                server_cpu_s: server
                    .as_ref()
                    .map(|_| median(|s| s.server_cpu_s.unwrap_or(f64::NAN), &mut of)),
            };
            medians.insert(peer, median);
            let Sample { sync_s, all_s, peak_mib, settled_mib, cpu_s, server_cpu_s } = median;
            let all = if informer_only(peer) { "—".to_string() } else { format!("{all_s:.2} s") };
            let label = format!("{peer} ({})", wire(peer));
            let server_cpu = server_cpu(server_cpu_s, real.is_some());
            results.push(format!(
                "| {n} | {label} | {sync_s:.2} s | {cpu_s:.2} s | {server_cpu} | {peak_mib:.0} MiB | {settled_mib:.0} MiB | {all} |"
            ));
        }
        targets.extend(verdicts(n, &samples, &medians));
        decisions.extend(default_decision(n, &medians));
    }
    println!(
        "| pods | peer | sync | client CPU | server CPU | peak RSS | settled RSS | all reconciled once |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in results {
        println!("{r}");
    }
    list(
        "server CPU: kube-apiserver's from each child's start to the end of its measured work, its background included:",
        idle,
    );
    list(
        "targets (ctrlkit against the best of client-go's rows of its shape: sync at most 1.0x, client CPU at most 0.6x, peak RSS at most 0.5x, the server's CPU within the spread of client-go's runs):",
        targets,
    );
    list(
        "protobuf as the default (ctrlkit set to protobuf against ctrlkit set to JSON: median sync and client CPU no worse, at every size):",
        decisions,
    );
}

/// Prints a titled list after a blank line, if it has items.
fn list(title: &str, items: Vec<String>) {
    if items.is_empty() {
        return;
    }
    println!();
    println!("{title}");
    for item in items {
        println!("- {item}");
    }
}

/// Runs a child to its end: its "result" line, and the CPU time of the server's process
/// `server` from just before the child started to its "measured" line (the end of its
/// measured work).
fn run_child(mut command: Command, peer: &str, server: Option<&str>) -> (String, Option<f64>) {
    let server_before = server.map(cpu_of);
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let (mut text, mut result, mut server_cpu) = (String::new(), None, None);
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line == "measured" {
            server_cpu = server.zip(server_before).map(|(pid, before)| cpu_of(pid) - before);
        } else if line.starts_with("result ") {
            result = Some(line.clone());
        }
        text.push_str(&line);
        text.push('\n');
    }
    let status = child.wait().unwrap();
    let errors = errors.join().unwrap();
    let result = result.unwrap_or_else(|| panic!("{peer} child failed ({status}): {text}{errors}"));
    assert!(
        server.is_none() || server_cpu.is_some(),
        "{peer} child printed no \"measured\" line: {text}"
    );
    (result, server_cpu)
}

/// The server CPU column's cell: none on the embedded server, which runs in this process, or
/// on a real server whose process was not named.
fn server_cpu(seconds: Option<f64>, real: bool) -> String {
    match (seconds, real) {
        (Some(s), _) => format!("{s:.2} s"),
        (None, true) => "not measured (no CTRLKIT_BENCH_APISERVER_PID)".to_string(),
        (None, false) => "not measured (embedded server)".to_string(),
    }
}

/// A figure of a sample: its name, how to read it, and its target (a ratio to a peer's).
type Figure = (&'static str, fn(&Sample) -> f64, f64);

/// The targets for one size, shape by shape: ctrlkit (its default, and set to each format)
/// against the best client-go row of the same shape, figure by figure (sync at most 1.0x, client CPU at most
/// 0.6x, peak RSS at most 0.5x), and the server's CPU during ctrlkit's runs (its median)
/// within the spread of its CPU during that client-go row's runs (at most their highest).
/// Then JSON on both sides, set by hand.
fn verdicts(n: usize, samples: &[(&str, Sample)], medians: &HashMap<&str, Sample>) -> Vec<String> {
    let controllers = &["client-go", "client-go-example-wiring", "client-go-protobuf"][..];
    let shapes = [
        ("ctrlkit", controllers),
        ("ctrlkit-json", controllers),
        ("ctrlkit-protobuf", controllers),
        ("ctrlkit-informer", &["client-go-informer"][..]),
        ("ctrlkit-informer-json", &["client-go-informer"][..]),
        ("ctrlkit-informer-protobuf", &["client-go-informer"][..]),
        // The same wire format on both sides.
        ("ctrlkit-json", &["client-go-json"][..]),
    ];
    let figures: [Figure; 3] = [
        ("sync", |s| s.sync_s, 1.0),
        ("client CPU", |s| s.cpu_s, 0.6),
        ("peak RSS", |s| s.peak_mib, 0.5),
    ];
    let mut lines = Vec::new();
    for (ours, theirs) in shapes {
        let Some(us) = medians.get(ours) else { continue };
        for (figure, of, target) in figures {
            let best = theirs
                .iter()
                .filter_map(|peer| medians.get(peer).map(|s| (*peer, of(s))))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let Some((peer, best)) = best else { continue };
            let ratio = of(us) / best;
            let verdict = if ratio <= target { "met" } else { "missed" };
            lines.push(format!(
                "{n} pods, {ours} ({}), {figure}: {:.2} against {peer} {best:.2} ({ratio:.2}x, target {target}x): {verdict}",
                wire(ours),
                of(us)
            ));
        }
        // The server's CPU against the spread of the client-go row whose median is lowest.
        let Some(server) = us.server_cpu_s else { continue };
        let best = theirs
            .iter()
            .filter_map(|peer| medians.get(peer).and_then(|s| s.server_cpu_s).map(|m| (*peer, m)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let Some((peer, _)) = best else { continue };
        let spread: Vec<f64> = samples
            .iter()
            .filter(|(p, _)| *p == peer)
            .filter_map(|(_, s)| s.server_cpu_s)
            .collect();
        let low = spread.iter().copied().fold(f64::INFINITY, f64::min);
        let high = spread.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let verdict = if server <= high { "met" } else { "missed" };
        lines.push(format!(
            "{n} pods, {ours} ({}), server CPU: {server:.2} against {peer}'s runs {low:.2} to {high:.2} (target: within that spread): {verdict}",
            wire(ours)
        ));
    }
    lines
}

/// Whether protobuf may be the default at one size: ctrlkit's shapes set to protobuf against
/// the same set to JSON, median sync and client CPU no worse.
fn default_decision(n: usize, medians: &HashMap<&str, Sample>) -> Vec<String> {
    let pairs = [
        ("ctrlkit-protobuf", "ctrlkit-json"),
        ("ctrlkit-informer-protobuf", "ctrlkit-informer-json"),
    ];
    let figures: [Figure; 2] = [("sync", |s| s.sync_s, 1.0), ("client CPU", |s| s.cpu_s, 1.0)];
    let mut lines = Vec::new();
    for (protobuf, json) in pairs {
        let (Some(p), Some(j)) = (medians.get(protobuf), medians.get(json)) else { continue };
        for (figure, of, at_most) in figures {
            let verdict = if of(p) <= at_most * of(j) { "no worse" } else { "worse" };
            lines.push(format!(
                "{n} pods, {protobuf} against {json}, {figure}: {:.2} against {:.2} ({:.2}x): {verdict}",
                of(p),
                of(j),
                of(p) / of(j)
            ));
        }
    }
    lines
}

/// Counts reconciles and wakes the waiter when every pod had one.
struct Counter {
    seen: AtomicUsize,
    want: usize,
    done: Notify,
}

impl Counter {
    fn hit(&self) {
        if self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.want {
            self.done.notify_one();
        }
    }
}

struct Noop<K>(Arc<Counter>, std::marker::PhantomData<fn() -> K>);

#[async_trait]
impl<K: Send + Sync + 'static> Reconciler for Noop<K> {
    type Object = K;
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: &ObjectKey, _: Option<Arc<K>>) -> Result<Action, Self::Error> {
        self.0.hit();
        Ok(Action::done())
    }
}

/// The RSS (MiB) 3 s after every object was reconciled, the informer still running.
/// The CPU time so far (taken at the end of the measured work), then the RSS 3 s later.
/// Prints `measured` first: the parent reads the server's CPU then.
async fn cpu_and_settled() -> (f64, f64) {
    let cpu = cpu_s();
    println!("measured");
    tokio::time::sleep(Duration::from_secs(3)).await;
    (cpu, status_kib("VmRSS:") as f64 / 1024.0)
}

/// ctrlkit's informer (in `format`, else its default), queue and controller with one worker
/// over `api`; returns the time to
/// sync, the time until every object was reconciled once, and the settled RSS.
async fn ctrlkit<K: InformerObject>(
    api: Api<K>,
    indexer: Indexer<K>,
    streaming: bool,
    format: Option<WireFormat>,
    counter: Arc<Counter>,
    start: Instant,
) -> (Duration, Duration, (f64, f64))
where
    K::DynamicType: Default,
{
    let queue: WorkQueue<ObjectKey> = WorkQueue::new();
    let mut informer =
        Informer::builder(ListWatch::new(api)).indexer(indexer).streaming_list(streaming);
    if let Some(format) = format {
        informer = informer.wire_format(format);
    }
    let informer = informer.build();
    informer.add_event_handler(enqueue_handler(queue.clone()));
    let controller = Controller::new(queue, informer.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn({
        let counter = counter.clone();
        async move {
            controller
                .run(Noop(counter, std::marker::PhantomData), async {
                    let _ = stopped.await;
                })
                .await
        }
    });
    assert!(wait_for_cache_sync(&[&informer], std::future::pending()).await.is_ok());
    let sync = start.elapsed();
    counter.done.notified().await;
    let all = start.elapsed();
    let settled = cpu_and_settled().await;
    let _ = stop.send(());
    let _ = run.await;
    (sync, all, settled)
}

/// Polls (every 2 ms) until kube-runtime's reflector store holds `n` objects: it fills at once
/// when the first list is done. (Its `wait_until_ready` did not return in the controller's
/// setting, though the controller logged it ready.)
async fn until_holds(store: &kube_runtime::reflector::Store<Pod>, n: usize) {
    while store.state().len() < n {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// ctrlkit's informer alone, with its defaults (but `format`, if set), until synced: the time
/// to sync (twice: there is nothing to reconcile) and the settled RSS.
async fn ctrlkit_informer(
    api: Api<Pod>,
    format: Option<WireFormat>,
    start: Instant,
) -> (Duration, Duration, (f64, f64)) {
    let informer = match format {
        None => Informer::new(ListWatch::new(api)),
        Some(format) => Informer::builder(ListWatch::new(api)).wire_format(format).build(),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn({
        let informer = informer.clone();
        async move {
            informer
                .run(async {
                    let _ = stopped.await;
                })
                .await
        }
    });
    assert!(wait_for_cache_sync(&[&informer], std::future::pending()).await.is_ok());
    let sync = start.elapsed();
    let settled = cpu_and_settled().await;
    let _ = stop.send(());
    let _ = run.await;
    (sync, sync, settled)
}

/// The streaming list ctrlkit's informer asks for (bookmarks on), as the floors read it.
fn streaming_list(api: &Api<Pod>) -> http::Request<Vec<u8>> {
    use kube_client::api::WatchParams;
    let mut params = WatchParams::streaming_lists();
    params.bookmarks = true;
    let url = api.resource_url().to_owned();
    let mut request = kube_client::core::Request::new(url).watch(&params, "").unwrap();
    request.extensions_mut().insert("watch");
    request.headers_mut().insert("accept-encoding", "identity".parse().unwrap());
    request
}

/// The floor under every client: the streaming list's bytes read up to its
/// initial-events-end bookmark, as ctrlkit's informer requests it, line by line; with
/// `decode`, each line also decoded into a `WatchEvent<Pod>` and dropped (serde_json, on the
/// reading task: a bare decode, with nothing stored). The time to that bookmark (twice) and
/// the CPU and RSS.
async fn floor(api: Api<Pod>, decode: bool, start: Instant) -> (Duration, Duration, (f64, f64)) {
    // On a task of the runtime, as an informer reads, not on the thread that blocks on the
    // child's future: each chunk would cross threads to reach it.
    tokio::spawn(async move {
        use futures::io::AsyncBufReadExt;
        use kube_client::api::WatchEvent;
        let request = streaming_list(&api);
        let body = api.into_client().request_stream(request).await.unwrap();
        futures::pin_mut!(body);
        let mut line = Vec::new();
        loop {
            line.clear();
            assert!(body.read_until(b'\n', &mut line).await.unwrap() > 0, "the stream ended");
            if decode {
                let event: WatchEvent<Pod> = serde_json::from_slice(&line).unwrap();
                black_box(event);
            }
            if line.starts_with(br#"{"type":"BOOKMARK""#)
                && line.windows(18).any(|w| w == b"initial-events-end")
            {
                break;
            }
        }
        let sync = start.elapsed();
        let settled = cpu_and_settled().await;
        (sync, sync, settled)
    })
    .await
    .unwrap()
}

/// What client-go's generated clients accept for built-in kinds: protobuf first, then JSON.
const PROTOBUF_FIRST: &str = "application/vnd.kubernetes.protobuf,application/json";

/// The protobuf floors: the streaming list asked for as client-go asks, its frames read up to
/// the initial-events-end bookmark and each handed to `each`; panics unless the answer is
/// protobuf watch frames. The time to that bookmark (twice) and the CPU and RSS.
async fn floor_protobuf(
    api: Api<Pod>,
    each: fn(&[u8]),
    start: Instant,
) -> (Duration, Duration, (f64, f64)) {
    // On a task of the runtime, as `floor` (and an informer) reads.
    tokio::spawn(async move {
        use http_body_util::BodyExt;
        let mut request = streaming_list(&api);
        request.headers_mut().insert("accept", PROTOBUF_FIRST.parse().unwrap());
        let response = api.into_client().send(request.map(Into::into)).await.unwrap();
        let content_type = response.headers().get("content-type").map(|v| v.to_owned());
        assert!(
            response.status().is_success()
                && content_type.as_ref().is_some_and(|v| v == ctrlkit_protobuf::WATCH_MEDIA_TYPE),
            "asked for protobuf, the server answered {} with Content-Type {content_type:?}: \
             this floor measures protobuf alone",
            response.status()
        );
        let mut body = response.into_body().into_data_stream();
        let mut frames = ctrlkit_protobuf::watch::FrameReader::new(usize::MAX);
        'frames: loop {
            let chunk = body.next().await.expect("the stream ended before its bookmark").unwrap();
            frames.extend(&chunk);
            while let Some(frame) = frames.next_frame().unwrap() {
                each(frame);
                if initial_events_end(frame) {
                    break 'frames;
                }
            }
        }
        let sync = start.elapsed();
        let settled = cpu_and_settled().await;
        drop(body);
        (sync, sync, settled)
    })
    .await
    .unwrap()
}

/// Whether a frame is the initial-events-end bookmark. The event's type is read from the
/// frame's start (`WatchEvent.type`, field 1, comes first); only bookmarks are decoded.
fn initial_events_end(frame: &[u8]) -> bool {
    assert_eq!(frame.first(), Some(&0x0a), "a frame that does not start with its event's type");
    frame.starts_with(b"\x0a\x08BOOKMARK")
        && prost_pod(frame).metadata.is_some_and(|meta| {
            meta.annotations.get("k8s.io/initial-events-end").is_some_and(|v| v == "true")
        })
}

/// A frame's `WatchEvent` decoded by prost, and its object: a whole `k8s\0` + `runtime.Unknown`.
fn event_object(frame: &[u8]) -> Vec<u8> {
    let event = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent::decode(frame).unwrap();
    event.object.and_then(|object| object.raw).expect("a watch event without an object")
}

/// A frame's pod through the transcoder: its `WatchEvent` decoded by prost, its object to a
/// `serde_json::Value` by `ctrlkit-protobuf`, then into k8s-openapi's `Pod` by serde.
fn transcoded_pod(frame: &[u8]) {
    let json = ctrlkit_protobuf::transcode::to_json(&event_object(frame)).unwrap();
    black_box(serde_json::from_value::<Pod>(json).unwrap());
}

/// A frame's pod, decoded by prost into k8s-pb's types: the event, its object's envelope after
/// the `k8s\0` magic, the pod the envelope holds.
fn prost_pod(frame: &[u8]) -> k8s_pb::api::core::v1::Pod {
    let object = event_object(frame);
    let envelope = object.strip_prefix(b"k8s\0").expect("an object without the k8s\\0 magic");
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(envelope).unwrap();
    k8s_pb::api::core::v1::Pod::decode(unknown.raw.unwrap_or_default().as_slice()).unwrap()
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

fn child(peer: &str, target: &str, n: usize, ns: &str) {
    if let Ok(filter) = std::env::var("CHILD_LOG") {
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    }
    let rt = runtime();
    let (sync, all, settled) = rt.block_on(async {
        let client = client_of(target).await;
        let api: Api<Pod> =
            if ns.is_empty() { Api::all(client) } else { Api::namespaced(client, ns) };
        let counter = Arc::new(Counter { seen: AtomicUsize::new(0), want: n, done: Notify::new() });
        let start = Instant::now();
        match peer {
            "ctrlkit" | "ctrlkit-json" | "ctrlkit-protobuf" => {
                ctrlkit(api, Indexer::new(), true, format_of(peer), counter, start).await
            }
            "ctrlkit-paginated" => ctrlkit(api, Indexer::new(), false, None, counter, start).await,
            "ctrlkit-decoded" => ctrlkit(api, Indexer::decoded(), true, None, counter, start).await,
            "ctrlkit-compact" => ctrlkit(api, Indexer::compact(), true, None, counter, start).await,
            "ctrlkit-informer" | "ctrlkit-informer-json" | "ctrlkit-informer-protobuf" => {
                ctrlkit_informer(api, format_of(peer), start).await
            }
            "floor-read" => floor(api, false, start).await,
            "floor-decode" => floor(api, true, start).await,
            "floor-read-protobuf" => floor_protobuf(api, |_| {}, start).await,
            "floor-decode-prost" => {
                floor_protobuf(api, |frame| drop(black_box(prost_pod(frame))), start).await
            }
            "floor-decode-transcoder" => floor_protobuf(api, transcoded_pod, start).await,
            "kube-runtime-reflector" => {
                use kube_runtime::{reflector, watcher};
                let (store, writer) = reflector::store();
                let stream = reflector(writer, watcher(api, watcher::Config::default()));
                let runner = tokio::spawn(stream.for_each(|_| async {}));
                until_holds(&store, n).await;
                let sync = start.elapsed();
                let settled = cpu_and_settled().await;
                runner.abort();
                (sync, sync, settled)
            }
            "ctrlkit-metadata" => {
                let client = api.into_client();
                let api: Api<PartialObjectMeta<Pod>> =
                    if ns.is_empty() { Api::all(client) } else { Api::namespaced(client, ns) };
                ctrlkit(api, Indexer::new(), true, None, counter, start).await
            }
            _ => {
                use kube_runtime::controller::{Action as KAction, Controller as KController};
                let controller = KController::new(api, kube_runtime::watcher::Config::default());
                let store = controller.store();
                let ctx = counter.clone();
                let done = counter.clone();
                let runner = tokio::spawn(
                    controller
                        .run(
                            |_pod: Arc<Pod>, ctx: Arc<Counter>| async move {
                                ctx.hit();
                                Ok::<_, Never>(KAction::await_change())
                            },
                            |_, _, _| KAction::await_change(),
                            ctx,
                        )
                        .for_each(|_| async {}),
                );
                until_holds(&store, n).await;
                let sync = start.elapsed();
                let finished = tokio::time::timeout(Duration::from_secs(60), async {
                    if done.seen.load(Ordering::SeqCst) < n {
                        done.done.notified().await;
                    }
                });
                assert!(
                    finished.await.is_ok(),
                    "kube-runtime reconciled {} of {n}",
                    done.seen.load(Ordering::SeqCst)
                );
                let all = start.elapsed();
                let settled = cpu_and_settled().await;
                runner.abort();
                (sync, all, settled)
            }
        }
    });
    let (cpu, settled) = settled;
    let peak = peak_rss_kib() as f64 / 1024.0;
    println!("result {} {} {} {} {}", sync.as_secs_f64(), all.as_secs_f64(), peak, settled, cpu);
}
