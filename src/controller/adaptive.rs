//! [`AdaptiveWorkers`]: an opt-in policy that sets a running controller's worker count from
//! what its queue and reconciles do, within bounds.
//!
//! # Contract
//! Every `interval` the controller's run looks at: the queue's dispatchable depth
//! ([`WorkQueue::len_available`](crate::workqueue::WorkQueue::len_available): ready keys a
//! worker may take now, never those a per-key in-flight cap holds back, nor keys parked for
//! the controller's own writes), how many workers are busy, what share of their reconciles'
//! time was spent in polls (on the CPU) rather than waiting (on I/O), and whether the API
//! server pushed back ([`ClientPressure::throttled`] rose). It then decides, first match:
//! 1. pushed back: no growth; one step down (halved, not below `min`): `throttled`.
//! 2. keys waiting and every worker busy: doubled, up to `max` and to what the cores can run
//!    given how much of a reconcile is CPU (`cores` when reconciles are mostly CPU): `queue`,
//!    or `cpu_bound` where that cap holds it.
//! 3. nothing waiting for `idle_after`: down to the most workers busy at one look meanwhile (not
//!    below `min`): `idle`.
//! 4. else: no change.
//!
//! Each change is reported as [`ControllerMetrics::scaled`](super::ControllerMetrics::scaled),
//! set in `max_concurrent_reconciles`, and logged at info.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::metrics::ScaleReason;
use crate::rest_client::ClientPressure;

/// Bounds and pace of a worker count that follows the work; set with
/// [`Config::adaptive_workers`](super::Config::adaptive_workers).
///
/// The controller starts at [`Config::workers`](super::Config::workers) held within
/// `min..=max`. Under a [`Manager`](crate::manager::Manager) the policy reads the Manager's
/// clients' 429 and 5xx answers; a controller run on its own is not throttle-aware unless
/// given a [`client_pressure`](Self::client_pressure).
///
/// ```
/// use std::time::Duration;
/// use ctrlkit::controller::{AdaptiveWorkers, Config};
///
/// let config = Config::default().adaptive_workers(
///     AdaptiveWorkers::new(2, 64).interval(Duration::from_millis(500)),
/// );
/// assert!(format!("{config:?}").contains("min: 2"));
/// ```
#[derive(Clone)]
pub struct AdaptiveWorkers {
    pub(crate) min: usize,
    pub(crate) max: usize,
    pub(crate) interval: Duration,
    pub(crate) idle_after: Duration,
    pub(crate) client_pressure: Option<Arc<dyn ClientPressure>>,
}

impl std::fmt::Debug for AdaptiveWorkers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdaptiveWorkers")
            .field("min", &self.min)
            .field("max", &self.max)
            .field("interval", &self.interval)
            .field("idle_after", &self.idle_after)
            .field("client_pressure", &self.client_pressure.is_some())
            .finish()
    }
}

impl AdaptiveWorkers {
    /// Between `min` and `max` workers (zero counts as one; a `max` under `min` is `min`);
    /// decides every second, and shrinks after 5 s with nothing waiting.
    pub fn new(min: usize, max: usize) -> Self {
        let min = min.max(1);
        Self {
            min,
            max: max.max(min),
            interval: Duration::from_secs(1),
            idle_after: Duration::from_secs(5),
            client_pressure: None,
        }
    }

    /// How often it decides (default 1 s; zero counts as 1 ms).
    #[must_use]
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval.max(Duration::from_millis(1));
        self
    }

    /// How long nothing must wait before it shrinks (default 5 s).
    #[must_use]
    pub fn idle_after(mut self, idle_after: Duration) -> Self {
        self.idle_after = idle_after;
        self
    }

    /// Where it reads whether the API server pushes back, instead of the Manager's clients
    /// (and for a controller run without a Manager, which has none otherwise).
    #[must_use]
    pub fn client_pressure(mut self, pressure: Arc<dyn ClientPressure>) -> Self {
        self.client_pressure = Some(pressure);
        self
    }

    /// `workers` held within the bounds.
    pub(crate) fn clamp(&self, workers: usize) -> usize {
        workers.clamp(self.min, self.max)
    }
}

/// What the run saw over one interval.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    /// Ready keys a worker may take now.
    pub(super) depth: usize,
    /// Workers processing a key now.
    pub(super) active: usize,
    /// The worker count now.
    pub(super) workers: usize,
    /// Poll time over whole time of the reconciles that ended this interval, if any did.
    pub(super) busy: Option<f64>,
    /// How many more 429 and 5xx answers than at the last look.
    pub(super) throttled: u64,
    /// Worker threads of the runtime.
    pub(super) cores: usize,
}

/// One decision: the new count, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Decision {
    pub(super) to: usize,
    pub(super) reason: ScaleReason,
}

/// Above this share of a reconcile's time on the CPU, a reconcile is CPU-bound: the cores,
/// not more workers, set the pace.
const CPU_BOUND: f64 = 0.5;

/// The policy's memory between decisions.
pub(super) struct Policy {
    bounds: AdaptiveWorkers,
    /// The last busy share seen (a window where no reconcile ended keeps it).
    busy: f64,
    /// Since when nothing waited, and the most workers busy at once since.
    idle_since: Option<Instant>,
    idle_peak: usize,
}

impl Policy {
    pub(super) fn new(bounds: AdaptiveWorkers) -> Self {
        Self { bounds, busy: 0.0, idle_since: None, idle_peak: 0 }
    }

    /// The decision for `sample`, taken at `now`; `None` to hold.
    pub(super) fn decide(&mut self, sample: Sample, now: Instant) -> Option<Decision> {
        let Sample { depth, active, workers, busy, throttled, cores } = sample;
        let (min, max) = (self.bounds.min, self.bounds.max);
        if let Some(busy) = busy {
            self.busy = busy;
        }
        if depth > 0 {
            (self.idle_since, self.idle_peak) = (None, 0);
        } else {
            self.idle_peak = self.idle_peak.max(active);
        }
        let change = |to: usize, reason| (to != workers).then_some(Decision { to, reason });
        if throttled > 0 {
            return change((workers / 2).clamp(min, max.max(workers)), ScaleReason::Throttled);
        }
        if depth > 0 && active >= workers {
            // Workers a core can keep busy, given the share of their time they hold it.
            let cpu_cap = match self.busy >= CPU_BOUND {
                true => cores.max(1),
                false => (cores.max(1) as f64 / self.busy.max(1.0 / max as f64)).floor() as usize,
            };
            let wanted = max.min(workers.saturating_mul(2));
            let to = wanted.min(cpu_cap).max(min);
            let reason = if cpu_cap < wanted { ScaleReason::CpuBound } else { ScaleReason::Queue };
            return change(to, reason);
        }
        if depth > 0 {
            return None;
        }
        let since = *self.idle_since.get_or_insert(now);
        if now.duration_since(since) < self.bounds.idle_after {
            return None;
        }
        let to = self.idle_peak.clamp(min, max.max(min));
        self.idle_since = Some(now);
        self.idle_peak = active;
        // Idle never grows the count.
        (to < workers).then_some(Decision { to, reason: ScaleReason::Idle })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(depth: usize, active: usize, workers: usize, busy: f64) -> Sample {
        Sample { depth, active, workers, busy: Some(busy), throttled: 0, cores: 2 }
    }

    #[tokio::test(start_paused = true)]
    async fn doubles_on_io_holds_at_the_cores_on_cpu_and_halves_when_pushed_back() {
        let now = Instant::now();
        let mut policy = Policy::new(AdaptiveWorkers::new(1, 64));
        let grew = policy.decide(sample(10, 4, 4, 0.01), now);
        assert_eq!(grew, Some(Decision { to: 8, reason: ScaleReason::Queue }));
        let held = policy.decide(sample(10, 2, 2, 0.9), now);
        assert_eq!(held, None, "CPU-bound at the core count");
        let capped = policy.decide(sample(10, 8, 8, 0.9), now);
        assert_eq!(capped, Some(Decision { to: 2, reason: ScaleReason::CpuBound }));
        let not_all_busy = policy.decide(sample(10, 3, 4, 0.01), now);
        assert_eq!(not_all_busy, None);
        let pushed = Sample { throttled: 3, ..sample(10, 8, 8, 0.01) };
        let pushed = policy.decide(pushed, now);
        assert_eq!(pushed, Some(Decision { to: 4, reason: ScaleReason::Throttled }));
    }

    #[tokio::test(start_paused = true)]
    async fn shrinks_to_the_idle_peak_after_idle_after() {
        let now = Instant::now();
        let mut policy = Policy::new(AdaptiveWorkers::new(2, 64));
        assert_eq!(policy.decide(sample(0, 3, 16, 0.01), now), None);
        let later = now + Duration::from_secs(5);
        let shrunk = policy.decide(sample(0, 0, 16, 0.01), later);
        assert_eq!(shrunk, Some(Decision { to: 3, reason: ScaleReason::Idle }));
        let again = policy.decide(sample(0, 0, 3, 0.01), later + Duration::from_secs(5));
        assert_eq!(again, Some(Decision { to: 2, reason: ScaleReason::Idle }), "to min");
    }
}
