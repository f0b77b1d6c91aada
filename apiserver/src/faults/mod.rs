//! Layer 3, faults: what a test arms on a running server and the handlers read. It imports
//! `model`, `registry` (to compact the store) and itself, never the HTTP layer, and offers
//! [`FaultState`], the [`WatchSignal`] to open watches, the `latency` layer and the public
//! [`Faults`](crate::Faults) handle.
//!
//! The faults armed on a server, as the request handlers read them: failures to answer with,
//! a latency, a watch lifetime. Tests arm them through the [`Faults`](crate::Faults) handle
//! (`injection.rs`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;

use crate::model::status::ApiError;

pub(crate) mod injection;
pub(crate) mod latency;

/// How an injected failure answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// 500 InternalError.
    InternalError,
    /// 429 TooManyRequests with a `Retry-After` header of this many seconds.
    TooManyRequests {
        /// The `Retry-After` seconds.
        retry_after_seconds: u64,
    },
    /// 422 Invalid, as a server refuses parameters it does not know (a Kubernetes 1.20
    /// server refuses a streaming list so).
    Invalid,
}

/// The faults armed on a server.
#[derive(Debug)]
pub(crate) struct FaultState {
    pub(crate) fail_remaining: AtomicUsize,
    pub(crate) failure: Mutex<Failure>,
    pub(crate) fail_watches_remaining: AtomicUsize,
    pub(crate) watch_failure: Mutex<Failure>,
    pub(crate) latency: Mutex<Duration>,
    pub(crate) watch_lifetime: Mutex<Option<Duration>>,
    /// Requests whose handler is to panic (see `Faults::panic_next`).
    pub(crate) panic_remaining: AtomicUsize,
}

impl Default for FaultState {
    fn default() -> Self {
        Self {
            fail_remaining: AtomicUsize::new(0),
            failure: Mutex::new(Failure::InternalError),
            fail_watches_remaining: AtomicUsize::new(0),
            watch_failure: Mutex::new(Failure::InternalError),
            latency: Mutex::new(Duration::ZERO),
            watch_lifetime: Mutex::new(None),
            panic_remaining: AtomicUsize::new(0),
        }
    }
}

impl FaultState {
    /// Whether this request's handler is to panic (and counts it down).
    pub(crate) fn take_panic(&self) -> bool {
        let remaining = &self.panic_remaining;
        remaining.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }

    /// The error for this request, if a failure is armed (and counts it down).
    pub(crate) fn take_failure(&self, watch: bool) -> Option<ApiError> {
        let take = |remaining: &AtomicUsize| {
            remaining.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
        };
        let failure = if watch && take(&self.fail_watches_remaining) {
            *self.watch_failure.lock().unwrap_or_else(PoisonError::into_inner)
        } else if take(&self.fail_remaining) {
            *self.failure.lock().unwrap_or_else(PoisonError::into_inner)
        } else {
            return None;
        };
        Some(match failure {
            Failure::Invalid => ApiError::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                "the request is invalid: refused by ctrlkit's fault injection",
            ),
            Failure::InternalError => ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "Internal error occurred: injected by ctrlkit's fault injection",
            ),
            Failure::TooManyRequests { retry_after_seconds } => {
                let mut e = ApiError::new(
                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                    "TooManyRequests",
                    "the server has received too many requests and has asked us to try again later",
                );
                e.retry_after = Some(retry_after_seconds);
                e
            }
        })
    }

    pub(crate) fn latency(&self) -> Duration {
        *self.latency.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn watch_lifetime(&self) -> Option<Duration> {
        *self.watch_lifetime.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A signal to every open watch (fault injection and shutdown).
#[derive(Debug, Clone)]
pub(crate) enum WatchSignal {
    Close,
    Malformed,
    /// A bug in the watch's events (see `Faults::panic_watches`).
    Panic,
    Error(SharedStatus),
}

/// Keeps `Value` in the public-facing signal cheap to clone.
pub(crate) type SharedStatus = Arc<Value>;
