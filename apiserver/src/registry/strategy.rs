//! The `Strategy` trait: what a kind adds to the generic registry (kube's per-kind
//! `strategy.go`), each hook called where kube-apiserver calls its own.

use std::sync::Arc;

use serde_json::Value;

use crate::model::resources::ResourceType;
use crate::model::status::ApiResult;
use crate::model::typed_fields::TypedField;
use crate::storage::store::Store;

/// What a kind adds to the registry's generic REST semantics (kube-apiserver's per-kind
/// create and update strategies and their hooks after a write): the server registers one
/// for the kinds that have rules of their own (CRDs, webhook configurations, Secrets,
/// ConfigMaps). Each hook is
/// called at the point kube-apiserver calls its own: validation before the write, what
/// follows it (a CRD starting to serve its kind) only once the write is stored, never in a
/// dry run.
pub(crate) trait Strategy: Send + Sync {
    /// Reads a created or updated object as the kind's decoder and defaulting do (a
    /// Secret's `stringData` folded into `data`), refusing what they refuse (a ConfigMap
    /// over its size limit); after the generic checks of its type and shape.
    fn decode(&self, _object: &mut Value) -> ApiResult<()> {
        Ok(())
    }
    /// Defaults and validates an object about to be created.
    fn validate_create(&self, _rt: &ResourceType, _object: &mut Value) -> ApiResult<()> {
        Ok(())
    }
    /// Defaults and validates an update's new object, before the registry's own checks.
    fn prepare_update(&self, _rt: &ResourceType, _object: &mut Value) -> ApiResult<()> {
        Ok(())
    }
    /// Validates an update of the object `name` from `old` to `new` after the registry's
    /// checks; `status` for a `/status` write.
    fn validate_update(
        &self,
        _name: &str,
        _old: &Value,
        _new: &Value,
        _status: bool,
    ) -> ApiResult<()> {
        Ok(())
    }
    /// The fields of this kind's Go type that are structs, maps or lists, beyond metadata's
    /// and a built-in kind's `spec` and `status` (see the `typed_fields` module): a write
    /// that gives one another JSON type is refused as Go's decoder refuses it.
    fn typed_fields(&self, _rt: &ResourceType) -> Vec<TypedField> {
        Vec::new()
    }
    /// The fields server-side apply reads as maps and lists beyond metadata's: by default
    /// [`typed_fields`](Self::typed_fields)'; a custom resource's come from its schema.
    fn applied_fields(&self, rt: &ResourceType) -> Vec<TypedField> {
        self.typed_fields(rt)
    }
    /// The structural schema of the storage version of `rt`, a custom resource's kind, which
    /// server-side apply merges its lists by (see the `list_types` module); `None` where
    /// there is none, and every list is atomic.
    fn structural_schema(&self, _rt: &ResourceType) -> Option<Arc<Value>> {
        None
    }
    /// The object was stored (created or updated) under `resource`.
    fn stored(&self, _store: &Store, _resource: usize, _object: &Value) {}
    /// The object was removed.
    fn removed(&self, _store: &Store, _object: &Value) {}
}

/// The strategy of a kind with no rules of its own: every hook's default, which is what the
/// registry does for any kind (kube's generic store with a strategy that adds nothing).
pub(crate) struct GenericStrategy;

impl Strategy for GenericStrategy {}
