//! [`report_write`] and [`report_written`]: a write made through another client than a
//! [`recording_client`](super::recording_client), reported by hand for the primary kind, so
//! that its key's next reconcile waits for the primary cache to hold it (the `own_writes`
//! module's contract).

use std::sync::atomic::Ordering;

use kube_client::Resource;

use super::context::ReconcileContext;

/// Tells the controller that the reconcile running on this task wrote an object of the
/// primary kind and the server answered with `resource_version`: this key's next reconcile
/// will not start before the primary cache holds that write (see the `own_writes` module). Returns
/// whether it was recorded: not outside a reconcile, nor for a version that is not an
/// integer. Writes through a [`recording_client`](super::recording_client) need no report.
pub fn report_write(resource_version: &str) -> bool {
    let Ok(rv) = resource_version.parse::<u64>() else { return false };
    let Some(context) = ReconcileContext::current() else { return false };
    context.reported.fetch_max(rv, Ordering::Relaxed);
    true
}

/// [`report_write`] with the object the server returned from a write.
pub fn report_written<K: Resource>(object: &K) -> bool {
    object.meta().resource_version.as_deref().is_some_and(report_write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::ObjectKey;

    #[tokio::test]
    async fn reports_are_kept_per_reconcile_and_only_inside_one() {
        assert!(!report_write("7"), "outside a reconcile nothing is recorded");
        let context = ReconcileContext::new("c", ObjectKey::cluster("a"), Default::default(), None);
        ReconcileContext::scope(context.clone(), async {
            assert!(report_write("7"));
            assert!(report_write("5"));
            assert!(!report_write("not-a-number"));
        })
        .await;
        assert_eq!(context.reported.load(Ordering::Relaxed), 7, "the highest");
    }
}
