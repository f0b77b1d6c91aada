//! [`WebhookServer`]: the HTTPS server of an operator's admission and conversion webhooks
//! (controller-runtime's `webhook.Server`), a [`Runnable`] of the Manager.
//!
//! Contract:
//! - **HTTPS only**, TLS 1.2 and 1.3 on rustls, HTTP/1.1 (what the API server speaks to
//!   webhooks). A `POST` to a registered path is answered by its validator, defaulter,
//!   handler or conversion; any other path is a 404, any other method a 405.
//! - **Every replica serves**: it does not need leader election (the API server calls any
//!   replica behind the Service).
//! - **Served before the caches** ([`Phase::Server`]): a Manager starts it before its
//!   informers, so a list that needs its conversion syncs, and it serves whatever the caches
//!   do.
//! - **Ready once serving with a valid certificate**: [`WebhookServer::is_ready`], and the
//!   Manager's `/readyz` check named after the server (`/readyz/<name>` asks it alone: point
//!   the webhook's readiness probe there).
//! - **Certificates** ([`CertificateSource`]): made here (a self-signed CA and a leaf for the
//!   given hosts, renewed before they expire), read from files and read again when they change,
//!   or given. A new certificate is served from the next connection on.
//! - **Stops** on the Manager's stop: no new connections; requests in flight finish.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use axum::body::Bytes;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube_client::Client;
use kube_client::core::Resource;
use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::admission::{bad_request, refuse_too_large};
use super::inject::CaInjection;
use super::{
    AdmissionHandler, Conversion, Defaulter, MAX_REVIEW_BYTES, Reply, Review, Validator,
    WebhookStats, review,
};
use crate::runnable::{Phase, Runnable, RunnableError, Stop};
use crate::tls::https::Https;
use crate::tls::{CertificateBundle, CertificateSource, Certificates, ServingLimits};
use axum::extract::DefaultBodyLimit;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody};

/// Builds a [`WebhookServer`].
pub struct WebhookServerBuilder {
    address: SocketAddr,
    limits: ServingLimits,
    name: String,
    router: axum::Router,
    source: Option<CertificateSource>,
    stats: Arc<WebhookStats>,
    injection: Option<(Client, CaInjection)>,
}

/// The HTTPS server of admission and conversion webhooks; see the module docs. Cheap to
/// clone: clones share the server.
#[derive(Clone)]
pub struct WebhookServer {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    address: SocketAddr,
    limits: ServingLimits,
    router: axum::Router,
    source: CertificateSource,
    certificates: Certificates,
    stats: Arc<WebhookStats>,
    injection: Option<(Client, CaInjection)>,
    bound: Mutex<Option<SocketAddr>>,
    serving: tokio::sync::watch::Sender<bool>,
}

/// An HTTP answer of a [`Reply`].
fn answer(reply: Reply) -> Response {
    let status = reply.status;
    (status, [(header::CONTENT_TYPE, "application/json")], reply.body).into_response()
}

impl WebhookServerBuilder {
    fn route<F, Fut>(mut self, path: &str, answer_with: F) -> Self
    where
        F: Fn(Bytes) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Reply> + Send + 'static,
    {
        let stats = self.stats.clone();
        let handler = move |body: Result<Bytes, BytesRejection>| {
            let (answer_with, stats) = (answer_with.clone(), stats.clone());
            async move {
                match body {
                    Ok(body) => answer(answer_with(body).await),
                    // Past the limit, the answer is the one `review` gives a body too large.
                    Err(BytesRejection::FailedToBufferBody(
                        FailedToBufferBody::LengthLimitError(_),
                    )) => answer(refuse_too_large(&stats)),
                    Err(err) => {
                        tracing::debug!(%err, "reading a webhook request's body failed");
                        answer(bad_request(&format!("reading the request body failed: {err}")))
                    }
                }
            }
        };
        self.router = self.router.route(path, post(handler));
        self
    }

    /// Serves `validator` at `path` (a ValidatingWebhookConfiguration's `clientConfig` path).
    pub fn validator<K, V>(self, path: &str, validator: V) -> Self
    where
        K: Resource + DeserializeOwned + Serialize + Clone + Send + Sync + 'static,
        V: Validator<K> + 'static,
    {
        let validator = Arc::new(validator);
        let stats = self.stats.clone();
        self.route(path, move |body| {
            let (validator, stats) = (validator.clone(), stats.clone());
            async move { review::<K>(Review::Validate(&*validator), &body, &stats).await }
        })
    }

    /// Serves `defaulter` at `path` (a MutatingWebhookConfiguration's).
    pub fn defaulter<K, D>(self, path: &str, defaulter: D) -> Self
    where
        K: Resource + DeserializeOwned + Serialize + Clone + Send + Sync + 'static,
        D: Defaulter<K> + 'static,
    {
        let defaulter = Arc::new(defaulter);
        let stats = self.stats.clone();
        self.route(path, move |body| {
            let (defaulter, stats) = (defaulter.clone(), stats.clone());
            async move { review::<K>(Review::Default(&*defaulter), &body, &stats).await }
        })
    }

    /// Serves a raw admission `handler` at `path`.
    pub fn handler(self, path: &str, handler: impl AdmissionHandler + 'static) -> Self {
        let handler = Arc::new(handler);
        let stats = self.stats.clone();
        self.route(path, move |body| {
            let (handler, stats) = (handler.clone(), stats.clone());
            async move {
                // A raw handler reads the request as a `DynamicObject`: the review's type
                // parameter is not used, and any kind fills it.
                let what = Review::<k8s_openapi::api::core::v1::ConfigMap>::Handle(&*handler);
                review(what, &body, &stats).await
            }
        })
    }

    /// Serves a CRD's `conversion` at `path` (its `spec.conversion.webhook.clientConfig`).
    pub fn conversion<H: Send + Sync + 'static>(
        self,
        path: &str,
        conversion: Conversion<H>,
    ) -> Self {
        self.route(path, move |body| {
            let conversion = conversion.clone();
            async move { conversion.review(&body) }
        })
    }

    /// Listens on `address` (default `0.0.0.0:9443`, controller-runtime's port; port 0 picks
    /// a free one, see [`WebhookServer::local_addr`]).
    pub fn address(mut self, address: SocketAddr) -> Self {
        self.address = address;
        self
    }

    /// The server's timeouts and connection cap (default [`ServingLimits::default`]:
    /// handshake and headers 10 s, whole request and answer 30 s, idle 90 s, 1,024
    /// connections).
    pub fn limits(mut self, limits: ServingLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Where the certificate comes from (default: self-signed for `localhost` and
    /// `127.0.0.1`, which only a local API server reaches).
    pub fn certificates(mut self, source: impl Into<CertificateSource>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Writes the served certificate's CA bundle into the webhook configurations and CRDs
    /// `injection` names, through `client`, at start and at every pass (so a renewed bundle
    /// arrives within one, and one someone overwrote is put back); see [`CaInjection`].
    pub fn inject_ca_bundle(mut self, client: Client, injection: CaInjection) -> Self {
        self.injection = Some((client, injection));
        self
    }

    /// Names the server in logs and in `/readyz` (default `webhook-server`).
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// The server.
    pub fn build(self) -> WebhookServer {
        let source = self
            .source
            .unwrap_or_else(|| CertificateSource::self_signed(["localhost", "127.0.0.1"]));
        WebhookServer {
            inner: Arc::new(Inner {
                name: self.name,
                address: self.address,
                limits: self.limits,
                // A review holds the object and, for an update, the old one: up to the
                // webhook's own limit (axum's default is 2 MiB); past it, the handler answers
                // the 413 `Status` that `review` gives.
                router: self.router.layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES)),
                source,
                certificates: Certificates::default(),
                stats: self.stats,
                injection: self.injection,
                bound: Mutex::new(None),
                serving: tokio::sync::watch::Sender::new(false),
            }),
        }
    }
}

impl WebhookServer {
    /// A builder with no webhook yet.
    pub fn builder() -> WebhookServerBuilder {
        WebhookServerBuilder {
            address: SocketAddr::from(([0, 0, 0, 0], 9443)),
            limits: ServingLimits::default(),
            name: "webhook-server".to_owned(),
            router: axum::Router::new(),
            source: None,
            stats: Arc::default(),
            injection: None,
        }
    }

    /// The address it listens on, once it does.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        *self.inner.bound.lock()
    }

    /// Waits until it serves (listening, with a certificate) and returns its address.
    pub async fn serving(&self) -> SocketAddr {
        let mut serving = self.inner.serving.subscribe();
        let _ = serving.wait_for(|serving| *serving).await;
        self.local_addr().expect("an address once serving")
    }

    /// The certificate served now (its `ca_pem` is the `caBundle` for webhook
    /// configurations), once there is one.
    pub fn certificate(&self) -> Option<CertificateBundle> {
        self.inner.certificates.bundle()
    }

    /// Whether it serves with a certificate that has not expired.
    pub fn is_ready(&self) -> bool {
        *self.inner.serving.borrow() && self.inner.certificates.is_valid(SystemTime::now())
    }

    /// What its webhooks answered.
    pub fn stats(&self) -> &WebhookStats {
        &self.inner.stats
    }

    /// Serves until `stop` completes; the [`Runnable`]'s `start`.
    pub async fn run(&self, stop: impl Future<Output = ()>) -> Result<(), WebhookError> {
        let inner = &self.inner;
        let https = Https::bind(inner.address, &inner.source, &inner.certificates).await?;
        let address = https.local_addr();
        *inner.bound.lock() = Some(address);
        inner.serving.send_replace(true);
        tracing::info!(%address, name = %inner.name, "serving webhooks");
        https.serve(inner.router.clone(), inner.limits, stop, self.inject()).await;
        inner.serving.send_replace(false);
        Ok(())
    }
}

impl WebhookServer {
    /// Injects the CA bundle at every pass, for ever (pending without an injection), backing
    /// off after passes that failed.
    async fn inject(&self) {
        let Some((client, injection)) = &self.inner.injection else {
            return std::future::pending().await;
        };
        let mut failures = 0;
        loop {
            if let Some(bundle) = self.inner.certificates.bundle().filter(|b| !b.ca_pem.is_empty())
            {
                let pass = injection.pass(client, &bundle.ca_pem).await;
                failures = if pass.failed > 0 { failures + 1 } else { 0 };
            }
            tokio::time::sleep(injection.delay_after(failures)).await;
        }
    }
}

/// The webhook server's error: its HTTPS server's ([`ServingError`](crate::tls::ServingError)).
pub type WebhookError = crate::tls::ServingError;

#[async_trait]
impl Runnable for WebhookServer {
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        self.run(stop.into_future()).await.map_err(Into::into)
    }

    /// A server: started before the caches, whose lists may need its conversion.
    fn phase(&self) -> Phase {
        Phase::Server
    }

    fn needs_leader_election(&self) -> bool {
        false
    }

    fn ready_check(&self) -> Option<crate::runnable::ReadyCheck> {
        let server = self.clone();
        Some(Arc::new(move || server.is_ready()))
    }
}
