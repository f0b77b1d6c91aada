//! [`Config`]: how a controller runs its workers, retries, gives up and stops, taken whole by
//! [`ControllerBuilder::config`](super::ControllerBuilder::config) and
//! [`Controller::with_config`](super::Controller::with_config), as kube-runtime's `Controller`
//! takes its `controller::Config`.
//!
//! Every setting has client-go's (or controller-runtime's) default; a setter changes one and
//! leaves the others, in any order. The built [`Controller`](super::Controller) runs and
//! reports as its config says, with one exception: its worker count, which
//! [`Controller::set_workers`](super::Controller::set_workers) (or an
//! [`AdaptiveWorkers`] policy) changes while it runs; [`Config::workers`] is the count it starts
//! with.

use std::sync::Arc;
use std::time::Duration;

use super::adaptive::AdaptiveWorkers;
use super::error::{DroppedHook, ReconcileFailure};
use crate::cache::ObjectKey;
use crate::workqueue::FairnessKey;

/// A controller key's fairness key: its namespace, one level (cluster-scoped keys share one
/// of their own). A controller's queue is fair by it unless told otherwise
/// ([`Config::fair_queue`], or a queue given with its own
/// [`fairness`](crate::workqueue::WorkQueueBuilder::fairness)); a queue over many clusters puts
/// the cluster first: `FairnessKey::new().level(cluster).level(&key.namespace)`.
pub fn namespace_fairness(key: &ObjectKey) -> FairnessKey {
    FairnessKey::new().level(&key.namespace)
}

/// Names a controller key's fairness level in the queue's logs: its namespace.
pub(crate) fn namespace_label(key: &ObjectKey, _level: usize) -> String {
    key.namespace.clone().unwrap_or_else(|| "(cluster-scoped)".to_owned())
}

/// How a controller runs: set before it is built, read by its workers.
///
/// ```
/// use std::time::Duration;
/// use ctrlkit::controller::Config;
///
/// let config = Config::default()
///     .workers(4)
///     .max_retries(10)
///     .reconcile_timeout(Duration::from_secs(30));
/// assert!(format!("{config:?}").contains("workers: 4"));
/// ```
#[derive(Clone)]
pub struct Config {
    pub(crate) workers: usize,
    pub(crate) adaptive: Option<AdaptiveWorkers>,
    pub(crate) max_retries: u32,
    pub(crate) on_dropped: Option<DroppedHook>,
    pub(crate) reconcile_timeout: Option<Duration>,
    pub(crate) shutdown_grace: Option<Duration>,
    pub(crate) stale_cache_timeout: Duration,
    pub(crate) needs_leader_election: bool,
    pub(crate) fair_queue: bool,
    pub(crate) skip_name_validation: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 1,
            adaptive: None,
            max_retries: 5,
            on_dropped: None,
            reconcile_timeout: None,
            shutdown_grace: None,
            stale_cache_timeout: Duration::from_secs(5),
            needs_leader_election: true,
            fair_queue: true,
            skip_name_validation: false,
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("workers", &self.workers)
            .field("adaptive", &self.adaptive)
            .field("max_retries", &self.max_retries)
            .field("on_dropped", &self.on_dropped.is_some())
            .field("reconcile_timeout", &self.reconcile_timeout)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("stale_cache_timeout", &self.stale_cache_timeout)
            .field("needs_leader_election", &self.needs_leader_election)
            .field("fair_queue", &self.fair_queue)
            .field("skip_name_validation", &self.skip_name_validation)
            .finish()
    }
}

impl Config {
    /// Worker tasks the controller starts with, each reconciling one key at a time (default
    /// 1; the `threadiness` of client-go's `examples/workqueue`, controller-runtime's
    /// `MaxConcurrentReconciles`). Zero counts as one. The count can change while the
    /// controller runs ([`Controller::set_workers`](super::Controller::set_workers),
    /// [`adaptive_workers`](Self::adaptive_workers)); [`Controller::workers`](super::Controller::workers)
    /// says what it is now, this stays the start count.
    #[must_use]
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Lets the worker count follow the work within `policy`'s bounds (default: off, the
    /// count stays where [`workers`](Self::workers) or
    /// [`Controller::set_workers`](super::Controller::set_workers) put it). The controller
    /// starts at [`workers`](Self::workers) held within the bounds; see [`AdaptiveWorkers`].
    #[must_use]
    pub fn adaptive_workers(mut self, policy: AdaptiveWorkers) -> Self {
        self.adaptive = Some(policy);
        self
    }

    /// How many times a failing key is retried before it is dropped (default 5, as in
    /// client-go's `examples/workqueue`).
    #[must_use]
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// Called for each key given up on (after its last retry, or at once for a terminal
    /// error), besides the error log.
    #[must_use]
    pub fn on_dropped(
        mut self,
        hook: impl Fn(&ObjectKey, &ReconcileFailure) + Send + Sync + 'static,
    ) -> Self {
        self.on_dropped = Some(Arc::new(hook));
        self
    }

    /// Gives up on a reconcile that runs longer than `timeout`: it is dropped (its future is
    /// not polled again), counted as a timeout and an error, and retried with backoff
    /// (controller-runtime's `ReconciliationTimeout`). Default: none.
    #[must_use]
    pub fn reconcile_timeout(mut self, timeout: Duration) -> Self {
        self.reconcile_timeout = Some(timeout);
        self
    }

    /// How long reconciles still running at shutdown may take to finish: after it, they are
    /// abandoned (their futures dropped), logged with their keys as an error, and counted
    /// ([`ControllerStats::abandoned`](super::ControllerStats::abandoned)), and `run` returns.
    /// Default: none, `run` waits for every reconcile in flight, as client-go's
    /// `ShutDownWithDrain`. (A Manager's graceful-shutdown timeout bounds the whole
    /// controller as well; reconciles it abandons are logged the same way.)
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = Some(grace);
        self
    }

    /// How long a key's reconcile is held for the controller's caches to hold the writes its
    /// last reconcile made, through a [`recording_client`](super::recording_client) or
    /// reported with [`report_write`](super::report_write) (see the `own_writes` module docs),
    /// counted from when a worker first parked the key (a held key does not keep its worker);
    /// after it, the reconcile proceeds, logged and counted. Default 5 s; zero turns the guard
    /// off.
    #[must_use]
    pub fn stale_cache_timeout(mut self, timeout: Duration) -> Self {
        self.stale_cache_timeout = timeout;
        self
    }

    /// Whether a [`Manager`](crate::manager::Manager) with leader election runs this
    /// controller only while it leads (default `true`, controller-runtime's
    /// `NeedLeaderElection`). A controller that may run on every replica (one that only
    /// reads, or writes what is idempotent per replica) says `false`. The same question as
    /// [`Runnable::needs_leader_election`](crate::runnable::Runnable::needs_leader_election)
    /// and [`Controller::needs_leader_election`](super::Controller::needs_leader_election).
    #[must_use]
    pub fn needs_leader_election(mut self, needs: bool) -> Self {
        self.needs_leader_election = needs;
        self
    }

    /// Whether the controller's queue is fair by namespace (default `true`): within a
    /// priority, keys are taken round-robin across namespaces, so a namespace with thousands
    /// of changes queued delays another's one change by a few keys, not by all of them; and
    /// retries take the default limiter's overall bucket in turns (see
    /// [`WorkQueueBuilder::fair_retries`](crate::workqueue::WorkQueueBuilder::fair_retries)).
    /// With `false` the queue is FIFO within a priority, as client-go's. A queue given to
    /// [`ControllerBuilder::queue`](super::ControllerBuilder::queue) with its own
    /// [`fairness`](crate::workqueue::WorkQueueBuilder::fairness) or
    /// [`fifo`](crate::workqueue::WorkQueueBuilder::fifo) keeps it.
    #[must_use]
    pub fn fair_queue(mut self, fair: bool) -> Self {
        self.fair_queue = fair;
        self
    }

    /// Whether a [`Manager`](crate::manager::Manager) takes this controller though it has
    /// one of the same name (default `false`: it refuses it, see
    /// [`Manager::add_controller`](crate::manager::Manager::add_controller);
    /// controller-runtime's `SkipNameValidation`). For tests that add one controller many
    /// times; two controllers of one name mix their metrics, logs, events and Leases.
    #[must_use]
    pub fn skip_name_validation(mut self, skip: bool) -> Self {
        self.skip_name_validation = skip;
        self
    }
}
