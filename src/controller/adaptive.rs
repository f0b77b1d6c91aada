//! [`AdaptiveWorkers`]: an opt-in policy that sets a running controller's worker count from
//! what its queue and reconciles do, within bounds.
//!
//! # Contract
//! Every `interval` the controller's run looks at: the queue's dispatchable depth
//! ([`WorkQueue::len_available`](crate::workqueue::WorkQueue::len_available): ready keys a
//! worker may take now, never those a per-key in-flight cap holds back, nor keys parked for
//! the controller's own writes), how many workers are busy, how many cores' worth of CPU the
//! reconciles held since the last look (the time spent in their polls over the look's span;
//! the cores are the runtime's worker threads), and whether the API server pushed back
//! ([`ClientPressure::throttled`] rose). It then decides, first match:
//! 1. pushed back: one step down (halved, not below `min`, never up): `throttled`; and no
//!    growth until `idle_after` has passed without a push back.
//! 2. keys waiting, every worker busy, and the reconciles holding the cores (80% of them or
//!    more): more workers than cores would only wait for one, so a count above the cores is
//!    halved, not below the cores: `cpu_bound`; and no growth for `idle_after`.
//! 3. keys waiting and every worker busy, and a runtime thread found nothing to run since the
//!    last look (where none did, the cores are full, whoever fills them): doubled, up to `max` and
//!    to the workers the cores can run at the CPU each busy worker used: `queue`, or
//!    `cpu_bound` where that cap holds it. Never down.
//! 4. nothing waiting for `idle_after`: down to the most workers busy at one look meanwhile (not
//!    below `min`): `idle`.
//! 5. else: no change.
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
    /// Cores' worth of CPU the reconciles held since the last look.
    pub(super) cpu: f64,
    /// No worker thread of the runtime parked since the last look: each always had a task to
    /// run, whoever's (other controllers, informers, webhooks).
    pub(super) cores_full: bool,
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

/// Reconciles holding this share of the cores or more are CPU-bound: the cores, not more
/// workers, set the pace.
const SATURATED: f64 = 0.8;

/// The policy's memory between decisions.
pub(super) struct Policy {
    bounds: AdaptiveWorkers,
    /// No growth before this: a push back or a CPU-bound step down was seen lately.
    hold_until: Option<Instant>,
    /// Since when nothing waited, and the most workers busy at once since.
    idle_since: Option<Instant>,
    idle_peak: usize,
}

impl Policy {
    pub(super) fn new(bounds: AdaptiveWorkers) -> Self {
        Self { bounds, hold_until: None, idle_since: None, idle_peak: 0 }
    }

    /// The decision for `sample`, taken at `now`; `None` to hold.
    pub(super) fn decide(&mut self, sample: Sample, now: Instant) -> Option<Decision> {
        let Sample { depth, active, workers, cpu, cores_full, throttled, cores } = sample;
        let (min, max, cores) = (self.bounds.min, self.bounds.max, cores.max(1));
        if depth > 0 {
            (self.idle_since, self.idle_peak) = (None, 0);
        } else {
            self.idle_peak = self.idle_peak.max(active);
        }
        let change = |to: usize, reason| (to != workers).then_some(Decision { to, reason });
        let hold = now + self.bounds.idle_after;
        if throttled > 0 {
            self.hold_until = Some(hold);
            // Never up, even from a count set below `min` by hand.
            return change((workers / 2).max(min).min(workers), ScaleReason::Throttled);
        }
        if depth > 0 && active >= workers {
            if cpu >= SATURATED * cores as f64 {
                self.hold_until = Some(hold);
                let to = (workers / 2).max(cores).max(min).min(workers);
                return change(to, ScaleReason::CpuBound);
            }
            // Held after a push back; and the cores are full whoever fills them: another
            // controller's reconciles count as much as this one's.
            if self.hold_until.is_some_and(|until| now < until) || cores_full {
                return None;
            }
            // Workers the cores can run, at the CPU each busy worker used; never a step down.
            let cpu_cap = match cpu > 0.0 {
                true => (cores as f64 * active as f64 / cpu).floor() as usize,
                false => max,
            };
            let wanted = max.min(workers.saturating_mul(2));
            let to = wanted.min(cpu_cap.max(workers)).max(min);
            let reason = if cpu_cap < wanted { ScaleReason::CpuBound } else { ScaleReason::Queue };
            // Never down for waiting keys, even from a count set above `max` by hand.
            return (to > workers).then_some(Decision { to, reason });
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

    /// A look on two cores whose reconciles held `cpu` cores' worth.
    fn sample(depth: usize, active: usize, workers: usize, cpu: f64) -> Sample {
        Sample { depth, active, workers, cpu, cores_full: false, throttled: 0, cores: 2 }
    }

    #[tokio::test(start_paused = true)]
    async fn doubles_on_io_and_stops_at_what_the_cores_can_run() {
        let now = Instant::now();
        let mut policy = Policy::new(AdaptiveWorkers::new(1, 64));
        let grew = policy.decide(sample(10, 4, 4, 0.04), now);
        assert_eq!(grew, Some(Decision { to: 8, reason: ScaleReason::Queue }));
        // One worker spinning holds one of two cores: two can run, not more.
        let one = policy.decide(sample(10, 1, 1, 1.0), now);
        assert_eq!(one, Some(Decision { to: 2, reason: ScaleReason::Queue }));
        let capped = policy.decide(sample(10, 2, 2, 1.2), now);
        assert_eq!(capped, Some(Decision { to: 3, reason: ScaleReason::CpuBound }));
        let not_all_busy = policy.decide(sample(10, 3, 4, 0.01), now);
        assert_eq!(not_all_busy, None);
    }

    #[tokio::test(start_paused = true)]
    async fn reconciles_holding_the_cores_bring_a_count_above_them_down_and_hold_it() {
        let now = Instant::now();
        let mut policy = Policy::new(AdaptiveWorkers::new(1, 64));
        let at_cores = policy.decide(sample(10, 2, 2, 1.9), now);
        assert_eq!(at_cores, None, "CPU-bound at the core count: held");
        let halved = policy.decide(sample(10, 8, 8, 1.9), now);
        assert_eq!(halved, Some(Decision { to: 4, reason: ScaleReason::CpuBound }));
        let cores = policy.decide(sample(10, 4, 4, 1.9), now);
        assert_eq!(cores, Some(Decision { to: 2, reason: ScaleReason::CpuBound }));
        // Below the cores' share a moment later: no growth yet.
        let later = now + Duration::from_secs(1);
        assert_eq!(policy.decide(sample(10, 2, 2, 0.5), later), None);
        let after = now + Duration::from_secs(5);
        let grew = policy.decide(sample(10, 2, 2, 0.5), after);
        assert_eq!(grew, Some(Decision { to: 4, reason: ScaleReason::Queue }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_push_back_halves_and_holds_growth_until_idle_after_passed_without_one() {
        let now = Instant::now();
        let mut policy = Policy::new(AdaptiveWorkers::new(1, 64));
        let pushed = Sample { throttled: 3, ..sample(10, 8, 8, 0.01) };
        let pushed = policy.decide(pushed, now);
        assert_eq!(pushed, Some(Decision { to: 4, reason: ScaleReason::Throttled }));
        // A quiet look between sparse 429s does not grow it back.
        let quiet = now + Duration::from_secs(4);
        assert_eq!(policy.decide(sample(10, 4, 4, 0.01), quiet), None);
        let after = now + Duration::from_secs(5);
        let grew = policy.decide(sample(10, 4, 4, 0.01), after);
        assert_eq!(grew, Some(Decision { to: 8, reason: ScaleReason::Queue }));
    }

    #[tokio::test(start_paused = true)]
    async fn cores_kept_busy_by_others_stop_growth() {
        let now = Instant::now();
        let mut policy = Policy::new(AdaptiveWorkers::new(1, 64));
        // This controller's reconciles hold one core of two; another's hold the other.
        let full = Sample { cores_full: true, ..sample(10, 1, 1, 1.0) };
        assert_eq!(policy.decide(full, now), None);
        let room = sample(10, 1, 1, 1.0);
        assert_eq!(policy.decide(room, now), Some(Decision { to: 2, reason: ScaleReason::Queue }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_count_set_outside_the_bounds_is_never_moved_the_wrong_way() {
        let now = Instant::now();
        let mut policy = Policy::new(AdaptiveWorkers::new(4, 8));
        let pushed = Sample { throttled: 1, ..sample(10, 1, 1, 0.01) };
        assert_eq!(policy.decide(pushed, now), None, "no growth under a push back");
        let mut policy = Policy::new(AdaptiveWorkers::new(4, 8));
        assert_eq!(policy.decide(sample(10, 100, 100, 0.01), now), None, "no shrink for keys");
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
