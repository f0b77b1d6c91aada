//! The [`Runnable`] a controller with its reconciler is, for the [`Manager`](super::Manager)
//! to run.

use std::future::IntoFuture;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::cache::{CacheSyncError, InformerObject};
use crate::controller::{Controller, ControllerError, Reconciler};
use crate::runnable::{Runnable, RunnableError, Stop};

/// A controller and its reconciler, as a [`Runnable`] (what
/// [`Manager::add_controller`](super::Manager::add_controller) adds).
pub(super) struct ControllerRunnable<K, R> {
    controller: Controller<K>,
    /// Taken by the one `start`.
    reconciler: Mutex<Option<R>>,
}

impl<K, R> ControllerRunnable<K, R> {
    pub(super) fn new(controller: Controller<K>, reconciler: R) -> Self {
        Self { controller, reconciler: Mutex::new(Some(reconciler)) }
    }
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
        let reconciler =
            self.reconciler.lock().take().ok_or("the controller was started already")?;
        // Before each reconcile its workers check the Leases it runs under. Clones share the
        // run; this one is taken by it.
        let fence = stop.fence().clone();
        let asked = stop.clone();
        let run = self.controller.clone().run_fenced(reconciler, stop.into_future(), Some(fence));
        match run.await {
            // Stopped while it waited for its caches: a removal or the manager's stop asked
            // for it, so it is a clean stop, not a failure of the controller.
            Err(ControllerError::CacheSync(CacheSyncError::Shutdown(_))) if asked.is_stopped() => {
                tracing::info!(
                    controller = self.controller.name(),
                    "stopped before its caches synced"
                );
                Ok(())
            }
            ended => ended.map_err(Into::into),
        }
    }

    fn in_flight(&self) -> Vec<String> {
        self.controller.in_flight().iter().map(ToString::to_string).collect()
    }

    fn needs_leader_election(&self) -> bool {
        // A sharded controller runs on every member of its ring, not only on the leader.
        self.controller.needs_leader_election() && !self.controller.is_sharded()
    }

    fn needs_shard_membership(&self) -> bool {
        self.controller.is_sharded()
    }
}
