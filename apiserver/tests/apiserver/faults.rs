//! Fault injection, as a client under test sees it.

use std::time::{Duration, Instant};

use ctrlkit_apiserver::Failure;
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube_client::Api;
use kube_client::api::{ListParams, WatchEvent, WatchParams};

use super::common::*;

async fn close_watches_ends_open_streams(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    let mut stream = pods.watch(&WatchParams::default(), "1").await.unwrap().boxed();
    t.embedded().faults().close_watches();
    assert!(next(&mut stream).await.is_none());
}
case!(Needs::Embedded, close_watches_ends_open_streams);

async fn fail_next_fails_that_many_requests_with_500_or_429(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    t.embedded().faults().fail_next(2, Failure::InternalError);
    assert_eq!(api_error(pods.list(&ListParams::default()).await), (500, "InternalError".into()));
    assert_eq!(api_error(pods.get("x").await).0, 500);
    assert_eq!(api_error(pods.get("x").await).0, 404, "only two failed");

    t.embedded().faults().fail_next(1, Failure::TooManyRequests { retry_after_seconds: 7 });
    let response = t.raw_get(&format!("/api/v1/namespaces/{}/pods", t.ns)).await;
    assert_eq!(response.status, 429);
    assert_eq!(response.header("retry-after"), Some("7"));
    assert!(response.body.contains("\"reason\":\"TooManyRequests\""), "{}", response.body);
    let counts = t.embedded().requests();
    assert_eq!((counts.list, counts.get), (2, 2));
}
case!(Needs::Embedded, fail_next_fails_that_many_requests_with_500_or_429);

async fn a_handler_that_panics_answers_500_and_the_server_serves_on(t: &Target) {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    t.embedded().faults().panic_next(1);
    let panicked = t.raw_get(&format!("/api/v1/namespaces/{}/pods", t.ns)).await;
    assert_eq!(panicked.status, 500, "{}", panicked.body);
    let status: serde_json::Value = serde_json::from_str(&panicked.body).unwrap();
    assert_eq!(status["reason"], "InternalError");
    assert_eq!(
        status["message"],
        "This request caused apiserver to panic. Look in the logs for details."
    );
    assert_eq!(t.embedded().handler_panics(), 1);
    // The same client, the next request: served.
    assert!(pods.list(&ListParams::default()).await.is_ok(), "the server serves on");
    assert_eq!(api_error(pods.get("x").await), (404, "NotFound".into()));
    assert_eq!(t.embedded().handler_panics(), 1);
}
case!(Needs::Embedded, a_handler_that_panics_answers_500_and_the_server_serves_on);

async fn latency_delays_responses(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    t.embedded().faults().set_latency(Duration::from_millis(300));
    let started = Instant::now();
    pods.list(&ListParams::default()).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    t.embedded().faults().set_latency(Duration::ZERO);
}
case!(Needs::Embedded, latency_delays_responses);

async fn malformed_lines_and_error_events_reach_open_watches(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &t.ns);
    let mut stream = pods.watch(&WatchParams::default(), "1").await.unwrap().boxed();
    tokio::time::sleep(Duration::from_millis(50)).await;
    t.embedded().faults().send_malformed_line();
    assert!(next(&mut stream).await.unwrap().is_err(), "a line that is not JSON is a decode error");
    create_pods(&pods, ["after".to_owned()]).await;
    let event = next(&mut stream).await.unwrap().unwrap();
    assert_eq!(describe(&event), ("ADDED".into(), "after".into()), "the stream goes on after it");

    t.embedded().faults().send_error_event(410, "Expired", "injected");
    match next(&mut stream).await.unwrap().unwrap() {
        WatchEvent::Error(status) => {
            assert_eq!((status.code, status.message.as_str()), (410, "injected"))
        }
        other => panic!("{other:?}"),
    }
    assert!(next(&mut stream).await.is_none());
}
case!(Needs::Embedded, malformed_lines_and_error_events_reach_open_watches);
