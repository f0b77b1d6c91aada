//! Fault injection, for tests of a client's recovery: drop watches, fail requests, compact the
//! history, slow responses down, corrupt watch streams. The handle arms what `faults/mod.rs`
//! holds and signals the open watches.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::faults::{Failure, FaultState, WatchSignal};
use crate::registry::Registry;

/// A handle on a running server's faults; see [`ApiServer::faults`](crate::ApiServer::faults).
#[derive(Clone)]
pub struct Faults {
    pub(crate) state: Arc<FaultState>,
    pub(crate) control: broadcast::Sender<WatchSignal>,
    pub(crate) registry: Arc<Registry>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults").finish_non_exhaustive()
    }
}

impl Faults {
    fn signal(&self, signal: WatchSignal) {
        // No open watch is fine.
        let _ = self.control.send(signal);
    }

    /// Ends every open watch now, as a restarting apiserver or a dropped connection would.
    /// Clients see their stream end cleanly and may resume from their last resourceVersion.
    pub fn close_watches(&self) {
        self.signal(WatchSignal::Close);
    }

    /// Fails the next `n` API requests (discovery and health checks excepted) with `failure`.
    pub fn fail_next(&self, n: usize, failure: Failure) {
        *self.state.failure.lock().unwrap_or_else(PoisonError::into_inner) = failure;
        self.state.fail_remaining.store(n, Ordering::SeqCst);
    }

    /// Makes the handler of each of the next `n` API requests (discovery and health checks
    /// excepted) panic, as a bug in the server would: each is answered 500 with
    /// kube-apiserver's words for a panic, counted in
    /// [`ApiServer::handler_panics`](crate::ApiServer::handler_panics), and the server serves
    /// on.
    pub fn panic_next(&self, n: usize) {
        self.state.panic_remaining.store(n, Ordering::SeqCst);
    }

    /// Fails the next `n` watch requests with `failure`; other requests are served. Zero
    /// disarms it. With [`close_watches`](Self::close_watches), this keeps clients
    /// disconnected while the test changes objects behind their back.
    pub fn fail_next_watches(&self, n: usize, failure: Failure) {
        *self.state.watch_failure.lock().unwrap_or_else(PoisonError::into_inner) = failure;
        self.state.fail_watches_remaining.store(n, Ordering::SeqCst);
    }

    /// Compacts the history and storage both, as when the watch cache's window has moved
    /// past every older version: watches from, list continuations at, and exact-version lists
    /// of any resourceVersion before now get 410 Expired, for every resource.
    pub fn compact(&self) {
        self.registry.store.compact();
    }

    /// Compacts storage alone, as `etcdctl compact` does on a real server: only resources
    /// served [`without_watch_cache`](crate::ApiServerBuilder::without_watch_cache) get 410
    /// for older versions; the others answer from the watch cache's window, as
    /// kube-apiserver 1.36 does.
    pub fn compact_storage(&self) {
        self.registry.store.compact_storage();
    }

    /// Delays every response by `latency` (zero turns it off).
    pub fn set_latency(&self, latency: Duration) {
        *self.state.latency.lock().unwrap_or_else(PoisonError::into_inner) = latency;
    }

    /// Ends every watch opened from now on after `lifetime` (zero: at once, before any
    /// event), as an overloaded or restarting server does; `None` turns it off.
    pub fn set_watch_lifetime(&self, lifetime: Option<Duration>) {
        *self.state.watch_lifetime.lock().unwrap_or_else(PoisonError::into_inner) = lifetime;
    }

    /// Makes every open watch panic, as a bug in the code writing its events would: a JSON
    /// watch in the task that makes its events, a protobuf watch in the encoder of its
    /// frames. Each watch ends with an `ERROR` event carrying a 500 `Status`, each panic is
    /// counted in [`ApiServer::handler_panics`](crate::ApiServer::handler_panics), and the
    /// server serves on.
    pub fn panic_watches(&self) {
        self.signal(WatchSignal::Panic);
    }

    /// Writes a line that is not JSON into every open watch.
    pub fn send_malformed_line(&self) {
        self.signal(WatchSignal::Malformed);
    }

    /// Writes an `ERROR` event carrying a `Status` with `code`, `reason` and `message` into
    /// every open watch, then ends them, as the real server does.
    pub fn send_error_event(&self, code: u16, reason: &str, message: &str) {
        let status = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code,
        });
        self.signal(WatchSignal::Error(Arc::new(status)));
    }
}
