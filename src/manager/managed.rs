//! [`ManagedController`]: a controller built by a builder a manager handed out, the only kind
//! of built controller a manager takes.

use std::ops::Deref;

use crate::cache::InformerObject;
use crate::controller::Controller;

/// A [`Controller`] built by [`build`](crate::controller::ControllerBuilder::build) on a
/// builder that a [`Manager`](super::Manager) or its [`ManagerHandle`](super::ManagerHandle)
/// handed out ([`Manager::controller`](super::Manager::controller)): its informers are the
/// manager's (its factory's), it reports to the manager's metrics registry and, in a sharded
/// manager, it is a shard unless made [`unsharded`](crate::controller::ControllerBuilder::unsharded).
///
/// Build one instead of [`complete`](crate::controller::ControllerBuilder::complete) to keep
/// a hold on the controller (a clone, or a reference through `Deref`: its
/// [`stats`](Controller::stats), [`queue`](Controller::queue),
/// [`indexer`](Controller::indexer)), then add it to the manager that built it with
/// [`Manager::add_controller`](super::Manager::add_controller) (or
/// [`ManagerHandle::add_controller`](super::ManagerHandle::add_controller)). That is the
/// only built controller a manager takes, so one wired to informers the manager does not
/// run cannot be added:
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
/// let stats = controller.clone(); // reads the figures of the run the manager starts
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
}

impl<K: InformerObject> ManagedController<K> {
    /// `controller`, built by a builder its manager bound.
    pub(super) fn new(controller: Controller<K>) -> Self {
        Self { controller }
    }

    /// The name it claims in its manager; `None` where
    /// [`Config::skip_name_validation`](crate::controller::Config::skip_name_validation) opts
    /// out.
    pub(super) fn unique_name(&self) -> Option<String> {
        let controller = &self.controller;
        (!controller.config().skip_name_validation).then(|| controller.name().to_owned())
    }

    /// The controller, to [`run`](Controller::run) it yourself beside the manager (which
    /// starts and stops the informers it reads) rather than add it.
    pub fn into_inner(self) -> Controller<K> {
        self.controller
    }
}

impl<K> Clone for ManagedController<K> {
    /// The same controller (see [`Controller`]'s clones).
    fn clone(&self) -> Self {
        Self { controller: self.controller.clone() }
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
