//! What the client's requests said, as client-go's `rest_client_*` metrics count them, and
//! whether the API server is pushing back.
//!
//! # Contract
//! - [`RequestMetrics`] receives each request a Manager's clients send: its method, the API
//!   server's host, the answer's status code (`"<error>"` when none came) and the time to the
//!   answer's headers.
//! - [`ClientPressure`] says how many requests the API server refused with `429 Too Many
//!   Requests` or answered with a 5xx so far; an adaptive worker pool does not grow while it
//!   rises.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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
    total: AtomicU64,
    throttled: AtomicU64,
}

impl RequestCounts {
    /// Counts one answer with `status` (none for a request that failed before an answer).
    #[allow(dead_code)]
    pub(crate) fn record(&self, status: Option<u16>) {
        self.inner.total.fetch_add(1, Ordering::Relaxed);
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
#[allow(dead_code)]
pub(crate) struct RequestLayer {
    pub(crate) host: Arc<str>,
    pub(crate) counts: RequestCounts,
    pub(crate) sink: Option<Arc<dyn RequestMetrics>>,
}
