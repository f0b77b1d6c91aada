//! A lock for critical sections of a few instructions: taking it is one atomic
//! read-modify-write and releasing it a plain store (`spin`'s mutex), where a mutex's lock and
//! unlock cost two read-modify-writes, most of an add's time when its key was already queued
//! (`docs/design/workqueue.md`). A thread that finds it taken spins briefly, then yields its
//! core until the holder is done, so a holder that was preempted is not kept from running by
//! its waiters.
//!
//! The crate's one exception to parking_lot's locks: it guards the add buffer alone, where
//! parking_lot's `Mutex` measured slower (the design note's "The buffer's spin lock").

use spin::mutex::{SpinMutex, SpinMutexGuard};

/// How many times a waiter re-reads the lock before yielding its core.
const SPINS: u32 = 64;

/// A spin lock over a `T`.
pub(crate) struct SpinLock<T>(SpinMutex<T>);

/// Holds the lock; releases it when dropped.
pub(crate) type SpinGuard<'a, T> = SpinMutexGuard<'a, T>;

impl<T> SpinLock<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(SpinMutex::new(value))
    }

    /// Takes the lock, waiting for it if another thread holds it.
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        let mut spins = 0;
        loop {
            if let Some(guard) = self.0.try_lock_weak() {
                return guard;
            }
            // Read until it looks free, then try again: reads keep the line shared while it
            // is held.
            while self.0.is_locked() {
                if spins < SPINS {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}
