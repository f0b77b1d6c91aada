//! Workqueue benchmarks: client-go's workqueue scenarios, each in the shapes users write.
//!
//! `cargo bench --bench workqueue` runs them under criterion. `scripts/bench-workqueue.sh`
//! runs them beside client-go's own workqueue (`benches/peers/client-go/workqueue`), one
//! process per measurement, alternating, and prints the README's table; it calls this binary
//! as `cargo bench --bench workqueue -- --once SCENARIO`, which runs one scenario once and
//! prints `SCENARIO NS_PER_OP`.
//!
//! Keys are `String`s like `"default/pod-123456"`, made outside the timed region; queues are
//! `WorkQueue::new()` (the default controller rate limiter, no metrics). The scenarios:
//! - `add`: one million distinct keys added in a loop on the main thread;
//! - `get_done`: then all of them taken and done, one at a time;
//! - `producers_workers`: two producers add a million distinct keys between them while two
//!   workers take and done them all (time until the last is done);
//! - `dedup_storm`: one producer adds a million keys drawn from 1,000 while two workers drain;
//! - `dedup_alone`: the same million adds with no worker running, so that all but the first
//!   1,000 find their key already queued: the cost of that add alone; its `floor` shape is no
//!   queue at all, only what any shared queue taking owned keys must do per add (hash the key,
//!   one atomic read-modify-write, drop the key), and its `lookup` shape that floor with the
//!   key found in a hash table of the 1,000 keys (a probe and a comparison of the keys), the
//!   least a queue that looks its keys up pays, with no lock and no queue state around it;
//! - `rate_limited_forget`: `add_rate_limited` then `forget` for a million keys.
//!
//! and the shapes (after the `/`):
//! - `plain`: as above, nothing more;
//! - `tasks`: producers are tokio tasks on a 2-thread runtime that never yield (a handler
//!   enqueueing a burst, a `for` loop in an async fn);
//! - `yielding_tasks`: the same tasks yielding every 256 adds (ctrlkit's earlier benchmark
//!   shape, kept for comparison);
//! - `threads`: producers are OS threads beside the runtime's two (four threads on two
//!   cores); for the storm, the producer is the main task, a tight loop in `block_on`;
//! - `priorities`: `plain` or `tasks`, with priorities in use: keys alternate between
//!   `Priority::LOW` and `Priority::NORMAL` (the storm cycles through three priorities, so
//!   keys are raised too);
//! - `strict` (`get_done` only): `priorities` on a queue with aging off
//!   (`WorkQueueBuilder::aging(Duration::MAX)`, controller-runtime's strict order). Not in the
//!   README's table: client-go has no priorities, and aging is on by default.
//! - `fair` (`add`, `get_done`, `dedup_alone`): `plain` on a queue fair by namespace
//!   (`WorkQueueBuilder::fairness`, as a controller's queue is by default), its keys spread
//!   over 100 namespaces (`"ns-42/pod-123456"`, two bytes shorter than `plain`'s).
//!
//! and, apart (`--once` prints `SCENARIO P50_NS P99_NS`; criterion does not run them):
//! - `quiet_wait/fair` and `quiet_wait/fifo`: two workers (a 2 µs spin per item) drain a queue
//!   that a noisy namespace keeps 5,000 keys deep, while a quiet namespace adds one key every
//!   millisecond, 300 in all: the quiet keys' waits from add to `get`, fair against FIFO.
//!
//! Workers are tokio tasks on the 2-thread runtime, started and parked before the clock
//! starts, as a controller's are. client-go's harness runs the same scenarios with
//! goroutines (GOMAXPROCS=2), which never yield by hand.
//!
//! To profile one scenario's timed region alone, leaving out the making of keys and queues:
//! ```text
//! mkfifo /tmp/ctl /tmp/ack
//! CTRLKIT_PERF_CTL=/tmp/ctl CTRLKIT_PERF_ACK=/tmp/ack perf record -D -1 \
//!     --control=fifo:/tmp/ctl,/tmp/ack -e cpu-clock BENCH_BINARY --once get_done/priorities
//! ```

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use ctrlkit::workqueue::{FairnessKey, Priority, WorkQueue};
use futures::FutureExt;

const N: usize = 1_000_000;

/// Every scenario and shape, as `--once` and criterion name them.
const SCENARIOS: [&str; 21] = [
    "add/plain",
    "add/priorities",
    "get_done/plain",
    "get_done/priorities",
    "get_done/strict",
    "producers_workers/tasks",
    "producers_workers/yielding_tasks",
    "producers_workers/threads",
    "producers_workers/priorities",
    "dedup_storm/tasks",
    "dedup_storm/yielding_tasks",
    "dedup_storm/threads",
    "dedup_storm/priorities",
    "dedup_alone/plain",
    "dedup_alone/floor",
    "dedup_alone/lookup",
    "rate_limited_forget/plain",
    "rate_limited_forget/priorities",
    "add/fair",
    "get_done/fair",
    "dedup_alone/fair",
];

/// The wait scenarios (their percentiles, not a time per operation).
const WAIT_SCENARIOS: [&str; 2] = ["quiet_wait/fair", "quiet_wait/fifo"];

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("default/pod-{:06}", i)).collect()
}

/// `keys`, spread over 100 namespaces for the `fair` shape.
fn keys_for(shape: Shape, n: usize) -> Vec<String> {
    match shape {
        Shape::Fair => (0..n).map(|i| format!("ns-{:02}/pod-{:06}", i % 100, i)).collect(),
        _ => keys(n),
    }
}

/// The keys of the storm: a million adds over 1,000 keys.
fn storm_keys(shape: Shape) -> Vec<String> {
    let distinct = keys_for(shape, 1000);
    (0..N).map(|i| distinct[i % 1000].clone()).collect()
}

/// A key's namespace as its fairness key, as a controller's queue has it (an `ObjectKey`'s
/// namespace is a field; here the bytes before the `/`, found without `str::split`, whose
/// searcher calls libc's `memcmp` per key and cost more than the queue's whole fairness).
#[allow(clippy::ptr_arg)] // the queue's items are `String`s
fn by_namespace(key: &String) -> FairnessKey {
    let end = key.bytes().position(|b| b == b'/').unwrap_or(key.len());
    FairnessKey::new().level(&key[..end])
}

/// The queue of a shape: fair by namespace for `fair`, else `WorkQueue::new()`.
fn queue_for(shape: Shape) -> WorkQueue<String> {
    match shape {
        Shape::Fair => WorkQueue::builder().fairness(by_namespace).build(),
        _ => WorkQueue::new(),
    }
}

/// Alternating low and normal priorities, or (with `three`) cycling through three.
fn priority_of(i: usize, three: bool) -> Priority {
    match (three, i % 3, i % 2) {
        (true, 0, _) => Priority::LOW,
        (true, 1, _) => Priority::NORMAL,
        (true, _, _) => Priority(10),
        (false, _, 0) => Priority::LOW,
        (false, _, _) => Priority::NORMAL,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// How producers add.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Plain,
    Tasks,
    YieldingTasks,
    Threads,
    Priorities,
    /// `Priorities` with aging off.
    Strict,
    /// No queue: the floor of a scenario (see the module docs).
    Floor,
    /// No queue: the floor with the key looked up in a table (see the module docs).
    Lookup,
    /// A queue fair by namespace, keys over 100 namespaces.
    Fair,
    /// FIFO, for the wait scenarios.
    Fifo,
}

impl Shape {
    fn parse(name: &str) -> Shape {
        match name {
            "plain" => Shape::Plain,
            "tasks" => Shape::Tasks,
            "yielding_tasks" => Shape::YieldingTasks,
            "threads" => Shape::Threads,
            "priorities" => Shape::Priorities,
            "strict" => Shape::Strict,
            "floor" => Shape::Floor,
            "lookup" => Shape::Lookup,
            "fair" => Shape::Fair,
            "fifo" => Shape::Fifo,
            other => panic!("unknown shape {other}"),
        }
    }
}

/// Adds `keys`, at alternating priorities (key `i` at `priority_of(i + skew, three)`) in the
/// `priorities` shape, yielding every 256 adds in the `yielding_tasks` one.
async fn produce(q: WorkQueue<String>, keys: Vec<String>, shape: Shape, three: bool, skew: usize) {
    for (i, k) in keys.into_iter().enumerate() {
        if shape == Shape::Priorities {
            q.add_with_priority(k, priority_of(i + skew, three));
        } else {
            q.add(k);
        }
        if shape == Shape::YieldingTasks && i % 256 == 255 {
            tokio::task::yield_now().await;
        }
    }
}

/// Starts two workers that get + done until shut down, counting what they handle.
fn workers(
    rt: &tokio::runtime::Runtime,
    q: &WorkQueue<String>,
) -> Vec<tokio::task::JoinHandle<usize>> {
    (0..2)
        .map(|_| {
            let q = q.clone();
            rt.spawn(async move {
                let mut n = 0usize;
                while let Some(k) = q.get().await {
                    q.done(&k);
                    n += 1;
                }
                n
            })
        })
        .collect()
}

/// A scenario's timed region. With `CTRLKIT_PERF_CTL` naming the control FIFO of a `perf
/// record -D -1 --control=fifo:CTL,ACK` (and `CTRLKIT_PERF_ACK` its ACK FIFO), perf records
/// this region alone, not the making of keys and queues around it.
struct Timed(Instant);

impl Timed {
    fn start() -> Self {
        perf_control("enable");
        Self(Instant::now())
    }

    fn stop(self) -> Duration {
        let elapsed = self.0.elapsed();
        perf_control("disable");
        elapsed
    }
}

/// Sends `command` to perf's control FIFO, if one is named, and waits for perf's ack.
fn perf_control(command: &str) {
    use std::io::{Read, Write};
    let Some(control) = std::env::var_os("CTRLKIT_PERF_CTL") else { return };
    let mut fifo = std::fs::OpenOptions::new().write(true).open(control).expect("perf's FIFO");
    writeln!(fifo, "{command}").expect("perf's FIFO");
    if let Some(ack) = std::env::var_os("CTRLKIT_PERF_ACK") {
        let mut reply = [0u8; 5];
        let _ = std::fs::File::open(ack).expect("perf's ack FIFO").read(&mut reply);
    }
}

fn add(shape: Shape) -> Duration {
    let keys = keys_for(shape, N);
    let q = queue_for(shape);
    let start = Timed::start();
    for (i, k) in keys.into_iter().enumerate() {
        if shape == Shape::Priorities {
            q.add_with_priority(k, priority_of(i, false));
        } else {
            q.add(k);
        }
    }
    start.stop()
}

fn get_done(shape: Shape) -> Duration {
    let keys = keys_for(shape, N);
    let q = match shape {
        Shape::Strict => WorkQueue::builder().aging(Duration::MAX).build(),
        _ => queue_for(shape),
    };
    for (i, k) in keys.into_iter().enumerate() {
        if matches!(shape, Shape::Priorities | Shape::Strict) {
            q.add_with_priority(k, priority_of(i, false));
        } else {
            q.add(k);
        }
    }
    let start = Timed::start();
    while let Some(Some(k)) = q.get().now_or_never() {
        q.done(&k);
    }
    start.stop()
}

fn producers_workers(rt: &tokio::runtime::Runtime, shape: Shape) -> Duration {
    let mut first = keys(N);
    let second = first.split_off(N / 2);
    let q = WorkQueue::new();
    let workers = workers(rt, &q);
    std::thread::sleep(Duration::from_millis(5));
    let start = Timed::start();
    match shape {
        Shape::Threads => {
            let producers: Vec<_> = [first, second]
                .into_iter()
                .map(|part| {
                    let q = q.clone();
                    std::thread::spawn(move || {
                        for k in part {
                            q.add(k);
                        }
                    })
                })
                .collect();
            for p in producers {
                p.join().unwrap();
            }
        }
        _ => rt.block_on(async {
            // The second half alternates priorities the other way round, so both priorities
            // come from both producers.
            let producers: Vec<_> = [(first, 0), (second, 1)]
                .into_iter()
                .map(|(part, skew)| tokio::spawn(produce(q.clone(), part, shape, false, skew)))
                .collect();
            for p in producers {
                p.await.unwrap();
            }
        }),
    }
    if std::env::var_os("CTRLKIT_BENCH_VERBOSE").is_some() {
        eprintln!("producers done after {:?}", start.0.elapsed());
    }
    q.shut_down();
    let handled: usize = rt.block_on(async {
        let mut handled = 0;
        for w in workers {
            handled += w.await.unwrap();
        }
        handled
    });
    let elapsed = start.stop();
    assert_eq!(handled, N, "every item handled once");
    elapsed
}

fn dedup_storm(rt: &tokio::runtime::Runtime, shape: Shape) -> Duration {
    let adds = storm_keys(shape);
    let q = WorkQueue::new();
    let workers = workers(rt, &q);
    std::thread::sleep(Duration::from_millis(5));
    let start = Timed::start();
    match shape {
        Shape::Threads => rt.block_on(async {
            // The main task: `block_on` runs it on this thread, beside the runtime's two.
            for k in adds {
                q.add(k);
            }
        }),
        _ => rt.block_on(async {
            tokio::spawn(produce(q.clone(), adds, shape, true, 0)).await.unwrap();
        }),
    }
    let elapsed = start.stop();
    q.shut_down();
    let handled: usize = rt.block_on(async {
        let mut n = 0;
        for w in workers {
            n += w.await.unwrap();
        }
        n
    });
    if std::env::var_os("CTRLKIT_BENCH_VERBOSE").is_some() {
        eprintln!("{handled} items handled by the workers");
    }
    elapsed
}

fn dedup_alone(shape: Shape) -> Duration {
    let adds = storm_keys(shape);
    if shape == Shape::Floor || shape == Shape::Lookup {
        use std::hash::BuildHasher;
        let hasher = foldhash::quality::RandomState::default();
        let shared = std::sync::atomic::AtomicU64::new(0);
        // The 1,000 keys, as a queue's index holds them (its own copies, hashed once).
        let mut table = hashbrown::HashTable::new();
        if shape == Shape::Lookup {
            for k in keys(1000) {
                table.insert_unique(hasher.hash_one(&k), k, |k| hasher.hash_one(k));
            }
        }
        let mut found = 0usize;
        let start = Timed::start();
        for k in adds {
            let hash = hasher.hash_one(&k);
            shared.fetch_add(hash, std::sync::atomic::Ordering::AcqRel);
            if shape == Shape::Lookup {
                found += usize::from(table.find(hash, |known| *known == k).is_some());
            }
            drop(std::hint::black_box(k));
        }
        let elapsed = start.stop();
        std::hint::black_box(shared.into_inner());
        assert!(shape == Shape::Floor || found == N, "every key found");
        return elapsed;
    }
    let q = queue_for(shape);
    let start = Timed::start();
    for k in adds {
        q.add(k);
    }
    let elapsed = start.stop();
    assert_eq!(q.len(), 1000, "each key queued once");
    elapsed
}

/// The quiet namespace's waits (see the module docs): their median and 99th percentile.
fn quiet_wait(rt: &tokio::runtime::Runtime, shape: Shape) -> (Duration, Duration) {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    const QUIET: usize = 300;
    const BACKLOG: usize = 5000;
    let q = match shape {
        Shape::Fair => queue_for(shape),
        _ => WorkQueue::new(),
    };
    let added: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let waits: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (q, added, waits) = (q.clone(), added.clone(), waits.clone());
            rt.spawn(async move {
                while let Some(k) = q.get().await {
                    if k.starts_with("quiet/") {
                        let at = added.lock().unwrap().remove(&k).expect("added");
                        waits.lock().unwrap().push(at.elapsed());
                    }
                    let spin = Instant::now();
                    while spin.elapsed() < Duration::from_micros(2) {
                        std::hint::spin_loop();
                    }
                    q.done(&k);
                }
            })
        })
        .collect();
    let noisy = {
        let q = q.clone();
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !q.is_shutting_down() {
                if q.len() < BACKLOG {
                    for _ in 0..256 {
                        q.add(format!("noisy/pod-{i:07}"));
                        i += 1;
                    }
                } else {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        })
    };
    while q.len() < BACKLOG {
        std::thread::sleep(Duration::from_millis(1));
    }
    for j in 0..QUIET {
        let key = format!("quiet/pod-{j:04}");
        added.lock().unwrap().insert(key.clone(), Instant::now());
        q.add(key);
        std::thread::sleep(Duration::from_millis(1));
    }
    while waits.lock().unwrap().len() < QUIET {
        std::thread::sleep(Duration::from_millis(1));
    }
    q.shut_down();
    noisy.join().unwrap();
    rt.block_on(async {
        for w in workers {
            w.await.unwrap();
        }
    });
    let mut waits = std::mem::take(&mut *waits.lock().unwrap());
    waits.sort();
    (waits[waits.len() / 2], waits[waits.len() * 99 / 100])
}

fn rate_limited_forget(rt: &tokio::runtime::Runtime, shape: Shape) -> Duration {
    // Each key comes twice, both made outside the timed region: one moves into the queue,
    // the other names it to `forget`.
    let pairs: Vec<(String, String)> = keys(N).into_iter().map(|k| (k.clone(), k)).collect();
    let _guard = rt.enter();
    let q = WorkQueue::new();
    let start = Timed::start();
    for (i, (k, same)) in pairs.into_iter().enumerate() {
        if shape == Shape::Priorities {
            q.add_rate_limited_with_priority(k, priority_of(i, false));
        } else {
            q.add_rate_limited(k);
        }
        q.forget(&same);
    }
    start.stop()
}

/// Runs `scenario` ("name/shape") once; returns its time for `N` operations.
fn run(rt: &tokio::runtime::Runtime, scenario: &str) -> Duration {
    let (name, shape) = scenario.split_once('/').expect("scenario/shape");
    let shape = Shape::parse(shape);
    match name {
        "add" => add(shape),
        "get_done" => get_done(shape),
        "producers_workers" => producers_workers(rt, shape),
        "dedup_storm" => dedup_storm(rt, shape),
        "dedup_alone" => dedup_alone(shape),
        "rate_limited_forget" => rate_limited_forget(rt, shape),
        other => panic!("unknown scenario {other}"),
    }
}

fn criterion_benches(c: &mut Criterion) {
    let rt = runtime();
    let mut g = c.benchmark_group("workqueue");
    g.sample_size(10).sampling_mode(SamplingMode::Flat).warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Elements(N as u64));
    for scenario in SCENARIOS {
        g.bench_function(BenchmarkId::from_parameter(scenario), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| run(&rt, scenario)).sum())
        });
    }
    g.finish();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--once") {
        let scenario = args.get(at + 1).expect("--once SCENARIO");
        if WAIT_SCENARIOS.contains(&scenario.as_str()) {
            let shape = Shape::parse(scenario.split_once('/').expect("scenario/shape").1);
            let (p50, p99) = quiet_wait(&runtime(), shape);
            println!("{scenario} {} {}", p50.as_nanos(), p99.as_nanos());
            return;
        }
        assert!(SCENARIOS.contains(&scenario.as_str()), "unknown scenario {scenario}");
        let elapsed = run(&runtime(), scenario);
        println!("{scenario} {:.1}", elapsed.as_nanos() as f64 / N as f64);
        return;
    }
    // Criterion reads its own arguments, a name filter among them.
    let mut c = Criterion::default().configure_from_args();
    criterion_benches(&mut c);
    c.final_summary();
}
