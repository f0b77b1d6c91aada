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
//! - At every check each replica reads it again, serves what it holds (what another replica
//!   renewed included), and takes the next step of the renewal plan (the `rotation` module:
//!   a new CA is in the bundle a propagation period before any leaf of it is served) itself,
//!   with the `resourceVersion` it read: of replicas renewing at once, one write wins and the
//!   others read it at their next check. So every replica serves, and injects, the Secret's
//!   bundle.
//! - A Secret deleted (a GitOps prune) or that does not decode (edited by hand) is written
//!   back by the first replica to check, with the CA and certificate it serves: nothing
//!   served changes, and no client needs a new bundle. Only a replica that starts with no
//!   usable Secret makes a new CA.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube_client::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube_client::{Api, Client};
use serde_json::json;

use super::certs::{self, CertError, CertificateBundle, Certificates, Lifetimes, SelfSignedCa};
use super::rotation::{self, Kept};

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
    kept: Result<Kept, CertError>,
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

    /// The Secret's certificates, made and written first if it has none, served.
    pub(crate) async fn load(&self, certificates: &Certificates) -> Result<Kept, CertError> {
        // A write that conflicts means another replica wrote first: read that.
        for _ in 0..5 {
            let read = self.read().await?;
            let version = read.resource_version;
            let mut kept = match read.kept {
                Ok(kept) => kept,
                Err(err) => {
                    if version.is_some() {
                        tracing::warn!(secret = %self.name, %err, "the webhook certificate Secret does not decode; replacing it");
                    }
                    let kept = rotation::first(&self.hosts, &self.lifetimes)?;
                    if self.write(&kept.ca, &kept.served, version).await? {
                        certificates.set(kept.served.clone())?;
                        return Ok(kept);
                    }
                    continue;
                }
            };
            // A leaf made for other hosts (another replica's list, or this one's before a
            // change) is reissued for both, so that every replica's hosts are covered through
            // a rolling update; a renewal due is taken too.
            match rotation::next(&kept, &self.hosts, &self.lifetimes, SystemTime::now())? {
                None => {
                    certificates.set(kept.served.clone())?;
                    return Ok(kept);
                }
                Some(step) => {
                    let ca = step.ca.as_ref().unwrap_or(&kept.ca);
                    if self.write(ca, &step.served, version).await? {
                        certificates.set(step.served.clone())?;
                        kept.apply(step);
                        return Ok(kept);
                    }
                }
            }
        }
        Err(CertError::Pem(format!("the Secret {} kept changing while read", self.name)))
    }

    /// One check: serves what the Secret holds, takes the plan's next step, or writes back a
    /// Secret deleted or corrupted with what this replica `kept`.
    pub(crate) async fn check(
        &self,
        kept: &mut Kept,
        certificates: &Certificates,
    ) -> Result<(), CertError> {
        let read = self.read().await?;
        let version = read.resource_version;
        match read.kept {
            Ok(held) => {
                if certificates.bundle().as_ref() != Some(&held.served) {
                    certificates.set(held.served.clone())?;
                    tracing::info!(secret = %self.name, "serving the webhook certificate another replica renewed");
                }
                *kept = held;
            }
            Err(err) => {
                tracing::warn!(secret = %self.name, %err, "the webhook certificate Secret is gone or does not decode; writing back the one served");
                if self.write(&kept.ca, &kept.served, version).await? {
                    tracing::info!(secret = %self.name, "wrote back the webhook certificate Secret");
                }
                return Ok(());
            }
        }
        if let Some(step) = rotation::next(kept, &self.hosts, &self.lifetimes, SystemTime::now())? {
            let ca = step.ca.as_ref().unwrap_or(&kept.ca);
            if self.write(ca, &step.served, version).await? {
                certificates.set(step.served.clone())?;
                tracing::info!(secret = %self.name, new_ca = step.ca.is_some(), "renewed the webhook certificates");
                kept.apply(step);
            }
        }
        Ok(())
    }

    async fn read(&self) -> Result<Read, CertError> {
        let secret = crate::cache::get_opt(&self.api, &self.name, &()).await.map_err(api_error)?;
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

    fn decode(&self, secret: &Secret) -> Result<Kept, CertError> {
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
        let served = CertificateBundle {
            not_after: Some(certs::not_after(&cert_pem)?),
            cert_pem,
            key_pem: field("tls.key")?,
            ca_pem,
        };
        // The key must be the leaf's: a certificate rustls refuses is as good as none.
        Certificates::default().set(served.clone())?;
        Ok(Kept { ca, served })
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
