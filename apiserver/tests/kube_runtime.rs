//! A kube-runtime user's controller, tested on this crate alone (no ctrlkit): for every
//! ConfigMap labelled `mirror=yes`, the controller keeps a ConfigMap `<name>-mirror` with the
//! same data, owned by the source. The test is written as a kube-runtime user would write it:
//! `kube_runtime::Controller` with `owns`, the server's client, and `wait_for` for the outcome.

use std::sync::Arc;
use std::time::Duration;

use ctrlkit_apiserver::{ApiServer, wait_for};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::{Patch, PatchParams, PostParams};
use kube_client::{Api, Resource, ResourceExt};
use kube_runtime::controller::{Action, Controller};
use kube_runtime::watcher;

/// The reconciler's failure: the API server's answer.
#[derive(Debug, thiserror::Error)]
#[error("mirroring a ConfigMap: {0}")]
struct MirrorError(#[from] kube_client::Error);

async fn reconcile(
    source: Arc<ConfigMap>,
    api: Arc<Api<ConfigMap>>,
) -> Result<Action, MirrorError> {
    let owner = source.controller_owner_ref(&()).expect("a stored ConfigMap has a name and uid");
    let mirror = ConfigMap {
        metadata: kube_client::api::ObjectMeta {
            name: Some(format!("{}-mirror", source.name_any())),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        data: source.data.clone(),
        ..Default::default()
    };
    let params = PatchParams::apply("mirror-controller").force();
    let mut body = serde_json::to_value(&mirror).expect("a ConfigMap serializes");
    body["apiVersion"] = "v1".into();
    body["kind"] = "ConfigMap".into();
    api.patch(mirror.metadata.name.as_deref().unwrap(), &params, &Patch::Apply(body)).await?;
    Ok(Action::await_change())
}

fn error_policy(_: Arc<ConfigMap>, _: &MirrorError, _: Arc<Api<ConfigMap>>) -> Action {
    Action::requeue(Duration::from_millis(100))
}

#[tokio::test]
async fn a_kube_runtime_controller_reconciles_owned_objects_on_the_embedded_server() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let controller = Controller::new(api.clone(), watcher::Config::default().labels("mirror=yes"))
        .owns(api.clone(), watcher::Config::default())
        .run(reconcile, error_policy, Arc::new(api.clone()))
        .for_each(|_| async {});
    let running = tokio::spawn(controller);

    let mut source = ConfigMap::default();
    source.metadata.name = Some("settings".into());
    source.metadata.labels = Some([("mirror".to_owned(), "yes".to_owned())].into());
    source.data = Some([("mode".to_owned(), "fast".to_owned())].into());
    api.create(&PostParams::default(), &source).await.unwrap();
    let mode = |cm: Option<&ConfigMap>| {
        cm.and_then(|cm| cm.data.as_ref()?.get("mode").cloned()).unwrap_or_default()
    };
    let mirror = wait_for(&api, "settings-mirror", "the mirror", Duration::from_secs(10), |cm| {
        mode(cm) == "fast"
    })
    .await
    .unwrap()
    .unwrap();
    let owner = &mirror.owner_references()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("ConfigMap", "settings"));
    assert_eq!(owner.controller, Some(true));

    // A change of the source reaches the mirror; an edit of the mirror is put back (owns).
    let change = Patch::Merge(serde_json::json!({ "data": { "mode": "safe" } }));
    api.patch("settings", &PatchParams::default(), &change).await.unwrap();
    wait_for(&api, "settings-mirror", "the changed mirror", Duration::from_secs(10), |cm| {
        mode(cm) == "safe"
    })
    .await
    .unwrap();
    let edit = Patch::Merge(serde_json::json!({ "data": { "mode": "edited" } }));
    api.patch("settings-mirror", &PatchParams::default(), &edit).await.unwrap();
    wait_for(&api, "settings-mirror", "the restored mirror", Duration::from_secs(10), |cm| {
        mode(cm) == "safe"
    })
    .await
    .unwrap();
    running.abort();
}
