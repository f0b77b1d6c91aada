//! Helpers shared by the protocol tests.

use std::time::Duration;

use ctrlkit_apiserver::{ApiServerBuilder, ResourceType};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube_client::Api;
use kube_client::api::{PostParams, WatchEvent};
use serde_json::json;

/// The suite's embedded servers: bookmarks every 5 s rather than the real server's minute,
/// to keep the suite short (the pre-timeout bookmark is the real server's here too); Secrets
/// without the watch cache, as scripts/kube-apiserver.sh starts the real one; the Widget kind.
pub fn server(builder: ApiServerBuilder) -> ApiServerBuilder {
    builder
        .bookmark_interval(Duration::from_secs(5))
        .without_watch_cache("", "secrets")
        .resource(widget())
}

/// The custom resource the suite uses: namespaced, with a status subresource
/// (`Target::custom_resource` defines it on a real server).
pub fn widget() -> ResourceType {
    ResourceType::new("example.com", "v1", "Widget", "widgets", true).with_status()
}

/// A pod named `name` with labels and one container.
pub fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": { "containers": [{ "name": "main", "image": "busybox:1.36", "env": [{ "name": "A", "value": "1" }] }] }
    }))
    .expect("a valid pod")
}

pub async fn create_pods(pods: &Api<Pod>, names: impl IntoIterator<Item = String>) {
    for name in names {
        pods.create(&PostParams::default(), &pod(&name, json!({}))).await.expect("create");
    }
}

/// The API error of a failed call: (code, reason).
pub fn api_error<T: std::fmt::Debug>(result: kube_client::Result<T>) -> (u16, String) {
    match result {
        Err(kube_client::Error::Api(status)) => (status.code, status.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The next watch event, failing the test after 10 s.
pub async fn next<K, S>(stream: &mut S) -> Option<kube_client::Result<WatchEvent<K>>>
where
    S: Stream<Item = kube_client::Result<WatchEvent<K>>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("a watch event within 10 s")
}

/// Names and event types of a watch event, for comparisons.
pub fn describe(event: &WatchEvent<Pod>) -> (String, String) {
    match event {
        WatchEvent::Added(p) => ("ADDED".into(), p.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Modified(p) => ("MODIFIED".into(), p.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Deleted(p) => ("DELETED".into(), p.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Bookmark(b) => ("BOOKMARK".into(), b.metadata.resource_version.clone()),
        WatchEvent::Error(e) => ("ERROR".into(), format!("{} {}", e.code, e.reason)),
    }
}

pub fn rv(pod: &Pod) -> u64 {
    pod.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("a resourceVersion")
}
