//! The controller's priority queue: after a restart, objects that changed are reconciled before
//! the initial list's backlog, and a reconciler can requeue at a priority of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ctrlkit::cache::ObjectKey;
use ctrlkit::controller::{Action, Controller, Reconciler};
use ctrlkit::workqueue::Priority;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::Api;
use kube_client::api::{Patch, PatchParams};
use serde_json::json;
use tokio::sync::Notify;

use super::common::*;
use crate::support::Failed;

/// Records the keys it reconciles. Its first reconcile waits for `gate`, then asks for that
/// key back at once at priority 1.
#[derive(Clone, Default)]
struct Gated {
    gate: Arc<Notify>,
    started: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Reconciler for Gated {
    type Object = ConfigMap;
    type Error = Failed;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        _: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Failed> {
        self.log.lock().unwrap().push(key.name.clone());
        if self.started.swap(true, Ordering::SeqCst) {
            return Ok(Action::done());
        }
        self.gate.notified().await;
        Ok(Action::requeue_after(std::time::Duration::ZERO).with_priority(Priority(1)))
    }
}

/// Ten ConfigMaps exist when a one-worker controller starts; while it reconciles the first,
/// one of the others changes and a new one is created. Returns the reconcile order: the first
/// key, the changed one, the created one (`new`), and the full log.
async fn reconcile_order(prioritize: bool) -> (String, String, Vec<String>) {
    let server = server().await;
    for i in 0..10 {
        create_configmap(&server, &format!("cm-{i}")).await;
    }
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let controller = Controller::builder(api.clone()).use_priority_queue(prioritize).build();
    let reconciler = Gated::default();
    let _running = run_controller(&controller, reconciler.clone());
    eventually("the first reconcile", || !reconciler.log.lock().unwrap().is_empty()).await;
    let first = reconciler.log.lock().unwrap()[0].clone();
    let changed = (0..10).map(|i| format!("cm-{i}")).rev().find(|n| *n != first).unwrap();
    let patch = Patch::Merge(json!({"data": {"changed": "yes"}}));
    api.patch(&changed, &PatchParams::default(), &patch).await.unwrap();
    create_configmap(&server, "new").await;
    // The nine others of the initial list and the new one wait; the change raised its key.
    eventually("both events queued", || controller.queue().len() == 10).await;
    reconciler.gate.notify_one();
    eventually("every key reconciled", || reconciler.log.lock().unwrap().len() == 12).await;
    let log = reconciler.log.lock().unwrap().clone();
    (first, changed, log)
}

#[tokio::test]
async fn changed_objects_are_reconciled_before_the_initial_lists_backlog() {
    let (first, changed, log) = reconcile_order(true).await;
    assert_eq!(log[0], first);
    assert_eq!(log[1], first, "the requeue at priority 1 comes first");
    assert_eq!(log[2..4], [changed, "new".to_owned()], "then the real changes: {log:?}");
}

#[tokio::test]
async fn without_the_priority_queue_keys_are_reconciled_in_the_order_they_came() {
    let (first, _, log) = reconcile_order(false).await;
    assert_eq!(log[..2], [first.clone(), first], "an explicit requeue priority still counts");
    assert_eq!(log[11], "new", "the new object waits behind the whole initial list: {log:?}");
}
