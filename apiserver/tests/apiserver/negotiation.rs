//! Content negotiation as kube-apiserver decides it: the `Accept` clauses by q, ties in order,
//! the first one the endpoint can produce wins. What client-go's generated clients send for
//! built-in kinds (`protobuf,json`) gets protobuf; a custom resource, which has no message,
//! gets the next clause; a table is never protobuf; errors are a `Status` in the first
//! clause without a form (`as=`) that names JSON or protobuf, for custom resources too. Each
//! case pins the answers' status codes and `Content-Type`s on every server.

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::Needs;
use ctrlkit_apiserver::harness::{RawResponse, Target};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use kube_client::Api;
use serde_json::{Value, json};

use crate::protobuf::{PROTOBUF, frames, open};

/// What client-go's generated clients send for built-in kinds.
const CLIENT_GO: &str = "application/vnd.kubernetes.protobuf,application/json";
const JSON: &str = "application/json";
const WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";
const TABLE: &str = "as=Table;v=v1;g=meta.k8s.io";
const METADATA_LIST: &str = "as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const METADATA: &str = "as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
/// A streaming list's parameters.
const STREAMING: &str =
    "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";

/// Configmap `a` in the case's namespace, and the collection's path.
async fn configmap(t: &Target) -> String {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let object = json!({ "metadata": { "name": "a" }, "data": { "k": "v" } });
    api.create(&Default::default(), &serde_json::from_value(object).unwrap()).await.unwrap();
    format!("/api/v1/namespaces/{}/configmaps", t.ns)
}

/// Widget `w` (a custom resource), and its collection's path.
async fn widget(t: &Target) -> String {
    let widgets = t.custom_resource(&crate::common::widget()).await;
    let (group, version, plural) = (&widgets.group, &widgets.version, &widgets.plural);
    let path = format!("/apis/{group}/{version}/namespaces/{}/{plural}", t.ns);
    let body =
        json!({ "apiVersion": widgets.api_version, "kind": "Widget", "metadata": { "name": "w" } });
    let headers = [("Content-Type", JSON), ("Accept", JSON)];
    let created =
        t.raw_request(http::Method::POST, &path, &headers, body.to_string().into_bytes()).await;
    assert_eq!(created.status, 201, "{}", created.body);
    path
}

/// The answer's status code and `Content-Type`.
fn answered(response: &RawResponse) -> (u16, &str) {
    (response.status, response.header("content-type").unwrap_or(""))
}

/// A protobuf `Status`'s reason and code.
fn status(response: &RawResponse) -> (String, i32) {
    let (kind, status) = open::<meta::Status>(&response.bytes);
    assert_eq!(kind, "Status");
    (status.reason.unwrap_or_default(), status.code.unwrap_or_default())
}

/// A JSON `Status`'s reason and code.
fn json_status(response: &RawResponse) -> (String, i64) {
    let status: Value = serde_json::from_str(&response.body).expect("a JSON Status");
    (status["reason"].as_str().unwrap_or("").to_owned(), status["code"].as_i64().unwrap_or(0))
}

async fn built_in_kinds_answer_client_go_in_protobuf(t: &Target) {
    let path = configmap(t).await;
    let accept = [("Accept", CLIENT_GO)];

    let list = t.raw_get_with(&path, &accept).await;
    assert_eq!(answered(&list), (200, PROTOBUF), "{}", list.body);
    let (kind, list) = open::<core::ConfigMapList>(&list.bytes);
    assert_eq!(kind, "ConfigMapList");
    let names: Vec<_> =
        list.items.iter().map(|c| c.metadata.as_ref().unwrap().name.clone()).collect();
    assert_eq!(names, [Some("a".to_owned())]);
    let rv = list.metadata.unwrap().resource_version.unwrap();

    let one = t.raw_get_with(&format!("{path}/a"), &accept).await;
    assert_eq!(answered(&one), (200, PROTOBUF), "{}", one.body);
    let (kind, object) = open::<core::ConfigMap>(&one.bytes);
    assert_eq!((kind.as_str(), object.data["k"].as_str()), ("ConfigMap", "v"));

    let missing = t.raw_get_with(&format!("{path}/missing"), &accept).await;
    assert_eq!(answered(&missing), (404, PROTOBUF), "{}", missing.body);
    assert_eq!(status(&missing), ("NotFound".to_owned(), 404));

    // A watch from before `a` was written: its add, in frames.
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    api.delete("a", &Default::default()).await.unwrap();
    let watch = t
        .raw_get_with(&format!("{path}?watch=1&resourceVersion={rv}&timeoutSeconds=1"), &accept)
        .await;
    assert_eq!(answered(&watch), (200, WATCH), "{}", watch.body);
    let events: Vec<_> = frames::<core::ConfigMap>(&watch.bytes)
        .into_iter()
        .map(|(event, kind, object)| (event, kind, object.metadata.unwrap().name.unwrap()))
        .collect();
    assert_eq!(events, [("DELETED".to_owned(), "ConfigMap".to_owned(), "a".to_owned())]);

    // A streaming list: the objects, then the initial-events-end bookmark, in frames. 1.20
    // refuses `resourceVersionMatch` on a watch: a 422 Status, in protobuf.
    configmap(t).await;
    let streaming = t.raw_get_with(&format!("{path}?{STREAMING}&timeoutSeconds=1"), &accept).await;
    if !t.version().at_least(27) {
        assert_eq!(answered(&streaming), (422, PROTOBUF), "{}", streaming.body);
        assert_eq!(status(&streaming), ("Invalid".to_owned(), 422));
        return;
    }
    assert_eq!(answered(&streaming), (200, WATCH), "{}", streaming.body);
    let events: Vec<_> = frames::<core::ConfigMap>(&streaming.bytes)
        .into_iter()
        .map(|(event, _, object)| {
            let metadata = object.metadata.unwrap();
            let end = metadata.annotations.get("k8s.io/initial-events-end").cloned();
            (event, metadata.name.unwrap_or_default(), end)
        })
        // kube-apiserver may also send a plain bookmark before the watch's timeout ends it.
        .filter(|(event, _, end)| event != "BOOKMARK" || end.is_some())
        .collect();
    assert_eq!(
        events,
        [
            ("ADDED".to_owned(), "a".to_owned(), None),
            ("BOOKMARK".to_owned(), String::new(), Some("true".to_owned()))
        ]
    );
}
case!(Needs::Protocol, built_in_kinds_answer_client_go_in_protobuf);

/// A custom resource has no message: its objects come in the next clause, JSON; its errors
/// are a `Status`, which has one, so they come in protobuf.
async fn custom_resources_answer_client_go_in_json_and_errors_in_protobuf(t: &Target) {
    let path = widget(t).await;
    let accept = [("Accept", CLIENT_GO)];
    let list = t.raw_get_with(&path, &accept).await;
    assert_eq!(answered(&list), (200, JSON), "{}", list.body);
    let list: Value = serde_json::from_str(&list.body).unwrap();
    assert_eq!(list["items"][0]["metadata"]["name"], "w");
    let one = t.raw_get_with(&format!("{path}/w"), &accept).await;
    assert_eq!(answered(&one), (200, JSON), "{}", one.body);
    let watch = t
        .raw_get_with(&format!("{path}?watch=1&resourceVersion=0&timeoutSeconds=1"), &accept)
        .await;
    assert_eq!(answered(&watch), (200, JSON), "{}", watch.body);
    assert!(watch.body.contains(r#""type":"ADDED""#), "{}", watch.body);

    let missing = t.raw_get_with(&format!("{path}/missing"), &accept).await;
    assert_eq!(answered(&missing), (404, PROTOBUF), "{}", missing.body);
    assert_eq!(status(&missing), ("NotFound".to_owned(), 404));
    let streaming = t.raw_get_with(&format!("{path}?{STREAMING}&timeoutSeconds=1"), &accept).await;
    if t.version().at_least(27) {
        assert_eq!(answered(&streaming), (200, JSON), "{}", streaming.body);
    } else {
        assert_eq!(answered(&streaming), (422, PROTOBUF), "{}", streaming.body);
    }
    // Protobuf alone: 406, a Status in protobuf.
    let refused = t.raw_get_with(&path, &[("Accept", PROTOBUF)]).await;
    assert_eq!(answered(&refused), (406, PROTOBUF), "{}", refused.body);
    assert_eq!(status(&refused), ("NotAcceptable".to_owned(), 406));
}
case!(Needs::Protocol, custom_resources_answer_client_go_in_json_and_errors_in_protobuf);

/// Tables have no protobuf: a table asked for in protobuf alone is 406, and the next clause
/// wins. Metadata-only forms are protobuf, custom resources' too. An error's encoding is the
/// first clause's without a form.
async fn tables_are_json_and_metadata_is_protobuf(t: &Target) {
    let path = configmap(t).await;
    let get = |accept: String, path: String| async move {
        t.raw_get_with(&path, &[("Accept", accept.as_str())]).await
    };
    let kubectl = format!("{PROTOBUF};{TABLE},{JSON};{TABLE},{JSON}");
    let table = get(kubectl, path.clone()).await;
    assert_eq!(answered(&table), (200, JSON), "{}", table.body);
    assert_eq!(serde_json::from_str::<Value>(&table.body).unwrap()["kind"], "Table");
    let refused = get(format!("{PROTOBUF};{TABLE}"), path.clone()).await;
    assert_eq!(answered(&refused), (406, JSON), "{}", refused.body);
    assert_eq!(json_status(&refused), ("NotAcceptable".to_owned(), 406));
    let full = get(format!("{PROTOBUF};{TABLE},{JSON}"), path.clone()).await;
    assert_eq!(answered(&full), (200, JSON), "{}", full.body);
    assert_eq!(serde_json::from_str::<Value>(&full.body).unwrap()["kind"], "ConfigMapList");

    // The error of a request asked for as a table: the first clause without a form.
    let missing = format!("{path}/missing");
    let json_error = get(format!("{PROTOBUF};{TABLE},{JSON}"), missing.clone()).await;
    assert_eq!(answered(&json_error), (404, JSON), "{}", json_error.body);
    let protobuf_error = get(format!("{JSON};{TABLE},{PROTOBUF}"), missing.clone()).await;
    assert_eq!(answered(&protobuf_error), (404, PROTOBUF), "{}", protobuf_error.body);

    // client-go's metadata client.
    let list = format!("{PROTOBUF};{METADATA_LIST},{JSON};{METADATA_LIST},{JSON}");
    let one = format!("{PROTOBUF};{METADATA},{JSON};{METADATA},{JSON}");
    let metadata = get(list.clone(), path.clone()).await;
    assert_eq!(answered(&metadata), (200, PROTOBUF), "{}", metadata.body);
    let (kind, items) = open::<meta::PartialObjectMetadataList>(&metadata.bytes);
    assert_eq!(kind, "PartialObjectMetadataList");
    assert_eq!(items.items[0].metadata.as_ref().unwrap().name.as_deref(), Some("a"));
    let watch =
        get(one.clone(), format!("{path}?watch=1&resourceVersion=0&timeoutSeconds=1")).await;
    assert_eq!(answered(&watch), (200, WATCH), "{}", watch.body);
    let events = frames::<meta::PartialObjectMetadata>(&watch.bytes);
    assert_eq!((events[0].0.as_str(), events[0].1.as_str()), ("ADDED", "PartialObjectMetadata"));
    // A misfit form is 406, in JSON: no clause is without a form.
    let misfit = get(format!("{PROTOBUF};{METADATA}"), path.clone()).await;
    assert_eq!(answered(&misfit), (406, JSON), "{}", misfit.body);

    let widgets = widget(t).await;
    let metadata = get(list, widgets.clone()).await;
    assert_eq!(answered(&metadata), (200, PROTOBUF), "{}", metadata.body);
    let (_, items) = open::<meta::PartialObjectMetadataList>(&metadata.bytes);
    assert_eq!(items.items[0].metadata.as_ref().unwrap().name.as_deref(), Some("w"));
    let one_widget = get(one.clone(), format!("{widgets}/w")).await;
    assert_eq!(answered(&one_widget), (200, PROTOBUF), "{}", one_widget.body);
    // Its error: JSON, the first clause without a form.
    let missing = get(one, format!("{widgets}/missing")).await;
    assert_eq!(answered(&missing), (404, JSON), "{}", missing.body);
}
case!(Needs::Protocol, tables_are_json_and_metadata_is_protobuf);

/// The clauses by q (`q=0` last, not refused), ties in order, a specific type before a
/// wildcard.
async fn accept_clauses_are_taken_by_quality_then_order(t: &Target) {
    let path = configmap(t).await;
    let cases = [
        (format!("{JSON};q=0.5,{PROTOBUF}"), 200, PROTOBUF),
        (format!("{PROTOBUF};q=0.5,{JSON};q=0.5"), 200, PROTOBUF),
        (format!("{JSON},{PROTOBUF}"), 200, JSON),
        (format!("{PROTOBUF};q=0,{JSON}"), 200, JSON),
        (format!("{PROTOBUF};q=0,*/*"), 200, JSON),
        // q=0 is the least wanted, not refused.
        (format!("{PROTOBUF};q=0"), 200, PROTOBUF),
        (format!("{JSON};q=0"), 200, JSON),
        (format!("{JSON};q=0,*/*"), 200, JSON),
        (format!("{JSON};q=0,{PROTOBUF};q=0"), 200, JSON),
        ("*/*;q=0".to_owned(), 200, JSON),
        (format!("*/*,{PROTOBUF}"), 200, PROTOBUF),
        (format!("*/*;q=0.5,{PROTOBUF}"), 200, PROTOBUF),
        ("*/*".to_owned(), 200, JSON),
        (format!("application/*,{JSON}"), 200, JSON),
        (format!("application/*,{PROTOBUF}"), 200, PROTOBUF),
        (format!("foo,;;, {PROTOBUF} ,{JSON}"), 200, PROTOBUF),
        (format!("{PROTOBUF};as=Foo;g=meta.k8s.io;v=v1,{JSON}"), 200, JSON),
        (String::new(), 200, JSON),
        // kube-apiserver's router wants one clause naming a type it serves exactly.
        ("application/*".to_owned(), 406, JSON),
        ("text/plain".to_owned(), 406, JSON),
    ];
    let mut answers = Vec::new();
    let mut expected = Vec::new();
    for (accept, code, media) in &cases {
        let headers = [("Accept", accept.as_str())];
        let headers: &[(&str, &str)] = if accept.is_empty() { &[] } else { &headers };
        let response = t.raw_get_with(&path, headers).await;
        answers.push((
            accept.clone(),
            response.status,
            response.header("content-type").unwrap_or("").to_owned(),
        ));
        expected.push((accept.clone(), *code, (*media).to_owned()));
    }
    assert_eq!(answers, expected);
    // A custom resource's routes take a wildcard alone.
    let widgets = widget(t).await;
    let wildcard = t.raw_get_with(&widgets, &[("Accept", "application/*")]).await;
    assert_eq!(answered(&wildcard), (200, JSON), "{}", wildcard.body);
    // Protobuf alone at q=0: a custom resource's 406 and a missing object's 404 in protobuf.
    let least = format!("{PROTOBUF};q=0");
    let refused = t.raw_get_with(&widgets, &[("Accept", least.as_str())]).await;
    assert_eq!(answered(&refused), (406, PROTOBUF), "{}", refused.body);
    let missing = t.raw_get_with(&format!("{path}/missing"), &[("Accept", least.as_str())]).await;
    assert_eq!(answered(&missing), (404, PROTOBUF), "{}", missing.body);
}
case!(Needs::Protocol, accept_clauses_are_taken_by_quality_then_order);
