//! Property test: random operations against a small reference model of the queue contract,
//! priorities and aging included.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use ctrlkit::workqueue::{ItemFastSlowRateLimiter, Priority, WorkQueue};
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

/// A ready item: its priority, when it became dirty, and when it entered its priority's line.
#[derive(Debug, Clone, Copy)]
struct Ready {
    k: u8,
    prio: i32,
    queued_at: u64,
    order: u64,
}

/// The contract, written as plainly as possible.
#[derive(Default)]
struct Model {
    ready: Vec<Ready>,
    /// item → (priority, queued at): added and not handed out since.
    dirty: HashMap<u8, (i32, u64)>,
    processing: Vec<u8>,
    /// item → (deadline ms, insertion sequence, priority)
    waiting: BTreeMap<u8, (u64, u64, i32)>,
    seq: u64,
    order: u64,
    now: u64,
    shut_down: bool,
    /// When the first add since the queue's lock was last taken came: the add buffer's batch,
    /// whose items' waits count from then (see `workqueue::add_buffer`).
    batch: Option<u64>,
}

impl Model {
    fn push_ready(&mut self, k: u8, prio: i32, queued_at: u64) {
        self.order += 1;
        self.ready.push(Ready { k, prio, queued_at, order: self.order });
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
                // Raised: it moves to the back of the higher priority's line.
                *prio = p;
                self.order += 1;
                let order = self.order;
                if let Some(r) = self.ready.iter_mut().find(|r| r.k == k) {
                    (r.prio, r.order) = (p, order);
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
    /// `Some(result)` when `get` must return at once, `None` when it must wait.
    fn get(&mut self) -> Option<Option<(u8, i32)>> {
        self.lock();
        self.promote();
        if let Some(i) = self.next() {
            let Ready { k, prio, .. } = self.ready.remove(i);
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

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let q: WorkQueue<u8> = WorkQueue::builder()
            .rate_limiter(ItemFastSlowRateLimiter::new(Duration::ZERO, Duration::ZERO, 0))
            .aging(Duration::from_millis(AGING_MS))
            .build();
        let mut m = Model::default();
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
        run(ops)?;
    }
}
