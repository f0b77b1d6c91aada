//! Admission webhooks (`admissionregistration.k8s.io/v1`), called as the real server calls
//! them, so that an operator's webhooks are tested without a cluster.
//!
//! Contract:
//! - `ValidatingWebhookConfiguration` and `MutatingWebhookConfiguration` are served,
//!   defaulted and validated as v1.36 does it (see [`configuration`]); their own writes pass
//!   no webhook.
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
//!   resourceVersion is a 409.
//! - A denial is the webhook's status, at least 400, its message prefixed with
//!   `admission webhook "NAME" denied the request`; a webhook that cannot be called (refused,
//!   timed out, an untrusted certificate, an invalid answer) fails the write with 500
//!   `Internal error occurred: failed calling webhook "NAME": …` under `failurePolicy: Fail`
//!   and is skipped under `Ignore`. Warnings reach the client as `Warning` headers.
//! - `dryRun=All` requests reach the webhooks with `dryRun: true` (v1 allows only
//!   `sideEffects` `None` and `NoneOnDryRun`, both safe to call).
//!
//! Not done: `/scale` writes and delete-collection pass no webhook; `matchConditions` (CEL)
//! are not evaluated (a webhook with them is called as if they held); `service` references
//! cannot be called (a failure, as for an unreachable URL); `userInfo` is always
//! `system:admin` in `system:masters` (this server has no authentication).

mod call;
pub(crate) mod configuration;
mod hooks;

use serde_json::{Value, json};

pub(crate) use hooks::Attributes;

use crate::status::{ApiError, ApiResult};
use crate::store::Store;
use call::Answer;
use hooks::Hook;

/// Whether any webhook configuration is stored (writes skip admission otherwise).
pub(crate) fn configured(store: &Store) -> bool {
    let (mutating, validating) = hooks::stored(store);
    !mutating.is_empty() || !validating.is_empty()
}

/// What admission made of a write: the object to write (none for a delete) and the warnings
/// of the webhooks, in order.
pub(crate) struct Admitted {
    pub(crate) object: Option<Value>,
    pub(crate) warnings: Vec<String>,
}

/// The request to one webhook, and the state of the chain.
struct Chain<'a> {
    store: &'a Store,
    attributes: &'a Attributes,
    old: Option<&'a Value>,
    dry_run: bool,
    options: Value,
    uid: String,
    warnings: Vec<String>,
}

impl Chain<'_> {
    fn request(&self, object: Option<&Value>) -> Value {
        let a = self.attributes;
        let kind = json!({ "group": a.group, "version": a.version, "kind": a.kind });
        let resource = json!({ "group": a.group, "version": a.version, "resource": a.resource });
        let mut request = json!({
            "uid": self.uid,
            "kind": kind, "resource": resource,
            "requestKind": kind, "requestResource": resource,
            "name": a.name,
            "operation": a.operation,
            "userInfo": { "username": "system:admin", "groups": ["system:masters", "system:authenticated"] },
            "object": object.cloned().unwrap_or(Value::Null),
            "oldObject": self.old.cloned().unwrap_or(Value::Null),
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

    /// Calls `hook` on `object`: its patch (mutating webhooks), or the error that ends the
    /// write. A call that fails under `Ignore` is as an answer without a patch.
    async fn call(&mut self, hook: &Hook, object: Option<&Value>) -> ApiResult<Option<Value>> {
        match call::call(hook, &self.request(object)).await {
            Ok(Answer::Allowed { patch, warnings }) => {
                self.warnings.extend(warnings);
                Ok(patch)
            }
            Ok(Answer::Denied(err)) => Err(err),
            Err(why) if hook.ignore_failure => {
                tracing::warn!(webhook = %hook.name, %why, "a webhook failed; ignored (failurePolicy Ignore)");
                Ok(None)
            }
            Err(why) => {
                let cause = format!("failed calling webhook {:?}: {why}", hook.name);
                let mut err = ApiError::new(
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    format!("Internal error occurred: {cause}"),
                );
                err.causes = Box::new([json!({ "message": cause })]);
                Err(err)
            }
        }
    }
}

/// Sends a write to the webhooks that match it (see the module docs). `object` is the object
/// the write would store (none for a delete), `old` the stored one (none for a create).
pub(crate) async fn admit(
    store: &Store,
    attributes: &Attributes,
    mut object: Option<Value>,
    old: Option<&Value>,
    dry_run: bool,
    options: Value,
) -> ApiResult<Admitted> {
    let (mutating, validating) = hooks::stored(store);
    let mut chain = Chain {
        store,
        attributes,
        old,
        dry_run,
        options,
        uid: crate::registry::new_uid(),
        warnings: Vec::new(),
    };
    // The mutating webhooks that match, each called; those with `IfNeeded` again once if a
    // later one changed the object.
    let matching: Vec<&Hook> = mutating
        .iter()
        .filter(|h| h.matches(chain.store, attributes, object.as_ref(), old))
        .collect();
    let mut again = vec![false; matching.len()];
    for (i, hook) in matching.iter().enumerate() {
        if mutate(&mut chain, hook, &mut object).await? {
            (0..i).filter(|j| matching[*j].reinvoke).for_each(|j| again[j] = true);
        }
    }
    for (hook, _) in matching.iter().zip(&again).filter(|(_, again)| **again) {
        mutate(&mut chain, hook, &mut object).await?;
    }
    for hook in validating.iter().filter(|h| h.matches(store, attributes, object.as_ref(), old)) {
        chain.call(hook, object.as_ref()).await?;
    }
    Ok(Admitted { object, warnings: chain.warnings })
}

/// One mutating call: applies its patch to `object`; whether it changed it.
async fn mutate(chain: &mut Chain<'_>, hook: &Hook, object: &mut Option<Value>) -> ApiResult<bool> {
    let Some(patch) = chain.call(hook, object.as_ref()).await? else { return Ok(false) };
    // A delete has no object to patch.
    let Some(current) = object.as_mut() else { return Ok(false) };
    let internal = |why: String| {
        ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            format!("Internal error occurred: {why}"),
        )
    };
    let patch: json_patch::Patch = serde_json::from_value(patch).map_err(|e| {
        internal(format!("webhook {:?} returned an invalid JSON patch: {e}", hook.name))
    })?;
    let before = current.clone();
    json_patch::patch(current, &patch)
        .map_err(|e| internal(format!("webhook {:?}'s JSON patch: {e}", hook.name)))?;
    Ok(*current != before)
}
