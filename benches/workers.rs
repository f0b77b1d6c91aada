//! Adaptive workers against fixed counts on an I/O-bound reconcile, in real time.
//!
//! `cargo bench --bench workers [-- ROUNDS [SECONDS]]` (default 2 rounds of 12 s per run;
//! `--profile dev` builds it on the test build's dependencies)
//!
//! Each run is a controller of ConfigMaps on the embedded API server (its in-process client),
//! built as a user builds one, defaults left but the worker setting: fixed 1, 4, 16 and 64
//! workers, and `AdaptiveWorkers::new(1, 64)`. Its queue holds 256 keys, each reconciled by a
//! 20 ms sleep (an API call's wait) that asks to run again at once, so the queue never drains.
//! Runs alternate (every configuration once per round). Prints, per run, the reconciles per
//! second over its last 5 s; then each shape's median, and per run the time from its first
//! reconcile until a 1 s window first held 90% of the best fixed count's median rate.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ctrlkit::cache::ObjectKey;
use ctrlkit::controller::{Action, AdaptiveWorkers, Config, Controller, Reconciler};
use ctrlkit_apiserver::ApiServer;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::Api;

/// Keys in the queue: more than the largest count, so it stays deep.
const KEYS: usize = 256;
/// What one reconcile waits.
const WORK: Duration = Duration::from_millis(20);
/// How often a run's count of reconciles is sampled.
const SAMPLE: Duration = Duration::from_millis(100);
/// The tail of a run its steady rate is read over.
const STEADY: Duration = Duration::from_secs(5);

#[derive(Clone, Default)]
struct Io(Arc<AtomicU64>);

#[async_trait]
impl Reconciler for Io {
    type Object = ConfigMap;
    type Error = std::convert::Infallible;

    async fn reconcile(
        &self,
        _: &ObjectKey,
        _: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Self::Error> {
        tokio::time::sleep(WORK).await;
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(Action::requeue_after(Duration::ZERO))
    }
}

#[derive(Clone, Copy)]
enum Shape {
    Fixed(usize),
    Adaptive,
}

impl Shape {
    fn name(self) -> String {
        match self {
            Self::Fixed(n) => format!("fixed {n}"),
            Self::Adaptive => "adaptive 1..64".to_owned(),
        }
    }
    fn config(self) -> Config {
        match self {
            Self::Fixed(n) => Config::default().workers(n),
            Self::Adaptive => Config::default().adaptive_workers(AdaptiveWorkers::new(1, 64)),
        }
    }
}

/// One run: the count of reconciles at each sample, and the worker count at the end.
struct Run {
    samples: Vec<u64>,
    workers: usize,
}

impl Run {
    /// Reconciles per second over the last `STEADY`.
    fn steady(&self) -> f64 {
        let back = (STEADY.as_millis() / SAMPLE.as_millis()) as usize;
        let last = self.samples.len() - 1;
        (self.samples[last] - self.samples[last - back]) as f64 / STEADY.as_secs_f64()
    }
    /// From the run's start until a 1 s window first reached `rate`, if one did.
    fn time_to(&self, rate: f64) -> Option<Duration> {
        let window = (1000 / SAMPLE.as_millis()) as usize;
        (window..self.samples.len())
            .find(|&i| (self.samples[i] - self.samples[i - window]) as f64 >= rate)
            .map(|i| SAMPLE * i as u32)
    }
}

async fn run(server: &ApiServer, shape: Shape, length: Duration) -> Run {
    let configmaps: Api<ConfigMap> = Api::namespaced(server.in_process_client(), "default");
    let controller = Controller::builder(configmaps).config(shape.config()).build();
    for i in 0..KEYS {
        controller.queue().add(ObjectKey::namespaced("default", &format!("k{i}")));
    }
    let io = Io::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = controller.clone();
    let task = tokio::spawn(running.run(io.clone(), async move {
        let _ = stopped.await;
    }));
    while io.0.load(Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (start, mut samples) = (Instant::now(), vec![0]);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + SAMPLE, SAMPLE);
    while start.elapsed() < length {
        tick.tick().await;
        samples.push(io.0.load(Ordering::Relaxed));
    }
    let workers = controller.workers();
    let _ = stop.send(());
    task.await.expect("the run").expect("a clean stop");
    Run { samples, workers }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let length = Duration::from_secs(args.next().and_then(|a| a.parse().ok()).unwrap_or(12));
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let shapes =
        [Shape::Fixed(1), Shape::Fixed(4), Shape::Fixed(16), Shape::Fixed(64), Shape::Adaptive];
    println!(
        "{KEYS} keys, {} ms I/O per reconcile, {rounds} rounds of {} s per run, {} runtime threads",
        WORK.as_millis(),
        length.as_secs(),
        runtime.metrics().num_workers()
    );
    let runs: Vec<Vec<Run>> = runtime.block_on(async {
        let server = ApiServer::start().await.expect("the server starts");
        let mut runs: Vec<Vec<Run>> = shapes.iter().map(|_| Vec::new()).collect();
        for round in 0..rounds {
            for (i, shape) in shapes.iter().enumerate() {
                let run = run(&server, *shape, length).await;
                println!(
                    "round {round} {:<15} {:>8.0} reconciles/s over the last {} s, {} workers at the end",
                    shape.name(),
                    run.steady(),
                    STEADY.as_secs(),
                    run.workers
                );
                runs[i].push(run);
            }
        }
        runs
    });
    let steady: Vec<f64> =
        runs.iter().map(|r| median(r.iter().map(Run::steady).collect())).collect();
    let best = steady[..shapes.len() - 1].iter().copied().fold(0.0, f64::max);
    println!("\nmedians; 90% of the best fixed count's rate = {:.0}/s", 0.9 * best);
    for ((shape, runs), rate) in shapes.iter().zip(&runs).zip(&steady) {
        let reached: Vec<String> = runs
            .iter()
            .map(|r| match r.time_to(0.9 * best) {
                Some(t) => format!("{:.1} s", t.as_secs_f64()),
                None => "never".to_owned(),
            })
            .collect();
        println!(
            "{:<15} {:>8.0} reconciles/s ({:>3.0}% of the best fixed), 90% reached after: {}",
            shape.name(),
            rate,
            100.0 * rate / best,
            reached.join(", ")
        );
    }
}
