//! [`Manager`]: several controllers (and other [`Runnable`]s) in one process, over one
//! [`SharedInformerFactory`], with one start and one graceful stop (its run loop is in
//! `run.rs`).

use std::sync::Arc;
use std::time::Duration;

use kube_client::Client;

use super::error::HandleError;
use super::handle::{self, ManagerHandle};
use super::managed::ManagedController;
use super::runnables::Table;
use super::telemetry::Telemetry;
use crate::cache::{InformerObject, ListWatch, SharedInformerFactory};
use crate::controller::{Controller, ControllerBuilder, Reconciler};
use crate::events::EventRecorder;
use crate::leaderelection::{LeaderElectionError, LeaderElector};
use crate::rest_client::{ClientPressure, RequestLayer};
use crate::runnable::Runnable;
use crate::sharding::{Ring, ShardLease};

/// Hosts controllers and other [`Runnable`]s in one process (controller-runtime's
/// `Manager`).
///
/// [`run`](Self::run) starts its runnables in [phases](crate::runnable::Phase): servers
/// (webhooks) first, then the informers of its [`factory`](Self::factory); once their caches
/// synced, the rest (under their Lease, if they need one); and runs until SIGTERM or Ctrl-C (or, with
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
/// manager
///     .controller(Api::<Deployment>::all(client.clone()))
///     .owns(Api::<ReplicaSet>::all(client))
///     .config(Config::default().workers(2))
///     .complete(Printer)?; // refused if the manager has a controller of its name
/// manager.run().await // until SIGTERM or Ctrl-C
/// # }
/// ```
pub struct Manager {
    client: Client,
    pub(super) factory: SharedInformerFactory,
    /// Its runnables, shared with its handles.
    pub(super) table: Arc<Table>,
    pub(super) graceful_shutdown_timeout: Duration,
    /// How long `run` waits for the servers' ready checks before starting the caches.
    pub(super) server_ready_timeout: Duration,
    /// The election, or why its configuration is refused (reported by `run`).
    pub(super) elector: Result<Option<LeaderElector>, LeaderElectionError>,
    /// This replica's shard Lease, or why the ring's timing is refused (reported by `run`).
    pub(super) shard: Result<Option<ShardLease>, LeaderElectionError>,
    /// The ring and this replica's shard, when sharded.
    pub(super) sharding: Option<(Ring, String)>,
    pub(super) telemetry: Telemetry,
    /// Counts the requests of every client it hands out.
    pub(super) requests: RequestLayer,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("factory", &self.factory)
            .field("runnables", &self.table.names())
            .field("graceful_shutdown_timeout", &self.graceful_shutdown_timeout)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// The manager [`ManagerBuilder::build`](super::ManagerBuilder::build) makes: no runnables
    /// yet (its constructors, `new` and `builder`, are in `builder.rs`, above this file).
    pub(super) fn from_parts(
        client: Client,
        factory: SharedInformerFactory,
        graceful_shutdown_timeout: Duration,
        elector: Result<Option<LeaderElector>, LeaderElectionError>,
        telemetry: Telemetry,
    ) -> Self {
        Self {
            client,
            factory,
            table: Table::new(telemetry.clone()),
            graceful_shutdown_timeout,
            server_ready_timeout: Duration::from_secs(30),
            elector,
            shard: Ok(None),
            sharding: None,
            telemetry,
            requests: RequestLayer::default(),
        }
    }

    /// The client the manager was made with, its requests counted (see
    /// [`rest_client`](crate::rest_client)): make the reconciler's `Api`s from it to count
    /// their requests too.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// How many answers to the manager's clients were 429 or 5xx so far (the pressure its
    /// controllers' [adaptive workers](crate::controller) hold back on).
    pub fn client_pressure(&self) -> Arc<dyn ClientPressure> {
        self.requests.pressure()
    }

    /// The informer factory the manager's controllers take their informers from (the
    /// builders of [`controller`](Self::controller) are bound to it); the manager starts and
    /// stops it. Read owned objects from its caches: `manager.factory().informer_for(api)`,
    /// with the `api` given to `owns`, is the informer `owns` uses.
    pub fn factory(&self) -> &SharedInformerFactory {
        &self.factory
    }

    /// A handle that adds runnables to this manager and removes them, before and while it
    /// runs (see [`ManagerHandle`]); take it before [`run`](Self::run).
    pub fn handle(&self) -> ManagerHandle {
        ManagerHandle::new(
            self.table.clone(),
            self.factory.clone(),
            self.sharding.clone(),
            self.telemetry.clone(),
            self.graceful_shutdown_timeout,
        )
    }

    /// Adds a runnable, started by [`run`](Self::run). To remove it while the manager runs,
    /// add it through a [`handle`](Self::handle) instead, which returns its id.
    pub fn add(&mut self, runnable: impl Runnable) {
        // A manager not yet run takes every runnable: only a stopping one refuses.
        if let Err(err) = self.table.insert(Arc::new(runnable), None, None, None) {
            tracing::error!(error = %err, "a runnable was not added");
        }
    }

    /// A controller of the objects `primary` lists and watches, added to this manager by the
    /// [`complete`](ControllerBuilder::complete) call that ends the chain (controller-runtime's
    /// `NewControllerManagedBy(mgr)…Complete(r)`):
    ///
    /// ```text
    /// manager.controller(api).owns(replicasets).complete(reconciler);
    /// ```
    ///
    /// Its informers come from the manager's [`factory`](Self::factory) (shared with every
    /// other controller of the manager, started and stopped by it); it and its queue report
    /// to the manager's metrics registry, if it has one; in a sharded manager it is
    /// sharded ([`unsharded`](ControllerBuilder::unsharded) undoes that). The builder borrows
    /// the manager until `complete`; its `build` instead gives the controller back (a
    /// [`ManagedController`], to keep a hold on it) for
    /// [`add_controller`](Self::add_controller).
    pub fn controller<K: InformerObject>(
        &mut self,
        primary: impl Into<ListWatch<K>>,
    ) -> ControllerBuilder<K, &mut Manager> {
        let builder = Controller::builder(primary);
        handle::bind(builder, &self.factory, &self.sharding, &self.telemetry).retarget(self).1
    }

    /// Adds a controller with its reconciler: one built by a builder of this manager
    /// ([`controller`](Self::controller)`(api)…build()`, a [`ManagedController`]), so that
    /// it reads the manager's informers and reports to its registry.
    /// [`controller`](Self::controller)`(api)…`[`complete`](ControllerBuilder::complete)`(reconciler)`
    /// does this in one chain. A controller built by [`Controller::builder`] on its own runs
    /// itself ([`Controller::run`]): the manager does not take it (that does not compile).
    /// Refused with [`HandleError::ForeignController`] if another manager's builder built
    /// it, and with [`HandleError::AlreadyRun`] if its controller ran already (a clone of it
    /// run by hand).
    ///
    /// Controller names are unique in a manager: a second controller of a name the manager
    /// holds is refused with [`HandleError::DuplicateName`] (controller-runtime's check, from
    /// v0.19), and the manager keeps the first. A controller's name is its
    /// [`name`](ControllerBuilder::name), by default its primary kind's plural, so two
    /// controllers of one kind need names of their own;
    /// [`Config::skip_name_validation`](crate::controller::Config::skip_name_validation) opts
    /// out, for tests. `complete` checks the name before it builds, so a refused one
    /// registers nothing on the shared informers and touches none of the first's metric
    /// series; a [`ManagedController`] did both at its build (and shares the series of a
    /// controller of its name removed after it was built): prefer `complete`.
    pub fn add_controller<K, R>(
        &mut self,
        controller: ManagedController<K>,
        reconciler: R,
    ) -> Result<(), HandleError>
    where
        K: InformerObject,
        R: Reconciler<Object = K>,
    {
        let (name, controller) = controller.admit(&self.table)?;
        handle::add_controller(&self.table, &self.telemetry, name, || controller, reconciler)
            .map(|_| ())
    }

    /// An event recorder reporting as `reporting_controller`, counted in the manager's
    /// metrics if it has them. Needs a tokio runtime.
    pub fn event_recorder(&self, reporting_controller: &str) -> EventRecorder {
        let metrics = self.telemetry.event_metrics();
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
        self.telemetry.registry()
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        // Its run returned, or it was dropped (run or not): handles add nothing more, and
        // hold none of its runnables.
        self.table.close();
    }
}

impl<K: InformerObject> ControllerBuilder<K, &mut Manager> {
    /// Builds the controller and adds it, with `reconciler`, to the manager that handed out
    /// this builder ([`Manager::controller`]); the manager runs it from
    /// [`run`](Manager::run). Refused, as by [`Manager::add_controller`], if the manager has
    /// a controller of its name already; then nothing is built.
    #[doc(alias = "Complete")]
    pub fn complete<R: Reconciler<Object = K>>(self, reconciler: R) -> Result<(), HandleError> {
        let (manager, builder) = self.retarget(());
        let name = builder.unique_name();
        let build = || builder.build_controller();
        handle::add_controller(&manager.table, &manager.telemetry, name, build, reconciler)
            .map(|_| ())
    }

    /// Builds the controller, to add later with [`Manager::add_controller`] (read its
    /// figures through it, or keep `(*managed).clone()`); [`complete`](Self::complete) does both.
    pub fn build(self) -> ManagedController<K> {
        let (manager, builder) = self.retarget(());
        ManagedController::new(builder.build_controller(), &manager.table)
    }
}
