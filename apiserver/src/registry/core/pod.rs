//! The strategy of core/v1 Pods (kube's `pkg/registry/core/pod`): no scheduler or kubelet runs
//! here, so a new pod is `Pending`, as on a bare kube-apiserver; a delete is graceful (the pod
//! is marked, which watchers see as MODIFIED, then removed) and answers with the pod; field
//! selectors may name `spec.nodeName` and `status.phase`. Its Table: `Name, Ready, Status,
//! Restarts, Age` and, wide, `IP, Node, Nominated Node, Readiness Gates`, as kubectl's pod
//! printer computes them.

use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::model::status::ApiResult;
use crate::registry::Strategy;
use crate::registry::printers::{Column, age, age_since, len, named, or_none, row, text, wide};

/// The rules of Pods, registered for core/v1 `pods`.
pub(crate) struct PodStrategy;

impl Strategy for PodStrategy {
    fn validate_create(&self, _: &ResourceType, pod: &mut Value) -> ApiResult<()> {
        pod["status"] = json!({ "phase": "Pending" });
        Ok(())
    }
    fn graceful_delete(&self) -> bool {
        true
    }
    fn returns_deleted_object(&self) -> bool {
        true
    }
    fn field_labels(&self) -> &'static [&'static str] {
        &["spec.nodeName", "status.phase"]
    }
    fn columns(&self, _: &ResourceType) -> Vec<Column> {
        named(vec![
            text("Ready"),
            text("Status"),
            text("Restarts"),
            text("Age"),
            wide("IP"),
            wide("Node"),
            wide("Nominated Node"),
            wide("Readiness Gates"),
        ])
    }
    fn cells(&self, _: &ResourceType, pod: &Value, now: i64) -> Vec<Value> {
        row(pod, cells(pod, now))
    }
}

/// READY, STATUS, RESTARTS, AGE and the wide columns, as kubectl's pod printer computes them
/// (the common cases: phase, a container's waiting or terminated reason, `Terminating`).
/// RESTARTS is text, as Kubernetes 1.36 sends it: the count, and how long ago the last
/// container terminated when one did (`2 (5m ago)`); 1.20 sent the count as an integer.
fn cells(pod: &Value, now: i64) -> Vec<Value> {
    let spec = &pod["spec"];
    let status = &pod["status"];
    let total = len(&spec["containers"]);
    let statuses: Vec<&Value> =
        status["containerStatuses"].as_array().into_iter().flatten().collect();
    let ready = statuses.iter().filter(|c| c["ready"].as_bool() == Some(true)).count();
    let restarts: i64 = statuses.iter().map(|c| c["restartCount"].as_i64().unwrap_or(0)).sum();
    // RFC 3339 timestamps in UTC compare as text.
    let last_restart =
        statuses.iter().filter_map(|c| c["lastState"]["terminated"]["finishedAt"].as_str()).max();
    let restarts = match last_restart {
        Some(at) => format!("{restarts} ({} ago)", age_since(at, now)),
        None => restarts.to_string(),
    };
    let mut reason =
        status["reason"].as_str().or(status["phase"].as_str()).unwrap_or("Pending").to_owned();
    for c in statuses.iter().rev() {
        let state = &c["state"];
        if let Some(r) = state["waiting"]["reason"].as_str().filter(|r| !r.is_empty()) {
            reason = r.to_owned();
        } else if let Some(r) = state["terminated"]["reason"].as_str().filter(|r| !r.is_empty()) {
            reason = r.to_owned();
        }
    }
    if pod["metadata"]["deletionTimestamp"].is_string() {
        reason = "Terminating".to_owned();
    }
    let gates = len(&spec["readinessGates"]);
    let gates = if gates == 0 {
        "<none>".to_owned()
    } else {
        let conditions: Vec<&Value> =
            status["conditions"].as_array().into_iter().flatten().collect();
        let passed = spec["readinessGates"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|g| {
                conditions.iter().any(|c| {
                    c["type"] == g["conditionType"] && c["status"].as_str() == Some("True")
                })
            })
            .count();
        format!("{passed}/{gates}")
    };
    vec![
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts),
        age(pod, now),
        or_none(&status["podIP"]),
        or_none(&spec["nodeName"]),
        or_none(&status["nominatedNodeName"]),
        json!(gates),
    ]
}
