//! [`CaInjection`]: the CA bundle of the served certificate written into the webhook
//! configurations and CRDs that call the server (cert-manager's cainjector,
//! cert-controller's rotator), and written again when someone overwrites it.
//!
//! Contract:
//! - Each named `ValidatingWebhookConfiguration` and `MutatingWebhookConfiguration` gets the
//!   bundle in every webhook's `clientConfig.caBundle`; each named CRD in
//!   `spec.conversion.webhook.clientConfig.caBundle` (a CRD without a webhook conversion is
//!   left alone).
//! - Injection only adds: a bundle that lacks one of the served CAs gets it appended, and a
//!   CA another writer put there (another deployment's, cert-manager's cainjector's, the
//!   CA this server's renewal retired) is never removed. So writers that each add their own
//!   settle, and a bundle holding every CA stays untouched. A bundle that holds no
//!   certificate at all is replaced. Nothing is ever taken out: a CA no writer uses any more
//!   stays until the configuration is applied again.
//! - An object is written only when its bundle lacks a CA, with a JSON patch of those bundles
//!   alone that tests the `resourceVersion` read (so fields this client's types do not know,
//!   a newer server's, are never dropped). A conflict, a refusal or a failed read is logged
//!   and tried again after a backoff (the pass interval, 30 s by default, doubled after each
//!   failing pass up to 5 minutes, back to the interval after a pass without failure); an
//!   object not there yet is tried again at the next pass. Each pass also puts back a CA
//!   someone removed.
//! - Beside cert-manager's cainjector (or any injector that sets the bundle to its own CA),
//!   leave this injection off for the objects it manages: each would add back what the other
//!   removed.

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

use crate::tls;

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
        let mut written = Outcomes(&mut pass);
        for name in &self.validating {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
            written += write(&api, name, ca_pem, |c| {
                hook_bundles(c.webhooks.iter().flatten().map(|w| &w.client_config))
            })
            .await;
        }
        for name in &self.mutating {
            let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
            written += write(&api, name, ca_pem, |c| {
                hook_bundles(c.webhooks.iter().flatten().map(|w| &w.client_config))
            })
            .await;
        }
        for name in &self.crds {
            let api: Api<CustomResourceDefinition> = Api::all(client.clone());
            written += write(&api, name, ca_pem, |crd| {
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

/// `current` with the certificates of `ours` it lacks appended; `None` when it lacks none. A
/// bundle that holds no certificate (empty, or garbage) is replaced by `ours`.
fn merged(current: Option<&ByteString>, ours: &str) -> Option<ByteString> {
    let text = current.map(|b| String::from_utf8_lossy(&b.0).into_owned()).unwrap_or_default();
    let held = ders(&text);
    let missing: Vec<String> = tls::blocks(ours)
        .into_iter()
        .filter(|block| !ders(block).iter().all(|d| held.contains(d)))
        .collect();
    if missing.is_empty() && !held.is_empty() {
        return None;
    }
    let mut bundle = match held.is_empty() {
        true => String::new(),
        false if text.ends_with('\n') => text,
        false => text + "\n",
    };
    bundle.extend(missing);
    Some(ByteString(bundle.into_bytes()))
}

/// The certificates of a PEM bundle, as DER (those that do not decode skipped).
fn ders(pem: &str) -> Vec<Vec<u8>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .map(|d| d.to_vec())
        .collect()
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
/// lacks a CA of `ca_pem`, adds it with a JSON patch guarded by the `resourceVersion` read. A
/// patch, not a replace, so that fields this client's types do not know (a newer server's)
/// are kept.
async fn write<K>(
    api: &Api<K>,
    name: &str,
    ca_pem: &str,
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
    let object = match api.get_opt(name).await {
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
        .filter_map(|(path, current)| Some((path, merged(current, ca_pem)?)))
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
    use crate::tls::SelfSignedCa;

    #[test]
    fn a_bundle_gets_the_cas_it_lacks_appended_and_keeps_the_others() {
        let ca =
            |name: &str| SelfSignedCa::generate(name, Duration::from_secs(3600)).unwrap().pem();
        let (ours, theirs, retired) = (ca("ours"), ca("theirs"), ca("retired"));
        let bundle = |text: &str| ByteString(text.as_bytes().to_vec());
        assert_eq!(merged(None, &ours), Some(bundle(&ours)), "none yet");
        assert_eq!(merged(Some(&bundle("b3RoZXI=")), &ours), Some(bundle(&ours)), "garbage");
        let held = format!("{theirs}{retired}");
        let both = merged(Some(&bundle(&held)), &ours).unwrap();
        assert_eq!(both, bundle(&format!("{held}{ours}")), "appended, the others kept");
        assert_eq!(merged(Some(&both), &ours), None, "nothing lacking");
        // Held in another order, or without the last newline: still nothing lacking.
        let reordered = format!("{ours}{theirs}");
        assert_eq!(merged(Some(&bundle(reordered.trim_end())), &ours), None);
    }

    #[test]
    fn failing_passes_back_off_to_five_minutes_at_most() {
        let injection = CaInjection::new().every(Duration::from_secs(30));
        let delays: Vec<u64> = (0..6).map(|f| injection.delay_after(f).as_secs()).collect();
        assert_eq!(delays, [30, 60, 120, 240, 300, 300]);
        let slow = CaInjection::new().every(Duration::from_secs(600));
        assert_eq!(slow.delay_after(3), Duration::from_secs(600), "never below the interval");
    }
}
