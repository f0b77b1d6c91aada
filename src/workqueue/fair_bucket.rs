//! The fair retry bucket: the overall token bucket of the default controller rate limiter
//! (client-go's 10 qps, burst 100), with its tokens handed round-robin across fairness keys.
//!
//! client-go's `BucketRateLimiter` reserves a token at `When`: a namespace whose 2,000 keys fail
//! at once reserves the next 190 seconds of the bucket, and a key of another namespace that
//! fails once waits behind all of them. Here a retry first waits its own backoff (the per-item
//! limiter), then joins its fairness key's line at this bucket; a token, when there is one,
//! goes to the next line in rotation. The bucket's total is unchanged (`qps` per second, `burst`
//! at once): only who gets each token changes. It knows nothing of the queue but the groups it
//! rotates over.

use hashbrown::HashTable;
use tokio::time::Instant;

use super::Priority;
use super::fairness::{Groups, Tree};

/// A retry waiting for a token.
pub(crate) struct Gated<T> {
    pub(crate) item: T,
    pub(crate) hash: u64,
    pub(crate) priority: Priority,
}

/// Retries waiting for a token, in one line per flow.
///
/// Invariant: `tree` holds the number of each occupied slot of `items` once, and of each
/// cancelled one (emptied, not yet free: skipped when its turn comes, then freed); free slots
/// are in `free`; `waiting` counts the occupied slots. `tokens` is the bucket's content at
/// `last`, at most `burst`.
pub(crate) struct FairBucket<T> {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
    tree: Tree<u32>,
    items: Vec<Option<Gated<T>>>,
    free: Vec<u32>,
    /// The waiting retries' slots by their item's hash: an item waits here once.
    index: HashTable<u32>,
    waiting: usize,
}

impl<T> FairBucket<T> {
    /// A full bucket of `burst` tokens refilled at `qps` per second.
    pub(crate) fn new(qps: f64, burst: u32) -> Self {
        let qps = if qps.is_nan() || qps < 0.0 { 0.0 } else { qps };
        let burst = f64::from(burst);
        Self {
            qps,
            burst,
            tokens: burst,
            last: None,
            tree: Tree::new(),
            items: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            waiting: 0,
        }
    }

    /// Puts a retry of `flow` in its line; `false` when the item waits here already (it keeps
    /// its place, at the higher priority of the two), as a queued item is deduplicated.
    pub(crate) fn push(&mut self, groups: &Groups, flow: u32, gated: Gated<T>) -> bool
    where
        T: Eq,
    {
        let items = &mut self.items;
        let found = self.index.find(gated.hash, |&s| {
            items[s as usize].as_ref().is_some_and(|g| g.item == gated.item)
        });
        if let Some(&slot) = found {
            // Already waiting: it keeps its place, at the higher of the two priorities.
            let waiting = items[slot as usize].as_mut().expect("an indexed slot is filled");
            waiting.priority = waiting.priority.max(gated.priority);
            return false;
        }
        let hash = gated.hash;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.items[slot as usize] = Some(gated);
                slot
            }
            None => {
                self.items.push(Some(gated));
                u32::try_from(self.items.len() - 1).expect("fewer than 2^32 retries")
            }
        };
        self.tree.push(groups, flow, slot);
        self.waiting += 1;
        let items = &self.items;
        self.index.insert_unique(hash, slot, |&s| {
            items[s as usize].as_ref().expect("an indexed slot is filled").hash
        });
        true
    }

    fn refill(&mut self, now: Instant) {
        let last = *self.last.get_or_insert(now);
        let elapsed = now.saturating_duration_since(last).as_secs_f64();
        if self.qps.is_infinite() {
            self.tokens = self.burst.max(1.0);
        } else {
            self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        }
        self.last = Some(now.max(last));
    }

    /// Takes `item`'s retry out, if it waits here (added meanwhile by an earlier deadline, as
    /// client-go's waiting items keep the earlier of two adds); true if it did. Its place in
    /// its line is skipped, and costs no token. Returns the retry's priority.
    pub(crate) fn cancel(&mut self, item: &T, hash: u64) -> Option<Priority>
    where
        T: Eq,
    {
        let items = &self.items;
        let Ok(found) = self
            .index
            .find_entry(hash, |&s| items[s as usize].as_ref().is_some_and(|g| g.item == *item))
        else {
            return None;
        };
        let slot = found.remove().0;
        self.waiting -= 1;
        self.items[slot as usize].take().map(|g| g.priority)
    }

    /// The next retry a token is free for now, taking the token.
    pub(crate) fn release(&mut self, now: Instant) -> Option<Gated<T>> {
        if self.tree.is_empty() {
            return None;
        }
        self.refill(now);
        if self.tokens < 1.0 {
            return None;
        }
        let (items, free) = (&self.items, &mut self.free);
        // A cancelled retry's place is skipped (and its slot freed) in the same turn.
        let keep = |&s: &u32| {
            let kept = items[s as usize].is_some();
            if !kept {
                free.push(s);
            }
            kept
        };
        let Some(slot) = self.tree.pop(keep, |_| false) else {
            self.shrink();
            return None;
        };
        self.tokens -= 1.0;
        self.free.push(slot);
        self.waiting -= 1;
        let gated = self.items[slot as usize].take();
        if let Some(g) = &gated
            && let Ok(e) = self.index.find_entry(g.hash, |&s| s == slot)
        {
            e.remove();
        }
        self.shrink();
        gated
    }

    /// Once the last retry went: gives back what a burst of retries took.
    fn shrink(&mut self) {
        if self.tree.is_empty() && self.items.capacity() > 1024 {
            self.items = Vec::new();
            self.free = Vec::new();
            self.index = HashTable::new();
        }
    }

    /// When the next token comes for a waiting retry (`None` when none waits, or never).
    pub(crate) fn next_release(&self) -> Option<Instant> {
        if self.tree.is_empty() || self.qps == 0.0 {
            return None;
        }
        let last = self.last?;
        let missing = (1.0 - self.tokens).max(0.0);
        let wait = std::time::Duration::try_from_secs_f64(missing / self.qps).ok()?;
        last.checked_add(wait)
    }

    /// The flows of the retries released or cleared since the last call, one per retry: the
    /// queue gives each its user back.
    pub(crate) fn released(&mut self) -> std::vec::Drain<'_, u32> {
        self.tree.released()
    }

    /// Retries waiting for a token.
    pub(crate) fn len(&self) -> usize {
        self.waiting
    }

    /// Drops every waiting retry (at shut down).
    pub(crate) fn clear(&mut self) {
        self.tree.clear();
        self.waiting = 0;
        self.items = Vec::new();
        self.free = Vec::new();
        self.index = HashTable::new();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::workqueue::FairnessKey;

    #[test]
    fn tokens_go_round_robin_and_keep_the_buckets_total() {
        let mut groups = Groups::default();
        let noisy = groups.flow(FairnessKey::new().level("noisy"));
        let quiet = groups.flow(FairnessKey::new().level("quiet"));
        let mut bucket = FairBucket::new(10.0, 2);
        let t0 = Instant::now();
        for i in 0..10 {
            bucket.push(&groups, noisy, Gated { item: i, hash: 0, priority: Priority::NORMAL });
        }
        let take = |b: &mut FairBucket<i32>, at| b.release(at).map(|g| g.item);
        assert_eq!(take(&mut bucket, t0), Some(0));
        assert_eq!(take(&mut bucket, t0), Some(1));
        assert_eq!(take(&mut bucket, t0), None, "burst spent");
        bucket.push(&groups, quiet, Gated { item: 100, hash: 0, priority: Priority::NORMAL });
        assert_eq!(bucket.next_release(), Some(t0 + Duration::from_millis(100)));
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(take(&mut bucket, t1), Some(2), "the flood's turn came first");
        assert_eq!(take(&mut bucket, t1 + Duration::from_millis(100)), Some(100));
        assert_eq!(bucket.len(), 7);
    }
}
