//! The plain queue: fair, stingy, and nothing else. It knows no time, no delays, no rate
//! limits and no locks; [`super::WorkQueue`] wraps it in a mutex and adds those layers.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use tokio::time::Instant;

/// Where one item stands. An item has a `Status` exactly while it is dirty or processing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Status {
    /// Added and not yet handed out since.
    dirty: bool,
    /// Handed out to a worker that has not called `done` yet.
    processing: bool,
    /// When the item became dirty; kept only when metrics are on.
    queued_at: Option<Instant>,
    /// When a worker took the item; kept only when metrics are on.
    started_at: Option<Instant>,
}

/// What `add` did with an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Added {
    /// Pushed to the back of the ready queue.
    Queued,
    /// Already waiting in the ready queue: nothing changed.
    Deduplicated,
    /// A worker holds it: it goes back to the queue when that worker calls `done`.
    Deferred,
}

/// What `done` did with an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finished {
    /// The item was not being processed: nothing changed.
    NotProcessing,
    /// The item is finished and forgotten.
    Released {
        /// When the worker took it, if metrics are on.
        started_at: Option<Instant>,
    },
    /// The item was added again while held, so it is back in the ready queue.
    Requeued {
        /// When the worker took it, if metrics are on.
        started_at: Option<Instant>,
    },
}

/// A FIFO of items with the dirty/processing bookkeeping of client-go's `Type`.
///
/// Invariants:
/// - an item is in `ready` exactly when its status is dirty and not processing, and then once;
/// - `items` holds exactly the items that are dirty or processing;
/// - `processing` counts the statuses with `processing` set.
#[derive(Debug)]
pub(crate) struct Queue<T> {
    ready: VecDeque<T>,
    items: HashMap<T, Status>,
    processing: usize,
}

impl<T: Clone + Eq + Hash> Queue<T> {
    pub(crate) fn new() -> Self {
        Self { ready: VecDeque::new(), items: HashMap::new(), processing: 0 }
    }

    /// Marks `item` dirty; queues it unless it is queued already or a worker holds it.
    /// `now` is the time to record for queue latency (metrics on) or `None`.
    pub(crate) fn add(&mut self, item: T, now: Option<Instant>) -> Added {
        if let Some(status) = self.items.get_mut(&item) {
            if status.dirty {
                return Added::Deduplicated;
            }
            // Not dirty but known: a worker holds it. It re-enters the queue at `done`.
            status.dirty = true;
            status.queued_at = now;
            return Added::Deferred;
        }
        self.items.insert(
            item.clone(),
            Status { dirty: true, processing: false, queued_at: now, started_at: None },
        );
        self.ready.push_back(item);
        Added::Queued
    }

    /// Takes the oldest ready item and marks it processing. Returns it with the time it was
    /// queued at (metrics on).
    pub(crate) fn pop(&mut self, now: Option<Instant>) -> Option<(T, Option<Instant>)> {
        let item = self.ready.pop_front()?;
        let status = self.items.get_mut(&item).expect("a ready item always has a status");
        status.dirty = false;
        status.processing = true;
        status.started_at = now;
        let queued_at = status.queued_at.take();
        self.processing += 1;
        Some((item, queued_at))
    }

    /// Ends the processing of `item`; requeues it if it was added while held.
    pub(crate) fn done(&mut self, item: &T) -> Finished {
        let Some(status) = self.items.get_mut(item) else {
            return Finished::NotProcessing;
        };
        if !status.processing {
            return Finished::NotProcessing;
        }
        self.processing -= 1;
        let started_at = status.started_at.take();
        if status.dirty {
            status.processing = false;
            self.ready.push_back(item.clone());
            Finished::Requeued { started_at }
        } else {
            self.items.remove(item);
            Finished::Released { started_at }
        }
    }

    /// Items ready to be handed out.
    pub(crate) fn len(&self) -> usize {
        self.ready.len()
    }

    /// Items handed out and not yet done.
    pub(crate) fn processing(&self) -> usize {
        self.processing
    }

    /// Start times of the items being processed (recorded only with metrics on).
    pub(crate) fn processing_started(&self) -> impl Iterator<Item = Instant> + '_ {
        self.items.values().filter(|s| s.processing).filter_map(|s| s.started_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invariants_hold_through_a_hold_and_readd() {
        let mut q = Queue::new();
        assert_eq!(q.add("a", None), Added::Queued);
        assert_eq!(q.add("a", None), Added::Deduplicated);
        assert_eq!(q.pop(None).map(|(i, _)| i), Some("a"));
        assert_eq!(q.len(), 0);
        assert_eq!(q.add("a", None), Added::Deferred);
        assert_eq!(q.len(), 0, "a held item is not ready");
        assert_eq!(q.done(&"a"), Finished::Requeued { started_at: None });
        assert_eq!(q.len(), 1);
        assert_eq!(q.done(&"a"), Finished::NotProcessing, "a queued item is not processing");
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop(None).map(|(i, _)| i), Some("a"));
        assert_eq!(q.done(&"a"), Finished::Released { started_at: None });
        assert_eq!(q.processing(), 0);
        assert!(q.items.is_empty());
    }
}
