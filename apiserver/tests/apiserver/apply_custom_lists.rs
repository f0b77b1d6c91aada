//! A custom resource's lists under server-side apply and patches, as its CRD's structural
//! schema declares them: `x-kubernetes-list-type: map` keyed by `x-kubernetes-list-map-keys`
//! merges item by item, so two field managers each own their own condition; a list that
//! declares no type is atomic, owned and replaced whole.

use std::time::Duration;

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_client::Api;
use kube_client::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::common::api_error;

/// A namespaced kind of example.com with a status subresource, whose `status.conditions`
/// items are keyed by `type` where `keyed`, and whose list declares no type otherwise.
fn definition(kind: &str, plural: &str, keyed: bool) -> CustomResourceDefinition {
    let mut conditions = json!({
        "type": "array",
        "items": { "type": "object", "required": ["type", "status"], "properties": {
            "type": { "type": "string" },
            "status": { "type": "string" },
            "reason": { "type": "string" },
        } },
    });
    if keyed {
        conditions["x-kubernetes-list-type"] = json!("map");
        conditions["x-kubernetes-list-map-keys"] = json!(["type"]);
    }
    serde_json::from_value(json!({
        "metadata": { "name": format!("{plural}.example.com") },
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": { "plural": plural, "singular": kind.to_lowercase(), "kind": kind },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": { "type": "object", "properties": {
                    "spec": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                    "status": { "type": "object", "properties": { "conditions": conditions } },
                } } } }],
        }
    }))
    .expect("a valid CRD")
}

/// Defines `crd`'s kind and waits until an object of it can be created: `name` in the case's
/// namespace.
async fn define(t: &Target, crd: &CustomResourceDefinition, name: &str) -> Api<DynamicObject> {
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let crd_name = crd.metadata.name.as_deref().unwrap_or_default();
    loop {
        match crds.create(&PostParams::default(), crd).await {
            Ok(_) => break,
            // A previous run's, still terminating (its objects go first): wait until it is gone.
            Err(kube_client::Error::Api(s)) if s.code == 409 => {
                let existing = crds.get_opt(crd_name).await.expect("reading the CRD");
                if existing.as_ref().is_some_and(|c| c.metadata.deletion_timestamp.is_none()) {
                    break; // a previous run's, left in place
                }
                assert!(tokio::time::Instant::now() < deadline, "{crd_name} was never deleted");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("creating the CRD: {e}"),
        }
    }
    let ar = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &t.ns, &ar);
    let object = DynamicObject::new(name, &ar).data(json!({ "spec": { "size": 1 } }));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => return api,
            Err(kube_client::Error::Api(s)) if s.code == 404 => {
                assert!(tokio::time::Instant::now() < deadline, "{} was never served", ar.kind);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("creating a {}: {e}", ar.kind),
        }
    }
}

/// The status apply of one condition, `kind` `status`, to object `name`.
fn condition(kind: &str, name: &str, condition: &str, status: &str) -> Patch<Value> {
    Patch::Apply(json!({
        "apiVersion": "example.com/v1", "kind": kind, "metadata": { "name": name },
        "status": { "conditions": [{ "type": condition, "status": status, "reason": "Set" }] },
    }))
}

/// The `type`s of an object's conditions, in order.
fn types(object: &DynamicObject) -> Vec<String> {
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The `fieldsV1` of `manager`'s entry in `object`'s managedFields.
fn owned_by(object: &DynamicObject, manager: &str) -> Value {
    let entry =
        object.metadata.managed_fields.iter().flatten().find(|m| {
            m.manager.as_deref() == Some(manager) && m.operation.as_deref() == Some("Apply")
        });
    entry.and_then(|e| e.fields_v1.as_ref()).map(|f| f.0.clone()).unwrap_or(Value::Null)
}

async fn two_managers_each_own_their_condition_where_the_crd_keys_the_list(t: &Target) {
    let crd = definition("Beacon", "beacons", true);
    let beacons = define(t, &crd, "b").await;
    let controller = PatchParams::apply("controller");
    let policy = PatchParams::apply("policy");
    beacons
        .patch_status("b", &controller, &condition("Beacon", "b", "Ready", "True"))
        .await
        .unwrap();
    let both = beacons
        .patch_status("b", &policy, &condition("Beacon", "b", "Compliant", "False"))
        .await
        .unwrap();
    assert_eq!(types(&both), ["Ready", "Compliant"], "both conditions kept");
    assert_eq!(
        owned_by(&both, "policy"),
        json!({ "f:status": { "f:conditions": { r#"k:{"type":"Compliant"}"#: {
            ".": {}, "f:reason": {}, "f:status": {}, "f:type": {},
        } } } }),
        "policy owns its own item alone"
    );
    // Each changes its own condition without touching the other's.
    let changed = beacons
        .patch_status("b", &controller, &condition("Beacon", "b", "Ready", "False"))
        .await
        .unwrap();
    let statuses: Vec<&Value> = changed.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["status"])
        .collect();
    assert_eq!(statuses, [&json!("False"), &json!("False")]);
    // Changing the other's condition is a conflict naming its item.
    let (code, _) = api_error(
        beacons
            .patch_status("b", &controller, &condition("Beacon", "b", "Compliant", "True"))
            .await,
    );
    assert_eq!(code, 409, "the Compliant condition is policy's");

    // A JSON merge patch replaces the list whatever the CRD declares; a strategic merge patch
    // of a custom resource is refused.
    let merge = Patch::Merge(
        json!({ "status": { "conditions": [{ "type": "Other", "status": "True" }] } }),
    );
    let merged = beacons.patch_status("b", &PatchParams::default(), &merge).await.unwrap();
    assert_eq!(types(&merged), ["Other"]);
    let strategic = Patch::Strategic(
        json!({ "status": { "conditions": [{ "type": "Ready", "status": "True" }] } }),
    );
    let (code, reason) =
        api_error(beacons.patch_status("b", &PatchParams::default(), &strategic).await);
    assert_eq!((code, reason.as_str()), (415, "UnsupportedMediaType"));

    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let _ = crds.delete("beacons.example.com", &DeleteParams::default()).await;
}
case!(Needs::Protocol, two_managers_each_own_their_condition_where_the_crd_keys_the_list);

async fn an_undeclared_list_is_atomic_and_a_second_manager_replaces_it(t: &Target) {
    let crd = definition("Buoy", "buoys", false);
    let buoys = define(t, &crd, "b").await;
    let controller = PatchParams::apply("controller");
    buoys.patch_status("b", &controller, &condition("Buoy", "b", "Ready", "True")).await.unwrap();
    let compliant = condition("Buoy", "b", "Compliant", "False");
    let (code, message) =
        match buoys.patch_status("b", &PatchParams::apply("policy"), &compliant).await {
            Err(kube_client::Error::Api(status)) => (status.code, status.message),
            other => panic!("expected a conflict, got {other:?}"),
        };
    assert_eq!(code, 409);
    // From 1.22 managedFields tell a manager's status applies apart, and conflicts say so.
    let owner = match t.version().at_least(22) {
        true => r#""controller" with subresource "status""#,
        false => r#""controller""#,
    };
    assert_eq!(
        message,
        format!("Apply failed with 1 conflict: conflict with {owner}: .status.conditions"),
        "the list is owned whole"
    );
    let forced = PatchParams::apply("policy").force();
    let replaced = buoys.patch_status("b", &forced, &compliant).await.unwrap();
    assert_eq!(types(&replaced), ["Compliant"], "the list replaced whole");
    assert_eq!(owned_by(&replaced, "controller"), Value::Null, "controller lost the list");
    assert_eq!(owned_by(&replaced, "policy"), json!({ "f:status": { "f:conditions": {} } }));

    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let _ = crds.delete("buoys.example.com", &DeleteParams::default()).await;
}
case!(Needs::Protocol, an_undeclared_list_is_atomic_and_a_second_manager_replaces_it);

async fn an_item_without_its_key_or_a_key_twice_refuses_the_apply(t: &Target) {
    let crd = definition("Flare", "flares", true);
    let flares = define(t, &crd, "f").await;
    let with = |conditions: Value| {
        Patch::Apply(json!({
            "apiVersion": "example.com/v1", "kind": "Flare", "metadata": { "name": "f" },
            "status": { "conditions": conditions },
        }))
    };
    let controller = PatchParams::apply("controller");
    let keyless = with(json!([{ "status": "True" }]));
    let (code, message) = match flares.patch_status("f", &controller, &keyless).await {
        Err(kube_client::Error::Api(status)) => (status.code, status.message),
        other => panic!("expected a refusal, got {other:?}"),
    };
    // From v1.36.2; v1.20.2 names no object and words it otherwise (the release between that
    // changed it is not pinned down: both are checked, and the embedded server is 1.36's).
    let new = t.version().at_least(21);
    let (object, omits) = match new {
        true => (
            " (/f; example.com/v1, Kind=Flare)",
            "omits all key fields [\"type\"] (and doesn't have default values for any key fields)",
        ),
        false => ("", "omits key field \"type\" (and doesn't have default value)"),
    };
    assert_eq!(code, 500, "{message}");
    assert_eq!(
        message,
        format!(
            "failed to create typed patch object{object}: .status.conditions: element 0: \
             associative list with keys has an element that {omits}"
        )
    );
    let twice = with(
        json!([{ "type": "Ready", "status": "True" }, { "type": "Ready", "status": "False" }]),
    );
    let (code, message) = match flares.patch_status("f", &controller, &twice).await {
        Err(kube_client::Error::Api(status)) => (status.code, status.message),
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(code, 500, "{message}");
    assert_eq!(
        message,
        format!(
            "failed to create typed patch object{object}: .status.conditions: duplicate \
             entries for key [type=\"Ready\"]"
        )
    );
    // Nothing was written: an apply of one condition holds just that one.
    let one = flares
        .patch_status("f", &controller, &with(json!([{ "type": "Ready", "status": "True" }])))
        .await;
    assert_eq!(types(&one.unwrap()), ["Ready"]);

    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let _ = crds.delete("flares.example.com", &DeleteParams::default()).await;
}
case!(Needs::Protocol, an_item_without_its_key_or_a_key_twice_refuses_the_apply);
