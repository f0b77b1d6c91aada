//! What every long-running part of ctrlkit shares, at the bottom of the crate so that any layer
//! can be run by a [`Manager`](crate::manager::Manager) without knowing it: the [`Runnable`]
//! trait (controller-runtime's `manager.Runnable`), the [`Stop`] signal a runnable gets, which
//! also tells whether the Leases it runs under are still held, and readiness checks.
//!
//! They live here, their one path, so that the webhook server, the sharder and the metrics
//! endpoint, which the manager runs, need nothing of the manager's.

use std::future::{Future, IntoFuture};
use std::pin::Pin;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::fence::Fence;

/// A readiness check of a runnable: whether it is ready now (asked at each `/readyz`; one that
/// panics fails, logged).
pub type ReadyCheck = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// The error a runnable ends with.
pub type RunnableError = Box<dyn std::error::Error + Send + Sync>;

/// Something a [`Manager`](crate::manager::Manager) runs: a [`Controller`](crate::controller::Controller)
/// with its reconciler (see [`Manager::add_controller`](crate::manager::Manager::add_controller)), or
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
    /// [`ManagerBuilder::sharding`](crate::manager::ManagerBuilder::sharding). Such a runnable runs on
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
