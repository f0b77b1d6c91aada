//! The versioned object store: one global resourceVersion counter shared by every kind (like
//! etcd's revision), the objects of each resource type, and a bounded history of changes that
//! serves watches from a past resourceVersion and consistent snapshots for paginated lists.
//!
//! Two horizons make old resourceVersions expire (410), as on kube-apiserver 1.36: the
//! history's own (its size, or [`Store::compact`]), which plays the watch cache's window, and
//! storage compaction ([`Store::compact_storage`], `etcdctl compact`). A resource served from
//! the watch cache (the default) answers watches, continue tokens and exact-version lists
//! from the window even after storage compaction; one served without it (`--watch-cache-sizes=
//! secrets#0` on the real server, [`without_watch_cache`] here) expires at storage compaction.
//!
//! [`without_watch_cache`]: crate::ApiServerBuilder::without_watch_cache
//! Every write happens in a [`Txn`] under one lock; its changes enter the history and the
//! broadcast to open watches in resourceVersion order before the lock is released, so a
//! watcher never sees changes out of order and a list never sees half a write.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock, RwLockReadGuard};

use axum::body::Bytes;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::broadcast;

use crate::model::resources::ResourceType;
use crate::model::status::{ApiError, ApiResult};
use crate::storage::selectors::Fields;

/// Live changes, as a watch receives them.
pub(crate) type ChangeReceiver = broadcast::Receiver<Arc<Change>>;

/// One version of one object, serialized once and shared by the store, the history and every
/// watcher that sends it.
#[derive(Debug)]
pub(crate) struct StoredObject {
    pub(crate) rv: u64,
    /// The whole object as JSON, `metadata.resourceVersion` included.
    pub(crate) json: Bytes,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) fields: Fields,
    /// The object as `meta.k8s.io/v1` `PartialObjectMetadata`, made when first asked for.
    partial: OnceLock<Bytes>,
}

impl StoredObject {
    /// Serializes `value` (whose resourceVersion is already `rv`).
    fn new(rv: u64, value: &Value) -> Self {
        let meta = &value["metadata"];
        let labels = meta["labels"]
            .as_object()
            .map(|m| {
                m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect()
            })
            .unwrap_or_default();
        let fields = Fields {
            name: meta["name"].as_str().unwrap_or_default().to_owned(),
            namespace: meta["namespace"].as_str().unwrap_or_default().to_owned(),
            uid: meta["uid"].as_str().unwrap_or_default().to_owned(),
            node_name: value["spec"]["nodeName"].as_str().map(str::to_owned),
            phase: value["status"]["phase"].as_str().map(str::to_owned),
        };
        let json = Bytes::from(serde_json::to_vec(value).expect("a JSON value serializes"));
        Self { rv, json, labels, fields, partial: OnceLock::new() }
    }

    /// The object as JSON, whole or (for `Some(version)`) as `PartialObjectMetadata` at
    /// `meta.k8s.io/<version>`.
    pub(crate) fn json_as(&self, metadata: Option<&str>) -> Bytes {
        match metadata {
            None => self.json.clone(),
            Some("v1") => {
                self.partial.get_or_init(|| partial_object_metadata(&self.json, "v1")).clone()
            }
            Some(version) => partial_object_metadata(&self.json, version),
        }
    }

    /// The object as a JSON tree, for updates and patches.
    pub(crate) fn value(&self) -> Value {
        // Every write checks the depth it stores (`shapes::check_depth`).
        crate::model::shapes::from_slice(&self.json)
            .expect("the store holds JSON within the depth limit")
    }
}

/// The `metadata` of a stored object, borrowed from its JSON.
#[derive(Deserialize)]
struct MetadataOnly<'a> {
    #[serde(borrow)]
    metadata: &'a RawValue,
}

/// An object as `PartialObjectMetadata` at `meta.k8s.io/<version>`: its metadata, verbatim.
pub(crate) fn partial_object_metadata(json: &[u8], version: &str) -> Bytes {
    let metadata =
        serde_json::from_slice::<MetadataOnly<'_>>(json).map(|m| m.metadata.get()).unwrap_or("{}");
    let mut out = Vec::with_capacity(metadata.len() + 80);
    out.extend_from_slice(b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/");
    out.extend_from_slice(version.as_bytes());
    out.extend_from_slice(b"\",\"metadata\":");
    out.extend_from_slice(metadata.as_bytes());
    out.push(b'}');
    Bytes::from(out)
}

/// What a change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One write to one object.
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) rv: u64,
    pub(crate) resource: usize,
    pub(crate) kind: ChangeType,
    /// `namespace/name`, or `name` for cluster-scoped objects.
    pub(crate) key: String,
    /// The object after the change (for a delete: its last state, at the delete's version).
    pub(crate) object: Arc<StoredObject>,
    /// The object before the change, `None` for an add.
    pub(crate) prev: Option<Arc<StoredObject>>,
}

/// The objects of one resource type, by key.
type Objects = BTreeMap<String, Arc<StoredObject>>;

struct State {
    rv: u64,
    /// By resource type index; grown when a type first stores an object.
    objects: Vec<Objects>,
    /// Every change with `rv > compacted`, oldest first.
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// The history holds every change after this version.
    compacted: u64,
    /// Storage (etcd) is compacted up to this version: resources without the watch cache
    /// cannot be read older than it.
    storage_compacted: u64,
}

/// One resource type, and whether it is served: a type whose CRD was deleted keeps its
/// index, unserved, so indexes never move.
struct Registered {
    rt: Arc<ResourceType>,
    served: bool,
}

/// Resources served without the watch cache, by group and plural.
pub(crate) type Uncached = Vec<(String, String)>;

/// The store; see the module docs.
pub(crate) struct Store {
    /// Every type ever served, by index. Lock order: this lock is never taken to write while
    /// `state` is held.
    resources: RwLock<Vec<Registered>>,
    state: Mutex<State>,
    changes: broadcast::Sender<Arc<Change>>,
    uncached: Uncached,
}

/// The storage key of an object.
pub(crate) fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

/// The key range of a namespace: keys from `ns/` up to, not including, `ns0` ('0' follows '/').
fn namespace_range(ns: &str) -> (Bound<String>, Bound<String>) {
    (Bound::Included(format!("{ns}/")), Bound::Excluded(format!("{ns}0")))
}

/// The objects of one type (in `namespace`, if given), in key order.
fn objects_in(
    objects: &BTreeMap<String, Arc<StoredObject>>,
    namespace: Option<&str>,
) -> Vec<Arc<StoredObject>> {
    match namespace {
        Some(ns) => objects.range(namespace_range(ns)).map(|(_, o)| o.clone()).collect(),
        None => objects.values().cloned().collect(),
    }
}

/// A write transaction; see [`Store::write`].
pub(crate) struct Txn<'a> {
    state: &'a mut State,
    changes: Vec<Arc<Change>>,
    /// A dry run (`dryRun=All`): writes are worked out and answered, never stored.
    dry_run: bool,
}

impl State {
    fn objects(&self, resource: usize) -> &Objects {
        static EMPTY: Objects = BTreeMap::new();
        self.objects.get(resource).unwrap_or(&EMPTY)
    }

    fn objects_mut(&mut self, resource: usize) -> &mut Objects {
        if self.objects.len() <= resource {
            self.objects.resize_with(resource + 1, BTreeMap::new);
        }
        &mut self.objects[resource]
    }
}

impl Txn<'_> {
    pub(crate) fn get(&self, resource: usize, key: &str) -> Option<Arc<StoredObject>> {
        self.state.objects(resource).get(key).cloned()
    }

    /// Stores `value` under `key` at a new resourceVersion, which it writes into the object.
    pub(crate) fn put(&mut self, resource: usize, key: &str, value: Value) -> Arc<StoredObject> {
        self.commit(resource, key, value, false)
    }

    /// Removes `key`; `last` is the object's final state, stored at the delete's version.
    pub(crate) fn remove(&mut self, resource: usize, key: &str, last: Value) -> Arc<StoredObject> {
        self.commit(resource, key, last, true)
    }

    /// One write at the next resourceVersion: the object's new (or, for a delete, final)
    /// state, and the change that the history and the watchers receive.
    fn commit(
        &mut self,
        resource: usize,
        key: &str,
        mut value: Value,
        delete: bool,
    ) -> Arc<StoredObject> {
        if self.dry_run {
            // As the real server answers a dry run: an existing object keeps its version, a
            // new one has none.
            let prev = self.state.objects(resource).get(key).map(|o| o.rv);
            match prev {
                Some(rv) => value["metadata"]["resourceVersion"] = Value::String(rv.to_string()),
                None => {
                    if let Some(meta) = value["metadata"].as_object_mut() {
                        meta.remove("resourceVersion");
                    }
                }
            }
            return Arc::new(StoredObject::new(prev.unwrap_or(0), &value));
        }
        self.state.rv += 1;
        let rv = self.state.rv;
        value["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let object = Arc::new(StoredObject::new(rv, &value));
        let objects = self.state.objects_mut(resource);
        let (prev, kind) = if delete {
            (objects.remove(key), ChangeType::Deleted)
        } else {
            let prev = objects.insert(key.to_owned(), object.clone());
            let kind = if prev.is_some() { ChangeType::Modified } else { ChangeType::Added };
            (prev, kind)
        };
        let change =
            Change { rv, resource, kind, key: key.to_owned(), object: object.clone(), prev };
        self.changes.push(Arc::new(change));
        object
    }

    /// Objects of `resource` (in `namespace`, if given), in key order.
    pub(crate) fn list(&self, resource: usize, namespace: Option<&str>) -> Vec<Arc<StoredObject>> {
        objects_in(self.state.objects(resource), namespace)
    }
}

/// One page of a list.
pub(crate) struct Page {
    pub(crate) items: Vec<Arc<StoredObject>>,
    /// The resourceVersion the list is consistent at.
    pub(crate) rv: u64,
    /// The key of the last item, when more matching items follow.
    pub(crate) continue_after: Option<String>,
    /// How many matching items follow this page.
    pub(crate) remaining: usize,
}

impl Store {
    pub(crate) fn new(
        resources: Vec<ResourceType>,
        history_limit: usize,
        uncached: Uncached,
    ) -> Self {
        let resources =
            resources.into_iter().map(|rt| Registered { rt: Arc::new(rt), served: true }).collect();
        // Watchers that fall this far behind are closed and resume from their last version.
        let (changes, _) = broadcast::channel(16_384);
        Self {
            resources: RwLock::new(resources),
            state: Mutex::new(State {
                rv: 1,
                objects: Vec::new(),
                history: VecDeque::new(),
                history_limit: history_limit.max(1),
                compacted: 1,
                storage_compacted: 1,
            }),
            changes,
            uncached,
        }
    }

    fn types(&self) -> RwLockReadGuard<'_, Vec<Registered>> {
        self.resources.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The type at index `resource` (served or not).
    pub(crate) fn resource_type(&self, resource: usize) -> Arc<ResourceType> {
        self.types()[resource].rt.clone()
    }

    /// Every served type, with its index, in registration order.
    pub(crate) fn served_types(&self) -> Vec<(usize, Arc<ResourceType>)> {
        self.types()
            .iter()
            .enumerate()
            .filter(|(_, r)| r.served)
            .map(|(i, r)| (i, r.rt.clone()))
            .collect()
    }

    /// Serves `rt` (a custom resource's version), replacing the definition of a type with its
    /// group, version and plural; returns its index.
    pub(crate) fn register(&self, rt: ResourceType) -> usize {
        let mut types = self.resources.write().unwrap_or_else(PoisonError::into_inner);
        let same = |r: &Registered| {
            r.rt.group == rt.group && r.rt.version == rt.version && r.rt.plural == rt.plural
        };
        match types.iter().position(same) {
            Some(i) => {
                types[i] = Registered { rt: Arc::new(rt), served: true };
                i
            }
            None => {
                types.push(Registered { rt: Arc::new(rt), served: true });
                types.len() - 1
            }
        }
    }

    /// Stops serving the type at `resource`.
    pub(crate) fn unregister(&self, resource: usize) {
        let mut types = self.resources.write().unwrap_or_else(PoisonError::into_inner);
        types[resource].served = false;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` as one transaction: its changes get consecutive resourceVersions, enter the
    /// history and reach the watchers before any other request sees the store.
    pub(crate) fn write<R>(&self, f: impl FnOnce(&mut Txn<'_>) -> R) -> R {
        self.write_as(false, f)
    }

    /// As [`write`](Self::write), or with `dry_run` a transaction whose writes are answered
    /// and never stored (nobody sees them, the version does not move).
    pub(crate) fn write_as<R>(&self, dry_run: bool, f: impl FnOnce(&mut Txn<'_>) -> R) -> R {
        let mut state = self.lock();
        let mut txn = Txn { state: &mut state, changes: Vec::new(), dry_run };
        let result = f(&mut txn);
        let changes = std::mem::take(&mut txn.changes);
        for change in changes {
            state.history.push_back(change.clone());
            // No receivers is fine: nobody watches.
            let _ = self.changes.send(change);
        }
        while state.history.len() > state.history_limit {
            if let Some(oldest) = state.history.pop_front() {
                state.compacted = oldest.rv;
            }
        }
        result
    }

    /// Reads within the same lock as writes.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&Txn<'_>) -> R) -> R {
        let mut state = self.lock();
        let txn = Txn { state: &mut state, changes: Vec::new(), dry_run: false };
        f(&txn)
    }

    pub(crate) fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Forgets the history: every resourceVersion before now becomes too old to watch from or
    /// to continue a list at, for every resource.
    pub(crate) fn compact(&self) {
        let mut state = self.lock();
        state.history.clear();
        state.compacted = state.rv;
        state.storage_compacted = state.rv;
    }

    /// Compacts storage at the current version, as `etcdctl compact` does: resources served
    /// without the watch cache expire every older version; the others keep their window.
    pub(crate) fn compact_storage(&self) {
        let mut state = self.lock();
        state.storage_compacted = state.rv;
    }

    /// The oldest version `resource` can still be read at (older ones are 410).
    fn horizon(&self, state: &State, resource: usize) -> u64 {
        let rt = self.resource_type(resource);
        let uncached = self.uncached.iter().any(|(g, p)| *g == rt.group && *p == rt.plural);
        if uncached { state.compacted.max(state.storage_compacted) } else { state.compacted }
    }

    fn expired(rv: u64, compacted: u64) -> ApiError {
        ApiError::expired(format!("too old resource version: {rv} ({compacted})"))
    }

    /// A page of `resource` objects that satisfy `keep`, consistent at `at` (default: now),
    /// starting after key `after`. `at` older than the history → 410 Expired.
    pub(crate) fn list_page(
        &self,
        resource: usize,
        namespace: Option<&str>,
        at: Option<u64>,
        after: Option<&str>,
        limit: Option<usize>,
        keep: &dyn Fn(&StoredObject) -> bool,
    ) -> ApiResult<Page> {
        let state = self.lock();
        let rv = at.unwrap_or(state.rv);
        let horizon = self.horizon(&state, resource);
        if rv < horizon {
            return Err(Self::expired(rv, horizon));
        }
        let current = state.objects(resource);
        let range = match namespace {
            Some(ns) => namespace_range(ns),
            None => (Bound::Unbounded, Bound::Unbounded),
        };
        let in_range = |key: &str| match namespace {
            Some(ns) => {
                key.len() > ns.len() && key.starts_with(ns) && key.as_bytes()[ns.len()] == b'/'
            }
            None => true,
        };
        // Undo, newest first, the changes made after `rv`.
        let mut reverted: BTreeMap<&str, Option<Arc<StoredObject>>> = BTreeMap::new();
        for change in state.history.iter().rev().take_while(|c| c.rv > rv) {
            if change.resource == resource && in_range(&change.key) {
                reverted.insert(&change.key, change.prev.clone());
            }
        }
        let start = match after {
            Some(key) => Bound::Excluded(key.to_owned()),
            None => range.0,
        };
        let end = range.1;
        let mut snapshot: Box<dyn Iterator<Item = (&str, Arc<StoredObject>)>> =
            if reverted.is_empty() {
                Box::new(current.range((start, end)).map(|(k, o)| (k.as_str(), o.clone())))
            } else {
                let mut merged: BTreeMap<&str, Arc<StoredObject>> = current
                    .range((start.clone(), end.clone()))
                    .map(|(k, o)| (k.as_str(), o.clone()))
                    .collect();
                for (key, prev) in reverted {
                    let past = match &start {
                        Bound::Excluded(s) => key > s.as_str(),
                        Bound::Included(s) => key >= s.as_str(),
                        Bound::Unbounded => true,
                    };
                    if !past {
                        continue;
                    }
                    match prev {
                        Some(o) => merged.insert(key, o),
                        None => merged.remove(key),
                    };
                }
                Box::new(merged.into_iter())
            };
        let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let mut items = Vec::new();
        let mut last_key = None;
        for (key, object) in snapshot.by_ref() {
            if keep(&object) {
                items.push(object);
                last_key = Some(key.to_owned());
                if items.len() == limit {
                    break;
                }
            }
        }
        let remaining = snapshot.filter(|(_, o)| keep(o)).count();
        let continue_after = if remaining > 0 { last_key } else { None };
        Ok(Page { items, rv, continue_after, remaining })
    }

    /// Every change after `rv` still in the history, and a receiver for the changes to come,
    /// with no gap between them. `rv` older than `resource` can be read at → 410 Expired.
    pub(crate) fn watch_from(
        &self,
        resource: usize,
        rv: u64,
    ) -> ApiResult<(Vec<Arc<Change>>, ChangeReceiver)> {
        let state = self.lock();
        let horizon = self.horizon(&state, resource);
        if rv < horizon {
            return Err(Self::expired(rv, horizon));
        }
        let past = state.history.iter().skip_while(|c| c.rv <= rv).cloned().collect();
        Ok((past, self.changes.subscribe()))
    }

    /// Every change from now on.
    pub(crate) fn subscribe(&self) -> ChangeReceiver {
        self.changes.subscribe()
    }

    /// The current objects of `resource` (in `namespace`, if given), the resourceVersion
    /// they are at, and a receiver for the changes after it.
    pub(crate) fn snapshot_and_subscribe(
        &self,
        resource: usize,
        namespace: Option<&str>,
    ) -> (u64, Vec<Arc<StoredObject>>, ChangeReceiver) {
        let state = self.lock();
        let snapshot = objects_in(state.objects(resource), namespace);
        (state.rv, snapshot, self.changes.subscribe())
    }

    /// The index of a served resource type, by group, version and plural.
    pub(crate) fn resource(&self, group: &str, version: &str, plural: &str) -> Option<usize> {
        self.types().iter().position(|r| {
            r.served && r.rt.group == group && r.rt.version == version && r.rt.plural == plural
        })
    }

    /// Objects held, over all types (for the memory benchmark).
    pub(crate) fn len(&self) -> usize {
        self.lock().objects.iter().map(BTreeMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_cut_out_verbatim() {
        let pod = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"x":"y"}},"spec":{"containers":[]}}"#;
        assert_eq!(
            partial_object_metadata(pod, "v1"),
            Bytes::from_static(
                br#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","labels":{"x":"y"}}}"#
            )
        );
    }
}
