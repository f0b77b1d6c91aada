//! The plain queue: FIFO or fair within a priority, stingy, and nothing else. It knows no
//! delays, no rate limits and no locks; [`super::WorkQueue`] wraps it in a mutex and adds those
//! layers. Fairness (round-robin across fairness keys) is in `fairness.rs`; this file keeps
//! each priority's line and decides which priority serves next.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use hashbrown::HashTable;
use tokio::time::Instant;

use super::Priority;
use super::fairness::{Fairness, FairnessKey, Groups, LevelSnapshot, Tree};

/// Dead index entries are swept once they outnumber twice the live ones by this many.
const SWEEP_SLACK: usize = 1024;

/// Where one item stands. A slot holds an item exactly while it is dirty or processing; a
/// free slot keeps its generation, so a stale ready entry never matches a later occupant.
#[derive(Debug)]
struct Slot<T> {
    item: Option<T>,
    /// When the item last became dirty: the start of its wait, for aging and queue latency.
    queued_at: Instant,
    /// The priority it is (or will be, when its worker is done) ready at.
    priority: Priority,
    /// Bumped at every ready entry pushed for this slot: only the newest entry is live.
    generation: u32,
    /// Added and not yet handed out since.
    dirty: bool,
    /// Handed out to a worker that has not called `done` yet.
    processing: bool,
    /// Its flow (fairness on), set when the slot is taken.
    flow: u32,
}

/// An index entry: 32 bits of the item's hash and its slot. Eight bytes, so a million items'
/// index fits in a last-level cache, and growing it reads neither slots nor items.
#[derive(Debug, Clone, Copy)]
struct Ix {
    hash: u32,
    slot: u32,
}

/// A ready entry: a slot and the generation it was pushed at.
#[derive(Debug, Clone, Copy)]
struct Entry {
    slot: u32,
    generation: u32,
}

/// The ready items of one priority, in the order they became ready at it; with fairness on,
/// also in the round-robin that hands them out, and `fifo` serves only to find the oldest (it
/// may then hold entries already handed out, dropped once they reach its front).
#[derive(Debug)]
struct Level {
    priority: Priority,
    fifo: VecDeque<Entry>,
    tree: Tree<Entry>,
    /// Live entries (fairness on): at zero the level's round-robin holds only stale ones, and
    /// is emptied at once, so that a level's rotation never keeps places for groups with
    /// nothing ready.
    live: usize,
}

impl Level {
    fn new(priority: Priority, tree: Tree<Entry>) -> Self {
        Self { priority, fifo: VecDeque::new(), tree, live: 0 }
    }
}

/// A queue's fairness: how it finds keys, its groups, and what it counts.
struct Fair<T> {
    config: Fairness<T>,
    groups: Groups,
    /// Count ready items per flow and first-level group: for metrics and the cap.
    count: bool,
    /// First-level groups at their in-flight cap.
    capped: Vec<u32>,
    /// Calls of the key extractor that panicked.
    key_panics: u64,
    /// Items promoted by aging (slot → the priority whose round-robin holds them now): their
    /// live entry is there, not at their own priority.
    promoted: HashMap<u32, Priority>,
}

/// Spreads 32 bits of hash over 64 for the table (a bijection: multiplying by an odd
/// constant), so that bucket position and tag both come from bits the index keeps.
pub(crate) fn widen(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The 32 bits of a full hash the index keeps (the high half).
pub(crate) fn narrow(hash: u64) -> u32 {
    (hash >> 32) as u32
}

/// Whether an aging period leaves aging off: `Duration::MAX`, strict priorities, under which no
/// wait ever ages a head and so no `get` needs the clock for aging.
pub(crate) fn aging_off(aging: Duration) -> bool {
    aging == Duration::MAX
}

/// What `add` did with an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Added {
    /// Pushed to the back of its priority's ready queue.
    Queued(Priority),
    /// Already ready at this priority or a higher one: nothing changed.
    Deduplicated,
    /// Already ready at a lower priority: moved to the back of this one's queue.
    Raised { from: Priority, to: Priority },
    /// A worker holds it: it is ready again when that worker calls `done`.
    Deferred,
}

/// What `done` did with an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finished {
    /// The item was not being processed: nothing changed.
    NotProcessing,
    /// The item is finished and forgotten.
    Released,
    /// The item was added again while held, so it is ready again at this priority.
    Requeued(Priority),
}

/// An item handed out by `pop`.
#[derive(Debug)]
pub(crate) struct Popped<T> {
    pub(crate) item: T,
    pub(crate) priority: Priority,
    /// When it became dirty.
    pub(crate) queued_at: Instant,
}

/// Ready queues by priority with the dirty/processing bookkeeping of client-go's `Type`.
///
/// Invariants:
/// - a slot has exactly one live entry (same generation) in the level of its priority when it
///   is dirty and not processing, and none otherwise; levels may also hold stale entries
///   (older generations, counted by `stale` with fairness off), which `pop` skips;
/// - `ready` counts the live entries, `live` the occupied slots;
/// - every occupied slot has an entry in `index` (its hash, its slot); `index` may also hold
///   dead entries (pointing at a free slot, or at a slot since given to another item), which
///   never match a lookup, because every lookup compares the slot's item; unoccupied slots
///   are listed in `free`;
/// - `working` maps exactly the processing items to their slots;
/// - `levels` is sorted by priority, highest first, and holds no empty level but `NORMAL`'s;
/// - with fairness on, a slot has also exactly one live entry in its level's round-robin when
///   it is dirty and not processing, and the levels' `fifo`s may hold entries already handed
///   out (not live); a slot aging moved up has both at the priority `Fair::promoted` records
///   for it, not at its own;
/// - `occupied` counts the levels that hold entries (their `fifo`s, or with fairness on their
///   round-robins).
///
/// Items live once, in a slab; the ready queues and the hash indexes hold slot numbers. So an
/// add moves the item in without cloning it and `get` walks the slab in the order items came.
/// `done` looks the item up in `working`, which holds only what workers hold and so stays in
/// cache, frees its slot, and leaves its entry in `index` dead instead of removing it: with a
/// million keys the index outgrows the caches, and a probe into it cost `done` more than
/// everything else together. Once dead entries outnumber twice the live ones (by
/// `SWEEP_SLACK`), one sequential pass over the index drops them, so the index's cost stays
/// proportional to the live items and memory returns when traffic stops (with fairness on,
/// but for the fairness tables, which keep the peak of groups in use at once). Callers hash items
/// themselves (outside their lock) and pass the hash in.
pub(crate) struct Queue<T> {
    levels: Vec<Level>,
    slots: Vec<Slot<T>>,
    /// Beside `slots`: the 32 hash bits of each occupant, and a bit per slot set while it is
    /// occupied. Small and dense, so a sweep rebuilds the index from them without reading
    /// the slots.
    tags: Vec<u32>,
    occupied_slots: Vec<u64>,
    /// When a worker took each slot's item; kept only with metrics on.
    started: Vec<Option<Instant>>,
    free: Vec<u32>,
    index: HashTable<Ix>,
    working: HashTable<Ix>,
    ready: usize,
    live: usize,
    stale: usize,
    /// Levels that hold at least one entry (live or stale).
    occupied: usize,
    /// Round-robin across fairness keys within each priority; `None`: FIFO.
    fair: Option<Fair<T>>,
    /// The emptied round-robins of dropped levels, for the next new level: a tree made anew
    /// makes a node for every group number up to the highest one it sees, so a priority that
    /// empties and refills would pay for every group once in use at each refill.
    spare_trees: Vec<Tree<Entry>>,
}

impl<T: Clone + Eq> Queue<T> {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::with_fairness(None, false)
    }

    /// A queue fair across `fairness`'s keys (FIFO without), counting ready items per group
    /// with `metrics` (or a cap).
    pub(crate) fn with_fairness(fairness: Option<Fairness<T>>, metrics: bool) -> Self {
        let fair = fairness.map(|config| Fair {
            count: metrics || config.max_in_flight.is_some(),
            config,
            groups: Groups::default(),
            capped: Vec::new(),
            key_panics: 0,
            promoted: HashMap::new(),
        });
        Self {
            fair,
            levels: vec![Level::new(Priority::NORMAL, Tree::new())],
            spare_trees: Vec::new(),
            slots: Vec::new(),
            tags: Vec::new(),
            occupied_slots: Vec::new(),
            started: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            working: HashTable::new(),
            ready: 0,
            live: 0,
            stale: 0,
            occupied: 0,
        }
    }

    fn find(&self, item: &T, hash: u64) -> Option<usize> {
        let hash = narrow(hash);
        let slots = &self.slots;
        let found = self.index.find(widen(hash), |ix| {
            ix.hash == hash && slots[ix.slot as usize].item.as_ref() == Some(item)
        });
        found.map(|ix| ix.slot as usize)
    }

    /// Pushes a live entry for `slot` at its priority.
    fn push_ready(&mut self, slot: usize) {
        let entry = &mut self.slots[slot];
        entry.generation = entry.generation.wrapping_add(1);
        let (priority, generation, flow) = (entry.priority, entry.generation, entry.flow);
        let level = match self.levels.iter().position(|l| l.priority <= priority) {
            Some(i) if self.levels[i].priority == priority => i,
            at => {
                let at = at.unwrap_or(self.levels.len());
                let tree = self.spare_trees.pop().unwrap_or_else(Tree::new);
                self.levels.insert(at, Level::new(priority, tree));
                at
            }
        };
        let entry = Entry { slot: slot as u32, generation };
        let level = &mut self.levels[level];
        match &mut self.fair {
            None => {
                if level.fifo.is_empty() {
                    self.occupied += 1;
                }
            }
            Some(fair) => {
                if level.tree.is_empty() {
                    self.occupied += 1;
                }
                level.tree.push(&fair.groups, flow, entry);
                fair.groups.acquire(flow);
                level.live += 1;
                if fair.count {
                    fair.count_ready(flow, 1);
                }
            }
        }
        level.fifo.push_back(entry);
        self.ready += 1;
    }

    /// Marks `item` dirty at `priority` (keeping a higher one it has); queues it unless it is
    /// ready already at that priority or higher, or a worker holds it. `now` starts its wait.
    pub(crate) fn add(&mut self, item: T, hash: u64, priority: Priority, now: Instant) -> Added {
        if let Some(slot) = self.find(&item, hash) {
            let entry = &mut self.slots[slot];
            if !entry.dirty {
                // Known but not dirty: a worker holds it. It is ready again at `done`.
                entry.dirty = true;
                entry.priority = priority;
                entry.queued_at = now;
                return Added::Deferred;
            }
            if priority <= entry.priority {
                return Added::Deduplicated;
            }
            let from = std::mem::replace(&mut entry.priority, priority);
            if entry.processing {
                // Dirty while held: only the priority it comes back at changes.
                return Added::Deduplicated;
            }
            // The entry at the old priority goes stale; `push_ready` counts the new one.
            let mut at = from;
            if let Some(fair) = &mut self.fair
                && let Some(&promoted) = fair.promoted.get(&(slot as u32))
            {
                if priority <= promoted {
                    // Aging put it higher already: it keeps its place there.
                    return Added::Raised { from, to: priority };
                }
                fair.promoted.remove(&(slot as u32));
                at = promoted;
            }
            self.ready -= 1;
            if self.fair.is_none() {
                self.stale += 1;
            }
            if let Some(fair) = &mut self.fair {
                if fair.count {
                    fair.count_ready(self.slots[slot].flow, -1);
                }
                self.left_level(at);
            }
            self.push_ready(slot);
            return Added::Raised { from, to: priority };
        }
        let hash = narrow(hash);
        let new = Slot {
            item: Some(item),
            queued_at: now,
            priority,
            generation: 0,
            dirty: true,
            processing: false,
            flow: 0,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                let slot = slot as usize;
                let generation = self.slots[slot].generation;
                self.slots[slot] = Slot { generation, ..new };
                slot
            }
            None => {
                self.slots.push(new);
                self.tags.push(0);
                if self.occupied_slots.len() * 64 < self.slots.len() {
                    self.occupied_slots.push(0);
                }
                self.slots.len() - 1
            }
        };
        self.tags[slot] = hash;
        self.occupied_slots[slot / 64] |= 1 << (slot % 64);
        if let Some(fair) = &mut self.fair {
            // The key's flow, found (or made) once per item that becomes ready anew; re-adds
            // of a queued item returned above, so dedup costs fairness nothing.
            let item = self.slots[slot].item.as_ref().expect("just filled");
            let key = fair.key_of(item);
            self.slots[slot].flow = fair.groups.flow(key);
        }
        let ix = Ix { hash, slot: u32::try_from(slot).expect("fewer than 2^32 items") };
        self.index.insert_unique(widen(hash), ix, |ix| widen(ix.hash));
        self.live += 1;
        self.push_ready(slot);
        Added::Queued(priority)
    }

    /// Whether `entry` is its slot's live entry.
    fn live(&self, entry: &Entry) -> bool {
        self.slots[entry.slot as usize].generation == entry.generation
    }

    /// Drops the stale entries at the head of `level`; returns its live head, or `None` when
    /// the level emptied (and, but for `NORMAL`'s, went).
    fn head(&mut self, level: usize) -> Option<Entry> {
        loop {
            let head = *self.levels[level].fifo.front()?;
            if self.live(&head) {
                return Some(head);
            }
            let before = self.levels.len();
            self.pop_level(level);
            self.stale -= 1;
            if self.levels.len() != before {
                return None;
            }
        }
    }

    /// Pops the head of `level`, dropping the level if it empties (but for `NORMAL`'s).
    fn pop_level(&mut self, level: usize) -> Option<Entry> {
        let entry = self.levels[level].fifo.pop_front()?;
        if self.levels[level].fifo.is_empty() {
            self.occupied -= 1;
            if self.levels[level].priority != Priority::NORMAL {
                self.levels.remove(level);
            }
        }
        Some(entry)
    }

    /// The level to serve next: the highest priority's head, unless some head has waited for
    /// `aging` or longer (never, with `aging` at `Duration::MAX`: strict priorities, no clock
    /// read); then the oldest head, whatever its priority.
    fn next_level(&mut self, aging: Duration, now: Option<Instant>) -> Option<usize> {
        if self.ready == 0 {
            return None;
        }
        if self.occupied == 1 {
            // One priority in use (the common case): no clock to read, no heads to compare.
            let level = self.levels.iter().position(|l| !l.fifo.is_empty())?;
            if self.head(level).is_some() {
                return Some(level);
            }
        }
        let strict = aging_off(aging);
        let mut heads = Heads::default();
        let mut level = 0;
        while level < self.levels.len() {
            let Some(head) = self.head(level) else {
                // `head` dropped an emptied level, or NORMAL's is empty: look at the same index.
                if self.levels.get(level).is_some_and(|l| l.fifo.is_empty()) {
                    level += 1;
                }
                continue;
            };
            if heads.consider(level, self.slots[head.slot as usize].queued_at, strict) {
                break;
            }
            level += 1;
        }
        heads.choose(aging, now)
    }

    /// With fairness on: a live entry of the level of `priority` went (stale, or handed out).
    /// A level left with none is emptied (its round-robin holds only stale entries) and, but
    /// for `NORMAL`'s, dropped.
    fn left_level(&mut self, priority: Priority) {
        let Some(i) = self.levels.iter().position(|l| l.priority == priority) else { return };
        let level = &mut self.levels[i];
        level.live -= 1;
        if level.live > 0 {
            return;
        }
        if !level.tree.is_empty() {
            self.occupied -= 1;
        }
        level.tree.clear();
        level.fifo.clear();
        if let Some(fair) = &mut self.fair {
            level.tree.released().for_each(|flow| fair.groups.release(flow));
        }
        if priority != Priority::NORMAL {
            let level = self.levels.remove(i);
            self.spare_trees.push(level.tree);
        }
    }

    /// With fairness on: the next entry, by the round-robin of the highest priority with ready
    /// items once aged items of lower ones joined it (see `promote_aged`), or (when every ready
    /// group there is at its in-flight cap) of the next priority that has one a worker may take.
    fn pop_fair(&mut self, aging: Duration, now: Option<Instant>) -> Option<Entry> {
        if self.ready == 0 {
            return None;
        }
        if !aging_off(aging) && self.occupied > 1 {
            self.promote_aged(aging, now);
        }
        let first = self.levels.iter().position(|l| l.live > 0)?;
        let found = std::iter::once(first)
            .chain(0..self.levels.len())
            .find_map(|level| self.pop_tree(level).map(|e| (e, self.levels[level].priority)));
        let (entry, priority) = found?;
        self.left_level(priority);
        Some(entry)
    }

    /// With fairness on: moves each item of a priority below the highest one with ready items
    /// that has waited `aging` into that one's round-robin, ahead of its flow's items there
    /// that did not age. Only aged items move, as the FIFO queue serves only an aged head out
    /// of turn, and the round-robin keeps them fair among themselves and against the top
    /// priority's items, so a noisy group's aged backlog takes no turn of another group. The
    /// moved entry goes to the front of the top priority's arrival line, so that it ages on
    /// from there should a higher priority come. Each level's line is read from its front
    /// while it holds aged items: a pop costs one look per lower level when none aged.
    fn promote_aged(&mut self, aging: Duration, now: Option<Instant>) {
        let Some(top) = self.levels.iter().position(|l| l.live > 0) else { return };
        let mut now = now;
        let mut level = top + 1;
        while level < self.levels.len() {
            let head = loop {
                let Some(&head) = self.levels[level].fifo.front() else { break None };
                if live(&self.slots, &head) {
                    break Some(head);
                }
                self.levels[level].fifo.pop_front();
            };
            let Some(head) = head else {
                level += 1;
                continue;
            };
            let at = *now.get_or_insert_with(Instant::now);
            let slot = head.slot as usize;
            if at.saturating_duration_since(self.slots[slot].queued_at) < aging {
                level += 1;
                continue;
            }
            // A new generation: its entries at its own priority go stale.
            self.levels[level].fifo.pop_front();
            let entry = &mut self.slots[slot];
            entry.generation = entry.generation.wrapping_add(1);
            let (flow, generation) = (entry.flow, entry.generation);
            self.left_level(self.levels[level].priority);
            let entry = Entry { slot: head.slot, generation };
            let fair = self.fair.as_mut().expect("fairness on");
            let target = &mut self.levels[top];
            target.tree.push_aged(&fair.groups, flow, entry);
            fair.groups.acquire(flow);
            target.live += 1;
            target.fifo.push_front(entry);
            fair.promoted.insert(head.slot, target.priority);
            // The same index again: this level's next item, or (the level gone) the next one.
        }
    }

    /// Takes the next live entry of `level`'s round-robin, skipping stale ones.
    fn pop_tree(&mut self, level: usize) -> Option<Entry> {
        let fair = self.fair.as_ref().expect("fairness on");
        let slots = &self.slots;
        let groups = &fair.groups;
        let cap = fair.config.max_in_flight;
        let tree = &mut self.levels[level].tree;
        if tree.is_empty() {
            return None;
        }
        // A pop that finds only stale entries cannot empty the tree: `live` counts a live one.
        let found = tree.pop(
            |e| live(slots, e),
            |top| cap.is_some_and(|cap| groups.groups[top as usize].in_flight >= cap),
        );
        if tree.is_empty() {
            self.occupied -= 1;
        }
        let groups = &mut self.fair.as_mut().expect("fairness on").groups;
        tree.released().for_each(|flow| groups.release(flow));
        found
    }

    /// Takes the next ready item (see `next_level`) and marks it processing. `now` is the time
    /// if the caller read it (else aging reads it when it needs to); with `record_start` (metrics
    /// on) it is recorded as the item's start.
    pub(crate) fn pop(
        &mut self,
        aging: Duration,
        now: Option<Instant>,
        record_start: bool,
    ) -> Option<Popped<T>> {
        let entry = match self.fair {
            None => {
                let level = self.next_level(aging, now)?;
                self.pop_level(level).expect("the chosen level has a live head")
            }
            Some(_) => self.pop_fair(aging, now)?,
        };
        let started = now.filter(|_| record_start);
        let slot = entry.slot as usize;
        self.ready -= 1;
        if let Some(fair) = &mut self.fair {
            fair.popped(self.slots[slot].flow);
            if !fair.promoted.is_empty() {
                fair.promoted.remove(&entry.slot);
            }
        }
        let ix = Ix { hash: self.tags[slot], slot: entry.slot };
        self.working.insert_unique(widen(ix.hash), ix, |ix| widen(ix.hash));
        if let Some(at) = started {
            if self.started.len() <= slot {
                self.started.resize(slot + 1, None);
            }
            self.started[slot] = Some(at);
        }
        let slot = &mut self.slots[slot];
        slot.dirty = false;
        slot.processing = true;
        let popped = Popped {
            item: slot.item.clone().expect("a live entry's slot is occupied"),
            priority: slot.priority,
            queued_at: slot.queued_at,
        };
        if self.fair.is_some() {
            self.compact_fifo(popped.priority);
        }
        Some(popped)
    }

    /// With fairness on: drops the entries handed out from the `fifo` of `priority` once they
    /// outnumber twice its live ones (by `SWEEP_SLACK`). They go at its front otherwise, and
    /// a front held by a group at its cap (a hung worker) kept every later one.
    fn compact_fifo(&mut self, priority: Priority) {
        let Some(level) = self.levels.iter_mut().find(|l| l.priority == priority) else { return };
        if level.fifo.len() > 2 * level.live + SWEEP_SLACK {
            let slots = &self.slots;
            level.fifo.retain(|e| live(slots, e));
        }
    }

    /// Ends the processing of `item`; requeues it if it was added while held. Returns also
    /// when the worker took it (metrics on).
    pub(crate) fn done(&mut self, item: &T, hash: u64) -> (Finished, Option<Instant>) {
        let hash = narrow(hash);
        let slots = &self.slots;
        let Ok(found) = self.working.find_entry(widen(hash), |ix| {
            ix.hash == hash && slots[ix.slot as usize].item.as_ref() == Some(item)
        }) else {
            return (Finished::NotProcessing, None);
        };
        let index = found.remove().0.slot as usize;
        let started = self.started.get_mut(index).and_then(Option::take);
        let slot = &mut self.slots[index];
        slot.processing = false;
        if let Some(fair) = &mut self.fair
            && let Some(top) = fair.finished(slot.flow)
        {
            for level in &mut self.levels {
                level.tree.unpark(top);
            }
        }
        if slot.dirty {
            let priority = slot.priority;
            self.push_ready(index);
            return (Finished::Requeued(priority), started);
        }
        slot.item = None;
        if let Some(fair) = &mut self.fair {
            // The item's hold on its flow (taken at its add) goes.
            fair.groups.release(slot.flow);
        }
        self.occupied_slots[index / 64] &= !(1 << (index % 64));
        self.free.push(index as u32);
        self.live -= 1;
        if self.index.len() - self.live >= 2 * self.live + SWEEP_SLACK {
            self.sweep();
        }
        (Finished::Released, started)
    }

    /// Rebuilds the index from the occupied slots' bits and tags, dropping its dead entries;
    /// gives back the memory of trailing free slots and of oversized queues. Costs a pass
    /// over the bitmap (a bit per slot) and an insert per live item.
    fn sweep(&mut self) {
        let mut index = HashTable::with_capacity(self.live);
        for (w, &word) in self.occupied_slots.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let slot = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let ix = Ix { hash: self.tags[slot], slot: slot as u32 };
                index.insert_unique(widen(ix.hash), ix, |ix| widen(ix.hash));
            }
        }
        self.index = index;
        // Slots past the last occupied one can go, unless a stale ready entry still names one
        // (a slot made anew restarts its generation). No index entry names them any more.
        let named = match self.fair {
            None => self.stale > 0,
            Some(_) => self.levels.iter().any(|l| !l.fifo.is_empty() || !l.tree.is_empty()),
        };
        if !named {
            let used = self.slots.iter().rposition(|s| s.item.is_some()).map_or(0, |i| i + 1);
            self.slots.truncate(used);
            self.tags.truncate(used);
            self.occupied_slots.truncate(used.div_ceil(64));
            self.started.truncate(used);
            self.free.retain(|&i| (i as usize) < used);
            shrink(&mut self.slots);
            shrink(&mut self.tags);
            shrink(&mut self.occupied_slots);
            shrink(&mut self.started);
            shrink(&mut self.free);
        }
        for level in &mut self.levels {
            if level.fifo.capacity() > 4 * level.fifo.len() + SWEEP_SLACK {
                level.fifo.shrink_to(2 * level.fifo.len());
            }
        }
    }

    /// The flow of `item`'s fairness key (made if new), with a user for the caller to give
    /// back with [`release_flows`](Self::release_flows); `None` with fairness off.
    pub(crate) fn flow_of(&mut self, item: &T) -> Option<u32> {
        let fair = self.fair.as_mut()?;
        let key = fair.key_of(item);
        Some(fair.groups.flow(key))
    }

    /// Gives back a user of each flow (one taken by [`flow_of`](Self::flow_of)).
    pub(crate) fn release_flows(&mut self, flows: impl Iterator<Item = u32>) {
        if let Some(fair) = &mut self.fair {
            flows.for_each(|flow| fair.groups.release(flow));
        }
    }

    /// Each fairness level's figures and its three deepest groups (with metrics on: the ready
    /// counts are kept then); empty with fairness off. Costs a pass over the flows.
    pub(crate) fn fairness_levels(&self, now: Instant) -> Vec<LevelSnapshot> {
        let Some(fair) = self.fair.as_ref().filter(|f| f.count) else { return Vec::new() };
        let groups = &fair.groups;
        // Per group: ready items, the oldest ready item's start, a slot of one of its items.
        let mut seen: HashMap<u32, (usize, Instant, u32)> = HashMap::new();
        for level in &self.levels {
            for (flow, entries) in level.tree.flows() {
                let Some(first) = entries.iter().find(|e| live(&self.slots, e)) else { continue };
                let at = self.slots[first.slot as usize].queued_at;
                let ready = groups.groups[flow as usize].ready;
                let mut group = Some(flow);
                let mut first_level = true;
                while let Some(g) = group {
                    let agg = seen.entry(g).or_insert((0, at, first.slot));
                    if agg.1 > at {
                        (agg.1, agg.2) = (at, first.slot);
                    }
                    if first_level {
                        // A flow's count once, however many priorities it is ready at.
                        agg.0 = ready;
                    }
                    first_level = false;
                    group = groups.parent(g);
                }
            }
        }
        // Groups above the flows sum their flows' counts.
        let mut sums: HashMap<u32, usize> = HashMap::new();
        for (&g, &(ready, _, _)) in &seen {
            if groups.groups[g as usize].is_flow {
                let mut up = groups.parent(g);
                while let Some(p) = up {
                    *sums.entry(p).or_default() += ready;
                    up = groups.parent(p);
                }
            }
        }
        let mut levels: Vec<LevelSnapshot> =
            (0..groups.depth()).map(|_| LevelSnapshot::default()).collect();
        let mut by_level: Vec<Vec<(usize, u32)>> = vec![Vec::new(); groups.depth()];
        for (&g, &(ready, at, _)) in &seen {
            let level = usize::from(groups.groups[g as usize].level);
            let ready = sums.get(&g).copied().unwrap_or(ready);
            let stats = &mut levels[level].stats;
            stats.groups += 1;
            stats.deepest = stats.deepest.max(ready);
            let wait = now.saturating_duration_since(at).as_secs_f64();
            stats.longest_wait_seconds = stats.longest_wait_seconds.max(wait);
            by_level[level].push((ready, g));
        }
        for (level, mut ranked) in by_level.into_iter().enumerate() {
            ranked.sort_unstable_by_key(|&(ready, _)| std::cmp::Reverse(ready));
            levels[level].deepest = ranked
                .into_iter()
                .take(3)
                .map(|(ready, g)| {
                    let slot = seen[&g].2 as usize;
                    // User code under the queue's lock: a panic must not unwind out of it.
                    let named = match (&fair.config.label, &self.slots[slot].item) {
                        (Some(label), Some(item)) => crate::panic::catch(|| label(item, level))
                            .inspect_err(|panic| {
                                tracing::error!(%panic, "a fairness label function panicked");
                            })
                            .ok(),
                        _ => None,
                    };
                    let name = named.unwrap_or_else(|| format!("#{g}"));
                    (name, ready)
                })
                .collect();
        }
        levels
    }

    /// How many calls of the fairness key extractor panicked.
    pub(crate) fn key_panics(&self) -> u64 {
        self.fair.as_ref().map_or(0, |f| f.key_panics)
    }

    /// The fairness groups; `None` with fairness off.
    pub(crate) fn groups(&self) -> Option<&Groups> {
        self.fair.as_ref().map(|f| &f.groups)
    }

    /// Items ready to be handed out.
    pub(crate) fn len(&self) -> usize {
        self.ready
    }

    /// Items ready that a worker may take now: those of groups at their in-flight cap left
    /// out.
    pub(crate) fn available(&self) -> usize {
        match &self.fair {
            Some(fair) if fair.config.max_in_flight.is_some() => {
                let held: usize =
                    fair.capped.iter().map(|&g| fair.groups.groups[g as usize].top_ready).sum();
                self.ready.saturating_sub(held)
            }
            _ => self.ready,
        }
    }

    /// Whether more than one priority holds ready items, so that `pop` compares ages.
    pub(crate) fn priorities_in_use(&self) -> bool {
        self.occupied > 1
    }

    /// Items ready to be handed out at each priority in use, highest first.
    #[cfg(test)]
    pub(crate) fn len_by_priority(&self) -> Vec<(Priority, usize)> {
        let mut counts: Vec<(Priority, usize)> =
            self.levels.iter().map(|l| (l.priority, 0)).collect();
        for (level, count) in self.levels.iter().zip(&mut counts) {
            // With fairness on a `fifo` keeps entries handed out: `live` tells them apart.
            let ready = |e: &&Entry| match self.fair {
                None => self.live(e),
                Some(_) => live(&self.slots, e),
            };
            count.1 = level.fifo.iter().filter(ready).count();
        }
        counts.retain(|c| c.1 > 0);
        counts
    }

    /// Items handed out and not yet done.
    pub(crate) fn processing(&self) -> usize {
        self.working.len()
    }

    /// Start times of the items being processed (recorded only with metrics on).
    pub(crate) fn processing_started(&self) -> impl Iterator<Item = Instant> + '_ {
        self.working.iter().filter_map(|ix| self.started.get(ix.slot as usize).copied().flatten())
    }
}

/// The levels' heads seen so far, highest priority first: the first, and the oldest.
#[derive(Default)]
struct Heads {
    top: Option<usize>,
    oldest: Option<(usize, Instant)>,
}

impl Heads {
    /// Notes the head of `level`, which started waiting at `queued_at`; true when no other
    /// head matters (strict priorities: the first wins).
    fn consider(&mut self, level: usize, queued_at: Instant, strict: bool) -> bool {
        self.top.get_or_insert(level);
        if strict {
            return true;
        }
        if self.oldest.is_none_or(|(_, at)| queued_at < at) {
            self.oldest = Some((level, queued_at));
        }
        false
    }

    /// The oldest head's level if it has waited `aging`, else the highest priority's. The
    /// clock is read only to age a head: never with strict priorities (`oldest` empty).
    fn choose(&self, aging: Duration, now: Option<Instant>) -> Option<usize> {
        let aged = |at| now.unwrap_or_else(Instant::now).saturating_duration_since(at) >= aging;
        match self.oldest {
            Some((level, at)) if aged(at) => Some(level),
            _ => self.top,
        }
    }
}

/// Whether `entry` is its slot's live one, with fairness on: the newest pushed, and not handed
/// out since (a level's `fifo` keeps handed-out entries until they reach its front).
fn live<T>(slots: &[Slot<T>], entry: &Entry) -> bool {
    let slot = &slots[entry.slot as usize];
    slot.generation == entry.generation && slot.dirty && !slot.processing
}

impl<T> Fair<T> {
    /// `item`'s fairness key. The extractor is user code run under the queue's lock: its panic
    /// is caught (it would lose other callers' buffered adds and leave a slot half filled),
    /// logged and counted, and the item goes to the default key's group.
    fn key_of(&mut self, item: &T) -> FairnessKey {
        crate::panic::catch(|| (self.config.key)(item)).unwrap_or_else(|panic| {
            self.key_panics += 1;
            tracing::error!(%panic, "a fairness key extractor panicked; the item takes the default key");
            FairnessKey::new()
        })
    }

    /// Moves the ready counts of `flow` and its first-level group by `delta`.
    fn count_ready(&mut self, flow: u32, delta: isize) {
        let top = self.groups.top_of(flow) as usize;
        let groups = &mut self.groups.groups;
        groups[flow as usize].ready = groups[flow as usize].ready.wrapping_add_signed(delta);
        groups[top].top_ready = groups[top].top_ready.wrapping_add_signed(delta);
    }

    /// An item of `flow` was handed out.
    fn popped(&mut self, flow: u32) {
        if !self.count {
            return;
        }
        self.count_ready(flow, -1);
        if let Some(cap) = self.config.max_in_flight {
            let top = self.groups.top_of(flow);
            let group = &mut self.groups.groups[top as usize];
            group.in_flight += 1;
            if group.in_flight == cap {
                self.capped.push(top);
            }
        }
    }

    /// An item of `flow` is done; returns its first-level group if that left its cap.
    fn finished(&mut self, flow: u32) -> Option<u32> {
        let cap = self.config.max_in_flight?;
        let top = self.groups.top_of(flow);
        let group = &mut self.groups.groups[top as usize];
        group.in_flight -= 1;
        if group.in_flight + 1 != cap {
            return None;
        }
        self.capped.retain(|&g| g != top);
        Some(top)
    }
}

/// Gives back a vector's spare memory when it holds less than a quarter of its capacity.
fn shrink<V>(v: &mut Vec<V>) {
    if v.capacity() > 4 * v.len() + SWEEP_SLACK {
        v.shrink_to(2 * v.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGING: Duration = Duration::from_secs(60);

    /// A queue with a fixed hash per item, as the caller would compute it.
    struct Q(Queue<&'static str>);

    impl Q {
        fn hash(s: &str) -> u64 {
            s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            })
        }
        fn add(&mut self, s: &'static str, p: i32) -> Added {
            self.0.add(s, Self::hash(s), Priority(p), Instant::now())
        }
        fn pop(&mut self) -> Option<&'static str> {
            self.0.pop(AGING, None, false).map(|p| p.item)
        }
        fn done(&mut self, s: &'static str) -> Finished {
            self.0.done(&s, Self::hash(s)).0
        }
    }

    #[test]
    fn invariants_hold_through_a_hold_and_readd() {
        let mut q = Q(Queue::new());
        assert_eq!(q.add("a", 0), Added::Queued(Priority::NORMAL));
        assert_eq!(q.add("a", 0), Added::Deduplicated);
        assert_eq!(q.pop(), Some("a"));
        assert_eq!(q.0.len(), 0);
        assert_eq!(q.add("a", 0), Added::Deferred);
        assert_eq!(q.0.len(), 0, "a held item is not ready");
        assert_eq!(q.done("a"), Finished::Requeued(Priority::NORMAL));
        assert_eq!(q.0.len(), 1);
        assert_eq!(q.done("a"), Finished::NotProcessing, "a queued item is not processing");
        assert_eq!(q.0.len(), 1);
        assert_eq!(q.pop(), Some("a"));
        assert_eq!(q.done("a"), Finished::Released);
        assert_eq!(q.0.processing(), 0);
        assert_eq!(q.0.index.len(), 1, "a dead entry, until a sweep");
        q.0.sweep();
        assert!(q.0.index.is_empty());
        assert!(q.0.slots.is_empty(), "every slot is given back");
    }

    #[test]
    fn dead_entries_are_swept_and_memory_returns() {
        let mut q = Queue::new();
        let t = Instant::now();
        let h = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // A burst of distinct items, then the same few over and over: a re-added item
        // often lands in the slot its dead entry names.
        for i in (0..50_000u64).chain((0..50_000).map(|i| i % 3)) {
            q.add(i, h(i), Priority::NORMAL, t);
            let p = q.pop(AGING, None, false).unwrap();
            assert_eq!(q.done(&p.item, h(p.item)).0, Finished::Released);
            assert!(q.index.len() < 2 * q.live + SWEEP_SLACK + 1, "swept in time");
        }
        assert!(q.index.len() <= SWEEP_SLACK, "{}", q.index.len());
        assert!(q.slots.len() <= 1, "free slots given back: {}", q.slots.len());
        q.sweep();
        assert!(q.index.is_empty());
        // Lookups stay exact after sweeps: a live item is found, a released one is not.
        q.add(7, h(7), Priority::NORMAL, t);
        assert_eq!(q.add(7, h(7), Priority::NORMAL, t), Added::Deduplicated);
        assert_eq!(q.done(&7, h(7)).0, Finished::NotProcessing);
    }

    #[test]
    fn strict_priorities_serve_the_highest_live_head_through_stale_and_emptied_levels() {
        // Aging off: `pop` picks the top level without the clock, skipping stale entries (a
        // raised item's old one) and levels that empty as it goes.
        let mut q = Queue::new();
        let (t, h) = (Instant::now(), Q::hash);
        let add = |q: &mut Queue<&str>, s, p| q.add(s, h(s), Priority(p), t);
        let pop = |q: &mut Queue<&'static str>| q.pop(Duration::MAX, None, false).map(|p| p.item);
        add(&mut q, "a", -100);
        add(&mut q, "b", -100);
        add(&mut q, "c", 100);
        add(&mut q, "a", 50);
        add(&mut q, "d", 0);
        assert_eq!(pop(&mut q), Some("c"));
        assert_eq!(pop(&mut q), Some("a"), "raised to 50: its LOW entry is stale");
        assert_eq!(pop(&mut q), Some("d"));
        assert_eq!(pop(&mut q), Some("b"), "the stale head of LOW skipped");
        assert_eq!(pop(&mut q), None);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_raised_item_leaves_a_stale_entry_that_pop_skips() {
        let mut q = Q(Queue::new());
        assert_eq!(q.add("a", -100), Added::Queued(Priority::LOW));
        assert_eq!(q.add("b", -100), Added::Queued(Priority::LOW));
        assert_eq!(q.add("a", 0), Added::Raised { from: Priority::LOW, to: Priority::NORMAL });
        assert_eq!(q.add("a", -100), Added::Deduplicated, "a lower priority changes nothing");
        assert_eq!(q.0.len(), 2);
        assert_eq!(q.0.len_by_priority(), vec![(Priority::NORMAL, 1), (Priority::LOW, 1)]);
        assert_eq!(q.pop(), Some("a"));
        assert_eq!(q.pop(), Some("b"), "a's stale low entry is skipped");
        assert_eq!(q.pop(), None);
        assert_eq!(q.0.levels.len(), 1, "emptied levels go, but NORMAL's");
        assert_eq!(q.0.occupied, 0);
    }

    /// A fair queue by the item's first part ("ns/name"), counting (as with metrics).
    fn fair_queue() -> Q {
        let key: super::super::fairness::FairnessFn<&'static str> =
            std::sync::Arc::new(|s: &&str| {
                super::super::FairnessKey::new().level(s.split('/').next())
            });
        let config = Fairness { key, label: None, max_in_flight: Some(2) };
        Q(Queue::with_fairness(Some(config), true))
    }

    #[test]
    fn aging_promotes_only_the_aged_items_and_serves_them_fairly() {
        // Five LOW items of a that aged, b's LOW item that did not, and c's NORMAL ones: a's
        // join NORMAL's round-robin and take turns with c; b's waits its turn at LOW.
        let key: super::super::fairness::FairnessFn<&'static str> =
            std::sync::Arc::new(|s: &&str| {
                super::super::FairnessKey::new().level(s.split('/').next())
            });
        let config = Fairness { key, label: None, max_in_flight: None };
        let mut q = Queue::with_fairness(Some(config), false);
        let (t0, h) = (Instant::now(), Q::hash);
        let aging = Duration::from_secs(1);
        for s in ["a/1", "a/2", "a/3", "a/4", "a/5"] {
            q.add(s, h(s), Priority::LOW, t0);
        }
        let t1 = t0 + Duration::from_millis(1500);
        q.add("b/1", h("b/1"), Priority::LOW, t1);
        for s in ["c/1", "c/2", "c/3"] {
            q.add(s, h(s), Priority::NORMAL, t1);
        }
        let t2 = t0 + Duration::from_secs(2);
        let mut order = Vec::new();
        while let Some(p) = q.pop(aging, Some(t2), false) {
            order.push((p.item, p.priority));
        }
        let items: Vec<&str> = order.iter().map(|(item, _)| *item).collect();
        assert_eq!(
            items,
            ["c/1", "a/1", "c/2", "a/2", "c/3", "a/3", "a/4", "a/5", "b/1"],
            "only aged items are promoted, in turns with the top priority's"
        );
        assert!(
            order.iter().all(|(item, p)| (*p == Priority::NORMAL) == item.starts_with('c')),
            "a promoted item keeps its own priority: {order:?}"
        );
        // A promoted item raised to a priority at or under the one it was promoted to keeps
        // its place; above it, it moves.
        for s in ["a/1", "a/2", "c/1"] {
            q.done(&s, h(s));
        }
        q.add("a/1", h("a/1"), Priority::LOW, t0);
        q.add("a/2", h("a/2"), Priority::LOW, t0);
        q.add("c/1", h("c/1"), Priority::NORMAL, t2);
        let t3 = t2 + Duration::from_secs(2);
        assert_eq!(q.pop(aging, Some(t3), false).map(|p| p.item), Some("c/1"));
        assert_eq!(
            q.add("a/2", h("a/2"), Priority::NORMAL, t3),
            Added::Raised { from: Priority::LOW, to: Priority::NORMAL }
        );
        assert_eq!(
            q.add("a/2", h("a/2"), Priority(100), t3),
            Added::Raised { from: Priority::NORMAL, to: Priority(100) }
        );
        assert_eq!(
            q.len_by_priority(),
            [(Priority(100), 1), (Priority::NORMAL, 1)],
            "raised above its promotion, a/2 moved; a/1 stayed"
        );
        let rest: Vec<_> =
            std::iter::from_fn(|| q.pop(aging, Some(t3), false).map(|p| p.item)).collect();
        assert_eq!(rest, ["a/1", "a/2"], "a/1 aged again, and goes ahead of a/2 there");
        assert_eq!(q.len(), 0);
    }

    fn alive(q: &Q) -> usize {
        q.0.groups().expect("fair").alive()
    }

    #[test]
    fn namespace_churn_frees_groups_and_reuses_them_safely() {
        let mut q = fair_queue();
        let names: Vec<&'static str> = (0..5000).map(|i| &*format!("ns-{i}/a").leak()).collect();
        for &name in &names {
            q.add(name, 0);
            assert_eq!(q.pop(), Some(name));
            assert_eq!(q.done(name), Finished::Released);
        }
        assert_eq!(alive(&q), 0, "every namespace's group went with its last item");
        // A stale entry (a raised item's old one) keeps its flow: a new namespace must not
        // take its number while the entry is in the LOW round-robin.
        q.add("x/1", -100);
        q.add("y/1", -100);
        q.add("x/1", 0);
        assert_eq!(q.pop(), Some("x/1"));
        assert_eq!(q.done("x/1"), Finished::Released);
        assert_eq!(alive(&q), 2, "x is held by its stale LOW entry");
        q.add("z/1", -100);
        q.add("z/2", -100);
        assert_eq!(q.pop(), Some("y/1"));
        assert_eq!(q.pop(), Some("z/1"));
        assert_eq!(q.pop(), Some("z/2"));
        for s in ["y/1", "z/1", "z/2"] {
            assert_eq!(q.done(s), Finished::Released);
        }
        assert_eq!(alive(&q), 0);
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn a_priority_that_empties_and_refills_makes_no_node_per_group_ever_seen() {
        // 5,000 namespaces at once, then none: freed numbers go to the next new groups, the
        // highest first. A LOW item, alone at its priority, then comes and goes 50 times.
        let mut q = fair_queue();
        let names: Vec<&'static str> = (0..5000).map(|i| &*format!("ns-{i}/a").leak()).collect();
        for &name in &names {
            q.add(name, 0);
        }
        for &name in &names {
            assert_eq!(q.pop(), Some(name));
            assert_eq!(q.done(name), Finished::Released);
        }
        assert_eq!(alive(&q), 0);
        let made = || super::super::fairness::NODES_MADE.with(std::cell::Cell::get);
        let before = made();
        for _ in 0..50 {
            q.add("late/1", -100);
            assert_eq!(q.pop(), Some("late/1"));
            assert_eq!(q.done("late/1"), Finished::Released);
        }
        let nodes = made() - before;
        assert!(nodes <= 5001, "one tree's nodes at most, not one per refill: {nodes}");
    }

    #[test]
    fn a_parked_groups_oldest_item_does_not_keep_every_later_entry() {
        let mut q = fair_queue();
        for s in ["hung/1", "hung/2", "hung/3"] {
            q.add(s, 0);
        }
        assert_eq!(q.pop(), Some("hung/1"));
        assert_eq!(q.pop(), Some("hung/2"), "the cap is 2: hung/3 waits at the front");
        let names: Vec<&'static str> =
            (0..10_000).map(|i| &*format!("ns-{}/a", i % 64).leak()).collect();
        for &name in &names {
            q.add(name, 0);
            assert_eq!(q.pop(), Some(name));
            assert_eq!(q.done(name), Finished::Released);
        }
        let fifo = q.0.levels[0].fifo.len();
        assert!(fifo <= 2 + SWEEP_SLACK + 1, "handed-out entries are dropped: {fifo}");
        assert_eq!(q.0.len(), 1);
        assert_eq!(q.done("hung/1"), Finished::Released);
        assert_eq!(q.pop(), Some("hung/3"));
    }

    #[test]
    fn an_item_added_while_held_comes_back_at_its_highest_priority() {
        let mut q = Q(Queue::new());
        q.add("a", -100);
        assert_eq!(q.pop(), Some("a"));
        assert_eq!(q.add("a", -100), Added::Deferred);
        assert_eq!(q.add("a", 50), Added::Deduplicated);
        q.add("b", 0);
        assert_eq!(q.done("a"), Finished::Requeued(Priority(50)));
        assert_eq!(q.pop(), Some("a"));
    }
}
