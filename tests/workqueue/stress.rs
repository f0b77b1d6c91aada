//! Stress: producers and workers on a multi-threaded runtime. Afterwards every key's newest add
//! was processed after it happened, and no key was ever held by two workers at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ctrlkit::workqueue::WorkQueue;

const KEYS: usize = 200;
const PRODUCERS: usize = 4;
const WORKERS: usize = 4;
const ADDS_PER_PRODUCER: usize = 50_000;

struct Tracker {
    /// Logical clock: ticks once per add, before the add.
    clock: AtomicU64,
    /// Per key: the clock value of its newest add.
    last_add: Vec<AtomicU64>,
    /// Per key: the clock value when a worker last took it.
    last_taken: Vec<AtomicU64>,
    held: Vec<AtomicBool>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn producers_and_workers_never_lose_an_add_nor_share_a_key() {
    let q: WorkQueue<usize> = WorkQueue::new();
    let t = Arc::new(Tracker {
        clock: AtomicU64::new(1),
        last_add: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        last_taken: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        held: (0..KEYS).map(|_| AtomicBool::new(false)).collect(),
    });

    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (q, t) = (q.clone(), t.clone());
            tokio::spawn(async move {
                let mut handled = 0u64;
                while let Some(k) = q.get().await {
                    assert!(!t.held[k].swap(true, Ordering::SeqCst), "key {k} held by two workers");
                    t.last_taken[k].fetch_max(t.clock.load(Ordering::SeqCst), Ordering::SeqCst);
                    if handled.is_multiple_of(7) {
                        tokio::task::yield_now().await;
                    }
                    t.held[k].store(false, Ordering::SeqCst);
                    q.done(&k);
                    handled += 1;
                }
                handled
            })
        })
        .collect();

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (q, t) = (q.clone(), t.clone());
            tokio::spawn(async move {
                for i in 0..ADDS_PER_PRODUCER {
                    let k = (i * 31 + p * 17) % KEYS;
                    let at = t.clock.fetch_add(1, Ordering::SeqCst);
                    t.last_add[k].fetch_max(at, Ordering::SeqCst);
                    q.add(k);
                    if i.is_multiple_of(64) {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();

    for p in producers {
        p.await.unwrap();
    }
    q.shut_down();
    let mut handled = 0;
    for w in workers {
        handled += w.await.unwrap();
    }
    assert!(handled >= KEYS as u64);
    assert!(handled <= (PRODUCERS * ADDS_PER_PRODUCER) as u64);
    for k in 0..KEYS {
        let added = t.last_add[k].load(Ordering::SeqCst);
        let taken = t.last_taken[k].load(Ordering::SeqCst);
        assert!(taken > added, "key {k}: newest add at {added}, last taken at {taken}");
    }
}
