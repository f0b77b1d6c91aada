//! Reconcilers and the controller that runs them: the seed article's `Controller` in Rust.
//!
//! A [`Controller`] runs N workers; each takes a key from the [`WorkQueue`](crate::workqueue::WorkQueue),
//! reads the object from the cache, calls [`Reconciler::reconcile`], and then:
//!
//! - `Ok(action)`: `forget`s the key (resetting its backoff), and re-adds it after
//!   [`Action::requeue_after`]'s delay if one was asked for;
//! - `Err(e)` or a panic (caught, logged and counted; the worker lives on): re-adds it with
//!   the queue's rate limiter while `num_requeues < max_retries` (default 5), then `forget`s
//!   it and reports it (an error log and the optional `on_dropped` hook);
//! - `done` in every case.
//!
//! `run` starts the informer if it is not running, waits for the cache to sync (and fails
//! with [`ControllerError::CacheSync`] if shut down first), and on shutdown stops taking keys
//! and waits for the reconciles in flight.
//!
//! Two ways to build one: the seed's explicit wiring ([`Controller::new`] with a queue, an
//! indexer and an informer whose handlers enqueue keys, such as [`enqueue_handler`]), or
//! [`Controller::builder`] for the common case.

mod builder;
#[allow(clippy::module_inception)]
mod controller;
mod reconciler;

pub use builder::{ControllerBuilder, enqueue_handler};
pub use controller::{Controller, ControllerError, ControllerStats, DroppedHook, ReconcileFailure};
pub use reconciler::{Action, Reconciler};
