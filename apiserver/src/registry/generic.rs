//! The generic registry (kube's `registry/generic/registry/store.go`): [`Registry`] with its
//! builders and lookups, and the create, get, update, patch, apply and scale of every kind,
//! which a kind's `Strategy` adds its own rules to.

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::merge::apply::{self, ApplyOptions, ApplyTo};
use crate::merge::list_types::Node;
use crate::merge::patch::{self, PatchType};
use crate::model::ids::{new_uid, now};
use crate::model::resources::ResourceType;
use crate::model::shapes::{self};
use crate::model::status::{ApiError, ApiResult};
use crate::model::typed_fields::{self, TypedField};
use crate::storage::store::{Store, StoredObject, object_key};

use super::meta::{check_type, has_finalizers, invalid_name, invalid_object, name_suffix, spec_of};
use super::stages::{Admission, Admit};
use super::strategy::{GenericStrategy, Strategy};

/// Where a request points: a resource type, and a namespace and name where given.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) resource: usize,
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
}

/// The registry: REST verbs over the store. The verbs a request makes are in `writes`
/// (admitted, at any served version); the `store_*` ones here work a write out and store it
/// under the store's lock, called by those and by the server itself.
pub(crate) struct Registry {
    pub(crate) store: Store,
    /// What a kind adds to the generic semantics, by group, then plural (two maps, so that a
    /// lookup borrows the names instead of building a key).
    strategies: HashMap<String, HashMap<String, Arc<dyn Strategy>>>,
    /// What every other kind of a group adds, by group: kube-apiserver's rules for a whole
    /// group (no write to a kind of `admissionregistration.k8s.io` passes webhooks).
    groups: HashMap<String, Arc<dyn Strategy>>,
    /// What every kind a CustomResourceDefinition defines adds, if anything.
    custom_resources: Option<Arc<dyn Strategy>>,
    /// What admits writes, if anything does.
    admission: Option<Arc<dyn Admission>>,
}

impl Registry {
    /// A registry over `store`, with no kind of special rules yet.
    pub(crate) fn new(store: Store) -> Self {
        Self {
            store,
            strategies: HashMap::new(),
            groups: HashMap::new(),
            custom_resources: None,
            admission: None,
        }
    }

    /// Sends writes through `admission` before they are stored.
    pub(crate) fn with_admission(mut self, admission: Arc<dyn Admission>) -> Self {
        self.admission = Some(admission);
        self
    }

    /// What admits a write to `rt` now, if anything does (nothing for a kind whose strategy,
    /// or whose group's, is not admitted: a CRD's kind in such a group keeps its CRD's rules
    /// but passes no webhook, as before strategies).
    pub(super) fn admitting(&self, rt: &ResourceType) -> Option<Box<dyn Admit + '_>> {
        let group = self.groups.get(rt.group.as_str());
        if !self.strategy(rt).admitted() || group.is_some_and(|g| !g.admitted()) {
            return None;
        }
        self.admission.as_ref()?.start(&self.store, rt)
    }

    /// Gives the kind `group`/`plural` its own rules.
    pub(crate) fn with_strategy(
        mut self,
        group: &str,
        plural: &str,
        strategy: Arc<dyn Strategy>,
    ) -> Self {
        let group = self.strategies.entry(group.to_owned()).or_default();
        group.insert(plural.to_owned(), strategy);
        self
    }

    /// Gives every kind of `group` without a strategy of its own the rules of `strategy`.
    pub(crate) fn with_group_strategy(mut self, group: &str, strategy: Arc<dyn Strategy>) -> Self {
        self.groups.insert(group.to_owned(), strategy);
        self
    }

    /// Gives every kind a CustomResourceDefinition defines the rules of `strategy`.
    pub(crate) fn with_custom_resource_strategy(mut self, strategy: Arc<dyn Strategy>) -> Self {
        self.custom_resources = Some(strategy);
        self
    }

    /// The rules of `rt`: its own strategy, the custom resources' for a kind a CRD defines,
    /// its group's, or [`GenericStrategy`] (every hook's default) for the other kinds.
    pub(crate) fn strategy(&self, rt: &ResourceType) -> &dyn Strategy {
        let custom = || self.custom_resources.as_ref().filter(|_| rt.from_definition);
        let own = self.strategies.get(rt.group.as_str()).and_then(|p| p.get(rt.plural.as_str()));
        let group = || self.groups.get(rt.group.as_str());
        match own.or_else(custom).or_else(group) {
            Some(strategy) => strategy.as_ref(),
            None => &GenericStrategy,
        }
    }

    /// The fields of `rt`'s objects that Go holds as structs, maps or lists.
    fn typed_fields(&self, rt: &ResourceType) -> Vec<TypedField> {
        self.fields_with(rt, |strategy| strategy.typed_fields(rt))
    }

    /// The fields of `rt`'s objects that server-side apply reads as maps and lists.
    fn applied_fields(&self, rt: &ResourceType) -> Vec<TypedField> {
        self.fields_with(rt, |strategy| strategy.applied_fields(rt))
    }

    /// Metadata's fields, a built-in kind's `spec` and `status`, and `own` of its strategy.
    fn fields_with(
        &self,
        rt: &ResourceType,
        own: impl FnOnce(&dyn Strategy) -> Vec<TypedField>,
    ) -> Vec<TypedField> {
        let mut fields = typed_fields::metadata_fields(&rt.kind, rt.is_builtin());
        if rt.is_builtin() {
            fields.extend(typed_fields::spec_and_status(&rt.kind, &rt.api_version()));
        }
        fields.extend(own(self.strategy(rt)));
        fields
    }

    /// The answer to a create of `rt` with `body` if the kind is answered rather than stored
    /// (see `Strategy::answer_create`).
    pub(crate) fn answer(&self, rt: &ResourceType, body: &[u8]) -> Option<ApiResult<Value>> {
        self.strategy(rt).answer_create(&self.store, rt, body)
    }

    pub(crate) fn rt(&self, target: &Target) -> Arc<ResourceType> {
        self.store.resource_type(target.resource)
    }

    fn namespace_id(&self) -> usize {
        self.store.resource("", "v1", "namespaces").expect("namespaces are built in")
    }

    pub(super) fn key(target: &Target, name: &str) -> String {
        object_key(target.namespace.as_deref(), name)
    }

    /// Creates `value` (a JSON object) in the collection `target`; with `dry_run`, answers
    /// what it would create.
    pub(crate) fn store_create(
        &self,
        target: &Target,
        mut value: Value,
        dry_run: bool,
    ) -> ApiResult<Arc<StoredObject>> {
        let rt = self.rt(target).clone();
        let strategy = self.strategy(&rt);
        check_type(&rt, &self.typed_fields(&rt), strategy, &mut value)?;
        let meta = &mut value["metadata"];
        match (&target.namespace, meta.get("namespace").and_then(Value::as_str)) {
            (Some(path_ns), Some(body_ns)) if !body_ns.is_empty() && body_ns != path_ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            (Some(path_ns), _) => meta["namespace"] = json!(path_ns),
            (None, _) => {
                if let Some(m) = meta.as_object_mut() {
                    m.remove("namespace");
                }
            }
        }
        let mut name = meta["name"].as_str().unwrap_or_default().to_owned();
        if name.is_empty() {
            let prefix = meta["generateName"].as_str().unwrap_or_default();
            if prefix.is_empty() {
                let why = "Required value: name or generateName is required";
                return Err(invalid_object(&rt, "", &format!("metadata.name: {why}")).with_cause(
                    "FieldValueRequired",
                    why,
                    "metadata.name",
                ));
            }
            name = format!("{prefix}{}", name_suffix());
            meta["name"] = json!(name);
        }
        if let Some(why) = invalid_name(strategy.name_rule(), &name) {
            let why = format!("Invalid value: \"{name}\": {why}");
            return Err(invalid_object(&rt, &name, &format!("metadata.name: {why}")).with_cause(
                "FieldValueInvalid",
                &why,
                "metadata.name",
            ));
        }
        let meta = meta.as_object_mut().expect("metadata is an object");
        for field in
            ["deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion", "selfLink"]
        {
            meta.remove(field);
        }
        meta.insert("uid".into(), json!(new_uid()));
        meta.insert("creationTimestamp".into(), json!(now()));
        meta.insert("generation".into(), json!(1));
        strategy.validate_create(&rt, &mut value)?;
        let key = Self::key(target, &name);
        let ns_id = self.namespace_id();
        let created = self.store.write_as(dry_run, |txn| {
            if let Some(ns) = &target.namespace
                && txn.get(ns_id, ns).is_none()
            {
                return Err(ApiError::not_found("namespaces", ns));
            }
            if txn.get(target.resource, &key).is_some() {
                return Err(ApiError::already_exists(&rt.plural, &name));
            }
            Ok(txn.put(target.resource, &key, value))
        })?;
        if !dry_run {
            strategy.stored(&self.store, target.resource, &created.value());
        }
        Ok(created)
    }

    /// GET of one object.
    pub(crate) fn get(&self, target: &Target) -> ApiResult<Arc<StoredObject>> {
        let name = target.name.as_deref().unwrap_or_default();
        let key = Self::key(target, name);
        self.store
            .read(|txn| txn.get(target.resource, &key))
            .ok_or_else(|| ApiError::not_found(&self.rt(target).plural, name))
    }

    /// Replaces the object with `value`, a JSON object (or, with `status`, its status only);
    /// `dry_run` stores nothing.
    pub(crate) fn store_update(
        &self,
        target: &Target,
        value: Value,
        status: bool,
        dry_run: bool,
    ) -> ApiResult<Arc<StoredObject>> {
        self.modify(target, status, dry_run, |_| Ok(value))
    }

    /// Applies a patch to the object (or, with `status`, keeps only its status change);
    /// `dry_run` stores nothing.
    pub(crate) fn store_patch(
        &self,
        target: &Target,
        kind: PatchType,
        body: &[u8],
        status: bool,
        dry_run: bool,
    ) -> ApiResult<Arc<StoredObject>> {
        let rt = self.rt(target);
        if kind == PatchType::Strategic && !rt.is_builtin() {
            return Err(patch::strategic_refused());
        }
        let fields = self.typed_fields(&rt);
        if kind == PatchType::Strategic
            && let Ok(patch) = shapes::from_slice::<Value>(body)
            && let Some(err) = typed_fields::strategic_error(&patch, &fields)
        {
            return Err(err);
        }
        self.modify(target, status, dry_run, |current| {
            let mut value = current.clone();
            patch::apply(&mut value, kind, body)?;
            if !value.is_object() {
                return Err(ApiError::bad_request("a patch must leave an object"));
            }
            if let Some(error) = typed_fields::decode_error(&value, &fields) {
                return Err(shapes::invalid_patch(&value, &error));
            }
            Ok(value)
        })
    }

    /// Server-side apply (see the `apply` module): applies, creating the object if it does
    /// not exist (then `true`, for a 201). With `dryRun=All`, answers with the result and
    /// stores nothing.
    pub(crate) fn store_apply(
        &self,
        target: &Target,
        body: &[u8],
        options: &ApplyOptions,
        status: bool,
    ) -> ApiResult<(Value, bool)> {
        let rt = self.rt(target);
        let applied = apply::parse_body(body)?;
        let gvk = format!("{}/{}, Kind={}", rt.group, rt.version, rt.kind);
        if let Some(err) = typed_fields::apply_error(&applied, &self.applied_fields(&rt), &gvk) {
            return Err(err);
        }
        let name = target.name.as_deref().unwrap_or_default();
        if let Some(body_name) = applied["metadata"]["name"].as_str()
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        // A built-in kind's lists merge by its Go types' table, a custom resource's by its
        // CRD's schema (a kind registered without a CRD has none: its lists are atomic).
        let schema = match rt.is_builtin() {
            true => None,
            false => self.strategy(&rt).structural_schema(&rt),
        };
        let api_version = rt.api_version();
        let to = ApplyTo {
            api_version: &api_version,
            status,
            has_status: rt.status_subresource,
            root: match rt.is_builtin() {
                true => Node::builtin(),
                false => Node::custom(schema.as_deref()),
            },
        };
        let run = |live: Option<&Value>| {
            let mut applied = applied.clone();
            applied["metadata"]["name"] = json!(name);
            apply::apply(live, &applied, options, &to, &now())
        };
        let current = match self.get(target) {
            Ok(current) => Some(current.value()),
            Err(e) if e.code == StatusCode::NOT_FOUND && !status => None,
            Err(e) => return Err(e),
        };
        match current {
            None => {
                let object = run(None)?;
                if options.dry_run {
                    return Ok((object, true));
                }
                let collection = Target { name: None, ..target.clone() };
                Ok((self.store_create(&collection, object, false)?.value(), true))
            }
            Some(current) if options.dry_run => Ok((run(Some(&current))?, false)),
            Some(_) => {
                Ok((self.modify(target, status, false, |live| run(Some(live)))?.value(), false))
            }
        }
    }

    /// GET of `/scale`.
    pub(crate) fn scale(&self, target: &Target) -> ApiResult<Value> {
        Ok(crate::registry::scale::scale_of(&self.get(target)?.value()))
    }

    /// A write of `/scale`: `change` turns the current `Scale` into the written one, whose
    /// `spec.replicas` becomes the object's. Returns the new `Scale`; `dry_run` stores nothing.
    pub(crate) fn store_scale(
        &self,
        target: &Target,
        change: impl FnOnce(&Value) -> ApiResult<Value>,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let rt = self.rt(target);
        let object = self.modify(target, false, dry_run, |current| {
            let written = change(&crate::registry::scale::scale_of(current))?;
            let stale = written["metadata"]["resourceVersion"]
                .as_str()
                .is_some_and(|rv| !rv.is_empty() && rv != current["metadata"]["resourceVersion"]);
            if stale {
                return Err(ApiError::conflict(&rt.plural, target.name.as_deref().unwrap_or("")));
            }
            let replicas = crate::registry::scale::replicas_of(&written).map_err(|message| {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", message)
            })?;
            let mut new = current.clone();
            match new.get_mut("spec") {
                Some(Value::Object(spec)) => _ = spec.insert("replicas".into(), json!(replicas)),
                // A stored object's spec is an object or absent (see `check_type`).
                _ => new["spec"] = json!({ "replicas": replicas }),
            }
            Ok(new)
        })?;
        Ok(crate::registry::scale::scale_of(&object.value()))
    }

    /// The shared read-modify-write of update and patch.
    fn modify(
        &self,
        target: &Target,
        status: bool,
        dry_run: bool,
        change: impl FnOnce(&Value) -> ApiResult<Value>,
    ) -> ApiResult<Arc<StoredObject>> {
        let rt = self.rt(target).clone();
        let strategy = self.strategy(&rt);
        let fields = self.typed_fields(&rt);
        let name = target.name.clone().unwrap_or_default();
        let key = Self::key(target, &name);
        let modified = self.store.write_as(dry_run, |txn| {
            let current = txn.get(target.resource, &key).ok_or_else(|| ApiError::not_found(&rt.plural, &name))?;
            let old = current.value();
            let mut new = change(&old)?;
            check_type(&rt, &fields, strategy, &mut new)?;
            strategy.prepare_update(&rt, &mut new)?;
            let body_name = new["metadata"]["name"].as_str().unwrap_or_default();
            if body_name.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({name} based on URL) was undeterminable: name must be provided"
                )));
            }
            if body_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
            if let Some(rv) = new["metadata"]["resourceVersion"].as_str().filter(|rv| !rv.is_empty())
                && rv.parse::<u64>().ok() != Some(current.rv)
            {
                return Err(ApiError::conflict(&rt.plural, &name));
            }
            if status && rt.is_builtin() {
                // A built-in kind's status subresource keeps the old spec (everything but
                // metadata and status) and owner references; labels and annotations change.
                let mut kept = old.clone();
                kept["status"] = new.get("status").cloned().unwrap_or(Value::Null);
                kept["metadata"] = new["metadata"].clone();
                match old["metadata"].get("ownerReferences") {
                    Some(refs) => kept["metadata"]["ownerReferences"] = refs.clone(),
                    None => {
                        if let Some(m) = kept["metadata"].as_object_mut() {
                            m.remove("ownerReferences");
                        }
                    }
                }
                new = kept;
            } else if status {
                // A custom resource's status subresource changes status and nothing else but
                // managedFields, which record who applied it (the real server's status
                // strategy keeps them too); a write that sends none keeps the old ones.
                let mut only_status = old.clone();
                only_status["status"] = new.get("status").cloned().unwrap_or(Value::Null);
                if let Some(fields) = new["metadata"].get("managedFields") {
                    only_status["metadata"]["managedFields"] = fields.clone();
                }
                new = only_status;
            } else if rt.status_subresource {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            // Fields the server owns.
            for field in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace", "name", "generation"] {
                match old["metadata"].get(field) {
                    Some(v) => new["metadata"][field] = v.clone(),
                    None => {
                        if let Some(m) = new["metadata"].as_object_mut() {
                            m.remove(field);
                        }
                    }
                }
            }
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
            if new == old {
                return Ok((current, false)); // a no-op writes nothing and keeps the version
            }
            if spec_of(&new) != spec_of(&old) {
                let generation = old["metadata"]["generation"].as_i64().unwrap_or(0);
                new["metadata"]["generation"] = json!(generation + 1);
            }
            strategy.validate_update(&name, &old, &new, status)?;
            if old["metadata"].get("deletionTimestamp").is_some() && !has_finalizers(&new) {
                return Ok((txn.remove(target.resource, &key, new), true));
            }
            Ok((txn.put(target.resource, &key, new), false))
        });
        let (object, removed) = modified?;
        if !dry_run {
            match removed {
                true => strategy.removed(&self.store, &object.value()),
                false => strategy.stored(&self.store, target.resource, &object.value()),
            }
        }
        Ok(object)
    }
}
