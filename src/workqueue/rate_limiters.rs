//! Rate limiters: how long an item waits before it is retried, as client-go's
//! `default_rate_limiters.go`. Each is safe to share between threads; per-item limiters keep a
//! failure count per item until [`RateLimiter::forget`].

use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use hashbrown::HashTable;
use parking_lot::Mutex;
use tokio::time::Instant;

/// Decides how long an item waits before it is added again.
pub trait RateLimiter<T>: Send + Sync {
    /// How long `item` should wait now. Per-item limiters count this as one more failure.
    fn when(&self, item: &T) -> Duration;
    /// Stops tracking `item`: its failure count goes back to zero.
    fn forget(&self, item: &T);
    /// How many times `item` has failed since it was last forgotten.
    fn num_requeues(&self, item: &T) -> u32;
}

impl<T, R: RateLimiter<T> + ?Sized> RateLimiter<T> for Box<R> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

/// Per-item failure counts, shared by the per-item limiters: each item hashed once per call
/// (with foldhash, seeded per table, as the queue hashes), and cloned only when it first fails.
struct Failures<T> {
    table: Mutex<HashTable<(T, u32)>>,
    hasher: foldhash::quality::RandomState,
}

impl<T> std::fmt::Debug for Failures<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Without the counts: formatting must not take the lock (a caller may hold it).
        f.debug_struct("Failures").finish_non_exhaustive()
    }
}

impl<T: Clone + Eq + Hash> Failures<T> {
    fn new() -> Self {
        Self { table: Mutex::new(HashTable::new()), hasher: Default::default() }
    }

    /// Counts one more failure of `item` and returns the count before it.
    fn record(&self, item: &T) -> u32 {
        let hash = self.hasher.hash_one(item);
        let mut failures = self.table.lock();
        match failures.find_mut(hash, |(k, _)| k == item) {
            Some((_, count)) => {
                let before = *count;
                *count = count.saturating_add(1);
                before
            }
            None => {
                failures.insert_unique(hash, (item.clone(), 1), |(k, _)| self.hasher.hash_one(k));
                0
            }
        }
    }

    /// Forgets `item`; the table shrinks once it is a quarter full, so a burst of failing
    /// items does not keep its memory after they are forgotten (Go's maps never shrink).
    fn forget(&self, item: &T) {
        let hash = self.hasher.hash_one(item);
        let mut failures = self.table.lock();
        let Ok(found) = failures.find_entry(hash, |(k, _)| k == item) else {
            return;
        };
        found.remove();
        if failures.capacity() > 64 && failures.len() * 4 < failures.capacity() {
            let keep = failures.len() * 2;
            failures.shrink_to(keep, |(k, _)| self.hasher.hash_one(k));
        }
    }

    fn get(&self, item: &T) -> u32 {
        let hash = self.hasher.hash_one(item);
        self.table.lock().find(hash, |(k, _)| k == item).map_or(0, |(_, count)| *count)
    }
}

/// `base · 2^failures` per item, capped at `max`: client-go's
/// `ItemExponentialFailureRateLimiter`. Never overflows, however many failures.
#[derive(Debug)]
pub struct ItemExponentialFailureRateLimiter<T> {
    failures: Failures<T>,
    base: Duration,
    max: Duration,
}

impl<T: Clone + Eq + Hash> ItemExponentialFailureRateLimiter<T> {
    /// A limiter whose first wait is `base`, doubling per failure up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self { failures: Failures::new(), base, max }
    }
}

/// `base · 2^exp`, or `max` when that is larger or would overflow.
fn exponential(base: Duration, exp: u32, max: Duration) -> Duration {
    let Some(factor) = 1u128.checked_shl(exp).filter(|_| exp < 127) else {
        return max;
    };
    let nanos = base.as_nanos().saturating_mul(factor);
    if nanos >= max.as_nanos() {
        return max;
    }
    // Below `max`, so it fits a Duration.
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    Duration::new((nanos / NANOS_PER_SEC) as u64, (nanos % NANOS_PER_SEC) as u32)
}

impl<T: Clone + Eq + Hash + Send + Sync> RateLimiter<T> for ItemExponentialFailureRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        exponential(self.base, self.failures.record(item), self.max)
    }
    fn forget(&self, item: &T) {
        self.failures.forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.get(item)
    }
}

/// `fast` for the first `max_fast_attempts` failures of an item, then `slow`: client-go's
/// `ItemFastSlowRateLimiter`.
#[derive(Debug)]
pub struct ItemFastSlowRateLimiter<T> {
    failures: Failures<T>,
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
}

impl<T: Clone + Eq + Hash> ItemFastSlowRateLimiter<T> {
    /// A limiter that waits `fast` for `max_fast_attempts` failures, then `slow`.
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        Self { failures: Failures::new(), fast, slow, max_fast_attempts }
    }
}

impl<T: Clone + Eq + Hash + Send + Sync> RateLimiter<T> for ItemFastSlowRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let attempts = self.failures.record(item).saturating_add(1);
        if attempts <= self.max_fast_attempts { self.fast } else { self.slow }
    }
    fn forget(&self, item: &T) {
        self.failures.forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.get(item)
    }
}

/// One token bucket shared by all items: client-go's `BucketRateLimiter` over
/// `golang.org/x/time/rate`. Holds up to `burst` tokens, refilled at `qps` per second; every
/// `when` takes a token, and waits for it when the bucket is empty.
#[derive(Debug)]
pub struct BucketRateLimiter {
    qps: f64,
    burst: f64,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// Tokens at `last`; negative when reservations run ahead of the refill.
    tokens: f64,
    last: Option<Instant>,
}

impl BucketRateLimiter {
    /// A bucket of `burst` tokens refilled at `qps` per second. An infinite `qps` never waits;
    /// a `qps` of zero, negative or NaN never refills, so after the burst every wait is
    /// effectively forever.
    pub fn new(qps: f64, burst: u32) -> Self {
        let qps = if qps.is_nan() || qps < 0.0 { 0.0 } else { qps };
        let burst = f64::from(burst);
        Self { qps, burst, bucket: Mutex::new(Bucket { tokens: burst, last: None }) }
    }

    /// Reserves one token at `now` and returns how long until it is available.
    fn reserve(&self, now: Instant) -> Duration {
        if self.qps.is_infinite() {
            return Duration::ZERO;
        }
        let mut bucket = self.bucket.lock();
        let last = *bucket.last.get_or_insert(now);
        // Reservations can move `last` into the future relative to a caller's `now` on another
        // thread; elapsed time never goes negative.
        let elapsed = now.saturating_duration_since(last).as_secs_f64();
        let tokens = (bucket.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        bucket.tokens = tokens;
        bucket.last = Some(now.max(last));
        if tokens >= 0.0 {
            Duration::ZERO
        } else if self.qps == 0.0 {
            Duration::MAX
        } else {
            Duration::try_from_secs_f64(-tokens / self.qps).unwrap_or(Duration::MAX)
        }
    }
}

impl<T> RateLimiter<T> for BucketRateLimiter {
    fn when(&self, _: &T) -> Duration {
        self.reserve(Instant::now())
    }
    fn forget(&self, _: &T) {}
    fn num_requeues(&self, _: &T) -> u32 {
        0
    }
}

/// The longest wait of several limiters; `forget` forgets in all of them: client-go's
/// `MaxOfRateLimiter`.
pub struct MaxOfRateLimiter<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> MaxOfRateLimiter<T> {
    /// Combines `limiters`; with none, every wait is zero.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        Self { limiters }
    }
}

impl<T> std::fmt::Debug for MaxOfRateLimiter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaxOfRateLimiter").field("limiters", &self.limiters.len()).finish()
    }
}

impl<T> RateLimiter<T> for MaxOfRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        // Every limiter must see the failure, so no short-circuit.
        self.limiters.iter().map(|l| l.when(item)).max().unwrap_or(Duration::ZERO)
    }
    fn forget(&self, item: &T) {
        self.limiters.iter().for_each(|l| l.forget(item));
    }
    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters.iter().map(|l| l.num_requeues(item)).max().unwrap_or(0)
    }
}

/// client-go's `DefaultControllerRateLimiter`: per-item exponential backoff from 5 ms to
/// 1000 s, and an overall 10 qps / burst 100 token bucket; the longer wait wins.
pub fn default_controller_rate_limiter<T>() -> MaxOfRateLimiter<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(
            Duration::from_millis(5),
            Duration::from_secs(1000),
        )),
        Box::new(BucketRateLimiter::new(10.0, 100)),
    ])
}
