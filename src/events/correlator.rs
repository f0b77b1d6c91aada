//! What becomes of each event before it is written: client-go's per-object spam filter
//! (`tools/record`) and its series of isomorphic events (`tools/events`).
//!
//! - **Spam filter**: a token bucket per reporting controller, instance and object, 25 events
//!   of burst refilled at one per 5 minutes (client-go's `EventSourceObjectSpamFilter`
//!   defaults), over the 4,096 objects seen last.
//! - **Series**: events that agree on action, reason, reporting controller, the object they
//!   regard and the related object are one series, whatever their notes (client-go's
//!   isomorphic key). The first is created; repeats count into its `series` (count and last
//!   observed time) instead of making an object each. A series is written when it starts
//!   repeating, at most every 30 s while it grows, and when it ends (6 minutes without a
//!   repeat, client-go's `finishTime`) or the recorder flushes. (client-go writes a growing
//!   series every 30 minutes; its first series write says count 1 where ctrlkit's says 2,
//!   the occurrences so far.)

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use tokio::time::Instant;

/// client-go's spam filter burst.
pub(crate) const SPAM_BURST: f64 = 25.0;
/// client-go's spam filter refill: one event per 5 minutes.
pub(crate) const SPAM_REFILL: Duration = Duration::from_secs(300);
/// client-go's LRU size for spam records and aggregation.
pub(crate) const CACHE_ENTRIES: usize = 4096;
/// A series that has not repeated for this long is finished (client-go's `finishTime`).
pub(crate) const SERIES_FINISH: Duration = Duration::from_secs(6 * 60);
/// A growing series is written at most this often.
pub(crate) const SERIES_REFRESH: Duration = Duration::from_secs(30);

/// An object, as events refer to it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub(crate) struct ObjectId {
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
    uid: String,
}

impl ObjectId {
    pub(crate) fn of(reference: &ObjectReference) -> Self {
        Self {
            api_version: reference.api_version.clone().unwrap_or_default(),
            kind: reference.kind.clone().unwrap_or_default(),
            namespace: reference.namespace.clone().unwrap_or_default(),
            name: reference.name.clone().unwrap_or_default(),
            uid: reference.uid.clone().unwrap_or_default(),
        }
    }
}

/// The key of a series: client-go's isomorphic key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SeriesKey {
    pub(crate) action: String,
    pub(crate) reason: String,
    pub(crate) regarding: ObjectId,
    pub(crate) related: Option<ObjectId>,
}

/// A token bucket per object, over the last [`CACHE_ENTRIES`] objects.
#[derive(Default)]
pub(crate) struct SpamFilter {
    buckets: HashMap<ObjectId, (f64, Instant)>,
}

impl SpamFilter {
    /// Whether an event about `object` may go now (taking a token if so).
    pub(crate) fn allow(&mut self, object: &ObjectId, now: Instant) -> bool {
        if !self.buckets.contains_key(object) && self.buckets.len() >= CACHE_ENTRIES {
            // Forget the object heard of longest ago, as an LRU would.
            if let Some(oldest) =
                self.buckets.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone())
            {
                self.buckets.remove(&oldest);
            }
        }
        let (tokens, at) = self.buckets.entry(object.clone()).or_insert((SPAM_BURST, now));
        let refilled = now.saturating_duration_since(*at).as_secs_f64() / SPAM_REFILL.as_secs_f64();
        *tokens = (*tokens + refilled).min(SPAM_BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One series as recorded: where it was written and how far it got.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// The event object's namespace and name.
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// Occurrences so far.
    pub(crate) count: i32,
    /// Occurrences the server has been told of.
    pub(crate) written: i32,
    pub(crate) last_seen: Instant,
    pub(crate) last_written: Instant,
}

impl Series {
    /// Whether the server should hear of the repeats now: at the first repeat, then at most
    /// every [`SERIES_REFRESH`].
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.count > self.written
            && (self.written == 1
                || now.saturating_duration_since(self.last_written) >= SERIES_REFRESH)
    }

    /// Whether the series ended: no repeat for [`SERIES_FINISH`].
    pub(crate) fn finished(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_seen) >= SERIES_FINISH
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str) -> ObjectId {
        ObjectId { name: name.into(), ..ObjectId::default() }
    }

    #[tokio::test(start_paused = true)]
    async fn the_spam_filter_allows_a_burst_of_25_then_one_per_five_minutes_per_object() {
        let mut filter = SpamFilter::default();
        let now = Instant::now();
        let allowed = (0..40).filter(|_| filter.allow(&object("a"), now)).count();
        assert_eq!(allowed, 25);
        assert!(filter.allow(&object("b"), now), "another object has its own bucket");
        tokio::time::advance(Duration::from_secs(299)).await;
        assert!(!filter.allow(&object("a"), Instant::now()));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(filter.allow(&object("a"), Instant::now()), "one token after five minutes");
        assert!(!filter.allow(&object("a"), Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_series_is_due_at_its_first_repeat_then_every_30_seconds_and_ends_after_6_minutes() {
        let now = Instant::now();
        let mut series = Series {
            namespace: "ns".into(),
            name: "e".into(),
            count: 1,
            written: 1,
            last_seen: now,
            last_written: now,
        };
        assert!(!series.due(now), "nothing new");
        series.count = 2;
        assert!(series.due(now), "the first repeat is written at once");
        series.written = 2;
        series.count = 3;
        assert!(!series.due(now + Duration::from_secs(10)));
        assert!(series.due(now + SERIES_REFRESH));
        assert!(!series.finished(now + Duration::from_secs(359)));
        assert!(series.finished(now + SERIES_FINISH));
    }
}
