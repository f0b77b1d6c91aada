//! Backoff with jitter after list and watch failures, as client-go's reflector: 800 ms
//! doubling to 30 s, each wait stretched by up to 100% at random, reset after a healthy
//! period (2 minutes) without failure.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use tokio::time::Instant;

/// Backoff settings of an informer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffConfig {
    /// The first wait.
    pub initial: Duration,
    /// The longest wait (before jitter).
    pub max: Duration,
    /// A failure this long after the previous one starts again from `initial`.
    pub reset_after: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            reset_after: Duration::from_secs(120),
        }
    }
}

/// The backoff state of one informer.
#[derive(Debug)]
pub(crate) struct Backoff {
    config: BackoffConfig,
    next: Duration,
    last_failure: Option<Instant>,
    random: RandomState,
    draws: u64,
}

impl Backoff {
    pub(crate) fn new(config: BackoffConfig) -> Self {
        Self {
            config,
            next: config.initial,
            last_failure: None,
            random: RandomState::new(),
            draws: 0,
        }
    }

    /// The wait after a failure now: the current step plus up to 100% jitter.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        if self.last_failure.is_some_and(|at| now.duration_since(at) >= self.config.reset_after) {
            self.next = self.config.initial;
        }
        self.last_failure = Some(now);
        let base = self.next;
        self.next = (self.next * 2).min(self.config.max);
        self.draws += 1;
        let fraction = (self.random.hash_one(self.draws) % 1000) as f64 / 1000.0;
        base + base.mul_f64(fraction)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn doubles_to_the_cap_with_jitter_and_resets_after_a_healthy_period() {
        let mut b = Backoff::new(BackoffConfig::default());
        let mut bases = Vec::new();
        for _ in 0..8 {
            let d = b.next_delay();
            let base = bases.last().map_or(Duration::from_millis(800), |p: &Duration| {
                (*p * 2).min(Duration::from_secs(30))
            });
            assert!(d >= base && d < base * 2, "{d:?} not in [{base:?}, 2x)");
            bases.push(base);
        }
        assert_eq!(*bases.last().unwrap(), Duration::from_secs(30));
        tokio::time::advance(Duration::from_secs(121)).await;
        let d = b.next_delay();
        assert!(d < Duration::from_millis(1600), "reset after a healthy period: {d:?}");
    }
}
