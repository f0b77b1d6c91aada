//! CustomResourceDefinitions created through the API: the kind is served once established,
//! discovery lists it, and deleting the definition takes its objects with it.

use std::time::Duration;

use ctrlkit_apiserver::harness::{Needs, Target};
use ctrlkit_apiserver::{ResourceType, case};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_client::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube_client::{Api, ResourceExt};
use serde_json::json;

use super::common::api_error;

fn gadgets() -> ApiResource {
    ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    }
}

async fn a_created_definition_serves_its_kind_until_it_is_deleted(t: &Target) {
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let bad = serde_json::from_value(json!({
        "metadata": { "name": "wrong.example.com" },
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": { "plural": "gadgets", "kind": "Gadget" },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object" } } }]
        }
    }))
    .unwrap();
    let (code, reason) = api_error(crds.create(&PostParams::default(), &bad).await);
    assert_eq!((code, reason.as_str()), (422, "Invalid"), "a name that is not plural.group");

    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": { "name": "gadgets.example.com" },
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": { "plural": "gadgets", "singular": "gadget", "kind": "Gadget", "shortNames": ["gd"] },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } }]
        }
    }))
    .unwrap();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube_client::Error::Api(s)) if s.code == 409 => {} // left by an earlier run
        Err(e) => panic!("creating the CRD: {e}"),
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let current = crds.get("gadgets.example.com").await.unwrap();
        let established = current
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"));
        if established {
            let accepted = &current.status.as_ref().unwrap().accepted_names;
            assert_eq!(accepted.as_ref().map(|n| n.kind.as_str()), Some("Gadget"));
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the CRD was not established");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ar = gadgets();
    let api: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &t.ns, &ar);
    // Established, and served: the real server may take a moment more to route requests.
    let created = loop {
        let gadget = DynamicObject::new("g1", &ar).data(json!({"spec": {"size": 1}}));
        match api.create(&PostParams::default(), &gadget).await {
            Ok(created) => break created,
            Err(kube_client::Error::Api(s)) if s.code == 404 => {
                assert!(tokio::time::Instant::now() < deadline, "gadgets were never served");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("creating a gadget: {e}"),
        }
    };
    assert_eq!(created.data["spec"]["size"], 1);
    let discovery = t.raw_get("/apis/example.com/v1").await;
    assert!(discovery.body.contains("\"gadgets\""), "{}", discovery.body);
    assert!(discovery.body.contains("\"gadgets/status\""), "{}", discovery.body);

    crds.delete("gadgets.example.com", &DeleteParams::default()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match api.get("g1").await {
            Err(kube_client::Error::Api(s)) if s.code == 404 => break,
            Ok(g) => assert!(g.name_any() == "g1"),
            Err(e) => panic!("reading a gadget: {e}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "the gadget outlived its definition");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    loop {
        match crds.get_opt("gadgets.example.com").await.unwrap() {
            None => break,
            Some(_) => {
                assert!(tokio::time::Instant::now() < deadline, "the CRD was never deleted");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
case!(Needs::Protocol, a_created_definition_serves_its_kind_until_it_is_deleted);

fn doodads(version: &str) -> ApiResource {
    ApiResource {
        group: "example.com".into(),
        version: version.into(),
        api_version: format!("example.com/{version}"),
        kind: "Doodad".into(),
        plural: "doodads".into(),
    }
}

/// A definition with two versions and no conversion webhook: an object written at either is
/// stored once and read, listed, patched and watched at both, its `apiVersion` the one asked
/// for.
async fn a_definition_with_two_versions_serves_each_object_at_both(t: &Target) {
    use futures::{StreamExt, TryStreamExt};
    use kube_client::api::{Patch, PatchParams, WatchEvent, WatchParams};
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let version = |name: &str, storage: bool| {
        let mut version = json!({ "name": name, "served": true, "storage": storage,
            "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } });
        // v2 alone has a column: a table at v2 has it, whatever the stored version.
        if name == "v2" {
            version["additionalPrinterColumns"] =
                json!([{ "name": "A", "type": "integer", "jsonPath": ".spec.a" }]);
        }
        version
    };
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": { "name": "doodads.example.com" },
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": { "plural": "doodads", "singular": "doodad", "kind": "Doodad" },
            "versions": [version("v1", true), version("v2", false)],
        }
    }))
    .unwrap();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube_client::Error::Api(s)) if s.code == 409 => {} // another case's, or a run's
        Err(e) => panic!("creating the CRD: {e}"),
    }
    let v1: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &t.ns, &doodads("v1"));
    let v2: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &t.ns, &doodads("v2"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let d1 = DynamicObject::new("d1", &doodads("v1")).data(json!({ "spec": { "a": 1 } }));
    let created = loop {
        match v1.create(&PostParams::default(), &d1).await {
            Ok(created) => break created,
            Err(kube_client::Error::Api(s)) if s.code == 404 => {
                assert!(tokio::time::Instant::now() < deadline, "doodads were never served");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("creating d1: {e}"),
        }
    };
    let as_v2 = loop {
        match v2.get("d1").await {
            Ok(object) => break object,
            Err(kube_client::Error::Api(s)) if s.code == 404 => {
                assert!(tokio::time::Instant::now() < deadline, "v2 was never served");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("reading d1 at v2: {e}"),
        }
    };
    let api_version = |o: &DynamicObject| o.types.as_ref().map(|t| t.api_version.clone());
    assert_eq!(api_version(&as_v2).as_deref(), Some("example.com/v2"));
    assert_eq!((as_v2.uid(), &as_v2.data["spec"]), (created.uid(), &json!({ "a": 1 })));

    let listed = v2.list(&Default::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(api_version(&listed.items[0]).as_deref(), Some("example.com/v2"));

    let d2 = DynamicObject::new("d2", &doodads("v2")).data(json!({ "spec": { "a": 2 } }));
    v2.create(&PostParams::default(), &d2).await.unwrap();
    let d2_v1 = v1.get("d2").await.unwrap();
    assert_eq!(api_version(&d2_v1).as_deref(), Some("example.com/v1"));
    assert_eq!(d2_v1.data["spec"], json!({ "a": 2 }));

    let patch = Patch::Merge(json!({ "spec": { "b": 3 } }));
    let patched = v2.patch("d1", &PatchParams::default(), &patch).await.unwrap();
    assert_eq!(api_version(&patched).as_deref(), Some("example.com/v2"));
    assert_eq!(v1.get("d1").await.unwrap().data["spec"], json!({ "a": 1, "b": 3 }));
    // A patch's own resourceVersion is a precondition at any version.
    let stale = Patch::Merge(json!({ "metadata": { "resourceVersion": "1" }, "spec": { "z": 0 } }));
    let (code, reason) = api_error(v2.patch("d1", &PatchParams::default(), &stale).await);
    assert_eq!((code, reason.as_str()), (409, "Conflict"));

    let from = listed.metadata.resource_version.clone().unwrap();
    let mut events = v2.watch(&WatchParams::default(), &from).await.unwrap().boxed();
    v1.patch("d1", &PatchParams::default(), &Patch::Merge(json!({ "spec": { "c": 4 } })))
        .await
        .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.try_next().await.unwrap() {
            if let WatchEvent::Modified(o) = event
                && o.data["spec"].get("c").is_some()
            {
                return o;
            }
        }
        panic!("the watch ended");
    })
    .await
    .expect("the change is watched at v2");
    assert_eq!(api_version(&seen).as_deref(), Some("example.com/v2"));
    drop(events);
    // A watch of tables (`kubectl get -w`) at v2: its column, and d1's cell in it.
    let path = format!(
        "/apis/example.com/v2/namespaces/{}/doodads?watch=1&timeoutSeconds=1&fieldSelector=metadata.name%3Dd1",
        t.ns
    );
    let accept = "application/json;as=Table;g=meta.k8s.io;v=v1";
    let answer = t.raw_get_with(&path, &[("Accept", accept)]).await;
    let first: serde_json::Value =
        serde_json::from_str(answer.body.lines().next().expect("an event")).unwrap();
    let table = &first["object"];
    assert_eq!(table["kind"], "Table", "{}", answer.body);
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(columns, ["Name", "A"]);
    assert_eq!(table["rows"][0]["cells"][1], 1);
    let _ = v1.delete("d1", &DeleteParams::default()).await;
    let _ = v1.delete("d2", &DeleteParams::default()).await;
}
case!(Needs::Protocol, a_definition_with_two_versions_serves_each_object_at_both);

/// Field validation reads a body at the version it was written at: a field only a
/// non-storage version's schema declares is known to a strict write at that version, and one
/// neither declares is refused (from 1.25; 1.20 ignores `fieldValidation`).
async fn fields_are_validated_at_the_version_written(t: &Target) {
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let version = |name: &str, storage: bool, fields: &[&str]| {
        let properties: serde_json::Map<String, serde_json::Value> =
            fields.iter().map(|f| ((*f).to_owned(), json!({ "type": "integer" }))).collect();
        json!({ "name": name, "served": true, "storage": storage, "schema": { "openAPIV3Schema": {
            "type": "object",
            "properties": { "spec": { "type": "object", "properties": properties } },
        } } })
    };
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": { "name": "cogs.example.com" },
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": { "plural": "cogs", "singular": "cog", "kind": "Cog" },
            "versions": [version("v1", true, &["a"]), version("v2", false, &["a", "b"])],
        }
    }))
    .unwrap();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube_client::Error::Api(s)) if s.code == 409 => {} // a run's before
        Err(e) => panic!("creating the CRD: {e}"),
    }
    let path = format!("/apis/example.com/v2/namespaces/{}/cogs?fieldValidation=Strict", t.ns);
    let create = |name: &str, spec: serde_json::Value| {
        let body = json!({ "apiVersion": "example.com/v2", "kind": "Cog",
            "metadata": { "name": name }, "spec": spec });
        let json = [("Content-Type", "application/json")];
        let path = path.clone();
        async move {
            t.raw_request(http::Method::POST, &path, &json, body.to_string().into_bytes()).await
        }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let known = loop {
        let answer = create("known", json!({ "a": 1, "b": 2 })).await;
        if answer.status != 404 || tokio::time::Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(known.status, 201, "spec.b is declared at v2: {}", known.body);
    let unknown = create("unknown", json!({ "a": 1, "c": 3 })).await;
    let _ = crds.delete("cogs.example.com", &DeleteParams::default()).await;
    if !t.version().at_least(25) {
        assert_eq!(unknown.status, 201, "{}", unknown.body);
        return;
    }
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    assert!(
        unknown.body.contains(r#"strict decoding error: unknown field \"spec.c\""#),
        "{}",
        unknown.body
    );
}
case!(Needs::Protocol, fields_are_validated_at_the_version_written);

/// The harness's `Target::custom_resource`, on a kind the suite's servers do not register: it
/// defines the kind, which then takes objects and their status through `/status`, on every
/// server alike.
async fn the_harness_defines_a_kind_a_server_does_not_serve(t: &Target) {
    let gizmo = ResourceType::new("example.com", "v1", "Gizmo", "gizmos", true).with_status();
    let ar = t.custom_resource(&gizmo).await;
    assert_eq!(ar.api_version, "example.com/v1");
    let gizmos: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &t.ns, &ar);
    let created = gizmos
        .create(
            &PostParams::default(),
            &DynamicObject::new("g", &ar).data(json!({"spec": {"n": 1}})),
        )
        .await
        .expect("a Gizmo is created");
    assert_eq!(created.data["spec"]["n"], 1, "its fields are kept");
    let status = json!({ "status": { "ready": true } });
    gizmos
        .patch_status("g", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("its status is written through /status");
    assert_eq!(gizmos.get("g").await.unwrap().data["status"]["ready"], true);
    // Asked again, it is served already: the same resource, nothing made twice.
    assert_eq!(t.custom_resource(&gizmo).await.plural, "gizmos");
}
case!(Needs::Protocol, the_harness_defines_a_kind_a_server_does_not_serve);
