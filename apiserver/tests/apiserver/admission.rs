//! Webhook configurations (`admissionregistration.k8s.io/v1`) as each server takes them:
//! defaulted, or refused with every invalid field listed in the server's words.

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use kube_client::Api;
use kube_client::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use serde_json::json;

fn configurations(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

async fn webhook_configurations_are_defaulted_or_refused_naming_each_field(t: &Target) {
    let ar = configurations("ValidatingWebhookConfiguration", "validatingwebhookconfigurations");
    let api: Api<DynamicObject> = Api::all_with(t.client.clone(), &ar);
    let name = format!("{}-bad", t.ns);
    let bad = DynamicObject::new(&name, &ar).data(json!({ "webhooks": [
        { "name": "a.example.com", "clientConfig": { "url": "http://127.0.0.1:1/x" } },
        { "name": "nodot", "clientConfig": {}, "sideEffects": "None",
          "admissionReviewVersions": ["v1"], "timeoutSeconds": 31, "failurePolicy": "Maybe" },
    ]}));
    let Err(kube_client::Error::Api(status)) = api.create(&PostParams::default(), &bad).await
    else {
        panic!("an invalid configuration was taken");
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        format!(
            "ValidatingWebhookConfiguration.admissionregistration.k8s.io \"{name}\" is invalid: [\
             webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun, \
             webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path], \
             webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1, \
             webhooks[1].name: Invalid value: \"nodot\": should be a domain with at least three segments separated by dots, \
             webhooks[1].failurePolicy: Unsupported value: \"Maybe\": supported values: \"Fail\", \"Ignore\", \
             webhooks[1].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds, \
             webhooks[1].clientConfig: Required value: exactly one of url or service is required]"
        )
    );
    let causes = status.details.map(|d| d.causes.len()).unwrap_or(0);
    assert_eq!(causes, 7, "kubectl lists one line per cause");

    let ar = configurations("MutatingWebhookConfiguration", "mutatingwebhookconfigurations");
    let api: Api<DynamicObject> = Api::all_with(t.client.clone(), &ar);
    let name = format!("{}-defaulted", t.ns);
    let good = DynamicObject::new(&name, &ar).data(json!({ "webhooks": [{
        "name": "a.example.com", "clientConfig": { "url": "https://127.0.0.1:1/x" },
        "sideEffects": "None", "admissionReviewVersions": ["v1"],
        "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"] }],
    }]}));
    let created = api.create(&PostParams::default(), &good).await.unwrap();
    let hook = &created.data["webhooks"][0];
    assert_eq!(
        (
            &hook["failurePolicy"],
            &hook["matchPolicy"],
            &hook["timeoutSeconds"],
            &hook["reinvocationPolicy"]
        ),
        (&json!("Fail"), &json!("Equivalent"), &json!(10), &json!("Never"))
    );
    assert_eq!((&hook["namespaceSelector"], &hook["objectSelector"]), (&json!({}), &json!({})));
    assert_eq!(hook["rules"][0]["scope"], "*");
    api.delete(&name, &DeleteParams::default()).await.unwrap();
}
case!(Needs::Protocol, webhook_configurations_are_defaulted_or_refused_naming_each_field);
