//! Sharding: splitting one controller's objects among the replicas of a ring, so that N
//! replicas share the work instead of one leading while the rest wait.
//!
//! - membership: each replica holds a Lease of its own ([`ShardLease`]), and the ring's
//!   shards' states (ready, expired, dead) are told from their Leases;
//! - assignment: [`HashRing`], consistent hashing over the ready shards with a documented,
//!   stable hash, so other tools can compute an object's shard. How objects reach their shard
//!   is the ring's [`Assignment`]:
//!   - [`Assignment::Labels`] (the default, every server): the [`Sharder`] labels every
//!     primary and owned object with its shard ([`shard_label`]); a controller built with
//!     [`ControllerBuilder::shard`](crate::controller::ControllerBuilder::shard) caches only
//!     its shard's label. Hand-offs without overlap: the sharder drains an object leaving a
//!     live shard ([`drain_label`]), the shard gives it up once its reconcile is done, and a
//!     move is not taken for a delete. An object leaves a dead or expired shard at once;
//!   - [`Assignment::ShardSelectors`] (Kubernetes 1.36 with `ShardedListAndWatch`): no
//!     sharder, no labels. Each shard lists and watches its [`HashRing::hash_ranges`] of the
//!     objects' uids with a server-side shard selector ([`HashRanges::selector`]), says on its
//!     Lease which ring it serves ([`view_annotation`]), and takes a range only once every
//!     live shard that held part of it said it gave it up, after its reconciles there ended.
//!     After each change of the Leases a shard gives up the ranges no longer its own and waits
//!     for their reconciles, writes the ring on its Lease, then reads the Leases from the
//!     server (a quorum list) and takes what no live shard's written ring still gives
//!     another; a shard whose Lease expired or was released claims nothing (fenced, it has
//!     stopped). A server that ignores the parameter (1.20)
//!     sends every object to every shard: reconciles stay split, caches do not (a warning
//!     says so at start);
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
//! manager.controller(Api::<ConfigMap>::namespaced(client, "default")).complete(Printer)?;
//! manager.run().await
//! # }
//! ```
//!
//! `examples/configmap_sets/ --shard` is a whole sharded operator (three processes of it on
//! one server share the sets and outlive a SIGKILL: the e2e case
//! `example::three_sharded_operator_replicas_share_the_sets_and_outlive_a_kill`, on the
//! embedded server and both real ones). [`default_shard_id`] names a process's shard.
//!
//! The sharder reports its ring ([`ShardingMetrics`]: objects per shard, members by state,
//! assignments by reason, drains; [`Sharder::metrics`]), and a sharded manager's `/readyz`
//! says whether it holds its shard Lease (`shard-lease`).
//!
//! A ring of shard selectors is a builder call away:
//!
//! ```no_run
//! # async fn demo(client: kube_client::Client) {
//! use ctrlkit::sharding::{Assignment, Ring};
//! let ring = Ring::new("configmaps").namespace("operators").assignment(Assignment::ShardSelectors);
//! let manager = ctrlkit::manager::Manager::builder(client).sharding(ring, "web-1").build();
//! // No Sharder: controllers from `manager.controller(api)` list and watch their ranges.
//! # let _ = manager;
//! # }
//! ```
//!
//! # Guarantees
//!
//! - **No key is reconciled by two replicas at once**: a shard starts a reconcile only while
//!   it holds its shard Lease by its own clock (until its last renewal's send time plus the
//!   renew deadline; see [`crate::leaderelection`]) and, in a ring of labels, the object it
//!   read is labelled to it; in a ring of shard selectors, its place is in the ranges the
//!   shard holds, which no other live shard's acknowledged ring gives to that shard. Each
//!   shard judges the others' Leases by when it read them, at the instant it read them.
//! - **A hung reconcile cannot hold a hand-off forever**: in a ring of shard selectors a
//!   give-up waits for the reconciles in the ranges it gives up at most the ring's
//!   [hand-off timeout](Ring::hand_off_timeout) (2 minutes); past it the shard fences itself
//!   as when it loses its Lease (its reconciles aborted, its manager stopped, its Lease
//!   released), and its ranges move. In a ring of labels a hung reconcile holds up its own
//!   object's drain alone.
//! - **Unique shard ids**: [`default_shard_id`] is the host's name and a random mark of the
//!   process, a valid label value and Lease name for any host name.
//!
//! These are what the chaos harness (`tests/support/chaos.rs`) checks against the Leases'
//! records, with replicas killed, stopped, joined, frozen past their lease duration and cut
//! off, in both assignments and under plain leader election.
//!
//! # Limits
//!
//! Namespaced kinds only; owned objects must be owned by the primary kind, and in a ring of
//! shard selectors they are not split (their uids are not their owner's: each shard caches
//! all of them); an object needs its name before it has a shard (`generateName` is resolved
//! by the server on create, so the sharder and the selectors see the name); a lost Lease
//! stops the whole manager at once (its reconciles in flight are dropped), as
//! controller-runtime exits on a lost election. A reconcile running when its process froze
//! past the lease duration resumes in the middle after another shard may have taken its key
//! over: it is reported, and only its writes that carry the resourceVersion they read are
//! safe (see "What a pause can and cannot do" in [`crate::leaderelection`]).

mod membership;
mod metrics;
pub(crate) mod range_member;
mod ranges;
mod ring;
mod sharder;

pub use membership::{
    Assignment, RING_LABEL, Ring, ShardLease, default_shard_id, drain_label, shard_label,
    view_annotation,
};
pub use metrics::{AssignReason, ShardingMetrics};
pub use ranges::{HASH_SPACE_END, HashRanges};
pub use ring::{HashRing, VIRTUAL_NODES, fnv1a64, ring_hash, ring_key};
pub use sharder::Sharder;
