//! Metadata-only reads: `Accept: application/json;as=PartialObjectMetadataList;…` for lists,
//! `as=PartialObjectMetadata` for objects and watch events, as client-go's metadata client
//! and kube-client's `PartialObjectMeta` ask for them; what doesn't fit is 406.

use std::time::Duration;

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube_client::core::PartialObjectMeta;
use kube_client::{Api, ResourceExt};
use serde_json::{Value, json};

use super::common::next;

const LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const ONE: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

async fn configmaps(t: &Target, names: &[&str]) -> Api<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    for name in names {
        let cm = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": { "app": "web" }, "annotations": { "note": "n" } },
            "data": { "big": "x".repeat(1000) }
        }))
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    api
}

/// Checks a `PartialObjectMetadata` object: its type, its metadata, nothing else.
fn assert_partial(object: &Value, name: &str) {
    assert_eq!(object["kind"], "PartialObjectMetadata", "{object}");
    assert_eq!(object["apiVersion"], "meta.k8s.io/v1", "{object}");
    assert_eq!(object["metadata"]["name"], name, "{object}");
    assert_eq!(object["metadata"]["labels"]["app"], "web", "{object}");
    assert_eq!(object["metadata"]["annotations"]["note"], "n", "{object}");
    assert!(object["metadata"]["resourceVersion"].is_string(), "{object}");
    let keys: Vec<&String> = object.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 3, "kind, apiVersion and metadata only: {keys:?}");
}

async fn metadata_lists_and_gets_carry_only_metadata(t: &Target) {
    configmaps(t, &["a", "b", "c"]).await;
    let path = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let list = t.raw_get_with(&format!("{path}?limit=2"), &[("Accept", LIST)]).await;
    assert_eq!(list.status, 200, "{}", list.body);
    let body: Value = serde_json::from_str(&list.body).unwrap();
    assert_eq!(body["kind"], "PartialObjectMetadataList");
    assert_eq!(body["apiVersion"], "meta.k8s.io/v1");
    assert!(body["metadata"]["resourceVersion"].is_string(), "{body}");
    assert!(body["metadata"]["continue"].is_string(), "paginated like any list: {body}");
    let items = body["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_partial(&items[0], "a");
    assert_partial(&items[1], "b");
    let token = body["metadata"]["continue"].as_str().unwrap();
    let rest =
        t.raw_get_with(&format!("{path}?limit=2&continue={token}"), &[("Accept", LIST)]).await;
    let rest: Value = serde_json::from_str(&rest.body).unwrap();
    assert_partial(&rest["items"][0], "c");

    let one = t.raw_get_with(&format!("{path}/a"), &[("Accept", ONE)]).await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_partial(&serde_json::from_str(&one.body).unwrap(), "a");

    // client-go's metadata client lists protobuf first, and gets it (see `negotiation`).
    let client_go = format!(
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,{LIST},application/json"
    );
    let protobuf = t.raw_get_with(&path, &[("Accept", &client_go)]).await;
    assert_eq!(protobuf.status, 200);
    assert_eq!(protobuf.header("content-type"), Some("application/vnd.kubernetes.protobuf"));
}
case!(Needs::Protocol, metadata_lists_and_gets_carry_only_metadata);

async fn metadata_forms_that_do_not_fit_the_request_are_refused(t: &Target) {
    configmaps(t, &["a"]).await;
    let path = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let refused = |body: &str| -> (String, u64) {
        let status: Value = serde_json::from_str(body).unwrap();
        (status["reason"].as_str().unwrap().to_owned(), status["code"].as_u64().unwrap())
    };
    let list_as_one = t.raw_get_with(&path, &[("Accept", ONE)]).await;
    assert_eq!(list_as_one.status, 406);
    assert_eq!(refused(&list_as_one.body), ("NotAcceptable".into(), 406));
    assert!(
        list_as_one.body.contains("but the requested object is a list"),
        "{}",
        list_as_one.body
    );
    let one_as_list = t.raw_get_with(&format!("{path}/a"), &[("Accept", LIST)]).await;
    assert_eq!(one_as_list.status, 406);
    assert!(one_as_list.body.contains("is not a list"), "{}", one_as_list.body);
    let unknown =
        t.raw_get_with(&path, &[("Accept", "application/json;as=Foo;g=meta.k8s.io;v=v1")]).await;
    assert_eq!(unknown.status, 406);
    assert!(
        unknown.body.contains("only the following media types are accepted"),
        "{}",
        unknown.body
    );
    // A list of forms falls back to plain JSON, as kubectl's table request does.
    let with_fallback = t
        .raw_get_with(
            &path,
            &[("Accept", "application/json;as=Foo;g=meta.k8s.io;v=v1, application/json")],
        )
        .await;
    assert_eq!(with_fallback.status, 200);
    let body: Value = serde_json::from_str(&with_fallback.body).unwrap();
    assert_eq!(body["kind"], "ConfigMapList");
    assert_eq!(body["items"][0]["data"]["big"].as_str().map(str::len), Some(1000));
}
case!(Needs::Protocol, metadata_forms_that_do_not_fit_the_request_are_refused);

/// A watch's events carry `PartialObjectMetadata`, its bookmarks too (1.20 added
/// `creationTimestamp: null` to them, 1.36 sends the resourceVersion alone), read raw and
/// through kube-client.
async fn metadata_watches_send_partial_objects_and_bookmarks(t: &Target) {
    let api = configmaps(t, &["a"]).await;
    let rv = api.get("a").await.unwrap().resource_version().unwrap();
    let relabel = Patch::Merge(json!({"metadata": {"labels": {"app": "web", "v": "2"}}}));
    let writer = {
        let api = api.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            api.patch("a", &PatchParams::default(), &relabel).await.unwrap();
        })
    };
    let path = format!(
        "/api/v1/namespaces/{}/configmaps?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=5",
        t.ns
    );
    let watch = t.raw_get_with(&path, &[("Accept", ONE)]).await;
    writer.await.unwrap();
    assert_eq!(watch.status, 200);
    let events: Vec<Value> =
        watch.body.lines().map(|l| serde_json::from_str(l).expect("a JSON event")).collect();
    // The change is made while the watch runs: 1.20 sends a bookmark only for a change newer
    // than the watch's initial events. Bookmarks come every second from 2 s before the
    // timeout on, and other cases' ConfigMap writes can bring one before this change on a
    // busy machine (a CI run on 1.20.2 did): the change is the one event that is not one.
    let (bookmarks, changes): (Vec<&Value>, Vec<&Value>) =
        events.iter().partition(|e| e["type"] == "BOOKMARK");
    assert_eq!(changes.len(), 1, "{events:?}");
    assert_eq!(changes[0]["type"], "MODIFIED", "{events:?}");
    assert_partial(&changes[0]["object"], "a");
    assert_eq!(changes[0]["object"]["metadata"]["labels"]["v"], "2");
    let last = bookmarks.last().expect("a bookmark before the timeout");
    // The last bookmark carries the newest version of its kind: this change's, or a later
    // one when other cases write ConfigMaps at the same time.
    let number = |v: &Value| v.as_str().and_then(|v| v.parse::<u64>().ok()).unwrap();
    let modified_rv = number(&changes[0]["object"]["metadata"]["resourceVersion"]);
    let last_rv = number(&last["object"]["metadata"]["resourceVersion"]);
    assert!(last_rv >= modified_rv, "{last_rv} < {modified_rv}");
    let metadata = if t.version().at_least(36) {
        json!({ "resourceVersion": "rv" })
    } else {
        json!({ "resourceVersion": "rv", "creationTimestamp": null })
    };
    for bookmark in bookmarks {
        let mut object = bookmark["object"].clone();
        object["metadata"]["resourceVersion"] = json!("rv");
        assert_eq!(
            object,
            json!({ "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata }),
            "on {}",
            t.version()
        );
    }

    // kube-client's metadata API: lists and watches decode, with the data left out.
    let meta: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(t.client.clone(), &t.ns);
    let listed = meta.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].labels().get("v").map(String::as_str), Some("2"));
    let from = listed.metadata.resource_version.unwrap();
    let mut stream = meta.watch(&WatchParams::default(), &from).await.unwrap().boxed();
    api.delete("a", &Default::default()).await.unwrap();
    match next(&mut stream).await.unwrap().unwrap() {
        WatchEvent::Deleted(object) => assert_eq!(object.name_any(), "a"),
        other => panic!("expected the delete, got {other:?}"),
    }
}
case!(Needs::Protocol, metadata_watches_send_partial_objects_and_bookmarks);

/// A watch asked for as a list cannot be served: the real server answers 200 and sends
/// nothing.
async fn a_watch_asked_for_as_a_list_ends_without_events(t: &Target) {
    configmaps(t, &["a"]).await;
    let path = format!(
        "/api/v1/namespaces/{}/configmaps?watch=1&resourceVersion=0&timeoutSeconds=2",
        t.ns
    );
    let watch = t.raw_get_with(&path, &[("Accept", LIST)]).await;
    assert_eq!(watch.status, 200);
    assert_eq!(watch.body, "", "no events");
}
case!(Needs::Protocol, a_watch_asked_for_as_a_list_ends_without_events);
