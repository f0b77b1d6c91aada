//! Built-in objects are answered as Go's `encoding/json` writes their typed structs, whatever
//! JSON wrote them: an empty map, list, `""` or `0` in an `omitempty` field that is not a
//! struct is left out; a pointer field keeps its zero (`immutable: false`,
//! `terminationGracePeriodSeconds: 0`). Each case asserts the same answers on every server,
//! for creates, replaces and patches, and for reads after them.

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use http::Method;
use serde_json::{Value, json};

const JSON: (&str, &str) = ("Content-Type", "application/json");
const JSON_PATCH: (&str, &str) = ("Content-Type", "application/json-patch+json");

/// The object a write answered, checking its status code.
async fn write(t: &Target, method: Method, path: &str, header: (&str, &str), body: Value) -> Value {
    let response = t.raw_request(method, path, &[header], body.to_string().into_bytes()).await;
    assert!(response.status < 300, "{}: {}", response.status, response.body);
    serde_json::from_str(&response.body).expect("a JSON object")
}

/// The object at `path`, read as JSON.
async fn read(t: &Target, path: &str) -> Value {
    let response = t.raw_get(path).await;
    assert_eq!(response.status, 200, "{}", response.body);
    serde_json::from_str(&response.body).expect("a JSON object")
}

/// The keys of `object` among `keys`.
fn present<'a>(object: &Value, keys: &[&'a str]) -> Vec<&'a str> {
    keys.iter().copied().filter(|k| object.get(k).is_some()).collect()
}

async fn empty_omitempty_fields_of_a_configmap_are_left_out(t: &Target) {
    let collection = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let path = format!("{collection}/settings");
    let empty = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "settings" },
        "data": {}, "binaryData": {}, "immutable": false,
    });
    let created = write(t, Method::POST, &collection, JSON, empty.clone()).await;
    assert_eq!(present(&created, &["data", "binaryData"]), [] as [&str; 0], "{created}");
    // `immutable` is a `*bool`: a pointer is written whenever it is set.
    assert_eq!(created["immutable"], false, "{created}");
    let got = read(t, &path).await;
    assert_eq!(present(&got, &["data", "binaryData"]), [] as [&str; 0], "{got}");

    // Replaced with data, then patched back to empty.
    let mut full = got.clone();
    full["data"] = json!({ "k": "v" });
    let replaced = write(t, Method::PUT, &path, JSON, full).await;
    assert_eq!(replaced["data"], json!({ "k": "v" }), "{replaced}");
    let emptied = json!([{ "op": "replace", "path": "/data", "value": {} }]);
    let patched = write(t, Method::PATCH, &path, JSON_PATCH, emptied).await;
    assert_eq!(present(&patched, &["data"]), [] as [&str; 0], "{patched}");
    assert_eq!(present(&read(t, &path).await, &["data"]), [] as [&str; 0]);
}
case!(Needs::Protocol, empty_omitempty_fields_of_a_configmap_are_left_out);

async fn empty_omitempty_fields_of_a_pod_are_left_out(t: &Target) {
    let collection = format!("/api/v1/namespaces/{}/pods", t.ns);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "web" },
        "spec": {
            "nodeSelector": {}, "hostname": "", "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "web", "image": "nginx:1.25",
                "args": [], "workingDir": "",
                "ports": [{ "containerPort": 80, "hostPort": 0 }],
            }],
        },
    });
    let created = write(t, Method::POST, &collection, JSON, pod).await;
    let read = read(t, &format!("{collection}/web")).await;
    for object in [&created, &read] {
        let spec = &object["spec"];
        assert_eq!(present(spec, &["nodeSelector", "hostname"]), [] as [&str; 0], "{spec}");
        let container = &spec["containers"][0];
        assert_eq!(present(container, &["args", "workingDir"]), [] as [&str; 0], "{container}");
        let port = &container["ports"][0];
        assert_eq!((present(port, &["hostPort"]), &port["containerPort"]), (vec![], &json!(80)));
        // A `*int64`: its 0 is kept.
        assert_eq!(spec["terminationGracePeriodSeconds"], 0, "{spec}");
    }
}
case!(Needs::Protocol, empty_omitempty_fields_of_a_pod_are_left_out);
