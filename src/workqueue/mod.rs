//! A rate-limited work queue with client-go's semantics.
//!
//! Controllers put keys (`"namespace/name"`) in, workers take them out; the queue guarantees:
//!
//! - **FIFO** (client-go's docs call it "fair"): items are handed out in the order they were
//!   added, within a priority (below), unless the queue is fair across fairness keys:
//! - **Fair across fairness keys** ([`WorkQueueBuilder::fairness`]; a controller's queue is fair
//!   by namespace by default): each item has a [`FairnessKey`], a list of levels (the
//!   namespace; or the cluster, then the namespace). Within a priority, items are taken
//!   round-robin at each level in turn: the next first-level group in rotation, its next
//!   second-level group, and so on, then that flow's oldest item; a group served goes to the
//!   back of its rotation, and one that gets ready items joins at the back. So a group with
//!   many children gets no more turns than one with a single child, and an item of a key with
//!   nothing else ready waits for at most one item of each other group ready before it, not
//!   for their whole backlogs. Within one fairness key, items stay FIFO. Dedup comes first: an
//!   add of an item already queued changes nothing, fairness included. An optional cap
//!   ([`WorkQueueBuilder::max_in_flight_per_key`]) bounds the items of one first-level group
//!   handed out at once. Retries of a fair queue with the default rate limiter wait their own
//!   backoff, then take the overall bucket's tokens in turns across fairness keys
//!   ([`WorkQueueBuilder::fair_retries`]).
//! - **Stingy**: an item added many times before a worker takes it is handed out once. An item
//!   added while a worker holds it is handed out again after that worker's
//!   [`done`](WorkQueue::done), never to two workers at once.
//! - **Multiple consumers and producers**: [`WorkQueue`] is a cheap-to-clone `Send + Sync`
//!   handle; the futures of [`get`](WorkQueue::get) and
//!   [`shut_down_with_drain`](WorkQueue::shut_down_with_drain) are `Send`, so workers can be
//!   spawned.
//! - **Shutdown notifications**: `get` waits for an item. After
//!   [`shut_down`](WorkQueue::shut_down) it still hands out the items already queued, then
//!   returns `None` to every caller, waking those that wait. With an in-flight cap
//!   ([`WorkQueueBuilder::max_in_flight_per_key`]) the cap still holds: a group's ready items
//!   are handed out as its held ones are `done`, and `get` waits for them until then (a worker
//!   that must stop at once selects on its own stop signal, as a controller's do). An `add`
//!   after shut down is dropped. `shut_down_with_drain` returns once every item handed out has been `done`.
//! - **No lost adds**: an item re-added while held is handed out again after `done` even when
//!   `shut_down` came in between: an add accepted before shut down is never lost.
//! - **`done` is idempotent**: `done` for an item that is not being processed changes nothing.
//!   This differs from client-go on purpose: there, `Done` on a queued item pushes a duplicate.
//! - **Delays** ([`add_after`](WorkQueue::add_after)): a zero delay adds at once; a second
//!   `add_after` for an item already waiting keeps the earlier deadline and the item fires
//!   once; waiting items never block ready ones; waiting items are dropped at shut down. Time
//!   comes from [`tokio::time`], so a paused clock drives it. No background task is needed:
//!   waiting `get` callers sleep until the next deadline, and every `get` and `len` first moves
//!   due items into the queue.
//! - **Rate limiting** ([`add_rate_limited`](WorkQueue::add_rate_limited)): waits
//!   [`RateLimiter::when`]; [`forget`](WorkQueue::forget) clears the item's failure count and
//!   [`num_requeues`](WorkQueue::num_requeues) reports it.
//! - **Priorities** ([`add_with_priority`](WorkQueue::add_with_priority) and the `_with_priority`
//!   forms of `add_after` and `add_rate_limited`; plain adds are [`Priority::NORMAL`]): `get`
//!   hands out the highest priority first, FIFO (or fair) within a priority.
//!   An item added again keeps the higher of its priorities (a raise moves it to the back of
//!   the higher priority's line, once) and, waiting, the earlier of its deadlines; an item
//!   added while held comes back at the highest priority it was added at meanwhile.
//!   [`get_with_priority`](WorkQueue::get_with_priority) also says the priority, so a retry
//!   can keep it.
//! - **Aging**: an item that has waited the queue's aging period
//!   ([`WorkQueueBuilder::aging`], 5 minutes by default) is served before newer items of any
//!   priority: the oldest such first. In a fair queue each aged item (and only it) joins the
//!   round-robin of the highest priority with ready items, ahead of its fairness key's items
//!   there that did not age: fairness holds among aged items and against that priority's,
//!   so one group's aged backlog does not hold up another group. So nothing
//!   starves: under a constant stream of
//!   high-priority items, a low-priority item waits at most the aging period plus the time to
//!   serve the items that were ready before it. Priorities are always on: a queue whose
//!   items all have one priority is exactly the FIFO queue above and pays nothing for them.
//!   (controller-runtime's priority queue has no aging: its low priorities can starve.)
//!
//! Adds go through a small buffer in front of the queue's lock, applied in order by the next
//! thread that takes the lock: a `get` (a parked one is woken for it), a `done`, a `len`, or
//! the producer itself after 512 adds. Every rule above holds as if each add had been applied
//! when it was made, with one approximation, on the safe side: an add's wait counts from the
//! first add of its batch (since the lock was last taken), so it may age sooner, never later.
//!
//! The layers live in one file each, as in client-go's `util/workqueue`: the plain queue (with
//! its priorities) knows nothing of delays, the delay layer nothing of rate limits, and the add
//! buffer nothing of either.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use ctrlkit::workqueue::WorkQueue;
//!
//! let queue = WorkQueue::<String>::new();
//! queue.add("default/web-0".to_owned());
//! queue.add("default/web-0".to_owned()); // stingy: still one item
//! let key = queue.get().await.unwrap();
//! // ... reconcile key; on error: queue.add_rate_limited(key.clone()), on success:
//! queue.forget(&key);
//! queue.done(&key);
//! queue.shut_down();
//! assert_eq!(queue.get().await, None);
//! # }
//! ```

mod add_buffer;
mod builder;
mod delaying;
mod fair_bucket;
mod fairness;
mod metrics;
mod priority;
mod queue;
mod rate_limiters;
mod spin_lock;
mod work_queue;

pub use builder::WorkQueueBuilder;
pub use fairness::{FairnessKey, FairnessLevelStats, MAX_FAIRNESS_LEVELS};
pub use metrics::{QueueMetrics, QueueMetricsProvider};
pub use priority::Priority;
pub use rate_limiters::{
    BucketRateLimiter, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
    MaxOfRateLimiter, RateLimiter, default_controller_rate_limiter,
};
pub use work_queue::WorkQueue;
