//! Server-side apply, through kube-client's `Patch::Apply` as kube-rs controllers write.

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::Api;
use kube_client::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn configmap(labels: Value, data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "ssa", "labels": labels },
        "data": data,
    })
}

/// The managers of `object`'s `managedFields`, with their operations.
fn managers(object: &impl serde::Serialize) -> Vec<(String, String)> {
    let value = serde_json::to_value(object).unwrap();
    value["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (e["manager"].as_str().unwrap().to_owned(), e["operation"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// The message and the `details.causes` fields of a failed call.
fn conflict<T: std::fmt::Debug>(result: kube_client::Result<T>) -> (u16, String) {
    match result {
        Err(kube_client::Error::Api(status)) => (status.code, status.message.clone()),
        other => panic!("expected a conflict, got {other:?}"),
    }
}

async fn server_side_apply_owns_conflicts_forces_and_removes(t: &Target) {
    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let alice = PatchParams::apply("alice");
    let bob = PatchParams::apply("bob");

    // Create on apply; the applier owns what it applied.
    let applied = configmap(json!({"x": "1"}), json!({"a": "1", "b": "2"}));
    let created = configmaps.patch("ssa", &alice, &Patch::Apply(&applied)).await.unwrap();
    assert_eq!(managers(&created), [("alice".to_owned(), "Apply".to_owned())]);
    let entry = serde_json::to_value(&created).unwrap()["metadata"]["managedFields"][0].clone();
    assert_eq!(
        entry["fieldsV1"],
        json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:x": {}}}})
    );

    // Another applier changing alice's field conflicts; the same value is shared.
    let change = configmap(json!({}), json!({"a": "2"}));
    let (code, message) = conflict(configmaps.patch("ssa", &bob, &Patch::Apply(&change)).await);
    assert_eq!(code, 409);
    assert_eq!(message, "Apply failed with 1 conflict: conflict with \"alice\": .data.a");
    let same = configmap(json!({}), json!({"a": "1"}));
    configmaps.patch("ssa", &bob, &Patch::Apply(&same)).await.unwrap();

    // Forced, bob takes the field over.
    let forced =
        configmaps.patch("ssa", &bob.clone().force(), &Patch::Apply(&change)).await.unwrap();
    let data = forced.data.clone().unwrap();
    assert_eq!((data["a"].as_str(), data["b"].as_str()), ("2", "2"));

    // What alice stops applying goes, unless bob owns it; she then owns nothing.
    let nothing = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}});
    let after = configmaps.patch("ssa", &alice, &Patch::Apply(&nothing)).await.unwrap();
    assert_eq!(after.data.clone().unwrap().len(), 1, "b removed, a kept: {:?}", after.data);
    assert_eq!(after.data.unwrap()["a"], "2");
    assert!(after.metadata.labels.is_none_or(|l| l.is_empty()), "the emptied labels go");
    assert_eq!(
        managers(&configmaps.get("ssa").await.unwrap()),
        [("bob".to_owned(), "Apply".to_owned())]
    );

    // bob applied `labels: {}` and, on 1.36, owns the map itself: now that the object has no
    // labels, another applier's `labels: {}` conflicts with him. 1.20 recorded no ownership.
    let dry = PatchParams::apply("carol").dry_run();
    let with_labels = configmap(json!({}), json!({"c": "3"}));
    let answered = configmaps.patch("ssa", &dry, &Patch::Apply(&with_labels)).await;
    if t.version().at_least(36) {
        let (code, message) = conflict(answered);
        assert_eq!(code, 409);
        assert_eq!(
            message,
            "Apply failed with 1 conflict: conflict with \"bob\": .metadata.labels"
        );
    } else {
        assert_eq!(answered.unwrap().data.unwrap()["c"], "3", "on {}", t.version());
    }

    // A dry run answers with the result and stores nothing.
    let more = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"c": "3"}});
    let answered = configmaps.patch("ssa", &dry, &Patch::Apply(&more)).await.unwrap();
    assert_eq!(answered.data.unwrap()["c"], "3");
    assert!(!configmaps.get("ssa").await.unwrap().data.unwrap().contains_key("c"));
}
case!(Needs::Protocol, server_side_apply_owns_conflicts_forces_and_removes);

async fn server_side_apply_merges_containers_by_name_and_applies_status(t: &Target) {
    let deployments: Api<Deployment> = Api::namespaced(t.client.clone(), &t.ns);
    let deployment = |image: &str| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web" },
            "spec": {
                "selector": { "matchLabels": { "app": "web" } },
                "template": {
                    "metadata": { "labels": { "app": "web" } },
                    "spec": { "containers": [{ "name": "main", "image": image }] },
                },
            },
        })
    };
    let a = PatchParams::apply("a");
    deployments.patch("web", &a, &Patch::Apply(&deployment("nginx:1"))).await.unwrap();
    let (code, message) = conflict(
        deployments
            .patch("web", &PatchParams::apply("b"), &Patch::Apply(&deployment("nginx:2")))
            .await,
    );
    assert_eq!(code, 409);
    assert_eq!(
        message,
        "Apply failed with 1 conflict: conflict with \"a\": .spec.template.spec.containers[name=\"main\"].image"
    );
    // A second container, applied by another manager, merges in by name.
    let sidecar = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "web" },
        "spec": { "template": { "spec": { "containers": [{ "name": "log", "image": "busybox:1.36" }] } } },
    });
    let merged =
        deployments.patch("web", &PatchParams::apply("c"), &Patch::Apply(&sidecar)).await.unwrap();
    let names: Vec<String> =
        merged.spec.template.spec.unwrap().containers.into_iter().map(|c| c.name).collect();
    assert_eq!(names, ["main", "log"]);

    // Apply on /status writes the status alone.
    let status = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "web" },
        "status": { "replicas": 3 },
        "spec": { "replicas": 9 },
    });
    let written = deployments
        .patch_status("web", &PatchParams::apply("status-writer"), &Patch::Apply(&status))
        .await
        .unwrap();
    assert_eq!(written.status.and_then(|s| s.replicas), Some(3));
    assert_ne!(written.spec.replicas, Some(9), "status does not write spec");

    // The same manager applies the status and the object: from 1.22, two entries apart by
    // subresource, and the object's apply leaves the applied status alone.
    let a_status = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "web" },
        "status": { "replicas": 4 },
    });
    // (Forced: status-writer owns `.status.replicas`.)
    let forced = PatchParams::apply("a").force();
    deployments.patch_status("web", &forced, &Patch::Apply(&a_status)).await.unwrap();
    let written =
        deployments.patch("web", &a, &Patch::Apply(&deployment("nginx:1"))).await.unwrap();
    assert_eq!(written.status.and_then(|s| s.replicas), Some(4));
    if t.version().at_least(22) {
        let mut entries: Vec<(String, Option<String>)> = written
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|m| m.manager.as_deref() == Some("a"))
            .map(|m| (m.operation.clone().unwrap_or_default(), m.subresource.clone()))
            .collect();
        entries.sort();
        assert_eq!(
            entries,
            [("Apply".to_owned(), None), ("Apply".to_owned(), Some("status".to_owned()))]
        );
    }
}
case!(Needs::Protocol, server_side_apply_merges_containers_by_name_and_applies_status);

/// A custom resource's status applied through `/status` is owned as a main resource's is:
/// its manager is recorded, and a field it stops applying is removed.
async fn a_custom_resources_status_apply_records_its_manager(t: &Target) {
    let ar = t.custom_resource(&super::common::widget()).await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &t.ns, &ar);
    let widget = DynamicObject::new("w", &ar).data(json!({ "spec": { "size": 1 } }));
    widgets.create(&PostParams::default(), &widget).await.unwrap();
    let status = |fields: Value| {
        Patch::Apply(json!({
            "apiVersion": ar.api_version, "kind": ar.kind, "metadata": { "name": "w" },
            "status": fields,
        }))
    };
    let writer = PatchParams::apply("status-writer");
    let written =
        widgets.patch_status("w", &writer, &status(json!({ "a": 1, "b": 2 }))).await.unwrap();
    assert!(
        managers(&written).contains(&("status-writer".to_owned(), "Apply".to_owned())),
        "{:?}",
        managers(&written)
    );
    let written = widgets.patch_status("w", &writer, &status(json!({ "a": 1 }))).await.unwrap();
    assert_eq!(written.data["status"], json!({ "a": 1 }), "b, no longer applied, is removed");
}
case!(Needs::Protocol, a_custom_resources_status_apply_records_its_manager);
