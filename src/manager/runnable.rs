//! [`Runnable`]: anything a [`Manager`](super::Manager) runs for the life of the process
//! (controller-runtime's `manager.Runnable`), [`Stop`], the signal it gets to stop, and the
//! runnable a controller with its reconciler is.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use tokio::sync::watch;

use crate::cache::InformerObject;
use crate::controller::{Controller, Reconciler};
use crate::fence::Fence;

/// A readiness check of a runnable: whether it is ready now (asked at each `/readyz`).
pub type ReadyCheck = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// The error a runnable ends with.
pub type RunnableError = Box<dyn std::error::Error + Send + Sync>;

/// Something a [`Manager`](super::Manager) runs: a [`Controller`](crate::controller::Controller)
/// with its reconciler (see [`Manager::add_controller`](super::Manager::add_controller)), or
/// any task of the operator's own (a webhook server, a periodic job).
///
/// `start` runs until `stop` completes, then finishes what it is doing and returns. An error
/// stops the whole manager, which reports it.
#[async_trait]
pub trait Runnable: Send + Sync + 'static {
    /// Its name, in logs and in the manager's reports.
    fn name(&self) -> String;

    /// Runs until `stop` completes.
    async fn start(&self, stop: Stop) -> Result<(), RunnableError>;

    /// What it is doing now (a controller: the keys it is reconciling). The manager reports it
    /// when the graceful-shutdown timeout makes it abandon the runnable.
    fn in_flight(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether it may run only while its manager leads the election (default `true`, as
    /// controller-runtime's `LeaderElectionRunnable`); without leader election every runnable
    /// runs.
    fn needs_leader_election(&self) -> bool {
        true
    }

    /// Whether it may run only while its manager is a member of its ring (a sharded
    /// controller: default `false`); see
    /// [`ManagerBuilder::sharding`](super::ManagerBuilder::sharding). Such a runnable runs on
    /// every member, leader or not.
    fn needs_shard_membership(&self) -> bool {
        false
    }

    /// Its readiness check, if it has one: the Manager's `/readyz` (feature `metrics`) then
    /// reports it under the runnable's name (a webhook server: serving with a valid
    /// certificate). Default none.
    fn ready_check(&self) -> Option<ReadyCheck> {
        None
    }
}

/// The signal to stop: cheap to clone, and a future (`stop.await`) that completes once the
/// manager stops (or is dropped). It also tells whether the Leases the runnable runs under
/// are still held ([`is_fenced`](Self::is_fenced)).
#[derive(Debug, Clone)]
pub struct Stop {
    rx: watch::Receiver<bool>,
    fence: Fence,
}

impl Stop {
    pub(crate) fn new(rx: watch::Receiver<bool>, fence: Fence) -> Self {
        Self { rx, fence }
    }

    /// Whether the stop was signalled.
    pub fn is_stopped(&self) -> bool {
        *self.rx.borrow()
    }

    /// Whether a Lease this runnable runs under has lapsed by this replica's own clock: the
    /// leader Lease for a runnable that [needs leader election](Runnable::needs_leader_election),
    /// the shard Lease for one that [needs shard membership](Runnable::needs_shard_membership)
    /// (a Lease is held until its last renewal's send time plus the renew deadline). A
    /// fenced runnable must start no new work: another replica may hold the Lease, or soon.
    /// Never true for a runnable that runs under no Lease.
    ///
    /// The manager stops a fenced runnable once its election notices the loss; this answers
    /// at the instant of the lapse, even in a process that has just resumed from a freeze
    /// (a stop signal, a frozen VM) and has not yet run its election's timers. Controllers
    /// ask it before each reconcile.
    pub fn is_fenced(&self) -> bool {
        self.fence.lapsed().is_some()
    }

    /// The Leases it runs under.
    pub(crate) fn fence(&self) -> &Fence {
        &self.fence
    }
}

impl IntoFuture for Stop {
    type Output = ();
    type IntoFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

    fn into_future(mut self) -> Self::IntoFuture {
        Box::pin(async move {
            // An error means the manager is gone: as good as a stop.
            let _ = self.rx.wait_for(|stopped| *stopped).await;
        })
    }
}

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
        let reconciler = self
            .reconciler
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .ok_or("the controller was started already")?;
        // Before each reconcile its workers check the Leases it runs under.
        self.controller.fence_with(stop.fence().clone());
        // Clones share the run; this one is taken by it.
        self.controller.clone().run(reconciler, stop.into_future()).await.map_err(Into::into)
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
