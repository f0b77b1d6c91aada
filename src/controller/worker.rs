//! A controller's workers, as client-go's `examples/workqueue` has them: `runWorker` (take a
//! key, reconcile it, `Done`),
//! `processNextItem` (the reconcile, caught if it panics or overruns its timeout, after the
//! controller's own last write of the key is in the cache) and `handleErr` (retry with the
//! key's rate limit up to the configured count, then drop it and say so).
//!
//! A reconcile starts only while the replica holds, by its own clock, every Lease the
//! controller runs under (a Manager's leader or shard Lease), and, when sharded, the key's
//! shard (`shard.rs`): checked before the shard's gate and again right before the reconcile,
//! since the gate may wait on the server. A reconcile that ends after a Lease lapsed (its
//! process was frozen or starved meanwhile) is counted and logged as an error.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::FutureExt;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use super::controller::Controller;
use super::error::ReconcileFailure;
use super::metrics::ReconcileOutcome;
use super::reconciler::Reconciler;
use super::shard::{CACHE_LAG_RETRY, Gate};

/// How soon a key not reconciled because a Lease had lapsed is looked at again (the manager
/// normally stops first; a renewal that was in flight at the lapse may have kept the Lease).
const FENCED_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// What a worker does with a key, given the controller's own writes its last reconcile made.
enum Admit {
    /// Reconcile it.
    Run,
    /// Not yet: the caches have not caught up; it is queued again when they have.
    Parked,
    /// Not at all: an informer stopped short of a write.
    Stopped,
}

/// How soon a key whose processing panicked outside its reconcile is tried again.
const PANIC_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
use super::context::{Reason, ReconcileContext};
use super::own_writes::{Held, Pending};
use crate::cache::{InformerObject, ObjectKey};
use crate::panic::{catch, observe, panic_message};
use crate::workqueue::Priority;

impl<K: InformerObject> Controller<K> {
    /// `runWorker` of client-go's `examples/workqueue`: process keys until shut down.
    pub(super) async fn run_worker<R: Reconciler<Object = K>>(
        &self,
        reconciler: Arc<R>,
        mut stop: watch::Receiver<bool>,
    ) {
        let pool = &self.shared.pool;
        loop {
            // Registered before the look for a ticket: a ticket handed out after the look
            // comes with a wake-up this sees (see the `pool` module).
            let retiring = pool.retiring();
            if pool.take_ticket() {
                return;
            }
            let key = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                // An idle worker leaves between keys; its queue wait is cancel-safe.
                _ = retiring => continue,
                key = self.queue.get_with_priority() => match key {
                    Some(key) => key,
                    None => return,
                },
            };
            let (key, priority) = key;
            let span = tracing::info_span!(
                "reconcile",
                controller = %self.name,
                key = %key,
                reasons = tracing::field::Empty
            );
            let processed = self.process_item(reconciler.as_ref(), key.clone(), priority);
            // The reconcile's own panic is caught inside, and a metrics hook's where it is
            // called; this one is the rest of the user code a key's processing calls (a rate
            // limiter).
            if let Err(panic) = AssertUnwindSafe(processed.instrument(span)).catch_unwind().await {
                self.recover(key, &panic_message(&*panic));
            }
        }
    }

    /// After a panic in processing `key` outside its reconcile: counted and logged, the key
    /// retried after [`PANIC_RETRY`] and marked done, so that neither the worker nor the key is
    /// lost. Unlike [`finish_unreconciled`](Self::finish_unreconciled) it does not call the
    /// rate limiter: that may be what panicked. (`is_terminal` and the `on_dropped` hook have
    /// catches of their own, which keep their key's retry count; the metrics hooks too, which
    /// cost only their observation.)
    fn recover(&self, key: ObjectKey, panic: &str) {
        self.shared.counters.panicked.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            %key,
            panic,
            "processing a key panicked outside its reconcile (in a rate limiter, say); retrying it"
        );
        if let Some(shard) = &self.shard {
            shard.done(&key);
        }
        self.lock_in_flight().remove(&key);
        self.queue.add_after(key.clone(), PANIC_RETRY);
        self.queue.done(&key);
    }

    /// `processNextItem` of client-go's `examples/workqueue`, after `Get`: reconcile, handle the outcome, `Done`.
    /// `priority` is the one the key was handed out at; a failure retries at it.
    async fn process_item<R: Reconciler<Object = K>>(
        &self,
        reconciler: &R,
        key: ObjectKey,
        priority: Priority,
    ) {
        self.lock_in_flight().insert(key.clone());
        // Every path out of here marks the key done after this guard is dropped.
        let active = self.shared.pool.active_guard();
        let started = self.metrics.as_ref().map(|m| {
            observe("worker_started", || m.worker_started());
            Instant::now()
        });
        let object = self.informer.indexer().get(&key);
        let mut gate = match self.fenced() {
            true => None,
            false => match &self.shard {
                Some(shard) => Some(shard.gate(&key, object.as_deref()).await),
                None => Some(Gate::Reconcile),
            },
        };
        // The gate may have waited on the server: the last look before the reconcile starts.
        if gate == Some(Gate::Reconcile) && self.fenced() {
            if let Some(shard) = &self.shard {
                shard.done(&key);
            }
            gate = None;
        }
        if gate != Some(Gate::Reconcile) {
            match gate {
                None => self.queue.add_after(key.clone(), FENCED_RETRY),
                Some(Gate::Retry) => self.queue.add_rate_limited(key.clone()),
                Some(Gate::Later) => self.queue.add_after(key.clone(), CACHE_LAG_RETRY),
                Some(_) => {
                    // Not this replica's key: its reasons and pending writes go with it.
                    self.shared.reasons.forget(&key);
                    if let Some(pending) = self.shared.pending_writes.take(&key) {
                        self.shared.tracker.release(&pending);
                    }
                    self.queue.forget(&key)
                }
            }
            drop(active);
            self.finish_unreconciled(&key);
            return;
        }
        // After the Leases and the shard's gate: a key this replica will not reconcile is
        // neither held nor parked.
        let admitted = self.admit(&key);
        if !matches!(admitted, Admit::Run) {
            if let Some(shard) = &self.shard {
                shard.done(&key);
            }
            if matches!(admitted, Admit::Stopped) {
                // The informer stopped (with the controller) short of the key's own write: a
                // reconcile now would read a cache known to lack it. The key goes back, for
                // a queue that is not shut down yet.
                self.queue.add(key.clone());
            }
            // Parked: its own writes are not in the caches yet; the worker moves on, and the
            // key comes back when they are (or at the timeout).
            drop(active);
            return self.finish_unreconciled(&key);
        }
        // Read after the hold: the primary's cache may have caught up with the key's writes.
        let object = self.informer.indexer().get(&key);
        // With the guard off, a create raises no owner's count: no hold would lower it.
        let tracker =
            (!self.config.stale_cache_timeout.is_zero()).then(|| self.shared.tracker.clone());
        let reasons = self.shared.reasons.take(&key);
        let context = ReconcileContext::new(&self.name, key.clone(), reasons, tracker);
        let reasons = context.describe_reasons();
        tracing::Span::current().record("reasons", tracing::field::display(&reasons));
        let reconcile = AssertUnwindSafe(reconciler.reconcile(&key, object)).catch_unwind();
        let reconcile = ReconcileContext::scope(context.clone(), reconcile);
        // Timed for the adaptive policy only: the CPU its polls hold.
        let reconcile = self.shared.pool.timed(self.config.adaptive.is_some(), reconcile);
        let outcome = match self.config.reconcile_timeout {
            Some(timeout) => tokio::time::timeout(timeout, reconcile).await.map_err(|_| timeout),
            None => Ok(reconcile.await),
        };
        // What it wrote before it ended, however it ended (a timeout's writes were made too).
        let pending = Pending {
            reported: context.reported.load(Ordering::Relaxed),
            writes: context.take_writes(),
        };
        self.shared.pending_writes.insert(&key, self.shared.tracker.watched(pending));
        let counted = match outcome {
            Ok(Ok(Ok(action))) => {
                self.shared.counters.succeeded.fetch_add(1, Ordering::Relaxed);
                self.queue.forget(&key);
                match action.requeue_delay() {
                    Some(delay) => {
                        self.shared.reasons.add(&key, Reason::Requeue);
                        let asked = action.priority().unwrap_or(Priority::NORMAL);
                        self.queue.add_after_with_priority(key.clone(), delay, asked);
                        ReconcileOutcome::RequeueAfter
                    }
                    None => ReconcileOutcome::Success,
                }
            }
            Ok(Ok(Err(err))) if is_terminal(reconciler, &err) => {
                self.shared.counters.failed.fetch_add(1, Ordering::Relaxed);
                self.give_up_terminal(&key, ReconcileFailure::Terminal(Arc::new(err)));
                ReconcileOutcome::Error
            }
            Ok(Ok(Err(err))) => {
                self.shared.counters.failed.fetch_add(1, Ordering::Relaxed);
                self.handle_err(&key, priority, ReconcileFailure::Error(Arc::new(err)));
                ReconcileOutcome::Error
            }
            Ok(Err(panic)) => {
                self.shared.counters.panicked.fetch_add(1, Ordering::Relaxed);
                let message = panic_message(&*panic);
                tracing::error!(panic = %message, "reconcile panicked");
                self.handle_err(&key, priority, ReconcileFailure::Panic(message));
                ReconcileOutcome::Panic
            }
            Err(timeout) => {
                self.shared.counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(?timeout, "reconcile timed out");
                self.handle_err(&key, priority, ReconcileFailure::Timeout(timeout));
                ReconcileOutcome::Timeout
            }
        };
        if let Some(lease) = self.lapsed_lease() {
            self.shared.counters.outlived_lease.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                lease,
                "this reconcile ended after the replica's {lease} lapsed by its own clock (the \
                 process was frozen or starved while it ran): another replica may have \
                 reconciled the key meanwhile; only its writes guarded by the resourceVersion \
                 they read were safe"
            );
        }
        if let Some(shard) = &self.shard {
            shard.done(&key);
        }
        if let (Some(metrics), Some(started)) = (&self.metrics, started) {
            observe("reconciled", || metrics.reconciled(counted, started.elapsed()));
            observe("worker_finished", || metrics.worker_finished());
        }
        drop(active);
        self.lock_in_flight().remove(&key);
        self.queue.done(&key);
    }

    /// Ends the processing of `key` without a reconcile: the worker is free, the key done.
    fn finish_unreconciled(&self, key: &ObjectKey) {
        if let Some(metrics) = &self.metrics {
            observe("worker_finished", || metrics.worker_finished());
        }
        self.lock_in_flight().remove(key);
        self.queue.done(key);
    }

    /// Whether a Lease the controller runs under has lapsed now (counted and logged).
    fn fenced(&self) -> bool {
        let Some(lease) = self.lapsed_lease() else { return false };
        self.shared.counters.fenced.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            lease,
            "not reconciling: this replica no longer holds its {lease} by its own clock (the \
             manager stops what runs under it)"
        );
        true
    }

    /// Whether `key`'s reconcile runs now, given the writes its last reconcile made (see the
    /// `own_writes` module): it runs if every cache the controller reads caught up with them, or
    /// if the key has been parked on them for the stale-cache timeout (counted and logged);
    /// else the key is parked, as client-go's expectations skip a sync: the worker moves on,
    /// the writes and the key's reasons stay, and a task queues the key again when the caches
    /// catch up or the timeout passes. [`Admit::Stopped`] if an informer stopped short of a
    /// write: its cache will never hold it.
    fn admit(&self, key: &ObjectKey) -> Admit {
        if self.config.stale_cache_timeout.is_zero() {
            self.shared.pending_writes.take(key);
            return Admit::Run;
        }
        let Some((pending, parked)) = self.shared.pending_writes.get(key) else {
            return Admit::Run;
        };
        let tracker = &self.shared.tracker;
        let Some(mut hold) = tracker.hold(&pending) else {
            self.shared.pending_writes.take(key);
            return Admit::Run;
        };
        let now = Instant::now();
        let since = parked.unwrap_or(now);
        let waited = now - since;
        let held = hold.as_mut().now_or_never();
        let timed_out = held.is_none() && waited >= self.config.stale_cache_timeout;
        // A hold is a key parked: one per set of writes, however often its key comes back
        // parked; writes the caches hold already at the first look hold nothing.
        let first_park = parked.is_none() && held.is_none();
        if first_park {
            self.shared.counters.holds.fetch_add(1, Ordering::Relaxed);
        }
        if held.is_none() && !timed_out {
            drop(hold);
            if self.shared.pending_writes.park(key, since) {
                self.wake_when_caught_up(key, pending, since);
            }
            tracing::debug!("parked until the caches hold this controller's own writes");
            return Admit::Parked;
        }
        self.shared.pending_writes.take(key);
        if held != Some(Held::CaughtUp) {
            // The counts its creates raised and no cache met are let go of with the hold.
            tracker.release(&pending);
        }
        if let (Some(metrics), true) = (&self.metrics, parked.is_some() || first_park) {
            observe("held", || metrics.held(waited, timed_out));
        }
        match held {
            Some(Held::Stopped) => {
                tracing::info!(
                    writes = pending.writes.len(),
                    "an informer stopped before its cache held this controller's own write; \
                     not reconciling"
                );
                Admit::Stopped
            }
            Some(Held::CaughtUp) => {
                tracing::debug!(?waited, "the caches hold this controller's own writes");
                Admit::Run
            }
            None => {
                self.shared.counters.stale_cache_timeouts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    writes = ?pending.writes,
                    reported = pending.reported,
                    timeout = ?self.config.stale_cache_timeout,
                    "the caches do not hold this controller's own writes yet; reconciling anyway"
                );
                Admit::Run
            }
        }
    }

    /// Queues `key` again once the caches caught up with `pending` (woken by the informer's
    /// event, list or bookmark that moves a cache past it) or at the end of its timeout,
    /// unless it ran meanwhile. The task holds the caches' views and the queue, not the
    /// controller; a run that ends closes the pending writes, which ends the task.
    fn wake_when_caught_up(&self, key: &ObjectKey, pending: Arc<Pending>, since: Instant) {
        // Not the controller itself: it holds the guards on its informers, which a removed
        // controller must let go of when it is dropped, parked keys or not.
        let (shared, tracker) = (Arc::downgrade(&self.shared), self.shared.tracker.clone());
        let (queue, key) = (self.queue.clone(), key.clone());
        let deadline = since.checked_add(self.config.stale_cache_timeout);
        let parked = key.clone();
        let waker = tokio::spawn(async move {
            if let Some(hold) = tracker.hold(&pending) {
                match deadline {
                    Some(deadline) => drop(tokio::time::timeout_at(deadline, hold).await),
                    None => drop(hold.await),
                }
            }
            if shared.upgrade().is_some_and(|shared| shared.pending_writes.wake(&key, since)) {
                queue.add(key);
            }
        });
        self.shared.pending_writes.waking(&parked, waker.abort_handle());
    }

    /// A terminal error: no retry (controller-runtime's `TerminalError`); the key is forgotten,
    /// counted and reported, and comes back only when its object changes.
    fn give_up_terminal(&self, key: &ObjectKey, failure: ReconcileFailure) {
        self.queue.forget(key);
        self.shared.counters.terminal.fetch_add(1, Ordering::Relaxed);
        if let Some(metrics) = &self.metrics {
            observe("dropped", || metrics.dropped());
        }
        tracing::error!(error = %failure, "terminal error; not retrying");
        self.report_dropped(key, &failure);
    }

    /// `handleErr` of client-go's `examples/workqueue`: retry with the rate limiter up to `max_retries`, then drop.
    fn handle_err(&self, key: &ObjectKey, priority: Priority, failure: ReconcileFailure) {
        let attempt = self.queue.num_requeues(key);
        if attempt < self.config.max_retries {
            tracing::info!(attempt, error = %failure, "error syncing; will retry");
            self.shared.reasons.add(key, Reason::ErrorRetry);
            self.queue.add_rate_limited_with_priority(key.clone(), priority);
            return;
        }
        self.queue.forget(key);
        self.shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
        if let Some(metrics) = &self.metrics {
            observe("dropped", || metrics.dropped());
        }
        tracing::error!(error = %failure, "dropping key out of the queue after {} retries", self.config.max_retries);
        self.report_dropped(key, &failure);
    }

    /// Calls the `on_dropped` hook, if any. A panic in it (user code) is logged; the worker,
    /// which has still to mark the key done, goes on.
    fn report_dropped(&self, key: &ObjectKey, failure: &ReconcileFailure) {
        let Some(hook) = &self.config.on_dropped else { return };
        if let Err(panic) = catch(|| hook(key, failure)) {
            tracing::error!(panic = %panic, "the on_dropped hook panicked");
        }
    }
}

/// Whether `reconciler` calls `err` terminal. A panic in `is_terminal` (user code) is logged
/// and the error retried as one that is not terminal: retries end, where a worker unwound
/// would leave its key marked in progress for good.
fn is_terminal<R: Reconciler>(reconciler: &R, err: &R::Error) -> bool {
    catch(|| reconciler.is_terminal(err)).unwrap_or_else(|panic| {
        tracing::error!(
            panic = %panic,
            error = %err,
            "is_terminal panicked; the error is retried as one that is not terminal"
        );
        false
    })
}
