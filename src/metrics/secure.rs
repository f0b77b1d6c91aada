//! [`SecureServing`]: the metrics endpoint over HTTPS, each scrape of `/metrics` let in only
//! for a bearer token that the API server authenticates and whose user it authorizes for
//! `get` on the non-resource URL `/metrics` (controller-runtime's `secureServing` with
//! `filters.WithAuthenticationAndAuthorization`).
//!
//! Contract:
//! - **HTTPS** with the webhook server's certificate machinery ([`CertificateSource`]): by
//!   default a self-signed certificate for `localhost` and `127.0.0.1` made at start and
//!   renewed before it expires (Prometheus scrapes it with `insecure_skip_verify`, or trusts
//!   a CA of yours: files from cert-manager, a Secret).
//! - **`/metrics`**: no `Authorization: Bearer` token is a 401 `Unauthorized`; a token that a
//!   `TokenReview` does not authenticate is a 401 too; an authenticated user whose
//!   `SubjectAccessReview` for `get /metrics` is not allowed is a 403 `Authorization denied
//!   for user NAME`; a review that fails (the API server unreachable, the manager's own
//!   account not allowed to create reviews) is a 401 `Authentication failed` or a 500
//!   `Authorization for user NAME failed`, logged, and never cached.
//! - **Cached**, as controller-runtime caches them: a token's review for 1 minute, an allowed
//!   user for 5 minutes, a denied one for 30 seconds (at most 1024 entries each), so a scrape
//!   every few seconds costs the API server nothing most of the time.
//! - **`/healthz` and `/readyz`** stay open: the kubelet probes them without a token.
//!
//! The manager's service account needs `create` on `tokenreviews.authentication.k8s.io` and
//! `subjectaccessreviews.authorization.k8s.io` (kubebuilder's `metrics-auth-role`); the scraper's
//! needs `get` on the non-resource URL `/metrics` (`metrics-reader`).

use std::collections::HashMap;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube_client::api::PostParams;
use kube_client::{Api, Client};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::webhook::{CertificateSource, ServingLimits};

/// The most entries each cache holds; past it, expired entries go, then all of them.
const CACHE_ENTRIES: usize = 1024;

/// How the metrics endpoint is served securely; see the module docs.
#[derive(Debug, Clone)]
pub struct SecureServing {
    pub(crate) certificates: CertificateSource,
    pub(crate) limits: ServingLimits,
    pub(crate) authenticated_for: Duration,
    pub(crate) allowed_for: Duration,
    pub(crate) denied_for: Duration,
}

impl Default for SecureServing {
    fn default() -> Self {
        Self {
            certificates: CertificateSource::self_signed(["localhost", "127.0.0.1"]),
            limits: ServingLimits::default(),
            authenticated_for: Duration::from_secs(60),
            allowed_for: Duration::from_secs(300),
            denied_for: Duration::from_secs(30),
        }
    }
}

impl SecureServing {
    /// A self-signed certificate for `localhost` and `127.0.0.1`, controller-runtime's cache
    /// times.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves the certificate of `source` instead (files, a Secret, a bundle, or self-signed
    /// for other hosts).
    #[must_use]
    pub fn certificates(mut self, source: impl Into<CertificateSource>) -> Self {
        self.certificates = source.into();
        self
    }

    /// The HTTPS server's timeouts and connection cap (default [`ServingLimits::default`]:
    /// handshake and headers 10 s, idle 90 s, 1,024 connections).
    #[must_use]
    pub fn limits(mut self, limits: ServingLimits) -> Self {
        self.limits = limits;
        self
    }

    /// How long a token's review, an allowed user and a denied user are remembered (default
    /// 1 minute, 5 minutes, 30 seconds; zero asks the API server at every scrape).
    #[must_use]
    pub fn cache_for(
        mut self,
        authenticated: Duration,
        allowed: Duration,
        denied: Duration,
    ) -> Self {
        self.authenticated_for = authenticated;
        self.allowed_for = allowed;
        self.denied_for = denied;
        self
    }
}

/// Who a token belongs to, as its `TokenReview` says.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct User {
    name: String,
    uid: Option<String>,
    groups: Vec<String>,
}

/// What lets a scrape of `/metrics` in: reviews asked of the API server, cached.
pub(crate) struct Gate {
    client: Client,
    serving: SecureServing,
    /// Token → its user (`None`: not authenticated), and when that was learned.
    tokens: Mutex<HashMap<String, (Option<User>, Instant)>>,
    /// User → allowed, and when that was learned.
    decisions: Mutex<HashMap<User, (bool, Instant)>>,
}

/// A refusal: its status and the plain-text body.
pub(crate) type Refusal = (StatusCode, String);

impl Gate {
    pub(crate) fn new(client: Client, serving: SecureServing) -> Self {
        Self { client, serving, tokens: Mutex::default(), decisions: Mutex::default() }
    }

    /// Lets the request with `headers` in, or says why not.
    pub(crate) async fn admit(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let unauthorized = || (StatusCode::UNAUTHORIZED, "Unauthorized\n".to_owned());
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(unauthorized)?;
        let user = self.authenticate(token).await?.ok_or_else(unauthorized)?;
        match self.authorize(&user).await? {
            true => Ok(()),
            false => Err((
                StatusCode::FORBIDDEN,
                format!("Authorization denied for user {}\n", user.name),
            )),
        }
    }

    /// The token's user (`None`: not authenticated), from the cache or a `TokenReview`.
    async fn authenticate(&self, token: &str) -> Result<Option<User>, Refusal> {
        let ttl = self.serving.authenticated_for;
        if let Some(user) = cached(&self.tokens, token, |_| ttl) {
            return Ok(user);
        }
        let review = TokenReview {
            spec: TokenReviewSpec { token: token.to_owned(), audiences: None },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = api.create(&PostParams::default(), &review).await.map_err(|err| {
            tracing::error!(%err, "a TokenReview of a metrics scrape failed");
            (StatusCode::UNAUTHORIZED, "Authentication failed\n".to_owned())
        })?;
        let status = answer.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(info)) => Some(User {
                name: info.username.unwrap_or_default(),
                uid: info.uid,
                groups: info.groups.unwrap_or_default(),
            }),
            _ => None,
        };
        remember(&self.tokens, token.to_owned(), user.clone());
        Ok(user)
    }

    /// Whether `user` may `get /metrics`, from the cache or a `SubjectAccessReview`.
    async fn authorize(&self, user: &User) -> Result<bool, Refusal> {
        let (allowed_for, denied_for) = (self.serving.allowed_for, self.serving.denied_for);
        let ttl = |allowed: &bool| if *allowed { allowed_for } else { denied_for };
        if let Some(allowed) = cached(&self.decisions, user, ttl) {
            return Ok(allowed);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".to_owned()),
                    verb: Some("get".to_owned()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api.create(&PostParams::default(), &review).await.map_err(|err| {
            tracing::error!(%err, user = %user.name, "a SubjectAccessReview of a metrics scrape failed");
            let message = format!("Authorization for user {} failed\n", user.name);
            (StatusCode::INTERNAL_SERVER_ERROR, message)
        })?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        remember(&self.decisions, user.clone(), allowed);
        Ok(allowed)
    }
}

/// The entry for `key` if it is younger than `ttl` says for its value.
fn cached<K, Q, V>(
    cache: &Mutex<HashMap<K, (V, Instant)>>,
    key: &Q,
    ttl: impl Fn(&V) -> Duration,
) -> Option<V>
where
    K: std::borrow::Borrow<Q> + std::hash::Hash + Eq,
    Q: std::hash::Hash + Eq + ?Sized,
    V: Clone,
{
    let cache = cache.lock();
    let (value, at) = cache.get(key)?;
    (at.elapsed() < ttl(value)).then(|| value.clone())
}

/// Remembers `value` for `key` from now; a full cache first drops what is older than a
/// minute, then everything (never unbounded, whatever tokens are sent).
fn remember<K: std::hash::Hash + Eq, V>(cache: &Mutex<HashMap<K, (V, Instant)>>, key: K, value: V) {
    let mut cache = cache.lock();
    if cache.len() >= CACHE_ENTRIES {
        cache.retain(|_, (_, at)| at.elapsed() < Duration::from_secs(60));
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
    }
    cache.insert(key, (value, Instant::now()));
}
