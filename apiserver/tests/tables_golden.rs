//! The Table (`kubectl get`'s `as=Table` answer) of every kind the embedded server serves by
//! default, of a type registered with `ApiServerBuilder::resource` and of a CRD's kind without
//! printer columns, each with one object made as a user would make it, compared with
//! `tests/golden/tables.json`: the columns and every cell, ages and times redacted.
//!
//! The golden file was written by the server before its kinds' rules became strategies, so
//! it holds each kind's Table to what it was. A change that means to alter a Table rewrites
//! it: `CTRLKIT_BLESS=1 cargo test -p ctrlkit-apiserver --all-features --test tables_golden`,
//! and the diff shows what changed.

use std::collections::BTreeMap;
use std::time::Duration;

use ctrlkit_apiserver::{ApiServer, ResourceType, wait_for};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_client::api::PostParams;
use kube_client::{Api, Client};
use serde_json::{Value, json};

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/tables.json");

/// Sends a write (answered with the object) or a read (answered with a Table).
async fn send(client: &Client, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let accept = if body.is_some() { "application/json" } else { TABLE };
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("Accept", accept)
        .header("Content-Type", "application/json");
    let bytes = body.map(|b| serde_json::to_vec(b).unwrap()).unwrap_or_default();
    let response = client.send(request.body(bytes.into()).unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let body = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// A pod template whose pods carry `app: golden`.
fn template() -> Value {
    json!({ "metadata": { "labels": { "app": "golden" } },
            "spec": { "restartPolicy": "Always",
                      "containers": [{ "name": "c", "image": "nginx:1.27" }] } })
}

/// The body of the one object made of `plural` (the kinds whose Table shows their fields get
/// those fields; the others a name alone).
fn body(group: &str, plural: &str) -> Value {
    let selector = json!({ "matchLabels": { "app": "golden" } });
    let at = "2020-01-01T00:00:00Z";
    match (group, plural) {
        ("", "pods") => {
            json!({ "spec": template()["spec"], "metadata": { "labels": { "app": "golden" } } })
        }
        ("apps", "deployments" | "replicasets") => {
            json!({ "spec": { "replicas": 2, "selector": selector, "template": template() } })
        }
        ("apps", "statefulsets") => json!({ "spec": {
            "replicas": 2, "serviceName": "golden", "selector": selector, "template": template() } }),
        ("apps", "daemonsets") => {
            json!({ "spec": { "selector": selector, "template": template() } })
        }
        ("batch", "jobs") => {
            let mut template = template();
            template["spec"]["restartPolicy"] = json!("Never");
            json!({ "spec": { "completions": 1, "template": template } })
        }
        ("batch", "cronjobs") => json!({ "spec": { "schedule": "*/5 * * * *", "jobTemplate": {
            "spec": { "template": { "spec": { "restartPolicy": "Never",
                "containers": [{ "name": "c", "image": "busybox" }] } } } } } }),
        ("", "services") => json!({ "spec": { "type": "ClusterIP", "selector": { "app": "golden" },
            "ports": [{ "port": 80, "protocol": "TCP" }] } }),
        ("", "configmaps") => json!({ "data": { "a": "1", "b": "2" } }),
        ("", "secrets") => json!({ "type": "Opaque", "data": { "a": "MQ==" } }),
        ("", "events") => json!({
            "involvedObject": { "kind": "Pod", "name": "golden", "namespace": "default" },
            "reason": "Started", "message": "started", "type": "Normal", "count": 2,
            "firstTimestamp": at, "lastTimestamp": at, "source": { "component": "kubelet" } }),
        ("events.k8s.io", "events") => json!({
            "regarding": { "kind": "Pod", "name": "golden", "namespace": "default" },
            "reason": "Started", "note": "started", "type": "Normal", "action": "Start",
            "eventTime": "2020-01-01T00:00:00.000000Z",
            "reportingController": "kubelet", "reportingInstance": "node-1" }),
        ("coordination.k8s.io", "leases") => {
            json!({ "spec": { "holderIdentity": "golden-1", "leaseDurationSeconds": 15 } })
        }
        ("golden.example.com", _) => json!({ "spec": { "size": 3 } }),
        _ => json!({}),
    }
}

/// Ages (`5s`, `3d4h`) and times change from run to run; they read `<age>` and `<time>`.
fn redacted(cell: &Value) -> Value {
    let Some(text) = cell.as_str() else { return cell.clone() };
    let age = !text.is_empty()
        && text.trim_end_matches(|c: char| c.is_ascii_digit() || "smhdy".contains(c)).is_empty()
        && text.ends_with(|c: char| "smhdy".contains(c))
        && text.starts_with(|c: char| c.is_ascii_digit());
    let time = text.len() >= 20 && text.as_bytes()[4] == b'-' && text.as_bytes()[10] == b'T';
    match (age, time) {
        (true, _) => json!("<age>"),
        (_, true) => json!("<time>"),
        _ => cell.clone(),
    }
}

/// The served resources with a list and a create, as `(group, version, plural, namespaced)`.
async fn served(client: &Client) -> Vec<(String, String, String, bool)> {
    let mut paths = vec![("".to_owned(), "v1".to_owned(), "/api/v1".to_owned())];
    let (_, groups) = send(client, "GET", "/apis", None).await;
    for group in groups["groups"].as_array().unwrap() {
        let name = group["name"].as_str().unwrap();
        let version = group["preferredVersion"]["version"].as_str().unwrap();
        paths.push((name.to_owned(), version.to_owned(), format!("/apis/{name}/{version}")));
    }
    let mut out = Vec::new();
    for (group, version, path) in paths {
        let (_, list) = send(client, "GET", &path, None).await;
        for resource in list["resources"].as_array().unwrap() {
            let plural = resource["name"].as_str().unwrap();
            let verbs = resource["verbs"].to_string();
            if plural.contains('/') || !verbs.contains("\"list\"") || !verbs.contains("\"create\"")
            {
                continue;
            }
            let namespaced = resource["namespaced"].as_bool().unwrap();
            out.push((group.clone(), version.clone(), plural.to_owned(), namespaced));
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn every_kinds_table_is_the_golden_one() {
    let server = ApiServer::builder()
        .resource(ResourceType::new("example.com", "v1", "Widget", "widgets", true))
        // Built-in kinds not served by default, whose strategy answers a delete.
        .resource(ResourceType::new("", "v1", "PersistentVolume", "persistentvolumes", false))
        .resource(ResourceType::new(
            "storage.k8s.io",
            "v1",
            "StorageClass",
            "storageclasses",
            false,
        ))
        .start()
        .await
        .unwrap();
    let client = server.client();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": "gadgets.golden.example.com" },
        "spec": { "group": "golden.example.com", "scope": "Namespaced",
            "names": { "kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList" },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true } } }] } });
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &serde_json::from_value(crd).unwrap()).await.unwrap();
    let established = |crd: Option<&CustomResourceDefinition>| {
        let conditions = crd.and_then(|c| c.status.as_ref()?.conditions.clone());
        conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    };
    let name = "gadgets.golden.example.com";
    wait_for(&crds, name, "established", Duration::from_secs(30), established).await.unwrap();

    let mut tables = BTreeMap::new();
    for (group, version, plural, namespaced) in served(&client).await {
        let base = match group.as_str() {
            "" => format!("/api/{version}"),
            _ => format!("/apis/{group}/{version}"),
        };
        let collection = match namespaced {
            true => format!("{base}/namespaces/default/{plural}"),
            false => format!("{base}/{plural}"),
        };
        let mut object = body(&group, &plural);
        object["metadata"]["name"] = json!("golden");
        let (code, created) = send(&client, "POST", &collection, Some(&object)).await;
        let key = format!("{group}/{version}/{plural}");
        let mut entry = json!({});
        if code >= 300 {
            let why = created["message"].as_str().unwrap_or_default();
            entry["create"] = json!(format!("{code} {why}"));
        }
        let (code, table) = send(&client, "GET", &collection, None).await;
        if code != 200 {
            entry["list"] = json!(format!("{code} {}", table["message"].as_str().unwrap_or("")));
            tables.insert(key, entry);
            continue;
        }
        let columns: Vec<Value> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| json!([c["name"], c["type"], c["format"], c["priority"]]))
            .collect();
        let rows: Vec<Value> = table["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["cells"].as_array().unwrap().iter().map(redacted).collect())
            .collect();
        (entry["columns"], entry["rows"]) = (json!(columns), json!(rows));
        tables.insert(key, entry);
    }
    let got = serde_json::to_string_pretty(&tables).unwrap() + "\n";
    if std::env::var_os("CTRLKIT_BLESS").is_some() {
        std::fs::write(GOLDEN, &got).unwrap();
    }
    let want = std::fs::read_to_string(GOLDEN).unwrap();
    let (want, got): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    for (k, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(w, g, "{GOLDEN}:{}: the Table differs (CTRLKIT_BLESS=1 rewrites it)", k + 1);
    }
    assert_eq!(want.len(), got.len(), "{GOLDEN}: the Tables differ in length");
}
