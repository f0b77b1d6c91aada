//! Reconcilers and the controller that runs them: the `Controller` of client-go's
//! `examples/workqueue` in Rust, grown to operators over several kinds.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ctrlkit::cache::ObjectKey;
//! use ctrlkit::controller::{Action, Config, Controller, Reconciler};
//! use k8s_openapi::api::core::v1::{ConfigMap, Pod};
//! use kube_client::{Api, Client};
//!
//! struct PodPrinter;
//!
//! #[async_trait::async_trait]
//! impl Reconciler for PodPrinter {
//!     type Object = Pod;
//!     type Error = kube_client::Error;
//!
//!     async fn reconcile(&self, key: &ObjectKey, pod: Option<Arc<Pod>>) -> Result<Action, Self::Error> {
//!         println!("{key}: {}", if pod.is_some() { "present" } else { "gone" });
//!         Ok(Action::done())
//!     }
//! }
//!
//! # async fn demo(client: Client) -> Result<(), ctrlkit::controller::ControllerError> {
//! let controller = Controller::builder(Api::<Pod>::default_namespaced(client.clone()))
//!     .owns(Api::<ConfigMap>::default_namespaced(client)) // ConfigMaps a pod controls
//!     .config(Config::default().workers(2))
//!     .build();
//! let stats = controller.clone(); // clones share the run's figures
//! tokio::spawn(controller.run(PodPrinter, ctrlkit::manager::shutdown_signal()));
//! println!("{:?}", stats.stats());
//! # Ok(())
//! # }
//! ```
//!
//! Everything about a controller is set before it is built: what it watches and how its
//! informer and queue are made on the [`ControllerBuilder`], how it runs (workers, retries,
//! timeouts, leader election) in one [`Config`]. In a [`Manager`](crate::manager::Manager),
//! [`Manager::controller`](crate::manager::Manager::controller) hands out a builder bound to the
//! manager's informers and metrics.
//!
//! A [`Controller`] runs N workers ([`Config::workers`] at the start; changed while it runs by
//! [`Controller::set_workers`], or within bounds by an [`AdaptiveWorkers`] policy); each takes
//! a key from the [`WorkQueue`](crate::workqueue::WorkQueue), reads the object from the cache, calls
//! [`Reconciler::reconcile`] inside a span naming the controller and the key, and then:
//!
//! - `Ok(action)`: `forget`s the key (resetting its backoff), and re-adds it after
//!   [`Action::requeue_after`]'s delay if one was asked for;
//! - `Err(e)` or a panic (caught, logged and counted; the worker lives on): re-adds it with
//!   the queue's rate limiter while `num_requeues <` [`Config::max_retries`] (default 5),
//!   then `forget`s it and reports it (an error log and the optional
//!   [`on_dropped`](Config::on_dropped) hook);
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
//! factory of its own and owns it; client-go's explicit wiring ([`Controller::new`]) runs its
//! informer unless someone else already does.
//!
//! Inside a reconcile, [`ReconcileContext::current`] says why the key was queued since its
//! last reconcile ([`Reason`]s, also in the reconcile's span) and what it wrote through a
//! [`recording_client`]; the key's next reconcile is held until every cache the controller
//! reads holds those writes, for at most [`Config::stale_cache_timeout`] (the `own_writes`
//! module's contract: reading one's own writes).
//!
//! Two ways to build one: client-go's explicit wiring ([`Controller::new`] with a queue, an
//! indexer and an informer whose handlers enqueue keys, such as [`enqueue_handler`]), or
//! [`Controller::builder`].

mod adaptive;
mod builder;
mod config;
mod context;
#[allow(clippy::module_inception)]
mod controller;
mod error;
mod expectations;
mod metrics;
mod own_writes;
mod pool;
mod predicate;
mod reconciler;
mod recorded_write;
mod recording_client;
mod report;
mod run;
mod shard;
mod source;
mod stats;
mod worker;

pub use adaptive::AdaptiveWorkers;
pub use builder::ControllerBuilder;
pub use config::{Config, namespace_fairness};
pub use context::{Changed, Event, MAX_KEYS, MAX_REASONS, MAX_WRITES, Reason, ReconcileContext};
pub use controller::Controller;
pub use error::{ControllerError, DroppedHook, ReconcileFailure, SharedError};
pub use metrics::{ControllerMetrics, ControllerMetricsProvider, ReconcileOutcome, ScaleReason};
pub use predicate::{Change, Predicate};
pub use reconciler::{Action, Reconciler};
pub use recorded_write::{Verb, Write};
pub use recording_client::recording_client;
pub use report::{report_write, report_written};
pub use source::enqueue_handler;
pub use stats::ControllerStats;
