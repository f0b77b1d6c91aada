//! `ctrlkit_apiserver::wait_for`, the tests' wait for an object's state, against each server:
//! it sees a change made after it started, an object that does not exist yet, a deletion,
//! and gives up at its deadline naming what it waited for.

use std::time::Duration;

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use ctrlkit_apiserver::{WaitError, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::Api;
use kube_client::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn has_key(key: &'static str) -> impl Fn(Option<&ConfigMap>) -> bool {
    move |cm| cm.and_then(|cm| cm.data.as_ref()).is_some_and(|d| d.contains_key(key))
}

async fn wait_for_sees_later_changes_deletions_and_times_out_naming_its_wait(t: &Target) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    // Not there yet: created, then changed, while the wait runs.
    let writer = {
        let api = api.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let cm = serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"x": "1"}}));
            api.create(&PostParams::default(), &cm.unwrap()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            let patch = Patch::Merge(json!({"data": {"ready": "yes"}}));
            api.patch("a", &PatchParams::default(), &patch).await.unwrap();
        })
    };
    let ready = wait_for(&api, "a", "a ready key", Duration::from_secs(30), has_key("ready"))
        .await
        .unwrap()
        .expect("the object as it was when ready");
    assert_eq!(ready.data.unwrap()["x"], "1");
    writer.await.unwrap();
    // A condition that holds already returns at once, with the object.
    let now = wait_for(&api, "a", "an x key", Duration::from_secs(30), has_key("x")).await;
    assert!(now.unwrap().is_some());

    let deleter = {
        let api = api.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            api.delete("a", &DeleteParams::default()).await.unwrap();
        })
    };
    let gone = wait_for(&api, "a", "its deletion", Duration::from_secs(30), |cm| cm.is_none());
    assert!(gone.await.unwrap().is_none());
    deleter.await.unwrap();

    let never =
        wait_for(&api, "b", "a key nobody writes", Duration::from_millis(500), has_key("z"));
    match never.await {
        Err(error @ WaitError::Timeout { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("a key nobody writes") && message.contains(" b;"),
                "{message}"
            );
            assert!(message.contains("last seen: None"), "{message}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}
case!(Needs::Protocol, wait_for_sees_later_changes_deletions_and_times_out_naming_its_wait);
