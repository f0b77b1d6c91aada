//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's algorithm, defaults
//! and Lease fields, so client-go and ctrlkit candidates can share one Lease.
//!
//! Contract:
//! - **At most one leader at every instant.** A leader leads until the instant it *sent* its
//!   last successful renewal plus the renew deadline (10 s), by its own monotonic clock;
//!   followers take over only after the Lease went unchanged, as they observed it, for the
//!   lease duration the Lease says (`leaseDurationSeconds`, 15 s), and they observed the
//!   renewal after it was sent. [`LeaderElectionConfig::validate`] keeps a jittered retry
//!   period between the two (stricter than client-go), so the old leader has stopped first
//!   however late the reply to its renewal came. Writes carry the Lease's resourceVersion
//!   (optimistic concurrency): of two candidates that read one version, one wins.
//! - **A Lease deleted or taken ends the hold at once.** A renewal that reads the Lease absent
//!   (`kubectl delete lease`, a GitOps prune) or held by another identity ends leadership
//!   there. A candidate that has seen the Lease held waits the lease duration it last said
//!   after it first reads it absent before it creates it, as it would have waited for the
//!   holder's last renewal; one that never saw it (a first install) creates it at once. That
//!   one may lead beside the old leader until the old leader's next renewal reads the Lease:
//!   up to a retry period and one request, as with client-go; candidates that ran all along
//!   never overlap. Shard Leases use the same elector.
//! - **Unique identities**: [`default_identity`] is the host's name and a random mark of the
//!   process (`web-0_k3x9q2m7zp`): replicas that share a host name and a process id (pid 1 in
//!   every container) are still told apart.
//! - **Failover**: a leader that dies is replaced within the lease duration plus a jittered
//!   retry period (2 s, up to 4.4 s); one that stops on shutdown releases the lease (an empty
//!   holder), and a follower takes over at its next attempt.
//! - **Observable**: [`LeaderElector::status`] is a stream of [`LeaderStatus`] (leading or not,
//!   and the current leader), and [`LeaderMetrics`] hooks feed `leader_election_master_status`.
//!
//! A [`Manager`](crate::manager::Manager) given a [`LeaderElectionConfig`] and a Lease runs its
//! controllers only while it leads, keeping their caches warm while it follows. **No reconcile
//! starts while the replica does not hold the Lease**: before each one, a controller checks by
//! the replica's own clock that the leader's hold has not ended
//! ([`Stop::is_fenced`](crate::runnable::Stop::is_fenced)), and the manager stops every
//! runnable at once when the election ends in a loss.
//!
//! # What a pause can and cannot do
//!
//! A process stopped past its lease duration (SIGSTOP, a frozen VM, a long pause of the
//! runtime) and then resumed finds its hold ended at its first look, whatever order its tasks
//! resume in: it starts no reconcile, and its manager stops. What it cannot undo is a
//! reconcile that was already running when the pause began: that reconcile resumes in the
//! middle, and its next write may come after another replica took over. Such a reconcile is
//! reported (an error in the log, [`ControllerStats::outlived_lease`](crate::controller::ControllerStats::outlived_lease)),
//! and its writes are safe only if they carry the resourceVersion they read (an update, or a
//! patch with `metadata.resourceVersion`): the server then refuses a stale one with 409. A
//! write without that precondition (a merge patch without it, a forced apply, a create of a
//! child) can land after the other replica's. The clock is tokio's, the process's monotonic
//! clock: a pause it does not count (a machine suspended whole, on some hypervisors a paused
//! VM) cannot be seen.

mod elector;
mod lease_lock;

pub use elector::{
    LeaderElectionConfig, LeaderElectionError, LeaderElector, LeaderMetrics, LeaderStatus,
    default_identity,
};
pub use lease_lock::LeaseLock;
