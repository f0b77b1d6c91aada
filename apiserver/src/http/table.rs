//! `meta.k8s.io` `Table`s: what `kubectl get` asks for (`Accept:
//! application/json;as=Table;g=meta.k8s.io;v=v1`) and prints, column for column.
//!
//! The columns and cells are the real server's (read off kube-apiserver 1.20 for every kind
//! served here, and off 1.36 where the two differ: pods' RESTARTS is text, serviceaccounts have
//! no `Secrets` column): pods `Name, Ready, Status, Restarts, Age` and, wide (priority 1), `IP, Node,
//! Nominated Node, Readiness Gates`; namespaces `Name, Status, Age`; configmaps `Name, Data,
//! Age`; secrets `Name, Type, Data, Age`; services `Name, Type, Cluster-IP, External-IP,
//! Port(s), Age` and `Selector`; serviceaccounts `Name, Age`; leases `Name, Holder,
//! Age`; events `Last Seen, Type, Reason, Object, Message` and more, wide; the apps/v1
//! workloads and jobs as `kubectl get` shows them; custom resources `Name`, their CRD's
//! `additionalPrinterColumns` (JSONPath, simple paths only) or `Age` (a date) when it has none;
//! CRDs and other registered types `Name, Created At`. Ages are written as the real server
//! writes them (`HumanDuration`: `45s`, `3m20s`, `5h`, `12d`). Descriptions are short, not the
//! OpenAPI documentation the real server copies in.
//!
//! Each row carries the object as `includeObject` asks: `Metadata` (the default,
//! `PartialObjectMetadata`), `Object` (whole) or `None` (null). In a watch each event's object
//! is a one-row table; only the first carries the column definitions.

use serde_json::{Value, json};

use crate::model::resources::ResourceType;

/// What each row carries of its object (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Include {
    None,
    /// Unset, as on the real server.
    #[default]
    Metadata,
    Object,
}

impl Include {
    pub(crate) fn parse(value: Option<&str>) -> Self {
        match value {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

/// A column: its name, type, format and priority (0: always shown; 1: with `-o wide`).
struct Column {
    name: String,
    kind: &'static str,
    format: &'static str,
    priority: u8,
    /// For a custom resource's printer column: where its value is.
    json_path: Option<String>,
}

fn col(name: &str, kind: &'static str, priority: u8) -> Column {
    Column { name: name.to_owned(), kind, format: "", priority, json_path: None }
}

fn name_col(priority: u8) -> Column {
    Column { format: "name", ..col("Name", "string", priority) }
}

/// The columns of `rt`'s table.
fn columns(rt: &ResourceType) -> Vec<Column> {
    let s = |name: &str| col(name, "string", 0);
    let wide = |name: &str| col(name, "string", 1);
    let int = |name: &str| col(name, "integer", 0);
    let mut cols = vec![name_col(0)];
    let rest: Vec<Column> = match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => vec![
            s("Ready"),
            s("Status"),
            s("Restarts"),
            s("Age"),
            wide("IP"),
            wide("Node"),
            wide("Nominated Node"),
            wide("Readiness Gates"),
        ],
        ("", "namespaces") => vec![s("Status"), s("Age")],
        ("", "configmaps") => vec![s("Data"), s("Age")],
        ("", "secrets") => vec![s("Type"), s("Data"), s("Age")],
        ("", "services") => vec![
            s("Type"),
            s("Cluster-IP"),
            s("External-IP"),
            s("Port(s)"),
            s("Age"),
            wide("Selector"),
        ],
        ("", "serviceaccounts") => vec![s("Age")],
        ("coordination.k8s.io", "leases") => vec![s("Holder"), s("Age")],
        ("", "events") | ("events.k8s.io", "events") => {
            return vec![
                s("Last Seen"),
                s("Type"),
                s("Reason"),
                s("Object"),
                wide("Subobject"),
                wide("Source"),
                s("Message"),
                wide("First Seen"),
                wide("Count"),
                name_col(1),
            ];
        }
        ("apps", "deployments") => vec![
            s("Ready"),
            s("Up-to-date"),
            s("Available"),
            s("Age"),
            wide("Containers"),
            wide("Images"),
            wide("Selector"),
        ],
        ("apps", "replicasets") => vec![
            int("Desired"),
            int("Current"),
            int("Ready"),
            s("Age"),
            wide("Containers"),
            wide("Images"),
            wide("Selector"),
        ],
        ("apps", "statefulsets") => vec![s("Ready"), s("Age"), wide("Containers"), wide("Images")],
        ("apps", "daemonsets") => vec![
            int("Desired"),
            int("Current"),
            int("Ready"),
            int("Up-to-date"),
            int("Available"),
            s("Node Selector"),
            s("Age"),
            wide("Containers"),
            wide("Images"),
            wide("Selector"),
        ],
        ("batch", "jobs") => vec![
            s("Completions"),
            s("Duration"),
            s("Age"),
            wide("Containers"),
            wide("Images"),
            wide("Selector"),
        ],
        _ if rt.printer_columns.is_empty() && rt.from_definition => vec![col("Age", "date", 0)],
        _ if rt.printer_columns.is_empty() => vec![col("Created At", "date", 0)],
        _ => rt
            .printer_columns
            .iter()
            .map(|c| Column {
                name: c.name.clone(),
                kind: column_type(&c.kind),
                format: "",
                priority: u8::from(c.priority > 0),
                json_path: Some(c.json_path.clone()),
            })
            .collect(),
    };
    cols.extend(rest);
    cols
}

/// A printer column's type as the Table names it.
fn column_type(kind: &str) -> &'static str {
    match kind {
        "integer" => "integer",
        "number" => "number",
        "boolean" => "boolean",
        "date" => "date",
        _ => "string",
    }
}

/// The cells of `object`'s row, at `now` (seconds since the epoch, for ages).
fn cells(rt: &ResourceType, object: &Value, now: i64) -> Vec<Value> {
    let name = json!(object["metadata"]["name"].as_str().unwrap_or_default());
    let created = object["metadata"]["creationTimestamp"].as_str().unwrap_or_default();
    let age = json!(age_since(created, now));
    let spec = &object["spec"];
    let status = &object["status"];
    let int = |v: &Value| json!(v.as_i64().unwrap_or(0));
    let or_none = |v: &Value| json!(v.as_str().filter(|s| !s.is_empty()).unwrap_or("<none>"));
    let mut row = vec![name.clone()];
    let rest = match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => pod_cells(object, age, now),
        ("", "namespaces") => vec![json!(status["phase"].as_str().unwrap_or("Active")), age],
        ("", "configmaps") => {
            vec![json!(count(&object["data"]) + count(&object["binaryData"])), age]
        }
        ("", "secrets") => vec![
            json!(object["type"].as_str().unwrap_or("Opaque")),
            json!(count(&object["data"])),
            age,
        ],
        ("", "services") => vec![
            json!(spec["type"].as_str().unwrap_or("ClusterIP")),
            or_none(&spec["clusterIP"]),
            json!(external_ips(object)),
            json!(ports(&spec["ports"])),
            age,
            json!(map_string(&spec["selector"]).unwrap_or_else(|| "<none>".to_owned())),
        ],
        ("", "serviceaccounts") => vec![age],
        ("coordination.k8s.io", "leases") => vec![or_none(&spec["holderIdentity"]), age],
        ("", "events") | ("events.k8s.io", "events") => return event_cells(object, now),
        ("apps", "deployments") => vec![
            json!(format!("{}/{}", status["readyReplicas"].as_i64().unwrap_or(0), replicas(spec))),
            int(&status["updatedReplicas"]),
            int(&status["availableReplicas"]),
            age,
            json!(containers(spec, "name")),
            json!(containers(spec, "image")),
            json!(selector(spec)),
        ],
        ("apps", "replicasets") => vec![
            json!(replicas(spec)),
            int(&status["replicas"]),
            int(&status["readyReplicas"]),
            age,
            json!(containers(spec, "name")),
            json!(containers(spec, "image")),
            json!(selector(spec)),
        ],
        ("apps", "statefulsets") => vec![
            json!(format!("{}/{}", status["readyReplicas"].as_i64().unwrap_or(0), replicas(spec))),
            age,
            json!(containers(spec, "name")),
            json!(containers(spec, "image")),
        ],
        ("apps", "daemonsets") => vec![
            int(&status["desiredNumberScheduled"]),
            int(&status["currentNumberScheduled"]),
            int(&status["numberReady"]),
            int(&status["updatedNumberScheduled"]),
            int(&status["numberAvailable"]),
            json!(
                map_string(&spec["template"]["spec"]["nodeSelector"])
                    .unwrap_or_else(|| "<none>".to_owned())
            ),
            age,
            json!(containers(spec, "name")),
            json!(containers(spec, "image")),
            json!(selector(spec)),
        ],
        ("batch", "jobs") => vec![
            json!(format!(
                "{}/{}",
                status["succeeded"].as_i64().unwrap_or(0),
                spec["completions"].as_i64().unwrap_or(1)
            )),
            json!(job_duration(status)),
            age,
            json!(containers(spec, "name")),
            json!(containers(spec, "image")),
            json!(selector(spec)),
        ],
        _ if rt.printer_columns.is_empty() => vec![json!(created)],
        _ => rt.printer_columns.iter().map(|c| lookup(object, &c.json_path)).collect(),
    };
    row.extend(rest);
    row
}

fn count(map: &Value) -> usize {
    map.as_object().map_or(0, serde_json::Map::len)
}

fn len(list: &Value) -> usize {
    list.as_array().map_or(0, Vec::len)
}

fn replicas(spec: &Value) -> i64 {
    spec["replicas"].as_i64().unwrap_or(1)
}

/// `k=v,k2=v2`, sorted by key; `None` for an empty map.
fn map_string(map: &Value) -> Option<String> {
    let map = map.as_object().filter(|m| !m.is_empty())?;
    let mut pairs: Vec<String> =
        map.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect();
    pairs.sort();
    Some(pairs.join(","))
}

fn selector(spec: &Value) -> String {
    crate::registry::scale::selector_string(&spec["selector"])
}

/// The pod template's containers' names or images, comma-separated.
fn containers(spec: &Value, field: &str) -> String {
    let template = &spec["template"]["spec"]["containers"];
    let values: Vec<&str> =
        template.as_array().into_iter().flatten().filter_map(|c| c[field].as_str()).collect();
    values.join(",")
}

fn ports(ports: &Value) -> String {
    let list: Vec<String> = ports
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let protocol = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64() {
                Some(node) => format!("{}:{node}/{protocol}", p["port"]),
                None => format!("{}/{protocol}", p["port"]),
            }
        })
        .collect();
    if list.is_empty() { "<none>".to_owned() } else { list.join(",") }
}

fn external_ips(service: &Value) -> String {
    let mut ips: Vec<String> = service["spec"]["externalIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip.as_str().map(str::to_owned))
        .collect();
    for ingress in service["status"]["loadBalancer"]["ingress"].as_array().into_iter().flatten() {
        if let Some(ip) = ingress["ip"].as_str().or(ingress["hostname"].as_str()) {
            ips.push(ip.to_owned());
        }
    }
    match (service["spec"]["type"].as_str(), ips.is_empty()) {
        (Some("LoadBalancer"), true) => "<pending>".to_owned(),
        (_, true) => "<none>".to_owned(),
        _ => ips.join(","),
    }
}

fn job_duration(status: &Value) -> String {
    let (Some(start), completion) =
        (status["startTime"].as_str(), status["completionTime"].as_str())
    else {
        return String::new();
    };
    let start = parse_time(start);
    let end = completion.map(parse_time).unwrap_or_else(|| Some(unix_now()));
    match (start, end) {
        (Some(start), Some(end)) => human_duration(end - start),
        _ => String::new(),
    }
}

/// READY, STATUS, RESTARTS, AGE and the wide columns, as kubectl's pod printer computes them
/// (the common cases: phase, a container's waiting or terminated reason, `Terminating`).
/// RESTARTS is text, as Kubernetes 1.36 sends it: the count, and how long ago the last
/// container terminated when one did (`2 (5m ago)`); 1.20 sent the count as an integer.
fn pod_cells(pod: &Value, age: Value, now: i64) -> Vec<Value> {
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
    let none = |v: &Value| json!(v.as_str().filter(|s| !s.is_empty()).unwrap_or("<none>"));
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
        age,
        none(&status["podIP"]),
        none(&spec["nodeName"]),
        none(&status["nominatedNodeName"]),
        json!(gates),
    ]
}

/// An event's cells, core/v1 or events.k8s.io/v1.
fn event_cells(event: &Value, now: i64) -> Vec<Value> {
    let first = event["firstTimestamp"]
        .as_str()
        .or(event["eventTime"].as_str())
        .or(event["metadata"]["creationTimestamp"].as_str())
        .unwrap_or_default();
    let last = event["lastTimestamp"]
        .as_str()
        .or(event["series"]["lastObservedTime"].as_str())
        .or(event["deprecatedLastTimestamp"].as_str())
        .unwrap_or(first);
    let object = if event["involvedObject"].is_object() {
        &event["involvedObject"]
    } else {
        &event["regarding"]
    };
    let kind = object["kind"].as_str().unwrap_or_default().to_lowercase();
    let source = event["source"]["component"]
        .as_str()
        .or(event["reportingController"].as_str())
        .unwrap_or_default();
    let count =
        event["count"].as_i64().or(event["series"]["count"].as_i64()).unwrap_or(1).to_string();
    vec![
        json!(age_since(last, now)),
        json!(event["type"].as_str().unwrap_or_default()),
        json!(event["reason"].as_str().unwrap_or_default()),
        json!(format!("{kind}/{}", object["name"].as_str().unwrap_or_default())),
        json!(object["fieldPath"].as_str().unwrap_or_default()),
        json!(source),
        json!(event["message"].as_str().or(event["note"].as_str()).unwrap_or_default().trim()),
        json!(age_since(first, now)),
        json!(count),
        json!(event["metadata"]["name"].as_str().unwrap_or_default()),
    ]
}

/// The value at a printer column's JSONPath (`.spec.size`, `.status.conditions[0].type`),
/// or null.
fn lookup(object: &Value, path: &str) -> Value {
    let mut current = object;
    for part in path.trim_start_matches('.').split('.').filter(|p| !p.is_empty()) {
        let (field, index) = match part.split_once('[') {
            Some((field, rest)) => (field, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        current = &current[field];
        if let Some(i) = index {
            current = &current[i];
        }
    }
    current.clone()
}

/// A Table of `objects`, with `metadata` (the list's, or the one object's resourceVersion).
pub(crate) fn table(
    rt: &ResourceType,
    version: &str,
    metadata: Value,
    objects: &[Value],
    include: Include,
    with_columns: bool,
) -> Value {
    let now = unix_now();
    let columns: Vec<Value> = columns(rt)
        .into_iter()
        .map(|c| {
            let description =
                c.json_path.map_or_else(|| c.name.clone(), |p| format!("{} ({p})", c.name));
            json!({
                "name": c.name,
                "type": c.kind,
                "format": c.format,
                "description": description,
                "priority": c.priority,
            })
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let object = match include {
                Include::None => Value::Null,
                Include::Object => o.clone(),
                Include::Metadata => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": format!("meta.k8s.io/{version}"),
                    "metadata": o["metadata"],
                }),
            };
            json!({ "cells": cells(rt, o, now), "object": object })
        })
        .collect();
    let mut out = json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": metadata,
        "rows": rows,
    });
    if with_columns {
        out["columnDefinitions"] = json!(columns);
    }
    out
}

/// Seconds since the Unix epoch.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// An RFC 3339 UTC time (`2026-11-30T02:01:21Z`), as the server writes them, in seconds since
/// the epoch.
fn parse_time(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[10] != b'T' {
        return None;
    }
    let n = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (y, m, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (hh, mm, ss) = (n(11..13)?, n(14..16)?, n(17..19)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// The age of `timestamp` at `now`, as `translateTimestampSince` writes it.
fn age_since(timestamp: &str, now: i64) -> String {
    match parse_time(timestamp) {
        Some(at) => human_duration(now - at),
        None => "<unknown>".to_owned(),
    }
}

/// apimachinery's `duration.HumanDuration`, for whole seconds.
fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let d = (hours / 24) % 365;
        return if d == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{d}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_written_as_human_duration_writes_them() {
        let cases = [
            (0, "0s"),
            (45, "45s"),
            (119, "119s"),
            (120, "2m"),
            (200, "3m20s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60 * 7, "3h7m"),
            (20 * 3600, "20h"),
            (3 * 86_400 + 5 * 3600, "3d5h"),
            (40 * 86_400, "40d"),
            (3 * 365 * 86_400 + 10 * 86_400, "3y10d"),
        ];
        for (seconds, text) in cases {
            assert_eq!(human_duration(seconds), text, "{seconds} s");
        }
    }

    #[test]
    fn times_parse_as_seconds_since_the_epoch() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_time("2026-11-30T02:01:21Z"), Some(1_796_004_081));
        assert_eq!(parse_time("not a time"), None);
    }
}
