//! `status::apply_status`: a status written by server-side apply through `/status`, its type
//! named from `K`, owned by the controller's field manager.

use ctrlkit::status::apply_status;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use kube_client::Api;
use kube_client::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::server;

const MANAGER: &str = "example.com/deployments";

#[tokio::test]
async fn apply_status_writes_owns_takes_back_and_removes_status_fields() {
    let server = server().await;
    let api: Api<Deployment> = Api::namespaced(server.client(), "default");
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "nginx" }] }
            }
        }
    }))
    .unwrap();
    let deployment = api.create(&PostParams::default(), &deployment).await.unwrap();

    let status =
        DeploymentStatus { replicas: Some(3), ready_replicas: Some(2), ..Default::default() };
    let written = apply_status(&api, &deployment, &status, MANAGER).await.unwrap();
    let stored = written.status.clone().unwrap();
    assert_eq!((stored.replicas, stored.ready_replicas), (Some(3), Some(2)));
    assert_eq!(written.spec, deployment.spec, "the spec is left alone");
    let entry = written
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|m| m.manager.as_deref() == Some(MANAGER))
        .expect("the field manager owns what it applied");
    assert_eq!(
        (entry.operation.as_deref(), entry.subresource.as_deref()),
        (Some("Apply"), Some("status"))
    );

    // Another manager takes a field; the controller's next apply takes it back (forced) and
    // drops the field it no longer applies.
    let other = Patch::Apply(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "status": { "replicas": 9 }
    }));
    api.patch_status("web", &PatchParams::apply("kubectl").force(), &other).await.unwrap();
    let status = DeploymentStatus { replicas: Some(4), ..Default::default() };
    let written = apply_status(&api, &deployment, &status, MANAGER).await.unwrap();
    let stored = written.status.unwrap();
    assert_eq!((stored.replicas, stored.ready_replicas), (Some(4), None));

    // Errors are the server's, or kube-client's before any request.
    let mut gone = deployment.clone();
    gone.metadata.name = Some("missing".into());
    match apply_status(&api, &gone, &status, MANAGER).await {
        Err(kube_client::Error::Api(s)) => assert_eq!(s.code, 404, "{s:?}"),
        other => panic!("a missing object: {other:?}"),
    }
    let mut nameless = deployment;
    nameless.metadata.name = None;
    let err = apply_status(&api, &nameless, &status, MANAGER).await.unwrap_err();
    assert!(err.to_string().contains("non-empty name"), "{err}");
}
