//! Hooks for an informer's metrics: what it asked the server and what it heard back. An
//! exporter implements them ([`crate::metrics::Registry`] does, for Prometheus); an informer
//! built without a provider records nothing.
//!
//! No peer exports these yet (client-go's reflector metrics were removed in 1.15), so the
//! names are ctrlkit's own; see [`crate::metrics`].

use std::sync::Arc;

/// How a request to the server ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RequestResult {
    /// The server answered with success (a list page, an open watch).
    Success,
    /// The request failed: an error status, a transport error, an undecodable answer.
    Error,
}

/// The type of a watch event, as the server named it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WatchEventType {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
    /// `BOOKMARK`.
    Bookmark,
    /// `ERROR`.
    Error,
}

/// What one informer reports.
/// A hook that panics is caught and logged, and costs only that observation. Every hook
/// does nothing by default: an exporter implements those it records, and a hook added later
/// breaks no implementor.
pub trait InformerMetrics: Send + Sync {
    /// One list request (a page) ended.
    fn list_request(&self, result: RequestResult) {
        let _ = result;
    }
    /// One watch request (streaming lists included) was answered.
    fn watch_request(&self, result: RequestResult) {
        let _ = result;
    }
    /// One watch event arrived.
    fn watch_event(&self, event: WatchEventType) {
        let _ = event;
    }
    /// The informer lists again after its first sync (410 Expired, an `ERROR` event).
    fn relist(&self) {}
    /// The store now holds `count` objects.
    fn objects(&self, count: usize) {
        let _ = count;
    }
    /// The cache is now at `resource_version` (a list's, an event's or a bookmark's).
    fn resource_version(&self, resource_version: &str) {
        let _ = resource_version;
    }
    /// An object was skipped: nested deeper than the informer's `max_depth` (512 levels by
    /// default), it is not cached; the informer keeps the others, and an older copy of it
    /// that the cache holds stays as it was (or, on a delete, is removed and told).
    fn object_skipped(&self) {}
    /// The informer read protobuf and met a field its messages lack (a server newer than
    /// this build): it reads JSON from then on and relists. Once per informer at most.
    fn wire_format_fallback(&self) {}
    /// Its last user released the informer: it reports nothing more, and an exporter drops
    /// its series (another informer with the same labels may come later).
    fn released(&self) {}
}

/// The labels of one informer's metrics.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct InformerLabels {
    /// The kind's plural, qualified by its group unless core: `pods`,
    /// `configmapsets.ctrlkit.example.com`.
    pub resource: String,
    /// The namespace listed; empty for all namespaces or a cluster-scoped kind.
    pub namespace: String,
    /// The label and field selectors, `labels;fields`, empty when there are none.
    pub selector: String,
}

impl InformerLabels {
    pub(crate) fn of<K>(lw: &super::ListWatch<K>) -> Self {
        let resource = lw.api_resource();
        let mut selector = String::new();
        if lw.label_selector().is_some() || lw.field_selector().is_some() {
            selector = format!(
                "{};{}",
                lw.label_selector().unwrap_or_default(),
                lw.field_selector().unwrap_or_default()
            );
        }
        Self {
            resource: match resource.group.as_str() {
                "" => resource.plural.clone(),
                group => format!("{}.{group}", resource.plural),
            },
            namespace: lw.namespace().unwrap_or_default().to_owned(),
            selector,
        }
    }
}

/// Makes the metrics of each informer.
pub trait InformerMetricsProvider: Send + Sync {
    /// The metrics of the informer with these labels.
    fn new_informer_metrics(&self, labels: &InformerLabels) -> Arc<dyn InformerMetrics>;
}
