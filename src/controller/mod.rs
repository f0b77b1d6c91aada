//! Reconcilers and the controller that runs them: the seed article's `Controller` in Rust,
//! grown to operators over several kinds.
//!
//! A [`Controller`] runs N workers; each takes a key from the
//! [`WorkQueue`](crate::workqueue::WorkQueue), reads the object from the cache, calls
//! [`Reconciler::reconcile`] inside a span naming the controller and the key, and then:
//!
//! - `Ok(action)`: `forget`s the key (resetting its backoff), and re-adds it after
//!   [`Action::requeue_after`]'s delay if one was asked for;
//! - `Err(e)` or a panic (caught, logged and counted; the worker lives on): re-adds it with
//!   the queue's rate limiter while `num_requeues < max_retries` (default 5), then `forget`s
//!   it and reports it (an error log and the optional `on_dropped` hook);
//! - `done` in every case.
//!
//! Keys come from the primary kind's events, and, with [`Controller::builder`], from owned
//! objects ([`owns`](ControllerBuilder::owns)), watched objects through a mapper
//! ([`watches`](ControllerBuilder::watches)) and external streams
//! ([`trigger`](ControllerBuilder::trigger)), each filtered by [`Predicate`]s.
//!
//! `run` waits for every cache the controller reads to sync (failing with
//! [`ControllerError::CacheSync`], naming them, if shut down first), runs the workers, and on
//! shutdown stops taking keys and waits for the reconciles in flight. If an informer it reads
//! stops under it, it stops too, with [`ControllerError::InformerStopped`].
//!
//! Informers have one owner. A controller built on a [`SharedInformerFactory`](crate::cache::SharedInformerFactory)
//! never starts or stops its informers (the factory's owner does); one built without makes a
//! factory of its own and owns it; the seed's wiring ([`Controller::new`]) runs its informer
//! unless someone else already does.
//!
//! Two ways to build one: the seed's explicit wiring ([`Controller::new`] with a queue, an
//! indexer and an informer whose handlers enqueue keys, such as [`enqueue_handler`]), or
//! [`Controller::builder`].

mod builder;
#[allow(clippy::module_inception)]
mod controller;
mod metrics;
mod predicate;
mod reconciler;
mod source;
mod writes;

pub use builder::ControllerBuilder;
pub use controller::{Controller, ControllerError, ControllerStats, DroppedHook, ReconcileFailure};
pub use metrics::{ControllerMetrics, ControllerMetricsProvider, ReconcileOutcome};
pub use predicate::{Event, Predicate};
pub use reconciler::{Action, Reconciler};
pub use source::{enqueue_handler, event_priority};
pub use writes::{report_write, report_written};
