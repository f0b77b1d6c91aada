//! # ctrlkit
//!
//! Kubernetes controllers the client-go way, in async Rust.
//!
//! client-go's controller pattern has four parts, and ctrlkit ships each as its own module,
//! with controller-runtime's manager on top:
//!
//! - [`workqueue`]: a fair, stingy, rate-limited work queue with client-go's
//!   `Get`/`Done`/`Forget`/`NumRequeues` semantics, delays, rate limiters and metrics hooks.
//! - [`cache`]: the informer (list, watch, resume, relist with tombstones, resync, backoff,
//!   streaming lists, shared handlers, metadata only), the indexer it keeps current, and the
//!   shared informer factory that owns informers.
//! - [`controller`]: the [`Reconciler`](controller::Reconciler) trait and the
//!   [`Controller`](controller::Controller) that owns and watches secondary kinds, filters
//!   events with predicates, runs workers, retries, survives panics and shuts down cleanly.
//! - [`manager`]: the [`Manager`](manager::Manager) that hosts several controllers in one
//!   process over one [`SharedInformerFactory`](cache::SharedInformerFactory), and stops them
//!   gracefully on SIGTERM or Ctrl-C; what it runs is a [`Runnable`](runnable::Runnable)
//!   ([`runnable`]).
//!
//! And what operators need in production:
//!
//! - [`leaderelection`]: Lease-based leader election with client-go's algorithm; a manager
//!   runs its controllers only while it leads.
//! - [`sharding`]: one controller's objects shared among replicas, by labels a sharder writes
//!   or by server-side shard selectors on a ring of shard Leases; no key is reconciled by two
//!   replicas at once.
//! - `webhook` (feature `webhook`): admission (validating, defaulting) and CRD conversion
//!   webhooks on an HTTPS server whose certificates manage themselves.
//! - `metrics` (feature `metrics`): Prometheus metrics under controller-runtime's names, and
//!   the `/metrics` `/healthz` `/readyz` endpoint.
//! - [`finalizer`]: clean up before an object goes.
//! - [`status`]: write an object's status by server-side apply, its type named for you.
//! - [`events`]: Kubernetes events, correlated and spam-filtered as client-go does.
//! - [`user_agent`]: every request ctrlkit sends names its binary, as client-go's do.
//! - [`rest_client`]: each request of a Manager's clients counted (client-go's `rest_client_*`),
//!   429s and 5xx as the pressure that holds adaptive workers back.
//!
//! [`prelude`] holds what a reconciler and its `main` need: `use ctrlkit::prelude::*;`.
//!
//! ## A controller
//!
//! A [`Manager`](manager::Manager) hosts controllers over shared caches;
//! [`manager.controller(api)`](manager::Manager::controller) starts one and
//! [`complete`](controller::ControllerBuilder::complete) adds it with its reconciler:
//!
//! ```no_run
//! use std::sync::Arc;
//! use ctrlkit::prelude::*;
//! use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
//! use kube_client::{Api, Client};
//!
//! struct Rollout;
//!
//! #[async_trait]
//! impl Reconciler for Rollout {
//!     type Object = Deployment;
//!     type Error = kube_client::Error;
//!
//!     async fn reconcile(&self, key: &ObjectKey, d: Option<Arc<Deployment>>) -> Result<Action, Self::Error> {
//!         println!("{key}: {}", if d.is_some() { "reconciled" } else { "gone" });
//!         Ok(Action::done())
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::try_default().await?;
//! let mut manager = Manager::new(client.clone());
//! manager
//!     .controller(Api::<Deployment>::all(client.clone()))
//!     .owns(Api::<ReplicaSet>::all(client))
//!     .complete(Rollout)?; // refused if the manager has a controller of its name
//! manager.run().await?; // until SIGTERM or Ctrl-C
//! # Ok(())
//! # }
//! ```
//!
//! Without a Manager, [`Controller::builder`](controller::Controller::builder) builds one
//! controller to run alone; the guide (`docs/book/` in the repository) walks through the rest.
//!
//! ## Cargo features
//!
//! | feature | what it adds |
//! |---|---|
//! | `testing` | an in-process Kubernetes API server for tests and examples (module `testing`: the [`ctrlkit-apiserver`](https://docs.rs/ctrlkit-apiserver) crate, re-exported) |
//! | `kube-runtime` | conversions from kube-runtime's types (`ObjectKey: From<ObjectRef<K>>`) |
//! | `metrics` | Prometheus metrics under controller-runtime's names and the `/metrics` `/healthz` `/readyz` endpoint (module `metrics`) |
//! | `webhook` | admission and conversion webhooks on an HTTPS server with certificates it makes, renews and injects (module `webhook`) |
//! | `secure-metrics` | `metrics` over HTTPS, each scrape authenticated and authorized by the API server (`metrics::SecureServing`; implies `metrics` and `tls`) |
//! | `tls` | HTTPS serving with limits and certificates that manage themselves (module `tls`), shared by `webhook` and `secure-metrics`, which turn it on |
//!
//! Items that need a feature say so in these docs (docs.rs builds them all).
#![cfg_attr(
    feature = "metrics",
    doc = "\nWith `metrics` on: [`metrics`], and [`ManagerBuilder::metrics_address`](manager::ManagerBuilder::metrics_address) to serve it."
)]
#![cfg_attr(
    feature = "testing",
    doc = "\nWith `testing` on: [`testing`], an API server to test controllers without a cluster."
)]
#![cfg_attr(
    feature = "webhook",
    doc = "\nWith `webhook` on: [`webhook`], its server a [`Runnable`](runnable::Runnable) of the manager."
)]
//!
//! Time comes from [`tokio::time`], so every timed behaviour runs on tokio's paused clock in
//! tests.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod cache;
pub mod controller;
pub mod events;
mod fence;
pub mod finalizer;
mod identity;
pub mod leaderelection;
pub mod manager;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
mod panic;
pub mod prelude;
pub mod rest_client;
pub mod runnable;
pub mod sharding;
pub mod status;
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub mod tls;
/// The embedded API server: the `ctrlkit-apiserver` crate (in this repository's `apiserver/`),
/// re-exported so that `ctrlkit::testing::ApiServer` is all a ctrlkit user names.
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
#[doc(inline)]
pub use ctrlkit_apiserver as testing;
pub mod user_agent;
#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
pub mod webhook;
pub mod workqueue;

/// The README's and the guide's Rust blocks, compiled as doc tests (and run, where they need no
/// cluster) so that they stay true; they use `ctrlkit::testing` and the webhook module.
/// `tests/docs.rs` checks that every chapter of the guide's `SUMMARY.md` is listed here.
#[cfg(all(doctest, feature = "testing", feature = "webhook"))]
mod doc_examples {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/book/src/introduction.md")]
    struct Introduction;
    #[doc = include_str!("../docs/book/src/concepts.md")]
    struct Concepts;
    #[doc = include_str!("../docs/book/src/first-controller.md")]
    struct FirstController;
    #[doc = include_str!("../docs/book/src/several-kinds.md")]
    struct SeveralKinds;
    #[doc = include_str!("../docs/book/src/coming-from-kube-rs.md")]
    struct ComingFromKubeRs;
    #[doc = include_str!("../docs/book/src/coming-from-client-go.md")]
    struct ComingFromClientGo;
    #[doc = include_str!("../docs/book/src/production.md")]
    struct Production;
    #[doc = include_str!("../docs/book/src/sharding.md")]
    struct Sharding;
    #[doc = include_str!("../docs/book/src/webhooks.md")]
    struct Webhooks;
    #[doc = include_str!("../docs/book/src/testing.md")]
    struct Testing;
    #[doc = include_str!("../docs/book/src/guarantees.md")]
    struct Guarantees;
}
