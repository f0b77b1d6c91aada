//! Hooks for a controller's metrics, as controller-runtime counts them: reconciles by result,
//! errors, panics, timeouts, keys given up on, reconcile time, workers. An exporter implements
//! them ([`crate::metrics::Registry`] does, for Prometheus); a controller without them records
//! nothing and reads no clock for them.

use std::sync::Arc;
use std::time::Duration;

/// How a reconcile ended, as `controller_runtime_reconcile_total`'s `result` label and the
/// error counters see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReconcileOutcome {
    /// `Ok(Action::done())`: `result="success"`.
    Success,
    /// `Ok(Action::requeue_after(..))`: `result="requeue_after"`.
    RequeueAfter,
    /// `Err(..)`: `result="error"`, and an error.
    Error,
    /// A panic, caught: `result="error"`, an error and a panic.
    Panic,
    /// The reconcile timeout ran out: `result="error"`, an error and a timeout.
    Timeout,
}

/// What one controller reports.
/// A hook that panics is caught and logged, and costs only that observation. Every hook
/// does nothing by default: an exporter implements those it records, and a hook added later
/// breaks no implementor.
pub trait ControllerMetrics: Send + Sync {
    /// The controller runs `workers` workers (`controller_runtime_max_concurrent_reconciles`).
    fn max_concurrent_reconciles(&self, workers: usize) {
        let _ = workers;
    }
    /// A worker started reconciling (`controller_runtime_active_workers` up).
    fn worker_started(&self) {}
    /// A worker finished reconciling (`controller_runtime_active_workers` down).
    fn worker_finished(&self) {}
    /// A reconcile ended after `took`.
    fn reconciled(&self, outcome: ReconcileOutcome, took: Duration) {
        let _ = (outcome, took);
    }
    /// A key was given up on: after its last retry, or at once for a terminal error
    /// (`controller_runtime_terminal_reconcile_errors_total`).
    fn dropped(&self) {}
    /// A reconcile was held `waited` (from when its key was first parked, the worker free
    /// meanwhile, to the reconcile) for the controller's caches to catch up with the key's
    /// own last writes; `timed_out` if it ran at the timeout without them
    /// (`ctrlkit_controller_read_your_writes_holds_total`, `..._hold_seconds`,
    /// `..._hold_timeouts_total`).
    fn held(&self, waited: Duration, timed_out: bool) {
        let _ = (waited, timed_out);
    }
    /// The worker count changed `from` → `to`, for `reason`
    /// (`ctrlkit_controller_worker_scaling_total`).
    fn scaled(&self, from: usize, to: usize, reason: ScaleReason) {
        let _ = (from, to, reason);
    }
}

/// Why a controller's worker count changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ScaleReason {
    /// [`Controller::set_workers`](super::Controller::set_workers) was called.
    Manual,
    /// Ready keys waited while every worker was busy on I/O.
    Queue,
    /// Ready keys waited, but the reconciles use the CPU: held at what the cores can run.
    CpuBound,
    /// The API server answered 429 or 5xx: no growth, one step down.
    Throttled,
    /// Nothing waited for a while: back toward the minimum.
    Idle,
}

impl ScaleReason {
    /// The `reason` label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Manual => "manual",
            Self::Queue => "queue",
            Self::CpuBound => "cpu_bound",
            Self::Throttled => "throttled",
            Self::Idle => "idle",
        }
    }
}

/// Makes the metrics of each controller.
pub trait ControllerMetricsProvider: Send + Sync {
    /// The metrics of the controller named `controller`.
    fn new_controller_metrics(&self, controller: &str) -> Arc<dyn ControllerMetrics>;
}
