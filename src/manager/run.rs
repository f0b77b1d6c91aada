//! [`Manager::run`]: start the runnables phase by phase ([`Phase`]): servers (waited for,
//! bounded, until their ready checks pass), then the informers and cache runnables, then,
//! once the caches synced, the rest (those under a Lease once this replica holds it:
//! `leases.rs`); and stop them all gracefully on a signal or a failure, at once on a lost
//! Lease.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::leases::{self, Happened, InFlight, LeaseGroup};
use super::signal::shutdown_signal;
use super::{Abandoned, Manager, ManagerError};
use crate::fence::Fence;
use crate::runtime::{Phase, ReadyCheck, Runnable, RunnableError, Stop};

/// How often the servers' ready checks are asked while the manager waits for them.
const SERVER_READY_POLL: std::time::Duration = std::time::Duration::from_millis(20);

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
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let mut running = vec![false; self.runnables.len()];
        let phases: Vec<Phase> = self.runnables.iter().map(|r| r.phase()).collect();
        let unfenced = Fence::default();
        // Servers first: a cache whose list needs a webhook of this process (a conversion)
        // syncs only once it serves, and a probe of the server must not wait on the caches.
        // Their ready checks are waited for, bounded (as controller-runtime waits for its
        // webhook servers): past the bound an informer retries until what it needs serves.
        self.spawn_runnables(&mut tasks, &mut running, &stop_rx, &unfenced, |i| {
            phases[i] == Phase::Server
        });
        // A shutdown while the servers come up ends the run cleanly, before any cache starts.
        let (mut failure, mut stopped) = (None, false);
        match self.wait_for_servers(&mut tasks, &mut running, &phases, &mut shutdown).await {
            Ok(ready) => stopped = !ready,
            Err(err) => failure = Some(err),
        }
        if failure.is_none() && !stopped {
            // Informers run from the start, on followers too (warm replicas): a new leader
            // reconciles at once instead of after a full list.
            self.factory.start(std::future::pending());
            self.spawn_runnables(&mut tasks, &mut running, &stop_rx, &unfenced, |i| {
                phases[i] == Phase::Cache
            });
            let synced = tokio::select! {
                synced = self.factory.wait_for_cache_sync(&mut shutdown) => synced.map_err(|err| {
                    tracing::error!(error = %err, "caches did not sync; stopping");
                    ManagerError::from(err)
                }),
                err = self.first_failure(&mut tasks, &mut running) => {
                    tracing::error!(error = %err, "a runnable failed before the caches synced; stopping");
                    Err(err)
                }
            };
            failure = synced.err();
        }

        // Which Lease each runnable after the sync runs under: a sharded one under the shard
        // Lease (on every member of the ring), one that needs a leader under the leader
        // Lease, the rest under none. The shard Lease comes first, so that a runnable asking
        // for both runs on every member. Elections start only once the caches synced.
        let mut groups = Vec::new();
        let mut under: Vec<Option<usize>> = vec![None; self.runnables.len()];
        if failure.is_none() && !stopped {
            self.telemetry.set_probe("caches-synced", true);
            let sharded = shard.is_some();
            let shard_group = shard.map(|shard| {
                let in_flight = self.in_flight(|r| r.needs_shard_membership());
                groups.push(LeaseGroup::shard(shard.elector().clone(), in_flight));
                groups.len() - 1
            });
            let leader_group = elector.map(|elector| {
                let in_flight = self.in_flight(move |r| {
                    r.needs_leader_election() && !(sharded && r.needs_shard_membership())
                });
                groups.push(LeaseGroup::leader(elector, &self.telemetry, in_flight));
                groups.len() - 1
            });
            under = self
                .runnables
                .iter()
                .map(|r| {
                    let sharded = shard_group.filter(|_| r.needs_shard_membership());
                    sharded.or(leader_group.filter(|_| r.needs_leader_election()))
                })
                .collect();
            self.spawn_runnables(&mut tasks, &mut running, &stop_rx, &unfenced, |i| {
                phases[i] == Phase::AfterCacheSync && under[i].is_none()
            });
        }

        // A lost Lease (or a shard that fenced itself): what it fenced must stop at once.
        let mut fenced = false;
        // Run until the shutdown or the first failure.
        while failure.is_none() && !stopped {
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
                (group, happened) = leases::next(&mut groups, &self.telemetry) => match happened {
                    Happened::Held => {
                        let lease = groups[group].lease;
                        tracing::info!(lease, "holding the Lease: starting the runnables it fences");
                        let fence = groups[group].fence.clone();
                        self.spawn_runnables(&mut tasks, &mut running, &stop_rx, &fence, |i| {
                            phases[i] == Phase::AfterCacheSync && under[i] == Some(group)
                        });
                    }
                    Happened::Ended(None) => {}
                    Happened::Ended(Some(err)) => {
                        tracing::error!(error = %err, "stopping the manager");
                        failure = Some(err);
                        fenced = true;
                        break;
                    }
                },
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
        for group in groups.iter_mut().rev() {
            group.release().await;
        }
        self.factory.shutdown().await;
        endpoint.stop().await;
        tracing::info!("manager stopped");
        failure.map_or(Ok(()), Err)
    }

    /// Waits until the ready check of every server ([`Phase::Server`]) passes, for at most
    /// the manager's `server_ready_timeout` (then logs and goes on), until a runnable fails,
    /// or until `shutdown` completes: `Ok(false)` then, and `shutdown` is not polled again.
    async fn wait_for_servers(
        &self,
        tasks: &mut JoinSet<(usize, Result<(), RunnableError>)>,
        running: &mut [bool],
        phases: &[Phase],
        shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<bool, ManagerError> {
        let checks: Vec<(String, ReadyCheck)> = (self.runnables.iter().zip(phases))
            .filter(|(_, phase)| **phase == Phase::Server)
            .filter_map(|(r, _)| Some((r.name(), r.ready_check()?)))
            .collect();
        if checks.is_empty() {
            return Ok(true);
        }
        let ready = async {
            while !checks.iter().all(|(_, check)| check()) {
                tokio::time::sleep(SERVER_READY_POLL).await;
            }
        };
        tokio::select! {
            ready = tokio::time::timeout(self.server_ready_timeout, ready) => {
                if ready.is_err() {
                    let waiting: Vec<&str> = checks
                        .iter()
                        .filter(|(_, check)| !check())
                        .map(|(name, _)| name.as_str())
                        .collect();
                    tracing::warn!(
                        ?waiting,
                        timeout = ?self.server_ready_timeout,
                        "servers not ready in time; starting the caches anyway"
                    );
                }
                Ok(true)
            }
            () = shutdown.as_mut() => {
                tracing::info!("shutdown while the servers came up; stopping");
                Ok(false)
            }
            err = self.first_failure(tasks, running) => {
                tracing::error!(error = %err, "a server failed before it was ready; stopping");
                Err(err)
            }
        }
    }

    /// The reconciles in flight of the runnables `under` picks, each named by its runnable:
    /// what holds a Lease's release back.
    fn in_flight(&self, under: impl Fn(&dyn Runnable) -> bool + Send + Sync + 'static) -> InFlight {
        let runnables = self.runnables.clone();
        Arc::new(move || {
            runnables
                .iter()
                .filter(|r| under(r.as_ref()))
                .flat_map(|r| {
                    let name = r.name();
                    r.in_flight().into_iter().map(move |key| format!("{name}: {key}"))
                })
                .collect()
        })
    }

    /// Starts the runnables `pick` chooses by index, under `fence`.
    fn spawn_runnables(
        &self,
        tasks: &mut JoinSet<(usize, Result<(), RunnableError>)>,
        running: &mut [bool],
        stop_rx: &watch::Receiver<bool>,
        fence: &Fence,
        pick: impl Fn(usize) -> bool,
    ) {
        for (index, runnable) in self.runnables.iter().enumerate().filter(|(i, _)| pick(*i)) {
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

    /// The first failure of a runnable in `tasks` (those that end well are recorded); never
    /// completes while none fails.
    async fn first_failure(
        &self,
        tasks: &mut JoinSet<(usize, Result<(), RunnableError>)>,
        running: &mut [bool],
    ) -> ManagerError {
        loop {
            match tasks.join_next().await {
                Some(joined) => {
                    if let Some(err) = self.finished(joined, running) {
                        return err;
                    }
                }
                None => return std::future::pending().await,
            }
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
