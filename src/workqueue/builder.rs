//! [`WorkQueueBuilder`]: a named queue with its own rate limiter and metrics.

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::WorkQueue;
use super::metrics::{QueueMetricsProvider, Recorder};
use super::rate_limiters::RateLimiter;

/// Builds a [`WorkQueue`]; see [`WorkQueue::builder`].
pub struct WorkQueueBuilder<T> {
    name: String,
    rate_limiter: Option<Box<dyn RateLimiter<T>>>,
    metrics: Option<Arc<dyn QueueMetricsProvider>>,
    aging: Duration,
    _item: PhantomData<fn(T)>,
}

impl<T> std::fmt::Debug for WorkQueueBuilder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueueBuilder")
            .field("name", &self.name)
            .field("rate_limiter", &self.rate_limiter.is_some())
            .field("metrics", &self.metrics.is_some())
            .field("aging", &self.aging)
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

    /// Makes the queue. With metrics, called inside a tokio runtime, it also starts the
    /// 500 ms refresh of the unfinished-work gauges, which ends with the queue.
    pub fn build(self) -> WorkQueue<T> {
        let metrics = self.metrics.map(|p| Recorder::new(p.as_ref(), &self.name));
        WorkQueue::from_parts(self.name, self.rate_limiter, metrics, self.aging)
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
