//! What every long-running part of ctrlkit shares, at the bottom of the crate so that any layer
//! can be run by a [`Manager`](crate::manager::Manager) without knowing it: the [`Runnable`]
//! trait (controller-runtime's `manager.Runnable`), the [`Phase`] it starts in, the [`Stop`]
//! signal a runnable gets, which also tells whether the Leases it runs under are still held,
//! and readiness checks.
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

/// When a [`Manager`](crate::manager::Manager) starts a runnable, relative to its caches
/// (controller-runtime's runnable groups): phases start in this order, each runnable as its
/// phase starts.
///
/// A runnable that serves what the caches need (a conversion webhook that a list of its
/// CRD's other version calls) must not wait for them: [`Server`](Self::Server) starts it
/// before any cache, so its readiness and its answers do not hang on a sync that needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[non_exhaustive]
pub enum Phase {
    /// Servers (webhooks, a runnable of the user's own that serves): started first, on
    /// every replica (under no Lease, whatever
    /// [`needs_leader_election`](Runnable::needs_leader_election) says). The informers start
    /// once their [ready checks](Runnable::ready_check) passed, or after the manager's
    /// [`server_ready_timeout`](crate::manager::ManagerBuilder::server_ready_timeout). A
    /// lost Lease stops the whole manager and aborts it with everything else.
    Server,
    /// Caches (a runnable that fills a cache of its own): started with the informers, before
    /// they synced, on every replica (under no Lease). The controllers wait for the
    /// factory's informers only, not for such a runnable's own cache. A lost Lease aborts it
    /// with everything else, as it does a server.
    Cache,
    /// The rest (controllers, the default): started once the caches synced, and, if it needs
    /// a Lease ([`needs_leader_election`](Runnable::needs_leader_election),
    /// [`needs_shard_membership`](Runnable::needs_shard_membership)), once this replica holds
    /// it.
    #[default]
    AfterCacheSync,
}

/// Something a [`Manager`](crate::manager::Manager) runs: a [`Controller`](crate::controller::Controller)
/// with its reconciler (see [`Manager::add_controller`](crate::manager::Manager::add_controller)), or
/// any task of the operator's own (a webhook server, a periodic job).
///
/// `start` runs until `stop` completes, then finishes what it is doing and returns. An error
/// stops the whole manager, which reports it; one returned as it is being removed
/// ([`ManagerHandle::remove`](crate::manager::ManagerHandle::remove)) is its remover's alone.
/// A runnable that ignores its stop is aborted (dropped at its next await) once its graceful
/// stop times out.
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

    /// The phase it starts in (default [`Phase::AfterCacheSync`]: after the caches synced).
    fn phase(&self) -> Phase {
        Phase::AfterCacheSync
    }

    /// Whether it may run only while its manager leads the election (default `true`, as
    /// controller-runtime's `LeaderElectionRunnable`); without leader election every runnable
    /// runs. Asked only of a runnable of [`Phase::AfterCacheSync`]: servers and caches run on
    /// every replica.
    fn needs_leader_election(&self) -> bool {
        true
    }

    /// Whether it may run only while its manager is a member of its ring (a sharded
    /// controller: default `false`); see
    /// [`ManagerBuilder::sharding`](crate::manager::ManagerBuilder::sharding). Such a runnable runs on
    /// every member, leader or not. Asked only of a runnable of [`Phase::AfterCacheSync`].
    fn needs_shard_membership(&self) -> bool {
        false
    }

    /// Its readiness check, if it has one: the Manager's `/readyz` (feature `metrics`) then
    /// reports it under the runnable's name, and `/readyz/<name>` answers for it alone (a
    /// webhook server: serving with a valid certificate; its pod's readiness probe asks
    /// that). Default none.
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
