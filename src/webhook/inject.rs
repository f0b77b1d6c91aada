//! [`CaInjection`]: the CA bundle of the served certificate written into the webhook
//! configurations and CRDs that call the server (cert-manager's cainjector,
//! cert-controller's rotator), and written again when someone overwrites it.
//!
//! Contract:
//! - Each named `ValidatingWebhookConfiguration` and `MutatingWebhookConfiguration` gets the
//!   bundle in every webhook's `clientConfig.caBundle`; each named CRD in
//!   `spec.conversion.webhook.clientConfig.caBundle` (a CRD without a webhook conversion is
//!   left alone).
//! - The served CAs are added to a bundle that lacks one; a CA another writer put there
//!   (cert-manager's cainjector's, a deployment's own that ctrlkit did not make) is never
//!   removed, so writers that each add their own settle. A bundle that holds no certificate
//!   at all is replaced. Every CA ctrlkit made counts toward the bound below, wherever it
//!   comes from: another ctrlkit deployment injecting into the same object shares its `keep`.
//! - ctrlkit's own CAs (named "ctrlkit webhook CA", with a random unit) stay bounded: an
//!   expired one is dropped at once, and of the others at most [`keep_own_cas`] (3 by
//!   default) stay, the served ones always and then the newest (latest `notBefore`). So a
//!   replica whose certificates live in memory, which makes a CA at every start, does not
//!   grow the bundle until the object is too large to write. Replicas that keep their
//!   certificates in memory each serve a CA of their own (two during its renewal), and a
//!   rollout runs up to replicas + maxSurge at once: keep at least
//!   2 × (replicas + maxSurge) + 1, so that no live replica's CA is pushed out by those of
//!   replicas started after it (counting those of any other ctrlkit deployment injecting
//!   into the same objects); with several replicas, prefer a Secret
//!   ([`SecretCertificates`](crate::tls::SecretCertificates)), where they share one CA.
//!   A replica that restarts again and again beside one that does not can push the other's
//!   CA out after `keep` − replicas + 1 restarts; that replica puts it back at its next
//!   pass.
//!
//! [`keep_own_cas`]: CaInjection::keep_own_cas
//! - An object is written only when its bundle lacks a CA, with a JSON patch of those bundles
//!   alone that tests the `resourceVersion` read (so fields this client's types do not know,
//!   a newer server's, are never dropped). A conflict, a refusal or a failed read is logged
//!   and tried again after a backoff (the pass interval, 30 s by default, doubled after each
//!   failing pass up to 5 minutes, back to the interval after a pass without failure); an
//!   object not there yet is tried again at the next pass. Each pass also puts back a served
//!   CA someone removed.
//! - Beside cert-manager's cainjector (or any injector that sets the bundle to its own CA),
//!   leave this injection off for the objects it manages: each would add back what the other
//!   removed.

use std::time::{Duration, SystemTime};

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

use super::bundle;
use crate::tls;

/// What gets the CA bundle, and how often it is checked.
#[derive(Debug, Clone)]
pub struct CaInjection {
    validating: Vec<String>,
    mutating: Vec<String>,
    crds: Vec<String>,
    every: Duration,
    keep_own: usize,
}

impl Default for CaInjection {
    fn default() -> Self {
        Self {
            validating: Vec::new(),
            mutating: Vec::new(),
            crds: Vec::new(),
            every: Duration::from_secs(30),
            keep_own: 3,
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

    /// How many of ctrlkit's own CAs a bundle keeps at most (default 3): the served ones, then
    /// the newest; expired ones are dropped whatever the number. With replicas that keep
    /// their certificates in memory, at least 2 × (replicas + maxSurge) + 1, the most live
    /// during a rollout (see the module docs). The served CAs stay even when they are more
    /// than `keep`.
    #[must_use]
    pub fn keep_own_cas(mut self, keep: usize) -> Self {
        self.keep_own = keep;
        self
    }

    /// The time before the next pass after `failures` passes in a row that failed somewhere:
    /// the interval, doubled per failure, up to 5 minutes (or the interval, if longer).
    pub(crate) fn delay_after(&self, failures: u32) -> Duration {
        let interval = self.every.max(tls::MIN_PERIOD);
        let backoff = interval.saturating_mul(2u32.saturating_pow(failures.min(20)));
        backoff.min(MAX_BACKOFF.max(interval))
    }

    /// One pass: adds the CAs of `ca_pem` to every bundle that lacks one; returns how many
    /// objects were written. Failures are logged, and the pass goes on with the next object.
    pub async fn inject(&self, client: &Client, ca_pem: &str) -> usize {
        self.pass(client, ca_pem).await.written
    }

    /// One pass, as [`inject`](Self::inject): what it wrote and how many objects failed.
    pub(crate) async fn pass(&self, client: &Client, ca_pem: &str) -> Pass {
        let mut pass = Pass::default();
        let ours = Served { pem: ca_pem, keep: self.keep_own, now: SystemTime::now() };
        let mut written = Outcomes(&mut pass);
        for name in &self.validating {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
            written += write(&api, name, &ours, |c| {
                hook_bundles(c.webhooks.iter().flatten().map(|w| &w.client_config))
            })
            .await;
        }
        for name in &self.mutating {
            let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
            written += write(&api, name, &ours, |c| {
                hook_bundles(c.webhooks.iter().flatten().map(|w| &w.client_config))
            })
            .await;
        }
        for name in &self.crds {
            let api: Api<CustomResourceDefinition> = Api::all(client.clone());
            written += write(&api, name, &ours, |crd| {
                let webhook = crd.spec.conversion.as_ref().and_then(|c| c.webhook.as_ref());
                let config = webhook.and_then(|w| w.client_config.as_ref());
                let path = "/spec/conversion/webhook/clientConfig/caBundle".to_owned();
                config.map(|c| (path, c.ca_bundle.as_ref())).into_iter().collect()
            })
            .await;
        }
        pass
    }
}

/// The longest wait between passes after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pass {
    /// Objects written.
    pub(crate) written: usize,
    /// Objects that could not be read or written.
    pub(crate) failed: usize,
}

/// What one object's injection did.
enum Outcome {
    /// Nothing to write, or the object is not there yet.
    Unchanged,
    Written,
    Failed,
}

/// Counts outcomes into a [`Pass`].
struct Outcomes<'a>(&'a mut Pass);

impl std::ops::AddAssign<Outcome> for Outcomes<'_> {
    fn add_assign(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Unchanged => {}
            Outcome::Written => self.0.written += 1,
            Outcome::Failed => self.0.failed += 1,
        }
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

/// The served CAs, and how a pass bounds ctrlkit's own beside them.
struct Served<'a> {
    pem: &'a str,
    keep: usize,
    now: SystemTime,
}

/// Reads `name` and, where a bundle of those `bundles` lists (its JSON pointer and value)
/// lacks a CA of `ours` or holds too many of ctrlkit's own ([`bundle::merged`]), writes it
/// with a JSON patch guarded by the `resourceVersion` read. A patch, not a replace, so that
/// fields this client's types do not know (a newer server's) are kept.
async fn write<K>(
    api: &Api<K>,
    name: &str,
    ours: &Served<'_>,
    bundles: impl FnOnce(&K) -> Vec<(String, Option<&ByteString>)>,
) -> Outcome
where
    K: kube_client::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let kind = K::kind(&());
    let object = match crate::cache::get_opt(api, name, &()).await {
        Ok(Some(object)) => object,
        Ok(None) => {
            tracing::debug!(%kind, name, "no object to inject the CA bundle into yet");
            return Outcome::Unchanged;
        }
        Err(err) => {
            tracing::warn!(%kind, name, %err, "reading an object to inject the CA bundle into");
            return Outcome::Failed;
        }
    };
    let mut operations: Vec<serde_json::Value> = bundles(&object)
        .into_iter()
        .filter_map(|(path, current)| {
            Some((path, bundle::merged(current, ours.pem, ours.keep, ours.now)?))
        })
        .map(|(path, bundle)| json!({ "op": "add", "path": path, "value": bundle }))
        .collect();
    if operations.is_empty() {
        return Outcome::Unchanged;
    }
    // Fails (422) if the object changed since it was read: tried again after a backoff.
    let version = object.meta().resource_version.clone().unwrap_or_default();
    operations
        .insert(0, json!({ "op": "test", "path": "/metadata/resourceVersion", "value": version }));
    let patch: json_patch::Patch =
        match serde_json::from_value(serde_json::Value::Array(operations)) {
            Ok(patch) => patch,
            Err(err) => {
                tracing::error!(%kind, name, %err, "a CA bundle patch that does not encode");
                return Outcome::Failed;
            }
        };
    match api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch)).await {
        Ok(_) => {
            tracing::info!(%kind, name, "injected the webhook CA bundle");
            Outcome::Written
        }
        Err(err) => {
            tracing::warn!(%kind, name, %err, "injecting the CA bundle failed; tried again after a backoff");
            Outcome::Failed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_passes_back_off_to_five_minutes_at_most() {
        let injection = CaInjection::new().every(Duration::from_secs(30));
        let delays: Vec<u64> = (0..6).map(|f| injection.delay_after(f).as_secs()).collect();
        assert_eq!(delays, [30, 60, 120, 240, 300, 300]);
        let slow = CaInjection::new().every(Duration::from_secs(600));
        assert_eq!(slow.delay_after(3), Duration::from_secs(600), "never below the interval");
    }
}
