//! Informer, indexer, factory, controller and manager against the embedded API server,
//! through kube-client.
//!
//! These tests talk HTTP to a server in the same process, so they run on the real clock
//! (a paused clock would jump ahead while requests are in flight); backoffs and rate limits
//! are set to milliseconds so the suite stays fast.

mod bad_input;
#[cfg(feature = "webhook")]
mod ca_bundles;
#[cfg(feature = "webhook")]
mod ca_rotation;
mod common;
mod compact;
mod conditions;
mod context;
mod controller;
mod depth;
mod events;
mod factory;
mod guards;
mod handle;
mod indexer;
mod informer;
mod lease_safety;
mod managed;
mod manager;
#[cfg(feature = "metrics")]
mod metrics;
mod names;
mod own_writes;
#[cfg(feature = "metrics")]
mod phases;
mod priority;
mod released;
mod rest_client;
#[cfg(feature = "secure-metrics")]
mod secure_metrics;
#[cfg(feature = "webhook")]
mod serving;
mod shard_selectors;
mod sharding;
mod status;
#[path = "../support/mod.rs"]
mod support;
mod version_skew;
#[cfg(feature = "webhook")]
mod webhook;
mod workers;
