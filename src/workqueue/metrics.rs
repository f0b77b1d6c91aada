//! Metrics hooks with client-go's workqueue metrics, labelled by the queue's name.
//!
//! A [`QueueMetricsProvider`] makes one [`QueueMetrics`] per queue, named for it; a Prometheus
//! (or any other) exporter implements both, as it does the other layers' `*Metrics` hooks. A queue built without a provider records nothing and reads
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
//! | fairness level (fair queues) | gauges per level of the fairness key | groups with ready items, the most ready items of one group, the longest wait of a group's oldest ready item |
//!
//! The fairness gauges have one series per level (a handful), never one per namespace or
//! cluster: their cardinality is bounded whatever the tenants. Which groups are the busiest
//! goes to the logs instead: at each refresh (every 500 ms) a fair queue with metrics logs, at
//! debug level, the three deepest groups of each level by name.

use std::sync::Arc;

use tokio::time::Instant;

use super::Priority;
use super::fairness::{FairnessLevelStats, LevelSnapshot};
use super::queue::Added;
use crate::panic::observe;

/// What one queue reports: client-go's workqueue metrics, one method per metric of the table
/// above.
/// A hook that panics is caught and logged, and costs only that observation. Every hook
/// does nothing by default: an exporter implements those it records, and a hook added later
/// breaks no implementor.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use ctrlkit::workqueue::{QueueMetrics, QueueMetricsProvider, WorkQueue};
///
/// /// Counts adds, and records nothing else.
/// #[derive(Default)]
/// struct Adds(AtomicUsize);
///
/// impl QueueMetrics for Adds {
///     fn added(&self) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
///
/// struct Shared(Arc<Adds>);
///
/// impl QueueMetricsProvider for Shared {
///     fn new_queue_metrics(&self, _name: &str) -> Arc<dyn QueueMetrics> {
///         self.0.clone()
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let adds = Arc::new(Adds::default());
/// let queue = WorkQueue::builder().metrics(Arc::new(Shared(adds.clone()))).build();
/// queue.add("a");
/// queue.add("a"); // a duplicate of a waiting item: not an add
/// queue.add("b");
/// assert_eq!(queue.len(), 2); // which applies the buffered adds
/// assert_eq!(adds.0.load(Ordering::Relaxed), 2);
/// # }
/// ```
pub trait QueueMetrics: Send + Sync {
    /// The items ready at `priority` went up (`delta` 1) or down (-1): the depth of that
    /// priority; the queue's depth is the sum over its priorities.
    fn depth(&self, priority: Priority, delta: i64) {
        let _ = (priority, delta);
    }
    /// An add queued an item.
    fn added(&self) {}
    /// An item waited `seconds` from its add to the `get` that handed it out.
    fn queue_latency(&self, seconds: f64) {
        let _ = seconds;
    }
    /// An item was processed for `seconds`, from `get` to `done`.
    fn work_duration(&self, seconds: f64) {
        let _ = seconds;
    }
    /// The items being processed have been processed for `seconds` in all.
    fn unfinished_work(&self, seconds: f64) {
        let _ = seconds;
    }
    /// The item processed longest has been processed for `seconds`.
    fn longest_running_processor(&self, seconds: f64) {
        let _ = seconds;
    }
    /// `add_rate_limited` was called.
    fn retried(&self) {}
    /// A fair queue's state at one level of its fairness key (0 for the first), at each
    /// refresh of the unfinished-work gauges.
    fn fairness_level(&self, level: usize, stats: &FairnessLevelStats) {
        let _ = (level, stats);
    }
}

/// Makes the metrics of each queue: client-go's `workqueue.MetricsProvider`.
pub trait QueueMetricsProvider: Send + Sync {
    /// The metrics of the queue named `name`.
    fn new_queue_metrics(&self, name: &str) -> Arc<dyn QueueMetrics>;
}

/// The metrics of one queue, made once at build time, and what the queue's changes mean for
/// them.
pub(crate) struct Recorder(Arc<dyn QueueMetrics>);

impl Recorder {
    pub(crate) fn new(provider: &dyn QueueMetricsProvider, name: &str) -> Self {
        Self(provider.new_queue_metrics(name))
    }

    /// Calls one of the hooks (user code) with its panic caught: see [`observe`].
    pub(crate) fn call(&self, hook: &'static str, f: impl FnOnce(&dyn QueueMetrics)) {
        observe(hook, || f(self.0.as_ref()));
    }

    /// Moves the depth of `priority` by `delta`, which is 1 or -1.
    pub(crate) fn depth_changed(&self, priority: Priority, delta: i8) {
        self.call("depth", |m| m.depth(priority, i64::from(delta)));
    }

    /// Records what an add did: a queued item counts as an add and deepens its priority; a
    /// raised one moves between priorities.
    pub(crate) fn record_add(&self, added: Added) {
        match added {
            Added::Queued(priority) => {
                self.call("added", |m| m.added());
                self.depth_changed(priority, 1);
            }
            Added::Raised { from, to } => {
                self.depth_changed(from, -1);
                self.depth_changed(to, 1);
            }
            Added::Deduplicated | Added::Deferred => {}
        }
    }

    /// Reports each fairness level and logs its deepest groups.
    pub(crate) fn fairness(&self, queue: &str, levels: Vec<LevelSnapshot>) {
        for (level, snapshot) in levels.into_iter().enumerate() {
            self.call("fairness_level", |m| m.fairness_level(level, &snapshot.stats));
            if !snapshot.deepest.is_empty() {
                tracing::debug!(
                    queue,
                    level,
                    groups = snapshot.stats.groups,
                    deepest = ?snapshot.deepest,
                    "fair queue: the deepest groups (ready items) of this level"
                );
            }
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
        self.call("unfinished_work", |m| m.unfinished_work(total));
        self.call("longest_running_processor", |m| m.longest_running_processor(longest));
    }
}

/// Seconds from `since` to `now`, for histograms.
pub(crate) fn seconds_since(since: Instant, now: Instant) -> f64 {
    now.saturating_duration_since(since).as_secs_f64()
}
