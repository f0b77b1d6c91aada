//! The writes a request makes, as kube-apiserver's handlers and generic registry make them
//! together: the body read at the version it was written at, converted to the storage
//! version, admitted, stored.
//!
//! Contract:
//! - With no admission configured for the kind, a write is worked out and stored in one step
//!   under the store's lock (the `store_*` verbs).
//! - Otherwise it is worked out first without being stored (a dry run), sent to admission (see
//!   `stages`) as the typed write it is, and the admitted object stored, only if the object is
//!   still the one admitted (its resourceVersion): when another write came between, a patch
//!   or an apply is worked out, admitted and stored again (up to five times, as the real
//!   server retries), an update, which carries its own resourceVersion or none, is a 409. A
//!   create's object reaches admission without the fields the server sets as it stores it.
//! - A write at a CRD version other than the storage version ([`WriteOptions::version`]):
//!   a body at that version is converted to the storage version; a patch is applied to the
//!   object converted to that version and converted back (a resourceVersion the patch sets is
//!   a precondition of its own, and a conflict with it is not retried); server-side apply
//!   there is refused (400): this server applies at the storage version alone. Answers stay
//!   at the storage version; the HTTP layer converts them, as the real server's codec does.
//! - A `/scale` write is admitted as an `autoscaling/v1` `Scale`; a delete-collection as a
//!   delete of each object it selects, every one before any is deleted (the real server
//!   deletes them one by one, so those before a denial are gone; here a denial deletes none).

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::stages::{Admit, Admitted, Operation, Subresource, Version, Write};
use super::{DeleteOptions, Deletion, Registry, Target, parse_body};
use crate::merge::apply::ApplyOptions;
use crate::merge::patch::{self, PatchType};
use crate::model::resources::ResourceType;
use crate::model::status::{ApiError, ApiResult};
use crate::registry::scale::{patched_scale, scale_of, written_scale};
use crate::storage::store::StoredObject;

/// How many times a patch or apply is worked out and admitted again when another write came
/// between.
const PATCH_ATTEMPTS: usize = 5;

/// The options every write takes.
#[derive(Clone, Default)]
pub(crate) struct WriteOptions {
    /// `dryRun=All`: worked out, admitted and answered; nothing stored.
    pub(crate) dry_run: bool,
    /// The query's `fieldManager`, passed to admission.
    pub(crate) field_manager: Option<String>,
    /// The CRD version the write was made at, where it is not the storage version.
    pub(crate) version: Option<Version>,
}

/// What a write made, with admission's warnings.
pub(crate) struct Written<T> {
    pub(crate) object: T,
    pub(crate) warnings: Vec<String>,
}

impl<T> Written<T> {
    fn unadmitted(object: T) -> Self {
        Self { object, warnings: Vec::new() }
    }
}

/// A write of `/scale`.
pub(crate) enum ScaleChange<'a> {
    /// A `Scale` written whole (checked: see `scale::written_scale`).
    Replace(Value),
    /// A patch of the current `Scale`.
    Patch(PatchType, &'a [u8]),
}

impl Registry {
    /// Creates the object in `body` in the collection `target`.
    pub(crate) async fn create(
        &self,
        target: &Target,
        body: &[u8],
        options: &WriteOptions,
    ) -> ApiResult<Written<Arc<StoredObject>>> {
        let rt = self.rt(target);
        let value = self.to_storage(&rt, parse_body(&rt.kind, body)?, options).await?;
        let Some(admit) = self.admitting(&rt) else {
            return Ok(Written::unadmitted(self.store_create(target, value, options.dry_run)?));
        };
        let candidate = created(self.store_create(target, value, true)?.value());
        let name = candidate["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let write = self.write(&rt, target, &name, Operation::Create, Subresource::None, options);
        let (object, warnings) = admitted(admit.admit(&write, Some(candidate)).await?)?;
        let stored = self.store_create(target, object, options.dry_run)?;
        Ok(Written { object: stored, warnings })
    }

    /// Replaces the object with the one in `body` (with `status`, its status only).
    pub(crate) async fn update(
        &self,
        target: &Target,
        body: &[u8],
        status: bool,
        options: &WriteOptions,
    ) -> ApiResult<Written<Arc<StoredObject>>> {
        let rt = self.rt(target);
        let value = self.to_storage(&rt, parse_body(&rt.kind, body)?, options).await?;
        self.update_to(target, value, status, options).await
    }

    /// Patches the object (with `status`, keeps only its status change).
    pub(crate) async fn patch(
        &self,
        target: &Target,
        kind: PatchType,
        body: &[u8],
        status: bool,
        options: &WriteOptions,
    ) -> ApiResult<Written<Arc<StoredObject>>> {
        if let Some(version) = &options.version {
            return self.patch_at(version, target, kind, body, status, options).await;
        }
        let rt = self.rt(target);
        let Some(admit) = self.admitting(&rt) else {
            let patched = self.store_patch(target, kind, body, status, options.dry_run)?;
            return Ok(Written::unadmitted(patched));
        };
        for attempt in 1..=PATCH_ATTEMPTS {
            let old = self.get(target)?.value();
            let candidate = self.store_patch(target, kind, body, status, true)?.value();
            let admitted = self.admit_update(&*admit, target, status, &old, candidate, options);
            match admitted.await {
                Err(err) if err.code == StatusCode::CONFLICT && attempt < PATCH_ATTEMPTS => {}
                written => return written,
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Server-side apply (see the `apply` module): the object, and whether it was created.
    pub(crate) async fn apply(
        &self,
        target: &Target,
        body: &[u8],
        apply: &ApplyOptions,
        status: bool,
        options: &WriteOptions,
    ) -> ApiResult<Written<(Value, bool)>> {
        let rt = self.rt(target);
        if let Some(version) = &options.version {
            return Err(ApiError::bad_request(format!(
                "server-side apply at {}: the embedded API server applies at the storage version {} alone",
                version.requested.api_version(),
                rt.api_version()
            )));
        }
        let Some(admit) = self.admitting(&rt) else {
            return Ok(Written::unadmitted(self.store_apply(target, body, apply, status)?));
        };
        let dry_apply = ApplyOptions { dry_run: true, ..apply.clone() };
        for attempt in 1..=PATCH_ATTEMPTS {
            let old = match self.get(target) {
                Ok(current) => Some(current.value()),
                Err(err) if err.code == StatusCode::NOT_FOUND => None,
                Err(err) => return Err(err),
            };
            let written = match (self.store_apply(target, body, &dry_apply, status)?, old) {
                ((object, true), _) => {
                    let candidate = created(object);
                    let name = target.name.as_deref().unwrap_or_default();
                    let write = self.write(
                        &rt,
                        target,
                        name,
                        Operation::Create,
                        Subresource::None,
                        options,
                    );
                    let (object, warnings) = admitted(admit.admit(&write, Some(candidate)).await?)?;
                    let collection = Target { name: None, ..target.clone() };
                    self.store_create(&collection, object, options.dry_run)
                        .map(|stored| Written { object: (stored.value(), true), warnings })
                }
                ((object, false), Some(old)) => self
                    .admit_update(&*admit, target, status, &old, object, options)
                    .await
                    .map(|w| Written { object: (w.object.value(), false), warnings: w.warnings }),
                // The object was created since it was read: worked out again.
                ((_, false), None) => Err(ApiError::conflict(&rt.plural, "")),
            };
            match written {
                Err(err) if err.code == StatusCode::CONFLICT && attempt < PATCH_ATTEMPTS => {}
                written => return written,
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Deletes one object; `body` holds the delete's options, `policy` is the query's
    /// `propagationPolicy`.
    pub(crate) async fn delete(
        &self,
        target: &Target,
        body: &[u8],
        policy: Option<&str>,
        options: &WriteOptions,
    ) -> ApiResult<Written<Deletion>> {
        let delete_options = DeleteOptions::parse(body)?;
        let rt = self.rt(target);
        let mut warnings = Vec::new();
        if let Some(admit) = self.admitting(&rt) {
            let old = self.get(target)?.value();
            let name = target.name.as_deref().unwrap_or_default();
            let options = WriteOptions {
                dry_run: options.dry_run || delete_options.dry_run(),
                ..options.clone()
            };
            let mut write =
                self.write(&rt, target, name, Operation::Delete, Subresource::None, &options);
            write.old = Some(&old);
            warnings = admit.admit(&write, None).await?.warnings;
        }
        let deletion = self.store_delete(target, &delete_options, policy, options.dry_run)?;
        Ok(Written { object: deletion, warnings })
    }

    /// Deletes every object of the collection `target` that `selected` keeps; `body` and
    /// `policy` as for [`Registry::delete`]. The objects deleted, in their final state or as
    /// marked for deletion.
    pub(crate) async fn delete_collection(
        &self,
        target: &Target,
        selected: &(dyn Fn(&StoredObject) -> bool + Sync),
        body: &[u8],
        policy: Option<&str>,
        options: &WriteOptions,
    ) -> ApiResult<Written<Vec<Arc<StoredObject>>>> {
        let delete_options = DeleteOptions::parse(body)?;
        let rt = self.rt(target);
        let namespace = target.namespace.as_deref();
        let page = self.store.list_page(target.resource, namespace, None, None, None, selected)?;
        let one = |object: &StoredObject| Target {
            resource: target.resource,
            namespace: target
                .namespace
                .clone()
                .or_else(|| rt.namespaced.then(|| object.fields.namespace.clone())),
            name: Some(object.fields.name.clone()),
        };
        let mut warnings = Vec::new();
        if let Some(admit) = self.admitting(&rt) {
            for object in &page.items {
                let (target, old) = (one(object), object.value());
                let name = &object.fields.name;
                let mut write =
                    self.write(&rt, &target, name, Operation::Delete, Subresource::None, options);
                write.old = Some(&old);
                warnings.extend(admit.admit(&write, None).await?.warnings);
            }
        }
        let mut deleted = Vec::new();
        for object in &page.items {
            match self.store_delete(&one(object), &delete_options, policy, options.dry_run) {
                Ok(deletion) => deleted.push(deletion.object),
                Err(e) if e.code == StatusCode::NOT_FOUND => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Written { object: deleted, warnings })
    }

    /// A write of `/scale`: the new `Scale`.
    pub(crate) async fn write_scale(
        &self,
        target: &Target,
        change: ScaleChange<'_>,
        options: &WriteOptions,
    ) -> ApiResult<Written<Value>> {
        let rt = self.rt(target);
        let Some(admit) = self.admitting(&rt) else {
            let change = |current: &Value| match change {
                ScaleChange::Replace(written) => Ok(written),
                ScaleChange::Patch(kind, body) => patched_scale(current, kind, body),
            };
            let scale = self.store_scale(target, change, options.dry_run)?;
            return Ok(Written::unadmitted(scale));
        };
        let old = scale_of(&self.get(target)?.value());
        let new = match change {
            ScaleChange::Replace(written) => written,
            ScaleChange::Patch(kind, body) => patched_scale(&old, kind, body)?,
        };
        let name = target.name.as_deref().unwrap_or_default();
        let options = WriteOptions { version: None, ..options.clone() };
        let mut write =
            self.write(&rt, target, name, Operation::Update, Subresource::Scale, &options);
        write.old = Some(&old);
        let admitted = admit.admit(&write, Some(new)).await?;
        // An object with object metadata: admission refuses a patch that leaves less.
        let mut scale = admitted.object.filter(Value::is_object).unwrap_or_else(|| json!({}));
        scale["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        // Checked as a written Scale is, then stored over the one admitted.
        let written = written_scale(&serde_json::to_vec(&scale).unwrap_or_default())?;
        let scale = self.store_scale(target, |_| Ok(written), options.dry_run)?;
        Ok(Written { object: scale, warnings: admitted.warnings })
    }

    /// An update to `value` (at the storage version), admitted.
    async fn update_to(
        &self,
        target: &Target,
        value: Value,
        status: bool,
        options: &WriteOptions,
    ) -> ApiResult<Written<Arc<StoredObject>>> {
        if !value.is_object() {
            return Err(ApiError::bad_request("the body of the request must be a JSON object"));
        }
        let rt = self.rt(target);
        let Some(admit) = self.admitting(&rt) else {
            let stored = self.store_update(target, value, status, options.dry_run)?;
            return Ok(Written::unadmitted(stored));
        };
        let old = self.get(target)?.value();
        let candidate = self.store_update(target, value, status, true)?.value();
        self.admit_update(&*admit, target, status, &old, candidate, options).await
    }

    /// Admits the update of `old` to `candidate`, then stores the admitted object if the
    /// object is still `old` (else a 409).
    async fn admit_update(
        &self,
        admit: &dyn Admit,
        target: &Target,
        status: bool,
        old: &Value,
        candidate: Value,
        options: &WriteOptions,
    ) -> ApiResult<Written<Arc<StoredObject>>> {
        let rt = self.rt(target);
        let subresource = if status { Subresource::Status } else { Subresource::None };
        let name = target.name.as_deref().unwrap_or_default();
        let mut write = self.write(&rt, target, name, Operation::Update, subresource, options);
        write.old = Some(old);
        let (mut object, warnings) = admitted(admit.admit(&write, Some(candidate)).await?)?;
        object["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        let stored = self.store_update(target, object, status, options.dry_run)?;
        Ok(Written { object: stored, warnings })
    }

    /// A patch at `version`: applied to the object converted to it, converted back, and
    /// written as an update over the object it was applied to.
    async fn patch_at(
        &self,
        version: &Version,
        target: &Target,
        kind: PatchType,
        body: &[u8],
        status: bool,
        options: &WriteOptions,
    ) -> ApiResult<Written<Arc<StoredObject>>> {
        if kind == PatchType::Strategic {
            return Err(patch::strategic_refused());
        }
        let (wanted, stored) = (version.requested.api_version(), self.rt(target).api_version());
        let converter = &*version.converter;
        for attempt in 1..=PATCH_ATTEMPTS {
            let current = self.get(target)?;
            let rv = json!(current.rv.to_string());
            let mut object = converter.convert_one(current.value(), &wanted).await?;
            patch::apply(&mut object, kind, body)?;
            // A patch that sets the resourceVersion is a precondition of its own: kept, and a
            // conflict with it is the client's, not retried.
            let precondition = object["metadata"]["resourceVersion"] != rv;
            let mut back = converter.convert_one(object.clone(), &stored).await?;
            back["metadata"]["resourceVersion"] = match precondition {
                true => object["metadata"]["resourceVersion"].clone(),
                false => rv,
            };
            match self.update_to(target, back, status, options).await {
                Err(err)
                    if err.code == StatusCode::CONFLICT
                        && !precondition
                        && attempt < PATCH_ATTEMPTS => {}
                written => return written,
            }
        }
        unreachable!("the last attempt returns")
    }

    /// `value` (a body) at the storage version: converted when it was written at the
    /// version the request was made at.
    async fn to_storage(
        &self,
        rt: &ResourceType,
        value: Value,
        options: &WriteOptions,
    ) -> ApiResult<Value> {
        match &options.version {
            Some(version) if value["apiVersion"] == json!(version.requested.api_version()) => {
                version.converter.convert_one(value, &rt.api_version()).await
            }
            _ => Ok(value),
        }
    }

    /// The write admission is asked about (no stored object yet: callers set `old`).
    fn write<'a>(
        &self,
        rt: &'a ResourceType,
        target: &'a Target,
        name: &'a str,
        operation: Operation,
        subresource: Subresource,
        options: &'a WriteOptions,
    ) -> Write<'a> {
        Write {
            operation,
            rt,
            namespace: target.namespace.as_deref(),
            name,
            subresource,
            requested: options.version.as_ref(),
            old: None,
            dry_run: options.dry_run,
            field_manager: options.field_manager.as_deref(),
        }
    }
}

/// The object admission returned for a create or update, and the warnings. (Admission hands
/// back the object it was given, changed or not; none would be its own bug, refused here
/// rather than stored.)
fn admitted(admitted: Admitted) -> ApiResult<(Value, Vec<String>)> {
    match admitted.object {
        Some(object) => Ok((object, admitted.warnings)),
        None => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "Internal error occurred: admission returned no object for a create or update",
        )),
    }
}

/// A create's object as admission sees it: without what the server sets as it stores it.
fn created(mut object: Value) -> Value {
    if let Some(meta) = object["metadata"].as_object_mut() {
        for field in ["uid", "creationTimestamp", "generation", "resourceVersion"] {
            meta.remove(field);
        }
    }
    object
}
