//! What the client's requests said, as client-go's `rest_client_*` metrics count them, and
//! whether the API server is pushing back.
//!
//! # Contract
//! - A [`Manager`](crate::manager::Manager) wraps every client it hands out or is handed
//!   in one request layer (the same kind of layer as the [User-Agent](crate::user_agent)
//!   one): [`Manager::client`](crate::manager::Manager::client), its informer factory (and
//!   the [`ListWatch`](crate::cache::ListWatch)es given to it), its event recorders, the
//!   leader election [`LeaseLock`](crate::leaderelection::LeaseLock), its shard Lease, and
//!   the clients of its controllers (their primary's, which reads the shard and Lease
//!   objects). Clients the caller keeps to itself (an `Api` made from its own `Client`, the
//!   reconciler's writes unless made from `manager.client()`) are not counted, nor are those
//!   of a [`Sharder`](crate::sharding::Sharder), the webhook CA injection or the certificates'
//!   Secret unless made from `manager.client()`.
//! - Objects handed to a Manager (a `LeaseLock`, a `ListWatch`) are counted under the
//!   Manager's `host` label, and keep their own client's retries: one made from a client with
//!   `default_retry` on shows only its final answers (below). Make them from
//!   `manager.client()` to have every attempt counted.
//! - [`RequestMetrics`] receives each attempt of each request once, however many of these
//!   layers it passes through (the innermost counts it): its method, the API server's host
//!   (`host:port`, never a path), the answer's status code as text (`"429"`, or `"<error>"`
//!   when no answer came: a refused connection, a timeout) and the time from the call to the
//!   answer's headers (for a watch, the time to its headers, not its length). A request
//!   dropped before its answer is not counted.
//! - [`ClientPressure`] says how many answers were `429 Too Many Requests` or a 5xx so far;
//!   an adaptive worker pool does not grow while it rises.
//! - Retries: kube-client's `Config::default_retry` (on by default) retries 429, 503 and 504
//!   *inside* a prebuilt `Client`, so a layer around it sees only the final answer: a 429
//!   that a retry turned into a 200 counts as one `"200"`, and the throttling is invisible.
//!   [`Manager::builder_from_config`](crate::manager::Manager::builder_from_config) builds the
//!   client with `default_retry` off and kube-client's own retry policy *outside* the
//!   layer, so each attempt is counted, as client-go counts them.
//! - The host of a prebuilt client cannot be read from it: it is `""` unless given with
//!   [`ManagerBuilder::api_host`](crate::manager::ManagerBuilder::api_host);
//!   `builder_from_config` takes it from the config's `cluster_url`.
//! - A live get that asks for protobuf and then JSON (an unknown protobuf field) is two
//!   requests, and counted as two.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use kube_client::Client;
use kube_client::client::Body;
use kube_client::client::retry::RetryPolicy;
use tower::{BoxError, Layer};

/// How many answers so far said the API server is overloaded or failing (429 and 5xx).
pub trait ClientPressure: Send + Sync {
    /// The count of 429 and 5xx answers since the client was made; it only rises.
    fn throttled(&self) -> u64;
}

/// Receives each request a client sent (`rest_client_requests_total`,
/// `rest_client_request_duration_seconds`). A hook that does nothing by default.
pub trait RequestMetrics: Send + Sync {
    /// A request with `method` to `host` was answered with `code` (the status as text, or
    /// `"<error>"`) after `took`.
    fn request(&self, method: &http::Method, host: &str, code: &str, took: Duration) {
        let _ = (method, host, code, took);
    }
}

/// The answers counted by one Manager's clients, shared by all of them.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestCounts {
    inner: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    throttled: AtomicU64,
}

impl RequestCounts {
    /// Counts one answer with `status` (none for a request that failed before an answer).
    pub(crate) fn record(&self, status: Option<u16>) {
        if matches!(status, Some(429) | Some(500..=599)) {
            self.inner.throttled.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl ClientPressure for RequestCounts {
    fn throttled(&self) -> u64 {
        self.inner.throttled.load(Ordering::Relaxed)
    }
}

/// What a Manager wraps each of its clients with: the host it names and where it counts.
#[derive(Clone, Default)]
pub(crate) struct RequestLayer {
    pub(crate) host: Arc<str>,
    pub(crate) counts: RequestCounts,
    pub(crate) sink: Option<Arc<dyn RequestMetrics>>,
}

impl std::fmt::Debug for RequestLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestLayer")
            .field("host", &self.host)
            .field("throttled", &self.counts.throttled())
            .finish_non_exhaustive()
    }
}

impl RequestLayer {
    /// A layer naming `host`, reporting to each of `sinks`.
    pub(crate) fn new(host: &str, sinks: Vec<Arc<dyn RequestMetrics>>) -> Self {
        let sink: Option<Arc<dyn RequestMetrics>> = match sinks.len() {
            0 => None,
            1 => sinks.into_iter().next(),
            _ => Some(Arc::new(FanOut(sinks))),
        };
        Self { host: Arc::from(host), counts: RequestCounts::default(), sink }
    }

    /// The counts of 429 and 5xx answers, shared with every client of this layer.
    pub(crate) fn pressure(&self) -> Arc<dyn ClientPressure> {
        Arc::new(self.counts.clone())
    }

    fn record(&self, method: &http::Method, status: Option<http::StatusCode>, took: Duration) {
        self.counts.record(status.map(|s| s.as_u16()));
        if let Some(sink) = &self.sink {
            let code = status.as_ref().map_or("<error>", http::StatusCode::as_str);
            sink.request(method, &self.host, code, took);
        }
    }
}

/// Several sinks, each told of every request.
struct FanOut(Vec<Arc<dyn RequestMetrics>>);

impl RequestMetrics for FanOut {
    fn request(&self, method: &http::Method, host: &str, code: &str, took: Duration) {
        for sink in &self.0 {
            sink.request(method, host, code, took);
        }
    }
}

/// The authority (`host:port`) of an API server's URL, without user info; `""` if it has
/// none. Never its path.
pub(crate) fn host_of(url: &http::Uri) -> String {
    let authority = url.authority().map_or("", |a| a.as_str());
    authority.rsplit_once('@').map_or(authority, |(_, host)| host).to_owned()
}

/// `client`, each of its requests counted in `layer` (once, if it passes through other
/// layers of this kind too).
pub(crate) fn instrument(client: Client, layer: &RequestLayer) -> Client {
    let namespace = client.default_namespace().to_owned();
    Client::new(Counted { inner: client, layer: layer.clone() }, namespace)
}

/// `client` (built with `default_retry` off), counted in `layer`, with kube-client's own
/// retries of 429, 503 and 504 (`RetryPolicy::server_retry`, honouring `Retry-After`)
/// outside the count, so each attempt is counted.
pub(crate) fn instrument_with_retry(client: Client, layer: &RequestLayer) -> Client {
    let namespace = client.default_namespace().to_owned();
    let counted = Counted { inner: client, layer: layer.clone() };
    Client::new(
        tower::retry::RetryLayer::new(RetryPolicy::server_retry()).layer(counted),
        namespace,
    )
}

/// Carried by a request through nested counting layers: set once a layer inside the one
/// that put it there has counted the request, so that this one does not count it again.
#[derive(Clone, Default)]
struct Seen(Arc<AtomicBool>);

/// A service that sends through the client it wraps and counts each answer.
#[derive(Clone)]
struct Counted {
    inner: Client,
    layer: RequestLayer,
}

type Sent = Pin<Box<dyn Future<Output = Result<http::Response<Body>, BoxError>> + Send>>;

impl tower::Service<http::Request<Body>> for Counted {
    type Response = http::Response<Body>;
    // Boxed, as the retry policy wants; kube-client unboxes its own error again in `send`.
    type Error = BoxError;
    type Future = Sent;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The wrapped client waits for its own capacity in `send`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        // The mark of the layer around this one (if any) is set when this one is done; this
        // one's own mark tells it whether a layer inside counted the request already.
        let outer = request.extensions().get::<Seen>().cloned();
        let mine = Seen::default();
        request.extensions_mut().insert(mine.clone());
        let method = request.method().clone();
        let (client, layer) = (self.inner.clone(), self.layer.clone());
        Box::pin(async move {
            let start = tokio::time::Instant::now();
            let answer = client.send(request).await;
            if !mine.0.load(Ordering::Acquire) {
                let status = answer.as_ref().ok().map(http::Response::status);
                layer.record(&method, status, start.elapsed());
            }
            if let Some(outer) = outer {
                outer.0.store(true, Ordering::Release);
            }
            answer.map_err(BoxError::from)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_the_authority_without_user_info_or_path() {
        let url: http::Uri = "https://admin:secret@10.0.0.1:6443/prefix/api".parse().unwrap();
        assert_eq!(host_of(&url), "10.0.0.1:6443");
        let url: http::Uri = "https://kubernetes.default.svc".parse().unwrap();
        assert_eq!(host_of(&url), "kubernetes.default.svc");
        let url: http::Uri = "/api/v1/pods".parse().unwrap();
        assert_eq!(host_of(&url), "");
    }

    #[test]
    fn only_429_and_5xx_count_as_pressure() {
        let counts = RequestCounts::default();
        for status in [Some(200), Some(404), Some(409), None, Some(429), Some(500), Some(503)] {
            counts.record(status);
        }
        assert_eq!(counts.throttled(), 3);
    }
}
