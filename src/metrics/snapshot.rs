//! The metrics read at each scrape rather than kept: the process's ([`super::process`]) and
//! the async runtime's ([`super::runtime`]).
//!
//! # Contract
//! [`Registry::encode`](super::Registry::encode) reads a [`Snapshot`] (files in `/proc`, the
//! runtime's counters) before it takes the registry's lock, so a slow `/proc` never holds up
//! the hooks that write to the registry; it then stores the snapshot in the
//! [`SnapshotCollector`]'s slot under that lock, and the collector writes exactly that
//! snapshot into the exposition.

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use tokio::runtime::Handle;

use super::process::ProcessStats;
use super::runtime::RuntimeStats;

/// What one scrape read.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Snapshot {
    process: ProcessStats,
    runtime: Option<RuntimeStats>,
}

impl Snapshot {
    /// Reads the process and the runtime `made_on` (else the current one) now.
    pub(crate) fn take(made_on: Option<&Handle>) -> Self {
        Self { process: ProcessStats::read(), runtime: RuntimeStats::read(made_on) }
    }
}

/// Writes the snapshot its slot holds, registered once in the registry.
#[derive(Debug, Clone, Default)]
pub(crate) struct SnapshotCollector {
    slot: Arc<Mutex<Snapshot>>,
}

impl SnapshotCollector {
    /// Makes `snapshot` the one the next encoding writes; called with the registry locked.
    pub(crate) fn store(&self, snapshot: Snapshot) {
        *self.slot.lock() = snapshot;
    }
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let snapshot = *self.slot.lock();
        snapshot.process.encode(&mut encoder)?;
        if let Some(runtime) = snapshot.runtime {
            runtime.encode(&mut encoder)?;
        }
        Ok(())
    }
}
