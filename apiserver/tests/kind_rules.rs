//! Rules of one kind or group, as a user of the embedded server meets them over HTTP: which
//! writes pass admission webhooks, and which names a kind takes.

use ctrlkit_apiserver::{ApiServer, ResourceType};
use kube_client::api::{ApiResource, DynamicObject, PostParams};
use kube_client::{Api, Client};
use serde_json::json;

fn admissionregistration(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn configmaps() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
    }
}

/// A webhook on every kind of `admissionregistration.k8s.io` and on ConfigMaps, that nothing
/// answers (`failurePolicy: Fail`): a write it is called for fails.
fn unreachable_webhook(name: &str) -> serde_json::Value {
    json!({ "webhooks": [{
        "name": "all.example.com", "clientConfig": { "url": "https://127.0.0.1:1/x" },
        "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Fail",
        "rules": [
            { "operations": ["*"], "apiGroups": ["admissionregistration.k8s.io"],
              "apiVersions": ["*"], "resources": ["*"] },
            { "operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"],
              "resources": ["configmaps"] },
        ],
    }], "metadata": { "name": name } })
}

async fn create(client: &Client, ar: &ApiResource, name: &str, data: serde_json::Value) -> String {
    let api: Api<DynamicObject> = match ar.kind.as_str() {
        "ConfigMap" => Api::namespaced_with(client.clone(), "default", ar),
        _ => Api::all_with(client.clone(), ar),
    };
    let object = DynamicObject::new(name, ar).data(data);
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => "created".to_owned(),
        Err(kube_client::Error::Api(status)) => format!("{} {}", status.code, status.message),
        Err(err) => panic!("{err}"),
    }
}

#[tokio::test]
async fn no_write_to_a_kind_of_admissionregistration_passes_webhooks() {
    let server = ApiServer::builder()
        .resource(ResourceType::new(
            "admissionregistration.k8s.io",
            "v1",
            "Example",
            "examples",
            false,
        ))
        .start()
        .await
        .unwrap();
    let client = server.client();
    let validating =
        admissionregistration("ValidatingWebhookConfiguration", "validatingwebhookconfigurations");
    let created = create(&client, &validating, "all", unreachable_webhook("all")).await;
    assert_eq!(created, "created");

    // The webhook is called for a ConfigMap, and fails it.
    let refused = create(&client, &configmaps(), "a", json!({})).await;
    assert!(
        refused.starts_with("500 Internal error occurred: failed calling webhook"),
        "{refused}"
    );

    // A webhook configuration's own writes pass no webhook, the one above included.
    let mutating =
        admissionregistration("MutatingWebhookConfiguration", "mutatingwebhookconfigurations");
    let second = create(&client, &mutating, "second", json!({ "webhooks": [] })).await;
    assert_eq!(second, "created", "a mutating webhook configuration went to the webhook");
    let again = create(&client, &validating, "again", json!({ "webhooks": [] })).await;
    assert_eq!(again, "created", "a validating webhook configuration went to the webhook");

    // Nor does any other kind of the group: a type a user registered there.
    let examples = admissionregistration("Example", "examples");
    let example = create(&client, &examples, "e", json!({ "spec": {} })).await;
    assert_eq!(example, "created", "a kind of admissionregistration.k8s.io went to the webhook");
}

#[tokio::test]
async fn namespaces_and_services_take_dns_labels_and_configmaps_subdomains() {
    let server = ApiServer::start().await.unwrap();
    let client = server.client();
    let long = "a".repeat(64);
    let namespaces = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Namespace".into(),
        plural: "namespaces".into(),
    };
    let services =
        ApiResource { kind: "Service".into(), plural: "services".into(), ..configmaps() };
    let spec = json!({ "spec": { "ports": [{ "port": 80 }] } });
    for (ar, data) in [(&namespaces, json!({})), (&services, spec)] {
        let why =
            [(long.as_str(), "must be no more than 63 characters"), ("a.b", "RFC 1123 label")];
        for (name, why) in why {
            let api: Api<DynamicObject> = match ar.kind.as_str() {
                "Namespace" => Api::all_with(client.clone(), ar),
                _ => Api::namespaced_with(client.clone(), "default", ar),
            };
            let object = DynamicObject::new(name, ar).data(data.clone());
            let answer = api.create(&PostParams::default(), &object).await;
            let Err(kube_client::Error::Api(status)) = answer else {
                panic!("{} {name:?} was taken: {answer:?}", ar.kind);
            };
            assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"), "{}", ar.kind);
            assert!(status.message.contains(why), "{}", status.message);
        }
    }
    let dotted = create(&client, &configmaps(), "a.b", json!({})).await;
    assert_eq!(dotted, "created", "a ConfigMap's name may have a dot");
}
