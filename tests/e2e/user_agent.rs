//! What a cluster admin sees of ctrlkit in the audit log: every request names its binary as
//! client-go's do, and a client can name its controller instead.

use std::time::Duration;

use ctrlkit::cache::{Informer, ListWatch, wait_for_cache_sync};
use ctrlkit::events::{EventRecorder, EventType, NewEvent};
use ctrlkit::user_agent::{default_user_agent, with_user_agent};
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{AUDIT_LOG_ENV, Needs, Target};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube_client::Api;
use kube_client::api::PostParams;
use serde_json::{Value, json};

use super::common::*;

/// The audit log's entries about the case's namespace, as (resource, verb, userAgent).
fn audited(t: &Target) -> Vec<(String, String, String)> {
    let path = std::env::var(AUDIT_LOG_ENV).expect("an audit log");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|entry| entry["objectRef"]["namespace"] == t.ns.as_str())
        .map(|entry| {
            let text = |v: &Value| v.as_str().unwrap_or("<none>").to_owned();
            (text(&entry["objectRef"]["resource"]), text(&entry["verb"]), text(&entry["userAgent"]))
        })
        .collect()
}

/// The user agents the audit log shows for `resource` and `verb` in the case's namespace.
fn agents(t: &Target, resource: &str, verb: &str) -> Vec<String> {
    let mut agents: Vec<String> = audited(t)
        .into_iter()
        .filter(|(r, v, _)| r == resource && v == verb)
        .map(|(_, _, agent)| agent)
        .collect();
    agents.dedup();
    agents
}

async fn every_request_names_its_binary_and_a_client_can_name_its_controller(t: &Target) {
    let agent = default_user_agent();
    let binary = std::env::args().next().unwrap();
    let binary = std::path::Path::new(&binary).file_name().unwrap().to_str().unwrap().to_owned();
    let version = env!("CARGO_PKG_VERSION");
    assert!(agent.starts_with(&format!("{binary}/{version} (")), "{agent}");
    assert!(agent.ends_with(&format!(") ctrlkit/{version}")), "{agent}");

    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let cm = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    let cm = configmaps.create(&PostParams::default(), &cm).await.unwrap();
    // An informer on the plain client, and one on a client that names its controller.
    let pods = Informer::new(ListWatch::new(Api::<Pod>::namespaced(t.client.clone(), &t.ns)));
    let named = with_user_agent(t.client.clone(), "configmap-operator/1.2.3").unwrap();
    let cms = Informer::new(ListWatch::new(Api::<ConfigMap>::namespaced(named, &t.ns)));
    let _pods = start(&pods);
    let _cms = start(&cms);
    assert!(wait_for_cache_sync(&[&pods, &cms], std::future::pending()).await.is_ok());
    let recorder = EventRecorder::new(t.client.clone(), "example.com/user-agent-test");
    recorder.publish_for(&cm, NewEvent::new(EventType::Normal, "Seen", "Look", "hello"));

    // The log is written as requests complete; a watch's entry when its answer starts.
    let watched = |resource: &str| !agents(t, resource, "watch").is_empty();
    eventually_within(Duration::from_secs(20), "the audit entries", || {
        watched("pods") && watched("configmaps") && !agents(t, "events", "create").is_empty()
    })
    .await;
    // Streaming lists (1.36) are watches; 1.20 refuses them and the informer lists.
    let verbs: &[&str] = if t.version().at_least(27) { &["watch"] } else { &["list", "watch"] };
    for verb in verbs {
        assert_eq!(agents(t, "pods", verb), [agent], "pods {verb} on {}", t.version());
        assert_eq!(
            agents(t, "configmaps", verb),
            ["configmap-operator/1.2.3"],
            "configmaps {verb}"
        );
    }
    assert_eq!(agents(t, "events", "create"), [agent], "the event recorder's write");
    // The case's own writes, through kube-client alone, carry none.
    assert_eq!(agents(t, "configmaps", "create"), ["<none>"]);
}
case!(Needs::AuditLog, every_request_names_its_binary_and_a_client_can_name_its_controller);
