//! create, get, update, patch, delete, status, finalizers, custom resources.

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, RawResponse, Target};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_client::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube_client::{Api, ResourceExt};
use serde_json::json;

use super::common::*;
use http::Method;

async fn create_sets_server_fields_and_the_path_namespace(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &t.ns);
    let created =
        pods.create(&PostParams::default(), &pod("web-0", json!({"app": "web"}))).await.unwrap();
    assert_eq!(created.metadata.namespace.as_deref(), Some(t.ns.as_str()));
    assert!(created.metadata.uid.as_ref().is_some_and(|u| u.len() == 36));
    assert!(created.metadata.creation_timestamp.is_some());
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
case!(Needs::Protocol, create_sets_server_fields_and_the_path_namespace);

async fn create_refuses_duplicates_missing_namespaces_and_bad_names(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &t.ns);
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
    // The real server's message, and its details: the kind, and the field that is wrong.
    let status = match pods.create(&PostParams::default(), &pod("Bad_Name", json!({}))).await {
        Err(kube_client::Error::Api(status)) => status,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        status.message,
        "Pod \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    );
    let details = status.details.expect("details");
    assert_eq!((details.kind.as_str(), details.name.as_str()), ("Pod", "Bad_Name"));
    let causes: Vec<(&str, &str)> =
        details.causes.iter().map(|c| (c.reason.as_str(), c.field.as_str())).collect();
    assert_eq!(causes, [("FieldValueInvalid", "metadata.name")]);
    let unnamed: Namespace = serde_json::from_value(json!({"metadata": {}})).unwrap();
    let status = match namespaces.create(&PostParams::default(), &unnamed).await {
        Err(kube_client::Error::Api(status)) => status,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (status.code, status.message.as_str()),
        (
            422,
            "Namespace \"\" is invalid: metadata.name: Required value: name or generateName is required"
        )
    );
}
case!(Needs::Protocol, create_refuses_duplicates_missing_namespaces_and_bad_names);

async fn errors_are_status_objects_with_code_reason_and_message(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    match pods.get("missing").await {
        Err(kube_client::Error::Api(status)) => {
            assert_eq!(status.code, 404);
            assert_eq!(status.reason, "NotFound");
            assert_eq!(status.message, "pods \"missing\" not found");
        }
        other => panic!("{other:?}"),
    }
    // Parameters the server does not know are ignored, as the real server ignores them.
    let unknown =
        t.raw_get(&format!("/api/v1/namespaces/{}/pods?bogus=1&limit=1&x=%ff", t.ns)).await;
    assert_eq!(unknown.status, 200, "{}", unknown.body);
}
case!(Needs::Protocol, errors_are_status_objects_with_code_reason_and_message);

async fn update_conflicts_on_a_stale_version_and_status_goes_through_its_subresource(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    let v1 = pods.create(&PostParams::default(), &pod("p", json!({}))).await.unwrap();
    let mut labelled = v1.clone();
    labelled.labels_mut().insert("tier".into(), "front".into());
    let v2 = pods.replace("p", &PostParams::default(), &labelled).await.unwrap();
    assert!(rv(&v2) > rv(&v1));
    assert_eq!(
        api_error(pods.replace("p", &PostParams::default(), &v1).await),
        (409, "Conflict".into())
    );

    let mut respec = v2.clone();
    respec.spec.as_mut().unwrap().containers[0].image = Some("busybox:1.37".into());
    let v3 = pods.replace("p", &PostParams::default(), &respec).await.unwrap();
    assert_eq!(v3.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("busybox:1.37"));

    // Status goes through /status only.
    let mut with_status = v3.clone();
    with_status.status.as_mut().unwrap().phase = Some("Running".into());
    let v4 = pods.replace("p", &PostParams::default(), &with_status).await.unwrap();
    assert_eq!(
        v4.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending"),
        "the main endpoint ignores status"
    );
    let mut fresh = pods.get("p").await.unwrap();
    fresh.status.as_mut().unwrap().phase = Some("Running".into());
    fresh.spec.as_mut().unwrap().containers[0].image = Some("ignored:by-status".into());
    let v6 = pods.replace_status("p", &PostParams::default(), &fresh).await.unwrap();
    assert_eq!(v6.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(
        v6.spec.as_ref().unwrap().containers[0].image.as_deref(),
        Some("busybox:1.37"),
        "/status leaves the spec alone"
    );
    assert_eq!(
        api_error(pods.replace_status("p", &PostParams::default(), &fresh).await).0,
        409,
        "stale"
    );

    // An update that changes nothing writes nothing.
    let same = pods.replace("p", &PostParams::default(), &v6).await.unwrap();
    assert_eq!(rv(&same), rv(&v6));
}
case!(Needs::Protocol, update_conflicts_on_a_stale_version_and_status_goes_through_its_subresource);

async fn patches_merge_json_and_strategic(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
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
    // Strategic merge: lists merge by their key, so naming one container changes it alone.
    let p = pods
        .patch(
            "p",
            &pp,
            &Patch::Strategic(
                json!({"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}),
            ),
        )
        .await
        .unwrap();
    let containers = &p.spec.as_ref().unwrap().containers;
    assert_eq!(containers.len(), 1, "containers merge by name");
    assert_eq!(containers[0].image.as_deref(), Some("busybox:1.37"));
    let env: Vec<_> = containers[0].env.as_ref().unwrap().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(env, ["A"], "the rest of the container is kept");
    // A pod's container list cannot change; a service's ports can: they merge by port.
    let services: Api<Service> = Api::namespaced(t.client.clone(), &t.ns);
    let svc = serde_json::from_value(json!({
        "metadata": {"name": "s"},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let ports = |s: Service| -> Vec<(i32, String)> {
        s.spec
            .unwrap()
            .ports
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                let target = match p.target_port {
                    Some(IntOrString::Int(i)) => i.to_string(),
                    Some(IntOrString::String(s)) => s,
                    None => String::new(),
                };
                (p.port, target)
            })
            .collect()
    };
    let s = services
        .patch(
            "s",
            &pp,
            &Patch::Strategic(json!({"spec": {"ports": [
                {"port": 80, "targetPort": 9090},
                {"name": "https", "port": 443, "targetPort": 8443}
            ]}})),
        )
        .await
        .unwrap();
    assert_eq!(ports(s), [(80, "9090".into()), (443, "8443".into())]);
    let s = services
        .patch(
            "s",
            &pp,
            &Patch::Strategic(json!({"spec": {"ports": [{"port": 443, "$patch": "delete"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(ports(s), [(80, "9090".into())]);
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
case!(Needs::Protocol, patches_merge_json_and_strategic);

/// A pod's status subresource takes status and metadata, never spec (the real server's pod
/// status strategy); a custom resource's takes status alone (in the custom resource case).
async fn status_patch_changes_status_and_labels_but_not_spec(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    pods.create(&PostParams::default(), &pod("p", json!({}))).await.unwrap();
    let p = pods
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "status": {"phase": "Running"},
                "metadata": {"labels": {"x": "y"}},
                "spec": {"activeDeadlineSeconds": 60}
            })),
        )
        .await
        .unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(p.metadata.labels.unwrap_or_default().get("x").map(String::as_str), Some("y"));
    assert_eq!(p.spec.unwrap().active_deadline_seconds, None, "spec is not the status's");
}
case!(Needs::Protocol, status_patch_changes_status_and_labels_but_not_spec);

async fn delete_with_finalizers_waits_for_them(t: &Target) {
    let client = t.client.clone();
    let cms: Api<ConfigMap> = Api::namespaced(client, &t.ns);
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
    // A completed delete answers with a Status for most kinds, with the object for pods.
    let gone = cms.delete("d", &DeleteParams::default()).await.unwrap();
    let status = gone.right().expect("a Status for a configmap");
    assert_eq!(status.details.map(|d| d.name).as_deref(), Some("d"));
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    create_pods(&pods, ["p".to_owned()]).await;
    let pod = pods.delete("p", &DeleteParams::default()).await.unwrap().left().expect("a pod");
    assert!(pod.metadata.deletion_timestamp.is_some(), "the pod as it was marked and removed");
    assert_eq!(api_error(pods.get("p").await).0, 404);
    assert_eq!(api_error(cms.get("d").await).0, 404);
    assert_eq!(api_error(cms.delete("d", &DeleteParams::default()).await).0, 404);
}
case!(Needs::Protocol, delete_with_finalizers_waits_for_them);

async fn delete_preconditions_and_collections(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
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
case!(Needs::Protocol, delete_preconditions_and_collections);

/// Embedded only: a real server deletes a namespace's objects through the namespace
/// controller of kube-controller-manager, which the e2e server does not run (the namespace
/// stays `Terminating`).
async fn deleting_a_namespace_deletes_its_objects(t: &Target) {
    let client = t.client.clone();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &t.ns);
    create_pods(&pods, ["a".to_owned()]).await;
    namespaces.delete(&t.ns, &DeleteParams::default()).await.unwrap();
    assert_eq!(api_error(pods.get("a").await).0, 404);
}
case!(Needs::Embedded, deleting_a_namespace_deletes_its_objects);

async fn custom_resources_work_with_dynamic_objects_and_count_generations(t: &Target) {
    let ar = t.custom_resource(&crate::common::widget()).await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &t.ns, &ar);
    let w = DynamicObject::new("w1", &ar).data(json!({"spec": {"size": 3}}));
    let created = widgets.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.data["spec"]["size"], 3);
    assert_eq!(created.metadata.generation, Some(1));
    let labelled = widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(1), "a metadata change keeps generation");
    let with_status = widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}, "metadata": {"labels": {"c": "d"}}})),
        )
        .await
        .unwrap();
    assert_eq!(with_status.data["status"]["ready"], true);
    assert!(
        !with_status.metadata.labels.unwrap_or_default().contains_key("c"),
        "a custom resource's /status takes nothing but status"
    );
    assert_eq!(with_status.metadata.generation, Some(1), "a status change keeps generation");
    let patched = widgets
        .patch("w1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 4}})))
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2), "a spec change bumps generation");
    let strategic = widgets
        .patch("w1", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"size": 5}})))
        .await;
    assert_eq!(api_error(strategic).0, 415, "as for real CRDs, strategic merge is refused");
    let list = widgets.list(&Default::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
}
case!(Needs::Protocol, custom_resources_work_with_dynamic_objects_and_count_generations);

async fn bodies_over_the_limit_are_413_and_configmaps_over_a_mebibyte_422(t: &Target) {
    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let sized = |name: &str, bytes: usize| -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": { "name": name },
            "data": { "a": "x".repeat(bytes) },
        }))
        .unwrap()
    };
    let huge = configmaps.create(&PostParams::default(), &sized("huge", (3 << 20) + 10)).await;
    assert_eq!(api_error(huge), (413, "RequestEntityTooLarge".into()));
    let big = configmaps.create(&PostParams::default(), &sized("big", (1 << 20) + 10)).await;
    assert_eq!(api_error(big), (422, "Invalid".into()));
    configmaps.create(&PostParams::default(), &sized("fits", 1 << 20)).await.unwrap();
    let grown = Patch::Merge(json!({ "data": { "b": "y" } }));
    let refused = configmaps.patch("fits", &PatchParams::default(), &grown).await;
    assert_eq!(api_error(refused), (422, "Invalid".into()), "an update over the limit too");
}
case!(Needs::Protocol, bodies_over_the_limit_are_413_and_configmaps_over_a_mebibyte_422);

/// Server-side field validation (from 1.25; 1.20 ignores the parameter): unknown and
/// duplicate fields warned of by default, refused with `fieldValidation=Strict`, not
/// mentioned with `Ignore`; another value is refused.
async fn field_validation_warns_of_or_refuses_unknown_and_duplicate_fields(t: &Target) {
    let path = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let body = |name: &str| {
        format!(
            r#"{{"metadata":{{"name":"{name}","bogus":1}},"immutable":false,"spec":{{"x":1}},"immutable":true}}"#
        )
        .into_bytes()
    };
    let post = |query: &'static str, name: &'static str| {
        let path = format!("{path}{query}");
        async move {
            t.raw_request(Method::POST, &path, &[("Content-Type", "application/json")], body(name))
                .await
        }
    };
    let warnings = |r: &RawResponse| -> Vec<String> {
        r.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("warning"))
            .map(|(_, v)| v.clone())
            .collect()
    };
    let problems = [
        r#"299 - "unknown field \"metadata.bogus\"""#,
        r#"299 - "unknown field \"spec\"""#,
        r#"299 - "duplicate field \"immutable\"""#,
    ];
    let warned = post("", "warned").await;
    let strict = post("?fieldValidation=Strict", "strict").await;
    let ignored = post("?fieldValidation=Ignore", "ignored").await;
    let bogus = post("?fieldValidation=bogus", "bogus").await;
    if !t.version().at_least(25) {
        for r in [&warned, &strict, &ignored, &bogus] {
            assert_eq!((r.status, warnings(r).len()), (201, 0), "on {}: {}", t.version(), r.body);
        }
        return;
    }
    assert_eq!(warned.status, 201, "{}", warned.body);
    assert_eq!(warnings(&warned), problems);
    let stored: serde_json::Value = serde_json::from_str(&warned.body).unwrap();
    assert_eq!(stored["immutable"], true, "the last of a duplicate wins");
    assert_eq!(strict.status, 400, "{}", strict.body);
    let status: serde_json::Value = serde_json::from_str(&strict.body).unwrap();
    assert_eq!(
        status["message"],
        r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "metadata.bogus", unknown field "spec", duplicate field "immutable""#
    );
    assert_eq!((ignored.status, warnings(&ignored).len()), (201, 0), "{}", ignored.body);
    assert_eq!(bogus.status, 422, "{}", bogus.body);
    assert!(
        bogus.body.contains(r#"fieldValidation: Unsupported value: \"bogus\""#),
        "{}",
        bogus.body
    );
}
case!(Needs::Protocol, field_validation_warns_of_or_refuses_unknown_and_duplicate_fields);

/// `dryRun=All` on a create, a patch and a delete: each answered as it would be done,
/// nothing stored (kubectl's `diff` and `--dry-run=server` rely on it).
async fn dry_runs_are_answered_and_store_nothing(t: &Target) {
    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let cm = |name: &str, v: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"a": v}})).unwrap()
    };
    let dry = PostParams { dry_run: true, ..Default::default() };
    let answered = configmaps.create(&dry, &cm("dry", "1")).await.unwrap();
    assert_eq!(answered.data.unwrap()["a"], "1");
    assert!(answered.metadata.resource_version.is_none(), "a dry create has no version");
    assert!(configmaps.get_opt("dry").await.unwrap().is_none(), "nothing created");

    let stored = configmaps.create(&PostParams::default(), &cm("kept", "1")).await.unwrap();
    let patch = Patch::Merge(json!({"data": {"a": "2"}}));
    let answered =
        configmaps.patch("kept", &PatchParams::default().dry_run(), &patch).await.unwrap();
    assert_eq!(answered.data.unwrap()["a"], "2");
    assert_eq!(answered.metadata.resource_version, stored.metadata.resource_version);
    let dry_delete = DeleteParams { dry_run: true, ..Default::default() };
    configmaps.delete("kept", &dry_delete).await.unwrap();
    let now = configmaps.get("kept").await.unwrap();
    assert_eq!(now.data.unwrap()["a"], "1", "neither patched nor deleted");
    assert_eq!(now.metadata.resource_version, stored.metadata.resource_version);
}
case!(Needs::Protocol, dry_runs_are_answered_and_store_nothing);

async fn propagation_policies_hold_the_owner_with_their_finalizers(t: &Target) {
    // Neither server here runs kube-controller-manager: the finalizers a policy puts on the
    // owner stay (the embedded server's opt-in garbage collector removes them).
    let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    for (name, params, finalizer) in [
        ("fg", DeleteParams::foreground(), Some("foregroundDeletion")),
        ("or", DeleteParams::orphan(), Some("orphan")),
        ("bg", DeleteParams::background(), None),
    ] {
        let cm = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
        let answer = cms.delete(name, &params).await.unwrap();
        match finalizer {
            Some(finalizer) => {
                let held = answer.left().expect("the object, held");
                assert!(held.metadata.deletion_timestamp.is_some(), "{name}: marked");
                assert_eq!(held.finalizers(), [finalizer.to_owned()], "{name}");
                let stored = cms.get(name).await.unwrap();
                assert_eq!(stored.finalizers(), [finalizer.to_owned()], "{name}");
                // Released by hand, as the collector would once done.
                let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
                cms.patch(name, &PatchParams::default(), &release).await.unwrap();
            }
            None => assert!(answer.is_right(), "{name}: deleted at once"),
        }
        assert_eq!(api_error(cms.get(name).await).0, 404, "{name}");
    }

    // A policy the server does not know, or one set twice, is refused.
    let cm = serde_json::from_value(json!({"metadata": {"name": "bad"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let path = format!("/api/v1/namespaces/{}/configmaps/bad", t.ns);
    let json = [("Content-Type", "application/json")];
    for (body, cause) in [
        (
            json!({"propagationPolicy": "Sometimes"}),
            "Unsupported value: \"Sometimes\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\"",
        ),
        (
            json!({"propagationPolicy": "Orphan", "orphanDependents": true}),
            "Invalid value: \"Orphan\": orphanDependents and deletionPropagation cannot be both set",
        ),
    ] {
        let answer =
            t.raw_request(Method::DELETE, &path, &json, body.to_string().into_bytes()).await;
        assert_eq!(answer.status, 422, "{}", answer.body);
        let status: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(status["reason"], "Invalid");
        let message =
            format!("DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: {cause}");
        assert_eq!(status["message"], message.as_str());
        assert_eq!(status["details"]["causes"][0]["field"], "propagationPolicy");
    }
    cms.get("bad").await.expect("a refused delete deletes nothing");
}
case!(Needs::Protocol, propagation_policies_hold_the_owner_with_their_finalizers);
