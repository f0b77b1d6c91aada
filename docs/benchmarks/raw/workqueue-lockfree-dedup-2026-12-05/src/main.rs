//! Would a queue whose dedup path takes no lock reach 2x client-go in the dedup storm?
//!
//! A prototype of that design, beside ctrlkit's `WorkQueue`, in the storm of
//! `benches/workqueue.rs` (a million adds over 1,000 keys, two workers draining, the producer's
//! time measured) and in its `dedup_alone` (no worker). The prototype keeps each known key's
//! state in a word of its own, in an entry of a lock-free map (papaya): an add of a key whose
//! entry says "dirty" costs a hash, a map lookup and one `fetch_or`, with no lock; everything
//! else (a new key, a key that is not dirty, `get`, `done`, removing an entry) takes the queue's
//! mutex, as ctrlkit's queue does. Only what the storm needs is there: one priority, no delays,
//! no metrics, no add buffer.
//!
//! `K8S_OPENAPI_ENABLED_VERSION=1.36 cargo run --release -- ROUNDS` alternates the two queues and prints every run and medians.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

const N: usize = 1_000_000;

/// Added and not handed out since.
const DIRTY: u32 = 1;
/// Handed out, not done.
const PROCESSING: u32 = 2;
/// In the FIFO.
const QUEUED: u32 = 4;
/// Taken out of the map: an add that finds it must insert a new entry.
const REMOVED: u32 = 8;

struct Entry {
    key: String,
    state: AtomicU32,
}

struct Fifo {
    ready: VecDeque<Arc<Entry>>,
    shut: bool,
}

struct Proto {
    map: papaya::HashMap<String, Arc<Entry>, foldhash::quality::RandomState>,
    inner: Mutex<Fifo>,
    idle: AtomicUsize,
    getters: Notify,
}

impl Proto {
    fn new() -> Self {
        Self {
            map: papaya::HashMap::builder()
                .hasher(foldhash::quality::RandomState::default())
                .build(),
            inner: Mutex::new(Fifo { ready: VecDeque::new(), shut: false }),
            idle: AtomicUsize::new(0),
            getters: Notify::new(),
        }
    }

    fn add(&self, key: String) {
        {
            let map = self.map.pin();
            if let Some(e) = map.get(&key) {
                let old = e.state.fetch_or(DIRTY, Ordering::AcqRel);
                if old & REMOVED == 0 {
                    if old & DIRTY != 0 {
                        return; // the lock-free path: queued already
                    }
                    // We made it dirty: it must be queued unless a worker holds it.
                    let e = Arc::clone(e);
                    drop(map);
                    let mut fifo = self.inner.lock().unwrap();
                    self.enqueue(&mut fifo, e);
                    return;
                }
            }
        }
        let mut fifo = self.inner.lock().unwrap();
        if fifo.shut {
            return;
        }
        let map = self.map.pin();
        // Under the lock the map is stable: only lock holders insert and remove.
        if let Some(e) = map.get(&key) {
            let old = e.state.fetch_or(DIRTY, Ordering::AcqRel);
            if old & DIRTY == 0 {
                let e = Arc::clone(e);
                self.enqueue(&mut fifo, e);
            }
            return;
        }
        let e = Arc::new(Entry { key: key.clone(), state: AtomicU32::new(DIRTY | QUEUED) });
        map.insert(key, Arc::clone(&e));
        fifo.ready.push_back(e);
        self.wake();
    }

    /// Under the lock, for an entry just made dirty.
    fn enqueue(&self, fifo: &mut Fifo, e: Arc<Entry>) {
        let s = e.state.load(Ordering::Acquire);
        if s & (PROCESSING | QUEUED) == 0 {
            e.state.fetch_or(QUEUED, Ordering::AcqRel);
            fifo.ready.push_back(e);
            self.wake();
        }
    }

    fn wake(&self) {
        if self.idle.load(Ordering::SeqCst) > 0 {
            self.getters.notify_one();
        }
    }

    async fn get(&self) -> Option<String> {
        loop {
            let notified = self.getters.notified();
            tokio::pin!(notified);
            {
                let mut fifo = self.inner.lock().unwrap();
                if let Some(e) = fifo.ready.pop_front() {
                    // Clear dirty and queued, set processing, in one step.
                    let _ = e.state.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                        Some((s & !(DIRTY | QUEUED)) | PROCESSING)
                    });
                    if !fifo.ready.is_empty() {
                        self.wake();
                    }
                    return Some(e.key.clone());
                }
                if fifo.shut {
                    return None;
                }
                notified.as_mut().enable();
                self.idle.fetch_add(1, Ordering::SeqCst);
            }
            notified.await;
            self.idle.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn done(&self, key: &str) {
        let mut fifo = self.inner.lock().unwrap();
        let map = self.map.pin();
        let Some(e) = map.get(key) else { return };
        let old = e.state.fetch_and(!PROCESSING, Ordering::AcqRel);
        if old & PROCESSING == 0 {
            return;
        }
        if old & DIRTY != 0 {
            e.state.fetch_or(QUEUED, Ordering::AcqRel);
            fifo.ready.push_back(Arc::clone(e));
            self.wake();
            return;
        }
        match e.state.compare_exchange(0, REMOVED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                map.remove(key);
            }
            Err(_) => {
                // Made dirty since: queue it again.
                e.state.fetch_or(QUEUED, Ordering::AcqRel);
                fifo.ready.push_back(Arc::clone(e));
                self.wake();
            }
        }
    }

    fn shut_down(&self) {
        self.inner.lock().unwrap().shut = true;
        self.getters.notify_waiters();
    }

    fn len(&self) -> usize {
        self.inner.lock().unwrap().ready.len()
    }
}

fn storm_keys() -> Vec<String> {
    let distinct: Vec<String> = (0..1000).map(|i| format!("default/pod-{:06}", i)).collect();
    (0..N).map(|i| distinct[i % 1000].clone()).collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// The storm: `threads` = the producer is the main task in `block_on`; else a task that never
/// yields. Returns the producer's time and the items the workers handled.
fn storm_proto(threads: bool) -> (Duration, usize) {
    let rt = runtime();
    let adds = storm_keys();
    let q = Arc::new(Proto::new());
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let q = Arc::clone(&q);
            rt.spawn(async move {
                let mut n = 0;
                while let Some(k) = q.get().await {
                    q.done(&k);
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(5));
    let start = Instant::now();
    if threads {
        rt.block_on(async {
            for k in adds {
                q.add(k);
            }
        });
    } else {
        let q2 = Arc::clone(&q);
        rt.block_on(async move {
            tokio::spawn(async move {
                for k in adds {
                    q2.add(k);
                }
            })
            .await
            .unwrap()
        });
    }
    let elapsed = start.elapsed();
    q.shut_down();
    let handled = rt.block_on(async {
        let mut n = 0;
        for w in workers {
            n += w.await.unwrap();
        }
        n
    });
    (elapsed, handled)
}

fn storm_ctrlkit(threads: bool) -> (Duration, usize) {
    use ctrlkit::workqueue::WorkQueue;
    let rt = runtime();
    let adds = storm_keys();
    let q: WorkQueue<String> = WorkQueue::new();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let q = q.clone();
            rt.spawn(async move {
                let mut n = 0;
                while let Some(k) = q.get().await {
                    q.done(&k);
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(5));
    let start = Instant::now();
    if threads {
        rt.block_on(async {
            for k in adds {
                q.add(k);
            }
        });
    } else {
        let q2 = q.clone();
        rt.block_on(async move {
            tokio::spawn(async move {
                for k in adds {
                    q2.add(k);
                }
            })
            .await
            .unwrap()
        });
    }
    let elapsed = start.elapsed();
    q.shut_down();
    let handled = rt.block_on(async {
        let mut n = 0;
        for w in workers {
            n += w.await.unwrap();
        }
        n
    });
    (elapsed, handled)
}

fn alone_proto() -> Duration {
    let adds = storm_keys();
    let q = Proto::new();
    let start = Instant::now();
    for k in adds {
        q.add(k);
    }
    let elapsed = start.elapsed();
    assert_eq!(q.len(), 1000);
    elapsed
}

fn alone_ctrlkit() -> Duration {
    let adds = storm_keys();
    let q = ctrlkit::workqueue::WorkQueue::new();
    let start = Instant::now();
    for k in adds {
        q.add(k);
    }
    let elapsed = start.elapsed();
    assert_eq!(q.len(), 1000);
    elapsed
}

fn ns(d: Duration) -> f64 {
    d.as_nanos() as f64 / N as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let _ = foldhash::quality::RandomState::default().hash_one(1u8);
    let cases: [(&str, fn() -> (f64, usize)); 6] = [
        ("dedup_alone ctrlkit", || (ns(alone_ctrlkit()), 0)),
        ("dedup_alone proto", || (ns(alone_proto()), 0)),
        ("storm/tasks ctrlkit", || {
            let (d, h) = storm_ctrlkit(false);
            (ns(d), h)
        }),
        ("storm/tasks proto", || {
            let (d, h) = storm_proto(false);
            (ns(d), h)
        }),
        ("storm/threads ctrlkit", || {
            let (d, h) = storm_ctrlkit(true);
            (ns(d), h)
        }),
        ("storm/threads proto", || {
            let (d, h) = storm_proto(true);
            (ns(d), h)
        }),
    ];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for round in 1..=rounds {
        for (i, (name, f)) in cases.iter().enumerate() {
            let (t, handled) = f();
            println!("round {round} {name:24} {t:7.1} ns/add  handled {handled}");
            results[i].push(t);
        }
    }
    for ((name, _), r) in cases.iter().zip(results) {
        println!("median {name:24} {:7.1} ns/add", median(r));
    }
}
