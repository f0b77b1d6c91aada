//! The event recorder against a server: events.k8s.io/v1 events, repeats counted into one
//! event's series, floods cut by the per-object spam filter and counted.

use ctrlkit::events::{EventRecorder, EventType, NewEvent};
use ctrlkit::metrics::Registry;
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube_client::api::{ListParams, PostParams};
use kube_client::{Api, Resource};
use serde_json::json;

async fn configmap(t: &Target, name: &str) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let cm = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap()
}

async fn events_about(t: &Target, name: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(t.client.clone(), &t.ns);
    let all = events.list(&ListParams::default()).await.unwrap().items;
    all.into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

async fn repeated_events_form_one_series_and_floods_are_filtered(t: &Target) {
    let registry = Registry::new();
    let recorder = EventRecorder::with_metrics(
        t.client.clone(),
        "example.com/events-test",
        Some(std::sync::Arc::new(registry.clone())),
    );
    let cm = configmap(t, "noisy").await;
    let created = NewEvent::new(EventType::Normal, "Synced", "Sync", "synced the configmap");
    for _ in 0..5 {
        recorder.publish_for(&cm, created.clone());
    }
    recorder.publish_for(&cm, NewEvent::new(EventType::Warning, "SyncFailed", "Sync", "it broke"));
    recorder.flush().await;
    let events = events_about(t, "noisy").await;
    assert_eq!(events.len(), 2, "one object per series: {events:#?}");
    let by_reason =
        |reason: &str| events.iter().find(|e| e.reason.as_deref() == Some(reason)).unwrap();
    let synced = by_reason("Synced");
    assert_eq!(synced.reason.as_deref(), Some("Synced"));
    assert_eq!(synced.note.as_deref(), Some("synced the configmap"));
    assert_eq!(synced.type_.as_deref(), Some("Normal"));
    assert_eq!(synced.action.as_deref(), Some("Sync"));
    assert_eq!(synced.reporting_controller.as_deref(), Some("example.com/events-test"));
    assert_eq!(synced.regarding.as_ref().unwrap().uid, cm.meta().uid);
    assert_eq!(synced.series.as_ref().map(|s| s.count), Some(5), "five occurrences");
    assert_eq!(by_reason("SyncFailed").type_.as_deref(), Some("Warning"));
    assert!(by_reason("SyncFailed").series.is_none(), "a single occurrence has no series");

    // A flood about one object: 25 get through (client-go's burst), the rest are dropped.
    let flooded = configmap(t, "flooded").await;
    for i in 0..30 {
        recorder.publish_for(
            &flooded,
            NewEvent::new(EventType::Normal, &format!("Step{i}"), "Step", "a step"),
        );
    }
    recorder.flush().await;
    assert_eq!(events_about(t, "flooded").await.len(), 25);
    let metrics = registry.encode();
    let dropped =
        r#"ctrlkit_events_dropped_total{controller="example.com/events-test",reason="spam"} 5"#;
    assert!(metrics.contains(dropped), "{metrics}");
}
case!(Needs::Protocol, repeated_events_form_one_series_and_floods_are_filtered);
