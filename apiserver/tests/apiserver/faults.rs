//! Fault injection, as a client under test sees it.

use std::time::{Duration, Instant};

use ctrlkit_apiserver::Failure;
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use futures::StreamExt;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use kube_client::Api;
use kube_client::api::{ListParams, WatchEvent, WatchParams};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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

/// One HTTP/1.1 exchange on `stream`, kept open: the answer's status and body.
async fn exchange(stream: &mut TcpStream, path: &str) -> (u16, String) {
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("the request is written");
    let mut read = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&read).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().expect("a length"))
                .expect("a content-length");
            if read.len() >= end + 4 + length {
                let status = head[9..12].parse().expect("a status");
                return (status, String::from_utf8_lossy(&read[end + 4..end + 4 + length]).into());
            }
        }
        let n = stream.read(&mut chunk).await.expect("the connection stays open");
        assert_ne!(n, 0, "the server closed the connection: {text}");
        read.extend_from_slice(&chunk[..n]);
    }
}

async fn a_handler_that_panics_answers_500_and_its_connection_serves_on(t: &Target) {
    let mut connection = TcpStream::connect(t.embedded().addr()).await.unwrap();
    let pods = format!("/api/v1/namespaces/{}/pods", t.ns);
    t.embedded().faults().panic_next(1);
    let (code, body) = exchange(&mut connection, &pods).await;
    assert_eq!(code, 500, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["reason"], "InternalError");
    assert_eq!(
        status["message"],
        "This request caused apiserver to panic. Look in the logs for details."
    );
    assert_eq!(t.embedded().handler_panics(), 1);
    // The same connection, the next request: served.
    let (code, body) = exchange(&mut connection, &pods).await;
    assert_eq!(code, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(t.embedded().handler_panics(), 1);
}
case!(Needs::Embedded, a_handler_that_panics_answers_500_and_its_connection_serves_on);

/// The protobuf watch of `path`, its answer begun (its events subscribed).
async fn protobuf_watch(t: &Target, path: &str) -> http::Response<kube_client::client::Body> {
    let request = http::Request::get(path)
        .header("Accept", "application/vnd.kubernetes.protobuf;stream=watch")
        .body(Vec::new().into())
        .unwrap();
    let response = t.client.send(request).await.expect("the watch's answer");
    assert_eq!(response.status(), 200);
    response
}

async fn a_watch_whose_events_panic_ends_with_a_500_error_event(t: &Target) {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    // The answer has begun once `watch` returns: the watch's events are subscribed.
    let mut stream = pods.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    t.embedded().faults().panic_watches();
    let mut event = next(&mut stream).await.expect("an event").expect("a decoded event");
    if let WatchEvent::Bookmark(_) = event {
        // The initial events' end, before the panic.
        event = next(&mut stream).await.expect("an event").expect("a decoded event");
    }
    match event {
        WatchEvent::Error(status) => assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (500, "InternalError", PANICKED)
        ),
        other => panic!("{other:?}"),
    }
    assert!(next(&mut stream).await.is_none(), "the watch ends after its ERROR event");
    assert_eq!(t.embedded().handler_panics(), 1);
    assert!(pods.list(&ListParams::default()).await.is_ok(), "the server serves on");

    let path = format!("/api/v1/namespaces/{}/pods?watch=true&resourceVersion=0", t.ns);
    let response = protobuf_watch(t, &path).await;
    t.embedded().faults().panic_watches();
    let bytes = response.into_body().collect().await.expect("the stream ends cleanly").to_bytes();
    let length = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
    assert_eq!(bytes.len(), 4 + length, "one frame, then the end: {bytes:?}");
    let event = meta::WatchEvent::decode(&bytes[4..]).expect("a WatchEvent");
    assert_eq!(event.r#type.as_deref(), Some("ERROR"));
    let raw = event.object.and_then(|o| o.raw).expect("its object");
    let unknown = Unknown::decode(&raw[4..]).expect("an envelope");
    let status = meta::Status::decode(unknown.raw()).expect("a Status");
    assert_eq!(
        (status.code, status.reason.as_deref(), status.message.as_deref()),
        (Some(500), Some("InternalError"), Some(PANICKED))
    );
    assert_eq!(t.embedded().handler_panics(), 2, "the encoder's panic is counted");
    assert!(pods.list(&ListParams::default()).await.is_ok(), "the server serves on");
}
case!(Needs::Embedded, a_watch_whose_events_panic_ends_with_a_500_error_event);

const PANICKED: &str = "This request caused apiserver to panic. Look in the logs for details.";

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
