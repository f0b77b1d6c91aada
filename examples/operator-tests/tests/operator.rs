//! The operator's tests, on ctrlkit's harness: `cargo test` runs each case on the embedded
//! API server; `CTRLKIT_E2E_KUBECONFIG=<kubeconfig> cargo test`, on that server too.

use std::time::Duration;

use ctrlkit::testing::ResourceType;
use ctrlkit::testing::harness::{self, Needs, Target};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::{DynamicObject, PostParams};
use kube_client::{Api, ResourceExt};

async fn a_new_configmap_is_stamped(t: &Target) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let manager = stamp_operator::manager(t.client.clone(), &t.ns).expect("one controller");
    let running = tokio::spawn(manager.run_until(async { stopped.await.unwrap_or(()) }));

    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let cm =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": "settings" } })).unwrap();
    configmaps.create(&PostParams::default(), &cm).await.unwrap();
    let stamped = |cm: Option<&ConfigMap>| {
        cm.is_some_and(|cm| cm.labels().get("stamped").is_some_and(|v| v == "yes"))
    };
    ctrlkit::testing::wait_for(
        &configmaps,
        "settings",
        "the stamp",
        Duration::from_secs(30),
        stamped,
    )
    .await
    .unwrap();

    stop.send(()).ok();
    running.await.unwrap().unwrap();
}
ctrlkit::testing::case!(Needs::Protocol, a_new_configmap_is_stamped);

/// A kind the embedded server serves from its start; on a cluster, the case defines it.
fn stamp() -> ResourceType {
    ResourceType::new("example.com", "v1", "Stamp", "stamps", true)
}

async fn the_stamp_kind_is_served(t: &Target) {
    // Registered in `main` on the embedded server; a CRD made here on a real one.
    let stamps: Api<DynamicObject> =
        Api::namespaced_with(t.client.clone(), &t.ns, &t.custom_resource(&stamp()).await);
    let listed = stamps.list(&Default::default()).await.expect("stamps are served");
    assert!(listed.items.is_empty());
}
ctrlkit::testing::case!(Needs::Protocol, the_stamp_kind_is_served);

fn main() -> std::process::ExitCode {
    // Every case's embedded server also serves the Stamp kind.
    harness::main_with(|server| server.resource(stamp()))
}
