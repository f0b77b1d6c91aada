//! What a reconciler and its `main` need, in one import: `use ctrlkit::prelude::*;`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ctrlkit::prelude::*;
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! struct Printer;
//!
//! #[async_trait]
//! impl Reconciler for Printer {
//!     type Object = ConfigMap;
//!     type Error = kube_client::Error;
//!
//!     async fn reconcile(&self, key: &ObjectKey, cm: Option<Arc<ConfigMap>>) -> Result<Action, Self::Error> {
//!         println!("{key}: {}", if cm.is_some() { "present" } else { "gone" });
//!         Ok(Action::done())
//!     }
//! }
//!
//! # async fn demo(client: kube_client::Client) -> Result<(), ctrlkit::manager::ManagerError> {
//! let mut manager = Manager::new(client.clone());
//! manager
//!     .controller(kube_client::Api::<ConfigMap>::all(client))
//!     .predicate(Predicate::labels_changed())
//!     .complete(Printer)?;
//! manager.run().await
//! # }
//! ```
//!
//! A controller's [`Config`](crate::controller::Config) is left out on purpose: its name would
//! shadow, or be shadowed by, `kube::Config` in a user's module; import it by its path.

// Not inlined: these are the items of their own modules, listed there once (as std's prelude).
#[doc(no_inline)]
pub use crate::cache::ObjectKey;
#[doc(no_inline)]
pub use crate::controller::{Action, Controller, Predicate, Reconciler};
#[doc(no_inline)]
pub use crate::manager::{HandleError, Manager, shutdown_signal};
#[doc(no_inline)]
pub use crate::status::{ConditionStatus, ConditionWriter, apply_status};
/// The attribute [`Reconciler`] implementations carry (from the `async-trait` crate, re-exported
/// so that a controller needs no dependency of its own on it).
pub use async_trait::async_trait;
