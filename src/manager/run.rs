//! [`Manager::run`]: start the runnables phase by phase ([`Phase`](crate::runnable::Phase)): servers (waited for,
//! bounded, until their ready checks pass), then the informers and cache runnables, then,
//! once the caches synced, the rest (those under a Lease once this replica holds it:
//! `leases.rs`); and stop them all gracefully on a signal or a failure, at once on a lost
//! Lease.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc;
use tracing::Instrument;

use super::leases::{self, Happened, LeaseGroup};
use super::runnables::{Ended, Reach};
use super::signal::shutdown_signal;
use super::{Manager, ManagerError};
use crate::runnable::ReadyCheck;

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
        tracing::info!(runnables = self.table.len(), "starting manager");
        let endpoint = self.telemetry.serve(self.client()).await?;
        // The factory's first sync, then the caches of every controller added while it runs
        // (the table's, read through a weak reference: the check outlives no manager).
        let first_sync = Arc::new(AtomicBool::new(false));
        let (table, synced) = (Arc::downgrade(&self.table), first_sync.clone());
        let caches_synced = move || {
            synced.load(Ordering::SeqCst) && table.upgrade().is_some_and(|t| t.caches_synced())
        };
        self.telemetry.add_ready_check("caches-synced", Arc::new(caches_synced));
        if elector.is_some() {
            self.telemetry.set_probe("leader-election", false);
        }
        if shard.is_some() {
            self.telemetry.set_probe("shard-lease", false);
        }
        // `run` takes the manager: its table's ends are this run's alone.
        let Some(mut ended) = self.table.run() else {
            return Err(ManagerError::Runnable {
                runnable: "manager".into(),
                source: "the manager ran twice".into(),
            });
        };
        // Servers first: a cache whose list needs a webhook of this process (a conversion)
        // syncs only once it serves, and a probe of the server must not wait on the caches.
        // Their ready checks are waited for, bounded (as controller-runtime waits for its
        // webhook servers): past the bound an informer retries until what it needs serves.
        self.table.reach(Reach::Servers);
        // A shutdown while the servers come up ends the run cleanly, before any cache starts.
        let (mut failure, mut stopped) = (None, false);
        match self.wait_for_servers(&mut ended, &mut shutdown).await {
            Ok(ready) => stopped = !ready,
            Err(err) => failure = Some(err),
        }
        if failure.is_none() && !stopped {
            // Informers run from the start, on followers too (warm replicas): a new leader
            // reconciles at once instead of after a full list.
            self.factory.start(std::future::pending());
            self.table.reach(Reach::Caches);
            let synced = tokio::select! {
                synced = self.factory.wait_for_cache_sync(&mut shutdown) => synced.map_err(|err| {
                    tracing::error!(error = %err, "caches did not sync; stopping");
                    ManagerError::from(err)
                }),
                err = first_failure(&mut ended) => {
                    tracing::error!(error = %err, "a runnable failed before the caches synced; stopping");
                    Err(err)
                }
            };
            failure = synced.err();
        }

        // Which Lease each runnable after the sync runs under (the table places them): a
        // sharded one under the shard Lease (on every member of the ring), one that needs a
        // leader under the leader Lease, the rest under none. Elections start only once the
        // caches synced.
        let mut groups = Vec::new();
        if failure.is_none() && !stopped {
            first_sync.store(true, Ordering::SeqCst);
            let shard_group = shard.map(|shard| {
                let in_flight = self.table.in_flight(groups.len());
                groups.push(LeaseGroup::shard(shard.elector().clone(), in_flight));
                groups.len() - 1
            });
            let leader_group = elector.map(|elector| {
                let in_flight = self.table.in_flight(groups.len());
                groups.push(LeaseGroup::leader(elector, &self.telemetry, in_flight));
                groups.len() - 1
            });
            self.table.reach(Reach::Synced { shard: shard_group, leader: leader_group });
        }

        // A lost Lease (or a shard that fenced itself): what it fenced must stop at once.
        let mut fenced = false;
        // Run until the shutdown or the first failure.
        while failure.is_none() && !stopped {
            tokio::select! {
                _ = &mut shutdown => break,
                Some(end) = ended.recv() => {
                    if let Some(err) = failure_of(end) {
                        tracing::error!(error = %err, "a runnable failed; stopping the manager");
                        // A shard that fenced itself stops the rest as a lost Lease does,
                        // so that its Lease is released, and its ranges move, at once.
                        fenced = fenced_itself(&err);
                        failure = Some(err);
                        break;
                    }
                },
                (group, happened) = leases::next(&mut groups, &self.telemetry) => match happened {
                    Happened::Held => {
                        let lease = groups[group].lease;
                        tracing::info!(lease, "holding the Lease: starting the runnables it fences");
                        let fence = groups[group].fence.clone();
                        self.table.reach(Reach::Held { index: group, fence });
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
        self.table.stop();
        if fenced {
            // The Lease may expire for another replica a lease duration after the last
            // renewal, and the renewals have missed their deadline (or a shard fenced itself
            // and its Lease must go now): whatever this replica still reconciles must stop
            // now, not after a graceful shutdown (the reconciles in flight are dropped at
            // their next await, and logged as abandoned).
            tracing::error!("fenced: stopping every runnable at once");
            self.table.abort_all();
        }
        let drained = tokio::time::timeout(self.graceful_shutdown_timeout, async {
            while self.table.running() > 0 {
                let Some(end) = ended.recv().await else { break };
                if let Some(err) = failure_of(end) {
                    tracing::error!(error = %err, "a runnable failed while stopping");
                    failure.get_or_insert(err);
                }
            }
        })
        .await;
        if drained.is_err() {
            let abandoned = self.table.abandoned();
            self.table.abort_all();
            while self.table.running() > 0 && ended.recv().await.is_some() {}
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

    /// Waits until the ready check of every server ([`Phase::Server`](crate::runnable::Phase::Server)) passes, for at most
    /// the manager's `server_ready_timeout` (then logs and goes on), until a runnable fails,
    /// or until `shutdown` completes: `Ok(false)` then, and `shutdown` is not polled again.
    async fn wait_for_servers(
        &self,
        ended: &mut mpsc::UnboundedReceiver<Ended>,
        shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<bool, ManagerError> {
        let checks: Vec<(String, ReadyCheck)> = self.table.server_checks();
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
            err = first_failure(ended) => {
                tracing::error!(error = %err, "a server failed before it was ready; stopping");
                Err(err)
            }
        }
    }
}

/// The first failure of a runnable; never completes while none fails.
async fn first_failure(ended: &mut mpsc::UnboundedReceiver<Ended>) -> ManagerError {
    loop {
        match ended.recv().await {
            Some(end) => {
                if let Some(err) = failure_of(end) {
                    return err;
                }
            }
            None => return std::future::pending().await,
        }
    }
}

/// A runnable's end as the manager's failure, if it failed.
fn failure_of(end: Ended) -> Option<ManagerError> {
    let source = end.failure?;
    Some(ManagerError::Runnable { runnable: end.name, source })
}

/// Whether `err` is a controller's fencing of its shard after a stalled hand-off.
fn fenced_itself(err: &ManagerError) -> bool {
    let ManagerError::Runnable { source, .. } = err else { return false };
    super::runnables::fenced_itself(source.as_ref()).is_some()
}
