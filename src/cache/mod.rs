//! The informer and its cache: client-go's `tools/cache` in async Rust.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ctrlkit::cache::{Informer, ListWatch, ResourceEventHandlerFuncs, wait_for_cache_sync};
//! use k8s_openapi::api::core::v1::Pod;
//! use kube_client::{Api, Client};
//!
//! # async fn demo(client: Client) -> Result<(), Box<dyn std::error::Error>> {
//! let informer = Informer::new(ListWatch::new(Api::<Pod>::all(client)).labels("app=web"));
//! // A custom index: pods by the node they run on.
//! informer.indexer().add_index("by-node", |pod: &Pod| {
//!     pod.spec.as_ref().and_then(|s| s.node_name.clone()).into_iter().collect()
//! })?;
//! informer.add_event_handler(ResourceEventHandlerFuncs::new().on_add(|pod: &Arc<Pod>| {
//!     println!("added: {:?}", pod.metadata.name);
//! }));
//! let running = tokio::spawn({
//!     let informer = informer.clone();
//!     async move { informer.run(ctrlkit::manager::shutdown_signal()).await }
//! });
//! wait_for_cache_sync(&[&informer], ctrlkit::manager::shutdown_signal()).await?;
//! let on_node = informer.indexer().by_index("by-node", "node-1")?;
//! println!("{} pods on node-1 of {}", on_node.len(), informer.indexer().list().len());
//! running.await?;
//! # Ok(())
//! # }
//! ```
//!
//! - [`ObjectKey`] names objects as client-go does (`namespace/name`);
//!   [`meta_namespace_key_func`] and [`deletion_handling_meta_namespace_key_func`] make keys.
//! - [`Indexer`] is the cache: `Arc<K>` by key, named indexes, cheap clones for readers; or,
//!   [`Indexer::compact`], each object's JSON, decoded on read, for a ninth of the memory.
//! - [`ListWatch`] says what to list and watch; [`Informer`] keeps the indexer in step with
//!   the API server and tells [`ResourceEventHandler`]s what changed, tombstones
//!   ([`DeletedFinalStateUnknown`]) included for deletes missed while disconnected.
//! - [`SharedInformerFactory`] hands out one informer per kind, namespace and selector to
//!   everyone who asks, and owns their lifetime: with an [`InformerGuard`] per user
//!   ([`GuardedInformer`]), an informer stops and frees its cache when its last user goes.
//! - Metadata-only informers cache
//!   [`PartialObjectMeta<K>`](kube_client::core::PartialObjectMeta): see
//!   [`SharedInformerFactory::metadata_informer`].
//! - [`wait_for_cache_sync`] waits for informers to hold their first list; every wait for
//!   caches fails with one error, [`CacheSyncError`].
//!
//! Informers drop `metadata.managedFields` before caching unless
//! [`InformerBuilder::keep_managed_fields`] says otherwise; see there why.
//!
//! Contract:
//! - The store changes before handlers hear of the change; a handler sees every change after
//!   the store content it was first given, in order, none twice.
//! - A dropped watch resumes from the last resourceVersion seen without a relist; 410 Expired
//!   relists; a relist replaces the store atomically and reports the difference.
//! - Failures back off (800 ms doubling to 30 s, jittered, reset after 2 healthy minutes)
//!   and are logged once each, with their cause, inside the informer's span (kind, group,
//!   namespace, selectors).
//! - Code the user hands in never takes an informer down: a panicking handler keeps
//!   receiving; a panicking transform fails that list or watch, which is retried.
//! - An informer has one owner, whoever runs it; when its run ends it is marked stopped.

mod backoff;
mod factory;
mod guard;
mod handler;
mod indexer;
mod informer;
mod informer_builder;
mod informer_config;
mod informer_error;
mod initial_events;
pub(crate) mod list_watch;
pub(crate) mod metadata_changed;
mod metrics;
mod object;
mod object_key;
mod processor;
mod reflector;
pub(crate) mod selector;
mod sync;
mod watch_stream;
mod wire;

pub use backoff::BackoffConfig;
pub use factory::{SharedInformerFactory, SharedInformerFactoryBuilder};
pub use guard::{GuardedInformer, InformerGuard};
pub use handler::{
    Deleted, DeletedFinalStateUnknown, HandlerRegistration, ResourceEventHandler,
    ResourceEventHandlerFuncs, deletion_handling_meta_namespace_key_func,
};
pub(crate) use handler::{InlineHandler, Notification};
pub use indexer::{IndexError, Indexer, NAMESPACE_INDEX};
pub use informer::{HasSynced, Informer};
pub use informer_builder::InformerBuilder;
pub use informer_config::InformerConfig;
pub use informer_error::{HandlerShutdownTimeout, InformerError};
pub use list_watch::{InformerObject, KindScope, ListWatch};
pub use metrics::{
    InformerLabels, InformerMetrics, InformerMetricsProvider, RequestResult, WatchEventType,
};
pub use object::{DEFAULT_HOT_OBJECTS, DEFAULT_MAX_DEPTH, Transform};
pub use object_key::{KeyError, ObjectKey, meta_namespace_key_func};
pub use reflector::WatchErrorHandler;
pub use sync::{CacheSyncError, wait_for_cache_sync};
pub(crate) use wire::get_opt;
pub use wire::{WIRE_FORMAT_ENV, WireFormat};

pub(crate) use informer::{InformerHandle, RunState};
#[cfg(test)]
pub(crate) use object::stored::{Codec, Stored};
pub(crate) use sync::wait_for_informers;
