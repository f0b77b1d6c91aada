//! [`LeaderElector`]: client-go's `leaderelection.LeaderElector` over a [`LeaseLock`].

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use super::lease_lock::{LeaderElectionRecord, LeaseLock};

/// client-go's jitter factor: a candidate waits between one and 2.2 retry periods between
/// attempts to acquire, so candidates spread out.
pub const JITTER_FACTOR: f64 = 1.2;

/// The timing of an election, client-go's `LeaderElectionConfig` defaults: lease duration
/// 15 s, renew deadline 10 s, retry period 2 s, and the lease released when the leader stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderElectionConfig {
    /// How long followers wait, from the last change they saw of the lease, before they take
    /// it over.
    pub lease_duration: Duration,
    /// How long the leader goes on trying to renew before it gives up leading. Shorter than
    /// the lease duration, so the leader stops before anyone may take over.
    pub renew_deadline: Duration,
    /// How long candidates wait between attempts (jittered by up to 120% when acquiring).
    pub retry_period: Duration,
    /// Whether a leader that stops (shutdown, not lost leadership) empties the lease so a
    /// successor takes over at its next attempt rather than after the lease duration.
    pub release_on_cancel: bool,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            release_on_cancel: true,
        }
    }
}

impl LeaderElectionConfig {
    /// Checks client-go's rules: every duration positive, lease duration > renew deadline >
    /// 1.2 × retry period.
    pub fn validate(&self) -> Result<(), LeaderElectionError> {
        let invalid = |why: &str| Err(LeaderElectionError::InvalidConfig(why.to_owned()));
        if self.lease_duration.is_zero()
            || self.renew_deadline.is_zero()
            || self.retry_period.is_zero()
        {
            return invalid(
                "lease duration, renew deadline and retry period must be greater than zero",
            );
        }
        if self.lease_duration <= self.renew_deadline {
            return invalid("the lease duration must be greater than the renew deadline");
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return invalid("the renew deadline must be greater than retry period × 1.2");
        }
        Ok(())
    }
}

/// Why an election could not run or ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaderElectionError {
    /// The configuration breaks client-go's rules.
    #[error("invalid leader election configuration: {0}")]
    InvalidConfig(String),
    /// The leader could not renew the lease within the renew deadline and stopped leading.
    #[error("{identity} lost the lease {lease}: it could not renew it within the renew deadline")]
    Lost {
        /// `namespace/name` of the Lease.
        lease: String,
        /// This candidate.
        identity: String,
    },
}

/// Where an election stands, as [`LeaderElector::status`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LeaderStatus {
    /// Whether this candidate leads.
    pub leading: bool,
    /// The holder of the lease as last seen (client-go's `OnNewLeader`), if anyone holds it.
    pub leader: Option<String>,
}

/// Hooks for `leader_election_master_status` (see `ctrlkit::metrics::Registry`, feature `metrics`, for an implementation).
pub trait LeaderMetrics: Send + Sync {
    /// This process leads the election `name`.
    fn on(&self, name: &str);
    /// This process no longer leads the election `name`.
    fn off(&self, name: &str);
}

/// What this candidate last saw of the lease, and when (by its own clock: expiry is judged
/// from when a change was seen, never from the times written in the lease, so clock skew
/// between candidates does not matter).
#[derive(Default)]
struct Observed {
    record: Option<LeaderElectionRecord>,
    at: Option<Instant>,
}

struct Inner {
    lock: LeaseLock,
    config: LeaderElectionConfig,
    observed: Mutex<Observed>,
    status: watch::Sender<LeaderStatus>,
    metrics: Option<Arc<dyn LeaderMetrics>>,
    random: RandomState,
    draws: AtomicU64,
}

/// Runs one candidate of a Lease-based election with client-go's algorithm:
///
/// - **Acquire**: every retry period (jittered by up to 120%), read the Lease; take it if it
///   does not exist, is empty (released), or has not changed for a lease duration as this
///   candidate observed it. Writes carry the Lease's resourceVersion, so of two candidates
///   only one can win a round.
/// - **Renew**: while leading, write a new renew time every retry period; a round that cannot
///   succeed within the renew deadline (requests are cut at the deadline) ends leadership.
///   Since the renew deadline is shorter than the lease duration, the leader stops leading
///   before any follower may take over: at no instant do two candidates lead.
/// - **Release**: a leader that stops on shutdown writes an empty holder (with
///   `release_on_cancel`), so a follower takes over at its next attempt.
///
/// `holderIdentity`, `acquireTime`, `renewTime`, `leaseDurationSeconds` and
/// `leaseTransitions` are kept as client-go keeps them, so client-go and ctrlkit candidates
/// can share a Lease.
#[derive(Clone)]
pub struct LeaderElector {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("lock", &self.inner.lock)
            .field("config", &self.inner.config)
            .field("status", &*self.inner.status.borrow())
            .finish_non_exhaustive()
    }
}

/// How a leadership ended.
enum Ended {
    Shutdown,
    Lost,
}

impl LeaderElector {
    /// A candidate of the election on `lock`; fails if `config` breaks client-go's rules.
    pub fn new(lock: LeaseLock, config: LeaderElectionConfig) -> Result<Self, LeaderElectionError> {
        Self::with_metrics(lock, config, None)
    }

    /// As [`new`](Self::new), reporting leadership to `metrics`.
    pub fn with_metrics(
        lock: LeaseLock,
        config: LeaderElectionConfig,
        metrics: Option<Arc<dyn LeaderMetrics>>,
    ) -> Result<Self, LeaderElectionError> {
        config.validate()?;
        Ok(Self {
            inner: Arc::new(Inner {
                lock,
                config,
                observed: Mutex::new(Observed::default()),
                status: watch::channel(LeaderStatus::default()).0,
                metrics,
                random: RandomState::new(),
                draws: AtomicU64::new(0),
            }),
        })
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        self.inner.lock.identity()
    }

    /// The election's timing.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.inner.config
    }

    /// The status now, and every change after (client-go's `OnStartedLeading`,
    /// `OnStoppedLeading` and `OnNewLeader`, as a stream of states).
    pub fn status(&self) -> watch::Receiver<LeaderStatus> {
        self.inner.status.subscribe()
    }

    /// Whether this candidate leads now.
    pub fn is_leader(&self) -> bool {
        self.inner.status.borrow().leading
    }

    fn observed(&self) -> MutexGuard<'_, Observed> {
        self.inner.observed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the lease as last observed names this candidate.
    fn holds_lease(&self) -> bool {
        self.observed().record.as_ref().is_some_and(|r| r.holder_identity == self.identity())
    }

    /// Campaigns until it leads, then leads until it loses the lease or `shutdown` completes.
    /// Returns `Ok` at shutdown (after releasing the lease, if leading and configured to) and
    /// [`LeaderElectionError::Lost`] when leadership was lost; the status says "not leading"
    /// before either returns. Run it again to campaign again.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<(), LeaderElectionError> {
        let span = tracing::info_span!(
            "leaderelection",
            lease = %self.inner.lock.describe(),
            identity = %self.identity(),
        );
        self.campaign(shutdown).instrument(span).await
    }

    async fn campaign(
        &self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), LeaderElectionError> {
        tokio::pin!(shutdown);
        let acquired = tokio::select! {
            _ = &mut shutdown => false,
            _ = self.acquire() => true,
        };
        if !acquired {
            return Ok(());
        }
        self.set_leading(true);
        tracing::info!("became leader");
        let ended = tokio::select! {
            _ = &mut shutdown => Ended::Shutdown,
            _ = self.renew() => Ended::Lost,
        };
        self.set_leading(false);
        match ended {
            Ended::Shutdown => {
                tracing::info!("stopped leading (shutdown)");
                if self.inner.config.release_on_cancel {
                    self.release().await;
                }
                Ok(())
            }
            Ended::Lost => {
                let err = LeaderElectionError::Lost {
                    lease: self.inner.lock.describe(),
                    identity: self.identity().to_owned(),
                };
                tracing::warn!(error = %err, "stopped leading");
                Err(err)
            }
        }
    }

    fn set_leading(&self, leading: bool) {
        self.inner.status.send_modify(|s| s.leading = leading);
        if let Some(metrics) = &self.inner.metrics {
            match leading {
                true => metrics.on(self.inner.lock.name()),
                false => metrics.off(self.inner.lock.name()),
            }
        }
    }

    /// Tries every jittered retry period until it holds the lease.
    async fn acquire(&self) {
        loop {
            if self.try_acquire_or_renew().await {
                return;
            }
            tokio::time::sleep(self.jittered(self.inner.config.retry_period)).await;
        }
    }

    /// Renews every retry period; returns when a round could not renew within the renew
    /// deadline (client-go's `renew`: `PollImmediateUntil` inside a deadline).
    async fn renew(&self) {
        let config = self.inner.config;
        loop {
            let deadline = Instant::now() + config.renew_deadline;
            let renewed = loop {
                // The attempt itself is cut at the deadline: a hung request must not keep a
                // leader leading past it.
                match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                    Ok(true) => break true,
                    Ok(false) => {}
                    Err(_) => break false,
                }
                let next = Instant::now() + config.retry_period;
                if next >= deadline {
                    tokio::time::sleep_until(deadline).await;
                    break false;
                }
                tokio::time::sleep_until(next).await;
            };
            if !renewed {
                return;
            }
            tokio::time::sleep(config.retry_period).await;
        }
    }

    /// `retry` stretched by up to 120% at random (client-go's `wait.Jitter`).
    fn jittered(&self, retry: Duration) -> Duration {
        let draw = self.inner.draws.fetch_add(1, Ordering::Relaxed);
        let fraction = (self.inner.random.hash_one(draw) % 10_000) as f64 / 10_000.0;
        retry + retry.mul_f64(fraction * JITTER_FACTOR)
    }

    /// client-go's `tryAcquireOrRenew`: one read and, if this candidate may hold the lease,
    /// one write.
    async fn try_acquire_or_renew(&self) -> bool {
        let config = self.inner.config;
        let now = MicroTime(Timestamp::now());
        let mut record = LeaderElectionRecord {
            holder_identity: self.identity().to_owned(),
            lease_duration_seconds: config.lease_duration.as_secs().try_into().unwrap_or(i32::MAX),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            leader_transitions: 0,
        };
        let lock = &self.inner.lock;
        let old = match lock.get().await {
            Ok(Some(old)) => old,
            Ok(None) => {
                return match lock.create(&record).await {
                    Ok(()) => {
                        self.observe(record);
                        true
                    }
                    Err(err) => {
                        tracing::debug!(%err, "creating the lease failed");
                        false
                    }
                };
            }
            Err(err) => {
                tracing::warn!(%err, "reading the lease failed");
                return false;
            }
        };
        self.saw(old.clone());
        let held_by_other = !old.holder_identity.is_empty() && !self.holds_lease();
        let fresh =
            self.observed().at.is_some_and(|at| at + config.lease_duration > Instant::now());
        if held_by_other && fresh {
            tracing::trace!(holder = %old.holder_identity, "the lease is held and has not expired");
            return false;
        }
        if self.holds_lease() {
            record.acquire_time = old.acquire_time;
            record.leader_transitions = old.leader_transitions;
        } else {
            record.leader_transitions = old.leader_transitions + 1;
        }
        match lock.update(&record).await {
            Ok(()) => {
                self.observe(record);
                true
            }
            Err(err) => {
                tracing::debug!(%err, "writing the lease failed");
                false
            }
        }
    }

    /// Records a record read from the server: its observation time restarts only if it
    /// changed, so that a lease nobody renews expires.
    fn saw(&self, record: LeaderElectionRecord) {
        {
            let mut observed = self.observed();
            if observed.record.as_ref() != Some(&record) {
                observed.record = Some(record);
                observed.at = Some(Instant::now());
            }
        }
        self.report_leader();
    }

    /// Records what this candidate wrote as what it observes now.
    fn observe(&self, record: LeaderElectionRecord) {
        {
            let mut observed = self.observed();
            observed.record = Some(record);
            observed.at = Some(Instant::now());
        }
        self.report_leader();
    }

    /// Publishes the holder as last seen, when it changed.
    fn report_leader(&self) {
        let holder = self
            .observed()
            .record
            .as_ref()
            .map(|r| r.holder_identity.clone())
            .filter(|h| !h.is_empty());
        self.inner.status.send_if_modified(|s| {
            let changed = s.leader != holder;
            if changed {
                tracing::info!(leader = holder.as_deref().unwrap_or("<none>"), "new leader");
                s.leader = holder;
            }
            changed
        });
    }

    /// client-go's `release`: an empty holder, so that a follower takes over at once.
    ///
    /// A renewal cut short by the shutdown may have been written without this candidate
    /// hearing back, leaving it with a stale resourceVersion: on a conflict it reads the
    /// Lease again and, if it still holds it, releases that version (client-go would leave
    /// the lease to expire instead).
    async fn release(&self) {
        for _ in 0..3 {
            if !self.holds_lease() {
                return;
            }
            let now = MicroTime(Timestamp::now());
            let transitions = self.observed().record.as_ref().map_or(0, |r| r.leader_transitions);
            let record = LeaderElectionRecord {
                holder_identity: String::new(),
                lease_duration_seconds: 1,
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                leader_transitions: transitions,
            };
            match self.inner.lock.update(&record).await {
                Ok(()) => {
                    self.observe(record);
                    tracing::info!("released the lease");
                    return;
                }
                Err(kube_client::Error::Api(s)) if s.code == 409 => {
                    match self.inner.lock.get().await {
                        Ok(Some(current)) => self.saw(current),
                        Ok(None) => return,
                        Err(err) => {
                            tracing::warn!(%err, "releasing the lease failed");
                            return;
                        }
                    }
                }
                Err(err) => {
                    tracing::warn!(%err, "releasing the lease failed");
                    return;
                }
            }
        }
    }
}

/// An identity unique to this process: the host's name and the process id (`web-1_4242`).
pub fn default_identity() -> String {
    let host = crate::host::hostname().unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}_{}", std::process::id())
}
