//! The server calling admission webhooks (ctrlkit's `WebhookServer`, raw handlers), with the
//! same assertions on every server, so the embedded one is held to the real one's behaviour
//! and words: mutating before validating, reinvocation, denials and their codes, warnings,
//! dry runs, deletes, namespace and object selectors, and calls that fail (refused, an
//! untrusted certificate, a timeout) under `failurePolicy: Fail`.
//!
//! Every webhook selects the case's ConfigMaps alone (a label naming the case, in a namespace
//! labelled for it), so that other cases' writes never meet them.

use std::time::Duration;

use ctrlkit::tls::CertificateSource;
use ctrlkit::webhook::{
    AdmissionHandler, AdmissionRequest, AdmissionResponse, Operation, WebhookError, WebhookServer,
    WebhookServerBuilder,
};
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube_client::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube_client::core::DynamicObject;
use kube_client::{Api, ResourceExt};
use serde_json::{Value, json};

use super::common::then_clean_up;
use crate::support::http::free_address;

/// What each path of the case's webhook server does.
struct Scripted(&'static str);

#[async_trait::async_trait]
impl AdmissionHandler for Scripted {
    async fn handle(&self, request: AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let allowed = AdmissionResponse::from(&request);
        let object = request.object.as_ref().map(|o| serde_json::to_value(o).unwrap());
        let data = |key: &str| object.as_ref().is_some_and(|o| o["data"].get(key).is_some());
        let annotated = |key: &str| {
            object.as_ref().is_some_and(|o| o["metadata"]["annotations"].get(key).is_some())
        };
        let patch = |ops: Value| {
            let patch: json_patch::Patch = serde_json::from_value(ops).unwrap();
            AdmissionResponse::from(&request).with_patch(patch).unwrap()
        };
        let deny = |reason: &str, code: u16, message: String| {
            let mut denied = AdmissionResponse::from(&request).deny(message);
            denied.result.reason = reason.to_owned();
            denied.result.code = code;
            denied
        };
        match self.0 {
            // A delete has no object to mutate.
            "first" | "second" if request.operation == Operation::Delete => allowed,
            // Mutating, reinvoked if needed: marks the object, and notes once it saw `second`.
            "first" if annotated("second") && !annotated("first-saw-second") => patch(json!([
                { "op": "add", "path": "/metadata/annotations/first-saw-second", "value": "yes" },
            ])),
            "first" if !annotated("first") => patch(json!([
                { "op": "add", "path": "/metadata/annotations", "value": { "first": "1" } },
            ])),
            "second" if !annotated("second") => patch(json!([
                { "op": "add", "path": "/metadata/annotations/second", "value": "1" },
            ])),
            "validate" if request.operation == Operation::Delete => match request.old_object {
                Some(ref old) if old.data["data"].get("keep").is_some() => {
                    deny("Forbidden", 403, "kept: not deleted".to_owned())
                }
                _ => allowed,
            },
            "validate" if data("deny") => deny("Forbidden", 403, "no deny key".to_owned()),
            "validate" if data("dry") => deny("", 0, format!("dryRun={}", request.dry_run)),
            "validate" if !annotated("first-saw-second") => {
                deny("Invalid", 422, "the mutating webhooks did not all run first".to_owned())
            }
            "validate" if data("warn") => {
                let mut warned = allowed;
                warned.warnings = Some(vec!["careful".to_owned()]);
                warned
            }
            "slow" => {
                tokio::time::sleep(Duration::from_secs(3)).await;
                allowed
            }
            _ => allowed,
        }
    }
}

/// One webhook entry calling `url`, for the case's labelled ConfigMaps.
fn hook(name: &str, url: &str, ca: Option<&str>, case: &str, extra: Value) -> Value {
    let mut client_config = json!({ "url": url });
    if let Some(ca) = ca {
        client_config["caBundle"] = json!(base64_encode(ca.as_bytes()));
    }
    let mut hook = json!({
        "name": name,
        "clientConfig": client_config,
        "rules": [{ "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
                    "operations": ["CREATE", "UPDATE", "DELETE"], "scope": "Namespaced" }],
        "namespaceSelector": { "matchLabels": { "ctrlkit-e2e-admission": case } },
        "objectSelector": { "matchLabels": { "case": case } },
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        hook[k] = v.clone();
    }
    hook
}

fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, b| (n << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            match i <= chunk.len() {
                true => out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char),
                false => out.push('='),
            }
        }
    }
    out
}

/// A webhook server on a free loopback port, its routes added by `routes`, serving until the
/// handle is aborted; with the case's namespace labelled for the case's webhooks. Its address
/// and CA bundle.
async fn serve_webhooks(
    t: &Target,
    case: &str,
    routes: impl FnOnce(WebhookServerBuilder) -> WebhookServerBuilder,
) -> (std::net::SocketAddr, String, tokio::task::JoinHandle<Result<(), WebhookError>>) {
    let address = free_address();
    let builder = WebhookServer::builder()
        .address(address)
        .certificates(CertificateSource::self_signed(["127.0.0.1"]));
    let server = routes(builder).build();
    let serving = {
        let server = server.clone();
        tokio::spawn(async move { server.run(std::future::pending()).await })
    };
    server.serving().await;
    let ca = server.certificate().expect("a certificate").ca_pem;
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    let label =
        Patch::Merge(json!({ "metadata": { "labels": { "ctrlkit-e2e-admission": case } } }));
    namespaces.patch(&t.ns, &PatchParams::default(), &label).await.unwrap();
    (address, ca, serving)
}

/// A ConfigMap of the case: labelled for its webhooks, with `keys` in its data.
fn configmap(case: &str, name: &str, keys: &[&str]) -> ConfigMap {
    let data: serde_json::Map<String, Value> =
        keys.iter().map(|k| (k.to_string(), json!("x"))).collect();
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "case": case } }, "data": data,
    }))
    .unwrap()
}

/// The error status of a refused write: code, reason and message.
fn refusal(result: Result<ConfigMap, kube_client::Error>) -> (u16, String, String) {
    match result {
        Err(kube_client::Error::Api(status)) => (status.code, status.reason, status.message),
        other => panic!("the write was taken: {other:?}"),
    }
}

async fn webhooks_are_called_in_order_and_their_answers_and_failures_reach_the_client(t: &Target) {
    let case = t.ns.clone();
    then_clean_up(admission(t, &case), async {
        for name in [format!("{case}-1"), format!("{case}-2")] {
            let mutating: Api<MutatingWebhookConfiguration> = Api::all(t.client.clone());
            let _ = mutating.delete(&name, &DeleteParams::default()).await;
        }
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(t.client.clone());
        let _ = validating.delete(&case, &DeleteParams::default()).await;
    })
    .await;
}
case!(
    Needs::Protocol,
    webhooks_are_called_in_order_and_their_answers_and_failures_reach_the_client
);

async fn admission(t: &Target, case: &str) {
    let (address, ca, serving) = serve_webhooks(t, case, |mut builder| {
        for path in ["first", "second", "validate", "slow"] {
            builder = builder.handler(&format!("/{path}"), Scripted(path));
        }
        builder
    })
    .await;
    let url = |path: &str| format!("https://{address}{path}");

    // Two mutating configurations, called in name order; the first is reinvoked if needed.
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(t.client.clone());
    for (n, path, reinvoke) in [(1, "first", "IfNeeded"), (2, "second", "Never")] {
        let configuration = serde_json::from_value(json!({
            "metadata": { "name": format!("{case}-{n}") },
            "webhooks": [hook(&format!("{path}.{case}.example.com"), &url(&format!("/{path}")), Some(&ca), case,
                json!({ "reinvocationPolicy": reinvoke }))],
        }))
        .unwrap();
        mutating.create(&PostParams::default(), &configuration).await.unwrap();
    }
    // The validating ones: one that answers, one refused, one untrusted, one too slow; the
    // last three only for ConfigMaps labelled for them.
    let failing = |name: &str, url: String, ca: Option<&str>, failing: &str| {
        let mut hook = hook(
            &format!("{name}.{case}.example.com"),
            &url,
            ca,
            case,
            json!({ "timeoutSeconds": 1 }),
        );
        hook["objectSelector"]["matchLabels"]["failing"] = json!(failing);
        hook
    };
    let closed = free_address();
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(t.client.clone());
    let configuration = serde_json::from_value(json!({
        "metadata": { "name": case },
        "webhooks": [
            hook(&format!("validate.{case}.example.com"), &url("/validate"), Some(&ca), case, json!({})),
            failing("refused", format!("https://{closed}/x"), Some(&ca), "refused"),
            failing("untrusted", url("/validate"), None, "untrusted"),
            failing("slow", url("/slow"), Some(&ca), "slow"),
        ],
    }))
    .unwrap();
    validating.create(&PostParams::default(), &configuration).await.unwrap();
    // The real server reads configurations from informers: wait until writes meet them.
    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let pp = PostParams::default();
    let mut validated = false;
    for i in 0..100 {
        let probe = configmap(case, &format!("deny-probe-{i}"), &["deny"]);
        if configmaps.create(&pp, &probe).await.is_err() {
            validated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(validated, "the validating webhook was never called");
    let mut first = None;
    for i in 0..100 {
        let created =
            configmaps.create(&pp, &configmap(case, &format!("probe-{i}"), &[])).await.unwrap();
        if created.annotations().contains_key("first") {
            first = Some(created);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let created = first.expect("the mutating webhooks were never called");
    // Mutated by both, the first again after the second, then validated.
    assert_eq!(created.annotations().get("second").map(String::as_str), Some("1"));
    assert_eq!(created.annotations().get("first-saw-second").map(String::as_str), Some("yes"));

    // Denials: the webhook's code and reason, its message after the webhook's name.
    let (code, reason, message) =
        refusal(configmaps.create(&pp, &configmap(case, "denied", &["deny"])).await);
    assert_eq!(
        (code, reason.as_str(), message.as_str()),
        (
            403,
            "Forbidden",
            format!(
                "admission webhook \"validate.{case}.example.com\" denied the request: no deny key"
            )
            .as_str()
        )
    );
    assert!(configmaps.get_opt("denied").await.unwrap().is_none());
    // A dry run reaches the webhook as one; a denial without a code is a 400.
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    let (code, _, message) =
        refusal(configmaps.create(&dry, &configmap(case, "dry", &["dry"])).await);
    assert_eq!(
        (code, message.as_str()),
        (
            400,
            format!(
                "admission webhook \"validate.{case}.example.com\" denied the request: dryRun=true"
            )
            .as_str()
        )
    );
    // A warning reaches the client as a `Warning` header.
    let body = serde_json::to_vec(&configmap(case, "warned", &["warn"])).unwrap();
    let path = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let answer = t
        .raw_request(http::Method::POST, &path, &[("Content-Type", "application/json")], body)
        .await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    assert_eq!(answer.header("warning"), Some("299 - \"careful\""));
    // An update passes them too; a delete the validating one, with the old object.
    let keep = configmaps.create(&pp, &configmap(case, "kept", &["keep"])).await.unwrap();
    let mut updated = keep.clone();
    updated.data.as_mut().unwrap().insert("deny".into(), "x".into());
    let (code, _, _) = refusal(configmaps.replace("kept", &pp, &updated).await);
    assert_eq!(code, 403, "the update was validated");
    let deleted = configmaps.delete("kept", &DeleteParams::default()).await;
    let Err(kube_client::Error::Api(status)) = deleted else {
        panic!("a kept ConfigMap was deleted")
    };
    assert_eq!(
        (status.code, status.message.as_str()),
        (403, format!("admission webhook \"validate.{case}.example.com\" denied the request: kept: not deleted").as_str())
    );

    // Calls that fail, under failurePolicy Fail: a 500 naming the webhook and the cause.
    let failing_configmap = |failing: &str| {
        let mut cm = configmap(case, &format!("failing-{failing}"), &[]);
        cm.metadata.labels.as_mut().unwrap().insert("failing".into(), failing.into());
        cm
    };
    // kube-apiserver 1.20 words a failed call without "failed to call webhook: "; 1.36 (and
    // the embedded server) with it.
    let failed_to_call = if t.version().at_least(21) { "failed to call webhook: " } else { "" };
    let internal = |name: &str, cause: String| {
        (
            500,
            "InternalError".to_owned(),
            format!(
                "Internal error occurred: failed calling webhook \"{name}.{case}.example.com\": {cause}"
            ),
        )
    };
    assert_eq!(
        refusal(configmaps.create(&pp, &failing_configmap("refused")).await),
        internal(
            "refused",
            format!(
                "{failed_to_call}Post \"https://{closed}/x?timeout=1s\": dial tcp {closed}: connect: connection refused"
            )
        )
    );
    assert_eq!(
        refusal(configmaps.create(&pp, &failing_configmap("untrusted")).await),
        internal(
            "untrusted",
            format!(
                "{failed_to_call}Post \"https://{address}/validate?timeout=1s\": tls: failed to verify certificate: x509: certificate signed by unknown authority"
            )
        )
    );
    assert_eq!(
        refusal(configmaps.create(&pp, &failing_configmap("slow")).await),
        internal(
            "slow",
            format!(
                "{failed_to_call}Post \"https://{address}/slow?timeout=1s\": context deadline exceeded"
            )
        )
    );
    serving.abort();
}

/// Allows everything, with a warning saying what it saw: `NAME: <object's apiVersion>
/// <requestKind's version>`.
struct Seen(&'static str);

#[async_trait::async_trait]
impl AdmissionHandler for Seen {
    async fn handle(&self, request: AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let object_version =
            request.object.as_ref().and_then(|o| o.types.as_ref()).map(|t| t.api_version.clone());
        let requested = request.request_kind.as_ref().map(|k| k.version.clone());
        let mut allowed = AdmissionResponse::from(&request);
        allowed.warnings = Some(vec![format!(
            "{}: {} {}",
            self.0,
            object_version.unwrap_or_default(),
            requested.unwrap_or_default()
        )]);
        allowed
    }
}

/// A CRD with two versions and no conversion webhook: a webhook whose rules name the version
/// a write is made at sees it at that version; one whose rules name the other version sees it
/// at that one, converted, under `matchPolicy: Equivalent`, and not at all under `Exact`.
async fn match_policies_decide_at_which_version_a_webhook_sees_a_write(t: &Target) {
    let case = t.ns.clone();
    let name = format!("{case}-policies");
    then_clean_up(policies(t, &case, &name), async {
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(t.client.clone());
        let _ = validating.delete(&name, &DeleteParams::default()).await;
    })
    .await;
}
case!(Needs::Protocol, match_policies_decide_at_which_version_a_webhook_sees_a_write);

async fn policies(t: &Target, case: &str, name: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let version = |name: &str, storage: bool| {
        json!({ "name": name, "served": true, "storage": storage,
            "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } })
    };
    let crd = serde_json::from_value(json!({
        "metadata": { "name": "gizmos.e2e.example.com" },
        "spec": { "group": "e2e.example.com", "scope": "Namespaced",
            "names": { "plural": "gizmos", "singular": "gizmo", "kind": "Gizmo" },
            "versions": [version("v1", true), version("v2", false)] },
    }))
    .unwrap();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube_client::Error::Api(s)) if s.code == 409 => {} // an earlier run's
        Err(e) => panic!("creating the CRD: {e}"),
    }
    let (address, ca, serving) = serve_webhooks(t, case, |mut builder| {
        for path in ["exact-v1", "equivalent-v1", "exact-v2"] {
            builder = builder.handler(&format!("/{path}"), Seen(path));
        }
        builder
    })
    .await;
    let gizmo_hook = |path: &str, version: &str, policy: &str| {
        let mut hook = hook(
            &format!("{path}.{case}.example.com"),
            &format!("https://{address}/{path}"),
            Some(&ca),
            case,
            json!({ "matchPolicy": policy }),
        );
        hook["rules"] = json!([{ "apiGroups": ["e2e.example.com"], "apiVersions": [version],
            "resources": ["gizmos"], "operations": ["CREATE"], "scope": "*" }]);
        hook
    };
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(t.client.clone());
    let configuration = serde_json::from_value(json!({
        "metadata": { "name": name },
        "webhooks": [
            gizmo_hook("exact-v1", "v1", "Exact"),
            gizmo_hook("equivalent-v1", "v1", "Equivalent"),
            gizmo_hook("exact-v2", "v2", "Exact"),
        ],
    }))
    .unwrap();
    validating.create(&PostParams::default(), &configuration).await.unwrap();

    // The warnings of a create at `version` (every webhook adds one), sorted: validating
    // webhooks may run in parallel.
    let create = |version: &'static str, n: usize| async move {
        let body = json!({ "apiVersion": format!("e2e.example.com/{version}"), "kind": "Gizmo",
            "metadata": { "name": format!("g-{version}-{n}"), "labels": { "case": case } } });
        let path = format!("/apis/e2e.example.com/{version}/namespaces/{}/gizmos", t.ns);
        let headers = [("Content-Type", "application/json")];
        let answer =
            t.raw_request(http::Method::POST, &path, &headers, body.to_string().into_bytes()).await;
        let mut warnings: Vec<String> = answer
            .headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case("warning"))
            .map(|(_, value)| value.clone())
            .collect();
        warnings.sort();
        (answer.status, warnings)
    };
    let seen = |lines: &[&str]| -> Vec<String> {
        let mut lines: Vec<String> = lines.iter().map(|l| format!("299 - \"{l}\"")).collect();
        lines.sort();
        lines
    };
    // Served and the configuration read (the real server's informers take a moment).
    let mut answer = (0, Vec::new());
    for n in 0..100 {
        answer = create("v1", n).await;
        if answer.0 == 201 && answer.1.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        answer,
        (201, seen(&["equivalent-v1: e2e.example.com/v1 v1", "exact-v1: e2e.example.com/v1 v1"]))
    );
    assert_eq!(
        create("v2", 0).await,
        (201, seen(&["equivalent-v1: e2e.example.com/v1 v2", "exact-v2: e2e.example.com/v2 v2"]))
    );
    serving.abort();
}

/// Denies a Scale of more than 5 replicas (naming the kind and subresource it saw), and the
/// delete of a ConfigMap holding `keep`.
struct Guard;

#[async_trait::async_trait]
impl AdmissionHandler for Guard {
    async fn handle(&self, request: AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let allowed = AdmissionResponse::from(&request);
        if request.operation == Operation::Delete {
            let kept =
                request.old_object.as_ref().is_some_and(|o| o.data["data"].get("keep").is_some());
            return match kept {
                true => allowed.deny("kept"),
                false => allowed,
            };
        }
        let replicas = request.object.as_ref().and_then(|o| o.data["spec"]["replicas"].as_i64());
        match replicas {
            Some(n) if n > 5 => {
                let k = &request.kind;
                let sub = request.sub_resource.clone().unwrap_or_default();
                allowed.deny(format!(
                    "at most 5 replicas, saw {}/{} {} {sub}",
                    k.group, k.version, k.kind
                ))
            }
            _ => allowed,
        }
    }
}

/// A webhook entry calling `path` of the server at `address` for every Deployment `/scale`
/// update and the ConfigMap `operations` of the case's namespace.
fn scale_and_configmap_hook(
    name: &str,
    address: std::net::SocketAddr,
    ca: &str,
    case: &str,
    operations: Value,
) -> Value {
    let mut hook = hook(
        &format!("{name}.{case}.example.com"),
        &format!("https://{address}/{name}"),
        Some(ca),
        case,
        json!({}),
    );
    hook["objectSelector"] = json!({});
    hook["rules"] = json!([
        { "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments/scale"], "operations": ["UPDATE"] },
        { "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": operations },
    ]);
    hook
}

/// The Deployment `web` of one replica.
fn web_deployment() -> k8s_openapi::api::apps::v1::Deployment {
    serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "web" } },
            "template": { "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "nginx" }] } } },
    }))
    .unwrap()
}

/// A `/scale` write reaches webhooks as an `autoscaling/v1` `Scale`, and a delete-collection
/// as a delete of each object it selects.
async fn scale_writes_and_collection_deletes_are_admitted(t: &Target) {
    let case = t.ns.clone();
    then_clean_up(guarded(t, &case), async {
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(t.client.clone());
        let _ = validating.delete(&format!("{case}-guard"), &DeleteParams::default()).await;
    })
    .await;
}
case!(Needs::Protocol, scale_writes_and_collection_deletes_are_admitted);

async fn guarded(t: &Target, case: &str) {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube_client::api::ListParams;
    let (address, ca, serving) =
        serve_webhooks(t, case, |builder| builder.handler("/guard", Guard)).await;
    let guard = scale_and_configmap_hook("guard", address, &ca, case, json!(["DELETE"]));
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(t.client.clone());
    let configuration = serde_json::from_value(
        json!({ "metadata": { "name": format!("{case}-guard") }, "webhooks": [guard] }),
    )
    .unwrap();
    validating.create(&PostParams::default(), &configuration).await.unwrap();

    let deployments: Api<Deployment> = Api::namespaced(t.client.clone(), &t.ns);
    let deployment = web_deployment();
    deployments.create(&PostParams::default(), &deployment).await.unwrap();
    let scale_to = |n: i64| Patch::Merge(json!({ "spec": { "replicas": n } }));
    let pp = PatchParams::default();
    // The real server reads configurations from an informer: wait until a scale meets it.
    let mut refused = None;
    for _ in 0..100 {
        match deployments.patch_scale("web", &pp, &scale_to(10)).await {
            Err(kube_client::Error::Api(status)) => {
                refused = Some(status);
                break;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("scaling: {e}"),
        }
    }
    let status = refused.expect("a scale to 10 was never refused");
    assert_eq!(
        (status.code, status.message.as_str()),
        (400, format!("admission webhook \"guard.{case}.example.com\" denied the request: at most 5 replicas, saw autoscaling/v1 Scale scale").as_str())
    );
    deployments.patch_scale("web", &pp, &scale_to(3)).await.unwrap();
    assert_eq!(deployments.get("web").await.unwrap().spec.replicas, Some(3));

    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    for (name, keys) in [("free", &[][..]), ("kept", &["keep"][..])] {
        configmaps.create(&PostParams::default(), &configmap(case, name, keys)).await.unwrap();
    }
    let selected = ListParams::default().labels(&format!("case={case}"));
    let deleted = configmaps.delete_collection(&DeleteParams::default(), &selected).await;
    let Err(kube_client::Error::Api(status)) = deleted else {
        panic!("the kept ConfigMap was deleted with the collection")
    };
    assert_eq!(
        (status.code, status.message.as_str()),
        (
            400,
            format!("admission webhook \"guard.{case}.example.com\" denied the request: kept")
                .as_str()
        )
    );
    assert!(configmaps.get_opt("kept").await.unwrap().is_some());
    serving.abort();
}

/// A mutating webhook whose JSON patch leaves something that is not the object: the whole
/// object replaced by a string or a list, or its `metadata` by a string, as the object's
/// `unmake` label says; a `Scale` whose `spec` it replaces by a string.
struct Unmaking;

#[async_trait::async_trait]
impl AdmissionHandler for Unmaking {
    async fn handle(&self, request: AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let unmake = match request.sub_resource.as_deref() {
            Some("scale") => "scale-spec-to-string".to_owned(),
            _ => request
                .object
                .as_ref()
                .and_then(|o| o.labels().get("unmake").cloned())
                .unwrap_or_default(),
        };
        let ops = match unmake.as_str() {
            "to-string" => json!([{ "op": "replace", "path": "", "value": "x" }]),
            "to-list" => json!([{ "op": "replace", "path": "", "value": [1] }]),
            "metadata-to-string" => json!([{ "op": "replace", "path": "/metadata", "value": "x" }]),
            "scale-spec-to-string" => json!([{ "op": "replace", "path": "/spec", "value": "x" }]),
            _ => return AdmissionResponse::from(&request),
        };
        let patch: json_patch::Patch = serde_json::from_value(ops).unwrap();
        AdmissionResponse::from(&request).with_patch(patch).unwrap()
    }
}

/// A webhook's patch that leaves no object is refused as the real server refuses it, on a
/// create, an update and a `/scale` write, and the server goes on serving.
async fn a_webhook_patch_that_leaves_no_object_is_refused(t: &Target) {
    let case = t.ns.clone();
    then_clean_up(unmade(t, &case), async {
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(t.client.clone());
        let _ = mutating.delete(&format!("{case}-unmake"), &DeleteParams::default()).await;
    })
    .await;
}
case!(Needs::Protocol, a_webhook_patch_that_leaves_no_object_is_refused);

fn unmaking(case: &str, name: &str, unmake: &str) -> ConfigMap {
    let mut cm = configmap(case, name, &[]);
    cm.metadata.labels.as_mut().unwrap().insert("unmake".into(), unmake.into());
    cm
}

async fn unmade(t: &Target, case: &str) {
    use k8s_openapi::api::apps::v1::Deployment;
    let (address, ca, serving) =
        serve_webhooks(t, case, |builder| builder.handler("/unmake", Unmaking)).await;
    let hook = scale_and_configmap_hook("unmake", address, &ca, case, json!(["CREATE", "UPDATE"]));
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(t.client.clone());
    let configuration = serde_json::from_value(
        json!({ "metadata": { "name": format!("{case}-unmake") }, "webhooks": [hook] }),
    )
    .unwrap();
    mutating.create(&PostParams::default(), &configuration).await.unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let pp = PostParams::default();
    // The real server reads configurations from an informer: wait until a write meets it.
    let mut answer = None;
    for _ in 0..100 {
        match configmaps.create(&pp, &unmaking(case, "probe", "to-list")).await {
            Err(kube_client::Error::Api(status)) => {
                answer = Some(status);
                break;
            }
            Ok(_) => {
                configmaps.delete("probe", &DeleteParams::default()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("creating: {e}"),
        }
    }
    // What kube-apiserver v1.36.2 answers (1.20 words the causes otherwise: its prefix only).
    let words = t.version().at_least(21);
    let internal = |status: Box<kube_client::core::Status>, cause: &str| {
        assert_eq!(
            (status.code, status.reason.as_str()),
            (500, "InternalError"),
            "{}",
            status.message
        );
        match words {
            true => assert_eq!(status.message, format!("Internal error occurred: {cause}")),
            false => assert!(
                status.message.starts_with("Internal error occurred: "),
                "{}",
                status.message
            ),
        }
    };
    let refused = |result: Result<ConfigMap, kube_client::Error>| match result {
        Err(kube_client::Error::Api(status)) => status,
        other => panic!("the write was taken: {other:?}"),
    };
    let not_an_object = |go_type: &str| {
        format!(
            "couldn't get version/kind; json parse error: json: cannot unmarshal {go_type} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}"
        )
    };
    let to_string = "replace operation value must be object or array: %!w(<nil>)".to_owned();
    let metadata = "json: cannot unmarshal string into Go struct field ConfigMap.metadata of type v1.ObjectMeta".to_owned();
    internal(answer.expect("the webhook was never called"), &not_an_object("array"));
    let created = configmaps.create(&pp, &unmaking(case, "to-string", "to-string")).await;
    internal(refused(created), &to_string);
    let created = configmaps.create(&pp, &unmaking(case, "metadata", "metadata-to-string")).await;
    internal(refused(created), &metadata);
    let kept = configmaps.create(&pp, &configmap(case, "kept", &[])).await.unwrap();
    for (unmake, cause) in [
        ("to-string", to_string.clone()),
        ("to-list", not_an_object("array")),
        ("metadata-to-string", metadata.clone()),
    ] {
        let mut changed = kept.clone();
        changed.metadata.labels.as_mut().unwrap().insert("unmake".into(), unmake.into());
        internal(refused(configmaps.replace("kept", &pp, &changed).await), &cause);
    }
    assert_eq!(configmaps.get("kept").await.unwrap(), kept, "nothing was written");
    for name in ["probe", "to-string", "metadata"] {
        assert!(configmaps.get_opt(name).await.unwrap().is_none(), "{name} was created");
    }
    let deployments: Api<Deployment> = Api::namespaced(t.client.clone(), &t.ns);
    let deployment = web_deployment();
    deployments.create(&pp, &deployment).await.unwrap();
    let two = Patch::Merge(json!({ "spec": { "replicas": 2 } }));
    match deployments.patch_scale("web", &PatchParams::default(), &two).await {
        Err(kube_client::Error::Api(status)) => internal(
            status,
            "json: cannot unmarshal string into Go struct field Scale.spec of type v1.ScaleSpec",
        ),
        other => panic!("the scale was taken: {other:?}"),
    }
    let replicas = deployments.get("web").await.unwrap().spec.replicas;
    assert_eq!(replicas, Some(1), "nothing was scaled");
    serving.abort();
}
