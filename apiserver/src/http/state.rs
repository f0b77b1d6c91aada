//! What every request handler shares: the registry, the signal to open watches, the faults
//! armed, the request counts and the server's settings. The server (`server/mod.rs`) makes it and
//! hands it to the handlers; nothing here knows a handler.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::sync::broadcast;

use crate::faults::{FaultState, WatchSignal};
use crate::http::open_watches::OpenWatches;
use crate::registry::Registry;

/// Counters behind [`RequestCounts`](crate::RequestCounts).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) list: AtomicU64,
    pub(crate) watch: AtomicU64,
    pub(crate) get: AtomicU64,
    pub(crate) create: AtomicU64,
    pub(crate) update: AtomicU64,
    pub(crate) patch: AtomicU64,
    pub(crate) delete: AtomicU64,
    /// Handlers that panicked (see the `panics` module).
    pub(crate) panics: AtomicU64,
    /// Watches open now, by resource (the counts above only grow).
    pub(crate) open_watches: Arc<OpenWatches>,
}

/// State shared by every request handler.
pub(crate) struct Shared {
    /// Shared with the garbage collector.
    pub(crate) registry: Arc<Registry>,
    pub(crate) control: broadcast::Sender<WatchSignal>,
    pub(crate) faults: Arc<FaultState>,
    pub(crate) stats: Stats,
    pub(crate) bookmark_interval: Duration,
    pub(crate) address: String,
}

impl Shared {
    pub(crate) fn signal(&self, signal: WatchSignal) {
        // No open watch is fine.
        let _ = self.control.send(signal);
    }
}
