//! [`Manager::run`]: start the informers, wait for their caches, start the runnables (those
//! that need a leader once this replica leads), and stop them all gracefully on a signal, a
//! failure or a lost election.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::signal::shutdown_signal;
use super::{Abandoned, Manager, ManagerError};
use crate::fence::Fence;
use crate::runtime::{Runnable, RunnableError, Stop};

impl Manager {
    /// Runs until SIGTERM or Ctrl-C, or until a runnable fails; see the type's docs.
    pub async fn run(self) -> Result<(), ManagerError> {
        self.run_until(shutdown_signal()).await
    }

    /// Runs until `shutdown` completes, or until a runnable fails; see the type's docs.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ManagerError> {
        let span = tracing::info_span!("manager");
        self.run_inner(shutdown).instrument(span).await
    }

    async fn run_inner(
        self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ManagerError> {
        tokio::pin!(shutdown);
        let elector = self.elector.clone()?;
        let shard = self.shard.clone().map_err(ManagerError::ShardLease)?;
        tracing::info!(runnables = self.runnables.len(), "starting manager");
        let endpoint = self.telemetry.serve(self.client()).await?;
        self.telemetry.set_probe("caches-synced", false);
        if elector.is_some() {
            self.telemetry.set_probe("leader-election", false);
        }
        if shard.is_some() {
            self.telemetry.set_probe("shard-lease", false);
        }
        // Informers run from the start, on followers too (warm replicas): a new leader
        // reconciles at once instead of after a full list.
        self.factory.start(std::future::pending());
        if let Err(err) = self.factory.wait_for_cache_sync(&mut shutdown).await {
            tracing::error!(error = %err, "caches did not sync; stopping");
            self.factory.shutdown().await;
            endpoint.stop().await;
            return Err(err.into());
        }
        self.telemetry.set_probe("caches-synced", true);
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let mut running = vec![false; self.runnables.len()];
        let leader_only = |r: &Arc<dyn Runnable>| elector.is_some() && r.needs_leader_election();
        let member_only = |r: &Arc<dyn Runnable>| shard.is_some() && r.needs_shard_membership();
        // What each group runs under, checked by its own clock before work starts.
        let leader_fence =
            elector.iter().fold(Fence::default(), |f, e| f.with("leader Lease", e.hold()));
        let member_fence =
            shard.iter().fold(Fence::default(), |f, s| f.with("shard Lease", s.hold()));
        self.spawn_runnables(&mut tasks, &mut running, &stop_rx, &Fence::default(), |r| {
            !leader_only(r) && !member_only(r)
        });

        // The shard Lease, as the election: held until the runnables have stopped, so that
        // the sharder moves this shard's objects only once nothing here reconciles them.
        let (shard_stop, shard_stopped) = oneshot::channel::<()>();
        let mut membership = shard.clone().map(|shard| {
            tokio::spawn(async move {
                shard
                    .run(async {
                        let _ = shard_stopped.await;
                    })
                    .await
            })
        });
        let mut member = shard.as_ref().map(|s| s.status());
        let mut members_started = false;

        // The election runs until the runnables have stopped, so that no successor starts
        // while they still work; its own stop releases the lease.
        let (elector_stop, elector_stopped) = oneshot::channel::<()>();
        let mut election = elector.clone().map(|elector| {
            tokio::spawn(async move {
                elector
                    .run(async {
                        let _ = elector_stopped.await;
                    })
                    .await
            })
        });
        let mut leading = elector.as_ref().map(|e| e.status());
        if election.is_some() {
            // Campaigning or leading: ready to serve either way.
            self.telemetry.set_probe("leader-election", true);
        }
        let mut leader_started = false;
        let mut failure: Option<ManagerError> = None;
        // A lost Lease (the shard's or the leader's): what it fenced must stop at once.
        let mut fenced = false;
        // Run until the shutdown or the first failure.
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                joined = tasks.join_next(), if !tasks.is_empty() => match joined {
                    Some(joined) => {
                        if let Some(err) = self.finished(joined, &mut running) {
                            tracing::error!(error = %err, "a runnable failed; stopping the manager");
                            // A shard that fenced itself stops the rest as a lost Lease does,
                            // so that its Lease is released, and its ranges move, at once.
                            fenced = fenced_itself(&err);
                            failure = Some(err);
                            break;
                        }
                    }
                    None => break,
                },
                _ = async { leading.as_mut().expect("an election").wait_for(|s| s.leading).await },
                    if leading.is_some() && !leader_started =>
                {
                    tracing::info!("leading: starting the controllers that need a leader");
                    leader_started = true;
                    self.spawn_runnables(&mut tasks, &mut running, &stop_rx, &leader_fence, |r| {
                        leader_only(r)
                    });
                }
                _ = async { member.as_mut().expect("a shard").wait_for(|s| s.leading).await },
                    if member.is_some() && !members_started =>
                {
                    tracing::info!("holding the shard Lease: starting the sharded controllers");
                    members_started = true;
                    self.telemetry.set_probe("shard-lease", true);
                    self.spawn_runnables(&mut tasks, &mut running, &stop_rx, &member_fence, |r| {
                        member_only(r)
                    });
                }
                ended = async { membership.as_mut().expect("a shard").await }, if membership.is_some() => {
                    membership = None;
                    self.telemetry.set_probe("shard-lease", false);
                    let err = match ended {
                        Ok(Err(err)) => ManagerError::ShardLease(err),
                        Ok(Ok(())) => continue,
                        Err(join) => ManagerError::Runnable {
                            runnable: "shard lease".into(),
                            source: join.to_string().into(),
                        },
                    };
                    tracing::error!(error = %err, "stopping the manager");
                    failure = Some(err);
                    fenced = true;
                    break;
                }
                ended = async { election.as_mut().expect("an election").await }, if election.is_some() => {
                    election = None;
                    let err = match ended {
                        Ok(Err(err)) => ManagerError::LeaderElection(err),
                        Ok(Ok(())) => continue,
                        Err(join) => ManagerError::Runnable {
                            runnable: "leader election".into(),
                            source: join.to_string().into(),
                        },
                    };
                    tracing::error!(error = %err, "stopping the manager");
                    failure = Some(err);
                    fenced = true;
                    break;
                }
            }
        }
        tracing::info!("stopping manager");
        stop_tx.send_replace(true);
        if fenced {
            // The Lease may expire for another replica a lease duration after the last
            // renewal, and the renewals have missed their deadline (or a shard fenced itself
            // and its Lease must go now): whatever this replica still reconciles must stop
            // now, not after a graceful shutdown (the reconciles in flight are dropped at
            // their next await, and logged as abandoned).
            tracing::error!("fenced: stopping every runnable at once");
            tasks.abort_all();
        }
        let drained = tokio::time::timeout(self.graceful_shutdown_timeout, async {
            while let Some(joined) = tasks.join_next().await {
                if let Some(err) = self.finished(joined, &mut running) {
                    tracing::error!(error = %err, "a runnable failed while stopping");
                    failure.get_or_insert(err);
                }
            }
        })
        .await;
        if drained.is_err() {
            let abandoned: Vec<Abandoned> = self
                .runnables
                .iter()
                .zip(&running)
                .filter(|(_, running)| **running)
                .map(|(r, _)| Abandoned { runnable: r.name(), in_flight: r.in_flight() })
                .collect();
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
            let err = ManagerError::ShutdownTimeout {
                timeout: self.graceful_shutdown_timeout,
                abandoned,
            };
            tracing::error!(error = %err, "graceful shutdown timed out");
            failure.get_or_insert(err);
        }
        // Only now, with nothing left running, may a successor lead, or the shard's objects
        // move.
        let _ = elector_stop.send(());
        if let Some(election) = election {
            let _ = election.await;
        }
        let _ = shard_stop.send(());
        if let Some(membership) = membership {
            let _ = membership.await;
        }
        self.factory.shutdown().await;
        endpoint.stop().await;
        tracing::info!("manager stopped");
        failure.map_or(Ok(()), Err)
    }

    /// Starts the runnables `pick` chooses, under `fence`.
    fn spawn_runnables(
        &self,
        tasks: &mut JoinSet<(usize, Result<(), RunnableError>)>,
        running: &mut [bool],
        stop_rx: &watch::Receiver<bool>,
        fence: &Fence,
        pick: impl Fn(&Arc<dyn Runnable>) -> bool,
    ) {
        for (index, runnable) in self.runnables.iter().enumerate().filter(|(_, r)| pick(r)) {
            let stop = Stop::new(stop_rx.clone(), fence.clone());
            let runnable = runnable.clone();
            let span = tracing::info_span!("runnable", name = %runnable.name());
            let run = async move {
                let result = AssertUnwindSafe(runnable.start(stop)).catch_unwind().await;
                // A panic is the runnable's failure, reported as such.
                (index, result.unwrap_or_else(|panic| Err(panicked(&*panic))))
            };
            running[index] = true;
            tasks.spawn(run.instrument(span));
        }
    }

    /// Records a runnable's end; returns its failure, if it failed.
    fn finished(
        &self,
        joined: Result<(usize, Result<(), RunnableError>), tokio::task::JoinError>,
        running: &mut [bool],
    ) -> Option<ManagerError> {
        let (index, result) = match joined {
            Ok(finished) => finished,
            // Only an abort (after the timeout) ends a task without its index.
            Err(_) => return None,
        };
        running[index] = false;
        let name = self.runnables[index].name();
        match result {
            Ok(()) => {
                tracing::info!(runnable = %name, "runnable finished");
                None
            }
            Err(source) => Some(ManagerError::Runnable { runnable: name, source }),
        }
    }
}

/// Whether `err` is a controller's fencing of its shard after a stalled hand-off.
fn fenced_itself(err: &ManagerError) -> bool {
    let ManagerError::Runnable { source, .. } = err else { return false };
    let controller = source.downcast_ref::<crate::controller::ControllerError>();
    matches!(controller, Some(crate::controller::ControllerError::HandOffTimeout { .. }))
}

fn panicked(panic: &(dyn std::any::Any + Send)) -> RunnableError {
    format!("panicked: {}", crate::panic::panic_message(panic)).into()
}
