//! [`ManagedController`]: a controller built by a builder a manager handed out, the only kind
//! of built controller a manager takes.

use std::ops::Deref;
use std::sync::{Arc, Weak};

use super::error::HandleError;
use super::runnables::Table;
use crate::cache::InformerObject;
use crate::controller::Controller;

/// A [`Controller`] built by [`build`](crate::controller::ControllerBuilder::build) on a
/// builder that a [`Manager`](super::Manager) or its [`ManagerHandle`](super::ManagerHandle)
/// handed out ([`Manager::controller`](super::Manager::controller)): its informers are the
/// manager's (its factory's: such a builder takes no other
/// [`factory`](crate::controller::ControllerBuilder::factory)), it reports to the manager's
/// metrics registry and, in a sharded manager, it is a shard unless made
/// [`unsharded`](crate::controller::ControllerBuilder::unsharded).
///
/// Build one instead of [`complete`](crate::controller::ControllerBuilder::complete) to keep
/// a hold on the controller (a reference through `Deref`: its
/// [`stats`](Controller::stats), [`queue`](Controller::queue),
/// [`indexer`](Controller::indexer); or a clone of the controller itself,
/// `(*managed).clone()`), then add it to the manager that built it with
/// [`Manager::add_controller`](super::Manager::add_controller) (or
/// [`ManagerHandle::add_controller`](super::ManagerHandle::add_controller)).
///
/// What the types and the add guarantee:
/// - a manager takes no other built controller (a [`Controller`] built on its own does not
///   compile there, below), and the builders it hands out take no factory of their own;
/// - each `ManagedController` knows its manager: added to another, it is refused with
///   [`HandleError::ForeignController`](super::HandleError::ForeignController);
/// - it is not `Clone`, and an add takes it, so it is added once; one whose controller has
///   run already (a clone run by hand) is refused with
///   [`HandleError::AlreadyRun`](super::HandleError::AlreadyRun). A clone run by hand after
///   the add still makes the manager's run of it fail.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use ctrlkit::cache::ObjectKey;
/// # use ctrlkit::controller::{Action, Reconciler};
/// # struct Printer;
/// # #[async_trait::async_trait]
/// # impl Reconciler for Printer {
/// #     type Object = k8s_openapi::api::core::v1::Pod;
/// #     type Error = std::convert::Infallible;
/// #     async fn reconcile(&self, _: &ObjectKey, _: Option<Arc<Self::Object>>) -> Result<Action, Self::Error> { Ok(Action::done()) }
/// # }
/// # fn demo(client: kube_client::Client) -> Result<(), ctrlkit::manager::HandleError> {
/// use ctrlkit::manager::Manager;
/// use k8s_openapi::api::core::v1::Pod;
/// use kube_client::Api;
///
/// let mut manager = Manager::new(client.clone());
/// let controller = manager.controller(Api::<Pod>::all(client)).build();
/// let stats = (*controller).clone(); // reads the figures of the run the manager starts
/// manager.add_controller(controller, Printer)?;
/// # Ok(())
/// # }
/// ```
///
/// A controller built on its own, by [`Controller::builder`], runs itself
/// ([`Controller::run`]); a manager does not take it:
///
/// ```compile_fail,E0308
/// # use std::sync::Arc;
/// # use ctrlkit::cache::ObjectKey;
/// # use ctrlkit::controller::{Action, Controller, Reconciler};
/// # struct Printer;
/// # #[async_trait::async_trait]
/// # impl Reconciler for Printer {
/// #     type Object = k8s_openapi::api::core::v1::Pod;
/// #     type Error = std::convert::Infallible;
/// #     async fn reconcile(&self, _: &ObjectKey, _: Option<Arc<Self::Object>>) -> Result<Action, Self::Error> { Ok(Action::done()) }
/// # }
/// # fn demo(client: kube_client::Client) -> Result<(), ctrlkit::manager::HandleError> {
/// use ctrlkit::manager::Manager;
/// use k8s_openapi::api::core::v1::Pod;
/// use kube_client::Api;
///
/// let mut manager = Manager::new(client.clone());
/// let controller = Controller::builder(Api::<Pod>::all(client)).build();
/// manager.add_controller(controller, Printer)?; // error: expected `ManagedController<Pod>`
/// # Ok(())
/// # }
/// ```
pub struct ManagedController<K> {
    controller: Controller<K>,
    /// The manager whose builder built it (its table; a `Weak` keeps the allocation, so
    /// the address is no other manager's).
    manager: Weak<Table>,
}

impl<K: InformerObject> ManagedController<K> {
    /// `controller`, built by a builder that the manager of `table` bound.
    pub(super) fn new(controller: Controller<K>, table: &Arc<Table>) -> Self {
        Self { controller, manager: Arc::downgrade(table) }
    }

    /// The controller, for the manager of `table` to add, and the name it claims there
    /// (`None` where
    /// [`Config::skip_name_validation`](crate::controller::Config::skip_name_validation) opts
    /// out); refused if another manager's builder built it, or if it ran already.
    pub(super) fn admit(
        self,
        table: &Arc<Table>,
    ) -> Result<(Option<String>, Controller<K>), HandleError> {
        let controller = self.controller;
        if !std::ptr::eq(self.manager.as_ptr(), Arc::as_ptr(table)) {
            return Err(HandleError::ForeignController {
                controller: controller.name().to_owned(),
            });
        }
        if controller.has_run() {
            return Err(HandleError::AlreadyRun { controller: controller.name().to_owned() });
        }
        let name =
            (!controller.config().skip_name_validation).then(|| controller.name().to_owned());
        Ok((name, controller))
    }

    /// The controller, to [`run`](Controller::run) it yourself beside the manager (which
    /// starts and stops the informers it reads) rather than add it.
    pub fn into_inner(self) -> Controller<K> {
        self.controller
    }
}

impl<K> Deref for ManagedController<K> {
    type Target = Controller<K>;

    fn deref(&self) -> &Controller<K> {
        &self.controller
    }
}

impl<K> std::fmt::Debug for ManagedController<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ManagedController").field(&self.controller).finish()
    }
}
