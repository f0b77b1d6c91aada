//! Helpers: a server, pods, and the shared recording handler and polling (`tests/support`).

use std::time::Duration;

use ctrlkit_apiserver::ApiServer;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube_client::Api;
use kube_client::api::PostParams;
use serde_json::json;

pub use crate::support::observe::*;

pub async fn server() -> ApiServer {
    ApiServer::start().await.expect("the server starts")
}

pub async fn create(pods: &Api<Pod>, names: &[&str]) {
    for name in names {
        pods.create(&PostParams::default(), &pod(name, json!({"app": "web"})))
            .await
            .expect("create");
    }
}

/// Creates an empty ConfigMap `name` in `default`.
pub async fn create_configmap(server: &ApiServer, name: &str) -> ConfigMap {
    let configmaps: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let cm =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("a valid configmap");
    configmaps.create(&PostParams::default(), &cm).await.expect("create")
}

/// Waits up to 10 s for `check` to hold.
pub async fn eventually(what: &str, check: impl FnMut() -> bool) {
    eventually_within(Duration::from_secs(10), what, check).await
}
