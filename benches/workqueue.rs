//! Workqueue benchmarks, the scenarios client-go's workqueue was measured on (see README).
//!
//! `cargo bench --bench workqueue`. Keys are `String`s like `"default/pod-123456"`, made
//! outside the timed region. Each scenario is timed as a whole; criterion's throughput line
//! gives items (or adds) per second, and time / elements gives the cost per operation.
//!
//! The concurrent scenarios run producers and workers as tasks on a 2-thread tokio runtime,
//! as Go's goroutines run on GOMAXPROCS=2; producers yield to the scheduler every 256 adds,
//! as an informer's handler task would between events. Workers start and park before the
//! clock starts.

use std::time::{Duration, Instant};

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use ctrlkit::workqueue::WorkQueue;
use futures::FutureExt;

const N: usize = 1_000_000;

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("default/pod-{:06}", i)).collect()
}

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .unwrap()
}

/// Adds `N` distinct keys from one thread.
fn add_distinct(keys: Vec<String>) -> Duration {
    let q = WorkQueue::new();
    let start = Instant::now();
    for k in keys {
        q.add(k);
    }
    let elapsed = start.elapsed();
    drop(q);
    elapsed
}

/// Gets and dones `N` queued keys from one thread.
fn get_done_all(keys: Vec<String>) -> Duration {
    let q = WorkQueue::new();
    for k in keys {
        q.add(k);
    }
    let start = Instant::now();
    while let Some(Some(k)) = q.get().now_or_never() {
        q.done(&k);
    }
    start.elapsed()
}

/// Adds `keys` from a task, yielding every 256 adds.
async fn produce(q: WorkQueue<String>, keys: Vec<String>) {
    for (i, k) in keys.into_iter().enumerate() {
        q.add(k);
        if i % 256 == 255 {
            tokio::task::yield_now().await;
        }
    }
}

/// Two producers add `N` distinct keys between them while two workers get + done them all.
fn producers_and_workers(rt: &tokio::runtime::Runtime, keys: Vec<String>) -> Duration {
    let q = WorkQueue::new();
    let mut halves = keys;
    let second = halves.split_off(halves.len() / 2);
    rt.block_on(async {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move {
                    let mut n = 0usize;
                    while let Some(k) = q.get().await {
                        q.done(&k);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let start = Instant::now();
        let producers: Vec<_> = [halves, second]
            .into_iter()
            .map(|part| tokio::spawn(produce(q.clone(), part)))
            .collect();
        for p in producers {
            p.await.unwrap();
        }
        q.shut_down();
        let mut handled = 0;
        for w in workers {
            handled += w.await.unwrap();
        }
        assert_eq!(handled, N);
        start.elapsed()
    })
}

/// One producer adds `N` keys drawn from 1,000 while two workers drain.
fn dedup_storm(rt: &tokio::runtime::Runtime, adds: Vec<String>) -> Duration {
    let q = WorkQueue::new();
    rt.block_on(async {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move {
                    while let Some(k) = q.get().await {
                        q.done(&k);
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let start = Instant::now();
        tokio::spawn(produce(q.clone(), adds)).await.unwrap();
        let elapsed = start.elapsed();
        q.shut_down();
        for w in workers {
            w.await.unwrap();
        }
        elapsed
    })
}

/// `add_rate_limited` then `forget` for each of `N` keys, default controller limiter.
/// Each key comes twice, both made outside the timed region: one moves into the queue, the
/// other names it to `forget`.
fn rate_limited_forget(rt: &tokio::runtime::Runtime, keys: Vec<(String, String)>) -> Duration {
    let _guard = rt.enter();
    let q = WorkQueue::new();
    let start = Instant::now();
    for (k, same) in keys {
        q.add_rate_limited(k);
        q.forget(&same);
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let distinct = keys(N);
    let storm: Vec<String> = (0..N).map(|i| distinct[i % 1000].clone()).collect();
    let rt = runtime(2);

    let mut g = c.benchmark_group("workqueue");
    g.sample_size(10).sampling_mode(SamplingMode::Flat).warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Elements(N as u64));

    let run = |g: &mut criterion::BenchmarkGroup<'_, _>, name: &str, f: &dyn Fn() -> Duration| {
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| f()).sum())
        });
    };
    run(&mut g, "add_1m_distinct", &|| add_distinct(distinct.clone()));
    run(&mut g, "get_done_1m", &|| get_done_all(distinct.clone()));
    run(&mut g, "2_producers_2_workers_1m", &|| producers_and_workers(&rt, distinct.clone()));
    run(&mut g, "dedup_storm_1m_adds_1k_keys", &|| dedup_storm(&rt, storm.clone()));
    run(&mut g, "add_rate_limited_forget_1m", &|| {
        rate_limited_forget(&rt, distinct.iter().map(|k| (k.clone(), k.clone())).collect())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
