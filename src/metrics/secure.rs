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
//!   user for 5 minutes, a denied one for 30 seconds (at most 1024 entries each, the least
//!   recently used evicted first, so a flood of unknown tokens does not evict the scraper), so
//!   a scrape every few seconds costs the API server nothing most of the time. Tokens are
//!   kept as their SHA-256, never as they are.
//! - **Floods**: a token longer than 16 KiB is a 401 without a review; one token is reviewed
//!   once at a time (concurrent scrapes with it share the answer), and at most 8 reviews are in
//!   flight at once. The `Bearer` scheme matches in any case (RFC 7235).
//! - **Scoped tokens**: the `SubjectAccessReview` carries the user's `extra` (its scopes, for
//!   authorizers that read them), and the decision cache keys on it too.
//! - **HTTPS limits** ([`ServingLimits`]): handshake and headers within 10 s, idle connections
//!   closed after 90 s, 1,024 connections at once; see [`SecureServing::limits`].
//! - **`/healthz` and `/readyz`** stay open: the kubelet probes them without a token.
//!
//! The manager's service account needs `create` on `tokenreviews.authentication.k8s.io` and
//! `subjectaccessreviews.authorization.k8s.io` (kubebuilder's `metrics-auth-role`); the scraper's
//! needs `get` on the non-resource URL `/metrics` (`metrics-reader`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
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

use crate::tls::{CertificateSource, ServingLimits};

/// The most entries each cache holds; past it, the least recently used goes.
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
    /// The authenticator's extra attributes (a scoped token's scopes, say): sent in the
    /// `SubjectAccessReview`, since authorizers may read them.
    extra: BTreeMap<String, Vec<String>>,
}

/// The SHA-256 of a token: what the cache keys on, never the token itself.
type TokenHash = [u8; 32];

fn hash(token: &str) -> TokenHash {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    digest.as_ref().try_into().expect("SHA-256 is 32 bytes")
}

/// A cache of at most [`CACHE_ENTRIES`] entries, each with when it was learned; past that,
/// the least recently used goes.
struct Lru<K, V> {
    entries: HashMap<K, (V, Instant, u64)>,
    uses: u64,
}

impl<K, V> Default for Lru<K, V> {
    fn default() -> Self {
        Self { entries: HashMap::new(), uses: 0 }
    }
}

impl<K: std::hash::Hash + Eq + Clone, V: Clone> Lru<K, V> {
    /// The entry for `key` if it is younger than `ttl` says for its value (marked used).
    fn get(&mut self, key: &K, ttl: impl Fn(&V) -> Duration) -> Option<V> {
        self.uses += 1;
        let uses = self.uses;
        let (value, at, used) = self.entries.get_mut(key)?;
        if at.elapsed() >= ttl(value) {
            return None;
        }
        *used = uses;
        Some(value.clone())
    }

    /// Remembers `value` for `key` from now, evicting the least recently used when full.
    fn insert(&mut self, key: K, value: V) {
        self.uses += 1;
        if self.entries.len() >= CACHE_ENTRIES && !self.entries.contains_key(&key) {
            let oldest = self.entries.iter().min_by_key(|(_, (_, _, used))| *used);
            if let Some(oldest) = oldest.map(|(k, _)| k.clone()) {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, (value, Instant::now(), self.uses));
    }
}

/// The longest bearer token reviewed; a longer one is refused as it is (401), so that
/// headers of hundreds of kilobytes cost no review and no memory.
const MAX_TOKEN_BYTES: usize = 16 << 10;

/// The most reviews (token and access) in flight at once.
const MAX_REVIEWS_IN_FLIGHT: usize = 8;

/// What lets a scrape of `/metrics` in: reviews asked of the API server, cached.
pub(crate) struct Gate {
    client: Client,
    serving: SecureServing,
    /// A token's hash → its user (`None`: not authenticated).
    tokens: Mutex<Lru<TokenHash, Option<User>>>,
    /// User → allowed.
    decisions: Mutex<Lru<User, bool>>,
    /// One review of a token at a time: the others asking about it wait for its answer.
    reviewing: Mutex<HashMap<TokenHash, Arc<tokio::sync::Mutex<()>>>>,
    /// Reviews in flight.
    in_flight: tokio::sync::Semaphore,
}

/// A refusal: its status and the plain-text body.
pub(crate) type Refusal = (StatusCode, String);

impl Gate {
    pub(crate) fn new(client: Client, serving: SecureServing) -> Self {
        Self {
            client,
            serving,
            tokens: Mutex::default(),
            decisions: Mutex::default(),
            reviewing: Mutex::default(),
            in_flight: tokio::sync::Semaphore::new(MAX_REVIEWS_IN_FLIGHT),
        }
    }

    /// Lets the request with `headers` in, or says why not.
    pub(crate) async fn admit(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let unauthorized = || (StatusCode::UNAUTHORIZED, "Unauthorized\n".to_owned());
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().split_once(' '))
            // The scheme is case-insensitive (RFC 7235).
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|t| !t.is_empty() && t.len() <= MAX_TOKEN_BYTES)
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

    /// The token's user (`None`: not authenticated), from the cache or a `TokenReview`,
    /// one at a time per token.
    async fn authenticate(&self, token: &str) -> Result<Option<User>, Refusal> {
        let ttl = self.serving.authenticated_for;
        let key = hash(token);
        if let Some(user) = self.tokens.lock().get(&key, |_| ttl) {
            return Ok(user);
        }
        let turn = self.reviewing.lock().entry(key).or_default().clone();
        let reviewed = {
            let _turn = turn.lock().await;
            // Another request may have reviewed it meanwhile.
            let cached = self.tokens.lock().get(&key, |_| ttl);
            match cached {
                Some(user) => Ok(user),
                None => self.review_token(token).await.inspect(|user| {
                    self.tokens.lock().insert(key, user.clone());
                }),
            }
        };
        let mut reviewing = self.reviewing.lock();
        // The map entry and this clone: nobody else waits for this token.
        if Arc::strong_count(&turn) <= 2 {
            reviewing.remove(&key);
        }
        reviewed
    }

    async fn review_token(&self, token: &str) -> Result<Option<User>, Refusal> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: token.to_owned(), audiences: None },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let _permit = self.in_flight.acquire().await.expect("the semaphore is never closed");
        let answer = api.create(&PostParams::default(), &review).await.map_err(|err| {
            tracing::error!(%err, "a TokenReview of a metrics scrape failed");
            (StatusCode::UNAUTHORIZED, "Authentication failed\n".to_owned())
        })?;
        let status = answer.status.unwrap_or_default();
        Ok(match (status.authenticated, status.user) {
            (Some(true), Some(info)) => Some(User {
                name: info.username.unwrap_or_default(),
                uid: info.uid,
                groups: info.groups.unwrap_or_default(),
                extra: info.extra.unwrap_or_default(),
            }),
            _ => None,
        })
    }

    /// Whether `user` may `get /metrics`, from the cache or a `SubjectAccessReview`.
    async fn authorize(&self, user: &User) -> Result<bool, Refusal> {
        let (allowed_for, denied_for) = (self.serving.allowed_for, self.serving.denied_for);
        let ttl = |allowed: &bool| if *allowed { allowed_for } else { denied_for };
        if let Some(allowed) = self.decisions.lock().get(user, ttl) {
            return Ok(allowed);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".to_owned()),
                    verb: Some("get".to_owned()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let _permit = self.in_flight.acquire().await.expect("the semaphore is never closed");
        let answer = api.create(&PostParams::default(), &review).await.map_err(|err| {
            tracing::error!(%err, user = %user.name, "a SubjectAccessReview of a metrics scrape failed");
            let message = format!("Authorization for user {} failed\n", user.name);
            (StatusCode::INTERNAL_SERVER_ERROR, message)
        })?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        self.decisions.lock().insert(user.clone(), allowed);
        Ok(allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// A client of an API server whose token reviews are received (counted in `received`)
    /// and never answered.
    fn unanswered(received: Arc<AtomicUsize>) -> Client {
        let service = tower::service_fn(move |_: http::Request<kube_client::client::Body>| {
            received.fetch_add(1, SeqCst);
            std::future::pending::<Result<http::Response<kube_client::client::Body>, std::io::Error>>(
            )
        });
        Client::new(service, "default")
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let value = format!("Bearer {token}").parse().expect("a header value");
        headers.insert(header::AUTHORIZATION, value);
        headers
    }

    /// Requests that go while their token is under review (their client disconnected, so the
    /// server dropped them), alone or several waiting for one token, leave nothing behind.
    #[tokio::test]
    async fn requests_dropped_mid_review_leave_no_review_behind() {
        let received = Arc::new(AtomicUsize::new(0));
        let client = unanswered(received.clone());
        let gate = Arc::new(Gate::new(client, SecureServing::new()));
        // Six unique tokens, and three requests each for two more: eight reviews, as many as
        // may be in flight at once.
        let tokens = (0..6).map(|i| format!("unique-{i}"));
        let shared = ["shared-a", "shared-b"].iter().flat_map(|t| [*t; 3]).map(str::to_owned);
        let requests: Vec<_> = tokens
            .chain(shared)
            .map(|token| {
                let gate = gate.clone();
                tokio::spawn(async move { gate.admit(&bearer(&token)).await })
            })
            .collect();
        // Every token under review: one review each (the shared tokens' others wait).
        while received.load(SeqCst) < 8 {
            tokio::task::yield_now().await;
        }
        assert_eq!(gate.reviewing.lock().len(), 8);
        for request in requests {
            request.abort();
            assert!(request.await.is_err_and(|err| err.is_cancelled()));
        }
        assert_eq!(gate.reviewing.lock().len(), 0, "reviews left behind by dropped requests");
    }
}
