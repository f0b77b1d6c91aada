//! The stages of a write that the registry calls but does not implement: admission, and
//! conversion between a CRD's versions. The registry owns these traits, as kube-apiserver's
//! generic registry owns `rest.ValidateObjectFunc` and `rest.UpdatedObjectInfo`; the server
//! plugs in the webhooks (the `admission` module) and the CRDs' conversion (`conversion`).
//!
//! Contract:
//! - A write is described to admission as a typed [`Write`] (operation, kind, namespace, name,
//!   subresource, the version it was made at, the stored object, dry run, field manager); the
//!   object the write would store is handed over and the admitted one handed back, with the
//!   webhooks' warnings. No request is made up and served again.
//! - Conversion is asked for objects at a `group/version`; objects already there come back as
//!   they are.
//! - Both are asynchronous (a webhook is an HTTPS call), so the registry never calls them while
//!   it holds the store's lock: it works a write out, admits it, then stores it only if the
//!   object is still the one it was worked out from (see the `writes` module).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::model::resources::ResourceType;
use crate::model::status::ApiResult;
use crate::storage::store::Store;

/// What a write does, as admission names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    /// `CREATE`, `UPDATE` or `DELETE`: a rule's `operations` and a review's `operation`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }

    /// The kind of the review's `options`: `CreateOptions`, `UpdateOptions`, `DeleteOptions`.
    pub(crate) fn options_kind(self) -> &'static str {
        match self {
            Operation::Create => "CreateOptions",
            Operation::Update => "UpdateOptions",
            Operation::Delete => "DeleteOptions",
        }
    }
}

/// The part of an object a write is made to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subresource {
    /// The object itself.
    None,
    /// `/status`.
    Status,
    /// `/scale`: the write is an `autoscaling/v1` `Scale`.
    Scale,
}

impl Subresource {
    /// The subresource's name in a path and an admission review (empty for the object).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Subresource::None => "",
            Subresource::Status => "status",
            Subresource::Scale => "scale",
        }
    }
}

/// Converts a CRD's objects between its versions.
pub(crate) trait Converter: Send + Sync {
    /// `objects` at `api_version` (`group/version`), in order; those already there unchanged.
    fn convert<'a>(
        &'a self,
        objects: Vec<Value>,
        api_version: &'a str,
    ) -> BoxFuture<'a, ApiResult<Vec<Value>>>;
}

impl dyn Converter + '_ {
    /// One object at `api_version`.
    pub(crate) async fn convert_one(&self, object: Value, api_version: &str) -> ApiResult<Value> {
        let mut converted = self.convert(vec![object], api_version).await?;
        Ok(converted.pop().unwrap_or(Value::Null))
    }
}

/// A request made at a CRD version other than the storage version: that version's type, and
/// how to convert to and from it. The request's target is the storage version's.
#[derive(Clone)]
pub(crate) struct Version {
    /// The requested version's type.
    pub(crate) requested: Arc<ResourceType>,
    /// Converts between it and the storage version.
    pub(crate) converter: Arc<dyn Converter>,
}

/// A write, as admission sees it (kube-apiserver's `admission.Attributes`).
pub(crate) struct Write<'a> {
    pub(crate) operation: Operation,
    /// The storage version's type.
    pub(crate) rt: &'a ResourceType,
    pub(crate) namespace: Option<&'a str>,
    pub(crate) name: &'a str,
    pub(crate) subresource: Subresource,
    /// The version the write was made at, where it is not the storage version.
    pub(crate) requested: Option<&'a Version>,
    /// The object stored now (none for a create; for `/scale`, its `Scale`).
    pub(crate) old: Option<&'a Value>,
    pub(crate) dry_run: bool,
    /// The query's `fieldManager`.
    pub(crate) field_manager: Option<&'a str>,
}

/// What admission made of a write: the object to store (none for a delete) and the
/// webhooks' warnings, in order.
pub(crate) struct Admitted {
    pub(crate) object: Option<Value>,
    pub(crate) warnings: Vec<String>,
}

/// Admission, as the server configures it.
pub(crate) trait Admission: Send + Sync {
    /// What admits a write to `rt` now (as `store` holds the configuration when the request
    /// comes); `None` when nothing would: the write then goes to storage directly.
    fn start<'s>(&self, store: &'s Store, rt: &ResourceType) -> Option<Box<dyn Admit + 's>>;
}

/// The admission of one request.
pub(crate) trait Admit: Send + Sync {
    /// Admits `write`, whose new object (at the storage version; none for a delete) is
    /// `object`: the object to store, or the error that ends the write.
    fn admit<'a>(
        &'a self,
        write: &'a Write<'a>,
        object: Option<Value>,
    ) -> BoxFuture<'a, ApiResult<Admitted>>;
}
