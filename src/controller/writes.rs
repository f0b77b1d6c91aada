//! Reading one's own writes: a reconcile after the controller's own write waits until the
//! cache has that write (Kubernetes' stale-controller mitigation, KEP-5647, which upstream
//! built into kube-controller-manager's controllers only).
//!
//! A reconciler that updates its object and is triggered again before the watch brought the
//! update back reads the old object from the cache and acts on it twice (a count incremented
//! twice, a pod created twice). A reconciler that reports the resourceVersion the server
//! answered its write with ([`report_write`], or [`report_written`] with the object the server
//! returned) makes that key's next reconcile wait until the primary informer's cache reached
//! that version: the write itself, or a later event or bookmark, which holds it. The wait is
//! bounded ([`Config::stale_cache_timeout`](super::Config::stale_cache_timeout), 5 s by
//! default); past it the reconcile proceeds, logged and counted
//! ([`ControllerStats::stale_cache_timeouts`](super::ControllerStats::stale_cache_timeouts)).
//!
//! Reports are read from the reconcile's task (a task-local): a write reported from a task
//! the reconciler spawned is not seen. Versions are compared as integers; one that is not an
//! integer is not waited for. Writes to other kinds (owned objects) are compared with the
//! primary's cache too, whose version moves only with its own events and bookmarks, so a
//! report of them may wait until the timeout: report writes of the primary kind.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use kube_client::Resource;

use crate::cache::ObjectKey;

tokio::task_local! {
    /// The highest resourceVersion the reconcile running on this task reported.
    static REPORTED: Arc<AtomicU64>;
}

/// Tells the controller that the reconcile running on this task wrote an object and the
/// server answered with `resource_version`: this key's next reconcile will not start before
/// the cache holds that write (see the module docs). Returns whether it was recorded: not
/// outside a reconcile, nor for a version that is not an integer.
pub fn report_write(resource_version: &str) -> bool {
    let Ok(rv) = resource_version.parse::<u64>() else { return false };
    REPORTED.try_with(|reported| reported.fetch_max(rv, Ordering::Relaxed)).is_ok()
}

/// [`report_write`] with the object the server returned from a write.
pub fn report_written<K: Resource>(object: &K) -> bool {
    object.meta().resource_version.as_deref().is_some_and(report_write)
}

/// Runs `reconcile` with a place for its reports; returns its output and the highest
/// version reported (0 for none).
pub(crate) async fn recording<F: Future>(reconcile: F) -> (F::Output, u64) {
    let reported = Arc::new(AtomicU64::new(0));
    let output = REPORTED.scope(reported.clone(), reconcile).await;
    (output, reported.load(Ordering::Relaxed))
}

/// The versions each key's next reconcile waits for.
#[derive(Default)]
pub(crate) struct PendingWrites(Mutex<HashMap<ObjectKey, u64>>);

impl PendingWrites {
    /// Records that `key`'s next reconcile waits for `rv` (the higher of two reports).
    pub(crate) fn insert(&self, key: &ObjectKey, rv: u64) {
        let mut pending = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = pending.entry(key.clone()).or_default();
        *entry = (*entry).max(rv);
    }

    /// What `key`'s reconcile waits for, taken.
    pub(crate) fn take(&self, key: &ObjectKey) -> Option<u64> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reports_are_kept_per_reconcile_and_only_inside_one() {
        assert!(!report_write("7"), "outside a reconcile nothing is recorded");
        let ((), reported) = recording(async {
            assert!(report_write("7"));
            assert!(report_write("5"));
            assert!(!report_write("not-a-number"));
        })
        .await;
        assert_eq!(reported, 7, "the highest");
        let ((), reported) = recording(async {}).await;
        assert_eq!(reported, 0);
    }
}
