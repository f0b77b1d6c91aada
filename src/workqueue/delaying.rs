//! The delay layer: items waiting for a deadline before they enter the queue, as client-go's
//! `delaying_queue.go`. It knows nothing of rate limits; it only orders deadlines.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::time::Duration;

use hashbrown::HashTable;
use tokio::time::Instant;

/// A deadline far enough away to mean "never" without overflowing `Instant` arithmetic.
const FAR_FUTURE: Duration = Duration::from_secs(60 * 60 * 24 * 365 * 30);

/// The deadline `delay` after `now`, saturating at a far-future instant instead of panicking.
pub(crate) fn deadline_after(now: Instant, delay: Duration) -> Instant {
    now.checked_add(delay.min(FAR_FUTURE)).unwrap_or(now)
}

/// Items waiting to be added, each at most once, each under its earliest deadline.
///
/// Invariants: `deadlines` holds one entry per waiting item; `heap` holds that entry plus
/// possibly stale ones (an item whose deadline moved earlier), which `pop_due` skips by
/// comparing the sequence number with the one in `deadlines`.
///
/// `deadlines` caches each item's hash, so growing it never re-hashes the items (with a
/// million waiting keys, re-hashing cost more than the rest of `add_after`).
pub(crate) struct WaitingSet<T> {
    heap: BinaryHeap<Reverse<(Instant, u64, Entry<T>)>>,
    deadlines: HashTable<Waiting<T>>,
    hasher: RandomState,
    next_seq: u64,
}

/// One waiting item and its current deadline.
struct Waiting<T> {
    hash: u64,
    item: T,
    deadline: Instant,
    seq: u64,
}

/// A heap entry; ordering uses only the deadline and sequence, never the item.
#[derive(Debug)]
struct Entry<T>(T);

impl<T> PartialEq for Entry<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl<T: Clone + Eq + Hash> WaitingSet<T> {
    pub(crate) fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            deadlines: HashTable::new(),
            hasher: RandomState::new(),
            next_seq: 0,
        }
    }

    /// The waiting entry of `item`, with its hash.
    fn find(&self, item: &T) -> (u64, Option<&Waiting<T>>) {
        let hash = self.hasher.hash_one(item);
        (hash, self.deadlines.find(hash, |w| w.item == *item))
    }

    /// Makes `item` wait until `deadline`, or keeps its current deadline if that is earlier.
    /// Returns true when `deadline` became the earliest of the whole set.
    pub(crate) fn insert(&mut self, item: T, deadline: Instant) -> bool {
        let (hash, current) = self.find(&item);
        if current.is_some_and(|w| w.deadline <= deadline) {
            return false;
        }
        let earliest = self.next_deadline().is_none_or(|next| deadline < next);
        let seq = self.next_seq;
        self.next_seq += 1;
        let waiting = Waiting { hash, item: item.clone(), deadline, seq };
        match self.deadlines.find_mut(hash, |w| w.item == item) {
            Some(current) => *current = waiting,
            None => {
                self.deadlines.insert_unique(hash, waiting, |w| w.hash);
            }
        }
        self.heap.push(Reverse((deadline, seq, Entry(item))));
        earliest
    }

    /// The earliest deadline of a waiting item.
    pub(crate) fn next_deadline(&mut self) -> Option<Instant> {
        self.drop_stale();
        self.heap.peek().map(|Reverse((deadline, _, _))| *deadline)
    }

    /// Removes and returns the next item whose deadline is at or before `now`, in deadline
    /// order (ties in insertion order).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<T> {
        self.drop_stale();
        let Reverse((deadline, _, _)) = self.heap.peek()?;
        if *deadline > now {
            return None;
        }
        let Reverse((_, _, Entry(item))) = self.heap.pop()?;
        let hash = self.hasher.hash_one(&item);
        if let Ok(found) = self.deadlines.find_entry(hash, |w| w.item == item) {
            found.remove();
        }
        Some(item)
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.deadlines.is_empty()
    }

    /// Drops every waiting item.
    pub(crate) fn clear(&mut self) {
        self.heap.clear();
        self.deadlines.clear();
    }

    /// Pops heap entries superseded by an earlier deadline for the same item.
    fn drop_stale(&mut self) {
        while let Some(Reverse((_, seq, Entry(item)))) = self.heap.peek() {
            match self.find(item).1 {
                Some(current) if current.seq == *seq => return,
                _ => {
                    self.heap.pop();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_earliest_deadline_and_fires_once() {
        let t0 = Instant::now();
        let mut w = WaitingSet::new();
        assert!(w.insert("a", t0 + Duration::from_secs(10)));
        assert!(!w.insert("a", t0 + Duration::from_secs(20)), "a later deadline changes nothing");
        assert!(w.insert("a", t0 + Duration::from_secs(5)), "an earlier one replaces it");
        assert!(!w.insert("b", t0 + Duration::from_secs(7)));
        assert_eq!(w.next_deadline(), Some(t0 + Duration::from_secs(5)));
        assert_eq!(w.pop_due(t0 + Duration::from_secs(4)), None);
        assert_eq!(w.pop_due(t0 + Duration::from_secs(30)), Some("a"));
        assert_eq!(w.pop_due(t0 + Duration::from_secs(30)), Some("b"));
        assert_eq!(
            w.pop_due(t0 + Duration::from_secs(30)),
            None,
            "the stale entry of a is skipped"
        );
        assert!(w.is_empty());
    }

    #[test]
    fn huge_delays_saturate_instead_of_panicking() {
        let now = Instant::now();
        assert!(deadline_after(now, Duration::MAX) > now + Duration::from_secs(1_000_000));
    }
}
