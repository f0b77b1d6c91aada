//! [`ManagerHandle`]: runnables added to a [`Manager`](super::Manager) and removed from it
//! while it runs; its contract is in the type's docs, where users read it.

use std::sync::Arc;
use std::time::Duration;

use super::controller_runnable::ControllerRunnable;
use super::error::HandleError;
use super::id::RunnableId;
use super::managed::ManagedController;
use super::removal;
use super::runnables::{Removal, Table};
use super::telemetry::Telemetry;
use crate::cache::{InformerObject, ListWatch, SharedInformerFactory};
use crate::controller::{Controller, ControllerBuilder, Reconciler};
use crate::runnable::Runnable;
use crate::sharding::Ring;

/// Adds runnables to a running [`Manager`](super::Manager) and removes them.
///
/// Contract:
/// - **Taken before `run`**, by [`Manager::handle`](super::Manager::handle); cheap to clone,
///   `Send` and `Sync`, usable from any task or thread.
/// - **Added in its phase**: a runnable added (before or after `run` started) starts in its
///   [`Phase`](crate::runnable::Phase) as one added to the manager does: at once if its
///   phase has been reached, else when it is; one under a Lease once that Lease is held,
///   with that Lease's fence ([`Stop::is_fenced`](crate::runnable::Stop::is_fenced)), and
///   aborted with every other runnable when the Lease is lost. Its ready check joins
///   `/readyz`, and a controller added while the manager runs, reading the informers of a
///   factory (the manager's), joins `caches-synced` until its caches synced. Once the manager stops (or its `run` returned, or it was dropped), an add
///   fails with [`HandleError::Stopped`].
/// - **Removed alone**: [`remove`](ManagerHandle::remove) stops one runnable, the others
///   untouched: it is told to stop and given the manager's graceful-shutdown timeout (or
///   [`remove_within`](ManagerHandle::remove_within)'s) to finish what it holds; past it, it
///   is aborted and the removal fails with [`HandleError::StopTimeout`], naming what was
///   abandoned. `remove` returns once its task is gone and the runnable dropped (a
///   controller's run and its `Controller` value, so what they hold is released; after a
///   timeout, its workers, aborted, go at their next await), its ready
///   check out of `/readyz` and, for a controller, its series in the manager's metrics
///   registry (those labelled with its name and its queue's) removed. An error it ends with
///   is the remover's ([`HandleError::Runnable`]), not the manager's: the manager runs on,
///   unless it is a shard fencing itself after a stalled hand-off
///   ([`ControllerError::HandOffTimeout`](crate::controller::ControllerError::HandOffTimeout)):
///   that stops the manager at once, as a lost Lease does, and the remover hears it too. A
///   controller removed while it still waits for its caches to sync stops cleanly: the
///   removal returns `Ok(())` (and so does the manager's run, stopped in that wait).
/// - **A removal is the manager's, not its future's**: once begun it runs on a task of its
///   own, so a `remove` future dropped midway (a timeout, a `select!`) leaves it whole: the
///   runnable is still aborted at the deadline and taken out, and the outcome is logged
///   whether anyone awaits it or not. A second `remove` of an id being removed waits for
///   that same removal (under the first one's timeout) and gets its outcome.
/// - **Finished on its own**: a runnable whose `start` returns is let go of then (its
///   ready check and series with it), and nothing of it stays: the manager holds only the
///   runnables that run or wait, however many came and went.
/// - **Gone is gone**: a `remove` of an id whose runnable is gone (finished on its own, or
///   removed before) returns `Ok(())`; only an id this manager never handed out is
///   [`HandleError::NotFound`].
/// - **After the stop**: once the manager is stopping (or its run returned, or it was
///   dropped), a `remove` fails with [`HandleError::Stopped`], whatever the runnable was
///   doing: the manager stops them all.
/// - **Ids**: each add returns a [`RunnableId`], unique in its manager, never reused; a
///   removal takes it. A runnable added to the [`Manager`](super::Manager) itself has none:
///   add one you may remove through a handle.
///
/// - **Controller names are unique** in a manager: adding a controller whose name another
///   controller of the manager holds is refused ([`HandleError::DuplicateName`]) by
///   [`add_controller`](ManagerHandle::add_controller) and by
///   [`complete`](ControllerBuilder::complete) (before the controller is built), as by the
///   manager's own; the name is freed once its controller is removed (or returns on
///   its own) and its metric series are forgotten, so that a controller added in its place
///   reports series of its own.
///
/// Designed for what comes next: a cluster that joins a manager over many clusters is a
/// runnable (its informers and controllers) added through the handle and, when it leaves,
/// removed by its id with its own bounded graceful stop.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use ctrlkit::cache::ObjectKey;
/// # use ctrlkit::controller::{Action, Reconciler};
/// # struct Printer;
/// # #[async_trait::async_trait]
/// # impl Reconciler for Printer {
/// #     type Object = k8s_openapi::api::core::v1::ConfigMap;
/// #     type Error = std::convert::Infallible;
/// #     async fn reconcile(&self, _: &ObjectKey, _: Option<Arc<Self::Object>>) -> Result<Action, Self::Error> { Ok(Action::done()) }
/// # }
/// # async fn demo(client: kube_client::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use ctrlkit::manager::Manager;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube_client::Api;
///
/// let manager = Manager::new(client.clone());
/// let handle = manager.handle();
/// let run = tokio::spawn(manager.run());
/// // Later, while it runs: a controller for a feature turned on…
/// let id = handle.controller(Api::<ConfigMap>::all(client)).name("feature").complete(Printer)?;
/// // …and off again: it stops alone, within the graceful-shutdown timeout.
/// handle.remove(id).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ManagerHandle {
    inner: Arc<Inner>,
}

struct Inner {
    table: Arc<Table>,
    factory: SharedInformerFactory,
    sharding: Option<(Ring, String)>,
    telemetry: Telemetry,
    graceful_shutdown_timeout: Duration,
}

impl std::fmt::Debug for ManagerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerHandle")
            .field("runnables", &self.inner.table.names())
            .field("graceful_shutdown_timeout", &self.inner.graceful_shutdown_timeout)
            .finish_non_exhaustive()
    }
}

impl ManagerHandle {
    pub(super) fn new(
        table: Arc<Table>,
        factory: SharedInformerFactory,
        sharding: Option<(Ring, String)>,
        telemetry: Telemetry,
        graceful_shutdown_timeout: Duration,
    ) -> Self {
        let inner = Inner { table, factory, sharding, telemetry, graceful_shutdown_timeout };
        Self { inner: Arc::new(inner) }
    }

    /// The manager's informer factory (that of [`Manager::factory`](super::Manager::factory)).
    pub fn factory(&self) -> &SharedInformerFactory {
        &self.inner.factory
    }

    /// Adds `runnable`, started in its phase (at once if the manager has reached it); its id
    /// removes it. Fails once the manager stops.
    pub fn add(&self, runnable: impl Runnable) -> Result<RunnableId, HandleError> {
        self.inner.table.insert(Arc::new(runnable), None, None, None)
    }

    /// A controller bound to the manager, as [`Manager::controller`](super::Manager::controller)
    /// makes: its [`complete`](ControllerBuilder::complete) adds it through this handle and
    /// returns its id.
    pub fn controller<K: InformerObject>(
        &self,
        primary: impl Into<ListWatch<K>>,
    ) -> ControllerBuilder<K, ManagerHandle> {
        let inner = &self.inner;
        bind(Controller::builder(primary), &inner.factory, &inner.sharding, &inner.telemetry)
            .retarget(self.clone())
            .1
    }

    /// Adds a controller with its reconciler, as
    /// [`Manager::add_controller`](super::Manager::add_controller) does: one built by a
    /// builder of this manager ([`controller`](Self::controller)`(api)…build()`); its id
    /// removes it. A second controller of one name is refused
    /// ([`HandleError::DuplicateName`]), until the first is removed; one built by another
    /// manager's builder ([`HandleError::ForeignController`]) or whose controller ran
    /// already ([`HandleError::AlreadyRun`]) is refused too.
    pub fn add_controller<K, R>(
        &self,
        controller: ManagedController<K>,
        reconciler: R,
    ) -> Result<RunnableId, HandleError>
    where
        K: InformerObject,
        R: Reconciler<Object = K>,
    {
        let inner = &self.inner;
        let (name, controller) = controller.admit(&inner.table)?;
        add_controller(&inner.table, &inner.telemetry, name, || controller, reconciler)
    }

    /// Stops the runnable `id` alone, within the manager's graceful-shutdown timeout, and
    /// takes it out of the manager; see [`ManagerHandle`].
    pub async fn remove(&self, id: RunnableId) -> Result<(), HandleError> {
        self.remove_within(id, self.inner.graceful_shutdown_timeout).await
    }

    /// [`remove`](Self::remove), with `timeout` for its graceful stop.
    pub async fn remove_within(
        &self,
        id: RunnableId,
        timeout: Duration,
    ) -> Result<(), HandleError> {
        let (name, done) = match self.inner.table.begin_removal(id)? {
            Removal::Gone => return Ok(()),
            Removal::Pending { name, done } => (name, done),
            Removal::Stopping(stopping) => {
                let (name, done) = (stopping.name.clone(), stopping.done.subscribe());
                // The removal goes on if this future is dropped.
                stopping.spawn(timeout);
                (name, done)
            }
        };
        removal::wait(name, done).await
    }
}

impl<K: InformerObject> ControllerBuilder<K, ManagerHandle> {
    /// Builds the controller and adds it, with `reconciler`, through the handle that handed
    /// out this builder ([`ManagerHandle::controller`]); its id removes it. Refused with
    /// [`HandleError::DuplicateName`], before anything is built, if a controller of the
    /// manager holds its name; with [`HandleError::Stopped`] once the manager stops.
    pub fn complete<R: Reconciler<Object = K>>(
        self,
        reconciler: R,
    ) -> Result<RunnableId, HandleError> {
        let (handle, builder) = self.retarget(());
        let (inner, name) = (&handle.inner, builder.unique_name());
        add_controller(
            &inner.table,
            &inner.telemetry,
            name,
            || builder.build_controller(),
            reconciler,
        )
    }

    /// Builds the controller, to add later with [`ManagerHandle::add_controller`] (read its
    /// figures through it, or keep `(*managed).clone()`); [`complete`](Self::complete) does both.
    pub fn build(self) -> ManagedController<K> {
        let (handle, builder) = self.retarget(());
        ManagedController::new(builder.build_controller(), &handle.inner.table)
    }
}

/// A controller builder bound to a manager: its factory, its ring (if sharded), its
/// metrics.
pub(super) fn bind<K: InformerObject>(
    builder: ControllerBuilder<K>,
    factory: &SharedInformerFactory,
    sharding: &Option<(Ring, String)>,
    telemetry: &Telemetry,
) -> ControllerBuilder<K> {
    let builder = builder.factory(factory);
    let builder = match sharding {
        Some((ring, shard)) => builder.shard(ring, shard),
        None => builder,
    };
    telemetry.controller(builder)
}

/// Adds the controller `build` makes, with its reconciler, to the manager of `table`,
/// reporting to `telemetry`: its name (`None` if it opted out of the check) is claimed
/// before `build` runs, so a refused duplicate builds nothing (registers nothing on the
/// informers, touches none of the first's metric series).
pub(super) fn add_controller<K, R>(
    table: &Arc<Table>,
    telemetry: &Telemetry,
    name: Option<String>,
    build: impl FnOnce() -> Controller<K>,
    reconciler: R,
) -> Result<RunnableId, HandleError>
where
    K: InformerObject,
    R: Reconciler<Object = K>,
{
    let claim = table.claim(name.as_deref())?;
    let controller = build();
    let forget = telemetry.forget_controller(controller.name(), controller.queue().name());
    let synced = controller.caches_synced();
    let runnable = ControllerRunnable::new(controller, reconciler);
    table.insert(Arc::new(runnable), forget, synced, claim)
}
