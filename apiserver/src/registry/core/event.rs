//! The strategy of Events, core/v1 and `events.k8s.io/v1` (kube's `pkg/registry/core/event`,
//! which serves both): its Table only, `Last Seen, Type, Reason, Object, Message` and, wide,
//! `Subobject, Source, First Seen, Count, Name`, read from either version's fields.

use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::registry::Strategy;
use crate::registry::printers::{Column, age_since, name_col, text, wide};

/// The rules of Events, registered for core/v1 and `events.k8s.io/v1` `events`.
pub(crate) struct EventStrategy;

impl Strategy for EventStrategy {
    fn columns(&self, _: &ResourceType) -> Vec<Column> {
        vec![
            text("Last Seen"),
            text("Type"),
            text("Reason"),
            text("Object"),
            wide("Subobject"),
            wide("Source"),
            text("Message"),
            wide("First Seen"),
            wide("Count"),
            name_col(1),
        ]
    }
    fn cells(&self, _: &ResourceType, event: &Value, now: i64) -> Vec<Value> {
        cells(event, now)
    }
}

/// An event's cells, core/v1 or events.k8s.io/v1.
fn cells(event: &Value, now: i64) -> Vec<Value> {
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
