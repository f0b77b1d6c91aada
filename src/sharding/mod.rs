//! Sharding: splitting one controller's objects among the replicas of a ring, so that N
//! replicas share the work instead of one leading while the rest wait.
//!
//! Built so far:
//! - membership: each replica holds a Lease of its own ([`ShardLease`]), and the ring's
//!   shards' states are told from their Leases ([`Members`]);
//! - assignment: [`HashRing`], consistent hashing over the ready shards with a documented,
//!   stable hash, so other tools can compute an object's shard; the [`Sharder`] labels every
//!   primary and owned object with its shard ([`shard_label`]);
//! - hand-offs without overlap: the sharder drains an object leaving a live shard
//!   ([`drain_label`]); a controller built with
//!   [`ControllerBuilder::shard`](crate::controller::ControllerBuilder::shard) caches only its
//!   shard's objects, gives up drained ones once their reconcile is done, and does not take a
//!   move for a delete. An object leaves a dead or expired shard at once.
//!
//! Not built yet (issue 25): the `Manager` call that wires a ring (its shard Lease, the
//! sharder on an elected replica, fencing of controllers on a lost Lease), metrics, the
//! example's `--shard`, server-side shard selectors. Run the parts by hand meanwhile: a
//! [`ShardLease`] and sharded controllers in each replica (stop the controllers before the
//! Lease, so a graceful stop hands over only finished work), and one [`Sharder`].
//! Namespaced kinds only.

mod membership;
mod ring;
mod sharder;

pub use membership::{Members, RING_LABEL, Ring, ShardLease, ShardState};
pub use ring::{HashRing, VIRTUAL_NODES, fnv1a64, ring_hash, ring_key};
pub use sharder::{Sharder, drain_label, shard_label};
