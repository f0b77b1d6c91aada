//! The set's webhooks (`--webhook-port PORT`, feature `webhook`), on one ctrlkit
//! `WebhookServer` that every replica runs:
//!
//! - a validator: `spec.replicas` between 0 and 100, and every `spec.data` key a valid
//!   ConfigMap key (the API server's own rule for ConfigMaps, so that the set's ConfigMaps
//!   can be created at all);
//! - a defaulter: a set without `spec.replicas` gets 1;
//! - the conversion between v1 (the hub) and v2.
//!
//! Its certificates are kept in the Secret `configmap-sets-webhook-certs` of the operator's
//! namespace (the first replica makes them, all serve them, any renews them), for the host
//! `--webhook-host` (default 127.0.0.1, where a kube-apiserver on the same machine calls
//! them); the CA bundle is written into the webhook configurations and the CRD, and put back
//! if someone overwrites it. The configurations themselves are applied at start, pointing at
//! `https://HOST:PORT/...`.

use std::net::SocketAddr;

use async_trait::async_trait;
use ctrlkit::tls::SecretCertificates;
use ctrlkit::webhook::{
    AdmissionRequest, CaInjection, Conversion, ConversionError, Defaulter, Denial, Validation,
    Validator, WebhookServer,
};
use kube_client::api::{Patch, PatchParams};
use kube_client::{Api, Client};
use serde_json::{Value, json};

use super::{CONVERT_PATH, ConfigMapSet, DEFAULT_REPLICAS, FIELD_MANAGER, v2};

/// The name of both webhook configurations (validating and mutating).
pub const CONFIGURATION: &str = "configmapsets.ctrlkit.example.com";
const VALIDATE: &str = "/validate-configmapsets";
const DEFAULT: &str = "/default-configmapsets";
/// The most ConfigMaps a set may ask for.
const MAX_REPLICAS: i32 = 100;

/// Refuses a set whose replicas are out of range or whose data keys no ConfigMap may hold.
struct SetValidator;

#[async_trait]
impl Validator<ConfigMapSet> for SetValidator {
    async fn validate_create(
        &self,
        set: &ConfigMapSet,
        _: &AdmissionRequest<ConfigMapSet>,
    ) -> Validation {
        check(set)
    }

    async fn validate_update(
        &self,
        _old: &ConfigMapSet,
        set: &ConfigMapSet,
        _: &AdmissionRequest<ConfigMapSet>,
    ) -> Validation {
        check(set)
    }
}

/// Every problem of `set`, in the API server's field-error style, joined by `, ` as it joins
/// them.
fn check(set: &ConfigMapSet) -> Validation {
    let mut problems = Vec::new();
    if let Some(replicas) = set.spec.replicas.filter(|r| !(0..=MAX_REPLICAS).contains(r)) {
        problems.push(format!(
            "spec.replicas: Invalid value: {replicas}: must be between 0 and {MAX_REPLICAS}, inclusive"
        ));
    }
    for key in set.spec.data.keys() {
        if let Some(why) = config_key_problem(key) {
            problems.push(format!("spec.data[{key}]: Invalid value: {key:?}: {why}"));
        }
    }
    match problems.is_empty() {
        true => Ok(Vec::new()),
        false => Err(Denial::invalid(problems.join(", "))),
    }
}

/// Why `key` cannot be a ConfigMap's data key, if it cannot (apimachinery's
/// `IsConfigMapKey`, with its messages).
fn config_key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() || key.len() > 253 {
        return Some("must be no more than 253 characters and not empty");
    }
    if !key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        return Some(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' \
             (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is \
             '[-._a-zA-Z0-9]+')",
        );
    }
    match key {
        "." => Some("must not be '.'"),
        ".." => Some("must not be '..'"),
        _ if key.starts_with("..") => Some("must not start with '..'"),
        _ => None,
    }
}

/// Gives a set without `spec.replicas` one ConfigMap.
struct SetDefaulter;

#[async_trait]
impl Defaulter<ConfigMapSet> for SetDefaulter {
    async fn default(&self, set: &mut ConfigMapSet, _: &AdmissionRequest<ConfigMapSet>) {
        set.spec.replicas.get_or_insert(DEFAULT_REPLICAS);
    }
}

/// Where the webhooks listen and how the API server reaches them.
pub struct Webhooks {
    /// The port, on every interface.
    pub port: u16,
    /// The host the API server calls (and the certificate names): an IP or a DNS name.
    pub host: String,
}

impl Webhooks {
    /// `https://HOST:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        match self.host.contains(':') {
            true => format!("https://[{}]:{}{path}", self.host, self.port),
            false => format!("https://{}:{}{path}", self.host, self.port),
        }
    }

    /// The server: validator, defaulter and conversion, its certificates in the Secret
    /// `configmap-sets-webhook-certs` of `namespace`; it writes its CA bundle into the
    /// configurations and the CRD `crd`'s conversion webhook.
    pub fn server(
        &self,
        client: &Client,
        namespace: &str,
        crd: &str,
    ) -> Result<WebhookServer, ConversionError> {
        let conversion = Conversion::<ConfigMapSet>::new().spoke::<v2::ConfigMapSet>()?;
        let certificates = SecretCertificates::new(
            client.clone(),
            namespace,
            "configmap-sets-webhook-certs",
            [self.host.clone()],
        );
        let builder = WebhookServer::builder()
            .name("configmap-sets-webhooks")
            .address(SocketAddr::from(([0, 0, 0, 0], self.port)))
            .validator::<ConfigMapSet, _>(VALIDATE, SetValidator)
            .defaulter::<ConfigMapSet, _>(DEFAULT, SetDefaulter)
            .conversion(CONVERT_PATH, conversion)
            .certificates(certificates);
        let injection =
            CaInjection::new().validating(CONFIGURATION).mutating(CONFIGURATION).crd(crd);
        Ok(builder.inject_ca_bundle(client.clone(), injection).build())
    }

    /// Applies the validating and mutating configurations (server-side apply; the CA bundle
    /// is the server's to write, so it is left out).
    pub async fn register(&self, client: &Client) -> Result<(), String> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let hook = |name: &str, path: &str| {
            json!({
                "name": name,
                "clientConfig": { "url": self.url(path) },
                // The v1 type is what the validator and defaulter read; a v2 request is
                // converted to v1 first (matchPolicy Equivalent).
                "rules": [{
                    "apiGroups": ["ctrlkit.example.com"], "apiVersions": ["v1"],
                    "resources": ["configmapsets"], "operations": ["CREATE", "UPDATE"],
                    "scope": "Namespaced",
                }],
                "matchPolicy": "Equivalent",
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            })
        };
        let configuration = |kind: &str, hook: Value| {
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                "metadata": { "name": CONFIGURATION }, "webhooks": [hook],
            })
        };
        let validating = configuration(
            "ValidatingWebhookConfiguration",
            hook("validate.configmapsets.ctrlkit.example.com", VALIDATE),
        );
        let mutating = configuration(
            "MutatingWebhookConfiguration",
            hook("default.configmapsets.ctrlkit.example.com", DEFAULT),
        );
        use k8s_openapi::api::admissionregistration::v1::{
            MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
        };
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        api.patch(CONFIGURATION, &params, &Patch::Apply(validating))
            .await
            .map_err(|e| format!("applying ValidatingWebhookConfiguration {CONFIGURATION}: {e}"))?;
        let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        api.patch(CONFIGURATION, &params, &Patch::Apply(mutating))
            .await
            .map_err(|e| format!("applying MutatingWebhookConfiguration {CONFIGURATION}: {e}"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(replicas: Option<i32>, keys: &[&str]) -> ConfigMapSet {
        let data = keys.iter().map(|k| (k.to_string(), "x".to_owned())).collect();
        ConfigMapSet::new("s", super::super::ConfigMapSetSpec { replicas, data })
    }

    #[test]
    fn replicas_and_keys_are_checked_as_the_api_server_checks_configmap_keys() {
        assert!(check(&set(Some(0), &["a.b", "A_B-c"])).is_ok());
        assert!(check(&set(Some(100), &[])).is_ok());
        assert!(check(&set(None, &[])).is_ok());
        let denial = check(&set(Some(101), &["bad key", ".."])).unwrap_err();
        assert_eq!(denial.code, ctrlkit::webhook::StatusCode::UNPROCESSABLE_ENTITY);
        assert!(denial.message.starts_with("spec.replicas: Invalid value: 101: must be between"));
        assert!(
            denial
                .message
                .contains(r#"spec.data[bad key]: Invalid value: "bad key": a valid config key"#)
        );
        assert!(denial.message.contains("must not be '..'"), "{}", denial.message);
        assert!(check(&set(Some(-1), &[])).is_err());
    }
}
