//! [`WorkQueue`]: the plain queue, the delay layer, the rate limiter and the metrics behind one
//! mutex, the add buffer in front of it, with async `get` and shutdown notifications on top.

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Priority;
use super::add_buffer::{AddBuffer, Batch, PendingAdd, Pushed};
use super::delaying::{Due, WaitingSet, deadline_after};
use super::fair_bucket::{FairBucket, Gated};
use super::fairness::Fairness;
use super::metrics::{Recorder, seconds_since};
use super::queue::{Added, Finished, Popped, Queue, aging_off};
use super::rate_limiters::{
    ItemExponentialFailureRateLimiter, RateLimiter, default_controller_rate_limiter,
};

/// How often a queue with metrics refreshes its unfinished-work gauges, as client-go does.
const UNFINISHED_WORK_PERIOD: Duration = Duration::from_millis(500);

/// How long an item waits before it is served ahead of newer items of higher priority, unless
/// the builder sets another period.
pub(crate) const DEFAULT_AGING: Duration = Duration::from_secs(5 * 60);

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
    /// parking_lot's: it spins before it parks, and unlocks without a system call unless a
    /// thread is parked, so two workers do not hand it over through the kernel.
    state: Mutex<State<T>>,
    /// Adds not applied to `state` yet; see [`super::add_buffer`].
    adds: AddBuffer<T>,
    /// `get` callers parked on `getters`; adds notify only when some are. Changed under the
    /// state lock; read by producers without it (see `get` for why no wake-up is lost).
    idle_getters: AtomicUsize,
    /// Whether the last `get` found several priorities in use: the next reads the clock for
    /// aging before it takes the lock, not while holding it. A hint only: a `get` that finds
    /// it wrong reads the clock under the lock.
    priorities_in_use: AtomicBool,
    /// Wakes `get` callers that found nothing ready.
    getters: Notify,
    /// Wakes `shut_down_with_drain` callers when the last processed item is done.
    drained: Notify,
    rate_limiter: Box<dyn RateLimiter<T>>,
    /// `None` when no provider was given: then no clock is read for metrics.
    metrics: Option<Recorder>,
    /// Hashes items before the lock is taken, so the critical sections only probe. foldhash
    /// (hashbrown's own hasher) is several times cheaper than SipHash for short keys
    /// (`docs/design/workqueue.md`); its per-process random seed keeps keys from being chosen
    /// to collide.
    hasher: foldhash::quality::RandomState,
    /// See [`WorkQueueBuilder::aging`](super::WorkQueueBuilder::aging).
    aging: Duration,
    /// Retries wait for the fair bucket (`State::bucket` is there).
    fair_bucket: bool,
}

/// What a [`WorkQueueBuilder`](super::WorkQueueBuilder) hands [`WorkQueue::from_parts`].
pub(crate) struct Parts<T> {
    pub(crate) name: String,
    pub(crate) rate_limiter: Option<Box<dyn RateLimiter<T>>>,
    pub(crate) metrics: Option<Recorder>,
    pub(crate) aging: Duration,
    pub(crate) fairness: Option<Fairness<T>>,
    /// Whether the default limiter's overall bucket is the fair one.
    pub(crate) fair_bucket: bool,
}

struct State<T> {
    queue: Queue<T>,
    waiting: WaitingSet<T>,
    /// Retries past their own backoff waiting for a token (a fair queue with the default
    /// limiter; see `fair_bucket.rs`).
    bucket: Option<FairBucket<T>>,
    shutting_down: bool,
    /// `shut_down_with_drain` callers waiting: `done` wakes them only if there are some.
    drainers: usize,
    /// The add buffer's previous allocation, swapped in at each batch.
    spare: Batch<T>,
}

impl<T> State<T>
where
    T: Clone + Eq + Hash,
{
    /// Moves every waiting item whose deadline has passed into the queue (a gated retry into
    /// its line at the bucket), then the retries the bucket has tokens for.
    fn promote_due(&mut self, metrics: Option<&Recorder>) {
        let gated = self.bucket.as_ref().is_some_and(|b| b.len() > 0);
        if self.waiting.is_empty() && !gated {
            return;
        }
        let now = Instant::now();
        while let Some(Due { item, hash, priority, gated }) = self.waiting.pop_due(now) {
            if gated
                && let Some(bucket) = &mut self.bucket
                && let Some(flow) = self.queue.flow_of(&item)
            {
                let groups = self.queue.groups().expect("a fair queue has groups");
                if !bucket.push(groups, flow, Gated { item, hash, priority }) {
                    // Deduplicated: no entry names the flow for it.
                    self.queue.release_flows(std::iter::once(flow));
                }
                continue;
            }
            // A retry of the same item waiting for a token merges with this earlier add, at the
            // higher of the two priorities, as two waiting adds do.
            let mut priority = priority;
            if let Some(bucket) = &mut self.bucket
                && bucket.len() > 0
                && let Some(retry) = bucket.cancel(&item, hash)
            {
                priority = priority.max(retry);
            }
            let added = self.queue.add(item, hash, priority, now);
            if let Some(m) = metrics {
                m.record_add(added);
            }
        }
        let Some(bucket) = &mut self.bucket else { return };
        while let Some(Gated { item, hash, priority }) = bucket.release(now) {
            // So does a later add of the same item still waiting for its deadline.
            let mut priority = priority;
            if !self.waiting.is_empty()
                && let Some(later) = self.waiting.remove(&item, hash)
            {
                priority = priority.max(later);
            }
            let added = self.queue.add(item, hash, priority, now);
            if let Some(m) = metrics {
                m.record_add(added);
            }
        }
        self.queue.release_flows(bucket.released());
    }

    /// When a parked `get` must look again: the next deadline, or the bucket's next token.
    fn next_wake(&mut self) -> Option<Instant> {
        let token = self.bucket.as_ref().and_then(FairBucket::next_release);
        match (self.waiting.next_deadline(), token) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl<T> WorkQueue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// The queue a [`WorkQueueBuilder`](super::WorkQueueBuilder) builds (its constructors,
    /// `new` and `builder`, are in `builder.rs`, above this file).
    pub(crate) fn from_parts(parts: Parts<T>) -> Self {
        let Parts { name, rate_limiter, metrics, aging, fairness, fair_bucket } = parts;
        let with_metrics = metrics.is_some();
        // A fair bucket takes the overall bucket's place: the limiter keeps the per-item
        // backoff of the default one alone.
        let (rate_limiter, bucket) = match (rate_limiter, fair_bucket) {
            (Some(limiter), _) => (limiter, None),
            (None, true) => {
                let per_item: Box<dyn RateLimiter<T>> =
                    Box::new(ItemExponentialFailureRateLimiter::new(
                        Duration::from_millis(5),
                        Duration::from_secs(1000),
                    ));
                (per_item, Some(FairBucket::new(10.0, 100)))
            }
            (None, false) => {
                (Box::new(default_controller_rate_limiter()) as Box<dyn RateLimiter<T>>, None)
            }
        };
        let fair_bucket = bucket.is_some();
        let queue = Self {
            inner: Arc::new(Inner {
                name,
                state: Mutex::new(State {
                    queue: Queue::with_fairness(fairness, with_metrics),
                    waiting: WaitingSet::new(),
                    bucket,
                    shutting_down: false,
                    drainers: 0,
                    spare: Batch::new(),
                }),
                adds: AddBuffer::new(),
                idle_getters: AtomicUsize::new(0),
                priorities_in_use: AtomicBool::new(false),
                getters: Notify::new(),
                drained: Notify::new(),
                rate_limiter,
                metrics,
                hasher: foldhash::quality::RandomState::default(),
                aging,
                fair_bucket,
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

    /// Marks `item` as needing processing, at [`Priority::NORMAL`]. Dropped after shut down.
    // Always inlined, as `add_with_priority` is (below).
    #[inline(always)]
    pub fn add(&self, item: T) {
        self.add_with_priority(item, Priority::NORMAL);
    }

    /// Marks `item` as needing processing at `priority`. An item already ready keeps the
    /// higher of its two priorities (moving to the back of the higher one's line if it rises);
    /// an item held by a worker comes back at the highest priority it was added at meanwhile.
    /// Dropped after shut down.
    // Inlined, with the push inlined here and its rarer outcomes out of line, so the item goes
    // from the caller into the buffer in registers: a copy through the stack made the buffer's
    // wide loads wait on narrower stores (`docs/design/workqueue.md`, "Inlined adds").
    #[inline(always)]
    pub fn add_with_priority(&self, item: T, priority: Priority) {
        let hash = self.inner.hasher.hash_one(&item);
        let at = self.inner.metrics.as_ref().map(|_| Instant::now());
        match self.inner.adds.push(PendingAdd { item, hash, priority }, at) {
            Pushed::More => {}
            pushed => self.after_push(pushed),
        }
    }

    /// What an add does once its push was other than one more behind others: wake a parked
    /// getter for the first add of a batch, apply a full buffer, or log a dropped add.
    #[inline(never)]
    fn after_push(&self, pushed: Pushed) {
        match pushed {
            Pushed::Dropped => {
                tracing::trace!(queue = %self.inner.name, "add after shut down dropped");
            }
            // A parked getter applies the batch; else the lock holder or the next locker will.
            Pushed::First => {
                if self.inner.idle_getters.load(Ordering::SeqCst) > 0 {
                    self.inner.getters.notify_one();
                }
            }
            Pushed::More => {}
            // Locking applies the buffer. A full one is applied here only if no worker holds
            // the lock: else the next to lock applies it, as any buffered add.
            Pushed::Full => {
                if let Some(state) = self.inner.state.try_lock() {
                    drop(self.inner.apply(state));
                }
            }
            Pushed::Overflowing => drop(self.lock()),
        }
    }

    /// Adds `item` once `delay` has passed, at [`Priority::NORMAL`]; see
    /// [`add_after_with_priority`](Self::add_after_with_priority).
    pub fn add_after(&self, item: T, delay: Duration) {
        self.add_after_with_priority(item, delay, Priority::NORMAL);
    }

    /// Adds `item` at `priority` once `delay` has passed; a zero delay adds at once. An item
    /// already waiting keeps the earlier of its two deadlines and the higher of its two
    /// priorities, and is added once. Waiting items are dropped at shut down.
    pub fn add_after_with_priority(&self, item: T, delay: Duration, priority: Priority) {
        if delay.is_zero() {
            return self.add_with_priority(item, priority);
        }
        self.wait_then_add(item, delay, priority, false);
    }

    /// Makes `item` wait `delay` (then, `gated`, for a token of the fair bucket) before it is
    /// added at `priority`.
    fn wait_then_add(&self, item: T, delay: Duration, priority: Priority, gated: bool) {
        let hash = self.inner.hasher.hash_one(&item);
        let now = Instant::now();
        let mut state = self.lock();
        if state.shutting_down {
            return;
        }
        let deadline = deadline_after(now, delay);
        // A new earliest deadline must re-arm a parked getter's timer.
        if state.waiting.insert(item, hash, deadline, priority, gated) && self.idle_getters() > 0 {
            self.inner.getters.notify_one();
        }
    }

    /// Adds `item` after the wait its rate limiter decides, counting one more failure, at
    /// [`Priority::NORMAL`].
    pub fn add_rate_limited(&self, item: T) {
        self.add_rate_limited_with_priority(item, Priority::NORMAL);
    }

    /// Adds `item` at `priority` after the wait its rate limiter decides, counting one more
    /// failure. A fair queue with the default limiter then waits for its fairness key's turn
    /// at the overall bucket (see
    /// [`WorkQueueBuilder::fair_retries`](super::WorkQueueBuilder::fair_retries)).
    pub fn add_rate_limited_with_priority(&self, item: T, priority: Priority) {
        let delay = self.inner.rate_limiter.when(&item);
        if let Some(m) = &self.inner.metrics {
            m.call("retried", |h| h.retried());
        }
        if self.inner.fair_bucket {
            // Through the waiting set even at a zero delay: the bucket's line is beyond it.
            return self.wait_then_add(item, delay.max(Duration::from_nanos(1)), priority, true);
        }
        self.add_after_with_priority(item, delay, priority);
    }

    /// Clears `item`'s failure count in the rate limiter. It does not remove the item from
    /// the queue.
    pub fn forget(&self, item: &T) {
        self.inner.rate_limiter.forget(item);
    }

    /// How many times the fairness key extractor
    /// ([`WorkQueueBuilder::fairness`](super::WorkQueueBuilder::fairness)) panicked: each such
    /// item was queued under the default key (no levels), and the panic logged. 0 without
    /// fairness.
    pub fn fairness_key_panics(&self) -> u64 {
        self.lock().queue.key_panics()
    }

    /// How many times `item` was rate-limited since it was last forgotten.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.inner.rate_limiter.num_requeues(item)
    }

    /// Waits for an item and hands it out; the caller must call [`done`](Self::done) with it.
    /// Returns `None` once the queue is shut down and nothing ready is left.
    ///
    /// Items come highest priority first; within a priority, in the order they became ready,
    /// or with fairness keys ([`WorkQueueBuilder::fairness`](super::WorkQueueBuilder::fairness))
    /// round-robin across them, except that an item that has waited the queue's aging period
    /// is served before newer items of any priority (see [`WorkQueueBuilder::aging`](super::WorkQueueBuilder::aging)).
    pub async fn get(&self) -> Option<T> {
        // `get_with_priority`'s body, not an await of it, which moved the item through one more
        // future's output (`docs/design/workqueue.md`, "A small get future").
        if let Some(answer) = self.get_now() {
            return answer.map(|(item, _)| item);
        }
        Box::pin(self.wait_and_get()).await.map(|(item, _)| item)
    }

    /// As [`get`](Self::get), also returning the priority the item was ready at, so that a
    /// worker can re-add it at the same priority (controller-runtime's `GetWithPriority`).
    pub async fn get_with_priority(&self) -> Option<(T, Priority)> {
        // The common case first: an item is ready. Nothing to register for.
        if let Some(answer) = self.get_now() {
            return answer;
        }
        // The wait's state (a registration with `getters` and a timer) is boxed, so only a
        // `get` that parks allocates it, and one that finds an item ready moves a few words.
        Box::pin(self.wait_and_get()).await
    }

    /// A `get` that needs no wait: `Some` with its answer (the next item, or `None` once shut
    /// down) when an item is ready or the queue is shut down; `None` when the caller must wait.
    fn get_now(&self) -> Option<Option<(T, Priority)>> {
        match self.lock_and_pop() {
            Taken::Item(item) => Some(Some(item)),
            Taken::ShutDown => Some(None),
            Taken::Nothing(_) => None,
        }
    }

    /// `get_with_priority` once nothing was ready: registers, parks until an add, a due item
    /// or shut down wakes it, and tries again.
    async fn wait_and_get(&self) -> Option<(T, Priority)> {
        // An idle getter parks at once. Yielding to the scheduler a few times first (to catch
        // an add without a wake-up) made no difference to the producer/worker benchmarks and
        // cost a watch-driven controller a tenth of its CPU: each yield polls the I/O driver and
        // wakes the runtime's other thread.
        loop {
            let notified = self.inner.getters.notified();
            tokio::pin!(notified);
            let deadline = {
                // Look again, keeping the lock this time: an add may have come since the last
                // look (before this call, or before the wake-up that ended the last wait).
                let mut state = match self.lock_and_pop() {
                    Taken::Item(item) => return Some(item),
                    Taken::ShutDown => return None,
                    Taken::Nothing(state) => state,
                };
                // Register before the lock is released, so an add that follows is not missed:
                // an add into the buffer either sees this getter idle (and wakes it) or made
                // the buffer non-empty before the check below (sequentially consistent both).
                notified.as_mut().enable();
                self.inner.idle_getters.fetch_add(1, Ordering::SeqCst);
                if self.inner.adds.is_nonempty() {
                    self.inner.idle_getters.fetch_sub(1, Ordering::SeqCst);
                    continue;
                }
                state.next_wake()
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

    /// Locks, applies the buffer and pops; keeps the lock when nothing is ready.
    fn lock_and_pop(&self) -> Taken<'_, T> {
        let now = self.clock_for_pop();
        let mut state = self.lock();
        match self.pop_locked(&mut state, now) {
            Some(item) => Taken::Item(item),
            // Ready items held back by an in-flight cap are still handed out once a worker
            // is done: `None` only when nothing is ready.
            None if state.shutting_down && state.queue.len() == 0 => Taken::ShutDown,
            None => Taken::Nothing(state),
        }
    }

    /// The time a `get` about to lock needs: for metrics, and for aging when several
    /// priorities are in use and aging is on. Read before locking, so the lock is held for
    /// less.
    fn clock_for_pop(&self) -> Option<Instant> {
        let aging =
            !aging_off(self.inner.aging) && self.inner.priorities_in_use.load(Ordering::Relaxed);
        (self.inner.metrics.is_some() || aging).then(Instant::now)
    }

    /// Promotes due items and pops the next ready one, waking another getter if more remain
    /// that a worker may take, or every getter once a shut-down queue has none left.
    fn pop_locked(&self, state: &mut State<T>, now: Option<Instant>) -> Option<(T, Priority)> {
        let metrics = self.inner.metrics.as_ref();
        state.promote_due(metrics);
        let popped = state.queue.pop(self.inner.aging, now, metrics.is_some());
        let in_use = state.queue.priorities_in_use();
        if self.inner.priorities_in_use.load(Ordering::Relaxed) != in_use {
            self.inner.priorities_in_use.store(in_use, Ordering::Relaxed);
        }
        let Popped { item, priority, queued_at } = popped?;
        if let (Some(m), Some(now)) = (metrics, now) {
            m.depth_changed(priority, -1);
            m.call("queue_latency", |h| h.queue_latency(seconds_since(queued_at, now)));
        }
        if self.idle_getters() > 0 {
            if state.queue.available() > 0 {
                self.inner.getters.notify_one();
            } else if state.shutting_down && state.queue.len() == 0 {
                // Getters that waited for capped items now get `None`.
                self.inner.getters.notify_waiters();
            }
        }
        Some((item, priority))
    }

    /// Marks `item` as processed. If it was added while held, it is queued again. Calling it
    /// for an item that is not being processed changes nothing.
    pub fn done(&self, item: &T) {
        let hash = self.inner.hasher.hash_one(item);
        let mut state = self.lock();
        let (finished, started_at) = state.queue.done(item, hash);
        match finished {
            Finished::NotProcessing => return,
            Finished::Released => {
                // Under a cap, this may have let a group's ready items go to a waiting worker.
                if self.idle_getters() > 0 && state.queue.available() > 0 {
                    self.inner.getters.notify_one();
                }
            }
            Finished::Requeued(priority) => {
                if let Some(m) = &self.inner.metrics {
                    m.depth_changed(priority, 1);
                }
                if self.idle_getters() > 0 {
                    self.inner.getters.notify_one();
                }
            }
        }
        if let (Some(m), Some(at)) = (&self.inner.metrics, started_at) {
            m.call("work_duration", |h| h.work_duration(seconds_since(at, Instant::now())));
        }
        if state.drainers > 0 && state.queue.processing() == 0 {
            self.inner.drained.notify_waiters();
        }
    }

    /// Items ready to be handed out now (waiting items whose deadline passed included).
    pub fn len(&self) -> usize {
        let mut state = self.lock();
        state.promote_due(self.inner.metrics.as_ref());
        state.queue.len()
    }

    /// Items ready that a worker may take now: [`len`](Self::len) less the items of groups at
    /// their in-flight cap ([`WorkQueueBuilder::max_in_flight_per_key`](super::WorkQueueBuilder::max_in_flight_per_key)),
    /// for anything that sizes workers by the queue's depth. Without a cap, `len`.
    pub fn len_available(&self) -> usize {
        let mut state = self.lock();
        state.promote_due(self.inner.metrics.as_ref());
        state.queue.available()
    }

    /// Whether no item is ready to be handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops accepting adds and drops waiting items. `get` still hands out the ready items
    /// (those of a group at its in-flight cap once one of its workers is done), then returns
    /// `None` to every caller.
    pub fn shut_down(&self) {
        // Adds from now on are dropped; those already buffered are applied by `lock`.
        self.inner.adds.close();
        {
            let mut state = self.lock();
            state.shutting_down = true;
            state.waiting.clear();
            let state = &mut *state;
            if let Some(bucket) = &mut state.bucket {
                bucket.clear();
                state.queue.release_flows(bucket.released());
            }
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
            {
                let mut state = self.lock();
                if state.queue.processing() == 0 {
                    return;
                }
                state.drainers += 1;
            }
            let _drainer = DrainerGuard(self);
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

    fn idle_getters(&self) -> usize {
        self.inner.idle_getters.load(Ordering::SeqCst)
    }
}

impl<T> Inner<T>
where
    T: Clone + Eq + Hash,
{
    /// Locks the state and applies the buffered adds first, so that everything done under
    /// the lock sees every add made before it.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.apply(self.state.lock())
    }

    /// Applies the buffered adds, in order.
    fn apply<'a>(&'a self, mut state: MutexGuard<'a, State<T>>) -> MutexGuard<'a, State<T>> {
        if !self.adds.is_nonempty() {
            // Nothing buffered (the common case for a worker): leave the state's lines alone.
            return state;
        }
        let mut batch = std::mem::replace(&mut state.spare, Batch::new());
        if let Some(since) = self.adds.take(&mut batch) {
            let mut queued = false;
            for (add, at) in batch.drain(since) {
                queued |= self.add_locked(&mut state, add, at);
            }
            if queued && self.idle_getters.load(Ordering::SeqCst) > 0 {
                self.getters.notify_one();
            }
        }
        state.spare = batch;
        state
    }

    /// Applies one add, which came at `at`, to the queue, recording it; true if it queued
    /// the item.
    fn add_locked(&self, state: &mut State<T>, add: PendingAdd<T>, at: Instant) -> bool {
        let added = state.queue.add(add.item, add.hash, add.priority, at);
        if let Some(m) = &self.metrics {
            m.record_add(added);
        }
        matches!(added, Added::Queued(_))
    }

    fn update_unfinished_work(&self) {
        if let Some(m) = &self.metrics {
            let now = Instant::now();
            let state = self.lock();
            m.update_unfinished(now, state.queue.processing_started());
            let levels = state.queue.fairness_levels(now);
            drop(state);
            if !levels.is_empty() {
                m.fairness(&self.name, levels);
            }
        }
    }
}

/// Counts a `shut_down_with_drain` caller out again however its wait ends.
struct DrainerGuard<'a, T: Clone + Eq + Hash>(&'a WorkQueue<T>);

impl<T: Clone + Eq + Hash> Drop for DrainerGuard<'_, T> {
    fn drop(&mut self) {
        self.0.inner.state.lock().drainers -= 1;
    }
}

/// What one attempt of `get` found.
enum Taken<'a, T> {
    Item((T, Priority)),
    ShutDown,
    /// Nothing ready: the lock, still held.
    Nothing(MutexGuard<'a, State<T>>),
}

/// Counts a parked getter out again however its wait ends, cancellation included.
struct IdleGuard<'a, T: Clone + Eq + Hash>(&'a WorkQueue<T>);

impl<T: Clone + Eq + Hash> Drop for IdleGuard<'_, T> {
    fn drop(&mut self) {
        self.0.inner.idle_getters.fetch_sub(1, Ordering::SeqCst);
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

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    /// Runs `adds` on another thread while this one holds the queue's lock, so that every
    /// one of them goes through the buffer.
    fn while_locked(q: &WorkQueue<&'static str>, adds: impl FnOnce() + Send) {
        let state = q.inner.state.lock();
        std::thread::scope(|s| s.spawn(adds).join().unwrap());
        assert!(q.inner.adds.is_nonempty(), "the adds were buffered");
        drop(state);
    }

    fn drain(q: &WorkQueue<&'static str>) -> Vec<&'static str> {
        let mut out = Vec::new();
        while let Some(Some(item)) = q.get().now_or_never() {
            q.done(&item);
            out.push(item);
        }
        out
    }

    #[test]
    fn buffered_adds_are_applied_in_order_with_dedup_and_priorities_before_anything_else() {
        let q = WorkQueue::new();
        q.add("a");
        while_locked(&q, || {
            q.add("b");
            q.add("a");
            q.add("c");
            q.add("b");
            q.add_with_priority("d", Priority(5));
            q.add_with_priority("c", Priority(5));
        });
        assert_eq!(q.len(), 4, "applied by the next lock: a, b, c, d once each");
        assert_eq!(drain(&q), ["d", "c", "a", "b"]);
    }

    #[test]
    fn a_producer_that_fills_the_buffer_while_a_worker_holds_the_lock_goes_on_adding() {
        let q = WorkQueue::new();
        let items: Vec<String> =
            (0..2 * super::super::add_buffer::FLUSH_AT).map(|i| format!("item-{i:04}")).collect();
        let state = q.inner.state.lock();
        std::thread::scope(|s| {
            s.spawn(|| items.iter().for_each(|i| q.add(i.clone()))).join().unwrap();
        });
        drop(state);
        let mut out = Vec::new();
        while let Some(Some(item)) = q.get().now_or_never() {
            q.done(&item);
            out.push(item);
        }
        assert_eq!(out, items, "every add applied once, in order");
    }

    #[test]
    fn a_buffered_add_of_a_held_item_brings_it_back_after_done() {
        let q = WorkQueue::new();
        q.add("a");
        let held = q.get().now_or_never().flatten().unwrap();
        while_locked(&q, || q.add("a"));
        assert_eq!(q.len(), 0, "held: not ready");
        q.done(&held);
        assert_eq!(drain(&q), ["a"]);
    }

    #[test]
    fn adds_buffered_before_shut_down_are_handed_out_and_later_ones_dropped() {
        let q = WorkQueue::new();
        while_locked(&q, || q.add("before"));
        q.shut_down();
        q.add("after");
        assert_eq!(drain(&q), ["before"]);
        assert_eq!(q.get().now_or_never(), Some(None));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_parked_getter_wakes_for_an_add_that_went_through_the_buffer() {
        let q: WorkQueue<&'static str> = WorkQueue::new();
        for _ in 0..200 {
            let getter = tokio::spawn({
                let q = q.clone();
                async move { q.get().await }
            });
            // Let it park, then add while the lock is held, so the add is buffered.
            while q.inner.idle_getters.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
            while_locked(&q, || q.add("x"));
            let got = tokio::time::timeout(Duration::from_secs(10), getter).await;
            let item = got.expect("woken").unwrap().unwrap();
            q.done(&item);
        }
    }
}
