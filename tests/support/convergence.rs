//! A seeded convergence harness: a controller over ConfigMaps selected by a label, while
//! random mutations change them and faults fire at random; then, once both stop, proof that
//! everything converged.
//!
//! - **Objects**: `obj-0` … `obj-{N-1}`, created first; the controller selects
//!   `convergence=in`, so a label flipping to `out` takes an object out of its view (a
//!   `DELETED`) and back (an `ADDED`).
//! - **Mutations**: M of them, spread over a few writer streams (object `i` belongs to stream
//!   `i % streams`, so each object's writes are ordered): create, update the data, flip the
//!   label, delete, delete and create again under the same name (a new uid). A write that
//!   fails (an injected 500 or 429, a cut connection) is retried until it lands.
//! - **Faults**, on the embedded server: closed watches, 500s and 429s with Retry-After, forced
//!   410 compactions, latency spikes, a corrupt line and `ERROR` events (500 and 410) in watch
//!   streams; on either server: the controller's connections cut, refused for a while, or held
//!   (through a TCP [`Proxy`]); on a real server with etcd, compaction.
//! - **The reconciler** fails or panics on its first two attempts at a version, at random (a
//!   hash of the seed, the key, the version and the attempt), and records what it saw.
//!
//! When mutations and faults have stopped, it waits (up to `settle`) until: the informer's
//! store holds exactly the server's selected objects at their resourceVersions; for every
//! object the last successful reconcile saw its final version, or saw it absent if it is
//! deleted or out of the selector; and no key was ever reconciled by two workers at once.
//! What still differs at the deadline is reported, with the seed; the same seed replays the
//! same mutations and faults (their interleaving with the controller's requests is up to the
//! scheduler).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ctrlkit::cache::{
    BackoffConfig, InformerLabels, InformerMetrics, InformerMetricsProvider, ListWatch, ObjectKey,
    RequestResult, WatchEventType,
};
use ctrlkit::controller::{Action, Config, Controller, Reconciler};
use ctrlkit_apiserver::Failure;
use ctrlkit_apiserver::harness::{Proxy, Target};

use super::Failed;
use ctrlkit::workqueue::{ItemExponentialFailureRateLimiter, WorkQueue};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::Api;
use kube_client::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// What one run does.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Replays a run: the same mutations, faults and reconcile failures.
    pub seed: u64,
    /// Objects created before the controller starts.
    pub objects: usize,
    /// Random mutations after it started.
    pub mutations: usize,
    /// Concurrent writers.
    pub streams: usize,
    /// The controller's workers.
    pub workers: usize,
    /// A fault every this many mutations on average (0: none).
    pub fault_every: usize,
    /// Percent of a version's first two reconcile attempts that fail, and that panic.
    pub fail_percent: u64,
    pub panic_percent: u64,
    /// How long convergence may take once mutations and faults stopped.
    pub settle: Duration,
}

/// What a run measured, and what did not converge.
#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub mutations: usize,
    /// From the first mutation to the last.
    pub mutating: Duration,
    /// From the last mutation to convergence (or the deadline).
    pub converging: Duration,
    pub faults: BTreeMap<&'static str, usize>,
    pub relists: usize,
    pub reconciles: usize,
    pub failures: usize,
    pub panics: usize,
    /// Keys reconciled by two workers at once.
    pub overlaps: usize,
    /// Objects whose last successful reconcile did not see their final state.
    pub lost: Vec<String>,
    /// Keys where the informer's store and the server differ.
    pub store_differs: Vec<String>,
}

impl Report {
    /// Whether everything converged.
    pub fn converged(&self) -> bool {
        self.overlaps == 0 && self.lost.is_empty() && self.store_differs.is_empty()
    }

    /// Panics with the seed and what differs, unless the run converged.
    pub fn assert_converged(&self) {
        assert!(
            self.converged(),
            "did not converge (replay with seed {}): {} lost {:?}, store differs at {:?}, {} overlapping reconciles; {self:?}",
            self.seed,
            self.lost.len(),
            self.lost.iter().take(10).collect::<Vec<_>>(),
            self.store_differs.iter().take(10).collect::<Vec<_>>(),
            self.overlaps,
        );
    }
}

/// SplitMix64: a small, good, seedable generator (no dependency needed for it).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A deterministic hash of anything hashable, mixed with the seed.
fn hash_of(seed: u64, value: impl std::hash::Hash) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one((seed, value))
}

/// What the reconciler last saw of a key, successfully.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Present(u64),
    Absent,
}

#[derive(Default)]
struct Recorded {
    last: HashMap<String, Seen>,
    attempts: HashMap<(String, Option<u64>), u32>,
}

/// The harness's reconciler; see the module docs.
struct Recorder {
    seed: u64,
    fail_percent: u64,
    panic_percent: u64,
    recorded: Mutex<Recorded>,
    in_flight: Mutex<HashSet<String>>,
    overlaps: AtomicUsize,
    reconciles: AtomicUsize,
    failures: AtomicUsize,
    panics: AtomicUsize,
}

/// Takes a key out of the in-flight set however the reconcile ends (panics included).
struct InFlight<'a>(&'a Recorder, String);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.lock().unwrap().remove(&self.1);
    }
}

fn rv_of(cm: &ConfigMap) -> u64 {
    cm.metadata.resource_version.as_deref().and_then(|rv| rv.parse().ok()).unwrap_or(0)
}

/// The reconciler the controller runs: the shared [`Recorder`].
struct Recording(Arc<Recorder>);

#[async_trait]
impl Reconciler for Recording {
    type Object = ConfigMap;
    type Error = Failed;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        cm: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Failed> {
        let this = &self.0;
        let name = key.name.clone();
        if !this.in_flight.lock().unwrap().insert(name.clone()) {
            this.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let _guard = InFlight(this, name.clone());
        this.reconciles.fetch_add(1, Ordering::Relaxed);
        let version = cm.as_deref().map(rv_of);
        let attempt = {
            let mut recorded = this.recorded.lock().unwrap();
            let attempts = recorded.attempts.entry((name.clone(), version)).or_default();
            *attempts += 1;
            *attempts
        };
        tokio::task::yield_now().await;
        let roll = hash_of(this.seed, (&name, version, attempt)) % 100;
        if attempt <= 2 && roll < this.panic_percent {
            this.panics.fetch_add(1, Ordering::Relaxed);
            panic!("injected panic reconciling {name} at {version:?}");
        }
        if attempt <= 2 && roll < this.panic_percent + this.fail_percent {
            this.failures.fetch_add(1, Ordering::Relaxed);
            return Err(format!("injected failure reconciling {name} at {version:?}").into());
        }
        let seen = version.map_or(Seen::Absent, Seen::Present);
        this.recorded.lock().unwrap().last.insert(name, seen);
        Ok(Action::done())
    }
}

/// Counts the informer's relists.
#[derive(Default)]
struct Relists(AtomicUsize);

impl InformerMetrics for Relists {
    fn list_request(&self, _: RequestResult) {}
    fn watch_request(&self, _: RequestResult) {}
    fn watch_event(&self, _: WatchEventType) {}
    fn relist(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn objects(&self, _: usize) {}
    fn resource_version(&self, _: &str) {}
}

struct RelistCounter(Arc<Relists>);

impl InformerMetricsProvider for RelistCounter {
    fn new_informer_metrics(&self, _: &InformerLabels) -> Arc<dyn InformerMetrics> {
        self.0.clone()
    }
}

/// One object as its writer stream models it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Model {
    Absent,
    In,
    Out,
}

fn label(model: Model) -> &'static str {
    if model == Model::In { "in" } else { "out" }
}

/// Retries a write until the server takes it: injected 500s and 429s, and cut connections,
/// fail writes too. `done` says which errors mean the write already landed (a create that
/// went through before its answer was lost, then 409 on the retry).
async fn write<T>(
    what: impl Fn() -> futures::future::BoxFuture<'static, kube_client::Result<T>>,
    done: impl Fn(u16) -> bool,
) {
    let mut tries = 0;
    loop {
        match what().await {
            Ok(_) => return,
            Err(kube_client::Error::Api(s)) if done(s.code) => return,
            Err(e) => {
                tries += 1;
                assert!(tries < 1000, "a write failed 1000 times: {e}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

async fn create(api: &Api<ConfigMap>, name: &str, model: Model, value: u64) {
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "convergence": label(model) } },
        "data": { "v": value.to_string() },
    }))
    .expect("a valid ConfigMap");
    let api = api.clone();
    write(
        move || {
            let (api, cm) = (api.clone(), cm.clone());
            Box::pin(async move { api.create(&PostParams::default(), &cm).await })
        },
        |code| code == 409,
    )
    .await;
}

async fn patch(api: &Api<ConfigMap>, name: &str, body: serde_json::Value) {
    let (api, name) = (api.clone(), name.to_owned());
    write(
        move || {
            let (api, name, body) = (api.clone(), name.clone(), body.clone());
            Box::pin(
                async move { api.patch(&name, &PatchParams::default(), &Patch::Merge(body)).await },
            )
        },
        |_| false,
    )
    .await;
}

async fn delete(api: &Api<ConfigMap>, name: &str) {
    let (api, name) = (api.clone(), name.to_owned());
    write(
        move || {
            let (api, name) = (api.clone(), name.clone());
            Box::pin(async move { api.delete(&name, &DeleteParams::default()).await })
        },
        |code| code == 404,
    )
    .await;
}

/// One writer stream: its objects' mutations, in order.
async fn mutate(
    api: Api<ConfigMap>,
    seed: u64,
    stream: usize,
    settings: Settings,
    done: Arc<AtomicUsize>,
) {
    let mut rng = Rng::new(seed ^ hash_of(seed, ("stream", stream)));
    let mine: Vec<usize> = (stream..settings.objects).step_by(settings.streams).collect();
    // As `run` created them.
    let mut models: Vec<Model> =
        mine.iter().map(|i| if i % 4 == 3 { Model::Out } else { Model::In }).collect();
    let count = settings.mutations / settings.streams
        + usize::from(stream < settings.mutations % settings.streams);
    for _ in 0..count {
        let slot = rng.below(mine.len() as u64) as usize;
        let name = format!("obj-{}", mine[slot]);
        let value = rng.next();
        models[slot] = match models[slot] {
            Model::Absent => {
                let model = if rng.below(10) < 7 { Model::In } else { Model::Out };
                create(&api, &name, model, value).await;
                model
            }
            model => match rng.below(100) {
                0..50 => {
                    patch(&api, &name, json!({ "data": { "v": value.to_string() } })).await;
                    model
                }
                50..70 => {
                    let flipped = if model == Model::In { Model::Out } else { Model::In };
                    let body =
                        json!({ "metadata": { "labels": { "convergence": label(flipped) } } });
                    patch(&api, &name, body).await;
                    flipped
                }
                70..85 => {
                    delete(&api, &name).await;
                    Model::Absent
                }
                _ => {
                    delete(&api, &name).await;
                    create(&api, &name, model, value).await;
                    model
                }
            },
        };
        done.fetch_add(1, Ordering::Relaxed);
    }
}

/// Fires faults at random while the writers run, until `stop` is set.
async fn inject(
    t: &Target,
    proxy: &Proxy,
    settings: &Settings,
    done: &AtomicUsize,
    stop: &std::sync::atomic::AtomicBool,
) -> BTreeMap<&'static str, usize> {
    let mut fired = BTreeMap::new();
    if settings.fault_every == 0 {
        return fired;
    }
    let mut rng = Rng::new(hash_of(settings.seed, "faults"));
    let embedded = !t.is_real();
    let compaction = embedded || std::env::var_os(ctrlkit_apiserver::harness::ETCD_ENV).is_some();
    let mut next = rng.below(2 * settings.fault_every as u64) as usize;
    while !stop.load(Ordering::Relaxed) {
        if done.load(Ordering::Relaxed) < next {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        }
        next += 1 + rng.below(2 * settings.fault_every as u64) as usize;
        let kinds: &[&'static str] = if embedded {
            &[
                "close watches",
                "500s",
                "429s",
                "compaction",
                "latency",
                "corrupt line",
                "error event 500",
                "error event 410",
                "connections cut",
                "connections refused",
                "connections held",
            ]
        } else if compaction {
            &["connections cut", "connections refused", "connections held", "compaction"]
        } else {
            &["connections cut", "connections refused", "connections held"]
        };
        let kind = kinds[rng.below(kinds.len() as u64) as usize];
        *fired.entry(kind).or_default() += 1;
        let pause = Duration::from_millis(50 + rng.below(250));
        match kind {
            "close watches" => t.embedded().faults().close_watches(),
            "500s" => {
                t.embedded().faults().fail_next(1 + rng.below(5) as usize, Failure::InternalError)
            }
            "429s" => t.embedded().faults().fail_next(
                1 + rng.below(3) as usize,
                Failure::TooManyRequests { retry_after_seconds: 1 },
            ),
            // The embedded server forgets its whole history, watch cache included, so that
            // every kind's watches expire; the real one has etcd compacted.
            "compaction" if embedded => t.embedded().faults().compact(),
            "compaction" => t.compact().await,
            "latency" => {
                t.embedded().faults().set_latency(Duration::from_millis(5 + rng.below(40)));
                tokio::time::sleep(pause).await;
                t.embedded().faults().set_latency(Duration::ZERO);
            }
            "corrupt line" => t.embedded().faults().send_malformed_line(),
            "error event 500" => {
                t.embedded().faults().send_error_event(500, "InternalError", "injected")
            }
            "error event 410" => t.embedded().faults().send_error_event(410, "Expired", "injected"),
            "connections cut" => proxy.cut(),
            "connections refused" => {
                proxy.refuse();
                tokio::time::sleep(pause).await;
                proxy.open();
            }
            _ => {
                proxy.close();
                tokio::time::sleep(pause).await;
                proxy.open();
            }
        }
    }
    fired
}

/// The fast retries of the harness: per key, 1 ms doubling to 1 s. (The default limiter's
/// overall bucket of 10 retries a second would make a run of thousands of injected failures
/// wait on it alone.)
fn limiter() -> ItemExponentialFailureRateLimiter<ObjectKey> {
    ItemExponentialFailureRateLimiter::new(Duration::from_millis(1), Duration::from_secs(1))
}

/// Keeps the injected panics out of the output (the controller catches and counts them);
/// every other panic is printed as before.
fn quiet_injected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info.payload().downcast_ref::<String>().map_or("", String::as_str);
            if !message.starts_with("injected panic") {
                default(info);
            }
        }));
    });
}

/// Runs the harness on `t`'s server in its namespace; see the module docs.
pub async fn run(t: &Target, settings: Settings) -> Report {
    quiet_injected_panics();
    let direct: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let (proxy, client, _log) = t.through_proxy().await;
    for i in 0..settings.objects {
        let model = if i % 4 == 3 { Model::Out } else { Model::In };
        create(&direct, &format!("obj-{i}"), model, 0).await;
    }

    let recorder = Arc::new(Recorder {
        seed: settings.seed,
        fail_percent: settings.fail_percent,
        panic_percent: settings.panic_percent,
        recorded: Mutex::default(),
        in_flight: Mutex::default(),
        overlaps: AtomicUsize::new(0),
        reconciles: AtomicUsize::new(0),
        failures: AtomicUsize::new(0),
        panics: AtomicUsize::new(0),
    });
    let relists = Arc::new(Relists::default());
    let counter = RelistCounter(relists.clone());
    let backoff = BackoffConfig {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(500),
        reset_after: Duration::from_secs(30),
    };
    let watched =
        ListWatch::new(Api::<ConfigMap>::namespaced(client, &t.ns)).labels("convergence=in");
    let controller = Controller::builder(watched)
        .name("convergence")
        .informer(move |b| b.backoff(backoff).metrics(Arc::new(counter)))
        .queue(WorkQueue::builder().rate_limiter(limiter()))
        .config(Config::default().workers(settings.workers).max_retries(100))
        .build();
    let (stop_controller, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn({
        let (controller, recorder) = (controller.clone(), recorder.clone());
        async move {
            controller
                .run(Recording(recorder), async {
                    let _ = stopped.await;
                })
                .await
        }
    });

    let started = Instant::now();
    let done = Arc::new(AtomicUsize::new(0));
    let stop_faults = std::sync::atomic::AtomicBool::new(false);
    let writers = futures::future::join_all((0..settings.streams).map(|stream| {
        tokio::spawn(mutate(direct.clone(), settings.seed, stream, settings.clone(), done.clone()))
    }));
    let faults = inject(t, &proxy, &settings, &done, &stop_faults);
    let writers = async {
        for writer in writers.await {
            writer.expect("a writer stream panicked");
        }
        stop_faults.store(true, Ordering::Relaxed);
    };
    let ((), faults) = tokio::join!(writers, faults);
    proxy.open();
    if !t.is_real() {
        t.embedded().faults().set_latency(Duration::ZERO);
    }
    let mutating = started.elapsed();

    let settled = Instant::now();
    let deadline = settled + settings.settle;
    let (lost, store_differs) = loop {
        let (lost, store_differs) =
            differences(&direct, &controller, &recorder, settings.objects).await;
        if (lost.is_empty() && store_differs.is_empty()) || Instant::now() > deadline {
            break (lost, store_differs);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let converging = settled.elapsed();
    let _ = stop_controller.send(());
    let _ = running.await;
    Report {
        seed: settings.seed,
        mutations: done.load(Ordering::Relaxed),
        mutating,
        converging,
        faults,
        relists: relists.0.load(Ordering::Relaxed),
        reconciles: recorder.reconciles.load(Ordering::Relaxed),
        failures: recorder.failures.load(Ordering::Relaxed),
        panics: recorder.panics.load(Ordering::Relaxed),
        overlaps: recorder.overlaps.load(Ordering::SeqCst),
        lost,
        store_differs,
    }
}

/// The objects whose last reconcile missed their final state, and the keys where the
/// informer's store and the server differ.
async fn differences(
    direct: &Api<ConfigMap>,
    controller: &Controller<ConfigMap>,
    recorder: &Recorder,
    objects: usize,
) -> (Vec<String>, Vec<String>) {
    let selected = ListParams::default().labels("convergence=in");
    let server: HashMap<String, u64> = match direct.list(&selected).await {
        Ok(list) => list
            .items
            .iter()
            .map(|cm| (cm.metadata.name.clone().unwrap_or_default(), rv_of(cm)))
            .collect(),
        Err(e) => return (vec![format!("listing the server failed: {e}")], Vec::new()),
    };
    let store: HashMap<String, u64> = controller
        .indexer()
        .list()
        .iter()
        .map(|cm| (cm.metadata.name.clone().unwrap_or_default(), rv_of(cm)))
        .collect();
    let mut store_differs: Vec<String> = server
        .keys()
        .chain(store.keys())
        .filter(|name| server.get(*name) != store.get(*name))
        .cloned()
        .collect();
    store_differs.sort();
    store_differs.dedup();
    let recorded = recorder.recorded.lock().unwrap();
    let lost = (0..objects)
        .map(|i| format!("obj-{i}"))
        .filter(|name| {
            let want = server.get(name).map_or(Seen::Absent, |rv| Seen::Present(*rv));
            // A key never reconciled was never selected, which is as good as absent.
            let seen = recorded.last.get(name).cloned().unwrap_or(Seen::Absent);
            seen != want
        })
        .collect();
    (lost, store_differs)
}
