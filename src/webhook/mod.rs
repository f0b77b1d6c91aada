//! Admission webhooks (feature `webhook`): typed validators and defaulters, answered from the
//! `AdmissionReview` bodies the API server sends (controller-runtime's `Validator[T]` and
//! `Defaulter[T]`, on kube-core's `admission` types).
//!
//! - A [`Validator`] looks at the object of a create, the old and new objects of an update,
//!   or the old object of a delete, and allows it (with warnings for the client) or denies it
//!   with a message, a reason and a code ([`Denial`]).
//! - A [`Defaulter`] changes the object as received (`&mut K`); the answer is the JSON patch
//!   from the object as received to the object as changed (`json_patch::diff`), so that only
//!   what it changed is sent back.
//! - An [`AdmissionHandler`] answers any request whole, for what neither covers.
//!
//! [`review`] turns one request body into the answer's status and body, whatever the body
//! holds: one that is not an `AdmissionReview` of the kind is a 400 naming the problem; one
//! larger than [`MAX_REVIEW_BYTES`] is a 413 with a `Status` in controller-runtime's words
//! (`request entity is too large; limit is 7340032 bytes`, reason `RequestEntityTooLarge`);
//! a validator, defaulter or handler that panics is a denial saying so (counted in
//! [`WebhookStats`]), never a dead server; a dry-run request reaches them with
//! `request.dry_run` set, for them to skip side effects.
//!
//! Serve it from any HTTPS server (the API server calls webhooks over TLS only): a route per
//! webhook that passes the request body to [`review`] and answers with what it returns.
//!
//! ```
//! use ctrlkit::webhook::{AdmissionRequest, Denial, Review, Validation, Validator, WebhookStats, review};
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! /// At most 100 keys in a ConfigMap.
//! struct Small;
//!
//! #[async_trait::async_trait]
//! impl Validator<ConfigMap> for Small {
//!     async fn validate_create(&self, cm: &ConfigMap, _: &AdmissionRequest<ConfigMap>) -> Validation {
//!         match cm.data.as_ref().map_or(0, |d| d.len()) {
//!             n if n > 100 => Err(Denial::invalid(format!("{n} keys: at most 100"))),
//!             _ => Ok(Vec::new()),
//!         }
//!     }
//! }
//!
//! # async fn serve(body: &[u8]) {
//! let stats = WebhookStats::default();
//! // In the HTTPS server's handler of `POST /validate-configmaps`:
//! let reply = review::<ConfigMap>(Review::Validate(&Small), body, &stats).await;
//! // Answer with `reply.status` and `reply.body` (`Content-Type: application/json`).
//! # let _ = reply;
//! # }
//! ```
//! Or serve it from ctrlkit's [`WebhookServer`]: HTTPS with certificates it makes and renews
//! itself (or reads from cert-manager's files), a [`Runnable`](crate::runnable::Runnable) of
//! the Manager that runs on every replica, with CRD conversion ([`Conversion`]) beside
//! admission.
//!
//! ## Limits and defaults of the [`WebhookServer`]
//! The server faces the cluster's network; what a client may hold is bounded (each setting
//! on [`ServingLimits`](crate::tls::ServingLimits), given to the builder):
//!
//! | | default |
//! |---|---|
//! | a request body (an `AdmissionReview` or `ConversionReview`) | [`MAX_REVIEW_BYTES`], 7 MiB, as controller-runtime's; one byte more or any more is the same 413 with a `Status` (reason `RequestEntityTooLarge`) |
//! | a value nested in what a handler decodes | serde_json's 128 levels; deeper is a 400 (kube-apiserver sends custom resources up to 10,000 levels deep, whose clones and drops in a handler could overflow a task's stack) |
//! | the TLS handshake | 10 s, then the connection is closed |
//! | a request's headers | 10 s to arrive, 64 KiB at most |
//! | a whole request, headers and body | 30 s from its first byte (Go's `ReadTimeout`), then the connection is cut |
//! | writing an answer | 30 s (Go's `WriteTimeout`): a client that does not read is cut |
//! | an idle keep-alive connection | closed after 90 s |
//! | connections served at once | 1,024; past them, the one that has sent least for longest among those still sending a request (or idle) is shed, never one whose whole request arrived; with none, more wait in the listen queue |
//! | after an accept error for want of descriptors | a pause of 10 ms doubling to 1 s (certificates still kept meanwhile), not a spinning loop; other accept errors are retried at once |
//!
//! Certificates ([`CertificateSource`](crate::tls::CertificateSource)): a self-signed CA lives
//! 10 years and a serving certificate 1 year, each renewed with a third of its lifetime left,
//! checked hourly ([`Lifetimes`](crate::tls::Lifetimes)). A renewed CA enters the bundle two
//! checks before it signs the served certificate, and the CA it replaces leaves two checks after,
//! so a client holding the bundle last injected is never refused. Replicas share them through a
//! Secret ([`SecretCertificates`](crate::tls::SecretCertificates)): every replica serves and
//! injects the Secret's bundle, and a Secret deleted or corrupted is written back with what is
//! served. Injection ([`CaInjection`], every 30 s) adds the CAs a bundle lacks, never removes
//! one ctrlkit did not make, keeps at most 3 of ctrlkit's own, any deployment's (the served
//! ones and the newest; expired ones dropped at once; [`CaInjection::keep_own_cas`], at least
//! 2 × (replicas + maxSurge) + 1 for replicas with in-memory certificates), and backs off to 5 minutes while it fails; beside
//! cert-manager's cainjector, leave it off for the objects cainjector manages.

mod admission;
mod bundle;
mod conversion;
mod inject;
mod server;

pub use admission::{
    AdmissionHandler, Defaulter, Denial, MAX_REVIEW_BYTES, Reply, Review, Validation, Validator,
    WebhookStats, review,
};
/// The `http` crate's status code, as [`Reply::status`] and [`Denial::code`] hold it.
pub use axum::http::StatusCode;
pub use conversion::{Conversion, ConversionError};
pub use inject::CaInjection;
pub use kube_core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
pub use server::{WebhookError, WebhookServer, WebhookServerBuilder};
