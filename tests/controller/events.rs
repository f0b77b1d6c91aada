//! The event recorder where the embedded server's faults help: a server without
//! events.k8s.io gets core/v1 events; a server too slow to keep up loses events from a full
//! buffer, counted, while publishing never waits.

// One case here checks metrics, and runs only with them; without, its helpers go unused.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_imports))]

use std::time::Duration;

use ctrlkit::events::{EventRecorder, EventType, NewEvent};
#[cfg(feature = "metrics")]
use ctrlkit::metrics::Registry;
use ctrlkit_apiserver::ApiServer;
use k8s_openapi::api::core::v1::Event;
use kube_client::Api;
use kube_client::api::ListParams;

use super::common::create_configmap;

/// The events a recorder buffers before it drops (its docs' figure, client-go's).
const EVENT_BUFFER: usize = 1000;

#[tokio::test]
async fn without_events_k8s_io_events_go_to_core_v1_with_a_count() {
    let server = ApiServer::builder()
        .without_resource("events.k8s.io", "v1", "events")
        .start()
        .await
        .unwrap();
    let cm = create_configmap(&server, "cm").await;
    let recorder = EventRecorder::new(server.client(), "example.com/test");
    for _ in 0..3 {
        recorder.publish_for(&cm, NewEvent::new(EventType::Normal, "Synced", "Sync", "done"));
    }
    recorder.flush().await;
    let events: Api<Event> = Api::namespaced(server.client(), "default");
    let listed = events.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 1, "{listed:#?}");
    let event = &listed[0];
    assert_eq!(event.involved_object.name.as_deref(), Some("cm"));
    assert_eq!((event.reason.as_deref(), event.message.as_deref()), (Some("Synced"), Some("done")));
    assert_eq!(event.count, Some(3));
    assert_eq!(
        event.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("example.com/test")
    );
}

#[cfg(feature = "metrics")]
#[tokio::test]
async fn a_server_too_slow_to_keep_up_costs_events_not_time() {
    let server = ApiServer::start().await.unwrap();
    let cm = create_configmap(&server, "cm").await;
    let registry = Registry::new();
    let recorder = EventRecorder::with_metrics(
        server.client(),
        "example.com/test",
        Some(std::sync::Arc::new(registry.clone())),
    );
    server.faults().set_latency(Duration::from_secs(3));
    // Distinct objects, so the spam filter lets each through: only the buffer can drop.
    let started = std::time::Instant::now();
    // The recorder buffers 1,000 events (client-go's figure).
    for i in 0..(EVENT_BUFFER + 10) {
        let mut regarding = kube_client::Resource::object_ref(&cm, &());
        regarding.name = Some(format!("cm-{i}"));
        recorder.publish(&regarding, NewEvent::new(EventType::Normal, "Synced", "Sync", "done"));
    }
    assert!(started.elapsed() < Duration::from_secs(2), "publishing waited for the server");
    let metrics = registry.encode();
    let line = metrics
        .lines()
        .find(|l| l.starts_with(r#"ctrlkit_events_dropped_total{controller="example.com/test",reason="buffer_full"}"#))
        .unwrap_or_else(|| panic!("no buffer_full drops counted: {metrics}"));
    let dropped: f64 = line.rsplit_once(' ').unwrap().1.parse().unwrap();
    assert!((9.0..=10.0).contains(&dropped), "{line}");
}

/// Event metrics hooks that panic.
struct PanickingMetrics;

impl ctrlkit::events::EventMetrics for PanickingMetrics {
    fn recorded(&self, _: &str) {
        panic!("recorded hook");
    }
    fn dropped(&self, _: &str, _: ctrlkit::events::DropReason) {
        panic!("dropped hook");
    }
}

/// A metrics hook is user code: its panic costs the metric, not the recorder, whose writer
/// task it used to end at the first event written, so that every later event was lost.
#[tokio::test]
async fn metrics_hooks_that_panic_lose_no_event() {
    let server = ApiServer::start().await.unwrap();
    let first = create_configmap(&server, "first").await;
    let second = create_configmap(&server, "second").await;
    let recorder = EventRecorder::with_metrics(
        server.client(),
        "example.com/test",
        Some(std::sync::Arc::new(PanickingMetrics)),
    );
    recorder.publish_for(&first, NewEvent::new(EventType::Normal, "Synced", "Sync", "one"));
    recorder.flush().await;
    recorder.publish_for(&second, NewEvent::new(EventType::Normal, "Synced", "Sync", "two"));
    recorder.flush().await;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(server.client(), "default");
    let mut names: Vec<_> = (events.list(&ListParams::default()).await.unwrap().items)
        .into_iter()
        .filter_map(|e| e.regarding?.name)
        .collect();
    names.sort();
    assert_eq!(names, ["first", "second"]);
}
