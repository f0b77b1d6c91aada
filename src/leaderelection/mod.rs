//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's algorithm, defaults
//! and Lease fields, so client-go and ctrlkit candidates can share one Lease.
//!
//! Contract:
//! - **At most one leader at every instant.** A leader that cannot renew within the renew
//!   deadline (10 s) stops leading; followers take over only after the lease went unchanged
//!   for the lease duration (15 s) as they observed it, so the old leader has stopped first.
//!   Writes carry the Lease's resourceVersion (optimistic concurrency): of two candidates that
//!   read one version, one wins.
//! - **Failover**: a leader that dies is replaced within the lease duration plus a jittered
//!   retry period (2 s, up to 4.4 s); one that stops on shutdown releases the lease (an empty
//!   holder), and a follower takes over at its next attempt.
//! - **Observable**: [`LeaderElector::status`] is a stream of [`LeaderStatus`] (leading or not,
//!   and the current leader), and [`LeaderMetrics`] hooks feed `leader_election_master_status`.
//!
//! A [`Manager`](crate::manager::Manager) given a [`LeaderElectionConfig`] and a Lease runs its
//! controllers only while it leads, keeping their caches warm while it follows.

mod elector;
mod lease_lock;

pub use elector::{
    JITTER_FACTOR, LeaderElectionConfig, LeaderElectionError, LeaderElector, LeaderMetrics,
    LeaderStatus, default_identity,
};
pub use lease_lock::{LeaderElectionRecord, LeaseLock};
