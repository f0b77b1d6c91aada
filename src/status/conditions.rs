//! A status's conditions and apimachinery's rules for setting one (`k8s.io/apimachinery`'s
//! `meta.SetStatusCondition` and its siblings), over any condition type that implements
//! [`StatusCondition`]:
//! - a condition is found by its `type`; setting one of a type the list lacks appends it;
//! - `lastTransitionTime` is the time of the last change of `status`: kept while the status
//!   holds (a new reason, message or generation is no transition), set to now when it changes
//!   or the condition is new;
//! - `observedGeneration` is the `metadata.generation` the condition was computed from, so a
//!   reader can tell a condition about an older spec.
//!
//! Implemented for `metav1.Condition` (custom resources' conditions, and the built-in kinds
//! whose `status.conditions` are of that type: Services, PodDisruptionBudgets, ...) and for a
//! Pod's own `PodCondition` (a readiness gate's condition, set by the controller that gates
//! the pod). Built-in kinds whose condition types have no `observedGeneration` (a
//! Deployment's, a Job's, a Node's) are left to the controllers that own them.

use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The status of a condition, as Kubernetes spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`: the controller cannot tell.
    Unknown,
}

impl ConditionStatus {
    /// `"True"`, `"False"` or `"Unknown"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The fields a condition is built from ([`StatusCondition::new`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ConditionFields<'a> {
    /// Its `type`: `Ready`, `example.com/LoadBalancerReady`.
    pub type_: &'a str,
    /// Its `status`.
    pub status: ConditionStatus,
    /// Its `reason`, a CamelCase word; empty where the type has none.
    pub reason: &'a str,
    /// Its `message`, for people; may be empty.
    pub message: &'a str,
    /// The `metadata.generation` it was computed from.
    pub observed_generation: Option<i64>,
    /// When its status last changed.
    pub last_transition_time: Time,
}

/// A condition type of `status.conditions`, keyed by its `type`.
pub trait StatusCondition: Clone + PartialEq + Serialize + DeserializeOwned {
    /// A condition with these fields.
    fn new(fields: ConditionFields<'_>) -> Self;
    /// Its `type`.
    fn type_(&self) -> &str;
    /// Its `status`: `True`, `False` or `Unknown`.
    fn status(&self) -> &str;
    /// Its `lastTransitionTime`, if it has one.
    fn last_transition_time(&self) -> Option<&Time>;
    /// Sets its `lastTransitionTime`.
    fn set_last_transition_time(&mut self, time: Time);
}

impl StatusCondition for Condition {
    fn new(fields: ConditionFields<'_>) -> Self {
        Condition {
            type_: fields.type_.to_owned(),
            status: fields.status.as_str().to_owned(),
            reason: fields.reason.to_owned(),
            message: fields.message.to_owned(),
            observed_generation: fields.observed_generation,
            last_transition_time: fields.last_transition_time,
        }
    }
    fn type_(&self) -> &str {
        &self.type_
    }
    fn status(&self) -> &str {
        &self.status
    }
    fn last_transition_time(&self) -> Option<&Time> {
        Some(&self.last_transition_time)
    }
    fn set_last_transition_time(&mut self, time: Time) {
        self.last_transition_time = time;
    }
}

/// A Pod's condition. Its `observedGeneration` is served from Kubernetes 1.33 (a server
/// before it refuses an apply that sets it); empty reasons and messages are left out.
impl StatusCondition for PodCondition {
    fn new(fields: ConditionFields<'_>) -> Self {
        let text = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        PodCondition {
            type_: fields.type_.to_owned(),
            status: fields.status.as_str().to_owned(),
            reason: text(fields.reason),
            message: text(fields.message),
            observed_generation: fields.observed_generation,
            last_transition_time: Some(fields.last_transition_time),
            last_probe_time: None,
        }
    }
    fn type_(&self) -> &str {
        &self.type_
    }
    fn status(&self) -> &str {
        &self.status
    }
    fn last_transition_time(&self) -> Option<&Time> {
        self.last_transition_time.as_ref()
    }
    fn set_last_transition_time(&mut self, time: Time) {
        self.last_transition_time = Some(time);
    }
}

/// The condition of type `type_` in `conditions`, if there is one.
pub fn find_status_condition<'a, C: StatusCondition>(
    conditions: &'a [C],
    type_: &str,
) -> Option<&'a C> {
    conditions.iter().find(|c| c.type_() == type_)
}

/// Whether `conditions` hold a condition of type `type_` whose status is `True`.
pub fn is_status_condition_true<C: StatusCondition>(conditions: &[C], type_: &str) -> bool {
    find_status_condition(conditions, type_).is_some_and(|c| c.status() == "True")
}

/// Removes the condition of type `type_` from `conditions`; whether there was one.
pub fn remove_status_condition<C: StatusCondition>(conditions: &mut Vec<C>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_() != type_);
    conditions.len() != before
}

/// Sets `new` in `conditions`, in place of the condition of its type or appended, and says
/// whether anything changed. Its `lastTransitionTime` is the replaced condition's while the
/// status holds (and that one has a time), `now` when the status changes or the condition is
/// new: the time `new` carries is not read. (apimachinery's `meta.SetStatusCondition` takes a
/// non-zero time from `new` instead of now: pass that time as `now` for the same result.)
pub fn set_status_condition<C: StatusCondition>(
    conditions: &mut Vec<C>,
    new: C,
    now: Time,
) -> bool {
    let mut new = new;
    match conditions.iter().position(|c| c.type_() == new.type_()) {
        None => {
            new.set_last_transition_time(now);
            conditions.push(new);
            true
        }
        Some(i) => {
            let held = conditions[i].status() == new.status();
            let time = match conditions[i].last_transition_time() {
                Some(time) if held => time.clone(),
                _ => now,
            };
            new.set_last_transition_time(time);
            let changed = conditions[i] != new;
            conditions[i] = new;
            changed
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn fields<'a>(type_: &'a str, status: ConditionStatus, reason: &'a str) -> ConditionFields<'a> {
        ConditionFields {
            type_,
            status,
            reason,
            message: "",
            observed_generation: None,
            last_transition_time: at(0),
        }
    }

    fn ready(status: ConditionStatus, reason: &str, generation: i64) -> Condition {
        let mut fields = fields("Ready", status, reason);
        fields.observed_generation = Some(generation);
        Condition::new(fields)
    }

    #[test]
    fn the_transition_time_is_kept_while_the_status_holds_and_moves_when_it_changes() {
        let mut conditions: Vec<Condition> = Vec::new();
        assert!(set_status_condition(
            &mut conditions,
            ready(ConditionStatus::False, "Starting", 1),
            at(10)
        ));
        assert_eq!(conditions[0].last_transition_time, at(10), "a new condition: now");

        // The same status with a new reason, message or generation: a change, no transition.
        let mut newer = ready(ConditionStatus::False, "Waiting", 2);
        newer.message = "one replica of three".into();
        assert!(set_status_condition(&mut conditions, newer, at(20)));
        assert_eq!(conditions[0].last_transition_time, at(10), "kept while False holds");
        assert_eq!(
            (conditions[0].reason.as_str(), conditions[0].observed_generation),
            ("Waiting", Some(2))
        );

        // Nothing new: no change, and still the first time.
        let mut same = ready(ConditionStatus::False, "Waiting", 2);
        same.message = "one replica of three".into();
        assert!(!set_status_condition(&mut conditions, same, at(30)));
        assert_eq!(conditions[0].last_transition_time, at(10));

        // The status changes: the transition is now.
        assert!(set_status_condition(
            &mut conditions,
            ready(ConditionStatus::True, "Available", 2),
            at(40)
        ));
        assert_eq!(conditions[0].last_transition_time, at(40));
        assert!(is_status_condition_true(&conditions, "Ready"));
        assert_eq!(conditions.len(), 1, "set in place, by type");
    }

    #[test]
    fn conditions_are_found_appended_and_removed_by_type() {
        let mut conditions: Vec<Condition> = Vec::new();
        set_status_condition(&mut conditions, ready(ConditionStatus::True, "Available", 1), at(1));
        let degraded = Condition::new(fields("Degraded", ConditionStatus::False, "AsExpected"));
        set_status_condition(&mut conditions, degraded, at(2));
        let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Ready", "Degraded"]);
        assert!(!is_status_condition_true(&conditions, "Degraded"));
        assert!(!is_status_condition_true(&conditions, "Missing"));
        assert!(remove_status_condition(&mut conditions, "Ready"));
        assert!(!remove_status_condition(&mut conditions, "Ready"));
        assert_eq!(
            find_status_condition(&conditions, "Degraded").map(|c| c.last_transition_time.clone()),
            Some(at(2))
        );
    }

    #[test]
    fn a_pod_condition_without_a_time_takes_now_though_its_status_holds() {
        let mut gate = PodCondition::new(fields("example.com/ready", ConditionStatus::True, ""));
        assert_eq!(gate.reason, None, "an empty reason is left out");
        gate.last_transition_time = None;
        let mut conditions = vec![gate];
        let new = PodCondition::new(fields("example.com/ready", ConditionStatus::True, "Checked"));
        assert!(set_status_condition(&mut conditions, new, at(50)));
        assert_eq!(conditions[0].last_transition_time, Some(at(50)));
        assert_eq!(conditions[0].reason.as_deref(), Some("Checked"));
        assert_eq!(conditions[0].message, None, "an empty message is left out");
    }
}
