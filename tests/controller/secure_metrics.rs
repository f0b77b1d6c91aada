//! The Manager's metrics endpoint served securely, when the API server cannot review a token
//! (the e2e case `secure_metrics` checks 401, 403 and 200 under RBAC on every server).

use std::time::Duration;

use ctrlkit::manager::Manager;
use ctrlkit::metrics::SecureServing;
use ctrlkit::tls::{CertificateSource, SelfSignedCa};

use crate::support::http::{free_address, get, get_https};

#[tokio::test]
async fn a_secure_endpoint_refuses_scrapes_it_cannot_review_and_keeps_probes_open() {
    // A server without TokenReviews: every review fails.
    let api = ctrlkit_apiserver::ApiServer::builder()
        .without_resource("authentication.k8s.io", "v1", "tokenreviews")
        .start()
        .await
        .unwrap();
    let Endpoint { stop, running, address, ca_pem } = secure_endpoint(api.client()).await;

    assert_eq!(get_https(address, &ca_pem, "/healthz", None).await, (200, "ok".to_owned()));
    let (code, body) = get_https(address, &ca_pem, "/metrics", None).await;
    assert_eq!((code, body.trim()), (401, "Unauthorized"), "no token");
    // The review fails, and the scrape with it.
    let (code, body) = get_https(address, &ca_pem, "/metrics", Some("some-token")).await;
    assert_eq!((code, body.trim()), (401, "Authentication failed"));
    // Plain HTTP is not served.
    assert_eq!(get(address, "/metrics").await, None, "plain HTTP answered");

    let _ = stop.send(());
    running.await.unwrap().unwrap();
}

/// An API server that answers only reviews: a `TokenReview` authenticates the token `good`
/// (a user with a scope in `extra`) after `delay` (50 ms unless [`taking`](Self::taking)
/// says otherwise) and no other; a `SubjectAccessReview` allows `get /metrics` only to a user
/// whose `extra` holds that scope (as an authorizer that honours scoped tokens does). It
/// counts the reviews by token, the most in flight at once, and keeps the access reviews
/// asked.
struct Reviews {
    delay: Duration,
    by_token: std::sync::Mutex<std::collections::HashMap<String, usize>>,
    in_flight: std::sync::atomic::AtomicUsize,
    most_in_flight: std::sync::atomic::AtomicUsize,
    access: std::sync::Mutex<Vec<serde_json::Value>>,
}

impl Default for Reviews {
    fn default() -> Self {
        Self::taking(Duration::from_millis(50))
    }
}

impl Reviews {
    /// Token reviews that each take `delay`.
    fn taking(delay: Duration) -> Self {
        Self {
            delay,
            by_token: std::sync::Mutex::default(),
            in_flight: std::sync::atomic::AtomicUsize::default(),
            most_in_flight: std::sync::atomic::AtomicUsize::default(),
            access: std::sync::Mutex::default(),
        }
    }

    fn client(self: &std::sync::Arc<Self>) -> kube_client::Client {
        use http_body_util::BodyExt;
        use std::sync::atomic::Ordering::SeqCst;
        let reviews = self.clone();
        let service =
            tower::service_fn(move |request: http::Request<kube_client::client::Body>| {
                let reviews = reviews.clone();
                async move {
                    let path = request.uri().path().to_owned();
                    let body = request.into_body().collect().await.unwrap().to_bytes();
                    let mut review: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    if path.ends_with("/tokenreviews") {
                        let token = review["spec"]["token"].as_str().unwrap_or_default().to_owned();
                        *reviews.by_token.lock().unwrap().entry(token.clone()).or_default() += 1;
                        let now = reviews.in_flight.fetch_add(1, SeqCst) + 1;
                        reviews.most_in_flight.fetch_max(now, SeqCst);
                        tokio::time::sleep(reviews.delay).await;
                        reviews.in_flight.fetch_sub(1, SeqCst);
                        review["status"] = match token.as_str() {
                            "good" => serde_json::json!({ "authenticated": true, "user": {
                            "username": "scraper", "uid": "u-1", "groups": ["scrapers"],
                            "extra": { "scopes": ["metrics"] },
                        } }),
                            _ => serde_json::json!({ "authenticated": false }),
                        };
                    } else {
                        reviews.access.lock().unwrap().push(review["spec"].clone());
                        let scoped = review["spec"]["extra"]["scopes"][0] == "metrics";
                        review["status"] = serde_json::json!({ "allowed": scoped });
                    }
                    let body =
                        kube_client::client::Body::from(serde_json::to_vec(&review).unwrap());
                    Ok::<_, std::convert::Infallible>(http::Response::new(body))
                }
            });
        kube_client::Client::new(service, "default")
    }

    fn reviews_of(&self, token: &str) -> usize {
        self.by_token.lock().unwrap().get(token).copied().unwrap_or(0)
    }
}

/// A Manager serving secure metrics: stop it with `stop` (or by dropping it).
struct Endpoint {
    stop: tokio::sync::oneshot::Sender<()>,
    running: tokio::task::JoinHandle<Result<(), ctrlkit::manager::ManagerError>>,
    address: std::net::SocketAddr,
    ca_pem: String,
}

/// A Manager on `client` serving `/metrics` over HTTPS, with a certificate of a CA of its own.
async fn secure_endpoint(client: kube_client::Client) -> Endpoint {
    secure_endpoint_of(client, ctrlkit::metrics::Registry::new(), SecureServing::new()).await
}

/// [`secure_endpoint`], serving `registry` with `serving`'s settings (its certificate
/// replaced).
async fn secure_endpoint_of(
    client: kube_client::Client,
    registry: ctrlkit::metrics::Registry,
    serving: SecureServing,
) -> Endpoint {
    let ca = SelfSignedCa::generate("metrics-ca", Duration::from_secs(3600)).unwrap();
    let bundle = ca.issue(&["127.0.0.1".to_owned()], Duration::from_secs(3600)).unwrap();
    let ca_pem = bundle.ca_pem.clone();
    let address = free_address();
    let manager = Manager::builder(client)
        .metrics(registry)
        .metrics_address(address)
        .metrics_secure_serving(serving.certificates(CertificateSource::Bundle(bundle)))
        .build();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(manager.run_until(async {
        let _ = stopped.await;
    }));
    wait_until_listening(address).await;
    Endpoint { stop, running, address, ca_pem }
}

/// Waits until something listens on `address`.
async fn wait_until_listening(address: std::net::SocketAddr) {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(address).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the endpoint never listened on {address}");
}

/// `GET /metrics` with `authorization` as the header's value: the status.
async fn scrape(address: std::net::SocketAddr, ca_pem: &str, authorization: &str) -> u16 {
    scrape_with(&scraper(address, ca_pem), authorization).await
}

/// A client of the endpoint at `address` trusting `ca_pem`, whose connections are reused
/// from scrape to scrape, and which does not retry a 429 (as Prometheus's).
fn scraper(address: std::net::SocketAddr, ca_pem: &str) -> kube_client::Client {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut config = kube_client::Config::new(format!("https://{address}").parse().unwrap());
    let der = CertificateDer::pem_slice_iter(ca_pem.as_bytes()).next().unwrap().unwrap();
    config.root_cert = Some(vec![der.to_vec()]);
    config.default_retry = false;
    kube_client::Client::try_from(config).unwrap()
}

/// `GET /metrics` through `client` with `authorization` as the header's value: the status.
async fn scrape_with(client: &kube_client::Client, authorization: &str) -> u16 {
    let request = http::Request::get("/metrics").header("Authorization", authorization);
    match client.request_text(request.body(Vec::new()).unwrap()).await {
        Ok(_) => 200,
        Err(kube_client::Error::Api(status)) => status.code,
        Err(err) => panic!("a scrape: {err}"),
    }
}

#[tokio::test]
async fn a_flood_of_scrapes_is_reviewed_once_per_token_eight_at_a_time_and_long_tokens_unreviewed()
{
    let reviews = std::sync::Arc::new(Reviews::default());
    let Endpoint { stop: _stop, address, ca_pem: ca, .. } = secure_endpoint(reviews.client()).await;
    // Twenty scrapes at once with one token: one review, whose answer they share.
    let same = (0..20).map(|_| scrape(address, &ca, "Bearer good"));
    assert!(futures::future::join_all(same).await.iter().all(|code| *code == 200));
    assert_eq!(reviews.reviews_of("good"), 1, "one review per token at a time");
    // Forty unknown tokens at once: reviewed, eight at a time at most.
    let many = (0..40).map(|i| {
        let ca = ca.clone();
        async move { scrape(address, &ca, &format!("Bearer unknown-{i}")).await }
    });
    assert!(futures::future::join_all(many).await.iter().all(|code| *code == 401));
    let most = reviews.most_in_flight.load(std::sync::atomic::Ordering::SeqCst);
    assert!(most <= 8, "{most} reviews in flight at once");
    // A token of 20 KiB is refused as it is, no review sent for it.
    let long = "t".repeat(20 << 10);
    assert_eq!(scrape(address, &ca, &format!("Bearer {long}")).await, 401);
    assert_eq!(reviews.reviews_of(&long), 0, "a token over 16 KiB is not reviewed");
    // The scheme's case does not matter (RFC 7235).
    assert_eq!(scrape(address, &ca, "bearer good").await, 200);
}

#[tokio::test]
async fn a_scoped_token_is_authorized_with_its_extra_and_a_flood_does_not_evict_the_scraper() {
    let reviews = std::sync::Arc::new(Reviews::default());
    let Endpoint { stop: _stop, address, ca_pem: ca, .. } = secure_endpoint(reviews.client()).await;
    assert_eq!(scrape(address, &ca, "Bearer good").await, 200, "authorized with its scope");
    let asked = reviews.access.lock().unwrap()[0].clone();
    assert_eq!(asked["extra"]["scopes"], serde_json::json!(["metrics"]), "{asked}");
    // More unknown tokens than the cache holds, while the scraper keeps scraping: its entry,
    // the most recently used, stays.
    for batch in 0..11 {
        let bogus = (0..100).map(|i| {
            let ca = ca.clone();
            async move { scrape(address, &ca, &format!("Bearer bogus-{batch}-{i}")).await }
        });
        futures::future::join_all(bogus).await;
        assert_eq!(scrape(address, &ca, "Bearer good").await, 200);
    }
    assert_eq!(reviews.reviews_of("good"), 1, "the scraper's review was evicted by the flood");
}

/// Scrapes with `count` tokens no review authenticates (`bogus-0`, `bogus-1`, ...), a hundred
/// at once: their statuses (401, or 429 for those refused unreviewed over the review rate).
async fn flood(client: &kube_client::Client, count: usize) -> Vec<u16> {
    let mut codes = Vec::new();
    for batch in (0..count).collect::<Vec<_>>().chunks(100) {
        let scrapes = batch
            .iter()
            .map(|i| async move { scrape_with(client, &format!("Bearer bogus-{i}")).await });
        codes.extend(futures::future::join_all(scrapes).await);
    }
    codes
}

#[tokio::test]
async fn two_thousand_unknown_tokens_between_scrapes_do_not_send_the_scraper_back_to_review() {
    let reviews = std::sync::Arc::new(Reviews::taking(Duration::ZERO));
    let Endpoint { stop: _stop, address, ca_pem: ca, .. } = secure_endpoint(reviews.client()).await;
    let client = scraper(address, &ca);
    assert_eq!(scrape_with(&client, "Bearer good").await, 200);
    let started = std::time::Instant::now();
    let codes = flood(&client, 2000).await;
    assert!(codes.iter().all(|code| [401, 429].contains(code)), "{codes:?}");
    assert_eq!(scrape_with(&client, "Bearer good").await, 200);
    assert_eq!(reviews.reviews_of("good"), 1, "the scraper's token was reviewed again");
    // Reviews of unknown tokens at the default rate: 40 at once, then 10 a second; the rest
    // refused unreviewed, and counted.
    let reviewed = reviews.by_token.lock().unwrap().len() - 1;
    let allowed = 40 + 10 * (started.elapsed().as_secs() as usize + 1);
    assert!(reviewed <= allowed, "{reviewed} unknown tokens reviewed, {allowed} allowed");
    let request = http::Request::get("/metrics").header("Authorization", "Bearer good");
    let text = client.request_text(request.body(Vec::new()).unwrap()).await.unwrap();
    let count = |result: &str| -> usize {
        let series = format!("ctrlkit_secure_metrics_token_reviews_total{{result=\"{result}\"}} ");
        let line = text.lines().find_map(|line| line.strip_prefix(&series));
        line.map_or(0, |n| n.parse().unwrap())
    };
    assert_eq!(count("unauthenticated"), reviewed, "{text}");
    assert_eq!(count("throttled"), 2000 - reviewed, "{text}");
}

/// On a paused clock: the scraper's token, its cached review expired, is reviewed again in
/// the middle of a flood of unknown tokens whose reviews each take 200 ms, and its scrape is
/// answered within five reviews' time (1 s), not behind the flood's queue. The unknown
/// tokens' rate is set high enough that every one of the flood is reviewed, so only the
/// known tokens' lane keeps the scraper from waiting behind them.
#[tokio::test(start_paused = true)]
async fn a_known_token_is_answered_within_a_second_during_a_flood_of_slow_reviews() {
    let review = Duration::from_millis(200);
    let reviews = std::sync::Arc::new(Reviews::taking(review));
    let serving = SecureServing::new().unknown_token_reviews(1000, 1000);
    let registry = ctrlkit::metrics::Registry::new();
    let Endpoint { stop: _stop, address, ca_pem: ca, .. } =
        secure_endpoint_of(reviews.client(), registry, serving).await;
    let client = scraper(address, &ca);
    assert_eq!(scrape_with(&client, "Bearer good").await, 200);
    // The token's review is cached for a minute (the default): past it, it is reviewed again.
    tokio::time::sleep(Duration::from_secs(61)).await;
    let flooding = tokio::spawn({
        let client = client.clone();
        async move {
            let client = &client;
            let scrapes = (0..400)
                .map(|i| async move { scrape_with(client, &format!("Bearer slow-{i}")).await });
            futures::future::join_all(scrapes).await
        }
    });
    while reviews.in_flight.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let started = tokio::time::Instant::now();
    assert_eq!(scrape_with(&client, "Bearer good").await, 200);
    let took = started.elapsed();
    assert!(took <= review * 5, "the scraper waited {took:?} behind the flood");
    assert_eq!(reviews.reviews_of("good"), 2, "reviewed again once its cache expired");
    let codes = flooding.await.unwrap();
    assert!(codes.iter().all(|code| *code == 401), "each of the flood reviewed: {codes:?}");
}

#[tokio::test]
async fn two_secure_endpoints_on_one_registry_serve_each_metric_family_once() {
    let reviews = std::sync::Arc::new(Reviews::default());
    let registry = ctrlkit::metrics::Registry::new();
    let first = secure_endpoint_of(reviews.client(), registry.clone(), SecureServing::new()).await;
    let second = secure_endpoint_of(reviews.client(), registry, SecureServing::new()).await;

    // Each endpoint reviews the scraper's token once.
    assert_eq!(scrape(second.address, &second.ca_pem, "Bearer good").await, 200);
    let request = http::Request::get("/metrics").header("Authorization", "Bearer good");
    let text = scraper(first.address, &first.ca_pem)
        .request_text(request.body(Vec::new()).unwrap())
        .await
        .expect("a scrape of the first endpoint");
    let family = "# TYPE ctrlkit_secure_metrics_token_reviews_total counter";
    assert_eq!(text.matches(family).count(), 1, "{family} in the scrape:\n{text}");
    let series = "ctrlkit_secure_metrics_token_reviews_total{result=\"authenticated\"} 2";
    assert!(text.contains(series), "{series} not in the scrape:\n{text}");
}

#[tokio::test]
async fn a_scrape_refused_over_the_review_rate_is_told_to_retry_after_a_second() {
    let reviews = std::sync::Arc::new(Reviews::default());
    // No review of an unknown token is ever sent: every one is refused over the rate.
    let serving = SecureServing::new().unknown_token_reviews(0, 0);
    let registry = ctrlkit::metrics::Registry::new();
    let endpoint = secure_endpoint_of(reviews.client(), registry, serving).await;
    let request = http::Request::get("/metrics").header("Authorization", "Bearer unknown");
    let response = scraper(endpoint.address, &endpoint.ca_pem)
        .send(request.body(Vec::new().into()).unwrap())
        .await
        .expect("an answer");
    assert_eq!(response.status(), http::StatusCode::TOO_MANY_REQUESTS);
    let retry_after = response.headers().get(http::header::RETRY_AFTER);
    assert_eq!(retry_after.and_then(|v| v.to_str().ok()), Some("1"), "Retry-After of a 429");
    assert_eq!(reviews.reviews_of("unknown"), 0);
}
