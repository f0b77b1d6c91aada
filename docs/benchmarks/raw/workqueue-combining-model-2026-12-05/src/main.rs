//! A model of two workers draining one queue: a million `String` keys in a `VecDeque` and a
//! set of the keys being processed, behind one mutex; `get` pops and records, `done` removes.
//! One thread alone, two threads on the mutex, two threads where one that finds the lock taken
//! posts its `get` or `done` for the holder to carry out before it unlocks (flat combining,
//! one request slot of each kind), and two threads that take the lock by `try_lock` in a loop.
//! `cargo run --release`.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use hashbrown::HashSet;

const N: u32 = 1_000_000;
struct St { fifo: VecDeque<String>, working: HashSet<String>, }
struct Q { m: Mutex<St>, req: AtomicU8, slot: UnsafeCell<Option<String>>, dreq: AtomicU8, dptr: UnsafeCell<*const String> }
unsafe impl Sync for Q {}
unsafe impl Send for Q {}
const EMPTY: u8 = 0; const WAITING: u8 = 1; const FILLED: u8 = 2; const NONE: u8 = 3;

impl Q {
    fn pop(st: &mut St) -> Option<String> { let k = st.fifo.pop_front()?; st.working.insert(k.clone()); Some(k) }
    fn serve(&self, st: &mut St) {
        if self.req.compare_exchange(WAITING, 5, AcqRel, Acquire).is_ok() {
            let r = Self::pop(st);
            let done = r.is_some();
            unsafe { *self.slot.get() = r; }
            self.req.store(if done { FILLED } else { NONE }, Release);
        }
        if self.dreq.load(Acquire) == WAITING {
            let p = unsafe { *self.dptr.get() };
            st.working.remove(unsafe { &*p });
            self.dreq.store(FILLED, Release);
        }
    }
    fn get(&self, combine: bool) -> Option<String> {
        if combine {
            if let Ok(mut g) = self.m.try_lock() { let r = Self::pop(&mut g); self.serve(&mut g); return r; }
            if self.req.compare_exchange(EMPTY, WAITING, AcqRel, Acquire).is_ok() {
                let mut spins = 0u32;
                loop {
                    match self.req.load(Acquire) {
                        FILLED => { let r = unsafe { (*self.slot.get()).take() }; self.req.store(EMPTY, Release); return r; }
                        NONE => { self.req.store(EMPTY, Release); break; }
                        WAITING if spins > 2000 => { if self.req.compare_exchange(WAITING, EMPTY, AcqRel, Acquire).is_ok() { break; } }
                        _ => { spins += 1; std::hint::spin_loop() }
                    }
                }
            }
        }
        let mut g = self.m.lock().unwrap(); let r = Self::pop(&mut g); if combine { self.serve(&mut g); } r
    }
    fn lock_spin(&self) -> std::sync::MutexGuard<'_, St> {
        loop { if let Ok(g) = self.m.try_lock() { return g; } for _ in 0..8 { std::hint::spin_loop(); } }
    }
    fn get_spin(&self) -> Option<String> { let mut g = self.lock_spin(); Self::pop(&mut g) }
    fn done_spin(&self, k: &String) { let mut g = self.lock_spin(); g.working.remove(k); }
    fn done(&self, k: &String, combine: bool) {
        if combine {
            if let Ok(mut g) = self.m.try_lock() { g.working.remove(k); self.serve(&mut g); return; }
            if self.dreq.compare_exchange(EMPTY, 4, AcqRel, Acquire).is_ok() {
                unsafe { *self.dptr.get() = k as *const String; }
                self.dreq.store(WAITING, Release);
                loop {
                    match self.dreq.load(Acquire) { FILLED => { self.dreq.store(EMPTY, Release); return; } _ => {
                        if let Ok(mut g) = self.m.try_lock() {
                            if self.dreq.load(Acquire) == WAITING { g.working.remove(k); self.dreq.store(EMPTY, Release); self.serve(&mut g); return; }
                        }
                        std::hint::spin_loop() } }
                }
            }
        }
        let mut g = self.m.lock().unwrap(); g.working.remove(k); if combine { self.serve(&mut g); }
    }
}

fn run_spin() -> f64 {
    let fifo: VecDeque<String> = (0..N).map(|i| format!("default/pod-{i:06}")).collect();
    let q = Arc::new(Q { m: Mutex::new(St { fifo, working: HashSet::new() }), req: AtomicU8::new(0), slot: UnsafeCell::new(None), dreq: AtomicU8::new(0), dptr: UnsafeCell::new(std::ptr::null()) });
    let t = Instant::now();
    let hs: Vec<_> = (0..2).map(|_| { let q = q.clone(); std::thread::spawn(move || { while let Some(k) = q.get_spin() { q.done_spin(&k); } }) }).collect();
    for h in hs { h.join().unwrap(); }
    t.elapsed().as_nanos() as f64 / N as f64
}
fn run(threads: usize, combine: bool) -> f64 {
    let fifo: VecDeque<String> = (0..N).map(|i| format!("default/pod-{i:06}")).collect();
    let q = Arc::new(Q { m: Mutex::new(St { fifo, working: HashSet::new() }), req: AtomicU8::new(0), slot: UnsafeCell::new(None), dreq: AtomicU8::new(0), dptr: UnsafeCell::new(std::ptr::null()) });
    let handled = Arc::new(AtomicUsize::new(0));
    let t = Instant::now();
    let hs: Vec<_> = (0..threads).map(|_| { let q = q.clone(); let h = handled.clone(); std::thread::spawn(move || { let mut n = 0; while let Some(k) = q.get(combine) { q.done(&k, combine); n += 1; } h.fetch_add(n, Relaxed); }) }).collect();
    for h in hs { h.join().unwrap(); }
    assert_eq!(handled.load(Relaxed), N as usize);
    t.elapsed().as_nanos() as f64 / N as f64
}
fn main() {
    for r in 0..3 { println!("round {r}: 1 thread {:.0} | 2 threads mutex {:.0} | 2 threads combining {:.0} | 2 threads try_lock spinning {:.0}", run(1, false), run(2, false), run(2, true), run_spin()); }
}
