//! [`LeaderElector`]: client-go's `leaderelection.LeaderElector` over a [`LeaseLock`].

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use super::lease_lock::{LeaderElectionRecord, LeaseLock};
use crate::fence::Hold;
use crate::panic::observe;

/// client-go's jitter factor: a candidate waits between one and 2.2 retry periods between
/// attempts to acquire, so candidates spread out.
const JITTER_FACTOR: f64 = 1.2;

/// The timing of an election, client-go's `LeaderElectionConfig` defaults: lease duration
/// 15 s, renew deadline 10 s, retry period 2 s, and the lease released when the leader stops.
///
/// The lease duration is written on the Lease in whole seconds, rounded up
/// (`leaseDurationSeconds`), and followers wait out the duration the Lease says, whatever
/// their own configuration says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderElectionConfig {
    /// How long followers wait, from the last change they saw of the lease, before they take
    /// it over (written on the Lease, rounded up to whole seconds; followers honour what the
    /// Lease says).
    pub lease_duration: Duration,
    /// How long after sending its last successful renewal the leader goes on leading while
    /// it cannot renew. Shorter than the lease duration by more than a jittered retry
    /// period, so the leader stops before anyone may take over.
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
    /// Checks the rules: every duration positive, the lease duration at most 2^31 − 1 s (what
    /// a Lease's `leaseDurationSeconds` holds), renew deadline > 1.2 × retry period (as
    /// client-go), and renew deadline + 1.2 × retry period < lease duration. Any durations,
    /// up to `Duration::MAX`, get an answer: an error, never a panic.
    ///
    /// The last rule is deliberately stricter than client-go's (lease duration > renew
    /// deadline): a leader leads until the instant it sent its last successful renewal plus
    /// the renew deadline, while a follower may take over a lease duration after it saw that
    /// renewal, which is no earlier than the send. The gap between the two must hold the
    /// leader's stop: its timer firing late on a busy runtime, its work being aborted. A
    /// jittered retry period (client-go's `JitterFactor`, 1.2) is that margin: 15 s / 10 s /
    /// 2 s passes (10 + 2.4 < 15), 15 s / 13 s / 2 s does not, though client-go takes it.
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
        // A longer one would be written on the Lease shorter than meant (its
        // `leaseDurationSeconds` is an int32), and followers would take over too early.
        if self.lease_duration > MAX_LEASE_DURATION {
            return invalid(
                "the lease duration must be at most 2^31 - 1 seconds (an int32 on the Lease)",
            );
        }
        if self.lease_duration <= self.renew_deadline {
            return invalid("the lease duration must be greater than the renew deadline");
        }
        // Checked: a retry period near `Duration::MAX` overflows when jittered.
        let jittered_retry =
            Duration::try_from_secs_f64(self.retry_period.as_secs_f64() * JITTER_FACTOR)
                .unwrap_or(Duration::MAX);
        if self.renew_deadline <= jittered_retry {
            return invalid("the renew deadline must be greater than retry period × 1.2");
        }
        if self.renew_deadline.saturating_add(jittered_retry) >= self.lease_duration {
            return invalid(
                "the renew deadline plus retry period × 1.2 must be shorter than the lease \
                 duration, so that a leader that cannot renew has stopped before a follower \
                 may take over",
            );
        }
        Ok(())
    }
}

/// The longest lease duration a Lease can say: `leaseDurationSeconds` is an int32.
const MAX_LEASE_DURATION: Duration = Duration::from_secs(i32::MAX as u64);

/// Why an election could not run or ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaderElectionError {
    /// The configuration breaks the rules of [`LeaderElectionConfig::validate`].
    #[error("invalid leader election configuration: {0}")]
    InvalidConfig(String),
    /// The leader could not renew the lease within the renew deadline, or read it deleted or
    /// held by another, and stopped leading.
    #[error(
        "{identity} lost the lease {lease}: it could not renew it within the renew deadline, \
         or found it deleted or held by another"
    )]
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
/// A hook that panics is caught and logged, and costs only that observation. Every hook
/// does nothing by default: an exporter implements those it records, and a hook added later
/// breaks no implementor.
pub trait LeaderMetrics: Send + Sync {
    /// This process leads the election `name`.
    fn on(&self, name: &str) {
        let _ = name;
    }
    /// This process no longer leads the election `name`.
    fn off(&self, name: &str) {
        let _ = name;
    }
}

/// What this candidate last saw of the lease, and when (by its own clock: expiry is judged
/// from when a change was seen, never from the times written in the lease, so clock skew
/// between candidates does not matter).
#[derive(Default)]
struct Observed {
    record: Option<LeaderElectionRecord>,
    at: Option<Instant>,
    /// Since when the Lease has been absent after this candidate saw it held, and the lease
    /// duration it said then: its holder may lead until that much after, not knowing.
    vanished: Option<(Instant, Duration)>,
}

impl Observed {
    /// The Lease was read absent at `now`: whether this candidate may create it. One that
    /// never saw it held may (a first install); one that saw it held waits the lease
    /// duration the Lease last said from when it first read it absent, as it would have
    /// waited for the holder's last renewal to expire.
    fn may_create(&mut self, now: Instant, fallback: Duration) -> bool {
        if let Some(record) = self.record.take().filter(|r| !r.holder_identity.is_empty()) {
            let said = u64::try_from(record.lease_duration_seconds).ok().filter(|s| *s > 0);
            self.vanished = Some((now, said.map_or(fallback, Duration::from_secs)));
        }
        self.at = None;
        self.vanished.is_none_or(|(since, duration)| since + duration <= now)
    }

    /// Whether the lease as observed has not yet expired at `now`: it changed less than its
    /// own `leaseDurationSeconds` ago (the holder's promise), or `fallback` where it says none.
    fn fresh(&self, now: Instant, fallback: Duration) -> bool {
        let duration = self
            .record
            .as_ref()
            .and_then(|r| u64::try_from(r.lease_duration_seconds).ok())
            .filter(|s| *s > 0)
            .map_or(fallback, Duration::from_secs);
        self.at.is_some_and(|at| at + duration > now)
    }
}

/// `duration` in whole seconds, rounded up: what a Lease says, never less than is meant.
fn whole_seconds(duration: Duration) -> i32 {
    let seconds = duration.as_secs().saturating_add(u64::from(duration.subsec_nanos() > 0));
    seconds.try_into().unwrap_or(i32::MAX)
}

struct Inner {
    lock: LeaseLock,
    config: LeaderElectionConfig,
    observed: Mutex<Observed>,
    status: watch::Sender<LeaderStatus>,
    metrics: Option<Arc<dyn LeaderMetrics>>,
    random: RandomState,
    draws: AtomicU64,
    /// Until when this candidate leads, by its own clock: its last successful write's send
    /// time plus the renew deadline; `None` while it does not lead.
    hold: Hold,
}

/// Runs one candidate of a Lease-based election with client-go's algorithm:
///
/// - **Acquire**: every retry period (jittered by up to 120%), read the Lease; take it if it
///   does not exist, is empty (released), or has not changed for a lease duration as this
///   candidate observed it. Writes carry the Lease's resourceVersion, so of two candidates
///   only one can win a round.
/// - **Renew**: while leading, write a new renew time every retry period. The leader leads
///   until the instant it *sent* its last successful write plus the renew deadline; when no
///   renewal succeeds by then (requests are cut at that instant), leadership ends. Followers
///   take over only a lease duration (as the Lease says) after they saw that write, which
///   the server committed after it was sent, and [`LeaderElectionConfig::validate`] keeps a
///   jittered retry period between the two: at no instant do two candidates lead, however
///   late a reply is processed. A renewal that reads the Lease absent or held by another
///   ends the hold at once.
/// - **Deleted**: a candidate that saw the Lease held and then reads it absent waits the
///   lease duration the Lease last said before it creates it; one that never saw it held
///   creates it at once. Attempts to acquire are cut at the renew deadline.
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
    /// A candidate of the election on `lock`; fails if `config` breaks the rules of
    /// [`LeaderElectionConfig::validate`].
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
                hold: Hold::default(),
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

    /// Until when this candidate leads, by its own clock, as its renewals extend it: what a
    /// fence reads before work starts.
    pub(crate) fn hold(&self) -> Hold {
        self.inner.hold.clone()
    }

    fn observed(&self) -> MutexGuard<'_, Observed> {
        self.inner.observed.lock()
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
        if !leading {
            self.inner.hold.set(None);
        }
        self.inner.status.send_modify(|s| s.leading = leading);
        if let Some(metrics) = &self.inner.metrics {
            let name = self.inner.lock.name();
            match leading {
                true => observe("on", || metrics.on(name)),
                false => observe("off", || metrics.off(name)),
            }
        }
    }

    /// Tries every jittered retry period until it holds the lease; an attempt is cut after
    /// the renew deadline (as client-go's), so a hung request does not stop the campaign.
    async fn acquire(&self) {
        let deadline = self.inner.config.renew_deadline;
        loop {
            match tokio::time::timeout(deadline, self.try_acquire_or_renew()).await {
                Ok(true) => return,
                Ok(false) => {}
                Err(_) => tracing::warn!(?deadline, "an attempt to acquire the lease timed out"),
            }
            tokio::time::sleep(self.jittered(self.inner.config.retry_period)).await;
        }
    }

    /// Tries to renew every retry period; returns at the instant the hold ends: the send
    /// time of the last successful write plus the renew deadline (client-go measures its
    /// deadline from the start of a round, after the last reply was processed: a late reply
    /// would stretch the leadership past what followers allow).
    async fn renew(&self) {
        let retry = self.inner.config.retry_period;
        loop {
            let Some(deadline) = self.inner.hold.until() else { return };
            let next = Instant::now() + retry;
            if next >= deadline {
                tokio::time::sleep_until(deadline).await;
                // A renewal cannot have succeeded meanwhile: none was in flight.
                return;
            }
            tokio::time::sleep_until(next).await;
            // The attempt itself is cut at the deadline: a hung request must not keep a
            // leader leading past it. A success moves the deadline on.
            if tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await.is_err() {
                return;
            }
        }
    }

    /// `retry` stretched by up to 120% at random (client-go's `wait.Jitter`).
    fn jittered(&self, retry: Duration) -> Duration {
        let draw = self.inner.draws.fetch_add(1, Ordering::Relaxed);
        let fraction = (self.inner.random.hash_one(draw) % 10_000) as f64 / 10_000.0;
        retry + retry.mul_f64(fraction * JITTER_FACTOR)
    }

    /// client-go's `tryAcquireOrRenew`: one read and, if this candidate may hold the lease,
    /// one write. A write that succeeds holds the lease until the instant this attempt
    /// started plus the renew deadline (the write was sent after that instant, so every
    /// follower saw it later).
    async fn try_acquire_or_renew(&self) -> bool {
        let config = self.inner.config;
        let sent = Instant::now();
        let now = MicroTime(Timestamp::now());
        let mut record = LeaderElectionRecord {
            holder_identity: self.identity().to_owned(),
            lease_duration_seconds: whole_seconds(config.lease_duration),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            leader_transitions: 0,
        };
        let lock = &self.inner.lock;
        // A renewal: this candidate leads, and must stop at once if the Lease says otherwise.
        let renewing = self.inner.hold.until().is_some();
        let old = match lock.get().await {
            Ok(Some(old)) => old,
            Ok(None) => {
                let may_create = self.observed().may_create(Instant::now(), config.lease_duration);
                self.report_leader();
                if renewing {
                    // Deleted under the leader (a GitOps prune, say): a candidate that never
                    // saw it may create it at once, so this one stops leading now.
                    tracing::warn!("the lease was deleted while leading: stopping at once");
                    self.inner.hold.set(None);
                    return false;
                }
                if !may_create {
                    tracing::debug!(
                        "the lease was deleted: waiting out its holder's lease duration"
                    );
                    return false;
                }
                return match lock.create(&record).await {
                    Ok(()) => {
                        self.observe(record);
                        self.inner.hold.set(Some(sent + config.renew_deadline));
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
        if renewing && !self.holds_lease() {
            // Taken over (after a delete, or by a candidate that judged it expired) or
            // released by someone else: whoever holds it may lead now.
            tracing::warn!(holder = %old.holder_identity, "the lease is no longer ours: stopping at once");
            self.inner.hold.set(None);
            return false;
        }
        let fresh = self.observed().fresh(Instant::now(), config.lease_duration);
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
                self.inner.hold.set(Some(sent + config.renew_deadline));
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
            observed.vanished = None;
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
            observed.vanished = None;
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

/// An identity unique to this process, the same at every call: the host's name and a
/// random mark of 10 lowercase letters and digits drawn when the process first asks
/// (`web-1_k3x9q2m7zp`), as controller-runtime's `hostname_` + a UUID. Neither the host's
/// name (two replicas of a template with `spec.hostname` share it) nor the process id (1 in
/// every container) tells replicas apart alone.
pub fn default_identity() -> String {
    let host = crate::identity::hostname().unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}_{}", crate::identity::process_mark())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Durations from zero to `Duration::MAX`, the extremes often.
    fn any_duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            Just(Duration::ZERO),
            Just(Duration::MAX),
            (0..u64::MAX, 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
            (u64::MAX - 10..=u64::MAX, 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
            (0..100_000u64).prop_map(Duration::from_millis),
        ]
    }

    proptest! {
        /// Any durations get an answer, never a panic; and those taken fit what the elector
        /// computes from them (deadlines on the clock, the Lease's whole seconds).
        #[test]
        fn any_durations_are_answered_and_the_ones_taken_fit_the_clock(
            lease_duration in any_duration(),
            renew_deadline in any_duration(),
            retry_period in any_duration(),
        ) {
            let config = LeaderElectionConfig {
                lease_duration,
                renew_deadline,
                retry_period,
                release_on_cancel: true,
            };
            if config.validate().is_ok() {
                let now = Instant::now();
                let _ = now + lease_duration + renew_deadline + retry_period.mul_f64(2.2);
                let written = u64::try_from(whole_seconds(lease_duration)).unwrap();
                prop_assert!(Duration::from_secs(written) >= lease_duration);
            }
        }
    }

    #[test]
    fn durations_near_the_maximum_are_invalid_not_a_panic() {
        let max = LeaderElectionConfig {
            lease_duration: Duration::MAX,
            renew_deadline: Duration::MAX - Duration::from_secs(1),
            retry_period: Duration::MAX / 2,
            release_on_cancel: true,
        };
        assert!(matches!(max.validate(), Err(LeaderElectionError::InvalidConfig(_))));
        let long = LeaderElectionConfig {
            lease_duration: Duration::from_secs(1 << 40),
            renew_deadline: Duration::from_secs(1 << 39),
            ..LeaderElectionConfig::default()
        };
        let err = long.validate().unwrap_err();
        assert!(err.to_string().contains("2^31 - 1 seconds"), "{err}");
    }

    #[test]
    fn the_default_identity_is_the_host_and_a_mark_drawn_once_per_process() {
        let identity = default_identity();
        let (host, mark) = identity.rsplit_once('_').expect("host_mark");
        let expected_host =
            crate::identity::hostname().unwrap_or_else(|| "unknown-host".to_owned());
        assert_eq!(host, expected_host);
        // Not the process id (1 in every container): 10 random lowercase letters and digits.
        assert_eq!(mark.len(), 10, "{identity}");
        assert!(mark.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()), "{identity}");
        assert_ne!(mark, std::process::id().to_string());
        assert_eq!(default_identity(), identity, "the same at every call");
    }

    fn config(lease: u64, renew: u64, retry_millis: u64) -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_millis(retry_millis),
            release_on_cancel: true,
        }
    }

    #[test]
    fn timings_where_a_leader_may_lead_into_a_followers_take_over_are_refused() {
        assert_eq!(LeaderElectionConfig::default().validate(), Ok(()));
        assert_eq!(config(15, 12, 2000).validate(), Ok(()), "12 + 2.4 < 15");
        // client-go takes these: its leader may lead within a jittered retry period of the
        // instant a follower takes over.
        for (lease, renew, retry) in [(15, 13, 2000), (11, 10, 2000), (3, 2, 1000)] {
            let err = config(lease, renew, retry).validate().unwrap_err();
            assert!(err.to_string().contains("shorter than the lease duration"), "{err}");
        }
        assert!(config(15, 2, 2000).validate().is_err(), "renew deadline ≤ 1.2 retry periods");
        assert!(config(0, 10, 2000).validate().is_err());
    }

    #[test]
    fn a_lease_says_its_duration_in_whole_seconds_rounded_up() {
        assert_eq!(whole_seconds(Duration::from_secs(15)), 15);
        assert_eq!(whole_seconds(Duration::from_millis(1200)), 2);
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::MAX), i32::MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn an_observed_lease_expires_after_the_duration_it_says() {
        let now = Instant::now();
        let mut observed = Observed::default();
        assert!(!observed.fresh(now, Duration::from_secs(15)), "never seen");
        observed.at = Some(now);
        observed.record = Some(LeaderElectionRecord {
            lease_duration_seconds: 30,
            ..LeaderElectionRecord::default()
        });
        let own = Duration::from_secs(15);
        assert!(observed.fresh(now + Duration::from_secs(29), own), "the Lease's 30 s");
        assert!(!observed.fresh(now + Duration::from_secs(30), own));
        observed.record.as_mut().unwrap().lease_duration_seconds = 0;
        assert!(!observed.fresh(now + Duration::from_secs(15), own), "none said: our own");
    }
}
