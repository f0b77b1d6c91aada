//! [`CaInjection`]: the CA bundle of the served certificate written into the webhook
//! configurations and CRDs that call the server (cert-manager's cainjector,
//! cert-controller's rotator), and written again when someone overwrites it.
//!
//! Contract:
//! - Each named `ValidatingWebhookConfiguration` and `MutatingWebhookConfiguration` gets the
//!   bundle in every webhook's `clientConfig.caBundle`; each named CRD in
//!   `spec.conversion.webhook.clientConfig.caBundle` (a CRD without a webhook conversion is
//!   left alone).
//! - An object is written only when its bundle differs, with a JSON patch of those bundles
//!   alone that tests the `resourceVersion` read (so fields this client's types do not know,
//!   a newer server's, are never dropped): a conflict, a refusal or an object not there yet
//!   is logged and tried again at the next pass (every 30 s by default), which also puts back
//!   a bundle someone overwrote.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_client::api::{Patch, PatchParams};
use kube_client::{Api, Client};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// What gets the CA bundle, and how often it is checked.
#[derive(Debug, Clone)]
pub struct CaInjection {
    validating: Vec<String>,
    mutating: Vec<String>,
    crds: Vec<String>,
    every: Duration,
}

impl Default for CaInjection {
    fn default() -> Self {
        Self {
            validating: Vec::new(),
            mutating: Vec::new(),
            crds: Vec::new(),
            every: Duration::from_secs(30),
        }
    }
}

impl CaInjection {
    /// Nothing yet, checked every 30 s.
    pub fn new() -> Self {
        Self::default()
    }

    /// The `ValidatingWebhookConfiguration` named `name`.
    pub fn validating(mut self, name: &str) -> Self {
        self.validating.push(name.to_owned());
        self
    }

    /// The `MutatingWebhookConfiguration` named `name`.
    pub fn mutating(mut self, name: &str) -> Self {
        self.mutating.push(name.to_owned());
        self
    }

    /// The CRD named `name` (`plural.group`), for its conversion webhook.
    pub fn crd(mut self, name: &str) -> Self {
        self.crds.push(name.to_owned());
        self
    }

    /// How often the objects are checked (default 30 s; 10 ms at least).
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    /// The time between passes.
    pub(crate) fn interval(&self) -> Duration {
        self.every.max(super::https::MIN_PERIOD)
    }

    /// One pass: writes `ca_pem` where it is missing or different; returns how many objects
    /// were written. Failures are logged, and the pass goes on with the next object.
    pub async fn inject(&self, client: &Client, ca_pem: &str) -> usize {
        let bundle = ByteString(ca_pem.as_bytes().to_vec());
        let mut written = 0;
        for name in &self.validating {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
            written += write(&api, name, &bundle, |c| {
                hook_bundles(c.webhooks.iter().flatten().map(|w| &w.client_config))
            })
            .await;
        }
        for name in &self.mutating {
            let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
            written += write(&api, name, &bundle, |c| {
                hook_bundles(c.webhooks.iter().flatten().map(|w| &w.client_config))
            })
            .await;
        }
        for name in &self.crds {
            let api: Api<CustomResourceDefinition> = Api::all(client.clone());
            written += write(&api, name, &bundle, |crd| {
                let webhook = crd.spec.conversion.as_ref().and_then(|c| c.webhook.as_ref());
                let config = webhook.and_then(|w| w.client_config.as_ref());
                let path = "/spec/conversion/webhook/clientConfig/caBundle".to_owned();
                config.map(|c| (path, c.ca_bundle.as_ref())).into_iter().collect()
            })
            .await;
        }
        written
    }
}

/// The bundles of a configuration's webhooks, by their JSON pointers (validating and
/// mutating webhooks share the `clientConfig` type).
fn hook_bundles<'a>(
    configs: impl Iterator<Item = &'a WebhookClientConfig>,
) -> Vec<(String, Option<&'a ByteString>)> {
    let bundles = configs.map(|c| c.ca_bundle.as_ref()).enumerate();
    bundles.map(|(i, b)| (format!("/webhooks/{i}/clientConfig/caBundle"), b)).collect()
}

/// Reads `name` and, where a bundle of those `bundles` lists (its JSON pointer and value)
/// differs from `bundle`, writes it with a JSON patch guarded by the `resourceVersion` read: 1
/// if written. A patch, not a replace, so that fields this client's types do not know (a
/// newer server's) are kept.
async fn write<K>(
    api: &Api<K>,
    name: &str,
    bundle: &ByteString,
    bundles: impl FnOnce(&K) -> Vec<(String, Option<&ByteString>)>,
) -> usize
where
    K: kube_client::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let kind = K::kind(&());
    let object = match api.get_opt(name).await {
        Ok(Some(object)) => object,
        Ok(None) => {
            tracing::debug!(%kind, name, "no object to inject the CA bundle into yet");
            return 0;
        }
        Err(err) => {
            tracing::warn!(%kind, name, %err, "reading an object to inject the CA bundle into");
            return 0;
        }
    };
    let value = serde_json::to_value(bundle).unwrap_or_default();
    let mut operations: Vec<serde_json::Value> = bundles(&object)
        .into_iter()
        .filter(|(_, current)| *current != Some(bundle))
        .map(|(path, _)| json!({ "op": "add", "path": path, "value": value }))
        .collect();
    if operations.is_empty() {
        return 0;
    }
    // Fails (422) if the object changed since it was read: tried again at the next pass.
    let version = object.meta().resource_version.clone().unwrap_or_default();
    operations
        .insert(0, json!({ "op": "test", "path": "/metadata/resourceVersion", "value": version }));
    let patch: json_patch::Patch =
        match serde_json::from_value(serde_json::Value::Array(operations)) {
            Ok(patch) => patch,
            Err(err) => {
                tracing::error!(%kind, name, %err, "a CA bundle patch that does not encode");
                return 0;
            }
        };
    match api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch)).await {
        Ok(_) => {
            tracing::info!(%kind, name, "injected the webhook CA bundle");
            1
        }
        Err(err) => {
            tracing::warn!(%kind, name, %err, "injecting the CA bundle failed; tried again at the next pass");
            0
        }
    }
}
