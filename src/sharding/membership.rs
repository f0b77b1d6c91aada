//! Membership of a ring: each replica holds a Lease of its own ([`ShardLease`]), and anyone
//! who reads the ring's Leases tells its shards' states from them ([`Members`]).
//!
//! A shard's Lease is named by the shard id and held by it (`holderIdentity` = the id),
//! labelled [`RING_LABEL`]` = <ring>`, in the ring's namespace. It is acquired, renewed and
//! released as a leader election's Lease is (the same [`LeaderElector`]), with the same
//! fencing: a replica that cannot renew within its renew deadline stops being a member
//! (its [`status`](ShardLease::status) says so) before its Lease can expire for anyone else.
//!
//! States, as whoever reads the Leases observes them (by the time it last saw the Lease
//! change, never by the writer's clock, so clock skew does not matter):
//! - [`ShardState::Ready`]: held, and changed within its lease duration;
//! - [`ShardState::Expired`]: held, unchanged for a lease duration: its holder has stopped
//!   (fencing), though it may come back by renewing;
//! - [`ShardState::Dead`]: released (an empty holder, a graceful stop), or unchanged for two
//!   lease durations. A dead shard's Lease may be deleted ([`Members::to_delete`]) once it has
//!   been dead for another lease duration.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube_client::api::{DeleteParams, Preconditions};
use kube_client::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::leaderelection::{
    LeaderElectionConfig, LeaderElectionError, LeaderElector, LeaderStatus, LeaseLock,
};

/// The label holding an object's shard in `ring`: `shard.ctrlkit.dev/<ring>`.
pub fn shard_label(ring: &str) -> String {
    format!("shard.ctrlkit.dev/{ring}")
}

/// The label asking an object's shard in `ring` to give it up: `drain.shard.ctrlkit.dev/<ring>`.
pub fn drain_label(ring: &str) -> String {
    format!("drain.shard.ctrlkit.dev/{ring}")
}

/// The label naming the ring a shard Lease belongs to.
pub const RING_LABEL: &str = "shard.ctrlkit.dev/ring";

/// How a ring's objects are assigned to its shards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Assignment {
    /// The [`Sharder`](super::Sharder) labels each object with its shard, by the ring's
    /// choice for its [`ring_key`](super::ring_key); each shard's informers select its
    /// label, and objects leave a live shard by draining. Works on every server.
    #[default]
    Labels,
    /// No labels and no sharder: each shard lists and watches the ranges of the ring it
    /// holds with a server-side shard selector (Kubernetes 1.36's `shardSelector`, alpha
    /// behind the `ShardedListAndWatch` gate), an object's place on the ring being
    /// [`fnv1a64`](super::fnv1a64) of its uid. A range changes hands only once every replica
    /// that held part of it says, on its Lease, that it gave the range up; see
    /// [`crate::sharding`]. Owned objects are not split (each shard caches all of them).
    ShardSelectors,
}

/// How long, by default, a shard of a ring of shard selectors waits for the reconciles in
/// the ranges it gives up before it fences itself; see [`Ring::hand_off_timeout`].
const HAND_OFF_TIMEOUT: Duration = Duration::from_secs(120);

/// A ring: its name, the namespace of its Leases, their timing, and how objects are assigned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    name: String,
    namespace: String,
    lease: LeaderElectionConfig,
    assignment: Assignment,
    hand_off_timeout: Duration,
}

impl Ring {
    /// The ring `name` (a label value: 63 characters at most), its Leases in `default`, with
    /// leader election's default timing (15 s lease, 10 s renew deadline, 2 s retry period).
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            namespace: "default".to_owned(),
            lease: LeaderElectionConfig::default(),
            assignment: Assignment::Labels,
            hand_off_timeout: HAND_OFF_TIMEOUT,
        }
    }

    /// In a ring of [`Assignment::ShardSelectors`], how long a shard that gives ranges up
    /// waits for its reconciles there to end (default 2 minutes). Until they end, those
    /// ranges are reconciled by nobody; past it, the shard fences itself as when it loses
    /// its Lease: its controller aborts its reconciles and stops with
    /// [`ControllerError::HandOffTimeout`](crate::controller::ControllerError::HandOffTimeout),
    /// and a [`Manager`](crate::manager::Manager) stops at once and releases the shard's
    /// Lease, so that the ranges move. It never releases a range while a reconcile of it
    /// may still run (an aborted reconcile is dropped at its next await; one that blocks its
    /// thread cannot be stopped by any async runtime, and then nothing is released). Raise
    /// it for reconciles that legitimately run longer, or bound them with a
    /// [reconcile timeout](crate::controller::Config::reconcile_timeout) below it.
    #[must_use]
    pub fn hand_off_timeout(mut self, timeout: Duration) -> Self {
        self.hand_off_timeout = timeout;
        self
    }

    /// How long a hand-off waits before the shard fences itself; see
    /// [`hand_off_timeout`](Self::hand_off_timeout).
    pub fn hand_off(&self) -> Duration {
        self.hand_off_timeout
    }

    /// Assigns objects as `assignment` says ([`Assignment::Labels`] by default).
    #[must_use]
    pub fn assignment(mut self, assignment: Assignment) -> Self {
        self.assignment = assignment;
        self
    }

    /// How objects are assigned.
    pub fn assignment_mode(&self) -> Assignment {
        self.assignment
    }

    /// Keeps the ring's Leases in `namespace` (the operator's own, usually).
    #[must_use]
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = namespace.to_owned();
        self
    }

    /// The timing of the shards' Leases.
    #[must_use]
    pub fn lease_config(mut self, config: LeaderElectionConfig) -> Self {
        self.lease = config;
        self
    }

    /// The ring's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace of its Leases.
    pub fn lease_namespace(&self) -> &str {
        &self.namespace
    }

    /// The timing of its Leases.
    pub fn lease(&self) -> &LeaderElectionConfig {
        &self.lease
    }

    /// The label selector of the objects the sharder assigned to `shard`:
    /// `shard.ctrlkit.dev/<ring>=<shard>` (what a sharded controller's informers select).
    pub fn shard_selector(&self, shard: &str) -> String {
        format!("{}={shard}", shard_label(&self.name))
    }

    /// The label selector of its shard Leases: `shard.ctrlkit.dev/ring=<name>`.
    pub fn lease_selector(&self) -> String {
        format!("{RING_LABEL}={}", self.name)
    }
}

/// The annotation on a shard's Lease by which, in a ring of [`Assignment::ShardSelectors`],
/// the controller `<controller>` of the shard says which ring it serves:
/// `view.shard.ctrlkit.dev/<controller>` = the ring's members, sorted, comma-separated. The
/// shard reconciles objects of that controller only in its ranges of that ring.
pub fn view_annotation(controller: &str) -> String {
    format!("view.shard.ctrlkit.dev/{controller}")
}

/// Deletes the Lease of a dead shard, on the condition that it is still the one read (a
/// shard that came back meanwhile keeps its Lease).
pub(crate) async fn delete_dead_lease(client: &Client, ring: &Ring, lease: &Lease) {
    let api: Api<Lease> = Api::namespaced(client.clone(), ring.lease_namespace());
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: lease.resource_version(),
            uid: lease.uid(),
        }),
        ..DeleteParams::default()
    };
    let name = lease.name_any();
    match api.delete(&name, &params).await {
        Ok(_) => tracing::info!(shard = %name, "deleted the Lease of a dead shard"),
        Err(kube_client::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
        Err(err) => tracing::warn!(%err, shard = %name, "deleting a dead shard's Lease failed"),
    }
}

/// One replica's membership of a ring: the Lease of its shard; see the module docs.
#[derive(Debug, Clone)]
pub struct ShardLease {
    elector: LeaderElector,
    shard: String,
}

impl ShardLease {
    /// The Lease of shard `shard` (unique in the ring, a valid object name and label value: a
    /// pod's name, or [`default_shard_id`]) of `ring`.
    /// Fails if the ring's lease timing breaks the rules of
    /// [`LeaderElectionConfig::validate`].
    pub fn new(client: Client, ring: &Ring, shard: &str) -> Result<Self, LeaderElectionError> {
        let labels = BTreeMap::from([(RING_LABEL.to_owned(), ring.name.clone())]);
        let lock = LeaseLock::new(client, &ring.namespace, shard, shard).labels(labels);
        Ok(Self { elector: LeaderElector::new(lock, ring.lease)?, shard: shard.to_owned() })
    }

    /// The shard's id.
    pub fn shard(&self) -> &str {
        &self.shard
    }

    /// Whether it is a member now (holds its Lease), and every change after: `leading` is
    /// membership.
    pub fn status(&self) -> watch::Receiver<LeaderStatus> {
        self.elector.status()
    }

    /// Whether it holds its Lease now.
    pub fn is_member(&self) -> bool {
        self.elector.is_leader()
    }

    /// The election on its Lease (a shard is the one candidate of its own Lease).
    pub(crate) fn elector(&self) -> &LeaderElector {
        &self.elector
    }

    /// Acquires the Lease, then renews it until `shutdown` completes (then releases it, so
    /// the shard is dead at once for the others) or until a renewal misses its deadline
    /// ([`LeaderElectionError::Lost`]).
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<(), LeaderElectionError> {
        self.elector.run(shutdown).await
    }
}

/// A shard id unique to this process, the same at every call, valid as a Lease name and a
/// label value (at most 63 characters) whatever the host's name: the host's name lowercased,
/// every character other than a letter or a digit made a `-`, cut to 52 characters, then `-`
/// and the random mark [`default_identity`](crate::leaderelection::default_identity) ends with
/// (`web-1-k3x9q2m7zp`).
pub fn default_shard_id() -> String {
    let host = crate::identity::hostname().unwrap_or_default();
    crate::identity::shard_id(&host, crate::identity::process_mark())
}

/// A shard's state, as its Lease was observed; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShardState {
    /// Held and renewed: objects may be assigned to it.
    Ready,
    /// Held but not renewed for a lease duration: its holder has stopped reconciling.
    Expired,
    /// Released, or not renewed for two lease durations.
    Dead,
}

/// What was last seen of one shard's Lease.
#[derive(Debug, Clone)]
struct Seen {
    /// The Lease's spec as last seen: a change restarts `since`.
    spec: Option<k8s_openapi::api::coordination::v1::LeaseSpec>,
    /// When it was last seen to change.
    since: Instant,
    /// Its lease duration, from the Lease (the ring's when unset).
    duration: Duration,
}

impl Seen {
    fn released(&self) -> bool {
        self.spec.as_ref().and_then(|s| s.holder_identity.as_deref()).unwrap_or_default().is_empty()
    }
}

/// The shards of a ring as observed from their Leases; see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct Members {
    default_duration: Duration,
    seen: HashMap<String, Seen>,
}

impl Members {
    /// No shard seen yet, for `ring`.
    pub fn new(ring: &Ring) -> Self {
        Self { default_duration: ring.lease.lease_duration, seen: HashMap::new() }
    }

    /// Records a shard Lease as read at `now`; a Lease unchanged since the last read keeps
    /// its time, so one nobody renews expires.
    pub fn observe(&mut self, lease: &Lease, now: Instant) {
        let Some(name) = lease.metadata.name.clone() else { return };
        let duration = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .filter(|s| *s > 0)
            .map_or(self.default_duration, Duration::from_secs);
        let changed = self.seen.get(&name).is_none_or(|seen| seen.spec != lease.spec);
        if changed {
            self.seen.insert(name, Seen { spec: lease.spec.clone(), since: now, duration });
        }
    }

    /// Every shard seen, in no order.
    pub fn shards(&self) -> impl Iterator<Item = &String> {
        self.seen.keys()
    }

    /// Forgets a shard whose Lease was deleted.
    pub fn forget(&mut self, shard: &str) {
        self.seen.remove(shard);
    }

    /// The state of `shard` at `now`; `None` if its Lease was never seen.
    pub fn state(&self, shard: &str, now: Instant) -> Option<ShardState> {
        let seen = self.seen.get(shard)?;
        let quiet = now.saturating_duration_since(seen.since);
        Some(if seen.released() || quiet >= seen.duration * 2 {
            ShardState::Dead
        } else if quiet >= seen.duration {
            ShardState::Expired
        } else {
            ShardState::Ready
        })
    }

    /// The ready shards at `now`, sorted.
    pub fn ready(&self, now: Instant) -> Vec<String> {
        let mut ready: Vec<String> = self
            .seen
            .keys()
            .filter(|s| self.state(s, now) == Some(ShardState::Ready))
            .cloned()
            .collect();
        ready.sort();
        ready
    }

    /// Shards dead for a lease duration more (three without a renewal, or one after their
    /// release), whose Leases can go.
    pub fn to_delete(&self, now: Instant) -> Vec<String> {
        let mut gone: Vec<String> = self
            .seen
            .iter()
            .filter(|(_, seen)| {
                let quiet = now.saturating_duration_since(seen.since);
                match seen.released() {
                    true => quiet >= seen.duration,
                    false => quiet >= seen.duration * 3,
                }
            })
            .map(|(shard, _)| shard.clone())
            .collect();
        gone.sort();
        gone
    }

    /// When the next state change due to time alone happens, if any: when to look again.
    pub fn next_change(&self, now: Instant) -> Option<Instant> {
        self.seen
            .values()
            .flat_map(|seen| {
                let steps: &[u32] = if seen.released() { &[1] } else { &[1, 2, 3] };
                steps.iter().map(move |n| seen.since + seen.duration * *n)
            })
            .filter(|at| *at > now)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use k8s_openapi::jiff::Timestamp;
    use kube_client::api::ListParams;
    use tokio::sync::oneshot;

    use super::*;

    fn lease(name: &str, holder: &str, renewed: i64) -> Lease {
        Lease {
            metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(10),
                renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
                ..LeaseSpec::default()
            }),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_shard_is_ready_while_renewed_then_expired_then_dead_and_then_deletable() {
        let ring = Ring::new("sets");
        let mut members = Members::new(&ring);
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        members.observe(&lease("a", "a", 100), at(0));
        members.observe(&lease("b", "b", 100), at(0));
        assert_eq!(members.ready(at(9)), ["a", "b"]);
        // b renews; a does not: reading the same Lease again keeps its time.
        members.observe(&lease("a", "a", 100), at(9));
        members.observe(&lease("b", "b", 109), at(9));
        assert_eq!(members.state("a", at(10)), Some(ShardState::Expired));
        assert_eq!(members.ready(at(10)), ["b"]);
        assert_eq!(members.next_change(at(10)), Some(at(19)), "b expires next");
        assert_eq!(members.state("a", at(20)), Some(ShardState::Dead));
        assert!(members.to_delete(at(29)).is_empty());
        assert_eq!(members.to_delete(at(30)), ["a"]);
        // A shard that renews again is ready again.
        members.observe(&lease("a", "a", 130), at(30));
        assert_eq!(members.state("a", at(30)), Some(ShardState::Ready));
        assert_eq!(members.state("never", at(30)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_shard_is_dead_at_once_and_its_lease_deletable_a_duration_later() {
        let mut members = Members::new(&Ring::new("sets"));
        let now = Instant::now();
        members.observe(&lease("a", "a", 100), now);
        members.observe(&lease("a", "", 101), now + Duration::from_secs(1));
        assert_eq!(members.state("a", now + Duration::from_secs(1)), Some(ShardState::Dead));
        assert!(members.ready(now + Duration::from_secs(1)).is_empty());
        assert_eq!(members.to_delete(now + Duration::from_secs(11)), ["a"]);
        members.forget("a");
        assert_eq!(members.state("a", now), None);
    }

    /// A ring with fast Leases, as `tests/controller/sharding.rs` has.
    fn fast_ring() -> Ring {
        Ring::new("sets").lease_config(LeaderElectionConfig {
            lease_duration: Duration::from_millis(1200),
            renew_deadline: Duration::from_millis(800),
            retry_period: Duration::from_millis(200),
            ..LeaderElectionConfig::default()
        })
    }

    async fn eventually(what: &str, check: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !check() {
            assert!(Instant::now() < deadline, "timed out waiting for: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The ring's Leases as the server has them, observed into `members` now.
    async fn observe(leases: &Api<Lease>, ring: &Ring, members: &mut Members) -> Vec<Lease> {
        let listed =
            leases.list(&ListParams::default().labels(&ring.lease_selector())).await.unwrap();
        for lease in &listed.items {
            members.observe(lease, Instant::now());
        }
        listed.items
    }

    #[tokio::test]
    async fn each_replica_holds_a_labelled_lease_released_on_stop_and_left_to_expire_when_dropped()
    {
        let server = ctrlkit_apiserver::ApiServer::start().await.unwrap();
        let ring = fast_ring();
        let leases: Api<Lease> = Api::namespaced(server.client(), "default");
        let mut stops = Vec::new();
        let mut runs = Vec::new();
        let mut shards = Vec::new();
        for id in ["shard-a", "shard-b", "shard-c"] {
            let shard = ShardLease::new(server.client(), &ring, id).unwrap();
            let (stop, stopped) = oneshot::channel::<()>();
            let running = shard.clone();
            runs.push(tokio::spawn(async move {
                running
                    .run(async {
                        let _ = stopped.await;
                    })
                    .await
            }));
            stops.push(stop);
            shards.push(shard);
        }
        eventually("three members", || shards.iter().all(ShardLease::is_member)).await;

        let mut members = Members::new(&ring);
        let listed = observe(&leases, &ring, &mut members).await;
        let mut holders: Vec<(String, String)> = listed
            .iter()
            .map(|l| {
                assert_eq!(l.metadata.labels.as_ref().unwrap()[RING_LABEL], "sets");
                let holder = l.spec.as_ref().and_then(|s| s.holder_identity.clone());
                (l.metadata.name.clone().unwrap(), holder.unwrap_or_default())
            })
            .collect();
        holders.sort();
        assert_eq!(
            holders,
            [("shard-a", "shard-a"), ("shard-b", "shard-b"), ("shard-c", "shard-c")]
                .map(|(n, h)| (n.to_owned(), h.to_owned()))
        );
        assert_eq!(members.ready(Instant::now()), ["shard-a", "shard-b", "shard-c"]);

        // A graceful stop releases the Lease: dead at once.
        let mut stops = stops.into_iter();
        let _ = stops.next().unwrap().send(());
        let mut runs = runs.into_iter();
        runs.next().unwrap().await.unwrap().expect("a graceful stop");
        assert!(!shards[0].is_member());
        observe(&leases, &ring, &mut members).await;
        assert_eq!(members.state("shard-a", Instant::now()), Some(ShardState::Dead));
        assert_eq!(members.ready(Instant::now()), ["shard-b", "shard-c"]);

        // A replica dropped without a release: its Lease stops changing and expires.
        runs.next().unwrap().abort();
        let dropped_at = Instant::now();
        loop {
            observe(&leases, &ring, &mut members).await;
            if members.state("shard-b", Instant::now()) == Some(ShardState::Expired) {
                break;
            }
            assert!(dropped_at.elapsed() < Duration::from_secs(10), "shard-b never expired");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A lease duration after its last renewal, which came at most a retry period before the
        // drop.
        let earliest = ring.lease().lease_duration - ring.lease().retry_period;
        assert!(dropped_at.elapsed() >= earliest, "too soon: {:?}", dropped_at.elapsed());
        assert_eq!(members.ready(Instant::now()), ["shard-c"], "shard-c renews all along");
    }
}
