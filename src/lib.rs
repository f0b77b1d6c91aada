//! # ctrlkit
//!
//! Kubernetes controllers the client-go way, in async Rust.
//!
//! client-go's controller pattern has four parts, and ctrlkit ships each as its own module:
//!
//! - [`workqueue`]: a fair, stingy, rate-limited work queue with client-go's
//!   `Get`/`Done`/`Forget`/`NumRequeues` semantics, delays, rate limiters and metrics hooks.
//! - [`cache`]: the informer (list, watch, resume, relist with tombstones, resync, backoff,
//!   streaming lists, shared handlers) and the indexer it keeps current.
//! - [`controller`]: the [`Reconciler`](controller::Reconciler) trait and the
//!   [`Controller`](controller::Controller) that runs workers, retries, survives panics and
//!   shuts down cleanly.
//!
//! ## Cargo features
//!
//! | feature | what it adds |
//! |---|---|
//! | `testing` | an in-process Kubernetes API server for tests and examples ([`testing`]) |
//!
//! Time comes from [`tokio::time`], so every timed behaviour runs on tokio's paused clock in
//! tests.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod cache;
pub mod controller;
pub mod manager;
mod panic;
#[cfg(feature = "testing")]
pub mod testing;
pub mod workqueue;
