//! [`Controller`]: what a controller is (its queue, informers, sources, configuration and the
//! figures its clones share) and what it reports. Its run is in `run.rs` (`Run` of client-go's
//! `examples/workqueue`) and its workers in `worker.rs` (`runWorker`, `processNextItem`,
//! `handleErr`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::stream::BoxStream;
use parking_lot::Mutex;

use super::config::Config;
use super::context::Reasons;
use super::metrics::{ControllerMetrics, ScaleReason};
use super::own_writes::{CacheView, PendingWrites, Tracker};
use super::pool::WorkerPool;
use super::shard::ShardMember;
use super::source::EnqueueHandler;
use super::stats::{ControllerStats, Counters};
use crate::cache::{
    HandlerRegistration, Indexer, Informer, InformerGuard, InformerHandle, InformerObject,
    ObjectKey, SharedInformerFactory,
};
use crate::fence::Fence;
use crate::panic::observe;
use crate::rest_client::ClientPressure;
use crate::workqueue::WorkQueue;

/// Who runs the informers a controller reads.
pub(crate) enum Informers {
    /// client-go's explicit wiring: the controller runs its informer, unless it already runs (then
    /// whoever runs it owns it).
    Wired,
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
    /// The informer's cache, as a hold for the controller's own writes reads it.
    pub(crate) view: Arc<dyn CacheView>,
}

impl Source {
    /// Registers `handler` on `informer`: on the informer's task when it runs no user code
    /// (no predicate, no mapper), on a task of its own otherwise.
    pub(crate) fn register<K: InformerObject>(
        informer: &Informer<K>,
        mut handler: EnqueueHandler<K>,
    ) -> Self {
        handler.kind = Arc::from(informer.list_watch().api_resource().kind.as_str());
        let registration = match handler.runs_user_code() {
            true => informer.add_event_handler(handler),
            false => informer.add_inline_event_handler(handler),
        };
        let remover = informer.clone();
        Self {
            informer: Arc::new(informer.clone()),
            remove: Box::new(move |r| remover.remove_event_handler(r)),
            registration,
            view: Arc::new(informer.clone()),
        }
    }
}

/// What a controller is built from (by the builder, or client-go's constructor).
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
    /// The shard of a ring it is, if sharded.
    pub(crate) shard: Option<Arc<ShardMember>>,
    /// Its hold on each factory informer it reads.
    pub(crate) guards: Vec<InformerGuard>,
    /// Why each key was queued, filled by its sources.
    pub(crate) reasons: Reasons,
    /// Whether the API server pushes back on its Manager's clients, for adaptive workers.
    pub(crate) pressure: Option<Arc<dyn ClientPressure>>,
}

/// What the clones of one controller share.
pub(super) struct Shared {
    pub(super) counters: Counters,
    /// Keys being reconciled now.
    pub(super) in_flight: Mutex<BTreeSet<ObjectKey>>,
    /// The versions of the controller's own writes that keys' next reconciles wait for.
    pub(super) pending_writes: PendingWrites,
    /// Why each key was queued since its last reconcile.
    pub(super) reasons: Reasons,
    /// Every cache the controller reads, the primary's first, and the creations it expects
    /// in them, as its holds read them.
    pub(super) tracker: Arc<Tracker>,
    /// Handlers to remove at stop.
    pub(super) sources: Mutex<Vec<Source>>,
    /// External triggers, taken by `run`.
    pub(super) triggers: Mutex<Vec<BoxStream<'static, ObjectKey>>>,
    pub(super) ran: AtomicBool,
    /// The Leases it runs under (a Manager's), checked before each reconcile.
    pub(super) fence: Mutex<Fence>,
    /// Its hold on each factory informer it reads: dropped with the last clone of the
    /// controller (and its run), which lets the factory stop those no one else uses.
    pub(super) _guards: Vec<InformerGuard>,
    /// The worker count while it runs.
    pub(super) pool: WorkerPool,
    /// Whether the API server pushes back on its Manager's clients, for adaptive workers.
    pub(super) pressure: Option<Arc<dyn ClientPressure>>,
}

impl Drop for Shared {
    /// A controller dropped without a run (whose end removes them) takes its handlers off the
    /// informers, which other users may keep running: none is left feeding a queue nobody
    /// reads.
    fn drop(&mut self) {
        let sources = std::mem::take(self.sources.get_mut());
        for source in sources {
            (source.remove)(&source.registration);
        }
    }
}

/// Runs workers that take keys from a queue and reconcile them; see the [module docs](super).
///
/// Built whole, by [`Controller::builder`] (or [`Manager::controller`](crate::manager::Manager::controller))
/// or client-go's [`Controller::new`] / [`Controller::with_config`]; it then only runs and
/// reports. A clone is the same controller: clones share its queue, its informers, its
/// [`stats`](Self::stats) and [`in_flight`](Self::in_flight), and its one run (so a clone kept
/// before [`run`](Self::run) takes the controller reads the run's figures).
///
/// A controller built on a [`SharedInformerFactory`] holds an
/// [`InformerGuard`](crate::cache::InformerGuard) on each informer it reads: dropping its last
/// clone and its run lets the factory stop and free the informers no other user holds.
pub struct Controller<K> {
    pub(super) name: String,
    pub(super) queue: WorkQueue<ObjectKey>,
    pub(super) informer: Informer<K>,
    /// Informers besides the primary one whose caches must sync before workers start.
    pub(super) secondary: Vec<Arc<dyn InformerHandle>>,
    pub(super) informers: Arc<Informers>,
    pub(super) config: Config,
    pub(super) metrics: Option<Arc<dyn ControllerMetrics>>,
    pub(super) shard: Option<Arc<ShardMember>>,
    pub(super) shared: Arc<Shared>,
}

impl<K> Clone for Controller<K> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            queue: self.queue.clone(),
            informer: self.informer.clone(),
            secondary: self.secondary.clone(),
            informers: self.informers.clone(),
            config: self.config.clone(),
            metrics: self.metrics.clone(),
            shard: self.shard.clone(),
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

impl<K: InformerObject> Controller<K> {
    /// The `NewController(queue, indexer, informer)` of client-go's `examples/workqueue`: the
    /// caller wired the informer's handlers to put keys in `queue` (see
    /// [`enqueue_handler`](super::enqueue_handler)). The indexer the controller reads is the
    /// informer's own, [`Informer::indexer`].
    ///
    /// The controller runs the informer unless it already runs, and then stops it when it
    /// stops, as client-go's does. To share an informer among controllers, take it from a
    /// [`SharedInformerFactory`] and build with [`Controller::builder`]. Runs with
    /// [`Config::default()`]; see [`with_config`](Self::with_config).
    ///
    /// ```
    /// # use ctrlkit::cache::{Informer, ListWatch, ObjectKey};
    /// # use ctrlkit::controller::{Controller, enqueue_handler};
    /// # use ctrlkit::workqueue::WorkQueue;
    /// # use k8s_openapi::api::core::v1::Pod;
    /// # fn wire(pods: kube_client::Api<Pod>) {
    /// let queue: WorkQueue<ObjectKey> = WorkQueue::new();
    /// let informer = Informer::new(ListWatch::new(pods));
    /// informer.add_event_handler(enqueue_handler(queue.clone()));
    /// let controller = Controller::new(queue, informer);
    /// # }
    /// ```
    /// There is no indexer to pass, so one of another informer cannot be:
    /// ```compile_fail
    /// # use ctrlkit::cache::{Informer, ListWatch, ObjectKey};
    /// # use ctrlkit::controller::Controller;
    /// # use ctrlkit::workqueue::WorkQueue;
    /// # use k8s_openapi::api::core::v1::Pod;
    /// # fn wire(pods: kube_client::Api<Pod>) {
    /// let queue: WorkQueue<ObjectKey> = WorkQueue::new();
    /// let informer = Informer::new(ListWatch::new(pods.clone()));
    /// let other = Informer::new(ListWatch::new(pods));
    /// let controller = Controller::new(queue, other.indexer(), informer);
    /// # }
    /// ```
    pub fn new(queue: WorkQueue<ObjectKey>, informer: Informer<K>) -> Self {
        Self::with_config(queue, informer, Config::default())
    }

    /// As [`new`](Self::new), running as `config` says (workers, retries, timeouts): the
    /// `NewController` and `Run(threadiness, ..)` of client-go's `examples/workqueue` together.
    pub fn with_config(queue: WorkQueue<ObjectKey>, informer: Informer<K>, config: Config) -> Self {
        let name = match queue.name() {
            "" => informer.list_watch().api_resource().plural.clone(),
            name => name.to_owned(),
        };
        Self::from_parts(Parts {
            name,
            queue,
            informer,
            secondary: Vec::new(),
            informers: Informers::Wired,
            sources: Vec::new(),
            triggers: Vec::new(),
            config,
            shard: None,
            guards: Vec::new(),
            reasons: Reasons::default(),
            pressure: None,
        })
    }

    pub(crate) fn from_parts(parts: Parts<K>) -> Self {
        let Parts {
            name,
            queue,
            informer,
            secondary,
            informers,
            sources,
            triggers,
            config,
            shard,
            guards,
            reasons,
            pressure,
        } = parts;
        let primary: Arc<dyn CacheView> = Arc::new(informer.clone());
        let views = std::iter::once(primary).chain(sources.iter().map(|s| s.view.clone()));
        // With the guard off no count is raised: nothing to observe.
        let observe = !config.stale_cache_timeout.is_zero();
        let tracker = Arc::new(Tracker::new(views, observe));
        let workers = match &config.adaptive {
            Some(policy) => policy.clamp(config.workers),
            None => config.workers,
        };
        Self {
            name,
            queue,
            informer,
            secondary,
            informers: Arc::new(informers),
            config,
            metrics: None,
            shard,
            shared: Arc::new(Shared {
                counters: Counters::default(),
                in_flight: Mutex::new(BTreeSet::new()),
                pending_writes: PendingWrites::default(),
                reasons,
                tracker,
                sources: Mutex::new(sources),
                triggers: Mutex::new(triggers),
                ran: AtomicBool::new(false),
                fence: Mutex::new(Fence::default()),
                _guards: guards,
                pool: WorkerPool::new(workers),
                pressure,
            }),
        }
    }

    /// Whether a [`Manager`](crate::manager::Manager) with leader election runs this
    /// controller only while it leads; see [`Config::needs_leader_election`].
    pub fn needs_leader_election(&self) -> bool {
        self.config.needs_leader_election
    }

    /// Whether it is a shard of a ring
    /// ([`ControllerBuilder::shard`](super::ControllerBuilder::shard)).
    pub fn is_sharded(&self) -> bool {
        self.shard.is_some()
    }

    /// How it runs: the [`Config`] it was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Changes how many workers the controller runs, at once if it runs, or the count its run
    /// starts with (zero counts as one). Up: new workers start now. Down: workers leave as
    /// they finish their current key (none is cancelled), idle ones at once.
    /// `max_concurrent_reconciles` follows at once; the change is reported to the metrics as
    /// [`ScaleReason::Manual`] and logged. [`Config::workers`] stays the start count; an
    /// [`AdaptiveWorkers`](super::AdaptiveWorkers) policy goes on from the new count.
    ///
    /// Clones share the count, so a clone kept before the controller is handed over changes
    /// the running one: under a [`Manager`](crate::manager::Manager), clone the
    /// [`ManagedController`](crate::manager::ManagedController) (it derefs to the controller)
    /// before adding it.
    ///
    /// ```no_run
    /// # use ctrlkit::controller::Reconciler;
    /// # async fn demo<R: Reconciler<Object = k8s_openapi::api::core::v1::Pod>>(
    /// #     mut manager: ctrlkit::manager::Manager, reconciler: R,
    /// # ) -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::Pod;
    /// use kube_client::Api;
    ///
    /// let managed = manager.controller(Api::<Pod>::all(manager.client().clone())).build();
    /// let live = (*managed).clone();
    /// manager.add_controller(managed, reconciler)?;
    /// live.set_workers(8); // the running controller now has 8 workers
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_workers(&self, workers: usize) {
        let to = workers.max(1);
        let from = self.shared.pool.set_target(to);
        if from != to {
            tracing::info!(controller = %self.name, from, to, reason = "manual", "worker count changed");
            self.scaled(from, to, ScaleReason::Manual);
        }
    }

    /// How many workers the controller runs now (or will start with): the last
    /// [`set_workers`](Self::set_workers) or adaptive decision, else [`Config::workers`].
    /// Workers asked to leave may still be finishing their key.
    pub fn workers(&self) -> usize {
        self.shared.pool.target()
    }

    /// Reports a change of the worker count to the metrics.
    pub(super) fn scaled(&self, from: usize, to: usize, reason: ScaleReason) {
        if let Some(metrics) = &self.metrics {
            observe("max_concurrent_reconciles", || metrics.max_concurrent_reconciles(to));
            observe("scaled", || metrics.scaled(from, to, reason));
        }
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
            holds: c.holds.load(Ordering::Relaxed),
            fenced: c.fenced.load(Ordering::Relaxed),
            outlived_lease: c.outlived_lease.load(Ordering::Relaxed),
        }
    }

    /// Makes its workers check `fence` before each reconcile (a Manager's Leases).
    pub(crate) fn fence_with(&self, fence: Fence) {
        *self.shared.fence.lock() = fence;
    }

    /// The Lease it runs under that has lapsed now, if any.
    pub(super) fn lapsed_lease(&self) -> Option<&'static str> {
        self.shared.fence.lock().lapsed()
    }

    /// The keys being reconciled now.
    pub fn in_flight(&self) -> Vec<ObjectKey> {
        self.lock_in_flight().iter().cloned().collect()
    }

    /// The keys held for the controller's own writes (parked: neither queued nor in flight,
    /// they are queued again when the caches catch up or the hold times out; see
    /// [`Config::stale_cache_timeout`](super::Config::stale_cache_timeout)), sorted.
    pub fn held(&self) -> Vec<ObjectKey> {
        self.shared.pending_writes.parked()
    }

    pub(super) fn lock_in_flight(&self) -> parking_lot::MutexGuard<'_, BTreeSet<ObjectKey>> {
        self.shared.in_flight.lock()
    }

    /// Whether every cache the controller reads holds its first list, asked as often as
    /// wanted (it holds once it held: the controller holds its informers' guards); `None`
    /// for a controller that runs its informers itself (wired, or its own factory), which
    /// start only with its run.
    /// Whether it ran (or runs): a controller runs once, its clones share that run.
    pub(crate) fn has_run(&self) -> bool {
        self.shared.ran.load(Ordering::SeqCst)
    }

    pub(crate) fn caches_synced(&self) -> Option<Arc<dyn Fn() -> bool + Send + Sync>> {
        if !matches!(self.informers.as_ref(), Informers::Shared) {
            return None;
        }
        let (handles, held) = (self.informer_handles(), AtomicBool::new(false));
        Some(Arc::new(move || {
            let synced = held.load(Ordering::Relaxed)
                || handles.iter().all(|informer| *informer.synced_receiver().borrow());
            held.store(synced, Ordering::Relaxed);
            synced
        }))
    }

    /// Every informer the controller reads, erased.
    pub(super) fn informer_handles(&self) -> Vec<Arc<dyn InformerHandle>> {
        let primary: Arc<dyn InformerHandle> = Arc::new(self.informer.clone());
        std::iter::once(primary).chain(self.secondary.iter().cloned()).collect()
    }
}
