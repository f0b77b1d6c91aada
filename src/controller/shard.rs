//! A sharded controller's part in its ring ([`ControllerBuilder::shard`]): it caches only the
//! objects labelled to its shard, gives up an object the sharder marks for draining, and tells
//! an object that moved away from one that was deleted.
//!
//! [`ControllerBuilder::shard`]: super::ControllerBuilder::shard
//!
//! In a ring of [`Assignment::ShardSelectors`](crate::sharding::Assignment) the gate is the
//! ring's range check instead (`sharding::range_member`): reconcile only objects whose place
//! is in the ranges this shard holds now, reported done after, so that it can give ranges up
//! once their reconciles have ended.
//!
//! In label mode, before each reconcile the worker asks [`ShardMember::gate`]:
//! - the cached object carries the drain label: the controller removes both labels (a merge
//!   patch guarded by the object's resourceVersion) instead of reconciling. The queue hands a
//!   key to one worker at a time, so any reconcile of the key has finished by then, and no
//!   other starts here: the object leaves this shard's cache. Only then does the sharder label
//!   it to its new shard, so no key is reconciled by two replicas at once;
//! - the object is not cached: if this shard gave it up, it is skipped; else the server is
//!   asked. Gone (404): a delete, reconciled as one. There but labelled to another shard (a
//!   move from this shard while it was expired, or from its own hand-off): skipped, not
//!   mistaken for a delete. There and labelled to this shard: the cache lags; looked at again
//!   shortly (not rate limited: nothing failed).

use std::collections::HashSet;
use std::sync::Arc;

use kube_client::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube_client::{Api, Client, Resource, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;

use crate::cache::ObjectKey;
use crate::sharding::range_member::{Admission, RangeMember, place_of};
use crate::sharding::{Ring, drain_label, shard_label};

/// What the worker does with a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Reconcile it (with the cached object, or `None` for a delete).
    Reconcile,
    /// Not this shard's (any more): forget it.
    Skip,
    /// The server could not be asked: try again later (rate limited).
    Retry,
    /// The cache lags the server: look again shortly (not rate limited: nothing failed).
    Later,
}

/// How soon a key whose cache lags the server is looked at again.
pub(crate) const CACHE_LAG_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// How many times a drained object's release is tried again on a conflict (a write that
/// came between the cached version and the release), each with the version read then.
const RELEASE_ATTEMPTS: usize = 4;

/// One shard of a ring, as a controller takes part in it.
pub(crate) struct ShardMember {
    shard: String,
    shard_label: String,
    drain_label: String,
    client: Client,
    resource: ApiResource,
    /// Keys this shard gave up, until their object leaves its cache (or comes back).
    released: Mutex<HashSet<ObjectKey>>,
    /// In a ring of shard selectors, the ranges this shard holds.
    ranges: Option<Arc<RangeMember>>,
}

impl std::fmt::Debug for ShardMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardMember").field("selector", &self.selector()).finish_non_exhaustive()
    }
}

impl ShardMember {
    pub(crate) fn new(ring: &Ring, shard: &str, client: Client, resource: ApiResource) -> Self {
        Self {
            shard: shard.to_owned(),
            shard_label: shard_label(ring.name()),
            drain_label: drain_label(ring.name()),
            client,
            resource,
            released: Mutex::new(HashSet::new()),
            ranges: None,
        }
    }

    /// The shard of a ring of shard selectors, its ranges held by `ranges`.
    pub(crate) fn with_ranges(mut self, ranges: Arc<RangeMember>) -> Self {
        self.ranges = Some(ranges);
        self
    }

    /// The ranges it holds, in a ring of shard selectors.
    pub(crate) fn ranges(&self) -> Option<&Arc<RangeMember>> {
        self.ranges.as_ref()
    }

    /// Whether the sharder labels its objects (a ring in label mode).
    pub(crate) fn is_labelled(&self) -> bool {
        self.ranges.is_none()
    }

    /// A reconcile the gate let through has ended.
    pub(crate) fn done(&self, key: &ObjectKey) {
        if let Some(ranges) = &self.ranges {
            ranges.done(key);
        }
    }

    /// The label selector of this shard's objects.
    pub(crate) fn selector(&self) -> String {
        format!("{}={}", self.shard_label, self.shard)
    }

    /// `selector` and this shard's selector, as one label selector (`selector` as it is when
    /// it selects the shard already, as the ListWatch a reconciler reads its cache from may).
    pub(crate) fn and_selector(&self, selector: Option<&str>) -> String {
        let own = self.selector();
        match selector {
            Some(other) if other.split(',').any(|s| s.trim() == own) => other.to_owned(),
            Some(other) => format!("{other},{own}"),
            None => own,
        }
    }

    fn released(&self) -> parking_lot::MutexGuard<'_, HashSet<ObjectKey>> {
        self.released.lock()
    }

    fn api(&self, key: &ObjectKey) -> Api<DynamicObject> {
        match &key.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &self.resource),
            None => Api::all_with(self.client.clone(), &self.resource),
        }
    }

    /// What to do with `key`, whose cached object is `cached`; see the module docs.
    pub(crate) async fn gate<K: Resource>(&self, key: &ObjectKey, cached: Option<&K>) -> Gate {
        if let Some(ranges) = &self.ranges {
            let live = async {
                let live = self.api(key).get_metadata_opt(&key.name).await?;
                Ok(live.map(|object| place_of(&object)))
            };
            return match ranges.admit(key, cached, live).await {
                Admission::Admitted => Gate::Reconcile,
                Admission::NotOurs => Gate::Skip,
                Admission::Later => Gate::Later,
                Admission::Retry => Gate::Retry,
            };
        }
        match cached {
            Some(object) if object.labels().contains_key(&self.drain_label) => {
                self.release(key, object.resource_version()).await
            }
            Some(_) => {
                self.released().remove(key);
                Gate::Reconcile
            }
            None if self.released().remove(key) => Gate::Skip,
            None => match crate::cache::get_opt(&self.api(key), &key.name, &self.resource).await {
                Ok(None) => Gate::Reconcile,
                Ok(Some(live)) if live.labels().get(&self.shard_label) == Some(&self.shard) => {
                    Gate::Later
                }
                Ok(Some(_)) => {
                    tracing::debug!(%key, "moved to another shard; not reconciled here");
                    Gate::Skip
                }
                Err(err) => {
                    tracing::warn!(%err, %key, "reading an object gone from the cache failed");
                    Gate::Retry
                }
            },
        }
    }

    /// Gives the object up: removes its shard and drain labels, guarded by the version
    /// read. A conflict (another write since) reads the object again and, while it is still
    /// marked and labelled here, tries with that version: under churn the cache is often a
    /// write behind, and each rate-limited retry would hold the hand-off up.
    async fn release(&self, key: &ObjectKey, mut rv: Option<String>) -> Gate {
        let api = self.api(key);
        let params = PatchParams::default();
        for _ in 0..RELEASE_ATTEMPTS {
            let patch = json!({ "metadata": {
                "resourceVersion": rv,
                "labels": { &self.shard_label: null, &self.drain_label: null },
            } });
            match api.patch_metadata(&key.name, &params, &Patch::Merge(&patch)).await {
                Ok(_) => {
                    tracing::info!(%key, shard = %self.shard, "drained: handed over to the sharder");
                    self.released().insert(key.clone());
                    return Gate::Skip;
                }
                // Deleted meanwhile: the informer's delete event brings the key back.
                Err(kube_client::Error::Api(s)) if s.code == 404 => return Gate::Skip,
                Err(kube_client::Error::Api(s)) if s.code == 409 => {
                    match api.get_metadata_opt(&key.name).await {
                        Ok(None) => return Gate::Skip,
                        Ok(Some(live))
                            if live.labels().contains_key(&self.drain_label)
                                && live.labels().get(&self.shard_label) == Some(&self.shard) =>
                        {
                            rv = live.resource_version();
                        }
                        // No longer marked (the sharder changed its mind): the cache brings
                        // the object as it is now.
                        Ok(Some(_)) => return Gate::Later,
                        Err(err) => {
                            tracing::warn!(%err, %key, "reading a drained object failed; retrying");
                            return Gate::Retry;
                        }
                    }
                }
                Err(err) => {
                    tracing::warn!(%err, %key, "giving up a drained object failed; retrying");
                    return Gate::Retry;
                }
            }
        }
        Gate::Later
    }
}
