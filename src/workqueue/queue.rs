//! The plain queue: fair, stingy, and nothing else. It knows no time, no delays, no rate
//! limits and no locks; [`super::WorkQueue`] wraps it in a mutex and adds those layers.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash, RandomState};

use hashbrown::HashTable;

use tokio::time::Instant;

/// Where one item stands. An item has a slot exactly while it is dirty or processing.
#[derive(Debug)]
struct Slot<T> {
    item: T,
    /// Added and not yet handed out since.
    dirty: bool,
    /// Handed out to a worker that has not called `done` yet.
    processing: bool,
}

/// When a slot's item became dirty and when a worker took it; kept only with metrics on.
#[derive(Debug, Clone, Copy, Default)]
struct Times {
    queued_at: Option<Instant>,
    started_at: Option<Instant>,
}

/// An index entry: 32 bits of the item's hash and its slot. Eight bytes, so a million items'
/// index fits in a last-level cache, and growing it reads neither slots nor items.
#[derive(Debug, Clone, Copy)]
struct Ix {
    hash: u32,
    slot: u32,
}

/// Spreads 32 bits of hash over 64 for the table (a bijection: multiplying by an odd
/// constant), so that bucket position and tag both come from bits the index keeps.
fn widen(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9E37_79B9_7F4A_7C15)
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
/// - a slot index is in `ready` exactly when its slot is dirty and not processing, and then
///   once;
/// - `index` maps exactly the items that are dirty or processing to their slots; every other
///   slot is `None` and listed in `free`;
/// - `processing` counts the slots with `processing` set.
///
/// Items live once, in a slab; the ready queue and the hash index hold slot numbers. So an
/// add moves the item in without cloning it, `get` walks the slab in the order items came,
/// and the index stays small enough (8 bytes an item) to stay in cache: a
/// `HashMap<T, Status>` plus a `VecDeque<T>` cost a clone per add and a cache miss per `get`,
/// and re-hashed every key when it grew.
pub(crate) struct Queue<T> {
    ready: VecDeque<usize>,
    slots: Vec<Option<Slot<T>>>,
    /// Parallel to `slots` when metrics are on; empty otherwise.
    times: Vec<Times>,
    free: Vec<usize>,
    index: HashTable<Ix>,
    hasher: RandomState,
    processing: usize,
}

impl<T: Clone + Eq + Hash> Queue<T> {
    pub(crate) fn new() -> Self {
        Self {
            ready: VecDeque::new(),
            slots: Vec::new(),
            times: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            hasher: RandomState::new(),
            processing: 0,
        }
    }

    fn hash(&self, item: &T) -> u32 {
        // The high half: the low half of SipHash is as good, but this keeps the choice explicit.
        (self.hasher.hash_one(item) >> 32) as u32
    }

    /// Records `now` in a slot's times, growing the side table on first use.
    fn times_mut(&mut self, slot: usize) -> &mut Times {
        if self.times.len() <= slot {
            self.times.resize(slot + 1, Times::default());
        }
        &mut self.times[slot]
    }

    fn slot_mut(&mut self, slot: usize) -> &mut Slot<T> {
        self.slots[slot].as_mut().expect("an indexed slot is occupied")
    }

    /// Marks `item` dirty; queues it unless it is queued already or a worker holds it.
    /// `now` is the time to record for queue latency (metrics on) or `None`.
    pub(crate) fn add(&mut self, item: T, now: Option<Instant>) -> Added {
        let hash = self.hash(&item);
        let slots = &mut self.slots;
        let found = self.index.find(widen(hash), |ix| {
            ix.hash == hash && slots[ix.slot as usize].as_ref().is_some_and(|s| s.item == item)
        });
        let (slot, added) = match found {
            Some(&Ix { slot, .. }) => {
                let slot = slot as usize;
                let entry = slots[slot].as_mut().expect("an indexed slot is occupied");
                if entry.dirty {
                    return Added::Deduplicated;
                }
                // Known but not dirty: a worker holds it. It re-enters the queue at `done`.
                entry.dirty = true;
                (slot, Added::Deferred)
            }
            None => {
                let new = Slot { item, dirty: true, processing: false };
                let slot = match self.free.pop() {
                    Some(slot) => {
                        slots[slot] = Some(new);
                        slot
                    }
                    None => {
                        slots.push(Some(new));
                        slots.len() - 1
                    }
                };
                let ix = Ix { hash, slot: u32::try_from(slot).expect("fewer than 2^32 items") };
                self.index.insert_unique(widen(hash), ix, |ix| widen(ix.hash));
                self.ready.push_back(slot);
                (slot, Added::Queued)
            }
        };
        if now.is_some() {
            self.times_mut(slot).queued_at = now;
        }
        added
    }

    /// Takes the oldest ready item and marks it processing. Returns it with the time it was
    /// queued at (metrics on).
    pub(crate) fn pop(&mut self, now: Option<Instant>) -> Option<(T, Option<Instant>)> {
        let slot = self.ready.pop_front()?;
        self.processing += 1;
        let queued_at = match now {
            Some(_) => {
                let times = self.times_mut(slot);
                times.started_at = now;
                times.queued_at.take()
            }
            None => None,
        };
        let slot = self.slot_mut(slot);
        slot.dirty = false;
        slot.processing = true;
        Some((slot.item.clone(), queued_at))
    }

    /// Ends the processing of `item`; requeues it if it was added while held.
    pub(crate) fn done(&mut self, item: &T) -> Finished {
        let hash = self.hash(item);
        let slots = &mut self.slots;
        let Ok(found) = self.index.find_entry(widen(hash), |ix| {
            ix.hash == hash && slots[ix.slot as usize].as_ref().is_some_and(|s| s.item == *item)
        }) else {
            return Finished::NotProcessing;
        };
        let index = found.get().slot as usize;
        let slot = slots[index].as_mut().expect("an indexed slot is occupied");
        if !slot.processing {
            return Finished::NotProcessing;
        }
        self.processing -= 1;
        let started_at = self.times.get_mut(index).and_then(|t| t.started_at.take());
        if slot.dirty {
            slot.processing = false;
            self.ready.push_back(index);
            Finished::Requeued { started_at }
        } else {
            found.remove();
            slots[index] = None;
            self.free.push(index);
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
        let processing = self.slots.iter().map(|s| s.as_ref().is_some_and(|s| s.processing));
        processing.zip(&self.times).filter(|(p, _)| *p).filter_map(|(_, t)| t.started_at)
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
        assert!(q.index.is_empty());
        assert_eq!(q.free.len(), q.slots.len(), "every slot is free again");
    }
}
