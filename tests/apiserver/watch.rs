//! Watches: resume from a resourceVersion, 410, bookmarks, timeouts, selector transitions,
//! streaming lists.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube_client::Api;
use kube_client::api::{DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use super::common::*;
use crate::support::Target;

pub async fn a_watch_from_a_version_replays_every_later_change_in_order_then_live_ones(t: &Target) {
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

pub async fn a_watch_without_a_version_starts_with_the_current_objects(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    create_pods(&pods, ["a".to_owned(), "b".to_owned()]).await;
    let mut stream = pods.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let first = describe(&next(&mut stream).await.unwrap().unwrap());
    let second = describe(&next(&mut stream).await.unwrap().unwrap());
    let mut names = [first, second];
    names.sort(); // in no particular order: the real server sends its cache's order
    assert_eq!(names, [("ADDED".into(), "a".into()), ("ADDED".into(), "b".into())]);
}

/// Secrets, because the real server under test serves them without its watch cache: a
/// watch cache answers from its own window of recent events, which compacting etcd leaves.
pub async fn a_watch_from_a_compacted_version_gets_an_error_event_with_410(t: &Target) {
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

/// A watch with a timeout gets a bookmark shortly before it (the real server sends it 2 s
/// before), carrying a version at least as new as changes the watch did not match.
pub async fn bookmarks_come_before_the_timeout_and_carry_newer_versions(t: &Target) {
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

pub async fn objects_that_stop_or_start_matching_arrive_as_deleted_or_added(t: &Target) {
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

pub async fn field_selected_watches_see_only_their_object(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    let mut stream =
        pods.watch(&WatchParams::default().fields("metadata.name=b"), "0").await.unwrap().boxed();
    create_pods(&pods, ["a".to_owned(), "b".to_owned()]).await;
    assert_eq!(describe(&next(&mut stream).await.unwrap().unwrap()), ("ADDED".into(), "b".into()));
}

/// Embedded only: streaming lists arrived in Kubernetes 1.27; the real server under test is
/// 1.20 (the informer's fallback from them is an e2e case).
pub async fn streaming_lists_send_initial_events_then_a_marked_bookmark_then_changes(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    create_pods(&pods, ["a".to_owned(), "b".to_owned()]).await;
    let wp = WatchParams::streaming_lists();
    let mut stream = pods.watch(&wp, "").await.unwrap().boxed();
    assert_eq!(describe(&next(&mut stream).await.unwrap().unwrap()).1, "a");
    assert_eq!(describe(&next(&mut stream).await.unwrap().unwrap()).1, "b");
    match next(&mut stream).await.unwrap().unwrap() {
        WatchEvent::Bookmark(b) => {
            assert_eq!(
                b.metadata.annotations.get("k8s.io/initial-events-end").map(String::as_str),
                Some("true")
            );
        }
        other => panic!("expected the initial-events-end bookmark, got {other:?}"),
    }
    create_pods(&pods, ["c".to_owned()]).await;
    assert_eq!(describe(&next(&mut stream).await.unwrap().unwrap()), ("ADDED".into(), "c".into()));
}

/// Embedded only, as streaming lists are.
pub async fn streaming_lists_without_not_older_than_are_refused(t: &Target) {
    let url = format!(
        "/api/v1/namespaces/{}/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true",
        t.ns
    );
    let response = t.raw_get(&url).await;
    assert_eq!(response.status, 422);
}
