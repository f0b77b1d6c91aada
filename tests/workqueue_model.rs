//! Property test: random operations against a small reference model of the queue contract.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::Duration;

use ctrlkit::workqueue::{ItemFastSlowRateLimiter, WorkQueue};
use futures::FutureExt;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Add(u8),
    AddAfter(u8, u64),
    Get,
    Done(usize),
    Advance(u64),
    Len,
    ShutDown,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..8).prop_map(Op::Add),
        3 => (0u8..8, 0u64..50).prop_map(|(k, d)| Op::AddAfter(k, d)),
        6 => Just(Op::Get),
        5 => (0usize..8).prop_map(Op::Done),
        2 => (0u64..40).prop_map(Op::Advance),
        1 => Just(Op::Len),
        1 => Just(Op::ShutDown),
    ]
}

/// The contract, written as plainly as possible.
#[derive(Default)]
struct Model {
    ready: VecDeque<u8>,
    dirty: HashSet<u8>,
    processing: Vec<u8>,
    /// item → (deadline ms, insertion sequence)
    waiting: BTreeMap<u8, (u64, u64)>,
    seq: u64,
    now: u64,
    shut_down: bool,
}

impl Model {
    fn add(&mut self, k: u8) {
        if self.shut_down || !self.dirty.insert(k) {
            return;
        }
        if !self.processing.contains(&k) {
            self.ready.push_back(k);
        }
    }
    fn add_after(&mut self, k: u8, d: u64) {
        if self.shut_down {
            return;
        }
        if d == 0 {
            return self.add(k);
        }
        let deadline = self.now + d;
        match self.waiting.get(&k) {
            Some(&(current, _)) if current <= deadline => {}
            _ => {
                self.seq += 1;
                self.waiting.insert(k, (deadline, self.seq));
            }
        }
    }
    fn promote(&mut self) {
        let mut due: Vec<_> = self
            .waiting
            .iter()
            .filter(|(_, (d, _))| *d <= self.now)
            .map(|(k, v)| (*v, *k))
            .collect();
        due.sort();
        for (_, k) in due {
            self.waiting.remove(&k);
            self.add(k);
        }
    }
    /// `Some(result)` when `get` must return at once, `None` when it must wait.
    fn get(&mut self) -> Option<Option<u8>> {
        self.promote();
        if let Some(k) = self.ready.pop_front() {
            self.dirty.remove(&k);
            self.processing.push(k);
            return Some(Some(k));
        }
        if self.shut_down { Some(None) } else { None }
    }
    fn done(&mut self, k: u8) {
        self.processing.retain(|p| *p != k);
        if self.dirty.contains(&k) {
            self.ready.push_back(k);
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
            .build();
        let mut m = Model::default();
        for op in ops {
            match op {
                Op::Add(k) => {
                    q.add(k);
                    m.add(k);
                }
                Op::AddAfter(k, d) => {
                    q.add_after(k, Duration::from_millis(d));
                    m.add_after(k, d);
                }
                Op::Get => {
                    let got = q.get().now_or_never();
                    let want = m.get();
                    prop_assert_eq!(got, want, "get disagrees with the model");
                    if let Some(Some(k)) = got {
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
                    m.promote();
                    prop_assert_eq!(q.len(), m.ready.len());
                }
                Op::ShutDown => {
                    q.shut_down();
                    m.shut_down = true;
                    m.waiting.clear();
                }
            }
        }
        // No item lost: after shut down, everything accepted comes out.
        q.shut_down();
        m.shut_down = true;
        m.waiting.clear();
        loop {
            for k in std::mem::take(&mut m.processing) {
                q.done(&k);
                m.done(k);
            }
            let got = q.get().now_or_never();
            prop_assert_eq!(got, m.get());
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
