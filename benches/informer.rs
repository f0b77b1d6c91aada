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
//! JSON each). For each size it then runs one child process per measurement, alternating
//! ctrlkit and kube-runtime, three runs each, so each peer's peak memory is its own process's
//! high-water mark (VmHWM) and the server's memory is not counted. Each child:
//! - ctrlkit: an `Informer` over all pods with its defaults (a streaming list where the
//!   server has them, Kubernetes 1.27 on; a paginated list where it refuses them), the
//!   key-enqueuing handler, a `WorkQueue` and a `Controller` with one worker and a no-op
//!   reconciler;
//! - ctrlkit-paginated: as ctrlkit, with streaming lists off (`streaming_list(false)`): pages
//!   of 500 on every server, for the same run's comparison;
//! - kube-runtime: `kube_runtime::Controller` (its reflector store and its scheduler) with the
//!   same no-op reconciler;
//! - ctrlkit-metadata: as ctrlkit, with a metadata-only informer (`PartialObjectMeta<Pod>`,
//!   listed and watched as `PartialObjectMetadata`), for the memory of caching metadata alone;
//! - ctrlkit-compact: as ctrlkit, with a compact store (`Indexer::compact()`: each pod kept as
//!   its JSON, decoded on every read, so each reconcile's read of its pod is a decode);
//! - ctrlkit-informer: the shape a user writes first, an `Informer` with its defaults run until
//!   synced: no handler, no queue, no controller;
//! - kube-runtime-reflector: the same shape in kube-runtime, a `reflector` filling a store from
//!   a `watcher` with its defaults;
//! - with `CTRLKIT_PEER_CLIENT_GO_INFORMER`: client-go (its harness's `controller` shape: a
//!   shared informer, the enqueueing handler, a rate-limited workqueue, one worker),
//!   client-go-protobuf (the same with protobuf on the wire, as kube-controller-manager runs)
//!   and client-go-informer (the informer alone until synced).
//!
//! Each reports the time until its store holds the first list (`has_synced` / the reflector
//! store holding all pods, polled every 2 ms), the time until every pod was reconciled once
//! (none in the informer-only shapes), its peak RSS, and its settled RSS (3 s after every pod
//! was reconciled, or after the sync in the informer-only shapes, the informer still running).
//! Medians are printed at the end, then the memory target (the default peak RSS at or under
//! client-go's) in each shape; the README records them.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ctrlkit::cache::{
    Indexer, Informer, InformerObject, ListWatch, ObjectKey, wait_for_cache_sync,
};
use ctrlkit::controller::{Action, Controller, Reconciler, enqueue_handler};
use ctrlkit::workqueue::WorkQueue;
use ctrlkit_apiserver::ApiServer;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube_client::core::PartialObjectMeta;
use kube_client::{Api, Client, Config};
use tokio::sync::Notify;

#[path = "../apiserver/benches/support/mod.rs"]
mod support;
use support::{create_pods, create_pods_with, runtime, status_kib};

const PEERS: [&str; 7] = [
    "ctrlkit",
    "kube-runtime",
    "ctrlkit-paginated",
    "ctrlkit-metadata",
    "ctrlkit-compact",
    "ctrlkit-informer",
    "kube-runtime-reflector",
];
/// client-go's peers and the harness shape each runs.
const CLIENT_GO: [(&str, &str); 3] = [
    ("client-go", "controller"),
    ("client-go-protobuf", "controller-protobuf"),
    ("client-go-informer", "informer"),
];

/// Whether `peer` is an informer-only shape (nothing reconciled).
fn informer_only(peer: &str) -> bool {
    peer.ends_with("-informer") || peer.ends_with("-reflector")
}
const RUNS: usize = 3;

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
    let mut peers = PEERS.to_vec();
    if client_go.is_some() {
        peers.extend(CLIENT_GO.iter().map(|(peer, _)| *peer));
    }
    let mut results = Vec::new();
    let mut targets = Vec::new();
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
        let mut samples: Vec<(&str, Sample)> = Vec::new();
        for run in 0..RUNS {
            for &peer in &peers {
                let shape = CLIENT_GO.iter().find(|(p, _)| *p == peer).map(|(_, shape)| *shape);
                let mut command = match (shape, &client_go) {
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
                };
                let out = command.output().unwrap();
                let text = String::from_utf8_lossy(&out.stdout);
                let line = text.lines().find(|l| l.starts_with("result ")).unwrap_or_else(|| {
                    panic!("{peer} child failed: {text}{}", String::from_utf8_lossy(&out.stderr))
                });
                let v: Vec<f64> =
                    line.split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect();
                let s = Sample { sync_s: v[0], all_s: v[1], peak_mib: v[2], settled_mib: v[3] };
                eprintln!(
                    "{n} pods, run {run}, {peer}: sync {:.2} s, all reconciled {:.2} s, peak {:.0} MiB, settled {:.0} MiB",
                    s.sync_s, s.all_s, s.peak_mib, s.settled_mib
                );
                samples.push((peer, s));
            }
        }
        let mut peaks = std::collections::HashMap::new();
        for &peer in &peers {
            let mut of: Vec<Sample> =
                samples.iter().filter(|(p, _)| *p == peer).map(|(_, s)| *s).collect();
            let median = |f: fn(&Sample) -> f64, of: &mut Vec<Sample>| {
                of.sort_by(|a, b| f(a).total_cmp(&f(b)));
                f(&of[of.len() / 2])
            };
            let (sync, all, peak, settled) = (
                median(|s| s.sync_s, &mut of),
                median(|s| s.all_s, &mut of),
                median(|s| s.peak_mib, &mut of),
                median(|s| s.settled_mib, &mut of),
            );
            peaks.insert(peer, peak);
            let all = if informer_only(peer) { "—".to_string() } else { format!("{all:.2} s") };
            results.push(format!(
                "| {n} | {peer} | {sync:.2} s | {peak:.0} MiB | {settled:.0} MiB | {all} |"
            ));
        }
        // The target: ctrlkit's default peak RSS at or under client-go's, shape for shape.
        for (ours, theirs) in [("ctrlkit", "client-go"), ("ctrlkit-informer", "client-go-informer")]
        {
            if let (Some(ours_mib), Some(theirs_mib)) = (peaks.get(ours), peaks.get(theirs)) {
                let verdict = if ours_mib <= theirs_mib { "met" } else { "missed" };
                targets.push(format!(
                    "{n} pods: {ours} {ours_mib:.0} MiB against {theirs} {theirs_mib:.0} MiB ({:.2}x): {verdict}",
                    ours_mib / theirs_mib
                ));
            }
        }
    }
    println!("| pods | peer | sync | peak RSS | settled RSS | all reconciled once |");
    println!("|---|---|---|---|---|---|");
    for r in results {
        println!("{r}");
    }
    if !targets.is_empty() {
        println!();
        println!("target (peak RSS at or under client-go's):");
        for t in targets {
            println!("- {t}");
        }
    }
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
async fn settled_mib() -> f64 {
    tokio::time::sleep(Duration::from_secs(3)).await;
    status_kib("VmRSS:") as f64 / 1024.0
}

/// ctrlkit's informer, queue and controller with one worker over `api`; returns the time to
/// sync, the time until every object was reconciled once, and the settled RSS.
async fn ctrlkit<K: InformerObject>(
    api: Api<K>,
    indexer: Indexer<K>,
    streaming: bool,
    counter: Arc<Counter>,
    start: Instant,
) -> (Duration, Duration, f64)
where
    K::DynamicType: Default,
{
    let queue: WorkQueue<ObjectKey> = WorkQueue::new();
    let informer =
        Informer::builder(ListWatch::new(api)).indexer(indexer).streaming_list(streaming).build();
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
    let settled = settled_mib().await;
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

/// ctrlkit's informer alone, with its defaults, until synced: the time to sync (twice: there
/// is nothing to reconcile) and the settled RSS.
async fn ctrlkit_informer(api: Api<Pod>, start: Instant) -> (Duration, Duration, f64) {
    let informer = Informer::new(ListWatch::new(api));
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
    let settled = settled_mib().await;
    let _ = stop.send(());
    let _ = run.await;
    (sync, sync, settled)
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
            "ctrlkit" => ctrlkit(api, Indexer::new(), true, counter, start).await,
            "ctrlkit-paginated" => ctrlkit(api, Indexer::new(), false, counter, start).await,
            "ctrlkit-compact" => ctrlkit(api, Indexer::compact(), true, counter, start).await,
            "ctrlkit-informer" => ctrlkit_informer(api, start).await,
            "kube-runtime-reflector" => {
                use kube_runtime::{reflector, watcher};
                let (store, writer) = reflector::store();
                let stream = reflector(writer, watcher(api, watcher::Config::default()));
                let runner = tokio::spawn(stream.for_each(|_| async {}));
                until_holds(&store, n).await;
                let sync = start.elapsed();
                let settled = settled_mib().await;
                runner.abort();
                (sync, sync, settled)
            }
            "ctrlkit-metadata" => {
                let client = api.into_client();
                let api: Api<PartialObjectMeta<Pod>> =
                    if ns.is_empty() { Api::all(client) } else { Api::namespaced(client, ns) };
                ctrlkit(api, Indexer::new(), true, counter, start).await
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
                let settled = settled_mib().await;
                runner.abort();
                (sync, all, settled)
            }
        }
    });
    let peak = peak_rss_kib() as f64 / 1024.0;
    println!("result {} {} {} {}", sync.as_secs_f64(), all.as_secs_f64(), peak, settled);
}
