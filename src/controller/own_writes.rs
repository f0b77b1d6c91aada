//! Reading one's own writes: a key's next reconcile is held until every cache the controller
//! reads has caught up with the writes the key's last reconcile made (Kubernetes' stale-
//! controller mitigation, KEP-5647, which upstream built into four of kube-controller-
//! manager's controllers only; ReplicaSet's expectations for the creates it cannot name).
//!
//! A controller that creates a child and is woken again before its cache saw the child reads
//! a cache without it and creates a second one: with a fixed name the second create fails
//! with 409 and is retried, with `generateName` it silently makes two. The writes a reconcile
//! makes through a [`recording_client`](super::recording_client) are recorded in its
//! [`ReconcileContext`](super::ReconcileContext); when the reconcile ends they become its
//! key's pending writes, and the key's next reconcile is held until each is caught up in every
//! cache of the controller (the primary informer, and those of `owns` and `watches`) that
//! lists and watches the written resource in the written namespace:
//!
//! - a create or update (or patch) of a named object: the cache applied a list, event or
//!   bookmark at the resourceVersion the server answered with, or later;
//! - a create with `generateName`: counted per owner, as ReplicaSet's expectations count
//!   them (the `expectations` module): its owner's count of expected creations is raised,
//!   in each cache that would hold the child, before the request is sent; a cache lowers it
//!   when it sees a new child of that owner, a refusal lowers it at once, and the hold waits
//!   until every count the key's creates raised is back to zero. The owner is the child's
//!   controlling `ownerReference`; without one, the creates are counted per `generateName`
//!   prefix in the namespace;
//! - a delete: the cache no longer holds the object (a delete's answer carries no
//!   resourceVersion to compare), or holds another object by its name (another uid than the
//!   deleted one's, from the delete's preconditions or answer, or the cache when the delete
//!   was recorded: made again after the delete); a delete that left the object in place (finalizers) is
//!   caught up as an update, at the version it answered with;
//! - a write whose answer was lost (recorded before it was sent, never settled): a named
//!   create is caught up when the cache holds the object, a delete when it no longer does
//!   (or holds another uid);
//!   a create with `generateName` keeps its owner's count raised until the cache shows a new
//!   child of that owner or the timeout; an update or patch, whose version is unknown, holds
//!   nothing.
//!
//! A cache is waited on only if it lists and watches the written object: its resource, in
//! its namespace, selected by its label selector (from the labels the answer, or a create's
//! request, gave) and by its field selector on `metadata.name` and `metadata.namespace`.
//! Other field selectors, and shard selectors, are not told on the client: a write they leave
//! out may hold its key until the timeout. A kind written but not watched never holds a
//! reconcile. Nor does a delete of a collection.
//!
//! A held key does not keep its worker, as client-go's expectations skip a sync rather than
//! wait for it: a worker that finds the key's writes not caught up parks the key (marks it
//! done without a reconcile, keeping its pending writes and its reasons) and takes the next
//! key; one task per parked key waits on the caches and queues the key again when the
//! informer's list, event or bookmark that catches them up arrives, or when the timeout
//! passes. The key is never lost: an add while it is parked brings it to a worker, which
//! parks it again, and the task's add runs it. One key is still on one worker at a time.
//! The hold is bounded ([`Config::stale_cache_timeout`](super::Config::stale_cache_timeout),
//! 5 s by default, from when the key was first parked; zero turns the guard off); past it the
//! reconcile runs, logged and counted
//! ([`ControllerStats::stale_cache_timeouts`](super::ControllerStats::stale_cache_timeouts),
//! and the metrics' hold timeouts). Every hold (one per set of writes, however often its key
//! comes back parked) is counted with its time from the first park to the reconcile
//! ([`ControllerStats::holds`](super::ControllerStats::holds), the metrics' holds).
//!
//! A hold that ends without its writes (the timeout, an informer stopped, the key handed to
//! another shard) lowers the counts its creates raised, and a controller's run that ends lets
//! go of every key's pending writes. Versions are compared as integers, as etcd's revisions; one that is not an integer
//! is not waited for. A write the reconciler makes through another client can still be
//! reported by hand, for the primary kind: [`report_write`](super::report_write),
//! [`report_written`](super::report_written).

use std::collections::HashMap;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::expectations::{Expectations, Observer, Owner};
use super::recorded_write::{Verb, Write};
use crate::cache::selector::{fields_match, labels_match};
use crate::cache::{Informer, InformerObject, ObjectKey};

/// What a key's next reconcile waits for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    /// The highest primary version reported by hand (0 for none).
    pub(crate) reported: u64,
    /// The writes made through a recording client.
    pub(crate) writes: Vec<Write>,
}

impl Pending {
    /// Whether it holds nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.reported == 0 && self.writes.is_empty()
    }
}

/// The writes each key's next reconcile waits for, and whether that key is parked on them.
#[derive(Default)]
pub(crate) struct PendingWrites(Mutex<Table>);

#[derive(Default)]
struct Table {
    keys: HashMap<ObjectKey, Waiting>,
    /// The controller's run ended: nothing is kept or waited for any more.
    closed: bool,
}

/// One key's pending writes and its parking.
struct Waiting {
    pending: Arc<Pending>,
    /// When a worker first found the writes not caught up and parked the key.
    parked: Option<Instant>,
    /// Whether a task waits to queue the key again when the caches catch up.
    woken: bool,
    /// That task, ended when the key runs or the controller stops (it holds the caches).
    waker: Option<tokio::task::AbortHandle>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.abort();
        }
    }
}

impl PendingWrites {
    /// Records what `key`'s next reconcile waits for (replacing what an earlier reconcile
    /// left: its next reconcile waited for that already, or ran past it).
    pub(crate) fn insert(&self, key: &ObjectKey, pending: Pending) {
        if pending.is_empty() {
            return;
        }
        let waiting =
            Waiting { pending: Arc::new(pending), parked: None, woken: false, waker: None };
        let mut table = self.lock();
        if !table.closed {
            table.keys.insert(key.clone(), waiting);
        }
    }

    /// What `key`'s reconcile waits for, and since when it is parked on it, left in place.
    pub(crate) fn get(&self, key: &ObjectKey) -> Option<(Arc<Pending>, Option<Instant>)> {
        self.lock().keys.get(key).map(|w| (w.pending.clone(), w.parked))
    }

    /// What `key`'s reconcile waits for, taken: it runs now (or is another shard's).
    pub(crate) fn take(&self, key: &ObjectKey) -> Option<Arc<Pending>> {
        let waiting = self.lock().keys.remove(key)?;
        Some(waiting.pending.clone())
    }

    /// Parks `key` (since `since`, if it was not yet); true if no task waits to wake it yet
    /// (the caller starts one and hands it to [`waking`](Self::waking)).
    pub(crate) fn park(&self, key: &ObjectKey, since: Instant) -> bool {
        let mut table = self.lock();
        let Some(waiting) = table.keys.get_mut(key) else { return false };
        waiting.parked.get_or_insert(since);
        !std::mem::replace(&mut waiting.woken, true)
    }

    /// `waker` is the task that wakes `key`: ended with the key's entry (at once if it is
    /// gone already).
    pub(crate) fn waking(&self, key: &ObjectKey, waker: tokio::task::AbortHandle) {
        match self.lock().keys.get_mut(key) {
            Some(waiting) => waiting.waker = Some(waker),
            None => waker.abort(),
        }
    }

    /// The task that waited for `key`'s writes since `since` is done: true if the key is
    /// still parked on them (the task queues it), false if it ran meanwhile.
    pub(crate) fn wake(&self, key: &ObjectKey, since: Instant) -> bool {
        let mut table = self.lock();
        let Some(waiting) = table.keys.get_mut(key) else { return false };
        if waiting.parked != Some(since) {
            return false;
        }
        waiting.woken = false;
        waiting.waker = None;
        true
    }

    /// The keys parked now, sorted.
    pub(crate) fn parked(&self) -> Vec<ObjectKey> {
        let table = self.lock();
        let parked = table.keys.iter().filter(|(_, w)| w.parked.is_some());
        let mut keys: Vec<_> = parked.map(|(k, _)| k.clone()).collect();
        keys.sort();
        keys
    }

    /// The controller's run ended (a removal from a manager among the reasons): every key's
    /// writes are let go of and the tasks that waited on them ended; none is kept after.
    pub(crate) fn close(&self) {
        let mut table = self.lock();
        table.closed = true;
        let keys = std::mem::take(&mut table.keys);
        drop(table);
        drop(keys);
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Table> {
        self.0.lock()
    }
}

/// A cache the controller reads, with its kind erased, as the hold asks it.
pub(crate) trait CacheView: Send + Sync + 'static {
    /// The informer's identity: two views of one informer have the same.
    fn id(&self) -> usize;
    /// Whether it lists and watches the object `write` wrote: its resource, in its namespace,
    /// selected by its label selector (on the labels the write told) and by its field selector
    /// on `metadata.name` and `metadata.namespace` (see `cache::selector`).
    fn covers(&self, write: &Write) -> bool;
    /// The resourceVersion of the object under `key` in the cache, if it holds it (0 for a
    /// version that is not an integer).
    fn held(&self, key: &ObjectKey) -> Option<u64>;
    /// The uid of the object under `key` in the cache, if it holds one that has a uid.
    fn uid(&self, key: &ObjectKey) -> Option<String>;
    /// How many lists, events and bookmarks the cache has applied.
    fn applied(&self) -> u64;
    /// Resolves `true` once the cache applied more than `count` lists, events and bookmarks,
    /// `false` if its informer stopped first.
    fn changed(&self, count: u64) -> BoxFuture<'static, bool>;
    /// Resolves `true` once the cache is at `rv` or later, `false` if its informer stopped
    /// short of it.
    fn reach(&self, rv: u64) -> BoxFuture<'static, bool>;
    /// Puts a handler on the informer that lowers `expectations` as new children show up in
    /// the cache; returns what takes it off again.
    fn observe(&self, expectations: &Expectations) -> Box<dyn FnOnce() + Send + Sync>;
}

impl<K: InformerObject> CacheView for Informer<K> {
    fn id(&self) -> usize {
        Informer::id(self)
    }
    fn covers(&self, write: &Write) -> bool {
        let list_watch = self.list_watch();
        let api = list_watch.api_resource();
        let namespace = write.key.namespace.as_deref();
        api.group == write.group
            && api.plural == write.resource
            && (list_watch.namespace().is_none() || list_watch.namespace() == namespace)
            && list_watch.label_selector().is_none_or(|selector| {
                write.labels.as_ref().is_none_or(|labels| labels_match(selector, labels))
            })
            && list_watch
                .field_selector()
                .is_none_or(|selector| fields_match(selector, &write.key.name, namespace))
    }
    fn held(&self, key: &ObjectKey) -> Option<u64> {
        let object = self.indexer().get(key)?;
        Some(object.meta().resource_version.as_deref().and_then(|rv| rv.parse().ok()).unwrap_or(0))
    }
    fn uid(&self, key: &ObjectKey) -> Option<String> {
        self.indexer().get(key)?.meta().uid.clone()
    }
    fn applied(&self) -> u64 {
        Informer::applied(self)
    }
    fn changed(&self, count: u64) -> BoxFuture<'static, bool> {
        let informer = self.clone();
        async move { informer.wait_for_applied(count).await }.boxed()
    }
    fn reach(&self, rv: u64) -> BoxFuture<'static, bool> {
        let informer = self.clone();
        async move { informer.wait_for_resource_version(&rv.to_string()).await }.boxed()
    }
    fn observe(&self, expectations: &Expectations) -> Box<dyn FnOnce() + Send + Sync> {
        let observer = Observer { expectations: expectations.clone(), view: self.id() };
        let registration = self.add_inline_event_handler(observer);
        let informer = self.clone();
        Box::new(move || {
            informer.remove_event_handler(&registration);
        })
    }
}

/// What a controller tracks of its own writes: the caches it reads (each once, the primary's
/// first) and the creations it expects in them.
pub(crate) struct Tracker {
    pub(crate) views: Vec<Arc<dyn CacheView>>,
    pub(crate) expectations: Expectations,
    /// What takes each cache's observer off its informer.
    observers: Mutex<Vec<Box<dyn FnOnce() + Send + Sync>>>,
}

impl Tracker {
    /// Tracks writes against `views` (a view of an informer seen before is left out), with an
    /// observer of new children on each if `observe` (the guard is on).
    pub(crate) fn new(views: impl IntoIterator<Item = Arc<dyn CacheView>>, observe: bool) -> Self {
        let mut distinct: Vec<Arc<dyn CacheView>> = Vec::new();
        for view in views {
            if !distinct.iter().any(|v| v.id() == view.id()) {
                distinct.push(view);
            }
        }
        let expectations = Expectations::default();
        let observers = match observe {
            true => distinct.iter().map(|v| v.observe(&expectations)).collect(),
            false => Vec::new(),
        };
        Self { views: distinct, expectations, observers: Mutex::new(observers) }
    }

    /// Takes the observers off their informers (the controller's run ended).
    pub(crate) fn stop_observing(&self) {
        let observers = std::mem::take(&mut *self.observers.lock());
        for remove in observers {
            remove();
        }
    }

    /// Before a create with `generateName` is sent: its owner's count is raised in each cache
    /// that would hold the object, noted in `write.raised`.
    /// A delete that names no uid notes the one of the object a cache holds now (the object
    /// it deletes, as far as the controller saw it).
    pub(crate) fn expect(&self, write: &mut Write) {
        if write.verb == Verb::Delete && write.uid.is_none() {
            let covering = self.views.iter().filter(|v| v.covers(write));
            write.uid = covering.filter_map(|v| v.uid(&write.key)).next();
        }
        let Some(owner) = Owner::of_write(write) else { return };
        let covering: Vec<usize> =
            self.views.iter().filter(|v| v.covers(write)).map(|v| v.id()).collect();
        for view in covering {
            self.expectations.raise(view, &owner);
            write.raised.push(view);
        }
    }

    /// Lowers the counts `write` raised and no cache has met: the server refused it, or its
    /// key's hold ended without them (timed out, an informer stopped, the key went to
    /// another shard). A count met meanwhile by another reconcile's create of the same owner
    /// is not told apart (as ReplicaSet's expectations, per owner).
    pub(crate) fn withdraw(&self, write: &Write) {
        let Some(owner) = Owner::of_write(write) else { return };
        for view in &write.raised {
            self.expectations.lower(*view, &owner);
        }
    }

    /// [`withdraw`](Self::withdraw) for each of `pending`'s writes.
    pub(crate) fn release(&self, pending: &Pending) {
        pending.writes.iter().for_each(|write| self.withdraw(write));
    }

    /// `pending` without the writes that no view covers: they hold nothing, and a key that is
    /// never reconciled again must not keep them.
    pub(crate) fn watched(&self, mut pending: Pending) -> Pending {
        pending.writes.retain(|write| match Owner::of_write(write) {
            Some(_) => !write.raised.is_empty(),
            None => self.views.iter().any(|view| view.covers(write)),
        });
        pending
    }

    /// Waits until every view that covers one of `pending`'s writes caught up with it (the
    /// primary view, first, with the versions reported by hand); see the module docs.
    pub(crate) fn hold<'a>(&'a self, pending: &'a Pending) -> Option<BoxFuture<'a, Held>> {
        let mut waits: Vec<BoxFuture<'a, bool>> = Vec::new();
        if pending.reported > 0
            && let Some(primary) = self.views.first()
        {
            waits.push(primary.reach(pending.reported));
        }
        for write in &pending.writes {
            if let Some(owner) = Owner::of_write(write) {
                // Counted per owner, in the caches it was raised in.
                for view in &write.raised {
                    let met = self.expectations.until_met(*view, owner.clone());
                    waits.push(met.map(|()| true).boxed());
                }
                continue;
            }
            for view in self.views.iter().filter(|v| v.covers(write)) {
                waits.push(async move { caught_up(view.as_ref(), write).await }.boxed());
            }
        }
        if waits.is_empty() {
            return None;
        }
        Some(
            async move {
                match futures::future::join_all(waits).await.into_iter().all(|ok| ok) {
                    true => Held::CaughtUp,
                    false => Held::Stopped,
                }
            }
            .boxed(),
        )
    }
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker").field("views", &self.views.len()).finish_non_exhaustive()
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.stop_observing();
    }
}

/// Resolves once `done` holds of `view`, checked after each list, event or bookmark the cache
/// applies; `false` if its informer stopped first (and `done` does not hold then). The store
/// is written before the count of applied lists, events and bookmarks moves, so a count read
/// before the check that has not moved since means the check saw the latest store. The count,
/// not the version, is waited on: a list with no version, or an older one, changes the store
/// without moving the version.
async fn until(view: &dyn CacheView, done: impl Fn() -> bool) -> bool {
    loop {
        let applied = view.applied();
        if done() {
            return true;
        }
        if !view.changed(applied).await {
            return done();
        }
    }
}

/// Whether `view` no longer holds the object under `key` that had `uid`: it holds none, or
/// one with another uid (made again after the delete).
fn gone(view: &dyn CacheView, key: &ObjectKey, uid: Option<&str>) -> bool {
    view.held(key).is_none() || view.uid(key).is_some_and(|held| uid.is_some_and(|uid| uid != held))
}

/// Resolves once `view` caught up with `write`, a write of a named object (a create with
/// `generateName` is counted per owner instead); `false` if its informer stopped first.
async fn caught_up(view: &dyn CacheView, write: &Write) -> bool {
    match (write.verb, write.resource_version) {
        // A named create whose answer was lost: made once the cache holds it.
        (Verb::Create, _) if !write.answered => {
            until(view, || view.held(&write.key).is_some()).await
        }
        // An update or patch whose version is unknown cannot be waited for.
        (Verb::Update | Verb::Patch, _) if !write.answered => true,
        // Gone: the cache must lose it (or hold another object by its name).
        (Verb::Delete, None) => until(view, || gone(view, &write.key, write.uid.as_deref())).await,
        // The store may hold it before the cache's version moves (handlers run between
        // the two): then it is caught up already.
        (_, Some(rv)) if view.held(&write.key).is_some_and(|held| held >= rv) => true,
        (_, Some(rv)) => view.reach(rv).await,
        (_, None) => true,
    }
}

/// How a key's wait for its own writes ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// Every cache caught up.
    CaughtUp,
    /// An informer stopped short of a write: its cache will never hold it.
    Stopped,
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    use super::*;

    /// A cache of secrets in `ns` (labelled `app=web`, if `selector`), moved by hand.
    struct FakeView {
        id: usize,
        selector: Option<&'static str>,
        objects: Mutex<HashMap<ObjectKey, u64>>,
        /// The uids of the objects that have one.
        uids: Mutex<HashMap<ObjectKey, String>>,
        /// The highest version applied, as an informer's `reached`.
        at: tokio::sync::watch::Sender<u64>,
        applied: tokio::sync::watch::Sender<u64>,
        /// How often `held` was asked: a wait that spins asks without end.
        asked: std::sync::atomic::AtomicU64,
        observer: Mutex<Option<Expectations>>,
    }

    impl FakeView {
        fn new() -> Arc<Self> {
            Self::with(1, None)
        }
        fn with(id: usize, selector: Option<&'static str>) -> Arc<Self> {
            Arc::new(Self {
                id,
                selector,
                objects: Mutex::default(),
                uids: Mutex::default(),
                at: tokio::sync::watch::channel(1).0,
                applied: tokio::sync::watch::channel(0).0,
                asked: Default::default(),
                observer: Mutex::default(),
            })
        }
        /// Applies an event at `rv`: the store first, then the version, as an informer does.
        fn apply(&self, name: &str, rv: u64, present: bool) {
            let key = ObjectKey::namespaced("ns", name);
            let mut objects = self.objects.lock();
            match present {
                true => objects.insert(key, rv),
                false => objects.remove(&key),
            };
            drop(objects);
            self.at.send_modify(|at| *at = (*at).max(rv));
            self.applied.send_modify(|n| *n += 1);
        }
        /// Adds `name`, made with `generateName: child-` and controlled by `owner`.
        fn add_child(&self, name: &str, rv: u64, owner: &str) {
            self.apply(name, rv, true);
            let meta = ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                generate_name: Some("child-".into()),
                owner_references: Some(vec![OwnerReference {
                    name: owner.into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            };
            if let Some(expectations) = &*self.observer.lock() {
                expectations.observe(self.id, &meta);
            }
        }
    }

    impl CacheView for FakeView {
        fn id(&self) -> usize {
            self.id
        }
        fn covers(&self, write: &Write) -> bool {
            let labelled = write.labels.as_ref().is_none_or(|l| {
                self.selector.is_none_or(|s| crate::cache::selector::labels_match(s, l))
            });
            write.group.is_empty()
                && write.resource == "secrets"
                && write.key.namespace.as_deref() == Some("ns")
                && labelled
        }
        fn held(&self, key: &ObjectKey) -> Option<u64> {
            let asked = self.asked.fetch_add(1, Ordering::Relaxed);
            assert!(asked < 100, "held() asked {asked} times: the wait spins");
            self.objects.lock().get(key).copied()
        }
        fn uid(&self, key: &ObjectKey) -> Option<String> {
            self.uids.lock().get(key).cloned()
        }
        fn applied(&self) -> u64 {
            *self.applied.borrow()
        }
        fn changed(&self, count: u64) -> BoxFuture<'static, bool> {
            let mut applied = self.applied.subscribe();
            async move { applied.wait_for(|n| *n > count).await.is_ok() }.boxed()
        }
        fn reach(&self, rv: u64) -> BoxFuture<'static, bool> {
            let mut at = self.at.subscribe();
            async move { at.wait_for(|at| *at >= rv).await.is_ok() }.boxed()
        }
        fn observe(&self, expectations: &Expectations) -> Box<dyn FnOnce() + Send + Sync> {
            *self.observer.lock() = Some(expectations.clone());
            Box::new(|| {})
        }
    }

    fn tracker(views: &[Arc<FakeView>]) -> Tracker {
        Tracker::new(views.iter().map(|v| v.clone() as Arc<dyn CacheView>), true)
    }

    fn write(verb: Verb, name: &str, rv: Option<u64>) -> Write {
        Write {
            verb,
            group: String::new(),
            resource: "secrets".into(),
            key: ObjectKey::namespaced("ns", name),
            resource_version: rv,
            generate_name: None,
            labels: None,
            owner: None,
            answered: true,
            raised: Vec::new(),
            uid: None,
        }
    }

    /// A create with `generateName: child-` controlled by `owner`, before it is sent,
    /// expected through `tracker` as the recording client does.
    fn create_child(tracker: &Tracker, owner: &str) -> Write {
        let mut create = write(Verb::Create, "child-", None);
        create.generate_name = Some("child-".into());
        create.owner = Some(ObjectKey::namespaced("ns", owner));
        create.answered = false;
        tracker.expect(&mut create);
        create
    }

    fn pending(writes: Vec<Write>) -> Pending {
        Pending { reported: 0, writes }
    }

    /// Polls `hold` once: whether it is done.
    fn done(hold: &mut BoxFuture<'_, Held>) -> bool {
        hold.as_mut().now_or_never().is_some()
    }

    #[tokio::test(start_paused = true)]
    async fn an_update_is_caught_up_at_its_version() {
        let view = FakeView::new();
        let tracker = tracker(std::slice::from_ref(&view));
        let pending = pending(vec![write(Verb::Update, "s", Some(10))]);
        let mut hold = tracker.hold(&pending).expect("a watched kind holds");
        assert!(!done(&mut hold));
        view.apply("other", 9, true);
        assert!(!done(&mut hold), "an event before the write's version");
        view.apply("other", 11, true);
        assert_eq!(hold.await, Held::CaughtUp, "any event at or past it");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_store_holds_is_caught_up_before_the_version_moves() {
        let view = FakeView::new();
        view.objects.lock().insert(ObjectKey::namespaced("ns", "s"), 10);
        let tracker = tracker(std::slice::from_ref(&view));
        let pending = pending(vec![write(Verb::Update, "s", Some(10))]);
        let mut hold = tracker.hold(&pending).expect("a watched kind holds");
        assert!(done(&mut hold), "the store holds the object at the write's version");
    }

    /// Two owners' creates with `generateName`, counted each under its owner: one owner's
    /// child seen does not release the other's hold, and the count is raised before the
    /// request is sent, so a create whose answer never came holds just the same.
    #[tokio::test(start_paused = true)]
    async fn creates_with_generate_name_are_counted_per_owner_until_the_cache_shows_the_children() {
        let view = FakeView::new();
        let tracker = tracker(std::slice::from_ref(&view));
        let a = pending(vec![create_child(&tracker, "a"), create_child(&tracker, "a")]);
        let mut answered = create_child(&tracker, "b");
        answered.key = ObjectKey::namespaced("ns", "child-b1");
        answered.resource_version = Some(20);
        answered.answered = true;
        let b = pending(vec![answered]);
        let (mut a_hold, mut b_hold) = (tracker.hold(&a).unwrap(), tracker.hold(&b).unwrap());
        view.apply("unrelated", 30, true);
        assert!(!done(&mut b_hold), "the cache went past b's version without its child");
        view.add_child("child-a1", 31, "a");
        assert!(!done(&mut b_hold), "a's child does not release b");
        assert!(!done(&mut a_hold), "one of a's two children");
        view.add_child("child-b1", 32, "b");
        assert_eq!(b_hold.await, Held::CaughtUp, "b's child seen");
        assert!(!done(&mut a_hold), "b's child does not release a");
        view.add_child("child-a2", 33, "a");
        assert_eq!(a_hold.await, Held::CaughtUp, "both of a's children seen");
    }

    #[tokio::test(start_paused = true)]
    async fn a_create_with_generate_name_whose_answer_was_lost_holds_until_the_timeout() {
        let view = FakeView::new();
        let tracker = tracker(std::slice::from_ref(&view));
        let lost = pending(vec![create_child(&tracker, "a")]);
        let hold = tracker.hold(&lost).expect("held");
        view.apply("unrelated", 40, true);
        view.add_child("child-x", 41, "other-owner");
        let timeout = std::time::Duration::from_secs(5);
        assert!(
            tokio::time::timeout(timeout, hold).await.is_err(),
            "no child of its owner seen: held until the timeout"
        );
        tracker.release(&lost);
        assert!(tracker.hold(&lost).unwrap().now_or_never().is_some(), "let go of at its end");
    }

    #[tokio::test(start_paused = true)]
    async fn a_withdrawn_create_lowers_its_owners_count() {
        let view = FakeView::new();
        let tracker = tracker(std::slice::from_ref(&view));
        let create = create_child(&tracker, "a");
        assert_eq!(create.raised, [1], "raised in the one cache that holds secrets");
        let held = pending(vec![create.clone()]);
        assert!(!done(&mut tracker.hold(&held).unwrap()), "expected, before the answer");
        tracker.withdraw(&create);
        assert!(done(&mut tracker.hold(&held).unwrap()), "refused: nothing made, nothing held");
    }

    #[tokio::test(start_paused = true)]
    async fn a_delete_is_caught_up_when_the_cache_no_longer_holds_the_object() {
        let view = FakeView::new();
        view.apply("gone", 5, true);
        let tracker = tracker(std::slice::from_ref(&view));
        let pending = pending(vec![write(Verb::Delete, "gone", None)]);
        let mut hold = tracker.hold(&pending).expect("held");
        view.apply("other", 40, true);
        assert!(!done(&mut hold), "the cache still holds it, at whatever version");
        view.apply("gone", 41, false);
        assert_eq!(hold.await, Held::CaughtUp);
    }

    /// A delete, then a create of the same name: the cache holds the name again, with another
    /// uid. The delete is caught up, not held until the timeout.
    #[tokio::test(start_paused = true)]
    async fn a_delete_is_caught_up_when_the_cache_holds_the_name_made_again() {
        let view = FakeView::new();
        let key = ObjectKey::namespaced("ns", "again");
        view.apply("again", 5, true);
        view.uids.lock().insert(key.clone(), "old".into());
        let tracker = tracker(std::slice::from_ref(&view));
        let mut delete = write(Verb::Delete, "again", None);
        tracker.expect(&mut delete);
        assert_eq!(delete.uid.as_deref(), Some("old"), "the uid the cache held when recorded");
        let pending = pending(vec![delete]);
        let mut hold = tracker.hold(&pending).expect("held");
        view.apply("other", 6, true);
        assert!(!done(&mut hold), "the cache still holds the deleted object");
        // The delete and the create collapsed into one replacement (a relist).
        view.uids.lock().insert(key, "new".into());
        view.apply("again", 8, true);
        let caught_up = tokio::time::timeout(std::time::Duration::from_secs(1), hold).await;
        assert_eq!(caught_up, Ok(Held::CaughtUp), "another object by its name: caught up");
    }

    #[tokio::test(start_paused = true)]
    async fn a_delete_waits_without_spinning_through_events_that_do_not_move_the_version() {
        let view = FakeView::new();
        view.apply("gone", 50, true);
        let tracker = tracker(std::slice::from_ref(&view));
        let pending = pending(vec![write(Verb::Delete, "gone", None)]);
        let mut hold = tracker.hold(&pending).expect("held");
        // A relist at no version (or an older one) that still holds the object: the
        // store changed, the version did not.
        view.apply("other", 0, true);
        assert!(!done(&mut hold), "the cache still holds it");
        assert!(!done(&mut hold), "polled again, it waits for the next change");
        view.apply("gone", 0, false);
        assert_eq!(hold.await, Held::CaughtUp, "an event without a version that drops it");
    }

    #[tokio::test(start_paused = true)]
    async fn a_named_create_whose_answer_was_lost_holds_until_the_cache_shows_it() {
        let view = FakeView::new();
        let tracker = tracker(std::slice::from_ref(&view));
        let mut named = write(Verb::Create, "child", None);
        named.answered = false;
        let pending = pending(vec![named]);
        let mut hold = tracker.hold(&pending).expect("held");
        view.apply("other", 60, true);
        assert!(!done(&mut hold), "the cache does not hold the named child yet");
        view.apply("child", 61, true);
        assert_eq!(hold.await, Held::CaughtUp, "made, and seen");
    }

    /// A write the cache's label selector leaves out is not waited for there: it would hold
    /// its key for the whole timeout at every reconcile.
    #[tokio::test(start_paused = true)]
    async fn a_write_a_caches_selector_leaves_out_is_not_waited_for_there() {
        let (all, web) = (FakeView::with(1, None), FakeView::with(2, Some("app=web")));
        let tracker = tracker(&[all.clone(), web.clone()]);
        let labelled = |app: &str| {
            let mut update = write(Verb::Update, "s", Some(10));
            update.labels = Some([("app".to_owned(), app.to_owned())].into());
            update
        };
        let db = pending(vec![labelled("db")]);
        let mut hold = tracker.hold(&db).expect("the unselected cache holds it");
        all.apply("s", 10, true);
        assert!(done(&mut hold), "the cache that selects no db is not waited on");
        let web_write = pending(vec![labelled("web")]);
        let mut hold = tracker.hold(&web_write).expect("held");
        assert!(!done(&mut hold), "the web cache has not caught up");
        web.apply("s", 10, true);
        assert_eq!(hold.await, Held::CaughtUp);
        let mut create = create_child(&tracker, "a");
        create.labels = Some([("app".to_owned(), "db".to_owned())].into());
        let mut raised = create.clone();
        raised.raised.clear();
        tracker.expect(&mut raised);
        assert_eq!(raised.raised, [1], "a count raised only where the child will show up");
    }

    #[test]
    fn nothing_watched_nothing_held() {
        let view = FakeView::new();
        let tracker = tracker(&[view]);
        let mut other = write(Verb::Create, "s", Some(5));
        other.resource = "configmaps".into();
        let mut elsewhere = write(Verb::Create, "s", Some(5));
        elsewhere.key = ObjectKey::namespaced("other-ns", "s");
        let mut generated = create_child(&tracker, "a");
        generated.resource = "configmaps".into();
        generated.raised.clear();
        tracker.expect(&mut generated);
        let pending = pending(vec![other, elsewhere, generated]);
        assert!(tracker.hold(&pending).is_none(), "a kind or namespace not watched holds nothing");
        let kept = PendingWrites::default();
        let key = ObjectKey::namespaced("ns", "parent");
        kept.insert(&key, tracker.watched(pending));
        assert!(kept.get(&key).is_none(), "nor is it kept for the key's next reconcile");
    }
}
