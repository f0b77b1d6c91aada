//! Property test: random operations against a small reference model of the queue contract,
//! priorities, aging and fairness included.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use ctrlkit::workqueue::{FairnessKey, ItemFastSlowRateLimiter, Priority, WorkQueue};
use futures::FutureExt;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Add(u8, i32),
    AddAfter(u8, u64, i32),
    Get,
    Done(usize),
    Advance(u64),
    Len,
    ShutDown,
}

/// Aging period of the queue under test, short enough for `Advance` to cross it.
const AGING_MS: u64 = 30;

fn priority() -> impl Strategy<Value = i32> {
    prop_oneof![3 => Just(0), 2 => Just(-100), 1 => Just(5)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..8, priority()).prop_map(|(k, p)| Op::Add(k, p)),
        3 => (0u8..8, 0u64..50, priority()).prop_map(|(k, d, p)| Op::AddAfter(k, d, p)),
        6 => Just(Op::Get),
        5 => (0usize..8).prop_map(Op::Done),
        // Round steps too, so that waits land exactly on the aging period.
        2 => prop_oneof![0u64..40, Just(10), Just(15)].prop_map(Op::Advance),
        1 => Just(Op::Len),
        1 => Just(Op::ShutDown),
    ]
}

/// A ready item: its priority, the priority whose line holds it (its own, or in the fair runs
/// a higher one aging moved it to), when it became dirty, and its place in that line.
#[derive(Debug, Clone, Copy)]
struct Ready {
    k: u8,
    prio: i32,
    level: i32,
    queued_at: u64,
    order: i64,
}

/// Item `k`'s fairness key in the fair runs: two levels, `k % 2` then `k % 4`, so that the
/// first-level group 0 holds the flows 0 and 2, and group 1 the flows 1 and 3.
fn fairness_key(k: &u8) -> FairnessKey {
    FairnessKey::new().level(k % 2).level(k % 4)
}

/// One priority's round-robin: first-level groups in rotation, each with its flows in
/// rotation, each flow with its entries (item, push number) in order, stale ones included
/// (an entry is live while it is its item's newest and the item is ready).
#[derive(Default, Debug)]
struct Rotation {
    root: VecDeque<u8>,
    flows: HashMap<u8, VecDeque<u8>>,
    entries: HashMap<u8, VecDeque<(u8, i64)>>,
    /// Per flow: how many of its first entries aging moved in from a lower priority.
    aged: HashMap<u8, usize>,
}

/// The contract, written as plainly as possible.
#[derive(Default)]
struct Model {
    /// Fair runs: each priority's round-robin, and each item's newest push number.
    fair: bool,
    rotations: BTreeMap<i32, Rotation>,
    pushes: HashMap<u8, i64>,
    pushed: i64,
    ready: Vec<Ready>,
    /// item → (priority, queued at): added and not handed out since.
    dirty: HashMap<u8, (i32, u64)>,
    processing: Vec<u8>,
    /// item → (deadline ms, insertion sequence, priority)
    waiting: BTreeMap<u8, (u64, u64, i32)>,
    seq: u64,
    order: i64,
    /// Places at the front of a line (an aged item moved up): counting down from zero.
    front: i64,
    now: u64,
    shut_down: bool,
    /// When the first add since the queue's lock was last taken came: the add buffer's batch,
    /// whose items' waits count from then (see `workqueue::add_buffer`).
    batch: Option<u64>,
}

impl Model {
    fn push_ready(&mut self, k: u8, prio: i32, queued_at: u64) {
        self.order += 1;
        self.ready.push(Ready { k, prio, level: prio, queued_at, order: self.order });
        self.push_entry(k, prio, false);
    }
    /// The fair runs' side of a push: an entry at the back of its flow (an aged one: behind
    /// the flow's aged ones, ahead of the rest), which joins the back of its group's rotation
    /// if it had no entry, as the group does the root's.
    fn push_entry(&mut self, k: u8, prio: i32, aged: bool) {
        if !self.fair {
            return;
        }
        self.pushed += 1;
        let push = self.pushed;
        self.pushes.insert(k, push);
        let (top, flow) = (k % 2, k % 4);
        let rotation = self.rotations.entry(prio).or_default();
        let entries = rotation.entries.entry(flow).or_default();
        if aged {
            let at = rotation.aged.entry(flow).or_default();
            entries.insert(*at, (k, push));
            *at += 1;
        } else {
            entries.push_back((k, push));
        }
        if entries.len() == 1 {
            let flows = rotation.flows.entry(top).or_default();
            flows.push_back(flow);
            if flows.len() == 1 {
                rotation.root.push_back(top);
            }
        }
    }
    /// A priority's live entries went to zero: its rotation holds stale entries only, and goes.
    fn forget_rotation_if_idle(&mut self, prio: i32) {
        if self.fair && !self.ready.iter().any(|r| r.level == prio) {
            self.rotations.remove(&prio);
        }
    }
    /// The item the round-robin of `prio` hands out: each turn takes the next first-level
    /// group, its next flow, and that flow's first live entry (stale ones are dropped in the
    /// same turn); the group and flow served go to the back of their rotations, or leave them
    /// once empty.
    fn take_fair(&mut self, prio: i32) -> u8 {
        let rotation = self.rotations.get_mut(&prio).expect("a priority with ready items");
        loop {
            let top = *rotation.root.front().expect("a live entry");
            let flows = rotation.flows.get_mut(&top).unwrap();
            let flow = *flows.front().unwrap();
            let entries = rotation.entries.get_mut(&flow).unwrap();
            let (k, push) = entries.pop_front().unwrap();
            let aged = rotation.aged.entry(flow).or_default();
            *aged = aged.saturating_sub(1);
            let live = self.pushes.get(&k) == Some(&push)
                && self.ready.iter().any(|r| r.k == k && r.level == prio);
            flows.pop_front();
            if !entries.is_empty() {
                if live {
                    flows.push_back(flow);
                } else {
                    flows.push_front(flow);
                }
            }
            rotation.root.pop_front();
            if !flows.is_empty() {
                if live {
                    rotation.root.push_back(top);
                } else {
                    rotation.root.push_front(top);
                }
            }
            if live {
                return k;
            }
        }
    }
    /// An add through the buffer: its wait starts with its batch.
    fn add(&mut self, k: u8, p: i32) {
        if self.shut_down {
            return;
        }
        let at = *self.batch.get_or_insert(self.now);
        self.add_at(k, p, at);
    }
    /// Something that takes the queue's lock, which applies the batch.
    fn lock(&mut self) {
        self.batch = None;
    }
    fn add_at(&mut self, k: u8, p: i32, at: u64) {
        match self.dirty.get_mut(&k) {
            Some((prio, _)) if p <= *prio => {}
            Some((prio, _)) => {
                // Raised: it moves to the back of the higher priority's line, unless aging
                // moved it to that priority's or a higher one already.
                *prio = p;
                self.order += 1;
                let order = self.order;
                if let Some(r) = self.ready.iter_mut().find(|r| r.k == k) {
                    r.prio = p;
                    if p > r.level {
                        let from = std::mem::replace(&mut r.level, p);
                        r.order = order;
                        self.push_entry(k, p, false);
                        self.forget_rotation_if_idle(from);
                    }
                }
            }
            None => {
                self.dirty.insert(k, (p, at));
                if !self.processing.contains(&k) {
                    self.push_ready(k, p, at);
                }
            }
        }
    }
    fn add_after(&mut self, k: u8, d: u64, p: i32) {
        if self.shut_down {
            return;
        }
        if d == 0 {
            return self.add(k, p);
        }
        self.lock();
        let deadline = self.now + d;
        match self.waiting.get_mut(&k) {
            Some((current, _, prio)) if *current <= deadline => *prio = (*prio).max(p),
            Some((current, seq, prio)) => {
                self.seq += 1;
                (*current, *seq, *prio) = (deadline, self.seq, (*prio).max(p));
            }
            None => {
                self.seq += 1;
                self.waiting.insert(k, (deadline, self.seq, p));
            }
        }
    }
    fn promote(&mut self) {
        let mut due: Vec<_> = self
            .waiting
            .iter()
            .filter(|(_, (d, _, _))| *d <= self.now)
            .map(|(k, (d, seq, p))| ((*d, *seq), *k, *p))
            .collect();
        due.sort();
        for (_, k, p) in due {
            self.waiting.remove(&k);
            self.add_at(k, p, self.now);
        }
    }
    /// The ready item to hand out: each priority's first in line is a candidate; one that has
    /// waited `AGING_MS` makes the oldest candidate win, else the highest priority does.
    fn next(&self) -> Option<usize> {
        let mut heads: BTreeMap<i32, usize> = BTreeMap::new();
        for (i, r) in self.ready.iter().enumerate() {
            let head = heads.entry(r.prio).or_insert(i);
            if r.order < self.ready[*head].order {
                *head = i;
            }
        }
        let aged = heads.values().any(|&i| self.now - self.ready[i].queued_at >= AGING_MS);
        if aged {
            heads.values().copied().min_by_key(|&i| (self.ready[i].queued_at, -self.ready[i].prio))
        } else {
            heads.values().next_back().copied()
        }
    }
    /// The fair runs: each item of a priority below the highest one with ready items that has
    /// waited `AGING_MS` moves to that one's round-robin (ahead of its flow's items that did
    /// not age) and to the front of its line; each lower priority's line is read from its
    /// front, highest priority first, while its first item has aged.
    fn age_fair(&mut self) {
        let Some(top) = self.ready.iter().map(|r| r.level).max() else { return };
        let mut lower: Vec<i32> = self.ready.iter().map(|r| r.level).filter(|&l| l < top).collect();
        lower.sort_unstable_by(|a, b| b.cmp(a));
        lower.dedup();
        for level in lower {
            loop {
                let first = self
                    .ready
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.level == level)
                    .min_by_key(|(_, r)| r.order)
                    .map(|(i, _)| i);
                let Some(i) = first.filter(|&i| self.now - self.ready[i].queued_at >= AGING_MS)
                else {
                    break;
                };
                self.front -= 1;
                let r = &mut self.ready[i];
                (r.level, r.order) = (top, self.front);
                let k = r.k;
                self.push_entry(k, top, true);
                self.forget_rotation_if_idle(level);
            }
        }
    }
    /// `Some(result)` when `get` must return at once, `None` when it must wait.
    fn get(&mut self) -> Option<Option<(u8, i32)>> {
        self.lock();
        self.promote();
        if self.fair {
            self.age_fair();
        }
        if let Some(i) = self.next() {
            let i = match self.fair {
                false => i,
                true => {
                    // The highest priority with ready items, aged ones moved in; its
                    // round-robin picks the item.
                    let top = self.ready.iter().map(|r| r.level).max().unwrap();
                    let k = self.take_fair(top);
                    self.ready.iter().position(|r| r.k == k).unwrap()
                }
            };
            let Ready { k, level, prio, .. } = self.ready.remove(i);
            self.forget_rotation_if_idle(level);
            self.dirty.remove(&k);
            self.processing.push(k);
            return Some(Some((k, prio)));
        }
        if self.shut_down { Some(None) } else { None }
    }
    fn done(&mut self, k: u8) {
        self.lock();
        self.processing.retain(|p| *p != k);
        if let Some(&(prio, queued_at)) = self.dirty.get(&k) {
            self.push_ready(k, prio, queued_at);
        }
    }
}

fn run(ops: Vec<Op>, fair: bool) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let builder = WorkQueue::builder()
            .rate_limiter(ItemFastSlowRateLimiter::new(Duration::ZERO, Duration::ZERO, 0))
            .aging(Duration::from_millis(AGING_MS));
        let q: WorkQueue<u8> =
            if fair { builder.fairness(fairness_key).build() } else { builder.build() };
        let mut m = Model { fair, ..Model::default() };
        for op in ops {
            match op {
                Op::Add(k, p) => {
                    q.add_with_priority(k, Priority(p));
                    m.add(k, p);
                }
                Op::AddAfter(k, d, p) => {
                    q.add_after_with_priority(k, Duration::from_millis(d), Priority(p));
                    m.add_after(k, d, p);
                }
                Op::Get => {
                    let got = q.get_with_priority().now_or_never();
                    let got = got.map(|g| g.map(|(k, p)| (k, p.0)));
                    let want = m.get();
                    prop_assert_eq!(got, want, "get disagrees with the model");
                    if let Some(Some((k, _))) = got {
                        let holders = m.processing.iter().filter(|p| **p == k).count();
                        prop_assert_eq!(holders, 1, "item {} held by two workers", k);
                    }
                }
                Op::Done(i) => {
                    // Done for a held item, or (index past the end) for an item nobody holds.
                    let k = m.processing.get(i).copied().unwrap_or(i as u8 + 100);
                    q.done(&k);
                    m.done(k);
                }
                Op::Advance(ms) => {
                    tokio::time::advance(Duration::from_millis(ms)).await;
                    m.now += ms;
                }
                Op::Len => {
                    m.lock();
                    m.promote();
                    prop_assert_eq!(q.len(), m.ready.len());
                }
                Op::ShutDown => {
                    q.shut_down();
                    m.lock();
                    m.shut_down = true;
                    m.waiting.clear();
                }
            }
        }
        // No item lost: after shut down, everything accepted comes out.
        q.shut_down();
        m.lock();
        m.shut_down = true;
        m.waiting.clear();
        loop {
            for k in std::mem::take(&mut m.processing) {
                q.done(&k);
                m.done(k);
            }
            let got = q.get_with_priority().now_or_never();
            prop_assert_eq!(got.map(|g| g.map(|(k, p)| (k, p.0))), m.get());
            if got == Some(None) {
                break;
            }
        }
        prop_assert!(m.dirty.is_empty(), "model kept items: {:?}", m.dirty);
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    #[test]
    fn queue_matches_the_reference_model(ops in prop::collection::vec(op(), 0..120)) {
        run(ops, false)?;
    }

    #[test]
    fn a_fair_queue_matches_the_reference_model(ops in prop::collection::vec(op(), 0..120)) {
        run(ops, true)?;
    }
}
