//! Finalizers: clean up what a controller made outside the object (cloud resources, other
//! objects, files) before Kubernetes deletes the object (kube-runtime's and
//! controller-runtime's finalizer helpers).
//!
//! Call [`finalizer`] from a reconcile with the object from the cache:
//!
//! - not being deleted and without the finalizer: the finalizer is added first, and then
//!   [`Event::Apply`] runs with the object as the server returned it, so no external state is
//!   ever made for an object that could be deleted without cleanup (and a predicate that
//!   filters the finalizer's own write cannot leave the object unapplied);
//! - not being deleted, with the finalizer: [`Event::Apply`], the user's logic;
//! - being deleted, with the finalizer: [`Event::Cleanup`]; once it succeeds the finalizer is
//!   removed and Kubernetes finishes the delete; if it fails, the finalizer stays and the
//!   error comes back (the controller retries);
//! - being deleted, without the finalizer (deleted before it was added): nothing, so nothing
//!   blocks the delete.
//!
//! Both writes are JSON patches that `test` the finalizer list first (as kube-runtime's), so a
//! patch made from a stale cache fails with 422 instead of dropping someone else's finalizer;
//! the controller retries on fresh state.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use ctrlkit::controller::Action;
//! # use ctrlkit::finalizer::{Event, FinalizerError, finalizer};
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # async fn reconcile(api: kube_client::Api<ConfigMap>, cm: Arc<ConfigMap>) -> Result<Action, FinalizerError<std::io::Error>> {
//! finalizer(&api, "example.com/cleanup", cm, |event| async move {
//!     match event {
//!         Event::Apply(cm) => { /* make the world match cm */ Ok(Action::done()) }
//!         Event::Cleanup(cm) => { /* undo what apply made */ Ok(Action::done()) }
//!     }
//! })
//! .await
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation, TestOperation};
use kube_client::api::{Patch, PatchParams};
use kube_client::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::controller::Action;

/// What the user's function is asked to do.
#[derive(Debug)]
pub enum Event<K> {
    /// Bring the world in line with the object (it holds the finalizer).
    Apply(Arc<K>),
    /// The object is being deleted: undo what apply made. The finalizer is removed once this
    /// returns `Ok`.
    Cleanup(Arc<K>),
}

/// Why [`finalizer`] failed.
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError<E: std::error::Error + 'static> {
    /// The user's apply failed.
    #[error("apply failed: {0}")]
    ApplyFailed(#[source] E),
    /// The user's cleanup failed; the finalizer stays.
    #[error("cleanup failed: {0}")]
    CleanupFailed(#[source] E),
    /// Adding the finalizer failed (a 422 means the cache was stale: retried on fresh state).
    #[error("adding finalizer {finalizer} to {object} failed: {source}")]
    AddFinalizer {
        /// The finalizer.
        finalizer: String,
        /// The object's `namespace/name`.
        object: String,
        /// The cause.
        #[source]
        source: kube_client::Error,
    },
    /// Removing the finalizer failed.
    #[error("removing finalizer {finalizer} from {object} failed: {source}")]
    RemoveFinalizer {
        /// The finalizer.
        finalizer: String,
        /// The object's `namespace/name`.
        object: String,
        /// The cause.
        #[source]
        source: kube_client::Error,
    },
    /// The object has no name, so it cannot be patched.
    #[error("the object has no name")]
    UnnamedObject,
}

fn path(pointer: &str) -> PointerBuf {
    PointerBuf::parse(pointer).expect("a valid JSON pointer")
}

/// Runs `apply_or_cleanup` for `object` with the finalizer `name` held; see the
/// [module docs](self).
pub async fn finalizer<K, F, Fut, E>(
    api: &Api<K>,
    name: &str,
    object: Arc<K>,
    apply_or_cleanup: F,
) -> Result<Action, FinalizerError<E>>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    F: FnOnce(Event<K>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
    E: std::error::Error + 'static,
{
    let meta = object.meta();
    let object_name = meta.name.clone().ok_or(FinalizerError::UnnamedObject)?;
    let described = match &meta.namespace {
        Some(ns) => format!("{ns}/{object_name}"),
        None => object_name.clone(),
    };
    let finalizers = meta.finalizers.clone().unwrap_or_default();
    let position = finalizers.iter().position(|f| f == name);
    let deleting = meta.deletion_timestamp.is_some();
    match (deleting, position) {
        (false, Some(_)) => {
            apply_or_cleanup(Event::Apply(object)).await.map_err(FinalizerError::ApplyFailed)
        }
        (true, Some(index)) => {
            let action = apply_or_cleanup(Event::Cleanup(object))
                .await
                .map_err(FinalizerError::CleanupFailed)?;
            let pointer = format!("/metadata/finalizers/{index}");
            let patch = json_patch::Patch(vec![
                PatchOperation::Test(TestOperation {
                    path: path(&pointer),
                    value: Value::from(name),
                }),
                PatchOperation::Remove(RemoveOperation { path: path(&pointer) }),
            ]);
            match api.patch::<()>(&object_name, &PatchParams::default(), &Patch::Json(patch)).await
            {
                Ok(_) => Ok(action),
                // Gone already: the finalizer is no longer anyone's concern.
                Err(kube_client::Error::Api(s)) if s.code == 404 => Ok(action),
                Err(source) => Err(FinalizerError::RemoveFinalizer {
                    finalizer: name.to_owned(),
                    object: described,
                    source,
                }),
            }
        }
        (false, None) => {
            // Tested against the list as cached, so a stale cache cannot overwrite a list
            // that changed since.
            let operations = match finalizers.is_empty() {
                true => vec![
                    PatchOperation::Test(TestOperation {
                        path: path("/metadata/finalizers"),
                        value: Value::Null,
                    }),
                    PatchOperation::Add(AddOperation {
                        path: path("/metadata/finalizers"),
                        value: Value::from(vec![name]),
                    }),
                ],
                false => vec![
                    PatchOperation::Test(TestOperation {
                        path: path("/metadata/finalizers"),
                        value: Value::from(finalizers),
                    }),
                    PatchOperation::Add(AddOperation {
                        path: path("/metadata/finalizers/-"),
                        value: Value::from(name),
                    }),
                ],
            };
            let patch = Patch::Json(json_patch::Patch(operations));
            match api.patch::<()>(&object_name, &PatchParams::default(), &patch).await {
                Ok(patched) => apply_or_cleanup(Event::Apply(Arc::new(patched)))
                    .await
                    .map_err(FinalizerError::ApplyFailed),
                // Gone meanwhile: nothing to apply, nothing to clean up.
                Err(kube_client::Error::Api(s)) if s.code == 404 => Ok(Action::done()),
                Err(source) => Err(FinalizerError::AddFinalizer {
                    finalizer: name.to_owned(),
                    object: described,
                    source,
                }),
            }
        }
        // Deleted before the finalizer was added: nothing to clean up, nothing to block.
        (true, None) => Ok(Action::done()),
    }
}
