//! Layer 1, the registry: kube-apiserver's `pkg/registry`. It imports `model`, `storage`,
//! `merge` and itself, never admission, HTTP or the server, and offers [`Registry`] (the REST
//! verbs on the store), the `Strategy` trait and one strategy per kind with rules of its own
//! (`core`, `apiextensions`, `admissionregistration`), `/scale` and the garbage collector.
//!
//! REST semantics on top of the store, as kube-apiserver's generic registry applies them:
//! metadata on create, optimistic concurrency on update, generation, the status
//! subresource, finalizers on delete.

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::StatusCode;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::merge::apply::{self, ApplyOptions, ApplyTo};
use crate::merge::list_types::Node;
use crate::merge::patch::{self, PatchType};
use crate::model::ids::{new_uid, now};
use crate::model::resources::ResourceType;
use crate::model::shapes::{self, Malformed};
use crate::model::status::{ApiError, ApiResult};
use crate::model::typed_fields::{self, TypedField};
use crate::storage::store::{Store, StoredObject, Txn, object_key};

pub(crate) mod admissionregistration;
pub(crate) mod apiextensions;
pub(crate) mod core;
pub(crate) mod gc;
pub(crate) mod scale;
pub(crate) mod stages;
pub(crate) mod writes;

use stages::{Admission, Admit};

/// Where a request points: a resource type, and a namespace and name where given.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) resource: usize,
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
}

/// Preconditions and options of a delete.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeleteOptions {
    #[serde(default)]
    preconditions: Option<Preconditions>,
    /// `["All"]` for a dry run, as kube-client sends it (the query's `dryRun` works too).
    #[serde(default)]
    dry_run: Vec<String>,
    /// `Foreground`, `Background` or `Orphan` (the query's `propagationPolicy` works too).
    #[serde(default)]
    propagation_policy: Option<String>,
    /// The deprecated form of `Orphan`.
    #[serde(default)]
    orphan_dependents: Option<bool>,
}

/// What a delete does with the object's dependents (`propagationPolicy`), which the garbage
/// collector carries out (see the `gc` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Propagation {
    /// The object goes at once; the collector deletes its dependents afterwards.
    Background,
    /// The object stays, with the `foregroundDeletion` finalizer, until the collector has
    /// deleted its dependents that block it (`blockOwnerDeletion`).
    Foreground,
    /// The object stays, with the `orphan` finalizer, until the collector has removed it from
    /// its dependents' `ownerReferences`.
    Orphan,
}

impl DeleteOptions {
    /// A delete's body: its options, or the defaults when it is empty.
    pub(crate) fn parse(body: &[u8]) -> ApiResult<Self> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self::default());
        }
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the body of the request was in an unknown format: {e}"))
        })
    }

    /// Whether the options ask for a dry run.
    pub(crate) fn dry_run(&self) -> bool {
        self.dry_run.iter().any(|d| d == "All")
    }
}

/// The real server's 422 for a delete's `propagationPolicy`.
fn invalid_policy(reason: &str, cause: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        format!("DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: {cause}"),
    )
    .with_cause(reason, cause, "propagationPolicy")
}

/// The finalizer of a foreground delete.
pub(crate) const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
/// The finalizer of an orphaning delete.
pub(crate) const ORPHAN_FINALIZER: &str = "orphan";

impl Propagation {
    /// The policy of a delete's options (its body) or query; `None` when neither sets one.
    /// An unknown policy, or one given both ways, is 422 with the real server's message.
    fn parse(options: &DeleteOptions, query: Option<&str>) -> ApiResult<Option<Self>> {
        let policy = options.propagation_policy.as_deref().or(query);
        match (policy, options.orphan_dependents) {
            (Some(policy), Some(_)) => Err(invalid_policy(
                "FieldValueInvalid",
                &format!(
                    "Invalid value: \"{policy}\": orphanDependents and deletionPropagation \
                     cannot be both set"
                ),
            )),
            (None, Some(true)) => Ok(Some(Self::Orphan)),
            (None, Some(false)) => Ok(Some(Self::Background)),
            (None, None) => Ok(None),
            (Some("Foreground"), None) => Ok(Some(Self::Foreground)),
            (Some("Background"), None) => Ok(Some(Self::Background)),
            (Some("Orphan"), None) => Ok(Some(Self::Orphan)),
            (Some(other), None) => Err(invalid_policy(
                "FieldValueNotSupported",
                &format!(
                    "Unsupported value: \"{other}\": supported values: \"Foreground\", \
                     \"Background\", \"Orphan\", \"nil\""
                ),
            )),
        }
    }

    /// The finalizer that holds the object while the collector works, if any.
    fn finalizer(self) -> Option<&'static str> {
        match self {
            Self::Background => None,
            Self::Foreground => Some(FOREGROUND_FINALIZER),
            Self::Orphan => Some(ORPHAN_FINALIZER),
        }
    }
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Preconditions {
    uid: Option<String>,
    resource_version: Option<String>,
}

/// Five characters from the alphabet Kubernetes uses for `generateName` suffixes.
fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    use std::hash::{BuildHasher, RandomState};
    let mut x = RandomState::new().hash_one(Timestamp::now().as_nanosecond());
    (0..5)
        .map(|_| {
            let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
            x /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case \
    alphanumeric characters or '-', and must start and end with an alphanumeric character \
    (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
    alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
    (e.g. 'example.com', regex used for validation is \
    '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// Why `name` is not a valid name for `rt`, if it is not.
fn invalid_name(rt: &ResourceType, name: &str) -> Option<String> {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ends_ok = name.starts_with(alnum) && name.ends_with(alnum);
    if rt.name_is_label() {
        if name.len() > 63 {
            return Some("must be no more than 63 characters".into());
        }
        if !ends_ok || !name.chars().all(|c| alnum(c) || c == '-') {
            return Some(DNS1123_LABEL_MSG.into());
        }
    } else {
        if name.len() > 253 {
            return Some("must be no more than 253 characters".into());
        }
        if !ends_ok || !name.chars().all(|c| alnum(c) || c == '-' || c == '.') {
            return Some(DNS1123_SUBDOMAIN_MSG.into());
        }
    }
    None
}

/// The 422 for an object of `rt` named `name`, as the real server words it: the kind
/// qualified by its group unless core (`Deployment.apps "web" is invalid: …`).
fn invalid_object(rt: &ResourceType, name: &str, cause: &str) -> ApiError {
    let mut err = ApiError::invalid(&rt.kind, name, cause);
    if !rt.group.is_empty() {
        err.message = format!("{}.{} \"{name}\" is invalid: {cause}", rt.kind, rt.group);
    }
    err
}

/// The body of a create or update of `kind`: a JSON object nested within the limits of the
/// `shapes` module.
pub(crate) fn parse_body(kind: &str, body: &[u8]) -> ApiResult<Value> {
    let value: Value = shapes::from_slice(body).map_err(|e| match e {
        Malformed::TooDeep => shapes::too_deep_body(kind, body),
        Malformed::Syntax(e) => {
            ApiError::bad_request(format!("the body of the request was in an unknown format: {e}"))
        }
    })?;
    if !value.is_object() {
        return Err(ApiError::bad_request("the body of the request must be a JSON object"));
    }
    Ok(value)
}

/// Sets kind and apiVersion, refusing a body that names another type or holds one of
/// `fields` (the kind's structs, maps and lists) with another JSON type; then the kind's
/// `strategy` decodes it (`Strategy::decode`).
fn check_type(
    rt: &ResourceType,
    fields: &[TypedField],
    strategy: Option<&Arc<dyn Strategy>>,
    value: &mut Value,
) -> ApiResult<()> {
    if !value.is_object() {
        return Err(ApiError::bad_request("the body of the request must be a JSON object"));
    }
    let api_version = rt.api_version();
    if let Some(v) = value.get("apiVersion").and_then(Value::as_str)
        && v != api_version
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({v}) does not match the expected API version ({api_version})"
        )));
    }
    if let Some(k) = value.get("kind").and_then(Value::as_str)
        && k != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    if let Some(error) = typed_fields::decode_error(value, fields) {
        return Err(shapes::cannot_be_handled(&rt.kind, &api_version, &error));
    }
    shapes::check_depth(value)?;
    value["apiVersion"] = json!(api_version);
    value["kind"] = json!(rt.kind);
    if !value["metadata"].is_object() {
        value["metadata"] = json!({});
    }
    drop_empty_metadata(&mut value["metadata"]);
    strategy.map_or(Ok(()), |strategy| strategy.decode(value))
}

/// Drops the metadata lists and maps that are empty (or null), as the real server's typed
/// `ObjectMeta` (`omitempty`) does: `"finalizers": []` is stored and served as no finalizers,
/// which JSON patches that `test` the field against `null` rely on.
fn drop_empty_metadata(meta: &mut Value) {
    let Some(meta) = meta.as_object_mut() else { return };
    for field in ["labels", "annotations", "finalizers", "ownerReferences", "managedFields"] {
        let empty = match meta.get(field) {
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            Some(Value::Null) => true,
            _ => false,
        };
        if empty {
            meta.remove(field);
        }
    }
}

/// Everything but metadata and status: what a change must touch to bump `generation`.
fn spec_of(value: &Value) -> Vec<(&String, &Value)> {
    value
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "kind" | "apiVersion")
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn has_finalizers(value: &Value) -> bool {
    value["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty())
}

/// The registry: REST verbs over the store. The verbs a request makes are in `writes`
/// (admitted, at any served version); the `store_*` ones here work a write out and store it
/// under the store's lock, called by those and by the server itself.
pub(crate) struct Registry {
    pub(crate) store: Store,
    /// What a kind adds to the generic semantics, by group and plural.
    strategies: HashMap<(String, String), Arc<dyn Strategy>>,
    /// What every kind a CustomResourceDefinition defines adds, if anything.
    custom_resources: Option<Arc<dyn Strategy>>,
    /// What admits writes, if anything does.
    admission: Option<Arc<dyn Admission>>,
}

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

impl Registry {
    /// A registry over `store`, with no kind of special rules yet.
    pub(crate) fn new(store: Store) -> Self {
        Self { store, strategies: HashMap::new(), custom_resources: None, admission: None }
    }

    /// Sends writes through `admission` before they are stored.
    pub(crate) fn with_admission(mut self, admission: Arc<dyn Admission>) -> Self {
        self.admission = Some(admission);
        self
    }

    /// What admits a write to `rt` now, if anything does.
    fn admitting(&self, rt: &ResourceType) -> Option<Box<dyn Admit + '_>> {
        self.admission.as_ref()?.start(&self.store, rt)
    }

    /// Gives the kind `group`/`plural` its own rules.
    pub(crate) fn with_strategy(
        mut self,
        group: &str,
        plural: &str,
        strategy: Arc<dyn Strategy>,
    ) -> Self {
        self.strategies.insert((group.to_owned(), plural.to_owned()), strategy);
        self
    }

    /// Gives every kind a CustomResourceDefinition defines the rules of `strategy`.
    pub(crate) fn with_custom_resource_strategy(mut self, strategy: Arc<dyn Strategy>) -> Self {
        self.custom_resources = Some(strategy);
        self
    }

    fn strategy(&self, rt: &ResourceType) -> Option<&Arc<dyn Strategy>> {
        let custom = || self.custom_resources.as_ref().filter(|_| rt.from_definition);
        self.strategies.get(&(rt.group.clone(), rt.plural.clone())).or_else(custom)
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
        fields.extend(self.strategy(rt).map(|s| own(s.as_ref())).unwrap_or_default());
        fields
    }

    pub(crate) fn rt(&self, target: &Target) -> Arc<ResourceType> {
        self.store.resource_type(target.resource)
    }

    fn namespace_id(&self) -> usize {
        self.store.resource("", "v1", "namespaces").expect("namespaces are built in")
    }

    fn key(target: &Target, name: &str) -> String {
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
        check_type(&rt, &self.typed_fields(&rt), self.strategy(&rt), &mut value)?;
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
        if let Some(why) = invalid_name(&rt, &name) {
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
        if rt.is_pod() {
            // No scheduler or kubelet here: a new pod is Pending, as on a bare apiserver.
            value["status"] = json!({ "phase": "Pending" });
        } else if rt.is_namespace() {
            value["status"] = json!({ "phase": "Active" });
        }
        let strategy = self.strategy(&rt);
        if let Some(strategy) = strategy {
            strategy.validate_create(&rt, &mut value)?;
        }
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
        if let Some(strategy) = strategy
            && !dry_run
        {
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
            false => self.strategy(&rt).and_then(|s| s.structural_schema(&rt)),
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
            if let Some(strategy) = strategy {
                strategy.prepare_update(&rt, &mut new)?;
            }
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
            if let Some(strategy) = strategy {
                strategy.validate_update(&name, &old, &new, status)?;
            }
            if old["metadata"].get("deletionTimestamp").is_some() && !has_finalizers(&new) {
                return Ok((txn.remove(target.resource, &key, new), true));
            }
            Ok((txn.put(target.resource, &key, new), false))
        });
        let (object, removed) = modified?;
        if let Some(strategy) = strategy
            && !dry_run
        {
            match removed {
                true => strategy.removed(&self.store, &object.value()),
                false => strategy.stored(&self.store, target.resource, &object.value()),
            }
        }
        Ok(object)
    }

    /// Deletes one object: marks it for deletion while it has finalizers, removes it
    /// otherwise. Deleting a namespace deletes what it holds.
    /// With `dry_run` (or the options' own), answers what it would do and deletes nothing.
    /// `policy` is the query's `propagationPolicy`, if any (the options' wins).
    pub(crate) fn store_delete(
        &self,
        target: &Target,
        options: &DeleteOptions,
        policy: Option<&str>,
        dry_run: bool,
    ) -> ApiResult<Deletion> {
        let dry_run = dry_run || options.dry_run();
        let propagation = Propagation::parse(options, policy)?;
        let rt = self.rt(target).clone();
        let name = target.name.clone().unwrap_or_default();
        let key = Self::key(target, &name);
        let deletion = self.store.write_as(dry_run, |txn| {
            let current = txn
                .get(target.resource, &key)
                .ok_or_else(|| ApiError::not_found(&rt.plural, &name))?;
            let value = current.value();
            if let Some(pre) = &options.preconditions {
                let uid_ok = pre
                    .uid
                    .as_ref()
                    .is_none_or(|u| value["metadata"]["uid"].as_str() == Some(u.as_str()));
                let rv_ok = pre
                    .resource_version
                    .as_ref()
                    .is_none_or(|rv| rv.parse::<u64>().ok() == Some(current.rv));
                if !uid_ok || !rv_ok {
                    return Err(ApiError::conflict(&rt.plural, &name));
                }
            }
            Ok(delete_in(txn, &self.store, &rt, target.resource, &key, current, propagation))
        })?;
        if let Some(strategy) = self.strategy(&rt)
            && deletion.removed
            && !dry_run
        {
            strategy.removed(&self.store, &deletion.object.value());
        }
        Ok(deletion)
    }
}

/// What a DELETE did.
pub(crate) struct Deletion {
    /// The object: its final state if removed, else as marked for deletion.
    pub(crate) object: Arc<StoredObject>,
    /// Whether it is gone (rather than held by finalizers).
    pub(crate) removed: bool,
}

/// Deletes `current` (stored under `key` of `resource`, of type `rt`) within `txn`, as a
/// DELETE does, and as the garbage collector deletes a dependent: an object with finalizers
/// (or given one by `propagation`) is marked with a deletionTimestamp and stays; a pod is
/// marked, then removed; anything else is removed. Deleting a namespace removes what it holds.
pub(crate) fn delete_in(
    txn: &mut Txn<'_>,
    store: &Store,
    rt: &ResourceType,
    resource: usize,
    key: &str,
    current: Arc<StoredObject>,
    propagation: Option<Propagation>,
) -> Deletion {
    let mut value = current.value();
    let marked = value["metadata"].get("deletionTimestamp").is_some();
    if let Some(finalizer) = propagation.and_then(Propagation::finalizer).filter(|_| !marked) {
        add_finalizer(&mut value, finalizer);
    }
    // Pods are deleted gracefully: the real server first writes the deletion timestamp (grace
    // period 0 for a pod no node runs), which watchers see as MODIFIED, then removes the pod.
    // Objects with finalizers stay, marked.
    if !marked && (has_finalizers(&value) || rt.is_pod()) {
        value["metadata"]["deletionTimestamp"] = json!(now());
        value["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        let generation = value["metadata"]["generation"].as_i64().unwrap_or(0);
        value["metadata"]["generation"] = json!(generation + 1);
        let marked = txn.put(resource, key, value.clone());
        if has_finalizers(&value) {
            return Deletion { object: marked, removed: false };
        }
        // `value` is the marked state; the removal stamps its own resourceVersion.
    } else if has_finalizers(&value) {
        return Deletion { object: current, removed: false };
    }
    if rt.is_namespace() {
        delete_namespace_contents(txn, store, &current.fields.name);
    }
    Deletion { object: txn.remove(resource, key, value), removed: true }
}

/// Adds `finalizer` to the object's finalizers, unless it is there.
fn add_finalizer(value: &mut Value, finalizer: &str) {
    let finalizers = &mut value["metadata"]["finalizers"];
    if !finalizers.is_array() {
        *finalizers = json!([]);
    }
    let list = finalizers.as_array_mut().expect("an array");
    if !list.iter().any(|f| f == finalizer) {
        list.push(json!(finalizer));
    }
}

/// Removes every namespaced object in namespace `ns` (there is no namespace controller here).
fn delete_namespace_contents(txn: &mut Txn<'_>, store: &Store, ns: &str) {
    for (id, rt) in store.served_types() {
        if !rt.namespaced {
            continue;
        }
        for object in txn.list(id, Some(ns)) {
            let key = object_key(Some(ns), &object.fields.name);
            txn.remove(id, &key, object.value());
        }
    }
}
