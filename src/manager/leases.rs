//! The Leases a manager's runnables run under, one code path for each: the leader Lease
//! (runnables that need a leader) and the shard Lease (a sharded manager's controllers).
//!
//! Contract, the same for every Lease:
//! - Its election runs from the moment the group is made (once the caches synced); its
//!   runnables start once this replica holds the Lease, each with a
//!   [`Stop`](crate::runtime::Stop) fenced by it, so that no work starts after the Lease
//!   lapsed by this replica's own clock.
//! - The Lease lost (a renewal past its deadline, or the election failing) is the manager's
//!   failure, and a fencing one: every runnable is aborted at once, not drained.
//! - The Lease is released only by [`release`](LeaseGroup::release), which the manager calls
//!   once every runnable has stopped, so no successor starts while one of them still works;
//!   or, when the manager's run future is dropped, once every task that carries the group's
//!   fence (the runnables, a controller's workers) is gone, however long their abort takes.

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
    pub(super) fn leader(elector: LeaderElector, telemetry: &Telemetry) -> Self {
        telemetry.set_probe("leader-election", true);
        Self::start(elector, "leader Lease", "leader-election", ManagerError::LeaderElection)
    }

    /// The group of this replica's shard Lease; the replica is ready once it holds it.
    pub(super) fn shard(elector: LeaderElector) -> Self {
        Self::start(elector, "shard Lease", "shard-lease", ManagerError::ShardLease)
    }

    fn start(
        elector: LeaderElector,
        lease: &'static str,
        probe: &'static str,
        error: fn(LeaderElectionError) -> ManagerError,
    ) -> Self {
        let (release, released) = oneshot::channel::<()>();
        let (working, gone) = Working::new();
        let fence = Fence::default().with(lease, elector.hold()).marked(working);
        let status = elector.status();
        let election = tokio::spawn(async move {
            elector
                .run(async {
                    if released.await.is_err() {
                        // The manager's run was dropped, its runnables aborted: they stop at
                        // their next await, on other threads maybe. The Lease is held (and
                        // renewed) until the last task that carries the fence is gone.
                        gone.await;
                    }
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

    /// Releases the Lease (a graceful end of its election) and waits for its election to end.
    pub(super) async fn release(&mut self) {
        if let Some(release) = self.release.take() {
            let _ = release.send(());
        }
        if let Some(election) = self.election.take() {
            let _ = election.await;
        }
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
