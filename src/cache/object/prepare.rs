//! What happens to each object between the server and the store, on every path it comes by
//! (a list page, a streaming list's batch, a watch event): `managedFields` dropped unless
//! kept, the user's transform (its panic caught and reported as the failure of the list or
//! watch the object came in), and, for a store that keeps JSON, the encoding; objects nested
//! past `max_depth` never get here (see the `depth` module).

use std::sync::Arc;

use super::stored::{Codec, Stored};
use crate::cache::informer_error::InformerError;
use crate::cache::{InformerObject, ObjectKey, meta_namespace_key_func};
use crate::panic::catch;

/// An optional step between the server and the store, such as dropping fields a controller
/// never reads. It runs on every object listed or watched.
pub type Transform<K> = Arc<dyn Fn(K) -> K + Send + Sync>;

/// What happens to each object between the server and the store.
pub(crate) struct Prepare<K> {
    pub(crate) keep_managed_fields: bool,
    pub(crate) transform: Option<Transform<K>>,
    /// The store's codec, if it is compact: a list's objects are encoded as soon as they are
    /// decoded, so a large list is never held decoded whole.
    pub(crate) codec: Option<Codec<K>>,
    /// The deepest nesting cached (see the `depth` module): deeper objects are skipped.
    pub(crate) max_depth: usize,
}

impl<K> Clone for Prepare<K> {
    fn clone(&self) -> Self {
        Self {
            keep_managed_fields: self.keep_managed_fields,
            transform: self.transform.clone(),
            codec: self.codec.clone(),
            max_depth: self.max_depth,
        }
    }
}

impl<K: InformerObject> Prepare<K> {
    /// Drops managedFields (unless kept) and runs the transform, catching its panic.
    pub(crate) fn apply(&self, mut object: K) -> Result<K, InformerError> {
        if !self.keep_managed_fields {
            object.meta_mut().managed_fields = None;
        }
        let Some(transform) = &self.transform else { return Ok(object) };
        let key = meta_namespace_key_func(&object)
            .map_or_else(|_| "<no name>".to_owned(), |k| k.to_string());
        catch(|| transform(object)).map_err(|panic| InformerError::Transform { key, panic })
    }

    /// A listed `object` prepared, by key, as the store keeps it; `None` (logged) if it has
    /// no name.
    pub(crate) fn store(&self, object: K) -> Result<Option<(ObjectKey, Stored<K>)>, InformerError> {
        let object = Arc::new(self.apply(object)?);
        let Ok(key) = meta_namespace_key_func(object.as_ref()) else {
            tracing::warn!("ignoring a listed object without a name");
            return Ok(None);
        };
        let stored = match &self.codec {
            Some(codec) => codec.store(object, false),
            None => Stored::Shared(object),
        };
        Ok(Some((key, stored)))
    }
}
