//! Serving certificates: made here (a self-signed CA and a leaf it signs, with `rcgen`) or
//! read from files (cert-manager's), and swapped while the server runs.
//!
//! Contract:
//! - [`Certificates`] is what the TLS server asks for a certificate at each handshake: a new
//!   certificate set with [`Certificates::set`] is served from the next connection on, with
//!   no restart; connections open keep the one they shook hands with.
//! - [`SelfSignedCa`] makes a CA and issues leaves for DNS names or IP addresses; each CA's
//!   name is unique (a random `OU`), so a leaf names the one CA that signed it. When a leaf or
//!   a CA is renewed, and how a new CA reaches clients before any leaf of it is served, is the
//!   `rotation` module's plan.
//! - A bad certificate (files half-written, a key that does not match) is refused with an
//!   error and the one served stays.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::RwLock;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Why a certificate could not be made or served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertError {
    /// The Secret meant to keep the certificates is `immutable`: they could never be renewed.
    #[error(
        "the Secret {0} is immutable: the webhook certificates kept there could never be \
         renewed; make it mutable, or name another Secret"
    )]
    Immutable(String),
    /// rcgen could not make it.
    #[error("making a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The PEM held no certificate, or no private key, or one that does not decode.
    #[error("the certificate PEM: {0}")]
    Pem(String),
    /// rustls refused the key.
    #[error("the private key: {0}")]
    Key(#[from] rustls::Error),
    /// The API server refused a read or write of the certificates' Secret.
    #[error("the certificates' Secret: {0}")]
    Api(Box<kube_client::Error>),
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A serving certificate: its chain and key in PEM, the CA bundle clients trust it with, and
/// when it expires.
#[derive(Clone, PartialEq, Eq)]
pub struct CertificateBundle {
    /// The leaf certificate (and any intermediates), PEM.
    pub cert_pem: String,
    /// The leaf's private key, PEM.
    pub key_pem: String,
    /// The CA certificates that sign it, PEM: the `caBundle` of webhook configurations
    /// (empty when unknown, as for files without a `ca.crt`).
    pub ca_pem: String,
    /// When the leaf expires (`None` when unknown).
    pub not_after: Option<SystemTime>,
}

impl std::fmt::Debug for CertificateBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("CertificateBundle").field("not_after", &self.not_after).finish()
    }
}

/// The lifetimes of self-signed certificates and how often they are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// The CA's (default 10 years, as cert-controller's).
    pub ca: Duration,
    /// The serving certificate's (default 1 year).
    pub leaf: Duration,
    /// How often expiry is checked (default 1 hour; 10 ms at least). A renewed CA signs its
    /// first certificate two checks after it enters the bundle, so that every replica and
    /// injector has it by then.
    pub check_every: Duration,
}

const DAY: Duration = Duration::from_secs(24 * 3600);

impl Default for Lifetimes {
    fn default() -> Self {
        Self { ca: 3650 * DAY, leaf: 365 * DAY, check_every: Duration::from_secs(3600) }
    }
}

/// Whether a certificate of `lifetime` ending at `not_after` is due for renewal at `now`:
/// less than a third of its lifetime left.
pub(crate) fn due(not_after: SystemTime, lifetime: Duration, now: SystemTime) -> bool {
    not_after.duration_since(now).unwrap_or_default() < lifetime / 3
}

/// The common name of the CAs made here.
pub(crate) const CA_NAME: &str = "ctrlkit webhook CA";

/// A self-signed CA that issues serving certificates.
pub struct SelfSignedCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    issued_at: SystemTime,
    not_after: SystemTime,
    lifetime: Duration,
}

impl std::fmt::Debug for SelfSignedCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelfSignedCa").field("not_after", &self.not_after).finish()
    }
}

/// How far before its issue a certificate's validity starts: clocks drift.
const BACKDATE: Duration = Duration::from_secs(60);

/// A random name part, so that no two CAs made here share a name.
fn unique_unit() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // No system randomness: the time and the process tell CAs apart as well.
        let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        bytes = (nanos.as_nanos() as u64 ^ u64::from(std::process::id()) << 32).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Validity from a minute ago (clocks drift) for `lifetime`, ending at `cap` at the latest.
fn validity(
    params: &mut CertificateParams,
    lifetime: Duration,
    cap: Option<SystemTime>,
) -> SystemTime {
    let now = SystemTime::now();
    let not_after = cap.map_or(now + lifetime, |cap| cap.min(now + lifetime));
    // Whole seconds, as the certificate holds it (and reads back).
    let seconds = not_after.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
    let not_after = SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
    params.not_before = (now - BACKDATE).into();
    params.not_after = not_after.into();
    not_after
}

impl SelfSignedCa {
    /// A new CA named `common_name`, valid for `lifetime`.
    pub fn generate(common_name: &str, lifetime: Duration) -> Result<Self, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.distinguished_name.push(DnType::OrganizationalUnitName, unique_unit());
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let not_after = validity(&mut params, lifetime, None);
        let key = KeyPair::generate()?;
        let pem = params.self_signed(&key)?.pem();
        let issued_at = issued_at(&pem)?;
        Ok(Self { issuer: Issuer::new(params, key), pem, issued_at, not_after, lifetime })
    }

    /// The CA of `cert_pem` and `key_pem` (as [`pem`](Self::pem) and
    /// [`key_pem`](Self::key_pem) wrote them), renewed by `lifetime`.
    pub fn from_pem(cert_pem: &str, key_pem: &str, lifetime: Duration) -> Result<Self, CertError> {
        let key = KeyPair::from_pem(key_pem)?;
        let not_after = not_after(cert_pem)?;
        let issued_at = issued_at(cert_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)?;
        // A bundle during a CA's renewal holds the new CA first, then the old: this is the first.
        const END: &str = "-----END CERTIFICATE-----";
        let pem = match cert_pem.find(END) {
            Some(at) => format!("{}\n", &cert_pem[..at + END.len()]),
            None => cert_pem.to_owned(),
        };
        Ok(Self { issuer, pem, issued_at, not_after, lifetime })
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.pem.clone()
    }

    /// The CA's private key, PEM (kept in the Secret beside it, to issue leaves).
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// When the CA expires.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// When the CA was made (its validity's start, plus the minute it is backdated by).
    pub fn issued_at(&self) -> SystemTime {
        self.issued_at
    }

    /// Whether it signed the first certificate of `cert_pem` (the leaf names it).
    pub fn signed(&self, cert_pem: &str) -> bool {
        let subject = parsed(&self.pem, |ca| ca.subject().as_raw().to_vec());
        let issuer = parsed(cert_pem, |leaf| leaf.issuer().as_raw().to_vec());
        matches!((subject, issuer), (Ok(subject), Ok(issuer)) if subject == issuer)
    }

    /// Whether less than a third of its lifetime is left.
    pub fn is_due(&self, now: SystemTime) -> bool {
        due(self.not_after, self.lifetime, now)
    }

    /// A serving certificate for `hosts` (DNS names or IP addresses), valid for `lifetime`
    /// (cut to the CA's own expiry), with this CA as its bundle.
    pub fn issue(
        &self,
        hosts: &[String],
        lifetime: Duration,
    ) -> Result<CertificateBundle, CertError> {
        let mut params = CertificateParams::new(hosts.to_vec())?;
        if let Some(first) = hosts.first() {
            params.distinguished_name.push(DnType::CommonName, first.as_str());
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages =
            vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let not_after = validity(&mut params, lifetime, Some(self.not_after));
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertificateBundle {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            ca_pem: self.pem(),
            not_after: Some(not_after),
        })
    }
}

/// The certificate a TLS server serves, swapped while it runs. Cheap to clone; clones share
/// it.
#[derive(Clone, Default)]
pub(crate) struct Certificates {
    current: Arc<RwLock<Option<Served>>>,
}

/// rustls's key and the bundle it was made of.
type Served = (Arc<CertifiedKey>, CertificateBundle);

impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificates").field("current", &self.bundle()).finish()
    }
}

impl Certificates {
    /// Serves `bundle` from the next handshake on, or refuses it (the one served stays).
    pub fn set(&self, bundle: CertificateBundle) -> Result<(), CertError> {
        let key = certified_key(&bundle)?;
        *self.current.write() = Some((Arc::new(key), bundle));
        Ok(())
    }

    /// The bundle served now, if any.
    pub fn bundle(&self) -> Option<CertificateBundle> {
        self.current.read().as_ref().map(|(_, bundle)| bundle.clone())
    }

    /// Whether a certificate is served that has not expired.
    pub fn is_valid(&self, now: SystemTime) -> bool {
        self.current
            .read()
            .as_ref()
            .is_some_and(|(_, bundle)| bundle.not_after.is_none_or(|end| end > now))
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().as_ref().map(|(key, _)| key.clone())
    }
}

/// rustls's key of a bundle: its chain and signing key.
fn certified_key(bundle: &CertificateBundle) -> Result<CertifiedKey, CertError> {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(bundle.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|err| CertError::Pem(format!("the certificate: {err}")))?;
    if chain.is_empty() {
        return Err(CertError::Pem("no CERTIFICATE block".to_owned()));
    }
    let key = PrivateKeyDer::from_pem_slice(bundle.key_pem.as_bytes())
        .map_err(|err| CertError::Pem(format!("the private key: {err}")))?;
    let provider = rustls::crypto::ring::default_provider();
    let key = CertifiedKey::from_der(chain, key, &provider)?;
    Ok(key)
}

/// When the first certificate of `pem` was issued (its validity's start, plus the minute
/// certificates made here are backdated by).
pub(crate) fn issued_at(pem: &str) -> Result<SystemTime, CertError> {
    parsed(pem, |cert| {
        let seconds = cert.validity().not_before.timestamp();
        SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).unwrap_or_default())
    })
    .map(|start| start + BACKDATE)
}

/// The certificates of a PEM bundle, each as its own PEM block (text outside blocks dropped).
pub(crate) fn blocks(pem: &str) -> Vec<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut blocks = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find(BEGIN) {
        let Some(len) = rest[start..].find(END) else { break };
        blocks.push(format!("{}\n", &rest[start..start + len + END.len()]));
        rest = &rest[start + len + END.len()..];
    }
    blocks
}

/// The validity (`notBefore`, `notAfter`) of the first certificate of `pem` if it is a CA
/// made here: [`CA_NAME`] as its common name and a random unit (16 hex digits, as
/// [`SelfSignedCa::generate`] writes it) as its organizational unit. `None` for any other
/// certificate, or one that does not parse.
pub(crate) fn made_here(pem: &str) -> Option<(SystemTime, SystemTime)> {
    parsed(pem, |cert| {
        let subject = cert.subject();
        let text = |attribute: Option<&x509_parser::x509::AttributeTypeAndValue<'_>>| {
            attribute.and_then(|a| a.as_str().ok()).map(str::to_owned)
        };
        let name = text(subject.iter_common_name().next());
        let unit = text(subject.iter_organizational_unit().next());
        let random = |unit: &str| unit.len() == 16 && unit.bytes().all(|b| b.is_ascii_hexdigit());
        let ours = name.as_deref() == Some(CA_NAME) && unit.as_deref().is_some_and(random);
        let at = |time: x509_parser::time::ASN1Time| {
            let seconds = u64::try_from(time.timestamp()).unwrap_or_default();
            SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
        };
        let validity = cert.validity();
        ours.then(|| (at(validity.not_before), at(validity.not_after)))
    })
    .ok()
    .flatten()
}

/// When the first certificate of `pem` expires.
pub(crate) fn not_after(pem: &str) -> Result<SystemTime, CertError> {
    parsed(pem, |cert| {
        let seconds = cert.validity().not_after.timestamp();
        SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).unwrap_or_default())
    })
}

/// The DNS names and IP addresses the first certificate of `pem` is for (its subject
/// alternative names).
pub(crate) fn hosts(pem: &str) -> Result<Vec<String>, CertError> {
    use x509_parser::extensions::GeneralName;
    parsed(pem, |cert| {
        let names = cert.subject_alternative_name().ok().flatten();
        let names = names.map(|ext| ext.value.general_names.clone()).unwrap_or_default();
        names
            .iter()
            .filter_map(|name| match name {
                GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                GeneralName::IPAddress(bytes) => match <[u8; 4]>::try_from(*bytes) {
                    Ok(v4) => Some(std::net::Ipv4Addr::from(v4).to_string()),
                    Err(_) => <[u8; 16]>::try_from(*bytes)
                        .ok()
                        .map(|v6| std::net::Ipv6Addr::from(v6).to_string()),
                },
                _ => None,
            })
            .collect()
    })
}

/// `read` of the first certificate of `pem`, parsed.
fn parsed<T>(
    pem: &str,
    read: impl FnOnce(&x509_parser::certificate::X509Certificate<'_>) -> T,
) -> Result<T, CertError> {
    let der = CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .ok_or_else(|| CertError::Pem("no CERTIFICATE block".to_owned()))?
        .map_err(|err| CertError::Pem(format!("the certificate: {err}")))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|err| CertError::Pem(format!("the certificate does not parse: {err}")))?;
    Ok(read(&cert))
}

/// A certificate read from `cert` and `key` files (cert-manager's `tls.crt` and `tls.key`),
/// with `ca` (`ca.crt`) as its bundle when given.
pub(crate) fn read_files(
    cert: &std::path::Path,
    key: &std::path::Path,
    ca: Option<&std::path::Path>,
) -> Result<CertificateBundle, CertError> {
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path)
            .map_err(|source| CertError::Read { path: path.display().to_string(), source })
    };
    let cert_pem = read(cert)?;
    Ok(CertificateBundle {
        not_after: Some(not_after(&cert_pem)?),
        cert_pem,
        key_pem: read(key)?,
        ca_pem: ca.map(read).transpose()?.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaf_is_due_with_less_than_a_third_of_its_lifetime_left() {
        let now = SystemTime::UNIX_EPOCH + 1000 * DAY;
        assert!(!due(now + 40 * DAY, 90 * DAY, now));
        assert!(due(now + 20 * DAY, 90 * DAY, now));
        assert!(due(now - DAY, 90 * DAY, now), "an expired one");
    }

    #[test]
    fn an_issued_leaf_is_served_and_a_broken_one_is_refused_keeping_the_first() {
        let ca = SelfSignedCa::generate("test CA", 30 * DAY).unwrap();
        let bundle =
            ca.issue(&["127.0.0.1".to_owned(), "hooks.default.svc".to_owned()], 3 * DAY).unwrap();
        assert!(bundle.ca_pem.contains("BEGIN CERTIFICATE"));
        let certificates = Certificates::default();
        assert!(!certificates.is_valid(SystemTime::now()));
        certificates.set(bundle.clone()).unwrap();
        assert!(certificates.is_valid(SystemTime::now()));
        let other = ca.issue(&["x".to_owned()], DAY).unwrap();
        let mismatched = CertificateBundle { key_pem: other.key_pem, ..bundle.clone() };
        assert!(certificates.set(mismatched).is_err(), "a key of another certificate");
        let half = CertificateBundle { cert_pem: "-----BEGIN CERT".to_owned(), ..bundle.clone() };
        assert!(certificates.set(half).is_err());
        assert_eq!(certificates.bundle(), Some(bundle));
    }

    #[test]
    fn a_ca_written_as_pem_and_read_back_issues_leaves_its_pem_verifies() {
        let ca = SelfSignedCa::generate("kept CA", 30 * DAY).unwrap();
        let back = SelfSignedCa::from_pem(&ca.pem(), &ca.key_pem(), 30 * DAY).unwrap();
        let expiry = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(expiry(back.not_after()), expiry(ca.not_after()));
        let leaf = back.issue(&["127.0.0.1".to_owned()], DAY).unwrap();
        assert_eq!(leaf.ca_pem, ca.pem());
        let issuer = CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap();
        let leaf_der = CertificateDer::from_pem_slice(leaf.cert_pem.as_bytes()).unwrap();
        let (_, issuer) = x509_parser::parse_x509_certificate(&issuer).unwrap();
        let (_, leaf_cert) = x509_parser::parse_x509_certificate(&leaf_der).unwrap();
        assert_eq!(leaf_cert.issuer(), issuer.subject(), "signed by the CA read back");
        assert_eq!(expiry(not_after(&leaf.cert_pem).unwrap()), expiry(leaf.not_after.unwrap()));
    }

    #[test]
    fn a_leaf_does_not_outlive_its_ca() {
        let ca = SelfSignedCa::generate("short CA", DAY).unwrap();
        let leaf = ca.issue(&["a".to_owned()], 10 * DAY).unwrap();
        assert!(leaf.not_after.unwrap() <= ca.not_after());
    }
}
