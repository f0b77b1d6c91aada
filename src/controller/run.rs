//! [`Controller::run`], the `Run` of client-go's `examples/workqueue`: start the informers the
//! controller owns, wait
//! for every cache it reads, run the workers until the shutdown, then stop in order (no new
//! keys, the reconciles in flight finished, the queue shut down, the handlers removed, the
//! informers it started stopped), however the run ends.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::adaptive::{AdaptiveWorkers, Policy, Sample};
use super::context::{Reason, Reasons};
use super::controller::{Controller, Informers};
use super::error::ControllerError;
use super::reconciler::Reconciler;
use crate::cache::{InformerHandle, InformerObject, ObjectKey, RunState, wait_for_informers};
use crate::fence::Fence;
use crate::panic::observe;
use crate::rest_client::ClientPressure;
use crate::sharding::range_member::HandOffStalled;
use crate::workqueue::WorkQueue;

/// Sends the stop signal when dropped, so that a `run` that is dropped (a Manager abandoning
/// it after its shutdown timeout) still stops what it started.
struct StopOnDrop(watch::Sender<bool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

/// Shuts the queue down and removes the controller's handlers from the informers when the run
/// ends, however it ends: returned, or dropped (a Manager abandoning it at its shutdown
/// timeout), so no handler is left feeding a queue nobody reads.
struct Cleanup<'a, K>(&'a Controller<K>);

impl<K> Controller<K> {
    /// Logs the keys still being reconciled as abandoned, counts them, and forgets them.
    pub(super) fn abandon_in_flight(&self, why: &str) {
        let keys = std::mem::take(&mut *self.shared.in_flight.lock());
        if keys.is_empty() {
            return;
        }
        self.shared.counters.abandoned.fetch_add(keys.len() as u64, Ordering::Relaxed);
        let keys: Vec<String> = keys.iter().map(ToString::to_string).collect();
        tracing::error!(
            count = keys.len(),
            keys = %keys.join(", "),
            "{why}: abandoning the reconciles still running"
        );
    }
}

impl<K> Drop for Cleanup<'_, K> {
    fn drop(&mut self) {
        // Reconciles still in flight here are dropped with the run (a Manager's timeout).
        self.0.abandon_in_flight("the controller's run was dropped");
        self.0.queue.shut_down();
        // Nothing runs the keys any more: their pending writes (and the tasks that wait on
        // them) and their reasons go with the run.
        self.0.shared.pending_writes.close();
        self.0.shared.tracker.stop_observing();
        self.0.shared.reasons.clear();
        // The workers carry the fence's marks; the controller's own copy must not outlive them.
        let mut fence = self.0.shared.fence.lock();
        *fence = fence.unmarked();
        drop(fence);
        let sources = std::mem::take(&mut *self.0.shared.sources.lock());
        for source in sources {
            (source.remove)(&source.registration);
        }
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

impl<K: InformerObject> Controller<K> {
    /// `Run` of client-go's `examples/workqueue`: starts the informers the controller owns,
    /// waits for every cache it reads to sync, runs the workers until `shutdown` completes, then stops taking keys,
    /// lets the reconciles in flight finish, shuts the queue down, removes its handlers from
    /// shared informers and stops the informers it started.
    ///
    /// Fails with [`ControllerError::CacheSync`] when shut down before its caches synced
    /// (naming them) or when an informer stops before its first list, and with
    /// [`ControllerError::InformerStopped`] when an informer it reads
    /// stops under it. A controller runs once (its clones share that run): a second `run`
    /// fails with [`ControllerError::AlreadyRun`].
    ///
    /// Takes the controller, so `tokio::spawn(controller.run(reconciler, shutdown))` works;
    /// keep a clone to read [`stats`](Self::stats) while and after it runs.
    pub async fn run<R>(
        self,
        reconciler: R,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ControllerError>
    where
        R: Reconciler<Object = K>,
    {
        self.run_fenced(reconciler, shutdown, None).await
    }

    /// [`run`](Self::run), its workers checking `fence` before each reconcile (a Manager's
    /// Leases). The fence is taken only once the run is known to be the first: a second run
    /// must not keep the fence's marks (they would hold the Lease's release back).
    pub(crate) async fn run_fenced<R>(
        self,
        reconciler: R,
        shutdown: impl Future<Output = ()> + Send,
        fence: Option<Fence>,
    ) -> Result<(), ControllerError>
    where
        R: Reconciler<Object = K>,
    {
        if self.shared.ran.swap(true, Ordering::SeqCst) {
            return Err(ControllerError::AlreadyRun);
        }
        if let Some(fence) = fence {
            self.fence_with(fence);
        }
        let span = tracing::info_span!("controller", name = %self.name);
        self.run_inner(Arc::new(reconciler), shutdown).instrument(span).await
    }

    async fn run_inner<R>(
        &self,
        reconciler: Arc<R>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ControllerError>
    where
        R: Reconciler<Object = K>,
    {
        let cleanup = Cleanup(self);
        let (stop_tx, stop_rx) = watch::channel(false);
        let stop = StopOnDrop(stop_tx);
        let mut tasks = JoinSet::new();
        let workers = self.shared.pool.target();
        tracing::info!(workers, adaptive = self.config.adaptive.is_some(), "starting controller");
        if let Some(metrics) = &self.metrics {
            observe("max_concurrent_reconciles", || metrics.max_concurrent_reconciles(workers));
        }
        let owned_informer = match self.informers.as_ref() {
            Informers::Wired if !self.informer.is_running() => {
                let informer = self.informer.clone();
                let stop = stopped(stop_rx.clone());
                Some(tokio::spawn(async move { informer.run(stop).await }))
            }
            Informers::OwnFactory(factory) => {
                factory.start(stopped(stop_rx.clone()));
                None
            }
            _ => None,
        };
        tokio::pin!(shutdown);
        let handles = self.informer_handles();
        // A shard of a ring of shard selectors: the task that takes and gives up its ranges.
        let mut hand_offs = None;
        let outcome = match wait_for_informers(&handles, &mut shutdown).await {
            Err(failure) => {
                let err = ControllerError::from(failure);
                tracing::error!(error = %err, "controller cannot start");
                Err(err)
            }
            Ok(()) => {
                let triggers = std::mem::take(&mut *self.shared.triggers.lock());
                for trigger in triggers {
                    let (queue, stop) = (self.queue.clone(), stopped(stop_rx.clone()));
                    tasks.spawn(forward(trigger, queue, self.shared.reasons.clone(), stop));
                }
                // A shard of a ring of shard selectors takes and gives up its ranges as the
                // ring changes, while the workers run.
                let ranges = self.shard.as_ref().and_then(|s| s.ranges()).cloned();
                hand_offs = ranges.map(|ranges| {
                    let stop = stopped(stop_rx.clone());
                    tokio::spawn(async move { ranges.run(stop).await }.in_current_span())
                });
                let mut target = self.shared.pool.subscribe();
                let mut live = 0;
                let start = *target.borrow_and_update();
                self.resize(&mut tasks, &mut live, start, &reconciler, &stop_rx);
                // The policy's own pressure, else the one its Manager gave the controller.
                let mut adaptive = self.config.adaptive.clone().map(|policy| {
                    let pressure = policy.client_pressure.clone().or(self.shared.pressure.clone());
                    Adaptive::new(policy, pressure)
                });
                let informer_stopped = first_stopped(&handles);
                tokio::pin!(informer_stopped);
                loop {
                    tokio::select! {
                        _ = &mut shutdown => break Ok(()),
                        informer = &mut informer_stopped => {
                            let err = ControllerError::InformerStopped { informer };
                            tracing::error!(error = %err, "stopping controller");
                            break Err(err);
                        }
                        ended = async { hand_offs.as_mut().expect("a shard").await },
                            if hand_offs.is_some() =>
                        {
                            hand_offs = None;
                            break match ended {
                                Ok(Err(stalled)) => Err(self.fence(stalled, &mut tasks).await),
                                // It ends on its own only with a stall.
                                Ok(Ok(())) => Ok(()),
                                Err(join) => std::panic::resume_unwind(join.into_panic()),
                            };
                        }
                        Ok(()) = target.changed() => {
                            let to = *target.borrow_and_update();
                            self.resize(&mut tasks, &mut live, to, &reconciler, &stop_rx);
                        }
                        _ = async { adaptive.as_mut().expect("adaptive").ticker.tick().await },
                            if adaptive.is_some() =>
                        {
                            if let Some(adaptive) = adaptive.as_mut() {
                                self.adapt(adaptive);
                            }
                        }
                    }
                }
            }
        };
        tracing::info!("stopping controller");
        drop(stop);
        if let Some(run) = hand_offs {
            let _ = run.await;
        }
        let drain = async { while tasks.join_next().await.is_some() {} };
        match self.config.shutdown_grace {
            None => drain.await,
            Some(grace) => {
                if tokio::time::timeout(grace, drain).await.is_err() {
                    self.abandon_in_flight(&format!(
                        "the shutdown grace period of {grace:?} ran out"
                    ));
                    tasks.abort_all();
                    while tasks.join_next().await.is_some() {}
                }
            }
        }
        drop(cleanup);
        match self.informers.as_ref() {
            Informers::OwnFactory(factory) => factory.shutdown().await,
            _ => {
                if let Some(task) = owned_informer {
                    let _ = task.await;
                }
            }
        }
        tracing::info!("controller stopped");
        outcome
    }
}

/// The adaptive policy's state in a run.
struct Adaptive {
    ticker: tokio::time::Interval,
    policy: Policy,
    /// Where it reads whether the API server pushes back.
    pressure: Option<Arc<dyn ClientPressure>>,
    /// The pressure count at the last look.
    seen: u64,
    /// When it last looked.
    looked: tokio::time::Instant,
    /// How often each of the runtime's worker threads had parked (found no task) at the last
    /// look.
    parks: Vec<u64>,
}

impl Adaptive {
    /// The state of a run of `policy`, reading `pressure`, as of now.
    fn new(policy: AdaptiveWorkers, pressure: Option<Arc<dyn ClientPressure>>) -> Self {
        Self {
            ticker: ticker(policy.interval),
            seen: pressure.as_ref().map_or(0, |p| p.throttled()),
            pressure,
            looked: tokio::time::Instant::now(),
            parks: runtime_parks(),
            policy: Policy::new(policy),
        }
    }
}

/// How often each of the runtime's worker threads has parked so far: a thread parks only when
/// it finds no task to run (empty where tokio does not count it: targets without 64-bit
/// atomics).
fn runtime_parks() -> Vec<u64> {
    #[cfg(target_has_atomic = "64")]
    {
        let metrics = tokio::runtime::Handle::current().metrics();
        (0..metrics.num_workers()).map(|worker| metrics.worker_park_count(worker)).collect()
    }
    #[cfg(not(target_has_atomic = "64"))]
    Vec::new()
}

/// Ticks every `interval`, first one `interval` from now; late ticks are not caught up.
fn ticker(interval: std::time::Duration) -> tokio::time::Interval {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker
}

impl<K: InformerObject> Controller<K> {
    /// Moves the run's worker count from `live` to `to`: new workers spawned now (after taking
    /// back retire tickets no worker took yet), or tickets handed out for those too many.
    fn resize<R: Reconciler<Object = K>>(
        &self,
        tasks: &mut JoinSet<()>,
        live: &mut usize,
        to: usize,
        reconciler: &Arc<R>,
        stop: &watch::Receiver<bool>,
    ) {
        // Workers gone leave their results here: reap them, the set does not grow with changes.
        while tasks.try_join_next().is_some() {}
        let pool = &self.shared.pool;
        if to > *live {
            let missing = to - *live;
            for _ in pool.unretire(missing)..missing {
                let (this, reconciler, stop) = (self.clone(), reconciler.clone(), stop.clone());
                // Each worker carries the fence's marks until it is gone (aborted ones
                // too), so that a Manager dropped releases its Lease only after.
                let working = self.shared.fence.lock().clone();
                tasks.spawn(
                    async move {
                        let _working = working;
                        this.run_worker(reconciler, stop).await
                    }
                    .in_current_span(),
                );
            }
        } else {
            pool.retire(*live - to);
        }
        *live = to;
    }

    /// One look of the adaptive policy: its decision set, reported and logged.
    fn adapt(&self, adaptive: &mut Adaptive) {
        let pool = &self.shared.pool;
        let now = adaptive.pressure.as_ref().map_or(0, |p| p.throttled());
        let throttled = now.saturating_sub(std::mem::replace(&mut adaptive.seen, now));
        // Cores' worth of CPU the reconciles held since the last look: poll time on the `std`
        // clock over the look's span on tokio's (so on a paused clock, reconciles read as I/O).
        let looked = std::mem::replace(&mut adaptive.looked, tokio::time::Instant::now());
        let span = looked.elapsed().as_secs_f64();
        let cpu = match span > 0.0 {
            true => pool.take_polled().as_secs_f64() / span,
            false => 0.0,
        };
        // No worker thread parked since the last look: every one always had a task to run.
        let parks = runtime_parks();
        let cores_full = !parks.is_empty() && parks == adaptive.parks;
        adaptive.parks = parks;
        let sample = Sample {
            depth: self.queue.len_available(),
            active: pool.active(),
            workers: pool.target(),
            cpu,
            cores_full,
            throttled,
            cores: tokio::runtime::Handle::current().metrics().num_workers(),
        };
        let Some(decision) = adaptive.policy.decide(sample, tokio::time::Instant::now()) else {
            return;
        };
        let (to, reason) = (decision.to, decision.reason);
        let from = pool.set_target(to);
        if from != to {
            tracing::info!(
                from,
                to,
                reason = reason.as_str(),
                depth = sample.depth,
                active = sample.active,
                cpu,
                cores_full,
                throttled,
                "worker count changed"
            );
            self.scaled(from, to, reason);
        }
    }

    /// A shard whose give-up stalled fences itself: its reconciles are aborted (dropped at
    /// their next await) and awaited before anything else, so that none runs once its
    /// ranges move; the error says which keys held the hand-off up.
    async fn fence(&self, stalled: HandOffStalled, tasks: &mut JoinSet<()>) -> ControllerError {
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        self.abandon_in_flight("the shard fenced itself after a stalled hand-off");
        let ranges = self.shard.as_ref().and_then(|s| s.ranges());
        let err = ControllerError::HandOffTimeout {
            shard: ranges.map(|r| r.shard().to_owned()).unwrap_or_default(),
            ring: ranges.map(|r| r.ring().to_owned()).unwrap_or_default(),
            waited: stalled.waited,
            keys: stalled.keys.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
        };
        tracing::error!(error = %err, "stopping controller");
        err
    }
}

/// Puts every key of a trigger stream in the queue until the stream ends or `stop`.
async fn forward(
    mut trigger: BoxStream<'static, ObjectKey>,
    queue: WorkQueue<ObjectKey>,
    reasons: Reasons,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => return,
            key = trigger.next() => match key {
                Some(key) => {
                    reasons.add(&key, Reason::Triggered);
                    queue.add(key)
                }
                None => return,
            },
        }
    }
}

/// Resolves with the description of the first informer whose run ends.
async fn first_stopped(handles: &[Arc<dyn InformerHandle>]) -> String {
    let each = handles.iter().map(|handle| {
        let mut state = handle.state_receiver();
        let name = handle.describe();
        Box::pin(async move {
            // Sure to be running now (it synced); wait for that to end.
            let _ = state.wait_for(|s| *s == RunState::Stopped).await;
            name
        })
    });
    futures::future::select_all(each).await.0
}
