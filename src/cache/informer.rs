//! [`Informer`]: keeps an [`Indexer`] in step with the API server and tells every registered
//! handler what changed (client-go's `sharedIndexInformer`).
//!
//! Three parts, one file each: the [`Reflector`](super::reflector) lists and watches, this
//! file applies what it learns to the store and hands each change to the
//! [`processor`](super::processor), which fans it out to the handlers. What is set before
//! an informer runs is in files of their own: its settings
//! ([`InformerConfig`](super::InformerConfig)) and its builder
//! ([`InformerBuilder`](super::InformerBuilder)).
//!
//! The store is updated before the handlers hear of a change, under the same lock that adds
//! a handler, so a handler added late first receives the current contents as adds and then
//! every change after them, none twice.
//!
//! An informer has one owner, whoever runs it: usually a
//! [`SharedInformerFactory`](super::SharedInformerFactory). While it runs it logs inside a
//! span naming its kind, namespace and selectors; when its run ends (shutdown, the future
//! dropped, a panic) it is marked stopped, so that whoever waits on it learns so.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::watch;
use tracing::Instrument;

use super::handler::{
    Deleted, DeletedFinalStateUnknown, HandlerRegistration, InlineHandler, Notification,
    ResourceEventHandler,
};
use super::informer_error::HandlerShutdownTimeout;
use super::metrics::InformerMetrics;
use super::object::stored::Stored;
use super::processor::{Listeners, Processor};
use super::reflector::{Reflector, Sink};
use super::{Indexer, InformerObject, ListWatch, ObjectKey, meta_namespace_key_func};
use crate::panic::observe;

/// Where an informer's run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunState {
    NotStarted,
    Running,
    /// A run ended; the store keeps what it held.
    Stopped,
}

struct Inner<K> {
    reflector: Reflector<K>,
    indexer: Indexer<K>,
    processor: Processor<K>,
    synced: watch::Sender<bool>,
    /// Set when its factory released it (its last guard dropped): its store stays empty and
    /// it is not synced, whatever a run still going learns.
    released: watch::Sender<bool>,
    /// Taken by a release and around every write of the store, `synced` and the version,
    /// which check `released` under it. A leaf: no handler and no other lock but the store's
    /// runs under it, so a release (under its factory's lock) never waits on the processor's
    /// lock, which a handler's code may hold while it drops a guard.
    commit: Mutex<()>,
    state: watch::Sender<RunState>,
    /// `true` while `state` is `Stopped`: what [`HasSynced::stopped_receiver`] hands out.
    stopped: watch::Sender<bool>,
    resync: Option<Duration>,
    /// The resourceVersion of the last list, event or bookmark applied; empty before the
    /// first list.
    last_sync_rv: Mutex<String>,
    /// The highest resourceVersion applied, as an integer (0 before the first list, and for
    /// versions that are not integers), for [`Informer::wait_for_resource_version`].
    reached: watch::Sender<u64>,
    /// How many lists, events and bookmarks the cache applied, whatever their versions: a
    /// wait for the store to change cannot use `reached`, which a version that is empty,
    /// not an integer or older (a relist) does not move.
    applied: watch::Sender<u64>,
    span: tracing::Span,
    metrics: Option<Arc<dyn InformerMetrics>>,
}

/// An informer for one kind; cheap to clone (clones share one cache, one list/watch loop and
/// one set of handlers).
///
/// Its list/watch loop moves between three states:
///
/// - relist: a streaming list (a watch with `sendInitialEvents`, by default) or, where the
///   server does not support it or streaming is off, a paginated, consistent list; then an
///   atomic replace of the store, whose difference reaches the handlers as adds, updates and
///   tombstones;
/// - watch from the last resourceVersion seen (events and bookmarks alike), with bookmarks and
///   a server timeout drawn between 5 and 10 minutes; a stream that ends resumes without a
///   relist, and 410 Expired (an HTTP status or an `ERROR` event) relists;
/// - back off after any other failure, logged once with its cause: 800 ms doubling to 30 s
///   with jitter, reset after a healthy period.
///
/// The store is updated before the handlers hear of a change, under the lock that also adds
/// handlers, so a handler added late first receives the current contents as adds, then every
/// later change, none twice. See also the [`cache`](crate::cache) contract.
pub struct Informer<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone() }
    }
}

impl<K> Debug for Informer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("list_watch", &self.inner.reflector.list_watch)
            .finish_non_exhaustive()
    }
}

/// Marks the informer stopped when its run ends, however it ends: returned, dropped, or
/// unwound by a panic. Without it a dropped run would leave the informer "running" forever
/// and every later waiter hanging.
struct RunGuard<'a, K>(&'a Inner<K>);

impl<K> Drop for RunGuard<'_, K> {
    fn drop(&mut self) {
        self.0.state.send_replace(RunState::Stopped);
        self.0.stopped.send_replace(true);
    }
}

impl<K: InformerObject> Informer<K> {
    /// The informer of `reflector` over `indexer`, not yet run: what
    /// [`InformerBuilder::build`] assembles.
    pub(super) fn assemble(
        reflector: Reflector<K>,
        indexer: Indexer<K>,
        resync: Option<Duration>,
        span: tracing::Span,
        metrics: Option<Arc<dyn InformerMetrics>>,
    ) -> Self {
        Informer {
            inner: Arc::new(Inner {
                reflector,
                indexer,
                processor: Processor::new(span.clone()),
                synced: watch::channel(false).0,
                released: watch::channel(false).0,
                commit: Mutex::new(()),
                state: watch::channel(RunState::NotStarted).0,
                stopped: watch::channel(false).0,
                resync,
                last_sync_rv: Mutex::new(String::new()),
                reached: watch::channel(0).0,
                applied: watch::channel(0).0,
                span,
                metrics,
            }),
        }
    }

    /// The store this informer keeps current.
    pub fn indexer(&self) -> Indexer<K> {
        self.inner.indexer.clone()
    }

    /// What this informer lists and watches.
    pub fn list_watch(&self) -> &ListWatch<K> {
        &self.inner.reflector.list_watch
    }

    /// The resourceVersion the cache is at: that of the last list, event or bookmark it
    /// applied (client-go's `LastSyncResourceVersion`); `None` before the first list. A
    /// resumed watch starts from it.
    pub fn last_sync_resource_version(&self) -> Option<String> {
        let rv = self.inner.last_sync_rv.lock();
        (!rv.is_empty()).then(|| rv.clone())
    }

    /// Resolves once the cache has applied a list, event or bookmark at `resource_version`
    /// or later, so that it holds every write the server answered with that version or an
    /// earlier one: a reconciler's own write, say (see
    /// [`report_write`](crate::controller::report_write)). Resolves `false` at once for a
    /// version that is not an integer, which cannot be compared (resourceVersions are
    /// integers on every etcd-backed server, ordered as etcd's revisions); `true` otherwise.
    /// Resolves `false` too once the informer's run has ended short of it: its cache no longer
    /// changes, and `false` for an informer released by its last guard (its store is empty).
    /// Bound it with a timeout: a cache not started yet, or one whose watch is down,
    /// gets there late or never.
    pub async fn wait_for_resource_version(&self, resource_version: &str) -> bool {
        let Ok(target) = resource_version.parse::<u64>() else { return false };
        let mut reached = self.inner.reached.subscribe();
        let mut state = self.inner.state.subscribe();
        let mut released = self.inner.released.subscribe();
        tokio::select! {
            biased;
            // Its store was emptied: it holds no version, whatever it reached before.
            _ = released.wait_for(|r| *r) => false,
            held = reached.wait_for(|rv| *rv >= target) => held.is_ok(),
            // The run may have applied the version just before it ended.
            _ = state.wait_for(|s| *s == RunState::Stopped) => *self.inner.reached.borrow() >= target,
        }
    }

    /// This informer's identity, shared by its clones.
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as *const () as usize
    }

    /// How many lists, events and bookmarks the cache has applied.
    pub(crate) fn applied(&self) -> u64 {
        *self.inner.applied.borrow()
    }

    /// Resolves `true` once the cache has applied more than `count` lists, events and
    /// bookmarks, `false` if the informer's run ended first.
    pub(crate) async fn wait_for_applied(&self, count: u64) -> bool {
        let mut applied = self.inner.applied.subscribe();
        let mut state = self.inner.state.subscribe();
        tokio::select! {
            biased;
            moved = applied.wait_for(|n| *n > count) => moved.is_ok(),
            _ = state.wait_for(|s| *s == RunState::Stopped) => *self.inner.applied.borrow() > count,
        }
    }

    /// Whether [`run`](Self::run) is running.
    pub fn is_running(&self) -> bool {
        *self.inner.state.borrow() == RunState::Running
    }

    /// Whether the informer ran and its run has ended: its store no longer changes.
    pub fn has_stopped(&self) -> bool {
        *self.inner.state.borrow() == RunState::Stopped
    }

    pub(crate) fn state_receiver(&self) -> watch::Receiver<RunState> {
        self.inner.state.subscribe()
    }

    /// Whether its factory released it, its last [`InformerGuard`](super::InformerGuard)
    /// dropped: its store is empty and marked stale, it is not synced and does not run again.
    pub fn is_released(&self) -> bool {
        *self.inner.released.borrow()
    }

    pub(crate) fn released_receiver(&self) -> watch::Receiver<bool> {
        self.inner.released.subscribe()
    }

    /// Registers `handler`. A handler added after the informer started first receives the
    /// current contents as adds. Keep the returned registration to remove the handler.
    pub fn add_event_handler(&self, handler: impl ResourceEventHandler<K>) -> HandlerRegistration {
        let mut listeners = self.inner.processor.lock();
        let current = self.inner.indexer.list_stored();
        listeners.add(Arc::new(handler), current)
    }

    /// Registers one of the crate's own handlers that neither blocks nor runs user code to run
    /// on the informer's task (see `processor`), unless it reads objects and the store keeps
    /// JSON: then it gets a task like any other, so that decoding stays off the informer's
    /// task.
    pub(crate) fn add_inline_event_handler(
        &self,
        handler: impl InlineHandler<K> + 'static,
    ) -> HandlerRegistration {
        let mut listeners = self.inner.processor.lock();
        let current = self.inner.indexer.list_stored();
        match self.inner.indexer.is_compact() && handler.reads_objects() {
            true => listeners.add(Arc::new(handler), current),
            false => listeners.add_inline(Arc::new(handler), current),
        }
    }

    /// Removes a handler (client-go's `RemoveEventHandler`): it receives nothing after the
    /// notifications already queued for it, which it may still be handling when this returns
    /// ([`shut_down_event_handler`](Self::shut_down_event_handler) waits). Returns whether it
    /// was registered here.
    pub fn remove_event_handler(&self, registration: &HandlerRegistration) -> bool {
        self.inner.processor.lock().remove(registration)
    }

    /// Removes a handler and waits until its calls in flight are done, for at most `timeout`
    /// (client-go's `ShutDownEventHandler`): the notifications queued for it and not begun
    /// are dropped, so once this returns `Ok(true)` the handler is not called again, and
    /// whatever it holds may be torn down. Every caller waits for the same end: a second
    /// concurrent caller, and one after [`remove_event_handler`](Self::remove_event_handler)
    /// (whose queued notifications are then dropped too). `Ok(false)`: it was never
    /// registered here, or its task already ended. [`HandlerShutdownTimeout`]: a call was
    /// still running at `timeout` (the last one: none follows it); call this again with the
    /// same registration to wait on, until `Ok(true)` (or `Ok(false)` once it has ended).
    pub async fn shut_down_event_handler(
        &self,
        registration: &HandlerRegistration,
        timeout: Duration,
    ) -> Result<bool, HandlerShutdownTimeout> {
        let Some(mut done) = self.inner.processor.lock().shut_down(registration) else {
            return Ok(false);
        };
        // An error: the task is gone, and with it any call.
        let ended = async {
            let _ = done.wait_for(|done| *done).await;
        };
        match tokio::time::timeout(timeout, ended).await {
            Ok(()) => Ok(true),
            Err(_) => {
                Err(HandlerShutdownTimeout { informer: self.list_watch().to_string(), timeout })
            }
        }
    }

    /// How many handlers are registered.
    pub fn handler_count(&self) -> usize {
        self.inner.processor.lock().len()
    }

    /// Runs the list/watch loop until `shutdown` completes. Whoever runs an informer owns it:
    /// a second concurrent call returns at once, logging that the informer already runs
    /// (client-go's `Run` does the same). Another run may follow once this one ended.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        let started = self.inner.state.send_if_modified(|state| match state {
            RunState::Running => false,
            _ => {
                *state = RunState::Running;
                true
            }
        });
        let span = self.inner.span.clone();
        if self.is_released() {
            span.in_scope(|| tracing::warn!("the informer was released; not run again"));
            if started {
                drop(RunGuard(self.inner.as_ref()));
            }
            return;
        }
        if !started {
            span.in_scope(|| tracing::warn!("the informer is already running; not run twice"));
            return;
        }
        self.inner.stopped.send_replace(false);
        let _guard = RunGuard(self.inner.as_ref());
        self.inner.processor.lock().start(tokio::runtime::Handle::current());
        async {
            tracing::info!("informer started");
            tokio::select! {
                _ = shutdown => {}
                _ = self.inner.reflector.run(self.inner.as_ref()) => {}
                _ = self.resync_loop() => {}
            }
            tracing::info!("informer stopped");
        }
        .instrument(span)
        .await
    }

    /// Every resync period, replays the cache to the handlers as updates.
    async fn resync_loop(&self) {
        let Some(period) = self.inner.resync else {
            return std::future::pending().await;
        };
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        loop {
            tick.tick().await;
            if !*self.inner.synced.borrow() {
                continue;
            }
            let mut listeners = self.inner.processor.lock();
            let objects = self.inner.indexer.list_stored();
            tracing::debug!(objects = objects.len(), "resync");
            for object in objects {
                listeners.distribute(Notification::Update(object.clone(), object));
            }
        }
    }
}

impl<K: Send + Sync + 'static> Inner<K> {
    /// The processor's lock, which every store write takes; `None` once released, when a
    /// run still going writes nothing more.
    fn lock_unless_released(&self) -> Option<MutexGuard<'_, Listeners<K>>> {
        let listeners = self.processor.lock();
        (!*self.released.borrow()).then_some(listeners)
    }

    /// Runs `write` unless the informer was released, under the lock a release takes: a
    /// write either lands before the release empties the store, or not at all.
    fn commit_unless_released<R>(&self, write: impl FnOnce() -> R) -> Option<R> {
        let _commit = self.commit.lock();
        (!*self.released.borrow()).then(write)
    }

    /// Records that the cache is at `rv`, and reports it and the store's size; nothing once
    /// released.
    fn set_last_sync_resource_version(&self, rv: &str) {
        if self.commit_unless_released(|| self.note_version(rv)).is_some() {
            self.report_version(rv);
        }
    }

    /// Records `rv` as the cache's version (no user code: safe under the processor's lock).
    fn note_version(&self, rv: &str) {
        let mut last = self.last_sync_rv.lock();
        rv.clone_into(&mut last);
        drop(last);
        if let Ok(rv) = rv.parse::<u64>() {
            self.reached.send_if_modified(|reached| {
                let newer = rv > *reached;
                *reached = (*reached).max(rv);
                newer
            });
        }
        self.applied.send_modify(|n| *n += 1);
    }

    /// Tells the metrics hooks (user code: outside the processor's lock) the cache's version.
    fn report_version(&self, rv: &str) {
        if let Some(metrics) = &self.metrics {
            observe("resource_version", || metrics.resource_version(rv));
            observe("objects", || metrics.objects(self.indexer.len()));
        }
    }
}

/// The store side of the informer: what the reflector learns, applied to the indexer and
/// handed to the handlers under one lock.
impl<K: InformerObject> Sink<K> for Inner<K> {
    fn replace(&self, fresh: HashMap<ObjectKey, Stored<K>>, rv: &str) {
        let Some(mut listeners) = self.lock_unless_released() else { return };
        // Adds before the first sync are the initial list's; a relist's are not.
        let initial = !*self.synced.borrow();
        // The notifications are worked out against the store before the list replaces it, so
        // the list's map moves into the store whole (a copy of it, keys and all, would raise
        // the peak memory of a large list). This is the only writer of the store. They carry
        // the objects as stored: a compact store's are decoded by each handler's task.
        let mut changes = Vec::with_capacity(fresh.len());
        for (key, new) in &fresh {
            match self.indexer.peek(key) {
                None => changes.push(Notification::Add(new.clone(), initial)),
                Some(prev) if prev.resource_version() != new.resource_version() => {
                    changes.push(Notification::Update(prev, new.clone()))
                }
                Some(_) => {}
            }
        }
        let Some(removed) = self.commit_unless_released(|| self.indexer.replace(fresh)) else {
            return;
        };
        for change in changes {
            listeners.distribute(change);
        }
        for (key, object) in removed {
            let Some(object) = object.load() else { continue };
            let tombstone = DeletedFinalStateUnknown { key, object };
            listeners.distribute(Notification::Delete(Deleted::Tombstone(tombstone)));
        }
        drop(listeners);
        // Synced under the lock a release takes: a release that landed after the list's
        // store write is seen here, and one after this mark clears it.
        let synced = self.commit_unless_released(|| {
            self.note_version(rv);
            self.synced.send_replace(true);
        });
        if synced.is_some() {
            self.report_version(rv);
        }
    }

    fn upsert(&self, object: Arc<K>, rv: &str) {
        let Ok(key) = meta_namespace_key_func(object.as_ref()) else {
            tracing::warn!("ignoring an object without a name");
            return;
        };
        let Some(mut listeners) = self.lock_unless_released() else { return };
        let upserted = self.commit_unless_released(|| self.indexer.upsert(key, object.clone()));
        let notification = match upserted {
            None => return,
            Some(Some(old)) => Notification::Update(old, Stored::Shared(object)),
            Some(None) => Notification::add(object, false),
        };
        listeners.distribute(notification);
        drop(listeners);
        self.set_last_sync_resource_version(rv);
    }

    fn delete(&self, object: Arc<K>, rv: &str) {
        let Ok(key) = meta_namespace_key_func(object.as_ref()) else {
            tracing::warn!("ignoring a deleted object without a name");
            return;
        };
        let Some(mut listeners) = self.lock_unless_released() else { return };
        if self.commit_unless_released(|| self.indexer.remove(&key)).is_none() {
            return;
        }
        listeners.distribute(Notification::Delete(Deleted::Object(object)));
        drop(listeners);
        self.set_last_sync_resource_version(rv);
    }

    fn cached(&self, key: &ObjectKey) -> Option<Stored<K>> {
        self.indexer.peek(key)
    }

    fn bookmark(&self, rv: &str) {
        self.set_last_sync_resource_version(rv);
    }
}

/// An informer with its kind erased, for those that hold informers of many kinds: the
/// factory that runs them and the controllers that wait for them.
/// What [`HasSynced`] has (its description, its synced, released and stopped receivers) it
/// takes from there.
pub(crate) trait InformerHandle: HasSynced + 'static {
    /// Where its run stands.
    fn state_receiver(&self) -> watch::Receiver<RunState>;
    /// Runs it until `stop` completes.
    fn run_until(&self, stop: BoxFuture<'static, ()>) -> BoxFuture<'static, ()>;
    /// Empties its store, marks it stale and not synced, and drops what a run still going
    /// learns: its last user let it go. Synchronous, so that an informer made afresh on the
    /// same store fills it after; it takes no lock a handler's code may hold (only the
    /// informer's commit lock and its store's), so its factory calls it under its own lock.
    /// `false` if it was released already.
    fn release_cache(&self) -> bool;
    /// Tells its metrics that it was released (user code: outside every lock).
    fn report_released(&self);
}

impl<K: InformerObject> InformerHandle for Informer<K> {
    fn state_receiver(&self) -> watch::Receiver<RunState> {
        Informer::state_receiver(self)
    }
    fn run_until(&self, stop: BoxFuture<'static, ()>) -> BoxFuture<'static, ()> {
        let informer = self.clone();
        async move { informer.run(stop).await }.boxed()
    }
    fn release_cache(&self) -> bool {
        // Under the lock every store write takes: a write of a run still going lands before
        // the store is emptied or sees the flag and is dropped.
        let commit = self.inner.commit.lock();
        if self.inner.released.send_replace(true) {
            return false;
        }
        self.inner.synced.send_replace(false);
        self.inner.indexer.release();
        drop(commit);
        true
    }
    fn report_released(&self) {
        if let Some(metrics) = &self.inner.metrics {
            observe("released", || metrics.released());
        }
    }
}

/// Something whose cache can be synced; see [`wait_for_cache_sync`](super::wait_for_cache_sync).
/// Only [`has_synced`](Self::has_synced) and [`synced_receiver`](Self::synced_receiver) are
/// required; the others have defaults for what is never released nor stopped (a wrapper of an
/// [`Informer`] forwards them all, or the waits cannot tell that it was released or stopped):
///
/// ```
/// use ctrlkit::cache::{HasSynced, wait_for_cache_sync};
/// use tokio::sync::watch;
///
/// /// A cache of the user's own, filled by hand.
/// struct Filled(watch::Sender<bool>);
///
/// impl HasSynced for Filled {
///     fn has_synced(&self) -> bool {
///         *self.0.borrow()
///     }
///     fn synced_receiver(&self) -> watch::Receiver<bool> {
///         self.0.subscribe()
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let filled = Filled(watch::channel(true).0);
/// assert_eq!(wait_for_cache_sync(&[&filled], std::future::pending()).await, Ok(()));
/// # }
/// ```
pub trait HasSynced: Send + Sync {
    /// Whether the first list is in the store.
    fn has_synced(&self) -> bool;
    /// A receiver that sees `true` once the first list is in the store.
    fn synced_receiver(&self) -> watch::Receiver<bool>;
    /// What it lists and watches, for errors that name the caches that did not sync.
    fn describe(&self) -> String {
        "an informer".to_owned()
    }
    /// A receiver that sees `true` once it is released by its last
    /// [`InformerGuard`](super::InformerGuard) (then it never syncs); `None` (the default)
    /// for what is never released.
    fn released_receiver(&self) -> Option<watch::Receiver<bool>> {
        None
    }
    /// A receiver that sees `true` once a run of it ended (then it does not sync until it
    /// runs again; it turns `false` when the next run begins, at its first poll); `None` (the
    /// default) for what has no run of its own.
    fn stopped_receiver(&self) -> Option<watch::Receiver<bool>> {
        None
    }
}

impl<K: InformerObject> HasSynced for Informer<K> {
    fn has_synced(&self) -> bool {
        *self.inner.synced.borrow()
    }
    fn synced_receiver(&self) -> watch::Receiver<bool> {
        self.inner.synced.subscribe()
    }
    fn describe(&self) -> String {
        self.list_watch().to_string()
    }
    fn released_receiver(&self) -> Option<watch::Receiver<bool>> {
        Some(self.inner.released.subscribe())
    }
    fn stopped_receiver(&self) -> Option<watch::Receiver<bool>> {
        Some(self.inner.stopped.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a run still going hears after its informer was released changes nothing: a
    /// bookmark moves no version a reader waits on.
    #[tokio::test]
    async fn a_bookmark_after_the_release_moves_no_version() {
        let informer = Informer::new(crate::cache::list_watch::offline_configmaps());
        assert!(InformerHandle::release_cache(&informer));
        informer.inner.bookmark("7");
        assert_eq!(*informer.inner.reached.borrow(), 0, "a bookmark after the release moved it");
        assert_eq!(informer.last_sync_resource_version(), None);
    }
}
