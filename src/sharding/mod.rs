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
//! - the [`Manager`](crate::manager::Manager) call:
//!   [`ManagerBuilder::sharding`](crate::manager::ManagerBuilder::sharding) holds the
//!   replica's shard Lease, shards the controllers of `manager.controller(api)`, runs them on
//!   every member once the Lease is held, stops the manager when the Lease is lost (fencing)
//!   and releases the Lease only after the controllers stopped; the [`Sharder`] is a runnable,
//!   on the leader alone under leader election:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use ctrlkit::cache::ObjectKey;
//! # use ctrlkit::controller::{Action, Reconciler};
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # struct Printer;
//! # #[async_trait::async_trait]
//! # impl Reconciler for Printer {
//! #     type Object = ConfigMap;
//! #     type Error = std::convert::Infallible;
//! #     async fn reconcile(&self, _: &ObjectKey, _: Option<Arc<ConfigMap>>) -> Result<Action, Self::Error> { Ok(Action::done()) }
//! # }
//! # async fn demo(client: kube_client::Client, pod_name: &str) -> Result<(), ctrlkit::manager::ManagerError> {
//! use ctrlkit::leaderelection::{LeaderElectionConfig, LeaseLock};
//! use ctrlkit::manager::Manager;
//! use ctrlkit::sharding::{Ring, Sharder};
//! use kube_client::Api;
//!
//! let ring = Ring::new("configmaps").namespace("operators");
//! let lock = LeaseLock::new(client.clone(), "operators", "configmaps-sharder", pod_name);
//! let mut manager = Manager::builder(client.clone())
//!     .leader_election(lock, LeaderElectionConfig::default())
//!     .sharding(ring.clone(), pod_name)
//!     .build();
//! manager.add(Sharder::<ConfigMap>::new(client.clone(), ring, Some("default")));
//! let controller = manager.controller(Api::<ConfigMap>::namespaced(client, "default"));
//! manager.add_controller(controller, Printer);
//! manager.run().await
//! # }
//! ```
//!
//! `examples/configmap_sets.rs --shard` is a whole sharded operator (three processes of it on
//! one server share the sets and outlive a SIGKILL: the e2e case
//! `example::three_sharded_operator_replicas_share_the_sets_and_outlive_a_kill`, on the
//! embedded server and both real ones). [`default_shard_id`] names a process's shard.
//!
//! The sharder reports its ring ([`ShardingMetrics`]: objects per shard, members by state,
//! assignments by reason, drains; [`Sharder::metrics`]), and a sharded manager's `/readyz`
//! says whether it holds its shard Lease (`shard-lease`).
//!
//! Not built yet (issue 25): the ring's label-free mode over server-side shard selectors (the
//! embedded server serves them, as 1.36 does with `ShardedListAndWatch` on; the ring does not
//! use them yet: label mode only); the bench. Namespaced kinds only;
//! owned objects must be owned by the primary kind.

mod membership;
mod metrics;
pub(crate) mod range_member;
mod ranges;
mod ring;
mod sharder;

pub use membership::{
    Assignment, Members, RING_LABEL, Ring, ShardLease, ShardState, default_shard_id,
    view_annotation,
};
pub use metrics::{AssignReason, ShardingMetrics};
pub use ranges::{HASH_SPACE_END, HashRanges};
pub use ring::{HashRing, VIRTUAL_NODES, fnv1a64, ring_hash, ring_key};
pub use sharder::{Sharder, drain_label, shard_label};
