//! An operator as a user writes one: it labels every ConfigMap `stamped=yes`.

use std::sync::Arc;

use ctrlkit::prelude::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::{Patch, PatchParams};
use kube_client::{Api, Client, ResourceExt};

/// Labels each ConfigMap it is given `stamped=yes`.
pub struct Stamp {
    configmaps: Api<ConfigMap>,
}

#[async_trait]
impl Reconciler for Stamp {
    type Object = ConfigMap;
    type Error = kube_client::Error;

    async fn reconcile(
        &self,
        _: &ObjectKey,
        cm: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Self::Error> {
        let Some(cm) = cm else { return Ok(Action::done()) };
        if cm.labels().get("stamped").map(String::as_str) != Some("yes") {
            let labels = serde_json::json!({ "metadata": { "labels": { "stamped": "yes" } } });
            self.configmaps
                .patch(&cm.name_any(), &PatchParams::default(), &Patch::Merge(labels))
                .await?;
        }
        Ok(Action::done())
    }
}

/// A Manager running the operator on the ConfigMaps of `namespace`.
pub fn manager(client: Client, namespace: &str) -> Result<Manager, HandleError> {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut manager = Manager::new(client);
    manager.controller(configmaps.clone()).complete(Stamp { configmaps })?;
    Ok(manager)
}
