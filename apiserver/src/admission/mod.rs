//! Admission webhooks (`admissionregistration.k8s.io/v1`), called as the real server calls
//! them, so that an operator's webhooks are tested without a cluster. They are the
//! registry's admission stage ([`WebhookAdmission`], through the traits of
//! `registry::stages`): the registry works a write out, hands it here as a typed write, and
//! stores what comes back (see `registry::writes`).
//!
//! Contract:
//! - `ValidatingWebhookConfiguration` and `MutatingWebhookConfiguration` are served,
//!   defaulted and validated as v1.36 does it (see `registry::admissionregistration`); their
//!   own writes, and those of every other kind of `admissionregistration.k8s.io` (the
//!   admission policies, a kind a user registers there), pass no webhook (their strategies,
//!   and the group's, are not admitted).
//! - A create, update, patch (merge, JSON, strategic, apply), `/status` write or delete of any
//!   other kind goes to the webhooks whose rules and selectors match it (see `hooks`):
//!   first the mutating ones, in configuration-name order, each seeing the object as the
//!   ones before left it (a JSON patch), then once more those with `reinvocationPolicy:
//!   IfNeeded` that a later one's change followed; then the validating ones. The object they
//!   see is the one the write would store, but for a create's server-set fields (uid,
//!   creationTimestamp, generation, resourceVersion), as on the real server.
//! - The written object is the admitted one, written only if the object is still the one
//!   admitted (its resourceVersion); when another write came between, a patch or apply is
//!   admitted and written again (as the real server retries), an update with its own
//!   resourceVersion is a 409 (the registry's part: `registry::writes`).
//! - A denial is the webhook's status, at least 400, its message prefixed with
//!   `admission webhook "NAME" denied the request`; a webhook that cannot be called (refused,
//!   timed out, an untrusted certificate, an invalid answer) fails the write with 500
//!   `Internal error occurred: failed calling webhook "NAME": …` under `failurePolicy: Fail`
//!   and is skipped under `Ignore`. Warnings reach the client as `Warning` headers.
//! - `dryRun=All` requests reach the webhooks with `dryRun: true` (v1 allows only
//!   `sideEffects` `None` and `NoneOnDryRun`, both safe to call).
//!
//! - A write at a CRD version other than the storage version goes to the webhooks whose
//!   rules name that version, the objects converted to it, and under `matchPolicy:
//!   Equivalent` to those whose rules name the storage version, at that version (see
//!   `hooks`).
//!
//! - A `/scale` write is admitted as an `autoscaling/v1` `Scale` (subresource `scale`); a
//!   delete-collection as a delete of each object it selects, all before any is deleted (the
//!   real server deletes them one by one, so those before a denial are gone; here a denial
//!   deletes none).
//!
//! Not done: `matchConditions` (CEL) are not evaluated (a webhook with them is called as if
//! they held); `service` references cannot be called (a failure, as for an unreachable
//! URL); `userInfo` is always `system:admin` in `system:masters` (this server has no
//! authentication).

mod call;
mod hooks;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::model::resources::{ResourceType, is_builtin_group};
use crate::model::shapes;
use crate::model::status::{ApiError, ApiResult};
use crate::registry::stages::{Admission, Admit, Admitted, Converter, Subresource, Write};
use crate::storage::store::Store;
use call::Answer;
use hooks::{Attributes, Hook};

/// The webhooks as the registry's admission stage: a write goes to those stored when its
/// request came (the registry asks for none where the kind or its group is not admitted: no
/// kind of `admissionregistration.k8s.io`, see `Strategy::admitted`).
pub(crate) struct WebhookAdmission;

impl Admission for WebhookAdmission {
    fn start<'s>(&self, store: &'s Store, _: &ResourceType) -> Option<Box<dyn Admit + 's>> {
        configured(store).map(|webhooks| Box::new(webhooks) as Box<dyn Admit + 's>)
    }
}

impl Admit for Webhooks<'_> {
    fn admit<'a>(
        &'a self,
        write: &'a Write<'a>,
        object: Option<Value>,
    ) -> BoxFuture<'a, ApiResult<Admitted>> {
        Box::pin(async move {
            let attributes = attributes_of(write);
            // A write made at another version of a CRD: its own attributes, for the webhooks
            // whose rules name that version.
            let at_version = write.requested.map(|version| {
                let attributes = Attributes {
                    version: version.requested.version.clone(),
                    kind: version.requested.kind.clone(),
                    ..attributes.clone()
                };
                (attributes, &*version.converter)
            });
            let requested = at_version
                .as_ref()
                .map(|(attributes, converter)| Requested { attributes, converter: *converter });
            let options = options_of(write);
            self.admit_with(&attributes, requested, object, write.old, write.dry_run, options).await
        })
    }
}

/// The attributes of `write` at the storage version (a `/scale` write's kind is
/// `autoscaling/v1` `Scale`).
fn attributes_of(write: &Write<'_>) -> Attributes {
    let rt = write.rt;
    let scale = write.subresource == Subresource::Scale;
    Attributes {
        operation: write.operation,
        group: rt.group.clone(),
        version: rt.version.clone(),
        kind: if scale { "Scale".into() } else { rt.kind.clone() },
        kind_group_version: scale.then(|| ("autoscaling".into(), "v1".into())),
        resource: rt.plural.clone(),
        subresource: write.subresource.as_str().into(),
        namespaced: rt.namespaced,
        namespace: write.namespace.map(str::to_owned),
        name: write.name.to_owned(),
    }
}

/// The `options` of an admission request.
fn options_of(write: &Write<'_>) -> Value {
    let kind = write.operation.options_kind();
    let mut review = json!({ "kind": kind, "apiVersion": "meta.k8s.io/v1" });
    if let Some(manager) = write.field_manager {
        review["fieldManager"] = json!(manager);
    }
    if write.dry_run {
        review["dryRun"] = json!(["All"]);
    }
    review
}

/// The stored webhooks, read once for a request; `None` when there are none (writes skip
/// admission then).
fn configured(store: &Store) -> Option<Webhooks<'_>> {
    let (mutating, validating) = hooks::stored(store);
    let none = mutating.is_empty() && validating.is_empty();
    (!none).then_some(Webhooks { store, mutating, validating })
}

/// The webhooks a request is admitted by, as stored when it came.
struct Webhooks<'a> {
    store: &'a Store,
    mutating: Vec<Hook>,
    validating: Vec<Hook>,
}

/// A write at a CRD version other than the storage version: that version's attributes,
/// and how to convert to it.
struct Requested<'a> {
    attributes: &'a Attributes,
    converter: &'a dyn Converter,
}

/// Which version a webhook is called at.
#[derive(Clone, Copy)]
enum At {
    /// The version the write was made at (for a view request, converted to it).
    Requested,
    /// The storage version, an equivalent of the requested one (`matchPolicy: Equivalent`).
    Storage,
}

/// The request to one webhook, and the state of the chain.
struct Chain<'a> {
    store: &'a Store,
    /// The storage version's attributes.
    attributes: &'a Attributes,
    requested: Option<Requested<'a>>,
    old: Option<&'a Value>,
    dry_run: bool,
    options: Value,
    uid: String,
    warnings: Vec<String>,
}

impl Chain<'_> {
    /// The attributes the request was made with.
    fn request_attributes(&self) -> &Attributes {
        self.requested.as_ref().map_or(self.attributes, |r| r.attributes)
    }

    /// Whether `hook` is called, and at which version: the requested one if a rule names
    /// it, else the storage one if a rule names that and the policy is `Equivalent`.
    fn at(&self, hook: &Hook, object: Option<&Value>) -> Option<At> {
        let matches = |a: &Attributes| hook.matches(self.store, a, object, self.old);
        if matches(self.request_attributes()) {
            return Some(At::Requested);
        }
        (self.requested.is_some() && hook.equivalent && matches(self.attributes))
            .then_some(At::Storage)
    }

    fn request(&self, at: At, object: Option<&Value>, old: Option<&Value>) -> Value {
        let a = match at {
            At::Requested => self.request_attributes(),
            At::Storage => self.attributes,
        };
        let r = self.request_attributes();
        let kind = |a: &Attributes| match &a.kind_group_version {
            Some((group, version)) => json!({ "group": group, "version": version, "kind": a.kind }),
            None => json!({ "group": a.group, "version": a.version, "kind": a.kind }),
        };
        let resource = |a: &Attributes| json!({ "group": a.group, "version": a.version, "resource": a.resource });
        let mut request = json!({
            "uid": self.uid,
            "kind": kind(a), "resource": resource(a),
            "requestKind": kind(r), "requestResource": resource(r),
            "name": a.name,
            "operation": a.operation.as_str(),
            "userInfo": { "username": "system:admin", "groups": ["system:masters", "system:authenticated"] },
            "object": object.cloned().unwrap_or(Value::Null),
            "oldObject": old.cloned().unwrap_or(Value::Null),
            "dryRun": self.dry_run,
            "options": self.options,
        });
        if !a.subresource.is_empty() {
            request["subResource"] = json!(a.subresource);
            request["requestSubResource"] = json!(a.subresource);
        }
        if let Some(namespace) = &a.namespace {
            request["namespace"] = json!(namespace);
        }
        request
    }

    /// Calls `hook` at `at` on `object` (at the storage version): the object as its patch
    /// left it (mutating webhooks), or the error that ends the write. A call that fails under
    /// `Ignore` is as an answer without a patch.
    async fn call(
        &mut self,
        hook: &Hook,
        at: At,
        object: Option<&Value>,
    ) -> ApiResult<Option<Value>> {
        // At the requested version of a view: the objects converted to it, and back.
        let view = match (at, &self.requested) {
            (At::Requested, Some(r)) => Some((r.converter, r.attributes.api_version())),
            _ => None,
        };
        let (object, old) = match &view {
            Some((converter, version)) => (
                convert(*converter, object, version).await?,
                convert(*converter, self.old, version).await?,
            ),
            None => (object.cloned(), self.old.cloned()),
        };
        let request = self.request(at, object.as_ref(), old.as_ref());
        let patch = match call::call(hook, &request).await {
            Ok(Answer::Allowed { patch, warnings }) => {
                self.warnings.extend(warnings);
                patch
            }
            Ok(Answer::Denied(err)) => return Err(err),
            Err(why) if hook.ignore_failure => {
                tracing::warn!(webhook = %hook.name, %why, "a webhook failed; ignored (failurePolicy Ignore)");
                None
            }
            Err(why) => {
                return Err(internal(format!("failed calling webhook {:?}: {why}", hook.name)));
            }
        };
        // A delete has no object to patch.
        let (Some(patch), Some(mut patched)) = (patch, object) else { return Ok(None) };
        apply_patch(hook, patch, &mut patched)?;
        check_patched(self.attributes, &patched)?;
        match &view {
            Some((converter, _)) => {
                Ok(Some(converter.convert_one(patched, &self.attributes.api_version()).await?))
            }
            None => Ok(Some(patched)),
        }
    }
}

/// `object` converted to `version`, if there is one.
async fn convert(
    converter: &dyn Converter,
    object: Option<&Value>,
    version: &str,
) -> ApiResult<Option<Value>> {
    match object {
        Some(object) => Ok(Some(converter.convert_one(object.clone(), version).await?)),
        None => Ok(None),
    }
}

/// The 500 of a webhook call that failed or answered what cannot be used, as the real server
/// words it: `Internal error occurred: <cause>`, the cause in `details.causes`.
fn internal(cause: String) -> ApiError {
    let mut err = ApiError::new(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        format!("Internal error occurred: {cause}"),
    );
    err.causes = Box::new([json!({ "message": cause })]);
    err
}

fn apply_patch(hook: &Hook, patch: Value, object: &mut Value) -> ApiResult<()> {
    let patch: json_patch::Patch = serde_json::from_value(patch).map_err(|e| {
        internal(format!("webhook {:?} returned an invalid JSON patch: {e}", hook.name))
    })?;
    // The real server's JSON patch library refuses to replace the whole object by a scalar.
    let scalar_root = |op: &json_patch::PatchOperation| match op {
        json_patch::PatchOperation::Replace(r) => {
            r.path.as_str().is_empty() && !(r.value.is_object() || r.value.is_array())
        }
        _ => false,
    };
    if patch.0.iter().any(scalar_root) {
        return Err(internal("replace operation value must be object or array: %!w(<nil>)".into()));
    }
    json_patch::patch(object, &patch)
        .map_err(|e| internal(format!("webhook {:?}'s JSON patch: {e}", hook.name)))?;
    shapes::check_depth(object).map_err(|_| {
        internal(format!("webhook {:?}'s JSON patch nests the object too deep", hook.name))
    })
}

/// Refuses an object a webhook's patch left that the real server could not decode as the
/// written kind: not an object, or with `metadata` (any kind), `spec` or `status` (built-in
/// kinds and `Scale`) that are not objects.
fn check_patched(attributes: &Attributes, patched: &Value) -> ApiResult<()> {
    if !patched.is_object() {
        return Err(internal(shapes::not_an_object(patched)));
    }
    let (group, version) = match &attributes.kind_group_version {
        Some((group, version)) => (group.as_str(), version.as_str()),
        None => (attributes.group.as_str(), attributes.version.as_str()),
    };
    let typed = is_builtin_group(group);
    // The whole API version: which of `spec` and `status` a kind has is read off its group's
    // schema.
    let api_version =
        if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    match shapes::unmarshal_error(patched, &attributes.kind, &api_version, typed) {
        Some(error) => Err(internal(error)),
        None => Ok(()),
    }
}

impl Webhooks<'_> {
    /// Sends a write to the webhooks that match it (see the module docs). `object` is the object
    /// the write would store (none for a delete), `old` the stored one (none for a create), both
    /// at the storage version; `requested`, for a write made at another version of a CRD.
    async fn admit_with(
        &self,
        attributes: &Attributes,
        requested: Option<Requested<'_>>,
        mut object: Option<Value>,
        old: Option<&Value>,
        dry_run: bool,
        options: Value,
    ) -> ApiResult<Admitted> {
        let (mutating, validating) = (&self.mutating, &self.validating);
        let mut chain = Chain {
            store: self.store,
            attributes,
            requested,
            old,
            dry_run,
            options,
            uid: crate::model::ids::new_uid(),
            warnings: Vec::new(),
        };
        // The mutating webhooks that match, each called; those with `IfNeeded` again once if a
        // later one changed the object.
        let matching: Vec<(&Hook, At)> =
            mutating.iter().filter_map(|h| Some((h, chain.at(h, object.as_ref())?))).collect();
        let mut again = vec![false; matching.len()];
        for (i, (hook, at)) in matching.iter().enumerate() {
            if mutate(&mut chain, hook, *at, &mut object).await? {
                (0..i).filter(|j| matching[*j].0.reinvoke).for_each(|j| again[j] = true);
            }
        }
        for ((hook, at), _) in matching.iter().zip(&again).filter(|(_, again)| **again) {
            mutate(&mut chain, hook, *at, &mut object).await?;
        }
        for hook in validating {
            if let Some(at) = chain.at(hook, object.as_ref()) {
                chain.call(hook, at, object.as_ref()).await?;
            }
        }
        Ok(Admitted { object, warnings: chain.warnings })
    }
}

/// One mutating call: `object` as its patch left it; whether it changed.
async fn mutate(
    chain: &mut Chain<'_>,
    hook: &Hook,
    at: At,
    object: &mut Option<Value>,
) -> ApiResult<bool> {
    let Some(patched) = chain.call(hook, at, object.as_ref()).await? else { return Ok(false) };
    let changed = object.as_ref() != Some(&patched);
    *object = Some(patched);
    Ok(changed)
}
