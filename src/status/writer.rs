//! [`ConditionWriter`]: the conditions one field manager writes on one object, applied
//! through `/status` with only that manager's conditions in the body.
//!
//! Under server-side apply a manager's apply states every field it owns: a condition it
//! applied before and leaves out is removed, and a condition it never applied is none of its
//! business. So the writer starts from the conditions the manager owns on the object as read:
//! the types its controller declares its own ([`owns`](ConditionWriter::owns)), and those its
//! `managedFields` entry names (`status.conditions` items, by `type`), with their values as
//! read. An object from an informer's cache has no `managedFields` (informers drop them), so
//! a controller that writes from its cache declares its types: otherwise an apply of one
//! condition removes the others it applied before.
//! [`set`](ConditionWriter::set) changes or adds one by apimachinery's rules (see
//! [`set_status_condition`]), [`remove`](ConditionWriter::remove) drops one; the apply sends
//! those and nothing else, so another writer's conditions stay its own, where the kind merges
//! `status.conditions` by `type` (built-in kinds do; a custom resource does when its CRD
//! declares `x-kubernetes-list-type: map` with `x-kubernetes-list-map-keys: [type]`).
//!
//! Where the list is atomic (a CRD that declares no list type), the list is one field: the
//! apply is forced, so it replaces the whole list, and another manager's conditions on it are
//! removed without a conflict. The writer does not guess at the schema; a CRD meant for two
//! writers declares the map.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube_client::api::{Patch, PatchParams};
use kube_client::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::apply::status_body;
use super::conditions::{
    ConditionFields, ConditionStatus, StatusCondition, find_status_condition,
    remove_status_condition, set_status_condition,
};

/// The conditions a field manager writes on one object's status.
///
/// Built from the object as read ([`ConditionWriter::new`]); the apply
/// ([`ConditionWriter::apply`]) is forced, as [`apply_status`](super::apply_status) is, so a
/// condition type this manager sets is its own even if another manager applied it before.
///
/// A manager's applies through `/status` are one set of fields: applying the conditions alone
/// removes the other status fields the same manager applied before. A controller that writes
/// more of the status puts [`conditions`](ConditionWriter::conditions) into the status it
/// applies with `apply_status` instead, in one apply.
///
/// ```no_run
/// # async fn demo(api: kube_client::Api<k8s_openapi::api::core::v1::Service>, service: k8s_openapi::api::core::v1::Service) -> Result<(), kube_client::Error> {
/// use ctrlkit::status::{ConditionStatus, ConditionWriter};
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
///
/// let mut writer = ConditionWriter::<Condition>::new(&service, "example.com/lb-controller")?
///     .owns(["example.com/LoadBalancerReady"]);
/// writer.set("example.com/LoadBalancerReady", ConditionStatus::True, "Provisioned", "");
/// writer.apply(&api, &service).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ConditionWriter<C> {
    field_manager: String,
    /// The object's `metadata.generation`: every condition set describes it.
    generation: Option<i64>,
    /// The object's `status.conditions` as read, whoever owns them.
    read: Vec<C>,
    /// What the apply sends: the manager's conditions, as read or as set since.
    owned: Vec<C>,
    /// The types the manager owned as read.
    owned_when_read: Vec<String>,
}

impl<C: StatusCondition> ConditionWriter<C> {
    /// The conditions `field_manager` owns on `object` (as read: from a cache, or a write's
    /// answer), by its `managedFields`; a cached object has none, so add the types the
    /// controller writes with [`owns`](Self::owns). An error if its `status.conditions` are
    /// not a list of `C`.
    pub fn new<K>(object: &K, field_manager: &str) -> Result<Self, kube_client::Error>
    where
        K: Resource + Serialize,
    {
        let value = serde_json::to_value(object).map_err(kube_client::Error::SerdeError)?;
        let read: Vec<C> = match &value["status"]["conditions"] {
            serde_json::Value::Null => Vec::new(),
            conditions => serde_json::from_value(conditions.clone())
                .map_err(kube_client::Error::SerdeError)?,
        };
        let types = owned_types(&value["metadata"]["managedFields"], field_manager);
        let owned: Vec<C> =
            read.iter().filter(|c| types.iter().any(|t| t == c.type_())).cloned().collect();
        let owned_when_read = owned.iter().map(|c| c.type_().to_owned()).collect();
        Ok(Self {
            field_manager: field_manager.to_owned(),
            generation: object.meta().generation,
            read,
            owned,
            owned_when_read,
        })
    }

    /// Declares `types` this manager's: each one on the object as read is applied again
    /// (unless [`remove`](Self::remove)d), whether or not its `managedFields` say so. A
    /// controller names every condition type it writes, so that an apply built from a cached
    /// object (no `managedFields`) keeps the ones it does not set this time.
    pub fn owns<I, S>(mut self, types: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for type_ in types {
            let type_ = type_.as_ref();
            if find_status_condition(&self.owned, type_).is_some() {
                continue;
            }
            if let Some(read) = find_status_condition(&self.read, type_) {
                self.owned.push(read.clone());
                self.owned_when_read.push(type_.to_owned());
            }
        }
        self
    }

    /// Sets the condition `type_`, now, as [`set_at`](Self::set_at) does.
    pub fn set(
        &mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> bool {
        self.set_at(type_, status, reason, message, Time(Timestamp::now()))
    }

    /// Sets the condition `type_` to `status`, `reason` and `message`, its
    /// `observedGeneration` the object's generation; its `lastTransitionTime` the one read
    /// while the status holds (whoever wrote it), `now` otherwise. Whether the condition
    /// differs from the one read.
    pub fn set_at(
        &mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
        now: Time,
    ) -> bool {
        // A condition read but not yet this manager's: its time counts, it becomes ours.
        if find_status_condition(&self.owned, type_).is_none()
            && let Some(read) = find_status_condition(&self.read, type_)
        {
            self.owned.push(read.clone());
        }
        let new = C::new(ConditionFields {
            type_,
            status,
            reason,
            message,
            observed_generation: self.generation,
            last_transition_time: now.clone(),
        });
        set_status_condition(&mut self.owned, new, now);
        let set = find_status_condition(&self.owned, type_).cloned();
        set != find_status_condition(&self.read, type_).cloned()
    }

    /// Stops applying the condition `type_`: the apply removes it, unless another manager
    /// owns it too. Whether this manager had it.
    pub fn remove(&mut self, type_: &str) -> bool {
        remove_status_condition(&mut self.owned, type_)
    }

    /// The conditions the apply sends: this manager's.
    pub fn conditions(&self) -> &[C] {
        &self.owned
    }

    /// Whether the apply would change the object's conditions: a condition set differs from
    /// the one read, or one read is no longer applied.
    pub fn changed(&self) -> bool {
        let differs = |c: &C| find_status_condition(&self.read, c.type_()) != Some(c);
        let dropped = |t: &String| find_status_condition(&self.owned, t).is_none();
        self.owned.iter().any(differs) || self.owned_when_read.iter().any(dropped)
    }

    /// Applies this manager's conditions to `object` (its name; the namespace is `api`'s)
    /// through `/status`, forced, and returns the object as stored. With none, the apply
    /// holds no status, and removes the conditions the manager applied before.
    pub async fn apply<K>(&self, api: &Api<K>, object: &K) -> Result<K, kube_client::Error>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        let name = object.meta().name.as_deref().unwrap_or_default();
        let mut body = status_body::<K, _>(&serde_json::json!({ "conditions": self.owned }))?;
        if self.owned.is_empty()
            && let Some(fields) = body.as_object_mut()
        {
            fields.remove("status");
        }
        let params = PatchParams::apply(&self.field_manager).force();
        api.patch_status(name, &params, &Patch::Apply(body)).await
    }
}

/// The condition types `field_manager`'s applies own in `managed_fields`: the `type` of each
/// `k:{"type":...}` item under `f:status` / `f:conditions`.
fn owned_types(managed_fields: &serde_json::Value, field_manager: &str) -> Vec<String> {
    let entries = managed_fields.as_array().into_iter().flatten();
    let applies = entries.filter(|e| e["manager"] == field_manager && e["operation"] == "Apply");
    let items = applies.filter_map(|e| e["fieldsV1"]["f:status"]["f:conditions"].as_object());
    items
        .flat_map(|items| items.keys())
        .filter_map(|key| key.strip_prefix("k:"))
        .filter_map(|key| serde_json::from_str::<serde_json::Value>(key).ok())
        .filter_map(|key| key["type"].as_str().map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use serde_json::json;

    use super::*;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).expect("a valid time"))
    }

    /// A pod read with a Ready condition `ctrl` applied and a Compliant one `policy` did.
    fn read() -> Pod {
        let item = |t: &str| json!({ format!("k:{{\"type\":\"{t}\"}}"): { ".": {}, "f:status": {}, "f:type": {} } });
        serde_json::from_value(json!({
            "metadata": { "name": "p", "generation": 4, "managedFields": [
                { "manager": "ctrl", "operation": "Apply", "subresource": "status",
                  "fieldsV1": { "f:status": { "f:conditions": item("Ready") } } },
                { "manager": "policy", "operation": "Apply", "subresource": "status",
                  "fieldsV1": { "f:status": { "f:conditions": item("Compliant") } } },
                { "manager": "ctrl", "operation": "Update",
                  "fieldsV1": { "f:status": { "f:conditions": item("Scheduled") } } },
            ] },
            "status": { "conditions": [
                { "type": "Ready", "status": "False", "reason": "Starting", "lastTransitionTime": "1970-01-01T00:00:10Z" },
                { "type": "Compliant", "status": "True", "lastTransitionTime": "1970-01-01T00:00:20Z" },
                { "type": "Scheduled", "status": "True", "lastTransitionTime": "1970-01-01T00:00:05Z" },
            ] },
        }))
        .expect("a valid pod")
    }

    fn types<C: StatusCondition>(conditions: &[C]) -> Vec<&str> {
        conditions.iter().map(|c| c.type_()).collect()
    }

    #[test]
    fn a_writer_holds_the_conditions_its_manager_applied_and_those_it_sets() {
        let pod = read();
        let mut ctrl =
            ConditionWriter::<k8s_openapi::api::core::v1::PodCondition>::new(&pod, "ctrl").unwrap();
        assert_eq!(types(ctrl.conditions()), ["Ready"], "an Update's condition is not an apply's");
        assert!(!ctrl.changed());

        // The status holds: the time read stays, the generation is the object's.
        assert!(ctrl.set_at("Ready", ConditionStatus::False, "Waiting", "", at(30)));
        let ready = &ctrl.conditions()[0];
        assert_eq!(
            (ready.last_transition_time.clone(), ready.observed_generation),
            (Some(at(10)), Some(4))
        );
        // A new one is now; one another manager applied keeps its time while its status holds.
        assert!(ctrl.set_at("Progressing", ConditionStatus::True, "Rolling", "", at(30)));
        assert!(ctrl.set_at("Compliant", ConditionStatus::True, "", "", at(30)), "a generation");
        let compliant = find_status_condition(ctrl.conditions(), "Compliant").unwrap();
        assert_eq!(compliant.last_transition_time, Some(at(20)));
        assert_eq!(types(ctrl.conditions()), ["Ready", "Progressing", "Compliant"]);
        assert!(ctrl.changed());

        let mut policy =
            ConditionWriter::<k8s_openapi::api::core::v1::PodCondition>::new(&pod, "policy")
                .unwrap();
        assert!(policy.remove("Compliant"));
        assert!(policy.conditions().is_empty() && policy.changed(), "a removal is a change");
        assert!(!policy.remove("Ready"), "not policy's");
    }

    #[test]
    fn an_object_without_conditions_has_none_to_write() {
        let bare: Pod = serde_json::from_value(json!({ "metadata": { "name": "p" } })).unwrap();
        let writer = ConditionWriter::<Condition>::new(&bare, "ctrl").unwrap();
        assert!(writer.conditions().is_empty() && !writer.changed());
    }
}
