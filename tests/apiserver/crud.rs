//! create, get, update, patch, delete, status, finalizers, custom resources.

use ctrlkit::testing::{ApiServer, ResourceType};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube_client::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube_client::{Api, ResourceExt};
use serde_json::json;

use super::common::*;

#[tokio::test]
async fn create_sets_server_fields_and_the_path_namespace() {
    let (_s, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created =
        pods.create(&PostParams::default(), &pod("web-0", json!({"app": "web"}))).await.unwrap();
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
    assert!(created.metadata.uid.as_ref().is_some_and(|u| u.len() == 36));
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    assert!(rv(&created) > 0);
    let got = pods.get("web-0").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert_eq!(got.labels().get("app").map(String::as_str), Some("web"));

    // generateName
    let mut generated = pod("", json!({}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("worker-".into());
    let g = pods.create(&PostParams::default(), &generated).await.unwrap();
    let name = g.name_any();
    assert!(name.starts_with("worker-") && name.len() == "worker-".len() + 5, "{name}");
}

#[tokio::test]
async fn create_refuses_duplicates_missing_namespaces_and_bad_names() {
    let (_s, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("a", json!({}))).await.unwrap();
    assert_eq!(
        api_error(pods.create(&PostParams::default(), &pod("a", json!({}))).await),
        (409, "AlreadyExists".into())
    );
    let elsewhere: Api<Pod> = Api::namespaced(client.clone(), "nowhere");
    assert_eq!(
        api_error(elsewhere.create(&PostParams::default(), &pod("a", json!({}))).await),
        (404, "NotFound".into())
    );
    for bad in ["Bad_Name", "-x", "x-", "UPPER"] {
        assert_eq!(
            api_error(pods.create(&PostParams::default(), &pod(bad, json!({}))).await),
            (422, "Invalid".into()),
            "{bad}"
        );
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let dotted: Namespace = serde_json::from_value(json!({"metadata": {"name": "a.b"}})).unwrap();
    assert_eq!(
        api_error(namespaces.create(&PostParams::default(), &dotted).await).0,
        422,
        "namespace names are labels"
    );
}

#[tokio::test]
async fn errors_are_status_objects_with_code_reason_and_message() {
    let (_s, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    match pods.get("missing").await {
        Err(kube_client::Error::Api(status)) => {
            assert_eq!(status.code, 404);
            assert_eq!(status.reason, "NotFound");
            assert_eq!(status.message, "pods \"missing\" not found");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn update_conflicts_on_a_stale_version_and_bumps_generation_only_for_spec() {
    let (_s, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let v1 = pods.create(&PostParams::default(), &pod("p", json!({}))).await.unwrap();
    let mut labelled = v1.clone();
    labelled.labels_mut().insert("tier".into(), "front".into());
    let v2 = pods.replace("p", &PostParams::default(), &labelled).await.unwrap();
    assert!(rv(&v2) > rv(&v1));
    assert_eq!(v2.metadata.generation, Some(1), "a metadata change keeps generation");
    assert_eq!(
        api_error(pods.replace("p", &PostParams::default(), &v1).await),
        (409, "Conflict".into())
    );

    let mut respec = v2.clone();
    respec.spec.as_mut().unwrap().containers[0].image = Some("busybox:1.37".into());
    let v3 = pods.replace("p", &PostParams::default(), &respec).await.unwrap();
    assert_eq!(v3.metadata.generation, Some(2), "a spec change bumps generation");

    // Status goes through /status only, and keeps generation.
    let mut with_status = v3.clone();
    with_status.status.as_mut().unwrap().phase = Some("Running".into());
    let v4 = pods.replace("p", &PostParams::default(), &with_status).await.unwrap();
    assert_eq!(
        v4.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending"),
        "the main endpoint ignores status"
    );
    assert_eq!(rv(&v4), rv(&v3), "so nothing changed and nothing was written");
    let mut fresh = pods.get("p").await.unwrap();
    fresh.status.as_mut().unwrap().phase = Some("Running".into());
    fresh.labels_mut().insert("ignored".into(), "by /status".into());
    let v6 = pods.replace_status("p", &PostParams::default(), &fresh).await.unwrap();
    assert_eq!(v6.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    assert!(!v6.labels().contains_key("ignored"), "/status changes nothing but status");
    assert_eq!(v6.metadata.generation, Some(2));
    assert_eq!(
        api_error(pods.replace_status("p", &PostParams::default(), &fresh).await).0,
        409,
        "stale"
    );

    // An update that changes nothing writes nothing.
    let same = pods.replace("p", &PostParams::default(), &v6).await.unwrap();
    assert_eq!(rv(&same), rv(&v6));
}

#[tokio::test]
async fn patches_merge_json_and_strategic() {
    let (_s, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("p", json!({"a": "1"}))).await.unwrap();
    let pp = PatchParams::default();
    let p = pods
        .patch("p", &pp, &Patch::Merge(json!({"metadata": {"labels": {"a": null, "b": "2"}}})))
        .await
        .unwrap();
    assert_eq!(p.labels().keys().collect::<Vec<_>>(), ["b"]);
    let ops: json_patch::Patch = serde_json::from_value(
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}}]),
    )
    .unwrap();
    let p = pods.patch("p", &pp, &Patch::Json::<()>(ops)).await.unwrap();
    assert_eq!(p.annotations().get("x").map(String::as_str), Some("y"));
    let p = pods
        .patch(
            "p",
            &pp,
            &Patch::Strategic(json!({"spec": {"containers": [
                {"name": "main", "env": [{"name": "B", "value": "2"}]},
                {"name": "sidecar", "image": "envoy"}
            ]}})),
        )
        .await
        .unwrap();
    let containers = &p.spec.as_ref().unwrap().containers;
    assert_eq!(containers.len(), 2, "containers merge by name");
    let env: Vec<_> = containers[0].env.as_ref().unwrap().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(env, ["A", "B"], "env merges by name");
    assert_eq!(containers[0].image.as_deref(), Some("busybox:1.36"));
    let p = pods
        .patch(
            "p",
            &pp,
            &Patch::Strategic(
                json!({"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.spec.unwrap().containers.len(), 1);
    let stale = pods
        .patch(
            "p",
            &pp,
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1", "labels": {"c": "3"}}})),
        )
        .await;
    assert_eq!(
        api_error(stale),
        (409, "Conflict".into()),
        "a resourceVersion in a patch is a precondition"
    );
    let missing = pods.patch("nope", &pp, &Patch::Merge(json!({}))).await;
    assert_eq!(api_error(missing).0, 404);
    let bad = pods
        .patch(
            "p",
            &pp,
            &Patch::Json::<()>(
                serde_json::from_value(
                    json!([{"op": "test", "path": "/metadata/name", "value": "q"}]),
                )
                .unwrap(),
            ),
        )
        .await;
    assert_eq!(api_error(bad).0, 422);
}

#[tokio::test]
async fn status_patch_changes_only_status() {
    let (_s, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("p", json!({}))).await.unwrap();
    let p = pods
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"phase": "Running"}, "metadata": {"labels": {"x": "y"}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
    assert!(p.metadata.labels.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn delete_with_finalizers_waits_for_them() {
    let (_s, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "c", "finalizers": ["example.com/hold"]}, "data": {"k": "v"}}),
    )
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let deleted =
        cms.delete("c", &DeleteParams::default()).await.unwrap().left().expect("the object");
    assert!(deleted.metadata.deletion_timestamp.is_some());
    let held = cms.get("c").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some(), "still there, marked");
    cms.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_error(cms.get("c").await).0, 404, "gone once its finalizers are");

    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "d"}})).unwrap(),
    )
    .await
    .unwrap();
    let gone = cms.delete("d", &DeleteParams::default()).await.unwrap().left().expect("the object");
    assert_eq!(gone.name_any(), "d");
    assert_eq!(api_error(cms.get("d").await).0, 404);
    assert_eq!(api_error(cms.delete("d", &DeleteParams::default()).await).0, 404);
}

#[tokio::test]
async fn delete_preconditions_and_collections() {
    let (_s, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    create_pods(&pods, (0..3).map(|i| format!("p{i}"))).await;
    let dp = DeleteParams {
        preconditions: Some(kube_client::api::Preconditions {
            resource_version: Some("1".into()),
            uid: None,
        }),
        ..Default::default()
    };
    assert_eq!(api_error(pods.delete("p0", &dp).await).0, 409);
    pods.patch(
        "p1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"doomed": "yes"}}})),
    )
    .await
    .unwrap();
    let lp = kube_client::api::ListParams::default().labels("doomed=yes");
    pods.delete_collection(&DeleteParams::default(), &lp).await.unwrap();
    let left: Vec<_> =
        pods.list(&Default::default()).await.unwrap().items.iter().map(|p| p.name_any()).collect();
    assert_eq!(left, ["p0", "p2"]);
}

#[tokio::test]
async fn deleting_a_namespace_deletes_its_objects() {
    let (_s, client) = server().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team");
    create_pods(&pods, ["a".to_owned()]).await;
    namespaces.delete("team", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_error(pods.get("a").await).0, 404);
}

#[tokio::test]
async fn custom_resources_work_with_dynamic_objects() {
    let widget = ResourceType::new("example.com", "v1", "Widget", "widgets", true).with_status();
    let ar = widget.api_resource();
    let server = ApiServer::builder().resource(widget).start().await.unwrap();
    let widgets: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &ar);
    let w = DynamicObject::new("w1", &ar).data(json!({"spec": {"size": 3}}));
    let created = widgets.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.data["spec"]["size"], 3);
    let patched = widgets
        .patch("w1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 4}})))
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));
    let strategic = widgets
        .patch("w1", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"size": 5}})))
        .await;
    assert_eq!(api_error(strategic).0, 415, "as for real CRDs, strategic merge is refused");
    let list = widgets.list(&Default::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
}
