//! Property test: random operations against a small reference model of the queue contract,
//! priorities, aging and fairness included; in the last run also an in-flight cap, the fair
//! retry bucket (the default limiter's 10 qps, burst 100, spent first) and groups that come
//! and go (freed with their last item, their numbers reused).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use ctrlkit::workqueue::{FairnessKey, ItemFastSlowRateLimiter, Priority, WorkQueue};
use futures::FutureExt;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Add(u8, i32),
    AddAfter(u8, u64, i32),
    AddRateLimited(u8, i32),
    Forget(u8),
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

/// The last run's operations: more keys (more groups to free and make again), retries, and
/// longer steps too, so that the bucket's tokens come back.
fn op_with_retries() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..12, priority()).prop_map(|(k, p)| Op::Add(k, p)),
        2 => (0u8..12, 0u64..50, priority()).prop_map(|(k, d, p)| Op::AddAfter(k, d, p)),
        4 => (0u8..12, priority()).prop_map(|(k, p)| Op::AddRateLimited(k, p)),
        1 => (0u8..12).prop_map(Op::Forget),
        7 => Just(Op::Get),
        6 => (0usize..8).prop_map(Op::Done),
        3 => prop_oneof![0u64..40, Just(10), Just(100)].prop_map(Op::Advance),
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

/// The shape of the fair runs' keys: item `k`'s fairness key is `k % tops` then
/// `k % flows` (`flows` a multiple of `tops`), so that with 2 and 4 the first-level group 0
/// holds the flows 0 and 2, and group 1 the flows 1 and 3.
#[derive(Debug, Clone, Copy, Default)]
struct Shape {
    tops: u8,
    flows: u8,
}

impl Shape {
    fn key(self, k: &u8) -> FairnessKey {
        FairnessKey::new().level(k % self.tops).level(k % self.flows)
    }
    fn top(self, k: u8) -> u8 {
        k % self.tops
    }
    fn flow(self, k: u8) -> u8 {
        k % self.flows
    }
}

/// The fair bucket's tokens: client-go's overall bucket of 10 qps, burst 100.
#[derive(Debug, Clone, Copy)]
struct Tokens {
    tokens: f64,
    last: Option<u64>,
}

const QPS: f64 = 10.0;
const BURST: f64 = 100.0;

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
    /// First-level groups at their in-flight cap, out of the rotation until one is done.
    parked: Vec<u8>,
}

impl Rotation {
    /// An entry at the back of its flow (an aged one: behind the flow's aged ones, ahead of
    /// the rest), which joins the back of its group's rotation if it had no entry, as the
    /// group does the root's.
    fn push(&mut self, shape: Shape, k: u8, push: i64, aged: bool) {
        let (top, flow) = (shape.top(k), shape.flow(k));
        let entries = self.entries.entry(flow).or_default();
        if aged {
            let at = self.aged.entry(flow).or_default();
            entries.insert(*at, (k, push));
            *at += 1;
        } else {
            entries.push_back((k, push));
        }
        if entries.len() == 1 {
            let flows = self.flows.entry(top).or_default();
            flows.push_back(flow);
            if flows.len() == 1 {
                self.root.push_back(top);
            }
        }
    }
    /// The next item: each turn takes the next first-level group (parking it instead when
    /// `capped` says it is full), its next flow, and that flow's first entry, dropping those
    /// `live` refuses in the same turn; the group and flow served go to the back of their
    /// rotations, or leave them once empty. `None` when no group is left in rotation.
    fn take(&mut self, live: impl Fn(u8, i64) -> bool, capped: impl Fn(u8) -> bool) -> Option<u8> {
        loop {
            let top = *self.root.front()?;
            if capped(top) {
                self.root.pop_front();
                self.parked.push(top);
                continue;
            }
            let flows = self.flows.get_mut(&top).unwrap();
            let flow = *flows.front().unwrap();
            let entries = self.entries.get_mut(&flow).unwrap();
            let (k, push) = entries.pop_front().unwrap();
            let aged = self.aged.entry(flow).or_default();
            *aged = aged.saturating_sub(1);
            let live = live(k, push);
            flows.pop_front();
            if !entries.is_empty() {
                if live {
                    flows.push_back(flow);
                } else {
                    flows.push_front(flow);
                }
            }
            self.root.pop_front();
            if !flows.is_empty() {
                if live {
                    self.root.push_back(top);
                } else {
                    self.root.push_front(top);
                }
            }
            if live {
                return Some(k);
            }
        }
    }
    /// A group below its cap again goes to the back of the rotation, if it was parked.
    fn unpark(&mut self, top: u8) {
        if let Some(i) = self.parked.iter().position(|&g| g == top) {
            self.parked.swap_remove(i);
            self.root.push_back(top);
        }
    }
}

/// The contract, written as plainly as possible.
#[derive(Default)]
struct Model {
    /// Fair runs: each priority's round-robin, and each item's newest push number.
    fair: bool,
    shape: Shape,
    /// The in-flight cap per first-level group, and each group's items handed out.
    cap: Option<usize>,
    in_flight: HashMap<u8, usize>,
    /// The fair retry bucket (the last run): its tokens, its lines, and each retry waiting
    /// there with its priority.
    tokens: Option<Tokens>,
    bucket: Rotation,
    /// Retries waiting at the bucket: item → (priority, push number of its live entry).
    at_bucket: HashMap<u8, (i32, i64)>,
    /// Failures per item since it was last forgotten: the per-item backoff's exponent.
    failures: HashMap<u8, u32>,
    rotations: BTreeMap<i32, Rotation>,
    pushes: HashMap<u8, i64>,
    pushed: i64,
    ready: Vec<Ready>,
    /// item → (priority, queued at): added and not handed out since.
    dirty: HashMap<u8, (i32, u64)>,
    processing: Vec<u8>,
    /// item → (deadline ms, insertion sequence, priority, gated: a retry for the bucket)
    waiting: BTreeMap<u8, (u64, u64, i32, bool)>,
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
    /// The fair runs' side of a push (see `Rotation::push`).
    fn push_entry(&mut self, k: u8, prio: i32, aged: bool) {
        if !self.fair {
            return;
        }
        self.pushed += 1;
        let push = self.pushed;
        self.pushes.insert(k, push);
        self.rotations.entry(prio).or_default().push(self.shape, k, push, aged);
    }
    /// A priority's live entries went to zero: its rotation holds stale entries only, and goes.
    fn forget_rotation_if_idle(&mut self, prio: i32) {
        if self.fair && !self.ready.iter().any(|r| r.level == prio) {
            self.rotations.remove(&prio);
        }
    }
    /// The item the round-robin of `prio` hands out (see `Rotation::take`): an entry is live
    /// while it is its item's newest and the item is ready there; a group is full at the cap.
    fn take_fair(&mut self, prio: i32) -> Option<u8> {
        let Self { rotations, pushes, ready, in_flight, cap, .. } = self;
        rotations.get_mut(&prio)?.take(
            |k, push| {
                pushes.get(&k) == Some(&push) && ready.iter().any(|r| r.k == k && r.level == prio)
            },
            |top| cap.is_some_and(|cap| in_flight.get(&top).copied().unwrap_or(0) >= cap),
        )
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
        self.wait(k, d, p, false);
    }
    /// Item `k` waits `d` ms (then, `gated`, its turn for a token) before its add at `p`,
    /// keeping an earlier deadline (and its gate) and a higher priority it has.
    fn wait(&mut self, k: u8, d: u64, p: i32, gated: bool) {
        let deadline = self.now + d;
        match self.waiting.get_mut(&k) {
            Some((current, _, prio, _)) if *current <= deadline => *prio = (*prio).max(p),
            Some((current, seq, prio, gate)) => {
                self.seq += 1;
                (*current, *seq, *prio, *gate) = (deadline, self.seq, (*prio).max(p), gated);
            }
            None => {
                self.seq += 1;
                self.waiting.insert(k, (deadline, self.seq, p, gated));
            }
        }
    }
    /// A retry: one more failure, and a wait of the per-item backoff (5 ms doubling, at most
    /// 1,000 s), then the bucket's line (the last run: the fair bucket is on).
    fn add_rate_limited(&mut self, k: u8, p: i32) {
        let failures = self.failures.entry(k).or_default();
        let before = *failures;
        *failures += 1;
        self.lock();
        if self.shut_down {
            return;
        }
        let backoff = 5u64.checked_shl(before).filter(|_| before < 40).unwrap_or(u64::MAX);
        self.wait(k, backoff.min(1_000_000), p, true);
    }
    fn promote(&mut self) {
        if self.waiting.is_empty() && self.at_bucket.is_empty() {
            return;
        }
        let mut due: Vec<_> = self
            .waiting
            .iter()
            .filter(|(_, (d, _, _, _))| *d <= self.now)
            .map(|(k, (d, seq, p, gated))| ((*d, *seq), *k, *p, *gated))
            .collect();
        due.sort();
        for (_, k, p, gated) in due {
            self.waiting.remove(&k);
            if gated {
                // Its line at the bucket, once: a second one keeps the first's place.
                match self.at_bucket.get_mut(&k) {
                    Some((prio, _)) => *prio = (*prio).max(p),
                    None => {
                        self.pushed += 1;
                        self.at_bucket.insert(k, (p, self.pushed));
                        self.bucket.push(self.shape, k, self.pushed, false);
                    }
                }
            } else {
                // A retry of it at the bucket merges with this earlier add (its place there
                // is skipped when its turn comes).
                let p = self.at_bucket.remove(&k).map_or(p, |(q, _)| p.max(q));
                self.add_at(k, p, self.now);
            }
        }
        let Some(mut tokens) = self.tokens else { return };
        // The bucket refills while its lines hold entries, skipped ones included.
        if self.bucket.entries.values().all(VecDeque::is_empty) {
            return;
        }
        // As the bucket computes it, so that the model's floats match the queue's.
        let last = *tokens.last.get_or_insert(self.now);
        let elapsed = Duration::from_millis(self.now - last).as_secs_f64();
        tokens.tokens = (tokens.tokens + elapsed * QPS).min(BURST);
        tokens.last = Some(self.now.max(last));
        while tokens.tokens >= 1.0 {
            let at_bucket = &self.at_bucket;
            let live = |k, push| at_bucket.get(&k).is_some_and(|&(_, p)| p == push);
            let Some(k) = self.bucket.take(live, |_| false) else { break };
            tokens.tokens -= 1.0;
            let (p, _) = self.at_bucket.remove(&k).unwrap();
            // A later add of it still waiting for its deadline merges with this one.
            let p = self.waiting.remove(&k).map_or(p, |(_, _, q, _)| p.max(q));
            self.add_at(k, p, self.now);
        }
        self.tokens = Some(tokens);
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
        let i = if self.fair {
            self.age_fair();
            // The highest priority with ready items, aged ones moved in; its round-robin picks
            // the item, or when every group there is at its cap, the next priority's that has
            // one below it.
            let top = self.ready.iter().map(|r| r.level).max();
            let levels: Vec<i32> = self.rotations.keys().rev().copied().collect();
            let k = top.into_iter().chain(levels).find_map(|prio| self.take_fair(prio));
            k.map(|k| self.ready.iter().position(|r| r.k == k).unwrap())
        } else {
            self.next()
        };
        if let Some(i) = i {
            let Ready { k, level, prio, .. } = self.ready.remove(i);
            self.forget_rotation_if_idle(level);
            self.dirty.remove(&k);
            self.processing.push(k);
            if self.fair {
                *self.in_flight.entry(self.shape.top(k)).or_default() += 1;
            }
            return Some(Some((k, prio)));
        }
        if self.shut_down && self.ready.is_empty() { Some(None) } else { None }
    }
    /// Ready items a worker may take: those of groups at their cap left out.
    fn available(&self) -> usize {
        let full = |top: u8| {
            self.cap.is_some_and(|cap| self.in_flight.get(&top).copied().unwrap_or(0) >= cap)
        };
        self.ready.iter().filter(|r| !(self.fair && full(self.shape.top(r.k)))).count()
    }
    fn done(&mut self, k: u8) {
        self.lock();
        if !self.processing.contains(&k) {
            return;
        }
        self.processing.retain(|p| *p != k);
        if self.fair {
            let top = self.shape.top(k);
            let in_flight = self.in_flight.entry(top).or_default();
            *in_flight -= 1;
            if self.cap == Some(*in_flight + 1) {
                for rotation in self.rotations.values_mut() {
                    rotation.unpark(top);
                }
            }
        }
        if let Some(&(prio, queued_at)) = self.dirty.get(&k) {
            self.push_ready(k, prio, queued_at);
        }
    }
    fn shut_down(&mut self) {
        self.lock();
        self.shut_down = true;
        self.waiting.clear();
        self.bucket = Rotation::default();
        self.at_bucket.clear();
    }
}

/// Which queue a run checks.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Run {
    /// FIFO within a priority, an explicit limiter without waits.
    Fifo,
    /// Fair by two levels (`k % 2`, `k % 4`), the same limiter.
    Fair,
    /// Fair by (`k % 3`, `k % 6`), one item in flight per first-level group, the default
    /// limiter (so the fair bucket), its burst spent first so that tokens are scarce.
    FairCappedRetries,
}

fn run(ops: Vec<Op>, which: Run) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let builder = WorkQueue::builder().aging(Duration::from_millis(AGING_MS));
        let no_wait = || ItemFastSlowRateLimiter::new(Duration::ZERO, Duration::ZERO, 0);
        let mut m = Model { fair: which != Run::Fifo, ..Model::default() };
        let q: WorkQueue<u8> = match which {
            Run::Fifo => builder.rate_limiter(no_wait()).build(),
            Run::Fair => {
                m.shape = Shape { tops: 2, flows: 4 };
                let shape = m.shape;
                builder.rate_limiter(no_wait()).fairness(move |k| shape.key(k)).build()
            }
            Run::FairCappedRetries => {
                m.shape = Shape { tops: 3, flows: 6 };
                m.cap = Some(1);
                m.tokens = Some(Tokens { tokens: BURST, last: None });
                let shape = m.shape;
                builder.fairness(move |k| shape.key(k)).max_in_flight_per_key(1).build()
            }
        };
        if which == Run::FairCappedRetries {
            // Spend the burst: 100 retries of other keys, due together, handed out in turns.
            for k in 100..200 {
                q.add_rate_limited(k);
                m.add_rate_limited(k, 0);
            }
            tokio::time::advance(Duration::from_millis(5)).await;
            m.now += 5;
            for _ in 0..100 {
                let got = q.get_with_priority().now_or_never().map(|g| g.map(|(k, p)| (k, p.0)));
                prop_assert_eq!(got, m.get(), "the burst's retries");
                let Some(Some((k, _))) = got else { break };
                q.done(&k);
                m.done(k);
            }
        }
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
                Op::AddRateLimited(k, p) => {
                    q.add_rate_limited_with_priority(k, Priority(p));
                    m.add_rate_limited(k, p);
                }
                Op::Forget(k) => {
                    q.forget(&k);
                    m.failures.remove(&k);
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
                    let k = m.processing.get(i).copied().unwrap_or(i as u8 + 200);
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
                    prop_assert_eq!(q.len_available(), m.available(), "len_available");
                }
                Op::ShutDown => {
                    q.shut_down();
                    m.shut_down();
                }
            }
        }
        // No item lost: after shut down, everything accepted comes out.
        q.shut_down();
        m.shut_down();
        loop {
            for k in m.processing.clone() {
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
        run(ops, Run::Fifo)?;
    }

    #[test]
    fn a_fair_queue_matches_the_reference_model(ops in prop::collection::vec(op(), 0..120)) {
        run(ops, Run::Fair)?;
    }

    #[test]
    fn a_capped_fair_queue_with_fair_retries_matches_the_reference_model(
        ops in prop::collection::vec(op_with_retries(), 0..160)
    ) {
        run(ops, Run::FairCappedRetries)?;
    }
}
