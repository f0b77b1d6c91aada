//! Where a controller's keys come from: owned objects, mapped objects, external triggers, and
//! the predicates that filter them. The primary kind is the Widget custom resource, whose
//! generation both servers count.

use std::time::Duration;

use ctrlkit::cache::{ListWatch, ObjectKey};
use ctrlkit::controller::{Controller, Predicate};
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube_client::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube_client::{Api, ResourceExt};
use serde_json::json;

use super::common::*;

async fn widget(api: &Api<DynamicObject>, ar: &ApiResource, name: &str) -> DynamicObject {
    let widget = DynamicObject::new(name, ar).data(json!({"spec": {"size": 1}}));
    api.create(&PostParams::default(), &widget).await.expect("a widget")
}

fn owner_ref(owner: &DynamicObject, kind: &str, controller: bool) -> serde_json::Value {
    json!({
        "apiVersion": "example.com/v1", "kind": kind, "name": owner.name_any(),
        "uid": owner.uid().unwrap(), "controller": controller,
    })
}

async fn configmap(api: &Api<ConfigMap>, name: &str, owners: serde_json::Value) {
    let cm = serde_json::from_value(json!({
        "metadata": { "name": name, "ownerReferences": owners }, "data": { "v": "1" }
    }))
    .unwrap();
    api.create(&PostParams::default(), &cm).await.expect("a configmap");
}

/// Nothing more is reconciled for `what` after the events before it were handled: checked
/// after a pause long enough for the watch to deliver and the worker to run.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

async fn owned_objects_enqueue_their_controlling_owner(t: &Target) {
    let ar = t.custom_resource(&crate::common::widget()).await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &t.ns, &ar);
    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let owner = widget(&widgets, &ar, "owner").await;
    let other = widget(&widgets, &ar, "other").await;
    let log = ReconcileLog::default();
    let controller = Controller::builder(ListWatch::new_with(widgets.clone(), &ar))
        .owns(configmaps.clone())
        .build();
    let (stop, running) = run_controller(&controller, log.reconciler::<DynamicObject>());
    let key = |name: &str| format!("{}/{name}", t.ns);
    eventually("both widgets reconciled at start", || {
        log.count(&key("owner")) == 1 && log.count(&key("other")) == 1
    })
    .await;

    configmap(&configmaps, "owned", json!([owner_ref(&owner, "Widget", true)])).await;
    eventually("the owner reconciled for its new configmap", || log.count(&key("owner")) == 2)
        .await;
    // Not controlled, or controlled by another kind: nobody is reconciled.
    configmap(&configmaps, "loose", json!([owner_ref(&other, "Widget", false)])).await;
    configmap(&configmaps, "foreign", json!([owner_ref(&other, "Gadget", true)])).await;
    configmaps
        .patch("owned", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "2"}})))
        .await
        .unwrap();
    // At least, then exactly: a second reconcile within one poll would otherwise read as
    // none at all.
    eventually("the owner reconciled for the change", || log.count(&key("owner")) >= 3).await;
    settle().await;
    assert_eq!(log.count(&key("owner")), 3, "one reconcile for one change: {:?}", log.keys());
    assert_eq!(
        log.count(&key("other")),
        1,
        "a non-controller or foreign-kind owner: {:?}",
        log.keys()
    );
    configmaps.delete("owned", &DeleteParams::default()).await.unwrap();
    eventually("the owner reconciled for the delete", || log.count(&key("owner")) == 4).await;
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
}
case!(Needs::Protocol, owned_objects_enqueue_their_controlling_owner);

async fn mappers_triggers_and_predicates_decide_what_is_reconciled(t: &Target) {
    let ar = t.custom_resource(&crate::common::widget()).await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &t.ns, &ar);
    let secrets: Api<Secret> = Api::namespaced(t.client.clone(), &t.ns);
    widget(&widgets, &ar, "w").await;
    widget(&widgets, &ar, "x").await;
    let log = ReconcileLog::default();
    let ns = t.ns.clone();
    let (trigger, triggers) = futures::channel::mpsc::unbounded::<ObjectKey>();
    let controller = Controller::builder(ListWatch::new_with(widgets.clone(), &ar))
        .predicate(Predicate::generation_changed())
        // A secret names the widget it is for in an annotation.
        .watches_with(
            secrets.clone(),
            Predicate::on_update(|old: &Secret, new: &Secret| old.data != new.data),
            move |secret: &Secret| {
                secret.annotations().get("widget").map(|w| ObjectKey::namespaced(&ns, w))
            },
        )
        .trigger(triggers)
        .build();
    let (stop, running) = run_controller(&controller, log.reconciler::<DynamicObject>());
    let key = |name: &str| format!("{}/{name}", t.ns);
    eventually("both widgets reconciled at start", || {
        log.count(&key("w")) == 1 && log.count(&key("x")) == 1
    })
    .await;

    // A label or status change keeps the generation: filtered. A spec change passes.
    let label = Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}}));
    widgets.patch("w", &PatchParams::default(), &label).await.unwrap();
    settle().await;
    assert_eq!(log.count(&key("w")), 1, "a label change passed generation_changed");
    let spec = Patch::Merge(json!({"spec": {"size": 2}}));
    widgets.patch("w", &PatchParams::default(), &spec).await.unwrap();
    eventually("a spec change reconciled", || log.count(&key("w")) == 2).await;

    // The mapper: a secret for x reconciles x; its predicate passes data changes only.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": "for-x", "annotations": { "widget": "x" } }, "stringData": { "k": "v" }
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    eventually("the mapped widget reconciled", || log.count(&key("x")) == 2).await;
    let relabel = Patch::Merge(json!({"metadata": {"labels": {"l": "1"}}}));
    secrets.patch("for-x", &PatchParams::default(), &relabel).await.unwrap();
    settle().await;
    assert_eq!(log.count(&key("x")), 2, "a label-only secret update passed its predicate");

    // A trigger: a key from outside, even of an object that does not exist.
    trigger.unbounded_send(ObjectKey::namespaced(&t.ns, "w")).unwrap();
    trigger.unbounded_send(ObjectKey::namespaced(&t.ns, "ghost")).unwrap();
    eventually("triggered keys reconciled", || {
        log.count(&key("w")) == 3 && log.saw_absent(&key("ghost"))
    })
    .await;
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
}
case!(Needs::Protocol, mappers_triggers_and_predicates_decide_what_is_reconciled);
