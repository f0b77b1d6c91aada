//! The watches open now, by resource: a gauge, as kube-apiserver's
//! `apiserver_longrunning_requests{verb="WATCH"}`, beside the request counts, which only grow.
//!
//! A watch is open from the moment its stream is set up until its response body is dropped:
//! the stream ended (a timeout, a fault, the server's shutdown) or the client went away (the
//! connection closed, or the in-process client dropped the response).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::model::resources::ResourceType;

/// Open watches by resource, named as kubectl names resources: `configmaps`,
/// `configmapsets.ctrlkit.example.com`.
#[derive(Debug, Default)]
pub(crate) struct OpenWatches(Mutex<BTreeMap<String, u64>>);

impl OpenWatches {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a watch of `rt` open until the returned guard is dropped.
    pub(crate) fn open(self: &Arc<Self>, rt: &ResourceType) -> OpenWatch {
        let resource = rt.resource_name();
        *self.lock().entry(resource.clone()).or_default() += 1;
        OpenWatch { gauge: self.clone(), resource }
    }

    /// The open watches of `resource` (`plural` or `plural.group`).
    pub(crate) fn of(&self, resource: &str) -> u64 {
        self.lock().get(resource).copied().unwrap_or_default()
    }

    /// Every resource with a watch open, and how many.
    pub(crate) fn all(&self) -> BTreeMap<String, u64> {
        self.lock().iter().filter(|(_, n)| **n > 0).map(|(r, n)| (r.clone(), *n)).collect()
    }
}

/// One open watch; counted down when dropped (with the response body that holds it).
pub(crate) struct OpenWatch {
    gauge: Arc<OpenWatches>,
    resource: String,
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        if let Some(n) = self.gauge.lock().get_mut(&self.resource) {
            *n = n.saturating_sub(1);
        }
    }
}
