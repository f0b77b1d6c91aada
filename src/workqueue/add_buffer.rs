//! The add buffer: where `add` leaves items for the queue's lock holder to apply.
//!
//! Producers and workers used to meet on the queue's one lock at every add, get and done; on
//! two cores most of an add's time went to moving that lock's cache line between them, and to
//! the sleeps and wake-ups of threads that found it taken. Now an add only appends to this
//! buffer, under a lock of its own (a spin lock: one atomic read-modify-write) held for a
//! `Vec::push` and taken by workers once per batch, and whoever next holds the queue's lock (a
//! `get`, a `done`, a `len`, or the producer itself once the buffer holds [`FLUSH_AT`] items
//! and the queue's lock is free, or four times as many) applies the whole batch, in order,
//! before anything else. A producer does not wait for a worker's lock to apply a batch the
//! worker will apply anyway: it waits only when the buffer grows past four batches, which
//! bounds its memory. Every observation of the queue happens under its lock after that, so
//! the queue behaves exactly as if each add had been applied when it entered the buffer:
//! order, dedup, priorities and shutdown are unchanged. An add after the buffer is closed
//! (shut down) is dropped.
//!
//! Time: an item's wait (for aging, and for the queue-latency metric) starts when it was added,
//! not when its batch was applied. With metrics on, each add reads the clock; without, a batch
//! reads it once, at its first add, and its items count as added then: never later than they
//! were, so buffering can only make an item age sooner, never starve longer. The times an add
//! read are kept beside the adds, not in them, so that without metrics a buffered add is its
//! key, hash and priority alone, fewer bytes to write at every add and read at every apply
//! (`docs/design/workqueue.md`).

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::time::Instant;

use super::Priority;
use super::spin_lock::{SpinGuard, SpinLock};

/// A producer applies the buffer itself once it holds this many adds, which bounds both the
/// buffer's memory and how long a batch holds the queue's lock.
pub(crate) const FLUSH_AT: usize = 512;

/// One add waiting to be applied.
pub(crate) struct PendingAdd<T> {
    pub(crate) item: T,
    pub(crate) hash: u64,
    pub(crate) priority: Priority,
}

/// Adds taken out of the buffer to be applied, in order.
pub(crate) struct Batch<T> {
    pub(crate) adds: Vec<PendingAdd<T>>,
    /// When each add came, one per add, if the adds read the clock (metrics on); else empty.
    pub(crate) times: Vec<Instant>,
}

impl<T> Batch<T> {
    /// An empty batch, allocating nothing.
    pub(crate) fn new() -> Self {
        Self { adds: Vec::new(), times: Vec::new() }
    }

    /// Each add, with when it came (`since`, the batch's start, for an add that did not read
    /// the clock); leaves the batch empty, its memory kept for the next.
    pub(crate) fn drain(
        &mut self,
        since: Instant,
    ) -> impl Iterator<Item = (PendingAdd<T>, Instant)> + '_ {
        let mut times = self.times.drain(..);
        self.adds.drain(..).map(move |add| (add, times.next().unwrap_or(since)))
    }
}

/// What `push` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// The buffer is closed: the add is dropped.
    Dropped,
    /// The buffer was empty: a parked getter may need waking.
    First,
    /// Appended behind others.
    More,
    /// Appended, and the buffer is full: the producer should apply it if the queue's lock is
    /// free.
    Full,
    /// Appended, and the buffer holds [`FLUSH_AT`] times four: the producer must apply it.
    Overflowing,
}

struct Buffer<T> {
    batch: Batch<T>,
    /// When the first add of this batch came.
    since: Option<Instant>,
    closed: bool,
}

/// Adds not yet applied to the queue.
///
/// `nonempty` is set (under the lock) by the push that makes the buffer non-empty and cleared
/// by the `take` that empties it, so lock holders check it without taking the buffer's lock.
/// It is sequentially consistent: a getter that registers as idle and then finds it false is
/// sure the producer of the next add will see it registered (see `WorkQueue::get`).
pub(crate) struct AddBuffer<T> {
    buffer: SpinLock<Buffer<T>>,
    nonempty: AtomicBool,
}

impl<T> AddBuffer<T> {
    pub(crate) fn new() -> Self {
        Self {
            buffer: SpinLock::new(Buffer { batch: Batch::new(), since: None, closed: false }),
            nonempty: AtomicBool::new(false),
        }
    }

    /// A spinning lock: it is held for a push or a swap, far shorter than a thread's sleep and
    /// wake-up; and its release is a plain store, so an add costs one atomic read-modify-write
    /// where a mutex's lock and unlock (parking_lot's too) cost two.
    fn lock(&self) -> SpinGuard<'_, Buffer<T>> {
        self.buffer.lock()
    }

    /// Appends an add unless the buffer is closed. `at` is when it came, if the caller read
    /// the clock: every add to one queue reads it (metrics on) or none does.
    // Always inlined into its one caller, `WorkQueue::add_with_priority`, so that the add is
    // written into the buffer from registers, not copied in from the caller's frame.
    #[inline(always)]
    pub(crate) fn push(&self, add: PendingAdd<T>, at: Option<Instant>) -> Pushed {
        let mut buffer = self.lock();
        if buffer.closed {
            return Pushed::Dropped;
        }
        let first = buffer.batch.adds.is_empty();
        if first {
            buffer.since = Some(at.unwrap_or_else(Instant::now));
        }
        buffer.batch.adds.push(add);
        if let Some(at) = at {
            buffer.batch.times.push(at);
        }
        match buffer.batch.adds.len() {
            _ if first => {
                self.nonempty.store(true, Ordering::SeqCst);
                Pushed::First
            }
            n if n >= 4 * FLUSH_AT => Pushed::Overflowing,
            n if n >= FLUSH_AT => Pushed::Full,
            _ => Pushed::More,
        }
    }

    /// Whether adds wait to be applied.
    pub(crate) fn is_nonempty(&self) -> bool {
        self.nonempty.load(Ordering::SeqCst)
    }

    /// Moves the waiting adds into `into` (which must be empty; its allocation is kept for
    /// the next batch) and returns when the batch's first add came; `None`, without locking,
    /// when there are none.
    pub(crate) fn take(&self, into: &mut Batch<T>) -> Option<Instant> {
        if !self.is_nonempty() {
            return None;
        }
        let mut buffer = self.lock();
        std::mem::swap(&mut buffer.batch, into);
        self.nonempty.store(false, Ordering::SeqCst);
        buffer.since.take().filter(|_| !into.adds.is_empty())
    }

    /// Drops every later add. Adds already in the buffer stay, to be applied.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
    }
}
