//! [`Controller`]: the seed article's `Run`, `runWorker`, `processNextItem` and `handleErr`,
//! with the informers it needs, the sources of its keys, and a clean stop.

use std::collections::BTreeSet;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use super::config::Config;
use super::error::{ControllerError, ReconcileFailure};
use super::metrics::{ControllerMetrics, ControllerMetricsProvider, ReconcileOutcome};
use super::reconciler::Reconciler;
use super::source::EnqueueHandler;
use super::stats::{ControllerStats, Counters};
use super::writes::{self, PendingWrites};
use crate::cache::{
    HandlerRegistration, Indexer, Informer, InformerHandle, InformerObject, ObjectKey, RunState,
    SharedInformerFactory, wait_for_informers,
};
use crate::panic::panic_message;
use crate::workqueue::{Priority, WorkQueue};

/// Who runs the informers a controller reads.
pub(crate) enum Informers {
    /// The seed's wiring: the controller runs its informer, unless it already runs (then
    /// whoever runs it owns it).
    Seed,
    /// A factory the controller made for itself: it starts it and shuts it down.
    OwnFactory(SharedInformerFactory),
    /// A factory someone else owns (a Manager, the user): never started or stopped here.
    Shared,
}

/// A handler a controller put on an informer, removed when the controller stops.
pub(crate) struct Source {
    pub(crate) informer: Arc<dyn InformerHandle>,
    pub(crate) remove: Box<dyn Fn(&HandlerRegistration) -> bool + Send + Sync>,
    pub(crate) registration: HandlerRegistration,
}

impl Source {
    /// Registers `handler` on `informer`: on the informer's task when it runs no user code
    /// (no predicate, no mapper), on a task of its own otherwise.
    pub(crate) fn register<K: InformerObject>(
        informer: &Informer<K>,
        handler: EnqueueHandler<K>,
    ) -> Self {
        let registration = match handler.runs_user_code() {
            true => informer.add_event_handler(handler),
            false => informer.add_inline_event_handler(handler),
        };
        let remover = informer.clone();
        Self {
            informer: Arc::new(informer.clone()),
            remove: Box::new(move |r| remover.remove_event_handler(r)),
            registration,
        }
    }
}

/// What a controller is built from (by the builder, or the seed's constructor).
pub(crate) struct Parts<K> {
    pub(crate) name: String,
    pub(crate) queue: WorkQueue<ObjectKey>,
    pub(crate) informer: Informer<K>,
    /// Informers besides the primary one whose caches must sync before workers start.
    pub(crate) secondary: Vec<Arc<dyn InformerHandle>>,
    pub(crate) informers: Informers,
    pub(crate) sources: Vec<Source>,
    pub(crate) triggers: Vec<BoxStream<'static, ObjectKey>>,
    pub(crate) config: Config,
}

/// What the clones of one controller share.
struct Shared {
    counters: Counters,
    /// Keys being reconciled now.
    in_flight: Mutex<BTreeSet<ObjectKey>>,
    /// The versions of the controller's own writes that keys' next reconciles wait for.
    pending_writes: PendingWrites,
    /// Handlers to remove at stop.
    sources: Mutex<Vec<Source>>,
    /// External triggers, taken by `run`.
    triggers: Mutex<Vec<BoxStream<'static, ObjectKey>>>,
    ran: AtomicBool,
}

/// Runs workers that take keys from a queue and reconcile them; see the [module docs](super).
///
/// Built whole, by [`Controller::builder`] (or [`Manager::controller`](crate::manager::Manager::controller))
/// or the seed's [`Controller::new`] / [`Controller::with_config`]; it then only runs and
/// reports. A clone is the same controller: clones share its queue, its informers, its
/// [`stats`](Self::stats) and [`in_flight`](Self::in_flight), and its one run (so a clone kept
/// before [`run`](Self::run) takes the controller reads the run's figures).
pub struct Controller<K> {
    name: String,
    queue: WorkQueue<ObjectKey>,
    informer: Informer<K>,
    /// Informers besides the primary one whose caches must sync before workers start.
    secondary: Vec<Arc<dyn InformerHandle>>,
    informers: Arc<Informers>,
    indexer_mismatch: bool,
    config: Config,
    metrics: Option<Arc<dyn ControllerMetrics>>,
    shared: Arc<Shared>,
}

impl<K> Clone for Controller<K> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            queue: self.queue.clone(),
            informer: self.informer.clone(),
            secondary: self.secondary.clone(),
            informers: self.informers.clone(),
            indexer_mismatch: self.indexer_mismatch,
            config: self.config.clone(),
            metrics: self.metrics.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<K> std::fmt::Debug for Controller<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

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
    fn abandon_in_flight(&self, why: &str) {
        let keys = std::mem::take(
            &mut *self.shared.in_flight.lock().unwrap_or_else(PoisonError::into_inner),
        );
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
        let sources = std::mem::take(
            &mut *self.0.shared.sources.lock().unwrap_or_else(PoisonError::into_inner),
        );
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
    /// The seed's `NewController(queue, indexer, informer)`: the caller wired the informer's
    /// handlers to put keys in `queue` (see [`enqueue_handler`](super::enqueue_handler)).
    /// `indexer` must be `informer.indexer()`; `run` refuses anything else.
    ///
    /// The controller runs the informer unless it already runs, and then stops it when it
    /// stops, as the seed does. To share an informer among controllers, take it from a
    /// [`SharedInformerFactory`] and build with [`Controller::builder`]. Runs with
    /// [`Config::default()`]; see [`with_config`](Self::with_config).
    pub fn new(queue: WorkQueue<ObjectKey>, indexer: Indexer<K>, informer: Informer<K>) -> Self {
        Self::with_config(queue, indexer, informer, Config::default())
    }

    /// As [`new`](Self::new), running as `config` says (workers, retries, timeouts):
    /// the seed's `NewController` and `Run(threadiness, ..)` together.
    pub fn with_config(
        queue: WorkQueue<ObjectKey>,
        indexer: Indexer<K>,
        informer: Informer<K>,
        config: Config,
    ) -> Self {
        let indexer_mismatch = !indexer.same_store(&informer.indexer());
        let name = match queue.name() {
            "" => informer.list_watch().api_resource().plural.clone(),
            name => name.to_owned(),
        };
        let mut controller = Self::from_parts(Parts {
            name,
            queue,
            informer,
            secondary: Vec::new(),
            informers: Informers::Seed,
            sources: Vec::new(),
            triggers: Vec::new(),
            config,
        });
        controller.indexer_mismatch = indexer_mismatch;
        controller
    }

    pub(crate) fn from_parts(parts: Parts<K>) -> Self {
        let Parts { name, queue, informer, secondary, informers, sources, triggers, config } =
            parts;
        Self {
            name,
            queue,
            informer,
            secondary,
            informers: Arc::new(informers),
            indexer_mismatch: false,
            config,
            metrics: None,
            shared: Arc::new(Shared {
                counters: Counters::default(),
                in_flight: Mutex::new(BTreeSet::new()),
                pending_writes: PendingWrites::default(),
                sources: Mutex::new(sources),
                triggers: Mutex::new(triggers),
                ran: AtomicBool::new(false),
            }),
        }
    }

    /// Whether a [`Manager`](crate::manager::Manager) with leader election runs this
    /// controller only while it leads; see [`Config::needs_leader_election`].
    pub fn needs_leader_election(&self) -> bool {
        self.config.needs_leader_election
    }

    /// How it runs: the [`Config`] it was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Reports to `provider` from now on, unless the controller reports somewhere already
    /// (the builder's metrics; a [`Manager`](crate::manager::Manager) gives the controllers it
    /// is handed its registry this way).
    pub(crate) fn report_to_if_unset(&mut self, provider: &dyn ControllerMetricsProvider) {
        if self.metrics.is_none() {
            self.metrics = Some(provider.new_controller_metrics(&self.name));
        }
    }

    /// Whether it made an informer factory of its own (built without
    /// [`ControllerBuilder::factory`](super::ControllerBuilder::factory)).
    pub(crate) fn owns_factory(&self) -> bool {
        matches!(self.informers.as_ref(), Informers::OwnFactory(_))
    }

    /// The controller's name: in its logs' spans, and its queue's name unless that has one.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cache the reconciler reads: the primary informer's store.
    pub fn indexer(&self) -> Indexer<K> {
        self.informer.indexer()
    }

    /// The primary informer.
    pub fn informer(&self) -> &Informer<K> {
        &self.informer
    }

    /// The queue of keys.
    pub fn queue(&self) -> &WorkQueue<ObjectKey> {
        &self.queue
    }

    /// What the workers did so far.
    pub fn stats(&self) -> ControllerStats {
        let c = &self.shared.counters;
        ControllerStats {
            succeeded: c.succeeded.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            panicked: c.panicked.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            terminal: c.terminal.load(Ordering::Relaxed),
            abandoned: c.abandoned.load(Ordering::Relaxed),
            stale_cache_timeouts: c.stale_cache_timeouts.load(Ordering::Relaxed),
        }
    }

    /// The keys being reconciled now.
    pub fn in_flight(&self) -> Vec<ObjectKey> {
        self.lock_in_flight().iter().cloned().collect()
    }

    fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, BTreeSet<ObjectKey>> {
        self.shared.in_flight.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every informer the controller reads, erased.
    fn informer_handles(&self) -> Vec<Arc<dyn InformerHandle>> {
        let primary: Arc<dyn InformerHandle> = Arc::new(self.informer.clone());
        std::iter::once(primary).chain(self.secondary.iter().cloned()).collect()
    }

    /// The seed's `Run`: starts the informers the controller owns, waits for every cache it
    /// reads to sync, runs the workers until `shutdown` completes, then stops taking keys,
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
        if self.indexer_mismatch {
            return Err(ControllerError::IndexerMismatch);
        }
        if self.shared.ran.swap(true, Ordering::SeqCst) {
            return Err(ControllerError::AlreadyRun);
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
        tracing::info!(workers = self.config.workers, "starting controller");
        if let Some(metrics) = &self.metrics {
            metrics.max_concurrent_reconciles(self.config.workers);
        }
        let owned_informer = match self.informers.as_ref() {
            Informers::Seed if !self.informer.is_running() => {
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
        let outcome = match wait_for_informers(&handles, &mut shutdown).await {
            Err(failure) => {
                let err = ControllerError::from(failure);
                tracing::error!(error = %err, "controller cannot start");
                Err(err)
            }
            Ok(()) => {
                let triggers = std::mem::take(
                    &mut *self.shared.triggers.lock().unwrap_or_else(PoisonError::into_inner),
                );
                for trigger in triggers {
                    let (queue, stop) = (self.queue.clone(), stopped(stop_rx.clone()));
                    tasks.spawn(forward(trigger, queue, stop));
                }
                for _ in 0..self.config.workers {
                    let (this, reconciler, rx) =
                        (self.clone(), reconciler.clone(), stop_rx.clone());
                    tasks.spawn(
                        async move { this.run_worker(reconciler, rx).await }.in_current_span(),
                    );
                }
                tokio::select! {
                    _ = &mut shutdown => Ok(()),
                    informer = first_stopped(&handles) => {
                        let err = ControllerError::InformerStopped { informer };
                        tracing::error!(error = %err, "stopping controller");
                        Err(err)
                    }
                }
            }
        };
        tracing::info!("stopping controller");
        drop(stop);
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

    /// The seed's `runWorker`: process keys until shut down.
    async fn run_worker<R: Reconciler<Object = K>>(
        &self,
        reconciler: Arc<R>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let key = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                key = self.queue.get_with_priority() => match key {
                    Some(key) => key,
                    None => return,
                },
            };
            let (key, priority) = key;
            let span = tracing::info_span!("reconcile", controller = %self.name, key = %key);
            self.process_item(reconciler.as_ref(), key, priority).instrument(span).await;
        }
    }

    /// The seed's `processNextItem` after `Get`: reconcile, handle the outcome, `Done`.
    /// `priority` is the one the key was handed out at; a failure retries at it.
    async fn process_item<R: Reconciler<Object = K>>(
        &self,
        reconciler: &R,
        key: ObjectKey,
        priority: Priority,
    ) {
        self.lock_in_flight().insert(key.clone());
        let started = self.metrics.as_ref().map(|m| {
            m.worker_started();
            Instant::now()
        });
        self.wait_for_own_write(&key).await;
        let object = self.informer.indexer().get(&key);
        let reconcile =
            writes::recording(AssertUnwindSafe(reconciler.reconcile(&key, object)).catch_unwind());
        let outcome = match self.config.reconcile_timeout {
            Some(timeout) => tokio::time::timeout(timeout, reconcile).await.map_err(|_| timeout),
            None => Ok(reconcile.await),
        };
        let outcome = outcome.map(|(outcome, reported)| {
            if reported > 0 {
                self.shared.pending_writes.insert(&key, reported);
            }
            outcome
        });
        let counted = match outcome {
            Ok(Ok(Ok(action))) => {
                self.shared.counters.succeeded.fetch_add(1, Ordering::Relaxed);
                self.queue.forget(&key);
                match action.requeue_delay() {
                    Some(delay) => {
                        let asked = action.priority().unwrap_or(Priority::NORMAL);
                        self.queue.add_after_with_priority(key.clone(), delay, asked);
                        ReconcileOutcome::RequeueAfter
                    }
                    None => ReconcileOutcome::Success,
                }
            }
            Ok(Ok(Err(err))) if reconciler.is_terminal(&err) => {
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
        if let (Some(metrics), Some(started)) = (&self.metrics, started) {
            metrics.reconciled(counted, started.elapsed());
            metrics.worker_finished();
        }
        self.lock_in_flight().remove(&key);
        self.queue.done(&key);
    }

    /// Waits (up to the stale-cache timeout) for the cache to hold the controller's own last
    /// reported write of `key`; see the `writes` module.
    async fn wait_for_own_write(&self, key: &ObjectKey) {
        let Some(rv) = self.shared.pending_writes.take(key) else { return };
        if self.config.stale_cache_timeout.is_zero() {
            return;
        }
        let rv = rv.to_string();
        let wait = self.informer.wait_for_resource_version(&rv);
        if tokio::time::timeout(self.config.stale_cache_timeout, wait).await.is_err() {
            self.shared.counters.stale_cache_timeouts.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                resource_version = %rv,
                timeout = ?self.config.stale_cache_timeout,
                "the cache does not hold this controller's own write yet; reconciling anyway"
            );
        }
    }

    /// A terminal error: no retry (controller-runtime's `TerminalError`); the key is forgotten,
    /// counted and reported, and comes back only when its object changes.
    fn give_up_terminal(&self, key: &ObjectKey, failure: ReconcileFailure) {
        self.queue.forget(key);
        self.shared.counters.terminal.fetch_add(1, Ordering::Relaxed);
        if let Some(metrics) = &self.metrics {
            metrics.dropped();
        }
        tracing::error!(error = %failure, "terminal error; not retrying");
        if let Some(hook) = &self.config.on_dropped {
            hook(key, &failure);
        }
    }

    /// The seed's `handleErr`: retry with the rate limiter up to `max_retries`, then drop.
    fn handle_err(&self, key: &ObjectKey, priority: Priority, failure: ReconcileFailure) {
        let attempt = self.queue.num_requeues(key);
        if attempt < self.config.max_retries {
            tracing::info!(attempt, error = %failure, "error syncing; will retry");
            self.queue.add_rate_limited_with_priority(key.clone(), priority);
            return;
        }
        self.queue.forget(key);
        self.shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
        if let Some(metrics) = &self.metrics {
            metrics.dropped();
        }
        tracing::error!(error = %failure, "dropping key out of the queue after {} retries", self.config.max_retries);
        if let Some(hook) = &self.config.on_dropped {
            hook(key, &failure);
        }
    }
}

/// Puts every key of a trigger stream in the queue until the stream ends or `stop`.
async fn forward(
    mut trigger: BoxStream<'static, ObjectKey>,
    queue: WorkQueue<ObjectKey>,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => return,
            key = trigger.next() => match key {
                Some(key) => queue.add(key),
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
