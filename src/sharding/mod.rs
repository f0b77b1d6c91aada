//! Sharding: splitting one controller's objects among the replicas of a ring, so that N
//! replicas share the work instead of one leading while the rest wait.
//!
//! Built so far:
//! - membership: each replica holds a Lease of its own ([`ShardLease`]), and the ring's
//!   shards' states are told from their Leases ([`Members`]);
//! - assignment: [`HashRing`], consistent hashing over the ready shards with a documented,
//!   stable hash, so other tools can compute an object's shard.
//!
//! Not built yet: the sharder that labels objects, drained hand-offs, server-side shard
//! selectors and the `Manager` call; a `Manager` does not shard today (issue 25).

mod membership;
mod ring;
mod sharder;

pub use membership::{Members, RING_LABEL, Ring, ShardLease, ShardState};
pub use ring::{HashRing, VIRTUAL_NODES, fnv1a64, ring_hash, ring_key};
pub use sharder::{Sharder, drain_label, shard_label};
