//! [`Manager`]: several controllers (and other [`Runnable`]s) in one process, over one
//! [`SharedInformerFactory`], with one start and one graceful stop.

use std::future::{Future, IntoFuture};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use kube_client::Client;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::runnable::{Runnable, RunnableError, Stop};
use super::signal::shutdown_signal;
use crate::cache::{
    CacheSyncError, InformerConfig, InformerObject, ListWatch, SharedInformerFactory,
};
use crate::controller::{Controller, ControllerBuilder, Reconciler};
use crate::events::EventRecorder;
use crate::leaderelection::{LeaderElectionConfig, LeaderElectionError, LeaderElector, LeaseLock};

/// What the graceful-shutdown timeout made the manager give up on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Abandoned {
    /// The runnable's name.
    pub runnable: String,
    /// What it was doing (a controller: the keys being reconciled).
    pub in_flight: Vec<String>,
}

impl std::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.in_flight.as_slice() {
            [] => write!(f, "{}", self.runnable),
            keys => write!(f, "{} (in flight: {})", self.runnable, keys.join(", ")),
        }
    }
}

/// Why a manager stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManagerError {
    /// The informers' caches did not sync before the manager was stopped, or an informer
    /// stopped first.
    #[error("the manager's caches did not sync: {0}")]
    CacheSync(#[from] CacheSyncError),
    /// A runnable failed (or panicked); the manager stopped the others.
    #[error("{runnable} failed: {source}")]
    Runnable {
        /// Its name.
        runnable: String,
        /// Its error.
        #[source]
        source: RunnableError,
    },
    /// This replica lost the leader election (it could not renew its lease in time); its
    /// controllers were stopped. Exit and let the Deployment restart it, as
    /// controller-runtime's managers do.
    #[error("leader election lost: {0}")]
    LeaderElection(#[from] LeaderElectionError),
    /// The metrics and probe endpoint could not start.
    #[error("serving metrics and probes on {address}: {source}")]
    Serve {
        /// The address asked for.
        address: std::net::SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Runnables still running when the graceful-shutdown timeout ran out were abandoned.
    #[error(
        "graceful shutdown timed out after {timeout:?}; abandoned: {}",
        abandoned.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    ShutdownTimeout {
        /// The timeout.
        timeout: Duration,
        /// What was abandoned.
        abandoned: Vec<Abandoned>,
    },
}

/// Builds a [`Manager`]; see [`Manager::builder`].
pub struct ManagerBuilder {
    client: Client,
    namespace: Option<String>,
    informer_config: InformerConfig,
    graceful_shutdown_timeout: Duration,
    election: Option<(LeaseLock, LeaderElectionConfig)>,
    #[cfg(feature = "metrics")]
    metrics: Option<crate::metrics::Registry>,
    #[cfg(feature = "metrics")]
    metrics_address: Option<std::net::SocketAddr>,
}

impl std::fmt::Debug for ManagerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerBuilder")
            .field("namespace", &self.namespace)
            .field("informer_config", &self.informer_config)
            .field("graceful_shutdown_timeout", &self.graceful_shutdown_timeout)
            .finish_non_exhaustive()
    }
}

impl ManagerBuilder {
    /// Limits the factory's typed informers of namespaced kinds to `namespace` (see
    /// [`SharedInformerFactoryBuilder::namespace`](crate::cache::SharedInformerFactoryBuilder::namespace)).
    #[must_use]
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned());
        self
    }

    /// The settings of every informer the manager's factory makes.
    #[must_use]
    pub fn informer_config(mut self, config: InformerConfig) -> Self {
        self.informer_config = config;
        self
    }

    /// How long a stop waits for runnables to finish before abandoning them (default 30 s,
    /// as controller-runtime's `GracefulShutdownTimeout`).
    #[must_use]
    pub fn graceful_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.graceful_shutdown_timeout = timeout;
        self
    }

    /// Runs the runnables that need a leader (controllers, unless they say otherwise) only
    /// while this replica leads the election on `lock`; the informers run all along, so a new
    /// leader starts at once from warm caches. Losing the lease stops the manager with
    /// [`ManagerError::LeaderElection`]; a graceful stop releases the lease after the
    /// runnables have stopped, so a successor takes over at once.
    #[must_use]
    pub fn leader_election(mut self, lock: LeaseLock, config: LeaderElectionConfig) -> Self {
        self.election = Some((lock, config));
        self
    }

    /// Records metrics in `registry` (work queues, informers, controllers, leader election,
    /// event recorders made by [`Manager::event_recorder`]). Implied by
    /// [`metrics_address`](Self::metrics_address), with a new registry.
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    #[must_use]
    pub fn metrics(mut self, registry: crate::metrics::Registry) -> Self {
        self.metrics = Some(registry);
        self
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` on `address` while the manager runs
    /// (`/readyz`: the caches synced, and the election campaigning or leading).
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    #[must_use]
    pub fn metrics_address(mut self, address: std::net::SocketAddr) -> Self {
        self.metrics_address = Some(address);
        self.metrics.get_or_insert_with(crate::metrics::Registry::new);
        self
    }

    /// The manager. A leader election configuration that breaks client-go's rules makes
    /// [`run`](Manager::run) fail at once with [`ManagerError::LeaderElection`].
    pub fn build(self) -> Manager {
        let mut factory = SharedInformerFactory::builder(self.client.clone())
            .informer_config(self.informer_config);
        if let Some(namespace) = &self.namespace {
            factory = factory.namespace(namespace);
        }
        #[cfg(feature = "metrics")]
        if let Some(registry) = &self.metrics {
            factory = factory
                .informer_metrics(Arc::new(registry.clone()))
                .queue_metrics(Arc::new(registry.clone()));
        }
        #[cfg(feature = "metrics")]
        let leader_metrics: Option<Arc<dyn crate::leaderelection::LeaderMetrics>> =
            self.metrics.clone().map(|r| Arc::new(r) as _);
        #[cfg(not(feature = "metrics"))]
        let leader_metrics = None;
        let elector = self
            .election
            .map(|(lock, config)| LeaderElector::with_metrics(lock, config, leader_metrics))
            .transpose();
        Manager {
            client: self.client,
            factory: factory.build(),
            runnables: Vec::new(),
            graceful_shutdown_timeout: self.graceful_shutdown_timeout,
            elector,
            #[cfg(feature = "metrics")]
            metrics: self.metrics,
            #[cfg(feature = "metrics")]
            metrics_address: self.metrics_address,
            #[cfg(feature = "metrics")]
            probes: crate::metrics::Probes::default(),
        }
    }
}

/// The metrics and probe endpoint while the manager runs.
#[cfg(feature = "metrics")]
type Endpoint = Option<crate::metrics::MetricsServer>;
#[cfg(not(feature = "metrics"))]
type Endpoint = ();

async fn stop_endpoint(endpoint: Endpoint) {
    #[cfg(feature = "metrics")]
    if let Some(server) = endpoint {
        server.shutdown().await;
    }
    #[cfg(not(feature = "metrics"))]
    let () = endpoint;
}

/// Hosts controllers and other [`Runnable`]s in one process (controller-runtime's
/// `Manager`).
///
/// [`run`](Self::run) starts the informers of its [`factory`](Self::factory), waits for their
/// caches, starts every runnable, and runs until SIGTERM or Ctrl-C (or, with
/// [`run_until`](Self::run_until), a future of the caller's) or until a runnable fails. Then it
/// stops: runnables stop taking new work and finish what they hold, for at most the
/// graceful-shutdown timeout; what is still running then is abandoned and reported; the
/// informers stop last.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use ctrlkit::cache::ObjectKey;
/// # use ctrlkit::controller::{Action, Config, Reconciler};
/// # struct Printer;
/// # #[async_trait::async_trait]
/// # impl Reconciler for Printer {
/// #     type Object = k8s_openapi::api::apps::v1::Deployment;
/// #     type Error = std::convert::Infallible;
/// #     async fn reconcile(&self, _: &ObjectKey, _: Option<Arc<Self::Object>>) -> Result<Action, Self::Error> { Ok(Action::done()) }
/// # }
/// # async fn demo(client: kube_client::Client) -> Result<(), ctrlkit::manager::ManagerError> {
/// use ctrlkit::manager::Manager;
/// use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
/// use kube_client::Api;
///
/// let mut manager = Manager::new(client.clone());
/// let deployments = manager
///     .controller(Api::<Deployment>::all(client.clone()))
///     .owns(Api::<ReplicaSet>::all(client))
///     .config(Config::default().workers(2));
/// manager.add_controller(deployments, Printer);
/// manager.run().await // until SIGTERM or Ctrl-C
/// # }
/// ```
pub struct Manager {
    client: Client,
    factory: SharedInformerFactory,
    runnables: Vec<Arc<dyn Runnable>>,
    graceful_shutdown_timeout: Duration,
    /// The election, or why its configuration is refused (reported by `run`).
    elector: Result<Option<LeaderElector>, LeaderElectionError>,
    #[cfg(feature = "metrics")]
    metrics: Option<crate::metrics::Registry>,
    #[cfg(feature = "metrics")]
    metrics_address: Option<std::net::SocketAddr>,
    #[cfg(feature = "metrics")]
    probes: crate::metrics::Probes,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("factory", &self.factory)
            .field("runnables", &self.runnables.iter().map(|r| r.name()).collect::<Vec<_>>())
            .field("graceful_shutdown_timeout", &self.graceful_shutdown_timeout)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager over all namespaces with default settings.
    pub fn new(client: Client) -> Self {
        Self::builder(client).build()
    }

    /// A builder for a namespace, informer settings and the graceful-shutdown timeout.
    pub fn builder(client: Client) -> ManagerBuilder {
        ManagerBuilder {
            client,
            namespace: None,
            informer_config: InformerConfig::default(),
            graceful_shutdown_timeout: Duration::from_secs(30),
            election: None,
            #[cfg(feature = "metrics")]
            metrics: None,
            #[cfg(feature = "metrics")]
            metrics_address: None,
        }
    }

    /// The client the manager was made with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The informer factory the manager's controllers take their informers from (the
    /// builders of [`controller`](Self::controller) are bound to it); the manager starts and
    /// stops it. Read owned objects from its caches: `manager.factory().informer_for(api)`,
    /// with the `api` given to `owns`, is the informer `owns` uses.
    pub fn factory(&self) -> &SharedInformerFactory {
        &self.factory
    }

    /// Adds a runnable, started by [`run`](Self::run).
    pub fn add(&mut self, runnable: impl Runnable) {
        self.runnables.push(Arc::new(runnable));
    }

    /// A controller of the objects `primary` lists and watches, already bound to this
    /// manager: its informers come from the manager's [`factory`](Self::factory) (shared with
    /// every other controller of the manager, started and stopped by it, with its queue
    /// metrics) and it reports to the manager's metrics registry, if it has one. Add owns,
    /// watches, predicates and a [`Config`](crate::controller::Config), then hand it to
    /// [`add_controller`](Self::add_controller).
    pub fn controller<K: InformerObject>(
        &self,
        primary: impl Into<ListWatch<K>>,
    ) -> ControllerBuilder<K> {
        let builder = Controller::builder(primary).factory(&self.factory);
        #[cfg(feature = "metrics")]
        let builder = match &self.metrics {
            Some(registry) => builder.metrics(Arc::new(registry.clone())),
            None => builder,
        };
        builder
    }

    /// Adds a controller with its reconciler: a [`ControllerBuilder`] (as
    /// [`controller`](Self::controller) hands out) or a built [`Controller`]. One that reports
    /// its metrics nowhere reports them to the manager's registry, if it has one. One built
    /// without the manager's factory runs informers of its own, not shared with the
    /// manager's other controllers and without the factory's queue metrics: a warning says
    /// so.
    pub fn add_controller<K, R>(&mut self, controller: impl Into<Controller<K>>, reconciler: R)
    where
        K: InformerObject,
        R: Reconciler<Object = K>,
    {
        #[allow(unused_mut)]
        let mut controller = controller.into();
        if controller.owns_factory() {
            tracing::warn!(
                controller = controller.name(),
                "this controller was built without the manager's factory: its informers are its \
                 own, not shared, and its queue has none of the factory's metrics; build it \
                 with manager.controller(api)"
            );
        }
        #[cfg(feature = "metrics")]
        if let Some(registry) = &self.metrics {
            controller.report_to_if_unset(registry);
        }
        self.add(ControllerRunnable { controller, reconciler: Mutex::new(Some(reconciler)) });
    }

    /// An event recorder reporting as `reporting_controller`, counted in the manager's
    /// metrics if it has them. Needs a tokio runtime.
    pub fn event_recorder(&self, reporting_controller: &str) -> EventRecorder {
        #[cfg(feature = "metrics")]
        let metrics: Option<Arc<dyn crate::events::EventMetrics>> =
            self.metrics.clone().map(|r| Arc::new(r) as _);
        #[cfg(not(feature = "metrics"))]
        let metrics = None;
        EventRecorder::with_metrics(self.client.clone(), reporting_controller, metrics)
    }

    /// The leader elector, if the manager has one (to watch who leads).
    pub fn leader_elector(&self) -> Option<&LeaderElector> {
        self.elector.as_ref().ok().and_then(Option::as_ref)
    }

    /// The metrics registry, if the manager records metrics (to register your own).
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics(&self) -> Option<&crate::metrics::Registry> {
        self.metrics.as_ref()
    }

    /// Starts the metrics and probe endpoint, if configured.
    async fn serve(&self) -> Result<Endpoint, ManagerError> {
        #[cfg(feature = "metrics")]
        if let (Some(address), Some(registry)) = (self.metrics_address, &self.metrics) {
            let server = crate::metrics::MetricsServer::start(
                address,
                registry.clone(),
                self.probes.clone(),
            )
            .await
            .map_err(|source| ManagerError::Serve { address, source })?;
            return Ok(Some(server));
        }
        #[cfg(feature = "metrics")]
        return Ok(None);
        #[cfg(not(feature = "metrics"))]
        Ok(())
    }

    /// Sets a readiness check of `/readyz`.
    fn set_probe(&self, _name: &str, _passes: bool) {
        #[cfg(feature = "metrics")]
        self.probes.set(_name, _passes);
    }

    /// Runs until SIGTERM or Ctrl-C, or until a runnable fails; see the type's docs.
    pub async fn run(self) -> Result<(), ManagerError> {
        self.run_until(shutdown_signal()).await
    }

    /// Runs until `shutdown` completes, or until a runnable fails; see the type's docs.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ManagerError> {
        let span = tracing::info_span!("manager");
        self.run_inner(shutdown).instrument(span).await
    }

    async fn run_inner(
        self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ManagerError> {
        tokio::pin!(shutdown);
        let elector = self.elector.clone()?;
        tracing::info!(runnables = self.runnables.len(), "starting manager");
        let endpoint = self.serve().await?;
        self.set_probe("caches-synced", false);
        if elector.is_some() {
            self.set_probe("leader-election", false);
        }
        // Informers run from the start, on followers too (warm replicas): a new leader
        // reconciles at once instead of after a full list.
        self.factory.start(std::future::pending());
        if let Err(err) = self.factory.wait_for_cache_sync(&mut shutdown).await {
            tracing::error!(error = %err, "caches did not sync; stopping");
            self.factory.shutdown().await;
            stop_endpoint(endpoint).await;
            return Err(err.into());
        }
        self.set_probe("caches-synced", true);
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let mut running = vec![false; self.runnables.len()];
        let leader_only = |r: &Arc<dyn Runnable>| elector.is_some() && r.needs_leader_election();
        self.spawn_runnables(&mut tasks, &mut running, &stop_rx, |r| !leader_only(r));

        // The election runs until the runnables have stopped, so that no successor starts
        // while they still work; its own stop releases the lease.
        let (elector_stop, elector_stopped) = oneshot::channel::<()>();
        let mut election = elector.clone().map(|elector| {
            tokio::spawn(async move {
                elector
                    .run(async {
                        let _ = elector_stopped.await;
                    })
                    .await
            })
        });
        let mut leading = elector.as_ref().map(|e| e.status());
        if election.is_some() {
            // Campaigning or leading: ready to serve either way.
            self.set_probe("leader-election", true);
        }
        let mut leader_started = false;
        let mut failure: Option<ManagerError> = None;
        // Run until the shutdown or the first failure.
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                joined = tasks.join_next(), if !tasks.is_empty() => match joined {
                    Some(joined) => {
                        if let Some(err) = self.finished(joined, &mut running) {
                            tracing::error!(error = %err, "a runnable failed; stopping the manager");
                            failure = Some(err);
                            break;
                        }
                    }
                    None => break,
                },
                _ = async { leading.as_mut().expect("an election").wait_for(|s| s.leading).await },
                    if leading.is_some() && !leader_started =>
                {
                    tracing::info!("leading: starting the controllers that need a leader");
                    leader_started = true;
                    self.spawn_runnables(&mut tasks, &mut running, &stop_rx, |r| leader_only(r));
                }
                ended = async { election.as_mut().expect("an election").await }, if election.is_some() => {
                    election = None;
                    let err = match ended {
                        Ok(Err(err)) => ManagerError::LeaderElection(err),
                        Ok(Ok(())) => continue,
                        Err(join) => ManagerError::Runnable {
                            runnable: "leader election".into(),
                            source: join.to_string().into(),
                        },
                    };
                    tracing::error!(error = %err, "stopping the manager");
                    failure = Some(err);
                    break;
                }
            }
        }
        tracing::info!("stopping manager");
        stop_tx.send_replace(true);
        let drained = tokio::time::timeout(self.graceful_shutdown_timeout, async {
            while let Some(joined) = tasks.join_next().await {
                if let Some(err) = self.finished(joined, &mut running) {
                    tracing::error!(error = %err, "a runnable failed while stopping");
                    failure.get_or_insert(err);
                }
            }
        })
        .await;
        if drained.is_err() {
            let abandoned: Vec<Abandoned> = self
                .runnables
                .iter()
                .zip(&running)
                .filter(|(_, running)| **running)
                .map(|(r, _)| Abandoned { runnable: r.name(), in_flight: r.in_flight() })
                .collect();
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
            let err = ManagerError::ShutdownTimeout {
                timeout: self.graceful_shutdown_timeout,
                abandoned,
            };
            tracing::error!(error = %err, "graceful shutdown timed out");
            failure.get_or_insert(err);
        }
        // Only now, with nothing left running, may a successor lead.
        let _ = elector_stop.send(());
        if let Some(election) = election {
            let _ = election.await;
        }
        self.factory.shutdown().await;
        stop_endpoint(endpoint).await;
        tracing::info!("manager stopped");
        failure.map_or(Ok(()), Err)
    }

    /// Starts the runnables `pick` chooses.
    fn spawn_runnables(
        &self,
        tasks: &mut JoinSet<(usize, Result<(), RunnableError>)>,
        running: &mut [bool],
        stop_rx: &watch::Receiver<bool>,
        pick: impl Fn(&Arc<dyn Runnable>) -> bool,
    ) {
        for (index, runnable) in self.runnables.iter().enumerate().filter(|(_, r)| pick(r)) {
            let (runnable, stop) = (runnable.clone(), Stop::new(stop_rx.clone()));
            let span = tracing::info_span!("runnable", name = %runnable.name());
            let run = async move {
                let result = AssertUnwindSafe(runnable.start(stop)).catch_unwind().await;
                // A panic is the runnable's failure, reported as such.
                (index, result.unwrap_or_else(|panic| Err(panicked(&*panic))))
            };
            running[index] = true;
            tasks.spawn(run.instrument(span));
        }
    }

    /// Records a runnable's end; returns its failure, if it failed.
    fn finished(
        &self,
        joined: Result<(usize, Result<(), RunnableError>), tokio::task::JoinError>,
        running: &mut [bool],
    ) -> Option<ManagerError> {
        let (index, result) = match joined {
            Ok(finished) => finished,
            // Only an abort (after the timeout) ends a task without its index.
            Err(_) => return None,
        };
        running[index] = false;
        let name = self.runnables[index].name();
        match result {
            Ok(()) => {
                tracing::info!(runnable = %name, "runnable finished");
                None
            }
            Err(source) => Some(ManagerError::Runnable { runnable: name, source }),
        }
    }
}

fn panicked(panic: &(dyn std::any::Any + Send)) -> RunnableError {
    format!("panicked: {}", crate::panic::panic_message(panic)).into()
}

/// A controller and its reconciler, as a [`Runnable`].
struct ControllerRunnable<K, R> {
    controller: Controller<K>,
    /// Taken by the one `start`.
    reconciler: Mutex<Option<R>>,
}

#[async_trait]
impl<K, R> Runnable for ControllerRunnable<K, R>
where
    K: InformerObject,
    R: Reconciler<Object = K>,
{
    fn name(&self) -> String {
        format!("controller {}", self.controller.name())
    }

    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        let reconciler = self
            .reconciler
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .ok_or("the controller was started already")?;
        // Clones share the run; this one is taken by it.
        self.controller.clone().run(reconciler, stop.into_future()).await.map_err(Into::into)
    }

    fn in_flight(&self) -> Vec<String> {
        self.controller.in_flight().iter().map(ToString::to_string).collect()
    }

    fn needs_leader_election(&self) -> bool {
        self.controller.needs_leader_election()
    }
}
