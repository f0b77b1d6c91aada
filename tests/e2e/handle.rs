//! The manager's handle against a server: a controller that stays reconciles every change
//! while another is added, removed and added again, which reconciles every object of its
//! kind each time it is added.

use ctrlkit::manager::Manager;
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::{Patch, PatchParams, PostParams};
use kube_client::{Api, ResourceExt};
use serde_json::json;

use super::common::*;

fn version(cm: &ConfigMap) -> u64 {
    rv_number(&cm.resource_version().expect("a resourceVersion"))
}

async fn controllers_added_and_removed_while_the_manager_runs_reconcile_every_change(t: &Target) {
    let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let create = |name: String| {
        let cms = cms.clone();
        async move {
            let cm = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
            cms.create(&PostParams::default(), &cm).await.expect("create")
        }
    };
    // The latest version of each object, and every change made.
    let mut latest = std::collections::BTreeMap::new();
    let mut changes = Vec::new();
    for name in ["a", "b"] {
        let cm = create(name.to_owned()).await;
        latest.insert(name.to_owned(), version(&cm));
        changes.push((name.to_owned(), version(&cm)));
    }
    let mut manager = Manager::new(t.client.clone());
    let stays = Versions::default();
    manager
        .controller(cms.clone())
        .name("stays")
        .complete(stays.clone())
        .expect("the only controller of its name");
    let handle = manager.handle();
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    let key = |name: &str| format!("{}/{name}", t.ns);
    for round in 0..3 {
        let again = Versions::default();
        let id = handle.controller(cms.clone()).name("again").complete(again.clone()).unwrap();
        eventually("the controller added again reconciled every object of its kind", || {
            latest.iter().all(|(name, v)| again.saw_at_least(&key(name), *v))
        })
        .await;
        // Changes while it runs and while it is removed.
        let patch = Patch::Merge(json!({"data": {"round": round.to_string()}}));
        let touched = cms.patch("a", &PatchParams::default(), &patch).await.unwrap();
        handle.remove(id).await.expect("a graceful removal");
        let created = create(format!("c-{round}")).await;
        for (name, cm) in [("a".to_owned(), touched), (format!("c-{round}"), created)] {
            latest.insert(name.clone(), version(&cm));
            changes.push((name, version(&cm)));
        }
    }
    eventually("the controller that stayed reconciled every change", || {
        changes.iter().all(|(name, v)| stays.saw_at_least(&key(name), *v))
    })
    .await;
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
}
case!(Needs::Protocol, controllers_added_and_removed_while_the_manager_runs_reconcile_every_change);
