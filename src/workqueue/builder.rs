//! [`WorkQueueBuilder`]: a named queue with its own rate limiter, metrics and fairness.

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::fairness::{Fairness, FairnessFn, LabelFn};
use super::metrics::{QueueMetricsProvider, Recorder};
use super::rate_limiters::RateLimiter;
use super::{FairnessKey, WorkQueue};

/// Builds a [`WorkQueue`]; see [`WorkQueue::builder`].
pub struct WorkQueueBuilder<T> {
    name: String,
    rate_limiter: Option<Box<dyn RateLimiter<T>>>,
    metrics: Option<Arc<dyn QueueMetricsProvider>>,
    aging: Duration,
    /// `None`: not decided (FIFO, unless a controller makes it fair); `Some(None)`: FIFO.
    fairness: Option<Option<FairnessFn<T>>>,
    labels: Option<LabelFn<T>>,
    max_in_flight: Option<usize>,
    fair_retries: bool,
    _item: PhantomData<fn(T)>,
}

impl<T> std::fmt::Debug for WorkQueueBuilder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueueBuilder")
            .field("name", &self.name)
            .field("rate_limiter", &self.rate_limiter.is_some())
            .field("metrics", &self.metrics.is_some())
            .field("aging", &self.aging)
            .field("fair", &matches!(self.fairness, Some(Some(_))))
            .field("fair_retries", &self.fair_retries)
            .finish()
    }
}

impl<T> WorkQueueBuilder<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    pub(crate) fn new() -> Self {
        Self {
            name: String::new(),
            rate_limiter: None,
            metrics: None,
            aging: super::work_queue::DEFAULT_AGING,
            fairness: None,
            labels: None,
            max_in_flight: None,
            fair_retries: true,
            _item: PhantomData,
        }
    }

    /// Names the queue; metrics are labelled with it.
    #[must_use]
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Whether a metrics provider was set.
    pub(crate) fn has_metrics(&self) -> bool {
        self.metrics.is_some()
    }

    /// Whether a name was set.
    pub(crate) fn has_name(&self) -> bool {
        !self.name.is_empty()
    }

    /// The limiter `add_rate_limited` consults (default: `default_controller_rate_limiter`).
    #[must_use]
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<T> + 'static) -> Self {
        self.rate_limiter = Some(Box::new(limiter));
        self
    }

    /// Records the queue's metrics with `provider`. Without it, nothing is recorded.
    #[must_use]
    pub fn metrics(mut self, provider: Arc<dyn QueueMetricsProvider>) -> Self {
        self.metrics = Some(provider);
        self
    }

    /// How long a ready item waits before it is served ahead of newer items of higher
    /// priority (default 5 minutes). So no priority starves: under a constant stream of
    /// high-priority work, a low-priority item waits at most this long plus the time to serve
    /// the items that became ready before it. Shorter periods bound the wait more tightly and
    /// let old low-priority items interleave sooner with new high-priority ones;
    /// `Duration::MAX` turns aging off (strict priorities, as controller-runtime's); then a
    /// `get` reads no clock to compare ages, most of what serving several priorities adds to
    /// a `get`.
    // The cost of that clock read is measured in the repository's docs/design/workqueue.md.
    #[must_use]
    pub fn aging(mut self, period: Duration) -> Self {
        self.aging = period;
        self
    }

    /// Makes the queue fair across the keys `key` gives its items: within a priority, ready
    /// items are taken round-robin across fairness keys, at each of the key's levels in turn,
    /// instead of in the order they came (see the [module docs](super)). A controller's queue
    /// is fair by namespace unless told otherwise
    /// ([`Config::fair_queue`](crate::controller::Config::fair_queue)).
    ///
    /// `key` is called once each time an item becomes ready anew (not for an add of an item
    /// already queued) under the queue's lock: it should be cheap, and must not touch the
    /// queue.
    #[must_use]
    pub fn fairness(mut self, key: impl Fn(&T) -> FairnessKey + Send + Sync + 'static) -> Self {
        self.fairness = Some(Some(Arc::new(key)));
        self
    }

    /// Names an item's fairness level (0 for the first) in the queue's logs of its busiest
    /// groups, such as the namespace of a key. Without it, groups are named by number. Only
    /// for a fair queue. It runs under the queue's lock at each metrics refresh, so it must
    /// not call the queue; a panic in it is logged and the group named by number.
    #[must_use]
    pub fn fairness_labels(
        mut self,
        label: impl Fn(&T, usize) -> String + Send + Sync + 'static,
    ) -> Self {
        self.labels = Some(Arc::new(label));
        self
    }

    /// At most `max` items of one first-level fairness group (a namespace; a cluster, for keys
    /// whose first level is the cluster) are handed out at once: the group's other ready items
    /// wait until one of its items is [`done`](WorkQueue::done), while other groups' are
    /// handed out. So slow items of one tenant cannot hold every worker.
    /// [`WorkQueue::len_available`] says how many ready items a worker may take. Only for a
    /// fair queue; zero counts as one.
    #[must_use]
    pub fn max_in_flight_per_key(mut self, max: usize) -> Self {
        self.max_in_flight = Some(max.max(1));
        self
    }

    /// FIFO within a priority: no fairness, as client-go's queue (the default of a queue built
    /// alone; a controller's queue is fair unless given this).
    #[must_use]
    pub fn fifo(mut self) -> Self {
        self.fairness = Some(None);
        self
    }

    /// Makes the queue fair across `key`'s keys unless [`fairness`](Self::fairness) or
    /// [`fifo`](Self::fifo) decided already: a controller's default.
    pub(crate) fn fairness_by_default(
        mut self,
        key: impl Fn(&T) -> FairnessKey + Send + Sync + 'static,
        label: impl Fn(&T, usize) -> String + Send + Sync + 'static,
    ) -> Self {
        if self.fairness.is_none() {
            self.fairness = Some(Some(Arc::new(key)));
            self.labels.get_or_insert_with(|| Arc::new(label));
        }
        self
    }

    /// Whether a fair queue with the default rate limiter hands its overall bucket's tokens
    /// round-robin across fairness keys (default `true`): a retry waits its own backoff, then
    /// its turn at the bucket (10 qps, burst 100, as client-go's), so a namespace whose keys all
    /// fail cannot reserve the bucket for minutes ahead of another's one retry. With `false`,
    /// or a rate limiter of the caller's, or fairness off, the bucket is reserved first come,
    /// first served at `add_rate_limited`, as client-go's.
    #[must_use]
    pub fn fair_retries(mut self, fair: bool) -> Self {
        self.fair_retries = fair;
        self
    }

    /// Makes the queue. With metrics, called inside a tokio runtime, it also starts the
    /// 500 ms refresh of the unfinished-work gauges, which ends with the queue.
    pub fn build(self) -> WorkQueue<T> {
        let metrics = self.metrics.map(|p| Recorder::new(p.as_ref(), &self.name));
        let fairness = self.fairness.flatten().map(|key| Fairness {
            key,
            label: self.labels,
            max_in_flight: self.max_in_flight,
        });
        let fair_bucket = fairness.is_some() && self.fair_retries && self.rate_limiter.is_none();
        WorkQueue::from_parts(super::work_queue::Parts {
            name: self.name,
            rate_limiter: self.rate_limiter,
            metrics,
            aging: self.aging,
            fairness,
            fair_bucket,
        })
    }
}

impl<T> WorkQueue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// A queue with [`default_controller_rate_limiter`](super::default_controller_rate_limiter)
    /// and no metrics.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder for a named queue with its own rate limiter and metrics.
    pub fn builder() -> WorkQueueBuilder<T> {
        WorkQueueBuilder::new()
    }
}

impl<T> Default for WorkQueue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}
