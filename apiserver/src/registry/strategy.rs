//! The `Strategy` trait: what a kind adds to the generic registry (kube's per-kind
//! `strategy.go`, its storage-less `rest.Creater`s and its TableConvertor), each hook called
//! where kube-apiserver calls its own.
//!
//! Contract: every hook has a default that adds nothing ([`GenericStrategy`], what a kind without
//! rules of its own gets), so a new hook breaks no strategy. The hooks, by what they serve: a
//! review answered instead of stored (`answer_create`), whether admission sees the write
//! (`admitted`), the body decoded (`decode`, `typed_fields`, `applied_fields`,
//! `structural_schema`), the name checked (`name_rule`), create and update defaults and validation
//! (`validate_create`, `prepare_update`, `validate_update`), a delete (`graceful_delete`,
//! `removing`, `returns_deleted_object`), what follows a stored write (`stored`, `removed`); and
//! for reads, the field selectors taken (`field_labels`) and the Table printed (`columns`,
//! `cells`).

use std::sync::Arc;

use serde_json::Value;

use crate::model::resources::ResourceType;
use crate::model::status::ApiResult;
use crate::model::typed_fields::TypedField;
use crate::storage::store::{Store, StoredObject, Txn};

use super::printers::{self, Column};

/// What a name of a kind must be (kube's `ValidateObjectMetaAccessor` name validators).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameRule {
    /// A DNS-1123 subdomain: up to 253 characters, lower case, digits, `-` and `.`; most kinds.
    Subdomain,
    /// A DNS-1123 label: up to 63 characters, no dots (namespaces, services).
    Label,
}

/// What a kind adds to the registry's generic REST semantics (kube-apiserver's per-kind
/// create, update and delete strategies, its `rest.Creater`s that store nothing, and its hooks
/// after a write): one is registered (`registry::kinds`) for each kind with rules of its own,
/// and every rule that depends on the kind is a hook here; the generic registry, the HTTP
/// layer and storage do not ask which kind they hold (`scripts/check-kind-rules.py` flags the
/// common ways to; ARCHITECTURE.md says which it misses). Each hook
/// is called at the point kube-apiserver calls its own: validation before the write, what
/// follows it (a CRD starting to serve its kind) only once the write is stored, never in a
/// dry run. Every hook has a default, the generic behaviour.
pub(crate) trait Strategy: Send + Sync {
    /// What the kind's names must be: a DNS subdomain unless the kind says otherwise.
    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }
    /// Reads a created or updated object as the kind's decoder and defaulting do (a
    /// Secret's `stringData` folded into `data`), refusing what they refuse (a ConfigMap
    /// over its size limit); after the generic checks of its type and shape.
    fn decode(&self, _object: &mut Value) -> ApiResult<()> {
        Ok(())
    }
    /// Defaults and validates an object about to be created, after the registry has set its
    /// metadata (a new pod's status is `Pending`, as no scheduler runs here).
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
    /// Whether a delete first marks the object (a deletion timestamp, grace period 0), which
    /// watchers see as MODIFIED, then removes it, as for pods (kube's `CheckGracefulDelete`);
    /// otherwise an object without finalizers goes at once.
    fn graceful_delete(&self) -> bool {
        false
    }
    /// The object is being removed by a delete, in the delete's transaction `txn`: what must
    /// go with it in the same write (a namespace's contents, as no namespace controller runs
    /// here). [`removed`](Self::removed) follows once the transaction is stored.
    fn removing(&self, _txn: &mut Txn<'_>, _store: &Store, _object: &StoredObject) {}
    /// The object was removed.
    fn removed(&self, _store: &Store, _object: &Value) {}
    /// Whether a delete that removed the object answers with it (as the real server does for
    /// pods, namespaces and a few more kinds) rather than with a `Status`.
    fn returns_deleted_object(&self) -> bool {
        false
    }
    /// The field labels a field selector may name beyond `metadata.name` and
    /// `metadata.namespace` (kube's `GetAttrs` and field label conversion), among those the
    /// store indexes (`spec.nodeName`, `status.phase`).
    fn field_labels(&self) -> &'static [&'static str] {
        &[]
    }
    /// The answer to a create of `rt` with `body` when the kind is answered and never stored
    /// (kube's storage-less `rest.Creater`: TokenReview, SubjectAccessReview); `None` for a
    /// kind that is stored.
    fn answer_create(
        &self,
        _store: &Store,
        _rt: &ResourceType,
        _body: &[u8],
    ) -> Option<ApiResult<Value>> {
        None
    }
    /// The columns of the kind's `Table` (kube's `TableConvertor`, what `kubectl get`
    /// prints): by default the name, then `rt`'s printer columns or `Created At`.
    fn columns(&self, rt: &ResourceType) -> Vec<Column> {
        printers::default_columns(rt)
    }
    /// The cells of `object`'s row, one per column of [`columns`](Self::columns), at `now`
    /// (seconds since the epoch, for ages).
    fn cells(&self, rt: &ResourceType, object: &Value, _now: i64) -> Vec<Value> {
        printers::default_cells(rt, object)
    }
    /// Whether writes of the kind go through admission: not the webhook configurations' and
    /// admission policies' own, which would otherwise let a webhook lock itself in.
    fn admitted(&self) -> bool {
        true
    }
}

/// The strategy of a kind with no rules of its own: every hook's default, which is what the
/// registry does for any kind (kube's generic store with a strategy that adds nothing).
pub(crate) struct GenericStrategy;

impl Strategy for GenericStrategy {}
