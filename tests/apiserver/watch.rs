//! Watches: resume from a resourceVersion, 410, bookmarks, timeouts, selector transitions,
//! streaming lists.

use std::time::Duration;

use ctrlkit::testing::ApiServer;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube_client::Api;
use kube_client::api::{DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use super::common::*;

#[tokio::test]
async fn a_watch_from_a_version_replays_every_later_change_in_order_then_live_ones() {
    let (_s, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
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
    for _ in 0..3 {
        got.push(describe(&next(&mut stream).await.unwrap().unwrap()));
    }
    create_pods(&pods, ["c".to_owned()]).await;
    got.push(describe(&next(&mut stream).await.unwrap().unwrap()));
    let want = [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b"), ("ADDED", "c")];
    assert_eq!(got, want.map(|(t, n)| (t.to_owned(), n.to_owned())));
}

#[tokio::test]
async fn a_watch_without_a_version_starts_with_the_current_objects() {
    let (_s, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    create_pods(&pods, ["a".to_owned(), "b".to_owned()]).await;
    let mut stream = pods.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let first = describe(&next(&mut stream).await.unwrap().unwrap());
    let second = describe(&next(&mut stream).await.unwrap().unwrap());
    assert_eq!([first.1, second.1], ["a", "b"]);
}

#[tokio::test]
async fn a_watch_from_a_compacted_version_gets_an_error_event_with_410() {
    let (server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let a = pods.create(&PostParams::default(), &pod("a", json!({}))).await.unwrap();
    create_pods(&pods, ["b".to_owned()]).await;
    server.faults().compact();
    let mut stream =
        pods.watch(&WatchParams::default(), &rv(&a).to_string()).await.unwrap().boxed();
    match next(&mut stream).await.unwrap().unwrap() {
        WatchEvent::Error(status) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    assert!(next(&mut stream).await.is_none(), "the stream ends after the error");
}

#[tokio::test]
async fn bookmarks_carry_the_newest_version_and_timeouts_end_the_stream() {
    let server =
        ApiServer::builder().bookmark_interval(Duration::from_millis(100)).start().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let a = pods.create(&PostParams::default(), &pod("a", json!({}))).await.unwrap();
    let wp = WatchParams::default().timeout(2);
    let mut stream = pods.watch(&wp, &rv(&a).to_string()).await.unwrap().boxed();
    // A change to another kind moves the global version on; the bookmark reports it.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(server.client(), "default");
    let cm = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap(),
        )
        .await
        .unwrap();
    let cm_rv = cm.metadata.resource_version.unwrap();
    let mut saw_newest = false;
    let started = tokio::time::Instant::now();
    while let Some(event) = next(&mut stream).await {
        match event.unwrap() {
            WatchEvent::Bookmark(b) => saw_newest |= b.metadata.resource_version == cm_rv,
            other => panic!("only bookmarks expected, got {other:?}"),
        }
    }
    assert!(saw_newest, "no bookmark at the newest version {cm_rv}");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1500), "the stream ended early: {took:?}");
}

#[tokio::test]
async fn objects_that_stop_or_start_matching_arrive_as_deleted_or_added() {
    let (_s, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
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

#[tokio::test]
async fn field_selected_watches_see_only_their_object() {
    let (_s, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut stream =
        pods.watch(&WatchParams::default().fields("metadata.name=b"), "0").await.unwrap().boxed();
    create_pods(&pods, ["a".to_owned(), "b".to_owned()]).await;
    assert_eq!(describe(&next(&mut stream).await.unwrap().unwrap()), ("ADDED".into(), "b".into()));
}

#[tokio::test]
async fn streaming_lists_send_initial_events_then_a_marked_bookmark_then_changes() {
    let (_s, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
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

#[tokio::test]
async fn streaming_lists_without_not_older_than_are_refused() {
    let (server, _client) = server().await;
    let url =
        "/api/v1/namespaces/default/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true";
    let response = raw_get(&server, url).await;
    assert_eq!(response.status, 422);
}
