//! Deletes: the options and propagation policy a delete takes, the finalizers that hold an
//! object, [`Registry::store_delete`] and [`Registry::delete_in`], which the garbage
//! collector shares. What a kind adds (a pod's graceful delete, a namespace's contents going
//! with it) is its strategy's.

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::model::ids::now;
use crate::model::resources::ResourceType;
use crate::model::status::{ApiError, ApiResult};
use crate::storage::store::{StoredObject, Txn};

use super::generic::{Registry, Target};
use super::meta::has_finalizers;

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

/// What a DELETE did.
pub(crate) struct Deletion {
    /// The object: its final state if removed, else as marked for deletion.
    pub(crate) object: Arc<StoredObject>,
    /// Whether it is gone (rather than held by finalizers).
    pub(crate) removed: bool,
}

impl Registry {
    /// Deletes one object: marks it for deletion while it has finalizers, removes it
    /// otherwise (see [`delete_in`](Self::delete_in)).
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
            Ok(self.delete_in(txn, &rt, target.resource, &key, current, propagation))
        })?;
        if deletion.removed && !dry_run {
            self.strategy(&rt).removed(&self.store, &deletion.object.value());
        }
        Ok(deletion)
    }

    /// Deletes `current` (stored under `key` of `resource`, of type `rt`) within `txn`, as a
    /// DELETE does, and as the garbage collector deletes a dependent: an object with
    /// finalizers (or given one by `propagation`) is marked with a deletionTimestamp and
    /// stays; one of a kind deleted gracefully (`Strategy::graceful_delete`: pods) is marked,
    /// then removed; anything else is removed, with what its strategy removes with it
    /// (`Strategy::removing`: a namespace's contents).
    pub(crate) fn delete_in(
        &self,
        txn: &mut Txn<'_>,
        rt: &ResourceType,
        resource: usize,
        key: &str,
        current: Arc<StoredObject>,
        propagation: Option<Propagation>,
    ) -> Deletion {
        let strategy = self.strategy(rt);
        let mut value = current.value();
        let marked = value["metadata"].get("deletionTimestamp").is_some();
        if let Some(finalizer) = propagation.and_then(Propagation::finalizer).filter(|_| !marked) {
            add_finalizer(&mut value, finalizer);
        }
        // A graceful delete first writes the deletion timestamp (grace period 0 for a pod no
        // node runs), which watchers see as MODIFIED, then removes the object. Objects with
        // finalizers stay, marked.
        if !marked && (has_finalizers(&value) || strategy.graceful_delete()) {
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
        strategy.removing(txn, &self.store, &current);
        Deletion { object: txn.remove(resource, key, value), removed: true }
    }
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
