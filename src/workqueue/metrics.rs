//! Metrics hooks with client-go's workqueue metrics, labelled by the queue's name.
//!
//! A [`QueueMetricsProvider`] makes one metric object per queue and metric; a Prometheus (or any
//! other) exporter implements it. A queue built without a provider records nothing and reads
//! no clocks for metrics, so unused metrics cost nothing.
//!
//! Adds go through the queue's add buffer, so depth and adds are recorded when the queue
//! applies them: at once when a worker is waiting, else at the next `get`, `done` or `len`,
//! and at least every 500 ms (the unfinished-work refresh). Queue latency still counts from
//! the add itself: with metrics on, every add reads the clock.
//!
//! | metric | kind | meaning |
//! |---|---|---|
//! | depth | gauge | items ready to be handed out, in all and by priority |
//! | adds | counter | adds that queued an item (duplicates of a waiting item are not counted) |
//! | queue latency | histogram, seconds | from an item's add to the `get` that handed it out |
//! | work duration | histogram, seconds | from `get` to `done` |
//! | unfinished work | settable gauge, seconds | summed age of the items being processed |
//! | longest running processor | settable gauge, seconds | age of the oldest item being processed |
//! | retries | counter | calls of `add_rate_limited` |

use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

use super::Priority;
use super::queue::Added;

/// A value that only goes up.
pub trait CounterMetric: Send + Sync {
    /// Adds one.
    fn inc(&self);
}

/// A value that goes up and down by one.
pub trait GaugeMetric: Send + Sync {
    /// Adds one.
    fn inc(&self);
    /// Subtracts one.
    fn dec(&self);
}

/// A value set as a whole.
pub trait SettableGaugeMetric: Send + Sync {
    /// Replaces the value.
    fn set(&self, value: f64);
}

/// A distribution of observed values.
pub trait HistogramMetric: Send + Sync {
    /// Records one value.
    fn observe(&self, value: f64);
}

/// Makes the metrics of a queue named `name`: client-go's `workqueue.MetricsProvider`.
pub trait QueueMetricsProvider: Send + Sync {
    /// Current depth: items ready to be handed out.
    fn new_depth_metric(&self, name: &str) -> Arc<dyn GaugeMetric>;
    /// Current depth of one priority: items ready to be handed out at `priority`. Asked for
    /// the first time a queue holds an item at that priority. The default records nothing;
    /// the total still goes to [`new_depth_metric`](Self::new_depth_metric).
    fn new_depth_metric_with_priority(
        &self,
        name: &str,
        priority: Priority,
    ) -> Arc<dyn GaugeMetric> {
        let _ = (name, priority);
        Arc::new(Noop)
    }
    /// Total adds handled by the queue.
    fn new_adds_metric(&self, name: &str) -> Arc<dyn CounterMetric>;
    /// Seconds an item stays in the queue before it is handed out.
    fn new_latency_metric(&self, name: &str) -> Arc<dyn HistogramMetric>;
    /// Seconds processing an item takes.
    fn new_work_duration_metric(&self, name: &str) -> Arc<dyn HistogramMetric>;
    /// Seconds of work in progress that has not been observed by work duration yet.
    fn new_unfinished_work_seconds_metric(&self, name: &str) -> Arc<dyn SettableGaugeMetric>;
    /// Seconds the longest-running item has been processed for.
    fn new_longest_running_processor_seconds_metric(
        &self,
        name: &str,
    ) -> Arc<dyn SettableGaugeMetric>;
    /// Total retries (`add_rate_limited` calls) handled by the queue.
    fn new_retries_metric(&self, name: &str) -> Arc<dyn CounterMetric>;
}

/// A provider whose metrics discard everything; a queue given it behaves as one given none.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopMetricsProvider;

struct Noop;
impl CounterMetric for Noop {
    fn inc(&self) {}
}
impl GaugeMetric for Noop {
    fn inc(&self) {}
    fn dec(&self) {}
}
impl SettableGaugeMetric for Noop {
    fn set(&self, _: f64) {}
}
impl HistogramMetric for Noop {
    fn observe(&self, _: f64) {}
}

impl QueueMetricsProvider for NoopMetricsProvider {
    fn new_depth_metric(&self, _: &str) -> Arc<dyn GaugeMetric> {
        Arc::new(Noop)
    }
    fn new_adds_metric(&self, _: &str) -> Arc<dyn CounterMetric> {
        Arc::new(Noop)
    }
    fn new_latency_metric(&self, _: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(Noop)
    }
    fn new_work_duration_metric(&self, _: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(Noop)
    }
    fn new_unfinished_work_seconds_metric(&self, _: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(Noop)
    }
    fn new_longest_running_processor_seconds_metric(
        &self,
        _: &str,
    ) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(Noop)
    }
    fn new_retries_metric(&self, _: &str) -> Arc<dyn CounterMetric> {
        Arc::new(Noop)
    }
}

/// The metrics of one queue, made once at build time (the per-priority depths on first use).
pub(crate) struct QueueMetrics {
    provider: Arc<dyn QueueMetricsProvider>,
    name: String,
    pub(crate) depth: Arc<dyn GaugeMetric>,
    /// One gauge per priority seen; a handful at most, so a list.
    depth_by_priority: Mutex<Vec<(Priority, Arc<dyn GaugeMetric>)>>,
    pub(crate) adds: Arc<dyn CounterMetric>,
    pub(crate) latency: Arc<dyn HistogramMetric>,
    pub(crate) work_duration: Arc<dyn HistogramMetric>,
    pub(crate) unfinished_work: Arc<dyn SettableGaugeMetric>,
    pub(crate) longest_running: Arc<dyn SettableGaugeMetric>,
    pub(crate) retries: Arc<dyn CounterMetric>,
}

impl QueueMetrics {
    pub(crate) fn new(provider: Arc<dyn QueueMetricsProvider>, name: &str) -> Self {
        Self {
            name: name.to_owned(),
            depth: provider.new_depth_metric(name),
            depth_by_priority: Mutex::new(Vec::new()),
            adds: provider.new_adds_metric(name),
            latency: provider.new_latency_metric(name),
            work_duration: provider.new_work_duration_metric(name),
            unfinished_work: provider.new_unfinished_work_seconds_metric(name),
            longest_running: provider.new_longest_running_processor_seconds_metric(name),
            retries: provider.new_retries_metric(name),
            provider,
        }
    }

    /// Moves the depth of `priority` (and the total) by `delta`, which is 1 or -1.
    pub(crate) fn depth_changed(&self, priority: Priority, delta: i8) {
        let mut gauges = self.depth_by_priority.lock().unwrap_or_else(PoisonError::into_inner);
        let at = match gauges.iter().position(|(p, _)| *p == priority) {
            Some(at) => at,
            None => {
                let gauge = self.provider.new_depth_metric_with_priority(&self.name, priority);
                gauges.push((priority, gauge));
                gauges.len() - 1
            }
        };
        let gauge = &gauges[at].1;
        if delta > 0 {
            self.depth.inc();
            gauge.inc();
        } else {
            self.depth.dec();
            gauge.dec();
        }
    }

    /// Records what an add did: a queued item counts as an add and deepens its priority; a
    /// raised one moves between priorities.
    pub(crate) fn record_add(&self, added: Added) {
        match added {
            Added::Queued(priority) => {
                self.adds.inc();
                self.depth_changed(priority, 1);
            }
            Added::Raised { from, to } => {
                self.depth_changed(from, -1);
                self.depth_changed(to, 1);
            }
            Added::Deduplicated | Added::Deferred => {}
        }
    }

    /// Sets the two in-progress gauges from the start times of the items being processed.
    pub(crate) fn update_unfinished(&self, now: Instant, started: impl Iterator<Item = Instant>) {
        let (mut total, mut longest) = (0.0f64, 0.0f64);
        for at in started {
            let age = now.saturating_duration_since(at).as_secs_f64();
            total += age;
            longest = longest.max(age);
        }
        self.unfinished_work.set(total);
        self.longest_running.set(longest);
    }
}

/// Seconds from `since` to `now`, for histograms.
pub(crate) fn seconds_since(since: Instant, now: Instant) -> f64 {
    now.saturating_duration_since(since).as_secs_f64()
}
