//! Watches: resume from a resourceVersion, 410, bookmarks, timeouts, selector transitions,
//! streaming lists.

use std::time::Duration;

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube_client::Api;
use kube_client::api::{DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use super::common::*;

async fn a_watch_from_a_version_replays_every_later_change_in_order_then_live_ones(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    let a = pods.create(&PostParams::default(), &pod("a", json!({}))).await.unwrap();
    create_pods(&pods, ["b".to_owned()]).await;
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .unwrap();
    pods.delete("b", &DeleteParams::default()).await.unwrap();
    let mut stream =
        pods.watch(&WatchParams::default(), &rv(&a).to_string()).await.unwrap().boxed();
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(describe(&next(&mut stream).await.unwrap().unwrap()));
    }
    create_pods(&pods, ["c".to_owned()]).await;
    got.push(describe(&next(&mut stream).await.unwrap().unwrap()));
    // A pod's delete is two writes: its deletion timestamp, then its removal.
    let want =
        [("ADDED", "b"), ("MODIFIED", "a"), ("MODIFIED", "b"), ("DELETED", "b"), ("ADDED", "c")];
    assert_eq!(got, want.map(|(t, n)| (t.to_owned(), n.to_owned())));
}
case!(Needs::Protocol, a_watch_from_a_version_replays_every_later_change_in_order_then_live_ones);

/// `resourceVersion=0` ("any version"): the server starts from its watch cache, which may
/// not have the newest write yet. A real 1.36.2 on a busy machine sent `a`, the
/// initial-events-end bookmark, then `b` as a live add: both objects come as adds, in no
/// particular order, and (from 1.36) one initial-events-end bookmark, before or between them.
async fn a_watch_without_a_version_starts_with_the_current_objects(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    create_pods(&pods, ["a".to_owned(), "b".to_owned()]).await;
    let mut stream = pods.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let (mut added, mut bookmarks) = (Vec::new(), 0);
    let want_bookmark = usize::from(t.version().at_least(36));
    while added.len() < 2 || bookmarks < want_bookmark {
        let event = next(&mut stream).await.expect("an event before the timeout").unwrap();
        match &event {
            WatchEvent::Added(pod) => added.push(pod.metadata.name.clone().unwrap_or_default()),
            WatchEvent::Bookmark(_) => {
                expect_initial_events_end(event);
                bookmarks += 1;
            }
            other => panic!("only adds and the initial-events-end bookmark expected: {other:?}"),
        }
    }
    added.sort();
    assert_eq!(added, ["a", "b"]);
    assert_eq!(bookmarks, want_bookmark, "1.36 marks the end of the initial events once");
}
case!(Needs::Protocol, a_watch_without_a_version_starts_with_the_current_objects);

/// 1.36 ends the initial events of a watch without a version, to a client that allows
/// bookmarks (kube-client does by default), with a bookmark marked as a streaming list's.
fn expect_initial_events_end(event: WatchEvent<Pod>) {
    match event {
        WatchEvent::Bookmark(b) => assert_eq!(
            b.metadata.annotations.get("k8s.io/initial-events-end").map(String::as_str),
            Some("true"),
            "{:?}",
            b.metadata.annotations
        ),
        other => panic!("expected the initial-events-end bookmark, got {other:?}"),
    }
}

/// The next event that is not a bookmark, described: a real server sends a watch that allows
/// bookmarks one whenever its watch cache has a newer version to report (a CI run on 1.36.2
/// got one between a streaming list's initial-events-end bookmark and the next change).
async fn next_object_event<S>(stream: &mut S) -> (String, String)
where
    S: futures::Stream<Item = kube_client::Result<WatchEvent<Pod>>> + Unpin,
{
    loop {
        match next(stream).await.unwrap().unwrap() {
            WatchEvent::Bookmark(_) => continue,
            event => break describe(&event),
        }
    }
}

/// Secrets, because the real server under test serves them without its watch cache: a
/// watch cache answers from its own window of recent events, which compacting etcd leaves.
async fn a_watch_from_a_compacted_version_gets_an_error_event_with_410(t: &Target) {
    let secrets: Api<Secret> = Api::namespaced(t.client.clone(), &t.ns);
    let secret = |name: &str| -> Secret {
        serde_json::from_value(json!({"metadata": {"name": name}, "stringData": {"k": "v"}}))
            .unwrap()
    };
    let a = secrets.create(&PostParams::default(), &secret("a")).await.unwrap();
    secrets.create(&PostParams::default(), &secret("b")).await.unwrap();
    t.compact().await;
    let a_rv = a.metadata.resource_version.unwrap();
    let mut stream = secrets.watch(&WatchParams::default(), &a_rv).await.unwrap().boxed();
    match next(&mut stream).await.unwrap().unwrap() {
        WatchEvent::Error(status) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    assert!(next(&mut stream).await.is_none(), "the stream ends after the error");
}
case!(Needs::Compaction, a_watch_from_a_compacted_version_gets_an_error_event_with_410);

/// A watch with a timeout gets a bookmark shortly before it (the real server sends it 2 s
/// before), carrying a version at least as new as changes the watch did not match.
async fn bookmarks_come_before_the_timeout_and_carry_newer_versions(t: &Target) {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    let a = pods.create(&PostParams::default(), &pod("a", json!({"app": "web"}))).await.unwrap();
    let wp = WatchParams::default().labels("app=web").timeout(5);
    let started = tokio::time::Instant::now();
    let mut stream = pods.watch(&wp, &rv(&a).to_string()).await.unwrap().boxed();
    // A change the watch does not match moves the version on; the bookmark reports it.
    let b = pods.create(&PostParams::default(), &pod("b", json!({"app": "db"}))).await.unwrap();
    let mut bookmarks = Vec::new();
    while let Some(event) = next(&mut stream).await {
        match event.unwrap() {
            WatchEvent::Bookmark(bm) => bookmarks
                .push((started.elapsed(), bm.metadata.resource_version.parse::<u64>().unwrap())),
            other => panic!("only bookmarks expected, got {other:?}"),
        }
    }
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(4), "the stream ended before its timeout: {took:?}");
    assert!(
        bookmarks.iter().any(|&(_, v)| v >= rv(&b)),
        "no bookmark at or after version {}: {bookmarks:?}",
        rv(&b)
    );
}
case!(Needs::Protocol, bookmarks_come_before_the_timeout_and_carry_newer_versions);

async fn objects_that_stop_or_start_matching_arrive_as_deleted_or_added(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    let a = pods.create(&PostParams::default(), &pod("a", json!({"app": "web"}))).await.unwrap();
    let mut stream = pods
        .watch(&WatchParams::default().labels("app=web"), &rv(&a).to_string())
        .await
        .unwrap()
        .boxed();
    let relabel = |v: &str| Patch::Merge(json!({"metadata": {"labels": {"app": v}}}));
    pods.patch("a", &PatchParams::default(), &relabel("db")).await.unwrap();
    pods.patch("a", &PatchParams::default(), &relabel("web")).await.unwrap();
    let got: Vec<_> = [next(&mut stream).await, next(&mut stream).await]
        .into_iter()
        .map(|e| describe(&e.unwrap().unwrap()).0)
        .collect();
    assert_eq!(got, ["DELETED", "ADDED"]);
}
case!(Needs::Protocol, objects_that_stop_or_start_matching_arrive_as_deleted_or_added);

async fn field_selected_watches_see_only_their_object(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    let mut stream =
        pods.watch(&WatchParams::default().fields("metadata.name=b"), "0").await.unwrap().boxed();
    if t.version().at_least(36) {
        expect_initial_events_end(next(&mut stream).await.unwrap().unwrap());
    }
    create_pods(&pods, ["a".to_owned(), "b".to_owned()]).await;
    assert_eq!(next_object_event(&mut stream).await, ("ADDED".into(), "b".into()));
}
case!(Needs::Protocol, field_selected_watches_see_only_their_object);

/// Streaming lists exist from Kubernetes 1.27 (the informer's fallback on older servers is an
/// e2e case); 1.20 refuses the request (422: `resourceVersionMatch` is forbidden for a watch).
async fn streaming_lists_send_initial_events_then_a_marked_bookmark_then_changes(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    create_pods(&pods, ["a".to_owned(), "b".to_owned()]).await;
    let wp = WatchParams::streaming_lists();
    if !t.version().at_least(27) {
        let refused = pods.watch(&wp, "").await.map(|_| ());
        assert_eq!(api_error(refused).0, 422, "on {}", t.version());
        return;
    }
    let mut stream = pods.watch(&wp, "").await.unwrap().boxed();
    assert_eq!(describe(&next(&mut stream).await.unwrap().unwrap()).1, "a");
    assert_eq!(describe(&next(&mut stream).await.unwrap().unwrap()).1, "b");
    expect_initial_events_end(next(&mut stream).await.unwrap().unwrap());
    create_pods(&pods, ["c".to_owned()]).await;
    assert_eq!(next_object_event(&mut stream).await, ("ADDED".into(), "c".into()));
}
case!(Needs::Protocol, streaming_lists_send_initial_events_then_a_marked_bookmark_then_changes);

/// 1.36 refuses `sendInitialEvents` without `resourceVersionMatch=NotOlderThan`, naming the
/// field; 1.20 does not know the parameter and starts a plain watch.
async fn streaming_lists_without_not_older_than_are_refused(t: &Target) {
    let url = format!(
        "/api/v1/namespaces/{}/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&timeoutSeconds=1",
        t.ns
    );
    let response = t.raw_get(&url).await;
    if !t.version().at_least(27) {
        assert_eq!(response.status, 200, "on {}: {}", t.version(), response.body);
        return;
    }
    assert_eq!(response.status, 422, "{}", response.body);
    let status: serde_json::Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!(status["details"]["causes"][0]["field"], "resourceVersionMatch", "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"),
        "{status}"
    );
}
case!(Needs::Protocol, streaming_lists_without_not_older_than_are_refused);

/// 1.36 sends a streaming list's initial events without the closing bookmark to a client
/// that does not allow bookmarks; 1.20 refuses `resourceVersionMatch` on any watch.
async fn streaming_lists_without_bookmarks_send_the_initial_events_alone(t: &Target) {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    create_pods(&pods, ["a".to_owned()]).await;
    let url = format!(
        "/api/v1/namespaces/{}/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=2",
        t.ns
    );
    let response = t.raw_get(&url).await;
    if !t.version().at_least(36) {
        assert_eq!(response.status, 422, "on {}: {}", t.version(), response.body);
        assert!(response.body.contains("resourceVersionMatch is forbidden for watch"));
        return;
    }
    assert_eq!(response.status, 200, "{}", response.body);
    let types: Vec<String> = response
        .body
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["type"].to_string())
        .collect();
    assert_eq!(types, ["\"ADDED\""], "{}", response.body);
}
case!(Needs::Protocol, streaming_lists_without_bookmarks_send_the_initial_events_alone);
