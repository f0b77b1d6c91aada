//! The opt-in garbage collector (`ApiServerBuilder::garbage_collector`): cascades by
//! `ownerReferences`, in the background, in the foreground (`blockOwnerDeletion`) and
//! orphaning, as kube-controller-manager carries them out. The real servers of the protocol
//! suite run without kube-controller-manager, so these cases run on the embedded server alone;
//! what the API server itself does with a policy (the finalizers) is checked on both
//! (`crud::propagation_policies_hold_the_owner_with_their_finalizers`).

use std::time::Duration;

use ctrlkit_apiserver::{ApiServer, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube_client::{Api, ResourceExt};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

async fn collected() -> (ApiServer, Api<ConfigMap>) {
    let server = ApiServer::builder().garbage_collector().start().await.unwrap();
    let api = Api::namespaced(server.client(), "default");
    (server, api)
}

/// Creates ConfigMap `name` owned by `owners` (`(owner, blockOwnerDeletion)`), holding
/// `finalizers`.
async fn create(
    api: &Api<ConfigMap>,
    name: &str,
    owners: &[(&ConfigMap, bool)],
    finalizers: &[&str],
) -> ConfigMap {
    let references: Vec<Value> = owners
        .iter()
        .map(|(owner, block)| {
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "name": owner.name_any(), "uid": owner.uid().unwrap(),
                "blockOwnerDeletion": block,
            })
        })
        .collect();
    let cm = json!({
        "metadata": { "name": name, "ownerReferences": references, "finalizers": finalizers },
    });
    api.create(&PostParams::default(), &serde_json::from_value(cm).unwrap()).await.unwrap()
}

async fn gone(api: &Api<ConfigMap>, name: &str) {
    wait_for(api, name, "its deletion", WAIT, |cm| cm.is_none()).await.unwrap();
}

async fn release(api: &Api<ConfigMap>, name: &str) {
    let patch = Patch::Merge(json!({ "metadata": { "finalizers": null } }));
    api.patch(name, &PatchParams::default(), &patch).await.unwrap();
}

fn owner_names(cm: &ConfigMap) -> Vec<String> {
    cm.owner_references().iter().map(|r| r.name.clone()).collect()
}

#[tokio::test]
async fn background_deletes_dependents_whose_owners_are_all_gone() {
    let (_server, api) = collected().await;
    let owner = create(&api, "owner", &[], &[]).await;
    let other = create(&api, "other", &[], &[]).await;
    create(&api, "child", &[(&owner, false)], &[]).await;
    create(&api, "grandchild", &[], &[]).await;
    let child = api.get("child").await.unwrap();
    api.patch(
        "grandchild",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "child", "uid": child.uid().unwrap(),
        }] } })),
    )
    .await
    .unwrap();
    create(&api, "shared", &[(&owner, false), (&other, false)], &[]).await;
    create(&api, "held", &[(&owner, false)], &["example.com/hold"]).await;

    api.delete("owner", &DeleteParams::default()).await.unwrap();
    gone(&api, "owner").await;
    gone(&api, "child").await;
    gone(&api, "grandchild").await;
    // An owner is left: the dependent stays, without the reference to the owner that went.
    let shared = wait_for(&api, "shared", "one owner left", WAIT, |cm| {
        cm.is_some_and(|cm| owner_names(cm) == ["other"])
    })
    .await
    .unwrap();
    assert!(shared.unwrap().metadata.deletion_timestamp.is_none());
    // A dependent with finalizers of its own is marked and stays until they are removed.
    let held = wait_for(&api, "held", "its deletion mark", WAIT, |cm| {
        cm.is_some_and(|cm| cm.metadata.deletion_timestamp.is_some())
    })
    .await
    .unwrap();
    assert_eq!(held.unwrap().finalizers(), ["example.com/hold"]);
    release(&api, "held").await;
    gone(&api, "held").await;
}

#[tokio::test]
async fn an_owner_recreated_under_its_name_is_not_the_owner() {
    let (_server, api) = collected().await;
    let first = create(&api, "owner", &[], &[]).await;
    api.delete("owner", &DeleteParams::default()).await.unwrap();
    create(&api, "owner", &[], &[]).await;
    // Refers to the first owner's uid: that owner is gone, whatever holds its name now.
    create(&api, "orphaned", &[(&first, false)], &[]).await;
    gone(&api, "orphaned").await;
    api.get("owner").await.expect("the new owner is left alone");
}

#[tokio::test]
async fn foreground_keeps_the_owner_until_its_blocking_dependents_are_gone() {
    let (_server, api) = collected().await;
    let owner = create(&api, "owner", &[], &[]).await;
    let blocking = create(&api, "blocking", &[(&owner, true)], &["example.com/hold"]).await;
    create(&api, "free", &[(&owner, false)], &[]).await;
    // The blocking dependent's own dependent: it is deleted in the foreground in turn.
    create(&api, "nested", &[(&blocking, true)], &[]).await;

    let answer = api.delete("owner", &DeleteParams::foreground()).await.unwrap();
    let marked = answer.left().expect("the owner, held");
    assert_eq!(marked.finalizers(), ["foregroundDeletion"]);
    gone(&api, "free").await;
    gone(&api, "nested").await;
    let blocking = wait_for(&api, "blocking", "its deletion mark", WAIT, |cm| {
        cm.is_some_and(|cm| cm.metadata.deletion_timestamp.is_some())
    })
    .await
    .unwrap()
    .unwrap();
    assert!(blocking.finalizers().contains(&"example.com/hold".to_owned()));
    let owner = api.get("owner").await.expect("held while a blocking dependent is left");
    assert!(owner.metadata.deletion_timestamp.is_some());
    assert_eq!(owner.finalizers(), ["foregroundDeletion"]);

    release(&api, "blocking").await;
    gone(&api, "blocking").await;
    gone(&api, "owner").await;
}

#[tokio::test]
async fn orphan_leaves_the_dependents_without_the_owner() {
    let (_server, api) = collected().await;
    let owner = create(&api, "owner", &[], &[]).await;
    let other = create(&api, "other", &[], &[]).await;
    create(&api, "only", &[(&owner, true)], &[]).await;
    create(&api, "shared", &[(&owner, false), (&other, false)], &[]).await;

    let answer = api.delete("owner", &DeleteParams::orphan()).await.unwrap();
    assert_eq!(answer.left().expect("the owner, held").finalizers(), ["orphan"]);
    gone(&api, "owner").await;
    let only = api.get("only").await.expect("orphaned, not deleted");
    assert!(only.metadata.owner_references.is_none(), "{only:?}");
    assert!(only.metadata.deletion_timestamp.is_none());
    assert_eq!(owner_names(&api.get("shared").await.unwrap()), ["other"]);
}

#[tokio::test]
async fn without_the_collector_dependents_outlive_their_owners() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let owner = create(&api, "owner", &[], &[]).await;
    create(&api, "child", &[(&owner, false)], &[]).await;
    api.delete("owner", &DeleteParams::default()).await.unwrap();
    // Nothing collects: give a collector that wrongly ran time to act, then look.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let child = api.get("child").await.expect("nothing deletes dependents");
    assert_eq!(owner_names(&child), ["owner"]);
}
