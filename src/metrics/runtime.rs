//! The tokio runtime's metrics that stable tokio offers (no `tokio_unstable`):
//! `tokio_workers_count`, `tokio_alive_tasks`, `tokio_global_queue_depth`.
//!
//! # Contract
//! - Read from the runtime the [`Registry`](super::Registry) was made on, else from the one
//!   current at the scrape; with neither (a registry made and read outside any runtime) no
//!   `tokio_*` series is exported.
//! - No label: one runtime, one series each.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use tokio::runtime::Handle;

/// One reading of a runtime's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RuntimeStats {
    workers: usize,
    alive_tasks: usize,
    global_queue_depth: usize,
}

impl RuntimeStats {
    /// Reads `made_on`, else the runtime current now; `None` without either.
    pub(crate) fn read(made_on: Option<&Handle>) -> Option<Self> {
        let current;
        let handle = match made_on {
            Some(handle) => handle,
            None => {
                current = Handle::try_current().ok()?;
                &current
            }
        };
        let metrics = handle.metrics();
        Some(Self {
            workers: metrics.num_workers(),
            alive_tasks: metrics.num_alive_tasks(),
            global_queue_depth: metrics.global_queue_depth(),
        })
    }

    /// Writes the three gauges.
    pub(crate) fn encode(&self, encoder: &mut DescriptorEncoder) -> std::fmt::Result {
        let gauges = [
            (
                "tokio_workers_count",
                "Number of worker threads of the tokio runtime (1 for a current-thread runtime).",
                self.workers,
            ),
            ("tokio_alive_tasks", "Number of tasks alive in the tokio runtime.", self.alive_tasks),
            (
                "tokio_global_queue_depth",
                "Number of tasks waiting in the tokio runtime's global (injection) queue.",
                self.global_queue_depth,
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}
