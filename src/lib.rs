//! # ctrlkit
//!
//! Kubernetes controllers the client-go way, in async Rust.
//!
//! client-go's controller pattern has four parts, and ctrlkit ships each as its own module:
//!
//! - [`workqueue`]: a fair, stingy, rate-limited work queue with client-go's
//!   `Get`/`Done`/`Forget`/`NumRequeues` semantics, delays, rate limiters and metrics hooks.
//! - `cache` (informer and indexer) and `controller` (the `Reconciler` trait and the worker
//!   loop) follow in later releases.
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
#[cfg(feature = "testing")]
pub mod testing;
pub mod workqueue;
