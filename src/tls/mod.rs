//! HTTPS serving with timeouts and limits, and certificates that manage themselves: what the
//! webhook server (feature `webhook`) and the secure metrics endpoint (feature
//! `secure-metrics`) share, so that neither needs the other.
//!
//! - [`CertificateSource`]: where a server's certificate comes from: made and renewed in
//!   memory ([`SelfSignedCa`], [`Lifetimes`]), shared by replicas through a Secret
//!   ([`SecretCertificates`]), read from files (cert-manager's), or given
//!   ([`CertificateBundle`]). A renewed or re-read certificate is served from the next
//!   handshake; a bad one is refused and the old one stays served.
//! - [`ServingLimits`]: what a client may hold of a server that faces the network (handshake
//!   and header timeouts, idle connections, connections at once, a pause after an accept
//!   error).
//! - [`ServingError`]: why a server could not start (its address, its certificate).

// Some parts serve the webhook server only, others the metrics endpoint only: with one of the
// two features off, its parts here go unused.
#![cfg_attr(
    not(all(feature = "webhook", feature = "secure-metrics")),
    allow(dead_code, unused_imports)
)]

mod certs;
mod connections;
pub(crate) mod https;
mod limits;
mod rotation;
mod secret;

#[cfg(test)]
pub(crate) use certs::CA_NAME;
pub use certs::{CertError, CertificateBundle, Lifetimes, SelfSignedCa};
pub(crate) use certs::{Certificates, blocks, made_here};
pub use https::{CertificateSource, ServingError};
pub use limits::ServingLimits;
pub(crate) use rotation::MIN_PERIOD;
pub use secret::SecretCertificates;
