//! [`Registry`]: every metric of ctrlkit's layers in one `prometheus-client` registry, under
//! controller-runtime's names, encoded in the Prometheus text format.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry as PromRegistry;

use crate::cache::{
    InformerLabels, InformerMetrics, InformerMetricsProvider, RequestResult, WatchEventType,
};
use crate::controller::{
    ControllerMetrics, ControllerMetricsProvider, ReconcileOutcome, ScaleReason,
};
use crate::events::{DropReason, EventMetrics};
use crate::leaderelection::LeaderMetrics;
use crate::rest_client::RequestMetrics;
use crate::sharding::{AssignReason, ShardingMetrics};
use crate::workqueue::{FairnessLevelStats, Priority, QueueMetrics, QueueMetricsProvider};

use super::snapshot::{Snapshot, SnapshotCollector};

type Labels<const N: usize> = [(&'static str, String); N];
type Seconds = Gauge<f64, AtomicU64>;
type Histograms<const N: usize> = Family<Labels<N>, Histogram, fn() -> Histogram>;

/// controller-runtime's workqueue buckets: 10 ns to 1000 s, by tens.
fn queue_buckets() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// controller-runtime's `controller_runtime_reconcile_time_seconds` buckets.
fn reconcile_buckets() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
        15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
    ])
}

/// client-go's `rest_client_request_duration_seconds` buckets: 5 ms to 60 s.
fn request_buckets() -> Histogram {
    Histogram::new([0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0])
}

/// Every reason a worker count changes for, in the order of [`scale_index`].
const SCALE_REASONS: [ScaleReason; 5] = [
    ScaleReason::Manual,
    ScaleReason::Queue,
    ScaleReason::CpuBound,
    ScaleReason::Throttled,
    ScaleReason::Idle,
];

/// A reason's place in [`SCALE_REASONS`]; exhaustive, so a reason added is a compile error
/// here until it is listed.
fn scale_index(reason: ScaleReason) -> usize {
    match reason {
        ScaleReason::Manual => 0,
        ScaleReason::Queue => 1,
        ScaleReason::CpuBound => 2,
        ScaleReason::Throttled => 3,
        ScaleReason::Idle => 4,
    }
}

struct Families {
    queue_depth: Family<Labels<3>, Gauge>,
    queue_adds: Family<Labels<2>, Counter>,
    queue_latency: Histograms<2>,
    queue_work_duration: Histograms<2>,
    queue_unfinished: Family<Labels<2>, Seconds>,
    queue_longest: Family<Labels<2>, Seconds>,
    queue_retries: Family<Labels<2>, Counter>,
    fairness_groups: Family<Labels<3>, Gauge>,
    fairness_deepest: Family<Labels<3>, Gauge>,
    fairness_wait: Family<Labels<3>, Seconds>,
    reconcile_total: Family<Labels<2>, Counter>,
    reconcile_errors: Family<Labels<1>, Counter>,
    terminal_errors: Family<Labels<1>, Counter>,
    reconcile_panics: Family<Labels<1>, Counter>,
    reconcile_timeouts: Family<Labels<1>, Counter>,
    reconcile_time: Histograms<1>,
    holds: Family<Labels<1>, Counter>,
    hold_time: Histograms<1>,
    hold_timeouts: Family<Labels<1>, Counter>,
    max_concurrent: Family<Labels<1>, Gauge>,
    active_workers: Family<Labels<1>, Gauge>,
    worker_scaling: Family<Labels<2>, Counter>,
    rest_requests: Family<Labels<3>, Counter>,
    rest_latency: Histograms<2>,
    leader: Family<Labels<1>, Gauge>,
    informer_lists: Family<Labels<4>, Counter>,
    informer_watches: Family<Labels<4>, Counter>,
    informer_events: Family<Labels<4>, Counter>,
    informer_relists: Family<Labels<3>, Counter>,
    informer_skipped: Family<Labels<3>, Counter>,
    informer_wire_fallbacks: Family<Labels<3>, Counter>,
    informer_objects: Family<Labels<3>, Gauge>,
    informer_resource_version: Family<Labels<3>, Seconds>,
    events_recorded: Family<Labels<1>, Counter>,
    events_dropped: Family<Labels<2>, Counter>,
    sharding_objects: Family<Labels<2>, Gauge>,
    sharding_members: Family<Labels<2>, Gauge>,
    sharding_assignments: Family<Labels<2>, Counter>,
    sharding_drains: Family<Labels<1>, Counter>,
    /// Secure serving's token reviews by result: one family however many servers share it.
    #[cfg(feature = "secure-metrics")]
    secure_token_reviews: Family<Labels<1>, Counter>,
    /// The priorities each queue's depth has a series for, so that a queue's series can go.
    queue_priorities:
        Mutex<std::collections::HashMap<String, std::collections::BTreeSet<Priority>>>,
    /// How many fairness levels each fair queue has series for, so that they can go too.
    queue_levels: Mutex<std::collections::HashMap<String, usize>>,
    /// The shards each ring's objects gauge has a series for, so one left empty reads 0.
    sharding_shards: Mutex<std::collections::HashMap<String, std::collections::BTreeSet<String>>>,
    /// How many informers not released report under each label set (two factories, or a
    /// full and a metadata-only informer of one kind, share one): a release removes the
    /// set's series only when it was the last of them.
    informer_users: Mutex<std::collections::HashMap<Labels<3>, usize>>,
}

impl Families {
    /// The counters labelled with a controller's name alone, made at its start and removed
    /// with it.
    fn controller_counters(&self) -> [&Family<Labels<1>, Counter>; 6] {
        [
            &self.reconcile_errors,
            &self.terminal_errors,
            &self.reconcile_panics,
            &self.reconcile_timeouts,
            &self.holds,
            &self.hold_timeouts,
        ]
    }
}

/// One Prometheus registry for everything ctrlkit measures; cheap to clone (clones share it).
///
/// It is the metrics provider of each layer (work queues, informers, controllers, leader
/// election, the event recorder), so a [`Manager`](crate::manager::Manager) given one hands
/// it to all of them. Register your own metrics with [`register`](Self::register); read the
/// exposition with [`encode`](Self::encode).
#[derive(Clone)]
pub struct Registry {
    registry: Arc<Mutex<PromRegistry>>,
    families: Arc<Families>,
    /// Writes the process's and the runtime's metrics, read at each scrape.
    snapshot: SnapshotCollector,
    /// The runtime the registry was made on, whose metrics it exports.
    runtime: Option<tokio::runtime::Handle>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

macro_rules! register {
    ($registry:expr, $name:literal, $help:literal) => {{
        let family = Default::default();
        $registry.register($name, $help, Clone::clone(&family));
        family
    }};
    ($registry:expr, $name:literal, $help:literal, $constructor:expr) => {{
        let family: Histograms<_> = Family::new_with_constructor($constructor);
        $registry.register($name, $help, family.clone());
        family
    }};
}

impl Registry {
    /// A registry with ctrlkit's metrics, all at zero.
    pub fn new() -> Self {
        let mut r = PromRegistry::default();
        let families = Families {
            queue_depth: register!(
                r,
                "workqueue_depth",
                "Current depth of workqueue by workqueue and priority"
            ),
            queue_adds: register!(r, "workqueue_adds", "Total number of adds handled by workqueue"),
            queue_latency: register!(
                r,
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                queue_buckets
            ),
            queue_work_duration: register!(
                r,
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes.",
                queue_buckets
            ),
            queue_unfinished: register!(
                r,
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases."
            ),
            queue_longest: register!(
                r,
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running."
            ),
            queue_retries: register!(
                r,
                "workqueue_retries",
                "Total number of retries handled by workqueue"
            ),
            fairness_groups: register!(
                r,
                "ctrlkit_workqueue_fairness_groups",
                "Groups (namespaces, clusters) with ready items at one level of a fair workqueue's fairness key"
            ),
            fairness_deepest: register!(
                r,
                "ctrlkit_workqueue_fairness_deepest",
                "The most ready items of one group at one level of a fair workqueue's fairness key"
            ),
            fairness_wait: register!(
                r,
                "ctrlkit_workqueue_fairness_longest_wait_seconds",
                "The longest wait of a group's oldest ready item at one level of a fair workqueue's fairness key"
            ),
            reconcile_total: register!(
                r,
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller"
            ),
            reconcile_errors: register!(
                r,
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller"
            ),
            terminal_errors: register!(
                r,
                "controller_runtime_terminal_reconcile_errors",
                "Total number of terminal reconciliation errors per controller"
            ),
            reconcile_panics: register!(
                r,
                "controller_runtime_reconcile_panics",
                "Total number of reconciliation panics per controller"
            ),
            reconcile_timeouts: register!(
                r,
                "controller_runtime_reconcile_timeouts",
                "Total number of reconciliation timeouts per controller"
            ),
            reconcile_time: register!(
                r,
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                reconcile_buckets
            ),
            holds: register!(
                r,
                "ctrlkit_controller_read_your_writes_holds",
                "Total number of reconciles held until the controller's caches held the key's own last writes"
            ),
            hold_time: register!(
                r,
                "ctrlkit_controller_read_your_writes_hold_seconds",
                "Length of time reconciles were held for the controller's own writes",
                reconcile_buckets
            ),
            hold_timeouts: register!(
                r,
                "ctrlkit_controller_read_your_writes_hold_timeouts",
                "Total number of holds that ran out before the caches held the controller's own writes"
            ),
            max_concurrent: register!(
                r,
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller"
            ),
            active_workers: register!(
                r,
                "controller_runtime_active_workers",
                "Number of currently used workers per controller"
            ),
            worker_scaling: register!(
                r,
                "ctrlkit_controller_worker_scaling",
                "Total number of changes of a controller's worker count, by reason (manual, queue, cpu_bound, throttled, idle)"
            ),
            rest_requests: register!(
                r,
                "rest_client_requests",
                // prometheus-client ends every help text with a period.
                "Number of HTTP requests, partitioned by status code, method, and host"
            ),
            rest_latency: register!(
                r,
                "rest_client_request_duration_seconds",
                "Request latency in seconds. Broken down by verb, and host",
                request_buckets
            ),
            leader: register!(
                r,
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name."
            ),
            informer_lists: register!(
                r,
                "ctrlkit_informer_list_requests",
                "List requests (pages) an informer sent, by result"
            ),
            informer_watches: register!(
                r,
                "ctrlkit_informer_watch_requests",
                "Watch requests an informer sent, by result"
            ),
            informer_events: register!(
                r,
                "ctrlkit_informer_watch_events",
                "Watch events an informer received, by type"
            ),
            informer_relists: register!(
                r,
                "ctrlkit_informer_relists",
                "Lists an informer made after its first sync (410 Expired, ERROR events)"
            ),
            informer_skipped: register!(
                r,
                "ctrlkit_informer_objects_skipped",
                "Objects an informer skipped: nested deeper than the API server's decoder takes"
            ),
            informer_wire_fallbacks: register!(
                r,
                "ctrlkit_informer_wire_format_fallbacks",
                "Times an informer met a protobuf field its messages lack and switched to JSON"
            ),
            informer_objects: register!(
                r,
                "ctrlkit_informer_objects",
                "Objects in an informer's store"
            ),
            informer_resource_version: register!(
                r,
                "ctrlkit_informer_resource_version",
                "The resourceVersion an informer's cache is at, when numeric (as etcd's are)"
            ),
            events_recorded: register!(
                r,
                "ctrlkit_events_recorded",
                "Events the event recorder wrote to the API server (created or updated), by controller"
            ),
            events_dropped: register!(
                r,
                "ctrlkit_events_dropped",
                "Events the event recorder dropped, by controller and reason (spam, buffer_full, write_failed)"
            ),
            sharding_objects: register!(
                r,
                "ctrlkit_sharding_objects",
                "Primary objects labelled to each shard of a ring, after the sharder's last pass"
            ),
            sharding_members: register!(
                r,
                "ctrlkit_sharding_members",
                "Shards of a ring by state (ready, expired, dead), after the sharder's last pass"
            ),
            sharding_assignments: register!(
                r,
                "ctrlkit_sharding_assignments",
                "Objects the sharder labelled to a shard, by reason (unassigned, shard_stopped)"
            ),
            sharding_drains: register!(
                r,
                "ctrlkit_sharding_drains",
                "Objects the sharder marked for draining on their live shard"
            ),
            #[cfg(feature = "secure-metrics")]
            secure_token_reviews: register!(
                r,
                "ctrlkit_secure_metrics_token_reviews",
                "TokenReviews of metrics scrapes by result: authenticated, unauthenticated, failed, or throttled (refused unsent, over the rate of unknown tokens' reviews)"
            ),
            queue_priorities: Mutex::default(),
            queue_levels: Mutex::default(),
            sharding_shards: Mutex::default(),
            informer_users: Mutex::default(),
        };
        let snapshot = SnapshotCollector::default();
        r.register_collector(Box::new(snapshot.clone()));
        Self {
            registry: Arc::new(Mutex::new(r)),
            families: Arc::new(families),
            snapshot,
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// Registers a metric of your own under `name` (a counter's samples get `_total`).
    pub fn register(
        &self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        self.registry.lock().register(name, help, metric);
    }

    /// Secure serving's count of token reviews by `result`, shared by every server on this
    /// registry.
    #[cfg(feature = "secure-metrics")]
    pub(crate) fn token_reviews(&self) -> Family<Labels<1>, Counter> {
        self.families.secure_token_reviews.clone()
    }

    /// Removes the series of the controller `controller` and of its queue `queue` (those
    /// labelled with their names): a controller taken out of a running manager leaves no
    /// series behind. Made again, they start from zero.
    pub(crate) fn remove_controller(&self, controller: &str, queue: &str) {
        let f = &self.families;
        let labels = [("controller", controller.to_owned())];
        for result in ["success", "error", "requeue", "requeue_after"] {
            let [controller] = labels.clone();
            f.reconcile_total.remove(&[controller, ("result", result.to_owned())]);
        }
        for family in f.controller_counters() {
            family.remove(&labels);
        }
        f.reconcile_time.remove(&labels);
        f.hold_time.remove(&labels);
        f.max_concurrent.remove(&labels);
        f.active_workers.remove(&labels);
        for reason in SCALE_REASONS {
            let [controller] = labels.clone();
            f.worker_scaling.remove(&[controller, ("reason", reason.as_str().to_owned())]);
        }
        let labels = queue_labels(queue);
        for family in [&f.queue_adds, &f.queue_retries] {
            family.remove(&labels);
        }
        for family in [&f.queue_latency, &f.queue_work_duration] {
            family.remove(&labels);
        }
        for family in [&f.queue_unfinished, &f.queue_longest] {
            family.remove(&labels);
        }
        let priorities = f.queue_priorities.lock().remove(queue);
        for priority in priorities.into_iter().flatten() {
            let [a, b] = labels.clone();
            f.queue_depth.remove(&[a, b, ("priority", priority.to_string())]);
        }
        let levels = f.queue_levels.lock().remove(queue);
        for level in 0..levels.unwrap_or(0) {
            let labels = level_labels(queue, level);
            f.fairness_groups.remove(&labels);
            f.fairness_deepest.remove(&labels);
            f.fairness_wait.remove(&labels);
        }
    }

    /// Every metric in the Prometheus text format (version 0.0.4), as `/metrics` serves it.
    ///
    /// The process's and the runtime's metrics are read first, before the registry is
    /// locked: hooks writing meanwhile never wait on `/proc`.
    pub fn encode(&self) -> String {
        let snapshot = Snapshot::take(self.runtime.as_ref());
        let mut out = String::new();
        let registry = self.registry.lock();
        self.snapshot.store(snapshot);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry);
        out
    }
}

/// controller-runtime labels a controller's queue with its name twice: `name` and
/// `controller`.
fn queue_labels(name: &str) -> Labels<2> {
    [("name", name.to_owned()), ("controller", name.to_owned())]
}

/// A fair queue's labels for one level of its fairness key.
fn level_labels(name: &str, level: usize) -> Labels<3> {
    let [a, b] = queue_labels(name);
    [a, b, ("level", level.to_string())]
}

/// One fairness level's gauges: groups, deepest, longest wait.
type LevelGauges = (Gauge, Gauge, Seconds);

/// One queue's metrics. Its depth is exported per priority only, as controller-runtime's
/// priority queue does: the total is their sum, and a series without a priority beside them
/// would count items twice.
struct QueueHooks {
    families: Arc<Families>,
    name: String,
    /// One gauge per priority seen; a handful at most, so a list.
    depth: Mutex<Vec<(Priority, Gauge)>>,
    adds: Counter,
    latency: Histogram,
    work_duration: Histogram,
    unfinished: Seconds,
    longest: Seconds,
    retries: Counter,
    /// One set of gauges per fairness level seen, made once: a refresh after the queue's
    /// series were removed then writes to gauges no longer exported, and makes none again.
    levels: Mutex<Vec<LevelGauges>>,
}

impl QueueMetrics for QueueHooks {
    fn depth(&self, priority: Priority, delta: i64) {
        let mut gauges = self.depth.lock();
        let gauge = match gauges.iter().position(|(p, _)| *p == priority) {
            Some(at) => &gauges[at].1,
            None => {
                let [a, b] = queue_labels(&self.name);
                let labels = [a, b, ("priority", priority.to_string())];
                let gauge = self.families.queue_depth.get_or_create(&labels).clone();
                let mut known = self.families.queue_priorities.lock();
                known.entry(self.name.clone()).or_default().insert(priority);
                gauges.push((priority, gauge));
                &gauges[gauges.len() - 1].1
            }
        };
        gauge.inc_by(delta);
    }
    fn added(&self) {
        self.adds.inc();
    }
    fn queue_latency(&self, seconds: f64) {
        self.latency.observe(seconds);
    }
    fn work_duration(&self, seconds: f64) {
        self.work_duration.observe(seconds);
    }
    fn unfinished_work(&self, seconds: f64) {
        self.unfinished.set(seconds);
    }
    fn longest_running_processor(&self, seconds: f64) {
        self.longest.set(seconds);
    }
    fn retried(&self) {
        self.retries.inc();
    }
    fn fairness_level(&self, level: usize, stats: &FairnessLevelStats) {
        let mut gauges = self.levels.lock();
        while gauges.len() <= level {
            let f = &self.families;
            let labels = level_labels(&self.name, gauges.len());
            gauges.push((
                f.fairness_groups.get_or_create(&labels).clone(),
                f.fairness_deepest.get_or_create(&labels).clone(),
                f.fairness_wait.get_or_create(&labels).clone(),
            ));
            let mut known = f.queue_levels.lock();
            let known = known.entry(self.name.clone()).or_default();
            *known = (*known).max(gauges.len());
        }
        let (groups, deepest, wait) = &gauges[level];
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        groups.set(count(stats.groups));
        deepest.set(count(stats.deepest));
        wait.set(stats.longest_wait_seconds);
    }
}

impl QueueMetricsProvider for Registry {
    fn new_queue_metrics(&self, name: &str) -> Arc<dyn QueueMetrics> {
        let f = &self.families;
        let labels = queue_labels(name);
        Arc::new(QueueHooks {
            families: self.families.clone(),
            name: name.to_owned(),
            depth: Mutex::new(Vec::new()),
            adds: f.queue_adds.get_or_create(&labels).clone(),
            latency: f.queue_latency.get_or_create(&labels).clone(),
            work_duration: f.queue_work_duration.get_or_create(&labels).clone(),
            unfinished: f.queue_unfinished.get_or_create(&labels).clone(),
            longest: f.queue_longest.get_or_create(&labels).clone(),
            retries: f.queue_retries.get_or_create(&labels).clone(),
            levels: Mutex::new(Vec::new()),
        })
    }
}

/// One controller's metrics.
struct ControllerHooks {
    families: Arc<Families>,
    labels: Labels<1>,
    reconcile_time: Histogram,
    active: Gauge,
    /// One counter per reason, in [`SCALE_REASONS`]' order, made with the controller.
    scaling: [Counter; SCALE_REASONS.len()],
}

impl ControllerMetrics for ControllerHooks {
    fn max_concurrent_reconciles(&self, workers: usize) {
        self.families.max_concurrent.get_or_create(&self.labels).set(workers as i64);
    }
    fn worker_started(&self) {
        self.active.inc();
    }
    fn worker_finished(&self) {
        self.active.dec();
    }
    fn reconciled(&self, outcome: ReconcileOutcome, took: Duration) {
        let f = &self.families;
        let result = match outcome {
            ReconcileOutcome::Success => "success",
            ReconcileOutcome::RequeueAfter => "requeue_after",
            _ => "error",
        };
        let [controller] = self.labels.clone();
        f.reconcile_total.get_or_create(&[controller, ("result", result.to_owned())]).inc();
        match outcome {
            ReconcileOutcome::Error => {
                f.reconcile_errors.get_or_create(&self.labels).inc();
            }
            ReconcileOutcome::Panic => {
                f.reconcile_errors.get_or_create(&self.labels).inc();
                f.reconcile_panics.get_or_create(&self.labels).inc();
            }
            ReconcileOutcome::Timeout => {
                f.reconcile_errors.get_or_create(&self.labels).inc();
                f.reconcile_timeouts.get_or_create(&self.labels).inc();
            }
            _ => {}
        }
        self.reconcile_time.observe(took.as_secs_f64());
    }
    fn dropped(&self) {
        self.families.terminal_errors.get_or_create(&self.labels).inc();
    }
    fn held(&self, waited: Duration, timed_out: bool) {
        let f = &self.families;
        f.holds.get_or_create(&self.labels).inc();
        f.hold_time.get_or_create(&self.labels).observe(waited.as_secs_f64());
        if timed_out {
            f.hold_timeouts.get_or_create(&self.labels).inc();
        }
    }
    fn scaled(&self, _from: usize, _to: usize, reason: ScaleReason) {
        self.scaling[scale_index(reason)].inc();
    }
}

impl ControllerMetricsProvider for Registry {
    fn new_controller_metrics(&self, controller: &str) -> Arc<dyn ControllerMetrics> {
        let labels = [("controller", controller.to_owned())];
        let f = &self.families;
        // Created now, so that a controller's series exist (at zero) from its start, as
        // controller-runtime initialises them.
        for result in ["success", "error", "requeue", "requeue_after"] {
            let [controller] = labels.clone();
            let _ = f.reconcile_total.get_or_create(&[controller, ("result", result.to_owned())]);
        }
        for family in f.controller_counters() {
            let _ = family.get_or_create(&labels);
        }
        let scaling = SCALE_REASONS.map(|reason| {
            let [controller] = labels.clone();
            let labels = [controller, ("reason", reason.as_str().to_owned())];
            f.worker_scaling.get_or_create(&labels).clone()
        });
        Arc::new(ControllerHooks {
            families: self.families.clone(),
            reconcile_time: f.reconcile_time.get_or_create(&labels).clone(),
            active: f.active_workers.get_or_create(&labels).clone(),
            scaling,
            labels,
        })
    }
}

/// client-go's request metrics: `method` and `verb` are both the HTTP method, as client-go
/// records them; `host` is the API server's `host:port`, never a path.
impl RequestMetrics for Registry {
    fn request(&self, method: &http::Method, host: &str, code: &str, took: Duration) {
        let f = &self.families;
        let (method, host) = (method.as_str().to_owned(), host.to_owned());
        let labels =
            [("code", code.to_owned()), ("method", method.clone()), ("host", host.clone())];
        f.rest_requests.get_or_create(&labels).inc();
        f.rest_latency
            .get_or_create(&[("verb", method), ("host", host)])
            .observe(took.as_secs_f64());
    }
}

impl EventMetrics for Registry {
    fn recorded(&self, controller: &str) {
        self.families.events_recorded.get_or_create(&[("controller", controller.to_owned())]).inc();
    }
    fn dropped(&self, controller: &str, reason: DropReason) {
        let labels =
            [("controller", controller.to_owned()), ("reason", reason.as_str().to_owned())];
        self.families.events_dropped.get_or_create(&labels).inc();
    }
}

impl ShardingMetrics for Registry {
    fn objects(&self, ring: &str, counts: &[(String, usize)]) {
        let mut known = self.families.sharding_shards.lock();
        let shards = known.entry(ring.to_owned()).or_default();
        shards.extend(counts.iter().map(|(shard, _)| shard.clone()));
        for shard in shards.iter() {
            let count = counts.iter().find(|(s, _)| s == shard).map_or(0, |(_, n)| *n);
            let labels = [("ring", ring.to_owned()), ("shard", shard.clone())];
            self.families.sharding_objects.get_or_create(&labels).set(count as i64);
        }
    }
    fn members(&self, ring: &str, ready: usize, expired: usize, dead: usize) {
        for (state, n) in [("ready", ready), ("expired", expired), ("dead", dead)] {
            let labels = [("ring", ring.to_owned()), ("state", state.to_owned())];
            self.families.sharding_members.get_or_create(&labels).set(n as i64);
        }
    }
    fn assigned(&self, ring: &str, reason: AssignReason) {
        let labels = [("ring", ring.to_owned()), ("reason", reason.as_str().to_owned())];
        self.families.sharding_assignments.get_or_create(&labels).inc();
    }
    fn drained(&self, ring: &str) {
        self.families.sharding_drains.get_or_create(&[("ring", ring.to_owned())]).inc();
    }
}

impl LeaderMetrics for Registry {
    fn on(&self, name: &str) {
        self.families.leader.get_or_create(&[("name", name.to_owned())]).set(1);
    }
    fn off(&self, name: &str) {
        self.families.leader.get_or_create(&[("name", name.to_owned())]).set(0);
    }
}

/// One informer's metrics. Its series are shared with every informer of the same labels;
/// they go when the last of those is released.
struct InformerHooks {
    families: Arc<Families>,
    labels: Labels<3>,
    objects: Gauge,
    resource_version: Seconds,
    relists: Counter,
    skipped: Counter,
    wire_fallbacks: Counter,
    /// Set by `released`, and held by every write: once released it writes nothing, so a
    /// request of its ending run neither brings a removed series back nor changes the series
    /// of another informer of the same labels.
    released: Mutex<bool>,
}

impl InformerHooks {
    fn with(&self, name: &'static str, value: &str) -> Labels<4> {
        let [a, b, c] = self.labels.clone();
        [a, b, c, (name, value.to_owned())]
    }

    /// Runs `write` unless the informer was released, under the lock its release takes.
    fn write(&self, write: impl FnOnce()) {
        let released = self.released.lock();
        if !*released {
            write();
        }
    }
}

fn result_label(result: RequestResult) -> &'static str {
    match result {
        RequestResult::Success => "success",
        _ => "error",
    }
}

impl InformerMetrics for InformerHooks {
    fn list_request(&self, result: RequestResult) {
        let labels = self.with("result", result_label(result));
        self.write(|| {
            self.families.informer_lists.get_or_create(&labels).inc();
        });
    }
    fn watch_request(&self, result: RequestResult) {
        let labels = self.with("result", result_label(result));
        self.write(|| {
            self.families.informer_watches.get_or_create(&labels).inc();
        });
    }
    fn watch_event(&self, event: WatchEventType) {
        let kind = match event {
            WatchEventType::Added => "added",
            WatchEventType::Modified => "modified",
            WatchEventType::Deleted => "deleted",
            WatchEventType::Bookmark => "bookmark",
            _ => "error",
        };
        let labels = self.with("type", kind);
        self.write(|| {
            self.families.informer_events.get_or_create(&labels).inc();
        });
    }
    fn relist(&self) {
        self.write(|| {
            self.relists.inc();
        });
    }
    fn object_skipped(&self) {
        self.write(|| {
            self.skipped.inc();
        });
    }
    fn wire_format_fallback(&self) {
        self.write(|| {
            self.wire_fallbacks.inc();
        });
    }
    fn objects(&self, count: usize) {
        self.write(|| {
            self.objects.set(count as i64);
        });
    }
    fn resource_version(&self, resource_version: &str) {
        if let Ok(rv) = resource_version.parse::<u64>() {
            self.write(|| {
                self.resource_version.set(rv as f64);
            });
        }
    }
    fn released(&self) {
        let mut released = self.released.lock();
        if std::mem::replace(&mut *released, true) {
            return;
        }
        let f = &self.families;
        // Counted down under the lock an informer of the same labels is counted up under:
        // one made now either keeps the series or makes them afresh.
        let mut users = f.informer_users.lock();
        let Some(count) = users.get_mut(&self.labels) else { return };
        *count -= 1;
        if *count > 0 {
            return;
        }
        users.remove(&self.labels);
        // The last of its labels: its series go, so that informers made and released as CRDs
        // come and go do not grow the families.
        f.informer_objects.remove(&self.labels);
        f.informer_resource_version.remove(&self.labels);
        f.informer_relists.remove(&self.labels);
        f.informer_skipped.remove(&self.labels);
        f.informer_wire_fallbacks.remove(&self.labels);
        for result in ["success", "error"] {
            f.informer_lists.remove(&self.with("result", result));
            f.informer_watches.remove(&self.with("result", result));
        }
        for kind in ["added", "modified", "deleted", "bookmark", "error"] {
            f.informer_events.remove(&self.with("type", kind));
        }
    }
}

impl InformerMetricsProvider for Registry {
    fn new_informer_metrics(&self, labels: &InformerLabels) -> Arc<dyn InformerMetrics> {
        let labels: Labels<3> = [
            ("resource", labels.resource.clone()),
            ("namespace", labels.namespace.clone()),
            ("selector", labels.selector.clone()),
        ];
        let f = &self.families;
        let mut users = f.informer_users.lock();
        *users.entry(labels.clone()).or_default() += 1;
        let hooks = InformerHooks {
            families: self.families.clone(),
            objects: f.informer_objects.get_or_create(&labels).clone(),
            resource_version: f.informer_resource_version.get_or_create(&labels).clone(),
            relists: f.informer_relists.get_or_create(&labels).clone(),
            skipped: f.informer_skipped.get_or_create(&labels).clone(),
            wire_fallbacks: f.informer_wire_fallbacks.get_or_create(&labels).clone(),
            released: Mutex::new(false),
            labels,
        };
        drop(users);
        Arc::new(hooks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> InformerLabels {
        InformerLabels {
            resource: "pods".into(),
            namespace: String::new(),
            selector: String::new(),
        }
    }

    /// Two informers of one label set (a full and a metadata-only one, say) share its series:
    /// releasing one leaves them to the other, and the released one writes nothing more.
    #[test]
    fn a_released_informer_leaves_the_series_of_a_live_one_of_the_same_labels_alone() {
        let registry = Registry::new();
        let (released, live) =
            (registry.new_informer_metrics(&pods()), registry.new_informer_metrics(&pods()));
        live.objects(3);
        released.released();
        released.objects(7);
        released.list_request(RequestResult::Success);
        let text = registry.encode();
        let objects = r#"ctrlkit_informer_objects{resource="pods",namespace="",selector=""} 3"#;
        assert!(text.contains(objects), "the live informer's series went with the other: {text}");
        assert!(
            !text.contains("ctrlkit_informer_list_requests_total{"),
            "a released informer wrote: {text}"
        );
        live.list_request(RequestResult::Success);
        live.released();
        let text = registry.encode();
        assert!(!text.contains(r#"resource="pods""#), "the last one released leaves none: {text}");
        // Made again, the label set starts afresh.
        registry.new_informer_metrics(&pods()).objects(1);
        let objects = r#"ctrlkit_informer_objects{resource="pods",namespace="",selector=""} 1"#;
        assert!(registry.encode().contains(objects), "{}", registry.encode());
    }

    /// A controller's scaling series go with its other series, and a late change through
    /// its hooks (a tick of an ending run) brings none back.
    #[test]
    fn a_removed_controllers_scaling_series_go_and_a_late_change_makes_none() {
        let registry = Registry::new();
        let hooks = registry.new_controller_metrics("sets");
        hooks.scaled(1, 2, ScaleReason::Queue);
        let series =
            r#"ctrlkit_controller_worker_scaling_total{controller="sets",reason="queue"} 1"#;
        assert!(registry.encode().contains(series), "{}", registry.encode());
        registry.remove_controller("sets", "sets");
        hooks.scaled(2, 1, ScaleReason::Idle);
        let out = registry.encode();
        assert!(!out.contains(r#"controller="sets""#), "no series of a removed controller: {out}");
    }

    #[test]
    fn a_removed_queues_fairness_series_go_and_a_late_refresh_brings_none_back() {
        let registry = Registry::new();
        let hooks = registry.new_queue_metrics("q");
        let stats = FairnessLevelStats { groups: 3, deepest: 7, longest_wait_seconds: 1.5 };
        hooks.fairness_level(0, &stats);
        hooks.fairness_level(1, &stats);
        let out = registry.encode();
        let series = r#"ctrlkit_workqueue_fairness_groups{name="q",controller="q",level="1"} 3"#;
        assert!(out.contains(series), "{out}");
        registry.remove_controller("q", "q");
        let out = registry.encode();
        assert!(!out.contains(r#"name="q""#), "the queue's series are gone: {out}");
        // The queue's refresh task may run once more after its controller was removed.
        hooks.fairness_level(0, &stats);
        let out = registry.encode();
        assert!(!out.contains(r#"name="q""#), "a late refresh makes none again: {out}");
    }

    #[test]
    fn a_fair_queue_has_one_series_per_level_however_many_namespaces() {
        use crate::workqueue::{FairnessKey, WorkQueue};
        let registry = Registry::new();
        let q: WorkQueue<String> = WorkQueue::builder()
            .name("fair")
            .metrics(Arc::new(registry.clone()))
            .fairness(|key: &String| {
                let mut parts = key.split('/');
                FairnessKey::new().level(parts.next()).level(parts.next())
            })
            .build();
        for ns in 0..50 {
            q.add(format!("cluster-{}/ns-{ns}/cm", ns % 2));
        }
        q.update_unfinished_work();
        let out = registry.encode();
        for family in ["groups", "deepest", "longest_wait_seconds"] {
            let prefix = format!("ctrlkit_workqueue_fairness_{family}{{");
            let series: Vec<&str> = out.lines().filter(|l| l.starts_with(&prefix)).collect();
            assert_eq!(series.len(), 2, "one series per level, none per group: {series:?}");
        }
        let groups = |level: usize| {
            format!(
                r#"ctrlkit_workqueue_fairness_groups{{name="fair",controller="fair",level="{level}"}}"#
            )
        };
        assert!(out.contains(&format!("{} 2\n", groups(0))), "two clusters: {out}");
        assert!(out.contains(&format!("{} 50\n", groups(1))), "50 namespaces: {out}");
        assert!(!out.contains("ns-"), "no namespace in a label: {out}");
    }
}
