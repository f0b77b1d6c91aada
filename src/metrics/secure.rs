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
//!   user for 5 minutes, a denied one for 30 seconds, so a scrape every few seconds costs the
//!   API server nothing most of the time. Tokens that authenticated and tokens that did not
//!   are kept apart (at most 1024 entries each, the least recently used evicted first), so no
//!   number of unknown tokens evicts the scraper's. Tokens are kept as their SHA-256, never as
//!   they are.
//! - **Floods**: a token longer than 16 KiB is a 401 without a review; one token is reviewed
//!   once at a time (concurrent scrapes with it share the answer, and the turn is given up
//!   however the request ends: answered, failed, or dropped when its client goes). Reviews of
//!   unknown tokens are rate limited (10 a second, bursts of 40 by default,
//!   [`SecureServing::unknown_token_reviews`]): a scrape over the rate is a 429 `Too Many
//!   Requests` with `Retry-After: 1`, without a review, counted in
//!   `ctrlkit_secure_metrics_token_reviews_total` (`result="throttled"`), so an
//!   unauthenticated flood cannot turn into unbounded `TokenReview`s; at most 8 of them are
//!   in flight at once. During a flood that keeps the rate used up, a token that has not
//!   authenticated in the last 10 minutes (a restarted Prometheus's, a rotated token) is
//!   unknown too: its scrapes may be 429s until the flood ends. A token that authenticated in
//!   the last 10 minutes is known: when its cached review expires it is reviewed beside the
//!   unknown ones, never behind them (8 more in flight, shared with the access reviews of
//!   authenticated users), so a flood does not hold up the scraper. The `Bearer` scheme
//!   matches in any case (RFC 7235).
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

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::Registry;
use crate::tls::{CertificateSource, ServingLimits};

/// The most entries each cache holds; past it, the least recently used goes.
const CACHE_ENTRIES: usize = 1024;

/// How long a token that authenticated stays known: reviewed again, once its cached review
/// expires, ahead of unknown tokens and without counting against their rate.
const KNOWN_FOR: Duration = Duration::from_secs(600);

/// How the metrics endpoint is served securely; see the module docs.
#[derive(Debug, Clone)]
pub struct SecureServing {
    pub(crate) certificates: CertificateSource,
    pub(crate) limits: ServingLimits,
    pub(crate) authenticated_for: Duration,
    pub(crate) allowed_for: Duration,
    pub(crate) denied_for: Duration,
    pub(crate) unknown_per_second: u32,
    pub(crate) unknown_burst: u32,
}

impl Default for SecureServing {
    fn default() -> Self {
        Self {
            certificates: CertificateSource::self_signed(["localhost", "127.0.0.1"]),
            limits: ServingLimits::default(),
            authenticated_for: Duration::from_secs(60),
            allowed_for: Duration::from_secs(300),
            denied_for: Duration::from_secs(30),
            unknown_per_second: 10,
            unknown_burst: 40,
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

    /// How many reviews of unknown tokens (none that authenticated in the last 10 minutes)
    /// may be sent: `per_second` on average, `burst` at once (default 10 and 40). A scrape
    /// with an unknown token over the rate is a 429 (`Retry-After: 1`) without a review, and
    /// so, while a flood keeps the rate used up, is a new or rotated scraper token's. Zero
    /// `burst` sends none: only tokens already known are let in.
    #[must_use]
    pub fn unknown_token_reviews(mut self, per_second: u32, burst: u32) -> Self {
        self.unknown_per_second = per_second;
        self.unknown_burst = burst;
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

    /// Forgets `key`.
    fn remove(&mut self, key: &K) {
        self.entries.remove(key);
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

/// The most reviews in flight at once, in each lane (unknown tokens; known tokens and
/// access reviews).
const MAX_REVIEWS_IN_FLIGHT: usize = 8;

/// A token bucket: `burst` tokens, refilled at `per_second`; taking from an empty one fails
/// (the scrape is refused, not queued).
struct Bucket {
    per_second: f64,
    burst: f64,
    /// Tokens at `at`.
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(per_second: u32, burst: u32) -> Self {
        let burst = f64::from(burst);
        Self { per_second: f64::from(per_second), burst, tokens: burst, at: Instant::now() }
    }

    /// Takes a token if one is left at `now`.
    fn take(&mut self, now: Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
        let taken = self.tokens >= 1.0;
        if taken {
            self.tokens -= 1.0;
        }
        taken
    }
}

/// The outcomes of token reviews, counted by `result`.
type Reviews = Family<[(&'static str, String); 1], Counter>;

/// What lets a scrape of `/metrics` in: reviews asked of the API server, cached.
pub(crate) struct Gate {
    client: Client,
    serving: SecureServing,
    /// Tokens that authenticated: hash → user. Only the API server's yes puts one here, so
    /// unknown tokens never evict these.
    authenticated: Mutex<Lru<TokenHash, User>>,
    /// Tokens that did not authenticate.
    unauthenticated: Mutex<Lru<TokenHash, ()>>,
    /// User → allowed.
    decisions: Mutex<Lru<User, bool>>,
    /// One review of a token at a time: the others asking about it wait for its answer. An
    /// entry lives while a request holds its [`Turn`].
    reviewing: Mutex<HashMap<TokenHash, Arc<tokio::sync::Mutex<()>>>>,
    /// Reviews of unknown tokens allowed from now on.
    unknown_rate: Mutex<Bucket>,
    /// Reviews of unknown tokens in flight.
    unknown_lane: tokio::sync::Semaphore,
    /// Reviews of known tokens and access reviews in flight.
    known_lane: tokio::sync::Semaphore,
    /// `ctrlkit_secure_metrics_token_reviews_total`.
    reviews: Reviews,
}

/// A request's place in a token's review: its [`Gate::reviewing`] entry goes with the last
/// request that holds one, however the request ends (a client that disconnects drops it
/// mid-review).
struct Turn<'a> {
    gate: &'a Gate,
    key: TokenHash,
    /// The token's lock; `None` only once dropped, so that its count is given back under
    /// the map's lock (after `drop` returns would be too late for the last two to see it).
    lock: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl<'a> Turn<'a> {
    fn join(gate: &'a Gate, key: TokenHash) -> Self {
        let lock = gate.reviewing.lock().entry(key).or_default().clone();
        Self { gate, key, lock: Some(lock) }
    }

    /// Waits for the token's review to be this request's to make.
    async fn take(&self) -> tokio::sync::MutexGuard<'_, ()> {
        match &self.lock {
            Some(lock) => lock.lock().await,
            None => unreachable!("a turn's lock is taken only when it is dropped"),
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut reviewing = self.gate.reviewing.lock();
        let Some(lock) = self.lock.take() else { return };
        let ours = reviewing.get(&self.key).is_some_and(|entry| Arc::ptr_eq(entry, &lock));
        // Given back under the map's lock, which every turn takes to join and to go: the
        // count left is the map's and the other turns' still held.
        drop(lock);
        if ours && reviewing.get(&self.key).is_some_and(|entry| Arc::strong_count(entry) == 1) {
            reviewing.remove(&self.key);
        }
    }
}

/// A refusal: its status and the plain-text body.
pub(crate) type Refusal = (StatusCode, String);

impl Gate {
    /// A gate reviewing through `client`, its reviews counted in `registry` (beside those
    /// of other gates on it).
    pub(crate) fn new(client: Client, serving: SecureServing, registry: &Registry) -> Self {
        let reviews = registry.token_reviews();
        Self {
            client,
            unknown_rate: Mutex::new(Bucket::new(
                serving.unknown_per_second,
                serving.unknown_burst,
            )),
            serving,
            authenticated: Mutex::default(),
            unauthenticated: Mutex::default(),
            decisions: Mutex::default(),
            reviewing: Mutex::default(),
            unknown_lane: tokio::sync::Semaphore::new(MAX_REVIEWS_IN_FLIGHT),
            known_lane: tokio::sync::Semaphore::new(MAX_REVIEWS_IN_FLIGHT),
            reviews,
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
        let key = hash(token);
        if let Some(user) = self.cached(&key) {
            return Ok(user);
        }
        let turn = Turn::join(self, key);
        let _held = turn.take().await;
        // Another request may have reviewed it meanwhile.
        if let Some(user) = self.cached(&key) {
            return Ok(user);
        }
        let known = self.authenticated.lock().get(&key, |_| KNOWN_FOR).is_some();
        let lane = match known {
            true => &self.known_lane,
            false if self.unknown_rate.lock().take(Instant::now()) => &self.unknown_lane,
            false => {
                self.count("throttled");
                tracing::debug!(
                    "a metrics scrape with an unknown token refused over the review rate"
                );
                let message = "Too many unknown tokens to review; try again later\n".to_owned();
                return Err((StatusCode::TOO_MANY_REQUESTS, message));
            }
        };
        let reviewed = self.review_token(token, lane).await;
        match &reviewed {
            Ok(Some(user)) => {
                self.count("authenticated");
                self.authenticated.lock().insert(key, user.clone());
            }
            Ok(None) => {
                self.count("unauthenticated");
                self.authenticated.lock().remove(&key);
                self.unauthenticated.lock().insert(key, ());
            }
            Err(_) => self.count("failed"),
        }
        reviewed
    }

    /// The cached review of the token hashed `key`, if it is younger than
    /// `authenticated_for`: `Some(None)` for one that did not authenticate.
    fn cached(&self, key: &TokenHash) -> Option<Option<User>> {
        let ttl = self.serving.authenticated_for;
        if let Some(user) = self.authenticated.lock().get(key, |_| ttl) {
            return Some(Some(user));
        }
        self.unauthenticated.lock().get(key, |()| ttl).map(|()| None)
    }

    fn count(&self, result: &'static str) {
        self.reviews.get_or_create(&[("result", result.to_owned())]).inc();
    }

    async fn review_token(
        &self,
        token: &str,
        lane: &tokio::sync::Semaphore,
    ) -> Result<Option<User>, Refusal> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: token.to_owned(), audiences: None },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let _permit = lane.acquire().await.expect("the semaphore is never closed");
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
        // Only authenticated users get here: the known lane, never behind unknown tokens.
        let _permit = self.known_lane.acquire().await.expect("the semaphore is never closed");
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
        let gate = Arc::new(Gate::new(client, SecureServing::new(), &Registry::default()));
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
        for _ in 0..10_000 {
            if received.load(SeqCst) >= 8 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(received.load(SeqCst), 8, "the reviews were never all sent");
        assert_eq!(gate.reviewing.lock().len(), 8);
        for request in requests {
            request.abort();
            assert!(request.await.is_err_and(|err| err.is_cancelled()));
        }
        assert_eq!(gate.reviewing.lock().len(), 0, "reviews left behind by dropped requests");
    }

    /// Two requests for one token that go together (their clients disconnect at once), on
    /// threads of their own, leave nothing behind: whichever goes last removes the entry.
    #[test]
    fn pairs_of_requests_for_one_token_dropped_together_leave_no_review_behind() {
        const ROUNDS: usize = 1_000;
        const TOKENS: usize = 64;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let client = unanswered(Arc::new(AtomicUsize::new(0)));
            let serving = SecureServing::new().unknown_token_reviews(u32::MAX, u32::MAX);
            let gate = Arc::new(Gate::new(client, serving, &Registry::default()));
            for round in 0..ROUNDS {
                let requests: Vec<_> = (0..TOKENS)
                    .flat_map(|i| {
                        let token = format!("round-{round}-token-{i}");
                        [token.clone(), token]
                    })
                    .map(|token| {
                        let gate = gate.clone();
                        tokio::spawn(async move { gate.admit(&bearer(&token)).await })
                    })
                    .collect();
                // Both requests of every pair hold their turn: the map's Arc and theirs.
                let joined = || {
                    let reviewing = gate.reviewing.lock();
                    reviewing.len() == TOKENS
                        && reviewing.values().all(|lock| Arc::strong_count(lock) == 3)
                };
                for _ in 0..1_000_000 {
                    if joined() {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                assert!(joined(), "round {round}: the requests never all joined");
                for request in &requests {
                    request.abort();
                }
                for request in requests {
                    assert!(request.await.is_err_and(|err| err.is_cancelled()));
                }
                let left = gate.reviewing.lock().len();
                assert_eq!(left, 0, "round {round}: reviews left behind by pairs dropped together");
            }
        });
    }
}
