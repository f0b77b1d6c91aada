//! Operators in one process: the [`Manager`] (controller-runtime's) hosts several controllers
//! and other [`Runnable`](crate::runnable::Runnable)s over one
//! [`SharedInformerFactory`](crate::cache::SharedInformerFactory).
//!
//! Contract:
//! - **One set of caches**: every controller of [`Manager::controller`] (bound to
//!   [`Manager::factory`]) shares its informers: one list and one watch per kind, namespace
//!   and selector.
//! - **Start in phases** ([`Phase`](crate::runnable::Phase), controller-runtime's runnable
//!   groups): the metrics and probe endpoint; then the servers (webhooks: a list of a CRD's
//!   other version may need this process's conversion); then the informers and the cache
//!   runnables; once the caches synced, the rest (controllers, user runnables by default),
//!   those under a Lease once this replica holds it. A server is ready (its own
//!   `/readyz/<name>` check) as soon as it serves, whatever the caches do.
//! - **Stop on a signal** ([`Manager::run`]: SIGTERM or Ctrl-C) or a future
//!   ([`Manager::run_until`]), or when a runnable fails: runnables stop taking new work and
//!   finish what they hold, for at most the graceful-shutdown timeout (30 s by default); what
//!   is still running then is abandoned and reported
//!   ([`ManagerError::ShutdownTimeout`], each runnable with the keys it was reconciling); the
//!   informers stop last.
//! - **Failures name who failed**: a runnable's error or panic stops the manager and comes back
//!   as [`ManagerError::Runnable`] with the runnable's name.
//! - **Runnables come and go while it runs** ([`Manager::handle`], a [`ManagerHandle`] taken
//!   before `run`): one added starts in its phase as one added before `run` does (under its
//!   Lease, with its fence, aborted when it is lost); one removed by its [`RunnableId`] stops
//!   alone, within its own graceful-stop timeout, its ready check and metric series gone
//!   with it; the rest run on untouched. Adds fail once the manager stops.
//! - **Controller names are unique** (controller-runtime's rule since v0.19): adding a
//!   controller whose name one of the manager's holds fails with
//!   [`HandleError::DuplicateName`], checked before a builder is built, so the first's
//!   informers, queue and metric series are untouched; a name is freed once its controller
//!   leaves and its series are forgotten.
//!   [`Config::skip_name_validation`](crate::controller::Config::skip_name_validation) opts
//!   out, for tests.
//!
//! At the [`ManagerBuilder`]: leader election ([`ManagerBuilder::leader_election`]: runnables
//! that [need it](crate::runnable::Runnable::needs_leader_election) run only while this replica
//! leads), and, with the `metrics` feature, a metrics registry and the `/metrics` `/healthz`
//! `/readyz` endpoint.

mod builder;
mod controller_runnable;
mod error;
mod handle;
mod id;
mod leases;
mod managed;
#[allow(clippy::module_inception)]
mod manager;
mod outcome;
mod removal;
mod run;
mod runnables;
mod signal;
mod telemetry;

pub use builder::ManagerBuilder;
pub use error::{Abandoned, HandleError, ManagerError};
pub use handle::ManagerHandle;
pub use id::RunnableId;
pub use managed::ManagedController;
pub use manager::Manager;
pub use signal::shutdown_signal;
