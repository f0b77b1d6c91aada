//! The Leases a manager's runnables run under, one code path for each: the leader Lease
//! (runnables that need a leader) and the shard Lease (a sharded manager's controllers).
//!
//! Contract, the same for every Lease:
//! - Its election runs from the moment the group is made (once the caches synced); its
//!   runnables start once this replica holds the Lease, each with a
//!   [`Stop`](crate::runnable::Stop) fenced by it, so that no work starts after the Lease
//!   lapsed by this replica's own clock.
//! - The Lease lost (a renewal past its deadline, or the election failing) is the manager's
//!   failure, and a fencing one: every runnable is aborted at once, not drained.
//! - The Lease is released by [`release`](LeaseGroup::release), which the manager calls once
//!   every runnable has stopped or was aborted, or when the manager's run future is dropped:
//!   on every path, only once every task that carries the group's fence (the runnables, a
//!   controller's workers, aborted ones that still block a thread) is gone, so no successor
//!   starts while one of them still works. That wait is logged (naming the reconciles still
//!   running) and capped at the lease duration: a mark that never goes (a reconcile blocked
//!   forever, a `Stop` moved into a detached task) would otherwise hold the Lease forever,
//!   and a reconcile still running after the cap is past what the Lease protects anyway (it
//!   is logged here and counted as
//!   [`ControllerStats::outlived_lease`](crate::controller::ControllerStats::outlived_lease)
//!   when it ends).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::ManagerError;
use super::telemetry::Telemetry;
use crate::fence::{Fence, Working};
use crate::leaderelection::{LeaderElectionError, LeaderElector, LeaderStatus};

/// One Lease and the runnables that run under it.
pub(super) struct LeaseGroup {
    /// The Lease, in logs and in the fence's reports: `leader Lease`, `shard Lease`.
    pub(super) lease: &'static str,
    /// Its `/readyz` check.
    probe: &'static str,
    /// Checked by its runnables before each piece of work.
    pub(super) fence: Fence,
    status: watch::Receiver<LeaderStatus>,
    /// Whether its runnables were started (once: a Lease lost ends the manager).
    started: bool,
    election: Option<JoinHandle<Result<(), LeaderElectionError>>>,
    release: Option<oneshot::Sender<()>>,
    /// Its failure as the manager's.
    error: fn(LeaderElectionError) -> ManagerError,
}

/// The reconciles still running under a group's Lease, named for the logs of its release.
pub(super) type InFlight = Arc<dyn Fn() -> Vec<String> + Send + Sync>;

/// How often the wait for a group's work to be gone is logged while it lasts.
const WAIT_LOG_EVERY: Duration = Duration::from_secs(1);

/// What a group's Lease did.
pub(super) enum Happened {
    /// The Lease is held: start the group's runnables.
    Held,
    /// The election ended: with the manager's failure, or none (it was stopped).
    Ended(Option<ManagerError>),
}

impl LeaseGroup {
    /// The group of the leader Lease; the replica is ready while it campaigns (a follower
    /// serves, with warm caches).
    pub(super) fn leader(
        elector: LeaderElector,
        telemetry: &Telemetry,
        in_flight: InFlight,
    ) -> Self {
        telemetry.set_probe("leader-election", true);
        Self::start(
            elector,
            "leader Lease",
            "leader-election",
            ManagerError::LeaderElection,
            in_flight,
        )
    }

    /// The group of this replica's shard Lease; the replica is ready once it holds it.
    pub(super) fn shard(elector: LeaderElector, in_flight: InFlight) -> Self {
        Self::start(elector, "shard Lease", "shard-lease", ManagerError::ShardLease, in_flight)
    }

    fn start(
        elector: LeaderElector,
        lease: &'static str,
        probe: &'static str,
        error: fn(LeaderElectionError) -> ManagerError,
        in_flight: InFlight,
    ) -> Self {
        let (release, released) = oneshot::channel::<()>();
        let (working, gone) = Working::new();
        let fence = Fence::default().with(lease, elector.hold()).marked(working);
        let status = elector.status();
        let cap = elector.config().lease_duration;
        let election = tokio::spawn(async move {
            elector
                .run(async {
                    // Released, or the manager's run dropped: either way the runnables may
                    // have been aborted, and an aborted task stops only at its next await,
                    // on another thread maybe. The Lease is held (and renewed) until the
                    // last task that carries the fence is gone, for at most a lease duration.
                    let _ = released.await;
                    wait_gone(gone, lease, cap, &*in_flight).await;
                })
                .await
        });
        Self {
            lease,
            probe,
            fence,
            status,
            started: false,
            election: Some(election),
            release: Some(release),
            error,
        }
    }

    /// The next thing its Lease does: held (once), or its election ended. Never completes
    /// once both have happened.
    pub(super) async fn next(&mut self, telemetry: &Telemetry) -> Happened {
        let Some(election) = self.election.as_mut() else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = self.status.wait_for(|s| s.leading), if !self.started => {
                self.started = true;
                telemetry.set_probe(self.probe, true);
                Happened::Held
            }
            ended = election => {
                self.election = None;
                telemetry.set_probe(self.probe, false);
                Happened::Ended(match ended {
                    Ok(Ok(())) => None,
                    Ok(Err(err)) => Some((self.error)(err)),
                    Err(join) => Some(ManagerError::Runnable {
                        runnable: self.lease.into(),
                        source: join.to_string().into(),
                    }),
                })
            }
        }
    }

    /// Releases the Lease (a graceful end of its election), once the work under it is gone
    /// (at most a lease duration), and waits for its election to end.
    pub(super) async fn release(&mut self) {
        // The group's own mark must not hold its release back.
        self.fence = self.fence.unmarked();
        if let Some(release) = self.release.take() {
            let _ = release.send(());
        }
        if let Some(election) = self.election.take() {
            let _ = election.await;
        }
    }
}

/// Waits until `gone` (every mark of the work under `lease`) resolves, logging what still
/// runs every [`WAIT_LOG_EVERY`], for at most `cap`.
async fn wait_gone(
    gone: impl Future<Output = ()> + Send,
    lease: &'static str,
    cap: Duration,
    in_flight: &(dyn Fn() -> Vec<String> + Send + Sync),
) {
    let deadline = tokio::time::Instant::now() + cap;
    tokio::pin!(gone);
    loop {
        let next = deadline.min(tokio::time::Instant::now() + WAIT_LOG_EVERY);
        if tokio::time::timeout_at(next, &mut gone).await.is_ok() {
            return;
        }
        let running = in_flight();
        if tokio::time::Instant::now() >= deadline {
            tracing::error!(
                lease,
                ?cap,
                running = %running.join(", "),
                "work under the {lease} still runs a lease duration after its runnables \
                 stopped: releasing it anyway (what still runs is past what the Lease \
                 protects, and is counted as having outlived it when it ends)"
            );
            return;
        }
        tracing::warn!(
            lease,
            running = %running.join(", "),
            "waiting for the work under the {lease} to be gone before releasing it (an \
             aborted reconcile blocking its thread, or a task that kept its Stop)"
        );
    }
}

/// The next thing any of `groups`' Leases does, with the group's index; never completes
/// without a group.
pub(super) async fn next(groups: &mut [LeaseGroup], telemetry: &Telemetry) -> (usize, Happened) {
    if groups.is_empty() {
        return std::future::pending().await;
    }
    let waits = groups
        .iter_mut()
        .enumerate()
        .map(|(index, group)| Box::pin(async move { (index, group.next(telemetry).await) }));
    futures::future::select_all(waits).await.0
}
