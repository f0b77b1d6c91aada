//! A controller's worker count while it runs: the target ([`Controller::set_workers`], or the
//! adaptive policy) and what the run's workers do about it.
//!
//! # Contract
//! - The target is read by the run, which alone spawns workers: up at once, one task per
//!   missing worker.
//! - Down by retire tickets: the run hands out one per worker too many and wakes the idle
//!   workers; a worker takes one only between keys (before it asks the queue for the next, or
//!   while it waits for one), so no reconcile is cancelled. A worker that leaves while waiting
//!   drops its queue wait, which is cancel-safe: a wake-up it was given passes on.
//! - `active` counts the workers inside a key's processing; it falls before the key is marked
//!   done, so "every worker busy" never holds while a slot the worker freed is open.
//!
//! [`Controller::set_workers`]: super::Controller::set_workers

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::{Notify, watch};

/// The live worker count of one controller, shared by its clones.
pub(super) struct WorkerPool {
    /// How many workers the controller should run.
    target: watch::Sender<usize>,
    /// Workers inside a key's processing.
    active: AtomicUsize,
    /// Workers to leave at their next key boundary.
    retire: AtomicUsize,
    /// Wakes idle workers to look for a retire ticket.
    retiring: Notify,
    /// Time the reconciles spent in their polls since the policy's last look: how much of
    /// the cores they hold.
    polled_nanos: AtomicU64,
}

impl WorkerPool {
    pub(super) fn new(workers: usize) -> Self {
        Self {
            target: watch::Sender::new(workers.max(1)),
            active: AtomicUsize::new(0),
            retire: AtomicUsize::new(0),
            retiring: Notify::new(),
            polled_nanos: AtomicU64::new(0),
        }
    }

    /// The target count.
    pub(super) fn target(&self) -> usize {
        *self.target.borrow()
    }

    /// Sets the target to `n` (at least one); returns the one it replaced.
    pub(super) fn set_target(&self, n: usize) -> usize {
        self.target.send_replace(n.max(1))
    }

    /// Follows the target's changes (the run).
    pub(super) fn subscribe(&self) -> watch::Receiver<usize> {
        self.target.subscribe()
    }

    /// Workers processing a key now.
    pub(super) fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// Asks `n` workers to leave at their next key boundary, and wakes those waiting.
    pub(super) fn retire(&self, n: usize) {
        if n == 0 {
            return;
        }
        // The ticket before the wake-up: a worker registers for the wake-up before it looks
        // for a ticket, so it sees one or the other.
        self.retire.fetch_add(n, Ordering::SeqCst);
        self.retiring.notify_waiters();
    }

    /// Takes back up to `n` tickets no worker took yet (a count raised again before the
    /// workers left); returns how many it took back.
    pub(super) fn unretire(&self, n: usize) -> usize {
        let mut taken = 0;
        let _ = self.retire.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
            taken = left.min(n);
            Some(left - taken)
        });
        taken
    }

    /// A worker takes a retire ticket if one is left: it then leaves.
    pub(super) fn take_ticket(&self) -> bool {
        self.retire
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| left.checked_sub(1))
            .is_ok()
    }

    /// Resolves when the run hands out retire tickets; make it before looking for one.
    pub(super) fn retiring(&self) -> tokio::sync::futures::Notified<'_> {
        self.retiring.notified()
    }

    /// Counts a worker inside a key's processing until the guard is dropped.
    pub(super) fn active_guard(&self) -> Active<'_> {
        self.active.fetch_add(1, Ordering::SeqCst);
        Active(&self.active)
    }

    /// The time reconciles spent in their polls since the last call, ended or not.
    pub(super) fn take_polled(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.polled_nanos.swap(0, Ordering::SeqCst))
    }

    /// Runs `reconcile`, adding the time of each of its polls (`std` clock: the CPU it holds)
    /// to the pool's count as it goes, so a reconcile longer than the policy's interval counts
    /// in each; untimed when `timed` is false.
    pub(super) async fn timed<F: Future>(&self, timed: bool, reconcile: F) -> F::Output {
        if !timed {
            return reconcile.await;
        }
        let mut reconcile = std::pin::pin!(reconcile);
        std::future::poll_fn(|cx| {
            let at = std::time::Instant::now();
            let poll = reconcile.as_mut().poll(cx);
            let took = u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.polled_nanos.fetch_add(took, Ordering::Relaxed);
            poll
        })
        .await
    }
}

/// A worker counted as processing a key until dropped.
pub(super) struct Active<'a>(&'a AtomicUsize);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
