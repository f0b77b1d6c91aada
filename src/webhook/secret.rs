//! [`SecretCertificates`]: the self-signed CA and serving certificate kept in a Secret, so
//! that every replica serves the same one and one CA bundle trusts them all
//! (cert-controller's rotator).
//!
//! Contract:
//! - The Secret holds `ca.crt`, `ca.key`, `tls.crt` and `tls.key`. The first replica to start
//!   without it makes them and creates it (`kubernetes.io/tls`); the others (a create that
//!   conflicts) read it. A Secret made beforehand (an empty `Opaque` one that the operator may
//!   only update, or one a chart labels and owns) is written too: only those four keys, with
//!   a merge patch guarded by the `resourceVersion` read, so its type, its other keys, its
//!   labels, annotations and owners stay. An `immutable` Secret is an error at start, naming
//!   it: its certificates could never be renewed.
//! - At every check each replica reads it again, serves what another replica renewed, and
//!   renews what is due itself with the `resourceVersion` it read: of replicas renewing at
//!   once, one write wins and the others read it at their next check.
//! - A Secret that does not decode (edited by hand, half-written) is replaced with new
//!   certificates, logged.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube_client::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube_client::{Api, Client};
use serde_json::json;

use super::certs::{self, CertError, CertificateBundle, Certificates, Lifetimes, SelfSignedCa};

/// The Secret that keeps a webhook server's certificates, and what they are for.
#[derive(Clone)]
pub struct SecretCertificates {
    api: Api<Secret>,
    name: String,
    hosts: Vec<String>,
    lifetimes: Lifetimes,
}

impl std::fmt::Debug for SecretCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretCertificates")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("lifetimes", &self.lifetimes)
            .finish()
    }
}

/// What the Secret held when read: its certificates (if they decode) and version.
struct Read {
    kept: Result<(SelfSignedCa, CertificateBundle), CertError>,
    resource_version: Option<String>,
}

impl SecretCertificates {
    /// The Secret `namespace/name`, for certificates of `hosts`, with the default lifetimes.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        hosts: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            hosts: hosts.into_iter().map(Into::into).collect(),
            lifetimes: Lifetimes::default(),
        }
    }

    /// Sets the lifetimes and how often they are checked.
    pub fn lifetimes(mut self, lifetimes: Lifetimes) -> Self {
        self.lifetimes = lifetimes;
        self
    }

    /// How often the Secret is read again.
    pub(crate) fn check_every(&self) -> std::time::Duration {
        self.lifetimes.check_every
    }

    /// The Secret's certificates, made and written first if it has none: the CA, served.
    pub(crate) async fn load(
        &self,
        certificates: &Certificates,
    ) -> Result<SelfSignedCa, CertError> {
        // A create or replace that conflicts means another replica wrote first: read that.
        for _ in 0..5 {
            let read = self.read().await?;
            match (read.kept, read.resource_version) {
                (Ok((ca, bundle)), version) => {
                    // A leaf made for other hosts (another replica's list, or this one's
                    // before a change) is reissued for both, so that every replica's hosts
                    // are covered through a rolling update.
                    let missing = self.missing_hosts(&bundle);
                    if missing.is_empty() {
                        certificates.set(bundle)?;
                        return Ok(ca);
                    }
                    let reissued = self.reissue(&ca, &bundle, &missing)?;
                    if self.write(&ca, &reissued, version).await? {
                        tracing::info!(secret = %self.name, ?missing, "reissued the webhook certificate for more hosts");
                        certificates.set(reissued)?;
                        return Ok(ca);
                    }
                }
                (Err(err), version) => {
                    if version.is_some() {
                        tracing::warn!(secret = %self.name, %err, "the webhook certificate Secret does not decode; replacing it");
                    }
                    let ca = SelfSignedCa::generate(certs::CA_NAME, self.lifetimes.ca)?;
                    let bundle = ca.issue(&self.hosts, self.lifetimes.leaf)?;
                    if self.write(&ca, &bundle, version).await? {
                        certificates.set(bundle)?;
                        return Ok(ca);
                    }
                }
            }
        }
        Err(CertError::Pem(format!("the Secret {} kept changing while read", self.name)))
    }

    /// One check: serves what another replica wrote, renews what is due; the CA to serve
    /// from now on, if it is not `served` any more.
    pub(crate) async fn check(
        &self,
        served: &SelfSignedCa,
        certificates: &Certificates,
    ) -> Result<Option<SelfSignedCa>, CertError> {
        let read = self.read().await?;
        // A Secret that does not decode is replaced below as if due.
        let decoded = read.kept.is_ok();
        let mut newer = None;
        if let Ok((kept, bundle)) = read.kept {
            if certificates.bundle().as_ref() != Some(&bundle) {
                certificates.set(bundle)?;
                tracing::info!(secret = %self.name, "serving the webhook certificate another replica renewed");
            }
            newer = Some(kept);
        }
        let ca = newer.as_ref().unwrap_or(served);
        let now = SystemTime::now();
        let version = read.resource_version;
        if ca.is_due(now) || !decoded {
            let (renewed, bundle) = ca.renew(&self.hosts, &self.lifetimes)?;
            if self.write(&renewed, &bundle, version).await? {
                certificates.set(bundle)?;
                tracing::info!(secret = %self.name, "renewed the webhook CA and certificate");
                return Ok(Some(renewed));
            }
        } else if let Some(served) = certificates.bundle()
            && (certificates.leaf_due(self.lifetimes.leaf, now)
                || !self.missing_hosts(&served).is_empty())
        {
            let bundle = self.reissue(ca, &served, &self.missing_hosts(&served))?;
            if self.write(ca, &bundle, version).await? {
                certificates.set(bundle)?;
                tracing::info!(secret = %self.name, "renewed the webhook certificate");
            }
        }
        Ok(newer)
    }

    /// This replica's hosts that the leaf of `bundle` is not for.
    fn missing_hosts(&self, bundle: &CertificateBundle) -> Vec<String> {
        let covered = certs::hosts(&bundle.cert_pem).unwrap_or_default();
        self.hosts.iter().filter(|h| !covered.contains(h)).cloned().collect()
    }

    /// A new leaf of `ca` for the hosts `served`'s leaf is for and `missing`, with the
    /// bundle `served` has (which may hold a renewed CA and the one before it).
    fn reissue(
        &self,
        ca: &SelfSignedCa,
        served: &CertificateBundle,
        missing: &[String],
    ) -> Result<CertificateBundle, CertError> {
        let mut hosts = certs::hosts(&served.cert_pem).unwrap_or_default();
        hosts.extend(missing.iter().cloned());
        if hosts.is_empty() {
            hosts = self.hosts.clone();
        }
        let mut bundle = ca.issue(&hosts, self.lifetimes.leaf)?;
        bundle.ca_pem = served.ca_pem.clone();
        Ok(bundle)
    }

    async fn read(&self) -> Result<Read, CertError> {
        let secret = self.api.get_opt(&self.name).await.map_err(api_error)?;
        let Some(secret) = secret else {
            return Ok(Read {
                kept: Err(CertError::Pem("no Secret".to_owned())),
                resource_version: None,
            });
        };
        if secret.immutable == Some(true) {
            let namespace = self.api.namespace().unwrap_or_default();
            return Err(CertError::Immutable(format!("{namespace}/{}", self.name)));
        }
        let resource_version = secret.metadata.resource_version.clone();
        Ok(Read { kept: self.decode(&secret), resource_version })
    }

    fn decode(&self, secret: &Secret) -> Result<(SelfSignedCa, CertificateBundle), CertError> {
        let data = secret.data.as_ref();
        let field = |key: &str| {
            let bytes = data.and_then(|d| d.get(key)).map(|b| b.0.clone()).unwrap_or_default();
            String::from_utf8(bytes)
                .ok()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| CertError::Pem(format!("the Secret {} has no {key}", self.name)))
        };
        let (ca_pem, cert_pem) = (field("ca.crt")?, field("tls.crt")?);
        let ca = SelfSignedCa::from_pem(&ca_pem, &field("ca.key")?, self.lifetimes.ca)?;
        let bundle = CertificateBundle {
            not_after: Some(certs::not_after(&cert_pem)?),
            cert_pem,
            key_pem: field("tls.key")?,
            ca_pem,
        };
        Ok((ca, bundle))
    }

    /// Writes the certificates: a create without `version`; with it, a merge patch of the
    /// four keys alone, guarded by `version` (so the Secret's type, other keys and metadata
    /// stay); `false` on a conflict (another replica wrote first).
    async fn write(
        &self,
        ca: &SelfSignedCa,
        bundle: &CertificateBundle,
        version: Option<String>,
    ) -> Result<bool, CertError> {
        let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
        let data = BTreeMap::from([
            ("ca.crt".to_owned(), bytes(&bundle.ca_pem)),
            ("ca.key".to_owned(), bytes(&ca.key_pem())),
            ("tls.crt".to_owned(), bytes(&bundle.cert_pem)),
            ("tls.key".to_owned(), bytes(&bundle.key_pem)),
        ]);
        let written = match version {
            None => {
                let secret = Secret {
                    metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
                    type_: Some("kubernetes.io/tls".to_owned()),
                    data: Some(data),
                    ..Secret::default()
                };
                self.api.create(&PostParams::default(), &secret).await
            }
            Some(version) => {
                let patch = json!({ "metadata": { "resourceVersion": version }, "data": data });
                self.api.patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch)).await
            }
        };
        match written {
            Ok(_) => Ok(true),
            Err(kube_client::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(err) => Err(api_error(err)),
        }
    }
}

fn api_error(err: kube_client::Error) -> CertError {
    CertError::Api(Box::new(err))
}
