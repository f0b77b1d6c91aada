//! The operator example's webhooks (`configmap_sets --webhook-port`), called by the server as
//! kubectl writes sets: the validator's refusal as kubectl prints it, the defaulter's field,
//! v1 read as v2 and v2 written and read as v1, a set of 1.1 MB created and replaced, and what a webhook that is down does under
//! `failurePolicy: Fail` and `Ignore`.
//!
//! The example registers its webhook configurations and serves both versions of its CRD
//! while it runs with webhooks; the case puts the cluster back as it found it (configurations
//! deleted, the CRD serving v1 alone) whether it passes or fails.  The embedded server calls
//! them as the real ones do.

use std::time::Duration;

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_client::api::{DeleteParams, Patch, PatchParams};
use kube_client::{Api, ResourceExt};
use serde_json::{Value, json};

use super::common::*;
use super::example::{Example, configmap_sets, have_kubectl, kubectl, kubectl_output};
use crate::support::http::free_address;

const CONFIGURATION: &str = "configmapsets.ctrlkit.example.com";
const CRD: &str = "configmapsets.ctrlkit.example.com";

fn set(api_version: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: ctrlkit.example.com/{api_version}\nkind: ConfigMapSet\nmetadata:\n  name: {name}\nspec: {spec}\n"
    )
}

/// The example with its webhooks, through kubectl, on a server that calls them.
async fn the_example_webhooks_refuse_default_and_convert_what_kubectl_writes(t: &Target) {
    if !have_kubectl() {
        return;
    }
    then_clean_up(webhooks(t), put_back(t)).await;
}
case!(Needs::Webhooks, the_example_webhooks_refuse_default_and_convert_what_kubectl_writes);

async fn webhooks(t: &Target) {
    let port = free_address().port().to_string();
    let example =
        Example::start(t, "configmap_sets", &["--namespace", &t.ns, "--webhook-port", &port]);
    eventually("the controller started", || {
        example.lines().iter().any(|l| l.starts_with("Starting ConfigMapSet controller"))
    })
    .await;

    // Refused by the validator: the server calls it once its CA bundle is in the
    // configuration (before, the call fails on the certificate), which takes a moment.
    let invalid = set("v1", "invalid", "{replicas: 101, data: {\"bad key\": x}}");
    let denied =
        r#"admission webhook "validate.configmapsets.ctrlkit.example.com" denied the request: "#;
    let mut refusal = String::new();
    for _ in 0..300 {
        let (ok, text) = kubectl_output(t, &["apply", "-f", "-"], Some(&invalid)).await;
        assert!(!ok, "an invalid set was taken: {text}");
        if text.contains(denied) {
            refusal = text;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        refusal.contains(&format!(
            "{denied}spec.replicas: Invalid value: 101: must be between 0 and 100, inclusive, \
             spec.data[bad key]: Invalid value: \"bad key\": a valid config key must consist of \
             alphanumeric characters"
        )),
        "kubectl printed: {refusal:?}; the example printed {:#?}",
        example.lines()
    );
    // A 422 `Invalid`, as kubectl words it.
    assert!(refusal.starts_with("The request is invalid: "), "{refusal}");
    let sets = configmap_sets(t);
    assert!(sets.get_opt("invalid").await.unwrap().is_none());

    // Defaulted: no replicas given, one written, one ConfigMap made.
    kubectl(t, &["apply", "-f", "-"], Some(&set("v1", "defaulted", "{data: {greeting: hi}}")))
        .await;
    let defaulted = sets.get("defaulted").await.unwrap();
    assert_eq!(defaulted.data["spec"]["replicas"], 1, "{:?}", defaulted.data);
    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    eventually_async_within(Duration::from_secs(20), "defaulted-0 made", || async {
        configmaps.get_opt("defaulted-0").await.unwrap().is_some()
    })
    .await;

    // v1 read as v2, v2 written and read as v1 (stored as v1), and v2 validated as v1.
    {
        let get_v2 = |name: &'static str| async move {
            let out = kubectl(
                t,
                &["get", "configmapsets.v2.ctrlkit.example.com", name, "-o", "json"],
                None,
            )
            .await;
            serde_json::from_str::<Value>(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
        };
        let v2 = get_v2("defaulted").await;
        assert_eq!(v2["apiVersion"], "ctrlkit.example.com/v2");
        assert_eq!(v2["spec"], json!({ "size": 1, "data": { "greeting": "hi" } }));
        assert_eq!(v2["metadata"]["uid"], json!(defaulted.uid()), "the same object");
        kubectl(
            t,
            &["apply", "-f", "-"],
            Some(&set("v2", "sized", "{size: 2, data: {greeting: hi}}")),
        )
        .await;
        let sized = sets.get("sized").await.unwrap();
        assert_eq!(sized.data["spec"], json!({ "replicas": 2, "data": { "greeting": "hi" } }));
        assert_eq!(get_v2("sized").await["spec"]["size"], 2);
        eventually_async_within(Duration::from_secs(20), "sized-1 made", || async {
            configmaps.get_opt("sized-1").await.unwrap().is_some()
        })
        .await;
        let (ok, text) =
            kubectl_output(t, &["apply", "-f", "-"], Some(&set("v2", "huge", "{size: 500}"))).await;
        assert!(
            !ok && text.contains(&format!("{denied}spec.replicas: Invalid value: 500")),
            "{text}"
        );
    }

    // A set of ~1.1 MB, created, then replaced: the update's review carries the object and
    // the old one, 2.2 MB, past axum's default body limit of 2 MiB.
    {
        let values: serde_json::Map<String, Value> =
            (0..11).map(|i| (format!("k{i}"), json!("x".repeat(100_000)))).collect();
        let big = json!({
            "apiVersion": "ctrlkit.example.com/v1", "kind": "ConfigMapSet",
            "metadata": { "name": "big" }, "spec": { "replicas": 0, "data": values },
        });
        let big: kube_client::core::DynamicObject = serde_json::from_value(big).unwrap();
        let pp = kube_client::api::PostParams::default();
        sets.create(&pp, &big).await.expect("a 1.1 MB set is created");
        // The controller writes it too (its finalizer, its status): replaced as last read.
        let mut replaced = None;
        for _ in 0..20 {
            let mut latest = sets.get("big").await.unwrap();
            latest.data["spec"]["data"]["k0"] = json!("y".repeat(100_000));
            match sets.replace("big", &pp, &latest).await {
                Ok(written) => {
                    replaced = Some(written);
                    break;
                }
                Err(kube_client::Error::Api(status)) if status.code == 409 => {}
                Err(err) => panic!("replacing a 1.1 MB set: {err}"),
            }
        }
        let replaced = replaced.expect("replaced within 20 tries");
        assert!(replaced.data["spec"]["data"]["k0"].as_str().is_some_and(|v| v.starts_with('y')));
        sets.delete("big", &DeleteParams::default()).await.unwrap();
    }

    // Down, under failurePolicy Fail: writes refused (the mutating webhook is called first).
    example.terminate().await;
    let after = set("v1", "after", "{replicas: 2}");
    let (ok, text) = kubectl_output(t, &["apply", "-f", "-"], Some(&after)).await;
    assert!(
        !ok && text
            .contains(r#"failed calling webhook "default.configmapsets.ctrlkit.example.com""#),
        "{text}"
    );
    assert!(sets.get_opt("after").await.unwrap().is_none());
    // And nothing is read at v2: the conversion webhook is gone too.
    let (ok, text) =
        kubectl_output(t, &["get", "configmapsets.v2.ctrlkit.example.com", "defaulted"], None)
            .await;
    let convert = format!("https://127.0.0.1:{port}/convert-configmapsets?timeout=30s");
    let refused = format!(
        "Error from server: conversion webhook for ctrlkit.example.com/v1, Kind=ConfigMapSet \
         failed: Post \"{convert}\": dial tcp 127.0.0.1:{port}: connect: connection refused"
    );
    assert!(!ok && text.trim() == refused, "{text}");

    // Under Ignore: let through, neither defaulted nor validated.
    let ignore = r#"[{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]"#;
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        kubectl(t, &["patch", kind, CONFIGURATION, "--type=json", "-p", ignore], None).await;
    }
    let unchecked = set("v1", "unchecked", "{data: {greeting: hi}}");
    let mut taken = None;
    // The server reads the configurations from its informer: the change takes a moment.
    for _ in 0..100 {
        let (ok, text) = kubectl_output(t, &["apply", "-f", "-"], Some(&unchecked)).await;
        if ok {
            taken = Some(text);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(taken.is_some(), "a write under failurePolicy Ignore was refused");
    let unchecked = sets.get("unchecked").await.unwrap();
    assert_eq!(unchecked.data["spec"].get("replicas"), None, "not defaulted");
}

/// Deletes the webhook configurations and the case's sets (their finalizers first: the
/// example is gone), and makes the CRD serve v1 alone again, as the other cases expect.
async fn put_back(t: &Target) {
    let dp = DeleteParams::default();
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(t.client.clone());
    let _ = validating.delete(CONFIGURATION, &dp).await;
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(t.client.clone());
    let _ = mutating.delete(CONFIGURATION, &dp).await;
    let sets = configmap_sets(t);
    for set in sets.list(&Default::default()).await.map(|l| l.items).unwrap_or_default() {
        let name = set.name_any();
        let unfinalized = Patch::Merge(json!({ "metadata": { "finalizers": null } }));
        let _ = sets.patch(&name, &PatchParams::default(), &unfinalized).await;
        let _ = sets.delete(&name, &dp).await;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let Ok(crd) = crds.get(CRD).await else { return };
    let v1: Vec<_> = crd.spec.versions.iter().filter(|v| v.name == "v1").cloned().collect();
    let v1_alone = Patch::Merge(json!({
        "spec": { "versions": v1, "conversion": { "strategy": "None", "webhook": null } },
    }));
    crds.patch(CRD, &PatchParams::default(), &v1_alone).await.expect("the CRD back to v1 alone");
}

/// The example restarted over sets stored as v2 while its informer lists v1 (a migration
/// under way): each list of its cache is converted by its own webhook, which its Manager
/// serves before the caches: `caches-synced` never answers 200 before the webhook's readiness
/// does (its new certificate is not trusted by the server until it is injected: the Secret
/// that held the old one was deleted while the example was down), and once the caches sync it
/// reconciles. With the webhook started after the caches, they would never sync.
async fn the_example_restarted_over_sets_stored_as_v2_serves_its_conversion_before_its_caches(
    t: &Target,
) {
    then_clean_up(restarted_over_v2(t), async {
        put_back_from_v2(t).await;
        put_back(t).await;
    })
    .await;
}
case!(
    Needs::Webhooks,
    the_example_restarted_over_sets_stored_as_v2_serves_its_conversion_before_its_caches
);

/// The example with its webhooks on fresh ports, v2 stored, serving `/readyz` on the address
/// it returns.
fn start_stored_as_v2(t: &Target) -> (Example, std::net::SocketAddr) {
    let port = free_address().port().to_string();
    let metrics = free_address();
    let args = [
        "--namespace",
        &t.ns,
        "--webhook-port",
        &port,
        "--storage-version",
        "v2",
        "--metrics-addr",
        &metrics.to_string(),
    ];
    (Example::start(t, "configmap_sets", &args), metrics)
}

async fn restarted_over_v2(t: &Target) {
    use crate::support::http::get;
    let (first, _) = start_stored_as_v2(t);
    eventually("the controller started", || {
        first.lines().iter().any(|l| l.starts_with("Starting ConfigMapSet controller"))
    })
    .await;
    let sets = configmap_sets(t);
    let set: kube_client::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ctrlkit.example.com/v1", "kind": "ConfigMapSet",
        "metadata": { "name": "stored" }, "spec": { "replicas": 2, "data": { "greeting": "hi" } },
    }))
    .unwrap();
    // Written at v1, stored at v2 through the webhooks, once their CA bundle is injected.
    let pp = kube_client::api::PostParams::default();
    let mut created = Err(String::new());
    for _ in 0..300 {
        created = sets.create(&pp, &set).await.map_err(|e| e.to_string());
        if created.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    created.expect("the set is created once the webhooks are trusted");
    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    eventually_async_within(Duration::from_secs(20), "stored-1 made", || async {
        configmaps.get_opt("stored-1").await.unwrap().is_some()
    })
    .await;
    first.terminate().await;

    // While it is down: a ConfigMap of the set deleted (the restarted example must make it
    // again), and the webhook's certificates (it makes a new CA, which the server does not
    // trust until the restarted example injects it).
    let dp = DeleteParams::default();
    configmaps.delete("stored-1", &dp).await.unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(t.client.clone(), &t.ns);
    secrets.delete("configmap-sets-webhook-certs", &dp).await.unwrap();

    let (second, metrics) = start_stored_as_v2(t);
    // How long the window between the two lasts is the server's business (kube-apiserver
    // takes seconds to trust an injected CA, the embedded server none), so the order is what
    // is asserted: the caches synced is never seen before the webhook is ready.
    let mut synced_first = None;
    let mut last = (None, None);
    for _ in 0..3000 {
        // The caches' check first: a 200 there, then the webhook's not yet 200, is the
        // wrong order, never a race of the two requests.
        let synced = get(metrics, "/readyz/caches-synced").await.map(|a| a.0);
        let webhook = get(metrics, "/readyz/configmap-sets-webhooks").await.map(|a| a.0);
        if synced == Some(200) && webhook != Some(200) {
            synced_first = Some((webhook, synced));
        }
        last = (webhook, synced);
        if synced == Some(200) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        synced_first.is_none() && last == (Some(200), Some(200)),
        "caches synced before the webhook was ready: {synced_first:?}; last (webhook, \
         caches-synced): {last:?}; the example printed {:#?}",
        second.lines()
    );
    eventually_async_within(Duration::from_secs(30), "stored-1 made again", || async {
        configmaps.get_opt("stored-1").await.unwrap().is_some()
    })
    .await;
    // Gone while the example runs: its finalizer's cleanup reads the set through the webhook.
    sets.delete("stored", &dp).await.unwrap();
    eventually_async_within(Duration::from_secs(30), "the set gone", || async {
        sets.get_opt("stored").await.unwrap().is_none()
    })
    .await;
    second.terminate().await;
}

/// v1 stored again and no conversion (what a failed case left stored at v2 reads without the
/// webhook), the sets gone, and v2 dropped from the CRD's stored versions, so that
/// [`put_back`] can make the CRD serve v1 alone.
async fn put_back_from_v2(t: &Target) {
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let Ok(crd) = crds.get(CRD).await else { return };
    let mut versions = crd.spec.versions.clone();
    for version in &mut versions {
        version.storage = version.name == "v1";
    }
    let unconverted = Patch::Merge(json!({
        "spec": { "versions": versions, "conversion": { "strategy": "None", "webhook": null } },
    }));
    crds.patch(CRD, &PatchParams::default(), &unconverted).await.expect("v1 stored again");
    let sets = configmap_sets(t);
    for set in sets.list(&Default::default()).await.map(|l| l.items).unwrap_or_default() {
        let name = set.name_any();
        let unfinalized = Patch::Merge(json!({ "metadata": { "finalizers": null } }));
        let _ = sets.patch(&name, &PatchParams::default(), &unfinalized).await;
        let _ = sets.delete(&name, &DeleteParams::default()).await;
    }
    let v1_stored = Patch::Merge(json!({ "status": { "storedVersions": ["v1"] } }));
    let _ = crds.patch_status(CRD, &PatchParams::default(), &v1_stored).await;
}
