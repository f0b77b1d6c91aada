//! The hot set of a store that keeps objects compact (the default, [`Indexer::new`]): the
//! objects read or written most recently, at most a fixed number, kept decoded beside their
//! JSON, so that reading one again shares it (an `Arc` clone) instead of decoding it.
//!
//! A CLOCK over the objects made hot, oldest first: an object becomes hot when a read decodes
//! it or a watch event writes it, and joins the back of the ring; while the ring holds more
//! than its capacity, the oldest entry is passed: an object read since it was last passed
//! goes to the back again (its bit cleared), any other drops its decoded copy and leaves the
//! ring. Readers only set a bit, without the ring's lock. Entries are weak: an object the
//! store replaced or removed leaves the ring when it comes up, and counts until then, so the
//! objects kept decoded never exceed the capacity.
//!
//! [`Indexer::new`]: crate::cache::Indexer::new

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

/// What the hot set holds: an object whose decoded copy it can drop.
pub(crate) trait Entry {
    /// The hot set passes this object: if it was read since the last pass and this is not
    /// the `last` chance, it stays (its bit cleared) and this is false; else it drops its
    /// decoded copy.
    fn pass(&self, last: bool) -> bool;
}

/// The hot set's default size (see [`Indexer::new`](crate::cache::Indexer::new)): about 30 MB of
/// decoded pods, and what a controller's workers read in the time a watch delivers as many
/// changes.
pub const DEFAULT_HOT_OBJECTS: usize = 1024;

/// The objects of one store kept decoded; see the module docs.
pub(crate) struct HotSet<E> {
    capacity: usize,
    ring: Mutex<VecDeque<Weak<E>>>,
}

impl<E: Entry> HotSet<E> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self { capacity, ring: Mutex::new(VecDeque::new()) }
    }

    /// Takes `object`, whose decoded copy was just set, and makes room: see the module docs.
    pub(crate) fn admit(&self, object: &Arc<E>) {
        let mut ring = self.ring.lock();
        ring.push_back(Arc::downgrade(object));
        // Every entry passed once has its bit cleared; one read again meanwhile, by a reader
        // racing the ring, is not spared forever: past a full turn, the oldest goes anyway.
        let mut spared = 0;
        while ring.len() > self.capacity {
            let Some(oldest) = ring.pop_front() else { break };
            let Some(entry) = oldest.upgrade() else { continue };
            let turn_done = spared >= ring.len();
            if !entry.pass(turn_done) {
                ring.push_back(oldest);
                spared += 1;
            }
        }
    }

    /// How many entries the ring holds (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ring.lock().len()
    }
}
