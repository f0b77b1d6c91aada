//! Tables: `Accept: application/json;as=Table;g=meta.k8s.io;v=v1`, what `kubectl get` prints.

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_client::Api;
use kube_client::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use super::common::*;

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// The table at `path` (a list or one object), with `query` appended.
async fn table(t: &Target, path: &str, query: &str) -> Value {
    let response = t.raw_get_with(&format!("{path}{query}"), &[("Accept", TABLE)]).await;
    assert_eq!(response.status, 200, "{path}: {}", response.body);
    let table: Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!((&table["kind"], &table["apiVersion"]), (&json!("Table"), &json!("meta.k8s.io/v1")));
    table
}

/// (name, type, priority) of each column.
fn columns(table: &Value) -> Vec<(String, String, u64)> {
    table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let text = |f: &str| c[f].as_str().unwrap().to_owned();
            (text("name"), text("type"), c["priority"].as_u64().unwrap())
        })
        .collect()
}

fn names(table: &Value) -> Vec<&str> {
    columns_of(table).into_iter().filter(|(_, _, p)| *p == 0).map(|(n, _, _)| n).collect()
}

fn columns_of(table: &Value) -> Vec<(&str, &str, u64)> {
    table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["type"].as_str().unwrap(),
                c["priority"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The cells of the row of the object named `name`.
fn row<'a>(table: &'a Value, name: &str) -> &'a [Value] {
    let rows = table["rows"].as_array().unwrap();
    let index = columns_of(table).iter().position(|(n, _, _)| *n == "Name").unwrap();
    rows.iter()
        .find(|r| r["cells"][index] == name)
        .unwrap_or_else(|| panic!("no row {name} in {table}"))["cells"]
        .as_array()
        .unwrap()
}

async fn create(t: &Target, api_version: &str, kind: &str, plural: &str, body: Value) {
    assert!(try_create(t, api_version, kind, plural, body).await, "created");
}

/// Creates an object of any kind; false if its kind is not served (yet).
async fn try_create(t: &Target, api_version: &str, kind: &str, plural: &str, body: Value) -> bool {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = kube_client::api::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &t.ns, &resource);
    let mut object: DynamicObject = serde_json::from_value(body).unwrap();
    object.types =
        Some(kube_client::core::TypeMeta { api_version: api_version.into(), kind: kind.into() });
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => true,
        Err(kube_client::Error::Api(s)) if s.code == 404 => false,
        Err(e) => panic!("creating a {kind}: {e}"),
    }
}

async fn tables_have_the_real_servers_columns_and_cells(t: &Target) {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    pods.create(&PostParams::default(), &pod("web-0", json!({"app": "web"}))).await.unwrap();
    create(
        t,
        "v1",
        "ConfigMap",
        "configmaps",
        json!({"metadata": {"name": "cm"}, "data": {"a": "1", "b": "2"}}),
    )
    .await;
    create(
        t,
        "v1",
        "Secret",
        "secrets",
        json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}}),
    )
    .await;
    let service = json!({"metadata": {"name": "svc"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}});
    create(t, "v1", "Service", "services", service).await;
    create(t, "v1", "ServiceAccount", "serviceaccounts", json!({"metadata": {"name": "robot"}}))
        .await;
    let lease = json!({"metadata": {"name": "lock"}, "spec": {"holderIdentity": "me"}});
    create(t, "coordination.k8s.io/v1", "Lease", "leases", lease).await;
    let template = json!({"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [
        {"name": "a", "image": "busybox:1.36"}, {"name": "b", "image": "nginx:1.26"}]}});
    let deployment = json!({"metadata": {"name": "d"}, "spec": {"replicas": 2,
        "selector": {"matchLabels": {"app": "d"}}, "template": template}});
    create(t, "apps/v1", "Deployment", "deployments", deployment).await;

    let ns = format!("/api/v1/namespaces/{}", t.ns);
    let pods = table(t, &format!("{ns}/pods"), "").await;
    // RESTARTS is a number on 1.20, text on 1.36 (`2 (5m ago)` once a container restarted).
    let (restarts_type, restarts) =
        if t.version().at_least(36) { ("string", json!("0")) } else { ("integer", json!(0)) };
    assert_eq!(
        columns(&pods),
        [
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", restarts_type, 0),
            ("Age", "string", 0),
            ("IP", "string", 1),
            ("Node", "string", 1),
            ("Nominated Node", "string", 1),
            ("Readiness Gates", "string", 1),
        ]
        .map(|(n, k, p)| (n.to_owned(), k.to_owned(), p))
    );
    let cells = row(&pods, "web-0");
    assert_eq!(cells[1..4], [json!("0/1"), json!("Pending"), restarts], "on {}", t.version());
    assert!(cells[4].as_str().unwrap().ends_with('s'), "an age in seconds: {}", cells[4]);
    assert_eq!(cells[5..], [json!("<none>"), json!("<none>"), json!("<none>"), json!("<none>")]);
    let object = &pods["rows"][0]["object"];
    assert_eq!(object["kind"], "PartialObjectMetadata", "rows carry metadata by default");
    assert!(pods["metadata"]["resourceVersion"].is_string());

    let configmaps = table(t, &format!("{ns}/configmaps"), "").await;
    assert_eq!(names(&configmaps), ["Name", "Data", "Age"]);
    assert_eq!(row(&configmaps, "cm")[1], json!(2));
    let secrets = table(t, &format!("{ns}/secrets/s"), "").await;
    assert_eq!(names(&secrets), ["Name", "Type", "Data", "Age"]);
    assert_eq!(row(&secrets, "s")[1..3], [json!("Opaque"), json!(1)]);
    let services = table(t, &format!("{ns}/services"), "").await;
    assert_eq!(names(&services), ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age"]);
    let svc = row(&services, "svc");
    assert_eq!(
        (&svc[1], &svc[3], &svc[4], &svc[6]),
        (&json!("ClusterIP"), &json!("<none>"), &json!("80/TCP"), &json!("app=web"))
    );
    let accounts = table(t, &format!("{ns}/serviceaccounts"), "").await;
    // 1.36 dropped the `Secrets` column (service accounts no longer get token secrets).
    let account_columns: &[&str] =
        if t.version().at_least(36) { &["Name", "Age"] } else { &["Name", "Secrets", "Age"] };
    assert_eq!(names(&accounts), account_columns, "on {}", t.version());
    let leases =
        table(t, &format!("/apis/coordination.k8s.io/v1/namespaces/{}/leases", t.ns), "").await;
    assert_eq!(names(&leases), ["Name", "Holder", "Age"]);
    assert_eq!(row(&leases, "lock")[1], json!("me"));
    let deployments = table(t, &format!("/apis/apps/v1/namespaces/{}/deployments", t.ns), "").await;
    assert_eq!(names(&deployments), ["Name", "Ready", "Up-to-date", "Available", "Age"]);
    let d = row(&deployments, "d");
    assert_eq!(
        (&d[1], &d[5], &d[6], &d[7]),
        (&json!("0/2"), &json!("a,b"), &json!("busybox:1.36,nginx:1.26"), &json!("app=d"))
    );
    let namespaces = table(t, &format!("/api/v1/namespaces/{}", t.ns), "").await;
    assert_eq!(names(&namespaces), ["Name", "Status", "Age"]);
    assert_eq!(row(&namespaces, &t.ns)[1], json!("Active"));
    let events = table(t, &format!("{ns}/events"), "").await;
    assert_eq!(names(&events), ["Last Seen", "Type", "Reason", "Object", "Message"]);

    // includeObject: None leaves the object out, Object puts it whole.
    let bare = table(t, &format!("{ns}/configmaps"), "?includeObject=None").await;
    assert_eq!(bare["rows"][0]["object"], Value::Null);
    let whole = table(t, &format!("{ns}/configmaps"), "?includeObject=Object").await;
    assert_eq!(whole["rows"][0]["object"]["kind"], "ConfigMap");
}
case!(Needs::Protocol, tables_have_the_real_servers_columns_and_cells);

async fn a_custom_resource_table_shows_its_printer_columns(t: &Target) {
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": { "name": "sprockets.example.com" },
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": { "plural": "sprockets", "kind": "Sprocket" },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } },
                "additionalPrinterColumns": [
                    { "name": "Size", "type": "integer", "jsonPath": ".spec.size" },
                    { "name": "Color", "type": "string", "jsonPath": ".spec.color", "priority": 1 },
                ] }]
        }
    }))
    .unwrap();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube_client::Error::Api(s)) if s.code == 409 => {} // left by an earlier run
        Err(e) => panic!("creating the CRD: {e}"),
    }
    let sprocket = json!({ "metadata": { "name": "s1" }, "spec": { "size": 3, "color": "red" } });
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    // Served once established: retry the create until then.
    loop {
        let created =
            try_create(t, "example.com/v1", "Sprocket", "sprockets", sprocket.clone()).await;
        if created || tokio::time::Instant::now() > deadline {
            assert!(created, "the sprocket kind was never served");
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let path = format!("/apis/example.com/v1/namespaces/{}/sprockets", t.ns);
    let listed = table(t, &path, "").await;
    assert_eq!(
        columns_of(&listed),
        [("Name", "string", 0), ("Size", "integer", 0), ("Color", "string", 1)]
    );
    assert_eq!(row(&listed, "s1"), [json!("s1"), json!(3), json!("red")]);
    let _ = crds.delete("sprockets.example.com", &Default::default()).await;
}
case!(Needs::Protocol, a_custom_resource_table_shows_its_printer_columns);
