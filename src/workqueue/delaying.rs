//! The delay layer: items waiting for a deadline before they enter the queue, as client-go's
//! `delaying_queue.go`. It knows nothing of rate limits; it only orders deadlines.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use hashbrown::HashTable;
use tokio::time::Instant;

use super::Priority;
use super::queue::{narrow, widen};

/// A deadline far enough away to mean "never" without overflowing `Instant` arithmetic.
const FAR_FUTURE: Duration = Duration::from_secs(60 * 60 * 24 * 365 * 30);

/// The deadline `delay` after `now`, saturating at a far-future instant instead of panicking.
pub(crate) fn deadline_after(now: Instant, delay: Duration) -> Instant {
    now.checked_add(delay.min(FAR_FUTURE)).unwrap_or(now)
}

/// Items waiting to be added, each at most once, each under its earliest deadline and its
/// highest priority.
///
/// Invariants: each waiting item lives once, in a slot of `slots`; `index` maps it to its slot
/// by the hash the caller passed, each entry holding 32 bits of that hash beside the slot
/// number, so that a probe reads a slot only on a tag match and growing the table reads no
/// slot at all (with a million waiting items, each slot read was a cache miss); `heap` holds
/// one entry per waiting item, with the slot's deadline (in nanoseconds since `base`) and
/// sequence number, plus possibly stale ones (an item whose deadline moved earlier, or that
/// left), which are skipped by comparing sequence numbers. Heap entries are 16 bytes and never
/// hold the item: the heap's sifting moves little, and an item is never cloned. Sequence
/// numbers are 32 bits: before they would wrap, the live entries are numbered anew in their
/// order (`renumber`), so they never do.
pub(crate) struct WaitingSet<T> {
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    index: HashTable<Ix>,
    slots: Vec<Option<Waiting<T>>>,
    free: Vec<u32>,
    next_seq: u32,
    /// The instant heap deadlines count from: when the set was made.
    base: Instant,
}

/// An index entry: 32 bits of the item's hash and its slot.
#[derive(Debug, Clone, Copy)]
struct Ix {
    tag: u32,
    slot: u32,
}

/// One waiting item, its current deadline and the priority it will be added at.
struct Waiting<T> {
    hash: u64,
    item: T,
    deadline: Instant,
    seq: u32,
    priority: Priority,
    /// A retry that also waits for a token of the queue's fair bucket (the deadline's add's).
    gated: bool,
}

/// An item whose deadline came.
pub(crate) struct Due<T> {
    pub(crate) item: T,
    pub(crate) hash: u64,
    pub(crate) priority: Priority,
    /// A retry that waits for a token of the queue's fair bucket next.
    pub(crate) gated: bool,
}

impl<T: Eq> WaitingSet<T> {
    pub(crate) fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            index: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
            base: Instant::now(),
        }
    }

    fn waiting(&self, slot: u32) -> &Waiting<T> {
        self.slots[slot as usize].as_ref().expect("an indexed slot is occupied")
    }

    /// Makes `item` wait until `deadline` at `priority`, keeping an earlier deadline and a
    /// higher priority it has already; `gated` goes with the deadline kept. Returns true when
    /// `deadline` became the earliest of the whole set.
    pub(crate) fn insert(
        &mut self,
        item: T,
        hash: u64,
        deadline: Instant,
        priority: Priority,
        gated: bool,
    ) -> bool {
        let earliest = self.next_deadline().is_none_or(|next| deadline < next);
        if self.next_seq == u32::MAX {
            self.renumber();
        }
        let seq = self.next_seq;
        let tag = narrow(hash);
        let slots = &mut self.slots;
        let found = self.index.find(widen(tag), |ix| {
            ix.tag == tag
                && slots[ix.slot as usize]
                    .as_ref()
                    .is_some_and(|w| w.hash == hash && w.item == item)
        });
        let slot = match found {
            Some(&Ix { slot, .. }) => {
                let current = slots[slot as usize].as_mut().expect("an indexed slot is occupied");
                current.priority = current.priority.max(priority);
                if current.deadline <= deadline {
                    return false;
                }
                current.deadline = deadline;
                current.seq = seq;
                current.gated = gated;
                slot
            }
            None => {
                let waiting = Waiting { hash, item, deadline, seq, priority, gated };
                let slot = match self.free.pop() {
                    Some(slot) => {
                        slots[slot as usize] = Some(waiting);
                        slot
                    }
                    None => {
                        slots.push(Some(waiting));
                        u32::try_from(slots.len() - 1).expect("fewer than 2^32 waiting items")
                    }
                };
                self.index.insert_unique(widen(tag), Ix { tag, slot }, |ix| widen(ix.tag));
                slot
            }
        };
        self.next_seq += 1;
        self.heap.push(Reverse((self.offset(deadline), seq, slot)));
        earliest
    }

    /// The earliest deadline of a waiting item.
    pub(crate) fn next_deadline(&mut self) -> Option<Instant> {
        self.drop_stale();
        let base = self.base;
        self.heap.peek().map(|Reverse((offset, _, _))| base + Duration::from_nanos(*offset))
    }

    /// Removes and returns the next item whose deadline is at or before `now`, in deadline
    /// order (ties in insertion order).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Due<T>> {
        self.drop_stale();
        let &Reverse((deadline, _, slot)) = self.heap.peek()?;
        if deadline > self.offset(now) {
            return None;
        }
        self.heap.pop();
        let hash = self.waiting(slot).hash;
        if let Ok(found) = self.index.find_entry(widen(narrow(hash)), |ix| ix.slot == slot) {
            found.remove();
        }
        let Waiting { item, hash, priority, gated, .. } =
            self.slots[slot as usize].take().expect("an indexed slot is occupied");
        self.free.push(slot);
        if self.index.is_empty() && self.slots.capacity() > 1024 {
            // The last one: give back the memory a burst of waiting items took (whatever is
            // left in the heap is stale).
            self.clear();
        }
        Some(Due { item, hash, priority, gated })
    }

    /// Takes `item` out of the set, if it waits (its heap entry goes stale): its priority.
    pub(crate) fn remove(&mut self, item: &T, hash: u64) -> Option<Priority> {
        let tag = narrow(hash);
        let slots = &self.slots;
        let Ok(found) = self.index.find_entry(widen(tag), |ix| {
            ix.tag == tag
                && slots[ix.slot as usize]
                    .as_ref()
                    .is_some_and(|w| w.hash == hash && w.item == *item)
        }) else {
            return None;
        };
        let slot = found.remove().0.slot;
        let waiting = self.slots[slot as usize].take();
        self.free.push(slot);
        waiting.map(|w| w.priority)
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Drops every waiting item, and the memory they took.
    pub(crate) fn clear(&mut self) {
        *self = Self::new();
    }

    /// Drops the stale heap entries and numbers the live ones 0, 1, … in their order, so that
    /// sequence numbers start low again (once every 2^32 deadlines: the cost is amortized).
    fn renumber(&mut self) {
        let mut live: Vec<(u64, u32, u32)> = std::mem::take(&mut self.heap)
            .into_iter()
            .map(|Reverse(entry)| entry)
            .filter(|&(_, seq, slot)| {
                self.slots[slot as usize].as_ref().is_some_and(|w| w.seq == seq)
            })
            .collect();
        live.sort_unstable();
        for (seq, entry) in live.iter_mut().enumerate() {
            entry.1 = u32::try_from(seq).expect("fewer than 2^32 waiting items");
            if let Some(waiting) = self.slots[entry.2 as usize].as_mut() {
                waiting.seq = entry.1;
            }
        }
        self.next_seq = u32::try_from(live.len()).expect("fewer than 2^32 waiting items");
        self.heap = live.into_iter().map(Reverse).collect();
    }

    /// `at` in nanoseconds since `base` (an instant before it counts as `base`).
    fn offset(&self, at: Instant) -> u64 {
        // `deadline_after` keeps deadlines within 30 years: far below u64 nanoseconds.
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Pops heap entries superseded by an earlier deadline for the same item.
    fn drop_stale(&mut self) {
        while let Some(&Reverse((_, seq, slot))) = self.heap.peek() {
            match &self.slots[slot as usize] {
                Some(current) if current.seq == seq => return,
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

    fn at(w: &mut WaitingSet<&'static str>, item: &'static str, t: Instant, p: i32) -> bool {
        let hash = item.len() as u64 * 7919 + item.as_bytes()[0] as u64;
        w.insert(item, hash, t, Priority(p), false)
    }

    #[test]
    fn keeps_the_earliest_deadline_and_the_highest_priority_and_fires_once() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut w = WaitingSet::new();
        assert!(at(&mut w, "a", t0 + s(10), 0));
        assert!(!at(&mut w, "a", t0 + s(20), 5), "a later deadline changes only the priority");
        assert!(at(&mut w, "a", t0 + s(5), -100), "an earlier one replaces the deadline");
        assert!(!at(&mut w, "b", t0 + s(7), 0));
        assert_eq!(w.next_deadline(), Some(t0 + s(5)));
        assert!(w.pop_due(t0 + s(4)).is_none());
        let a = w.pop_due(t0 + s(30)).unwrap();
        assert_eq!((a.item, a.priority), ("a", Priority(5)));
        assert_eq!(w.pop_due(t0 + s(30)).map(|d| d.item), Some("b"));
        assert!(w.pop_due(t0 + s(30)).is_none(), "the stale entry of a is skipped");
        assert!(w.is_empty());
    }

    #[test]
    fn equal_deadlines_fire_in_insertion_order_when_sequence_numbers_run_out() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut w = WaitingSet::new();
        let hash = |item: &str| item.len() as u64 * 31 + u64::from(item.as_bytes()[0]);
        let insert = |w: &mut WaitingSet<String>, item: &str, at| {
            w.insert(item.to_string(), hash(item), at, Priority::NORMAL, false)
        };
        w.next_seq = u32::MAX - 2;
        for item in ["a", "b", "c", "d", "e"] {
            insert(&mut w, item, t0 + s(5));
        }
        // "a" moves earlier: its first entry goes stale.
        insert(&mut w, "a", t0 + s(1));
        assert!(w.next_seq < 10, "numbered anew: {}", w.next_seq);
        assert_eq!(w.next_deadline(), Some(t0 + s(1)), "the deadline round-trips exactly");
        let order: Vec<String> =
            std::iter::from_fn(|| w.pop_due(t0 + s(5)).map(|d| d.item)).collect();
        assert_eq!(order, ["a", "b", "c", "d", "e"], "each once; b to e in insertion order");
        assert!(w.is_empty());
    }

    #[test]
    fn huge_delays_saturate_instead_of_panicking() {
        let now = Instant::now();
        assert!(deadline_after(now, Duration::MAX) > now + Duration::from_secs(1_000_000));
    }
}
