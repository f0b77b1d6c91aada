//! [`WorkQueue`]: the plain queue, the delay layer, the rate limiter and the metrics behind one
//! mutex, with async `get` and shutdown notifications on top.

use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::builder::WorkQueueBuilder;
use super::delaying::{WaitingSet, deadline_after};
use super::metrics::{QueueMetrics, seconds_since};
use super::queue::{Added, Finished, Queue};
use super::rate_limiters::{RateLimiter, default_controller_rate_limiter};

/// How many times an idle `get` yields to the scheduler before it parks. A producer that
/// wakes a parked worker pays for a thread wake-up; a worker that yields a few times first
/// usually finds the next item without one.
const YIELDS_BEFORE_PARKING: u32 = 4;

/// How often a queue with metrics refreshes its unfinished-work gauges, as client-go does.
const UNFINISHED_WORK_PERIOD: Duration = Duration::from_millis(500);

/// A fair, stingy, rate-limited work queue shared by producers and workers.
///
/// Cloning is cheap: every clone is a handle on the same queue. See the
/// [module docs](super) for the contract.
pub struct WorkQueue<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for WorkQueue<T> {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

impl<T> std::fmt::Debug for WorkQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue").field("name", &self.inner.name).finish_non_exhaustive()
    }
}

pub(crate) struct Inner<T> {
    name: String,
    state: Mutex<State<T>>,
    /// Wakes `get` callers that found nothing ready.
    getters: Notify,
    /// Wakes `shut_down_with_drain` callers when the last processed item is done.
    drained: Notify,
    rate_limiter: Box<dyn RateLimiter<T>>,
    /// `None` when no provider was given: then no clock is read for metrics.
    metrics: Option<QueueMetrics>,
}

struct State<T> {
    queue: Queue<T>,
    waiting: WaitingSet<T>,
    shutting_down: bool,
    /// `get` callers parked on `getters`; adds notify only when some are.
    idle_getters: usize,
}

impl<T> State<T>
where
    T: Clone + Eq + Hash,
{
    /// Moves every waiting item whose deadline has passed into the queue.
    fn promote_due(&mut self, metrics: Option<&QueueMetrics>) {
        if self.waiting.is_empty() {
            return;
        }
        let now = Instant::now();
        while let Some(item) = self.waiting.pop_due(now) {
            let added = self.queue.add(item, metrics.map(|_| now));
            if let (Added::Queued, Some(m)) = (added, metrics) {
                m.adds.inc();
                m.depth.inc();
            }
        }
    }
}

impl<T> WorkQueue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// A queue with [`default_controller_rate_limiter`] and no metrics.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder for a named queue with its own rate limiter and metrics.
    pub fn builder() -> WorkQueueBuilder<T> {
        WorkQueueBuilder::new()
    }

    pub(crate) fn from_parts(
        name: String,
        rate_limiter: Option<Box<dyn RateLimiter<T>>>,
        metrics: Option<QueueMetrics>,
    ) -> Self {
        let with_metrics = metrics.is_some();
        let queue = Self {
            inner: Arc::new(Inner {
                name,
                state: Mutex::new(State {
                    queue: Queue::new(),
                    waiting: WaitingSet::new(),
                    shutting_down: false,
                    idle_getters: 0,
                }),
                getters: Notify::new(),
                drained: Notify::new(),
                rate_limiter: rate_limiter
                    .unwrap_or_else(|| Box::new(default_controller_rate_limiter())),
                metrics,
            }),
        };
        if with_metrics {
            spawn_unfinished_work_loop(Arc::downgrade(&queue.inner));
        }
        queue
    }

    /// The queue's name, as given to the builder (empty by default); metrics carry it.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Marks `item` as needing processing. Dropped after shut down.
    pub fn add(&self, item: T) {
        let mut state = self.lock();
        if state.shutting_down {
            tracing::trace!(queue = %self.inner.name, "add after shut down dropped");
            return;
        }
        self.add_locked(&mut state, item);
    }

    fn add_locked(&self, state: &mut State<T>, item: T) {
        let metrics = self.inner.metrics.as_ref();
        if state.queue.add(item, metrics.map(|_| Instant::now())) == Added::Queued {
            if let Some(m) = metrics {
                m.adds.inc();
                m.depth.inc();
            }
            if state.idle_getters > 0 {
                self.inner.getters.notify_one();
            }
        }
    }

    /// Adds `item` once `delay` has passed; a zero delay adds at once. An item already waiting
    /// keeps the earlier of its two deadlines. Waiting items are dropped at shut down.
    pub fn add_after(&self, item: T, delay: Duration) {
        let mut state = self.lock();
        if state.shutting_down {
            return;
        }
        if delay.is_zero() {
            self.add_locked(&mut state, item);
            return;
        }
        let deadline = deadline_after(Instant::now(), delay);
        // A new earliest deadline must re-arm a parked getter's timer.
        if state.waiting.insert(item, deadline) && state.idle_getters > 0 {
            self.inner.getters.notify_one();
        }
    }

    /// Adds `item` after the wait its rate limiter decides, counting one more failure.
    pub fn add_rate_limited(&self, item: T) {
        let delay = self.inner.rate_limiter.when(&item);
        if let Some(m) = &self.inner.metrics {
            m.retries.inc();
        }
        self.add_after(item, delay);
    }

    /// Clears `item`'s failure count in the rate limiter. It does not remove the item from
    /// the queue.
    pub fn forget(&self, item: &T) {
        self.inner.rate_limiter.forget(item);
    }

    /// How many times `item` was rate-limited since it was last forgotten.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.inner.rate_limiter.num_requeues(item)
    }

    /// Waits for an item and hands it out; the caller must call [`done`](Self::done) with it.
    /// Returns `None` once the queue is shut down and nothing ready is left.
    pub async fn get(&self) -> Option<T> {
        let mut yields = 0;
        loop {
            let notified = self.inner.getters.notified();
            tokio::pin!(notified);
            let deadline = {
                let mut state = self.lock();
                if let Some(item) = self.pop_locked(&mut state) {
                    return Some(item);
                }
                if state.shutting_down {
                    return None;
                }
                if yields < YIELDS_BEFORE_PARKING {
                    yields += 1;
                    None
                } else {
                    // Register before the lock is released, so an add that follows is not missed.
                    notified.as_mut().enable();
                    state.idle_getters += 1;
                    Some(state.waiting.next_deadline())
                }
            };
            let Some(deadline) = deadline else {
                tokio::task::yield_now().await;
                continue;
            };
            let _idle = IdleGuard(self);
            match deadline {
                Some(deadline) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(deadline) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Promotes due items and pops the oldest ready one, waking another getter if more remain.
    fn pop_locked(&self, state: &mut State<T>) -> Option<T> {
        let metrics = self.inner.metrics.as_ref();
        state.promote_due(metrics);
        let now = metrics.map(|_| Instant::now());
        let (item, queued_at) = state.queue.pop(now)?;
        if let (Some(m), Some(now)) = (metrics, now) {
            m.depth.dec();
            if let Some(at) = queued_at {
                m.latency.observe(seconds_since(at, now));
            }
        }
        if state.queue.len() > 0 && state.idle_getters > 0 {
            self.inner.getters.notify_one();
        }
        Some(item)
    }

    /// Marks `item` as processed. If it was added while held, it is queued again. Calling it
    /// for an item that is not being processed changes nothing.
    pub fn done(&self, item: &T) {
        let mut state = self.lock();
        let started_at = match state.queue.done(item) {
            Finished::NotProcessing => return,
            Finished::Released { started_at } => started_at,
            Finished::Requeued { started_at } => {
                if let Some(m) = &self.inner.metrics {
                    m.depth.inc();
                }
                if state.idle_getters > 0 {
                    self.inner.getters.notify_one();
                }
                started_at
            }
        };
        if let (Some(m), Some(at)) = (&self.inner.metrics, started_at) {
            m.work_duration.observe(seconds_since(at, Instant::now()));
        }
        if state.shutting_down && state.queue.processing() == 0 {
            self.inner.drained.notify_waiters();
        }
    }

    /// Items ready to be handed out now (waiting items whose deadline passed included).
    pub fn len(&self) -> usize {
        let mut state = self.lock();
        state.promote_due(self.inner.metrics.as_ref());
        state.queue.len()
    }

    /// Whether no item is ready to be handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops accepting adds and drops waiting items. `get` still hands out the ready items,
    /// then returns `None` to every caller.
    pub fn shut_down(&self) {
        {
            let mut state = self.lock();
            state.shutting_down = true;
            state.waiting.clear();
        }
        self.inner.getters.notify_waiters();
        self.inner.drained.notify_waiters();
    }

    /// Shuts down, then waits until every item handed out has been [`done`](Self::done).
    pub async fn shut_down_with_drain(&self) {
        self.shut_down();
        loop {
            let notified = self.inner.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lock().queue.processing() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Whether [`shut_down`](Self::shut_down) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }

    /// Sets the unfinished-work and longest-running-processor gauges now. A queue with metrics
    /// does this every 500 ms by itself; an exporter may call it before each scrape.
    pub fn update_unfinished_work(&self) {
        self.inner.update_unfinished_work();
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.inner.lock()
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

impl<T> Inner<T>
where
    T: Clone + Eq + Hash,
{
    /// Locks the state. A panic never leaves it half-updated (every critical section is
    /// panic-free but for allocation), so a poisoned lock is recovered, not propagated.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update_unfinished_work(&self) {
        if let Some(m) = &self.metrics {
            let state = self.lock();
            m.update_unfinished(Instant::now(), state.queue.processing_started());
        }
    }
}

/// Counts a parked getter out again however its wait ends, cancellation included.
struct IdleGuard<'a, T: Clone + Eq + Hash>(&'a WorkQueue<T>);

impl<T: Clone + Eq + Hash> Drop for IdleGuard<'_, T> {
    fn drop(&mut self) {
        self.0.inner.lock().idle_getters -= 1;
    }
}

/// Refreshes the unfinished-work gauges every 500 ms while the queue lives, when a tokio
/// runtime is there to run it (a queue built outside one refreshes only on demand).
fn spawn_unfinished_work_loop<T>(inner: Weak<Inner<T>>)
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(UNFINISHED_WORK_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(inner) = inner.upgrade() else { return };
            inner.update_unfinished_work();
            let finished = {
                let state = inner.lock();
                state.shutting_down && state.queue.processing() == 0 && state.queue.len() == 0
            };
            if finished {
                return;
            }
        }
    });
}
