//! Embedded API server benchmarks (`cargo bench --bench apiserver`):
//!
//! - a paginated list of 10,000 realistic pods (~3.4 KB of JSON each) in pages of 500, read
//!   through kube-client's raw request path (the bytes, not their decoding, are the server's
//!   work);
//! - 1,000 concurrent watchers each receiving the same 1,000 changes (ConfigMaps, ~350 bytes),
//!   timed from the first change to the last event read by the last watcher;
//! - memory per stored pod: the process's resident memory before and after 100,000 realistic
//!   pods are created through the API, printed once before the timed runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use ctrlkit_apiserver::ApiServer;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::Api;
use kube_client::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

mod support;
use support::{create_pods, runtime, status_kib};

/// Resident memory of this process, in bytes.
fn rss() -> usize {
    status_kib("VmRSS:") as usize * 1024
}

fn memory_per_pod(rt: &tokio::runtime::Runtime) {
    rt.block_on(async {
        let server = ApiServer::start().await.unwrap();
        let before = rss();
        let started = Instant::now();
        create_pods(&server, "default", 100_000, false).await;
        let took = started.elapsed();
        let after = rss();
        assert!(server.object_count() >= 100_000, "the server holds 100,000 pods");
        eprintln!(
            "memory: 100,000 realistic pods created in {:.1} s ({:.0} creates/s); RSS grew {:.0} MiB, {:.1} KiB per stored pod",
            took.as_secs_f64(),
            100_000.0 / took.as_secs_f64(),
            (after - before) as f64 / (1 << 20) as f64,
            (after - before) as f64 / 100_000.0 / 1024.0
        );
    });
}

/// Lists every pod of `namespace` in pages of `limit`; returns the number of pods.
async fn paginated_list(client: &kube_client::Client, namespace: &str, limit: usize) -> usize {
    let mut token = String::new();
    let mut total = 0;
    loop {
        let mut uri = format!("/api/v1/namespaces/{namespace}/pods?limit={limit}");
        if !token.is_empty() {
            uri.push_str("&continue=");
            uri.push_str(&token);
        }
        let request = axum::http::Request::get(uri).body(Vec::new()).unwrap();
        let page = client.request_text(request).await.unwrap();
        total += page.matches("\"kind\":\"Pod\"").count();
        token = page
            .split_once("\"continue\":\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(t, _)| t.to_owned())
            .unwrap_or_default();
        if token.is_empty() {
            return total;
        }
    }
}

/// Opens a raw watch on ConfigMaps and counts event lines until `want` have arrived.
async fn watcher(addr: std::net::SocketAddr, from_rv: u64, want: usize, ready: Arc<AtomicUsize>) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET /api/v1/namespaces/default/configmaps?watch=1&resourceVersion={from_rv} HTTP/1.1\r\nHost: {addr}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    // Headers end with an empty line.
    loop {
        line.clear();
        reader.read_line(&mut line).await.unwrap();
        if line == "\r\n" {
            break;
        }
    }
    ready.fetch_add(1, Ordering::SeqCst);
    let mut events = 0;
    while events < want {
        line.clear();
        if reader.read_line(&mut line).await.unwrap() == 0 {
            panic!("watch ended after {events} events");
        }
        // Chunked framing puts size lines between events; events are the JSON lines.
        if line.starts_with("{\"type\"") {
            events += 1;
        }
    }
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

fn watchers_and_changes(
    rt: &tokio::runtime::Runtime,
    server: &ApiServer,
    watchers: usize,
    changes: usize,
) -> Duration {
    rt.block_on(async {
        let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
        let from = server.resource_version();
        let ready = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..watchers)
            .map(|_| tokio::spawn(watcher(server.addr(), from, changes, ready.clone())))
            .collect();
        while ready.load(Ordering::SeqCst) < watchers {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let start = Instant::now();
        for _ in 0..changes {
            // A fresh value each time: a patch that changes nothing writes nothing.
            let n = COUNTER.fetch_add(1, Ordering::Relaxed) + 1;
            let patch = Patch::Merge(json!({ "data": { "counter": n.to_string() } }));
            cms.patch("bench", &PatchParams::default(), &patch).await.unwrap();
        }
        for t in tasks {
            t.await.unwrap();
        }
        start.elapsed()
    })
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    memory_per_pod(&rt);

    let server = rt.block_on(async {
        let server = ApiServer::start().await.unwrap();
        create_pods(&server, "default", 10_000, false).await;
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": { "name": "bench", "labels": { "app": "bench" } },
            "data": { "counter": "0", "note": "a small object, changed 1,000 times" }
        }))
        .unwrap();
        Api::<ConfigMap>::namespaced(server.client(), "default")
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
        server
    });
    let client = server.client();

    let mut g = c.benchmark_group("apiserver");
    g.sample_size(10).sampling_mode(SamplingMode::Flat).warm_up_time(Duration::from_secs(1));
    g.throughput(Throughput::Elements(10_000));
    g.bench_function("list_10k_pods_pages_of_500", |b| {
        b.to_async(&rt).iter(|| async {
            assert_eq!(paginated_list(&client, "default", 500).await, 10_000);
        })
    });
    g.throughput(Throughput::Elements(1_000_000));
    g.measurement_time(Duration::from_secs(30));
    g.bench_function("1000_watchers_x_1000_changes", |b| {
        b.iter_custom(|iters| {
            (0..iters).map(|_| watchers_and_changes(&rt, &server, 1000, 1000)).sum()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
