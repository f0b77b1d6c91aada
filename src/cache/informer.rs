//! [`Informer`]: lists, then watches, one kind of object; keeps an [`Indexer`] in step and
//! tells every registered handler what changed.
//!
//! The list/watch loop is an explicit state machine ([`State`]), one function per
//! transition, in the manner of kube-runtime's watcher:
//!
//! - `Relist`: a paginated, consistent list (or, in streaming mode, a watch with
//!   `sendInitialEvents`), then an atomic replace of the store, whose difference reaches the
//!   handlers as adds, updates and tombstones. → `Watch(rv)`.
//! - `Watch(rv)`: a watch from `rv`, with bookmarks, and a server timeout drawn between 5 and
//!   10 minutes. A stream that ends resumes from the last resourceVersion seen (events and
//!   bookmarks alike) without a relist; 410 Expired, as an HTTP status or an `ERROR` event,
//!   → `Relist`.
//! - `Backoff(delay, next)`: after any other failure, logged once with its cause; 800 ms
//!   doubling to 30 s with jitter, reset after a healthy period.
//!
//! The store is updated before the handlers hear of a change, under the same lock that adds
//! a handler, so a handler added late first receives the current contents as adds and then
//! every change after them, none twice.

use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube_client::api::{ObjectList, WatchEvent};
use kube_client::{Resource, core::Status};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::backoff::{Backoff, BackoffConfig};
use super::handler::{Deleted, DeletedFinalStateUnknown, Notification, ResourceEventHandler};
use super::strip::strip_managed_fields;
use super::{Indexer, ListWatch, ObjectKey, meta_namespace_key_func};

/// The bound of every object an informer can cache.
pub trait InformerObject:
    Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}
impl<K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static> InformerObject for K {}

/// An optional step between the server and the store, such as dropping `managedFields`.
pub type Transform<K> = Arc<dyn Fn(K) -> K + Send + Sync>;

/// A list or watch failure, as the informer logs it before it retries.
#[derive(Debug, thiserror::Error)]
pub enum InformerError {
    /// A list request failed.
    #[error("listing failed: {0}")]
    List(#[source] kube_client::Error),
    /// A watch request failed.
    #[error("starting a watch from resourceVersion {rv:?} failed: {source}")]
    Watch {
        /// Where the watch was to start.
        rv: String,
        /// The cause.
        #[source]
        source: kube_client::Error,
    },
    /// An open watch broke: a transport or decoding error.
    #[error("watch from resourceVersion {rv:?} broke: {source}")]
    Stream {
        /// The last resourceVersion seen.
        rv: String,
        /// The cause.
        #[source]
        source: kube_client::Error,
    },
    /// The server sent an `ERROR` event.
    #[error("watch returned an error event: {0}")]
    Event(String),
    /// A watch ended within a second having delivered nothing: treated as a failure, as
    /// client-go's reflector does, so a server that drops watches at once is not hammered.
    #[error("watch from resourceVersion {0:?} closed within a second with no events")]
    ShortWatch(String),
    /// A streaming list ended before its initial events did.
    #[error("streaming list ended before its initial events did")]
    StreamingListCut,
}

fn is_expired(err: &kube_client::Error) -> bool {
    matches!(err, kube_client::Error::Api(s) if s.code == 410)
}

fn describe_status(status: &Status) -> String {
    format!("{} {}: {}", status.code, status.reason, status.message)
}

/// Where the list/watch loop stands.
#[derive(Debug)]
enum State {
    Relist,
    Watch(String),
    Backoff(Duration, Box<State>),
}

/// How a watch stream ended.
enum WatchEnd {
    /// The server closed it (timeout, restart): resume from `rv`.
    Closed(String),
    /// 410: the cache must be rebuilt.
    Expired,
    /// Anything else: back off, then resume from `rv` (or relist if `rv` is `None`).
    Failed(Option<String>, InformerError),
}

/// A handler registered before `run`, with the notifications queued for it.
type PendingListener<K> =
    (Arc<dyn ResourceEventHandler<K>>, mpsc::UnboundedReceiver<Notification<K>>);

struct Listeners<K> {
    active: Vec<mpsc::UnboundedSender<Notification<K>>>,
    /// Handlers added before `run`: their tasks start with it.
    pending: Vec<PendingListener<K>>,
    runtime: Option<tokio::runtime::Handle>,
}

impl<K> Listeners<K> {
    fn distribute(&mut self, notification: Notification<K>) {
        self.active.retain(|tx| tx.send(notification.clone()).is_ok());
    }
}

/// Settings of an [`Informer`], set with [`InformerBuilder`].
struct Config<K> {
    keep_managed_fields: bool,
    resync: Option<Duration>,
    transform: Option<Transform<K>>,
    backoff: BackoffConfig,
    streaming_list: bool,
}

struct Inner<K> {
    list_watch: ListWatch<K>,
    indexer: Indexer<K>,
    /// Also serializes store updates with handler registration; see the module docs.
    listeners: Mutex<Listeners<K>>,
    synced: watch::Sender<bool>,
    config: Config<K>,
    running: AtomicBool,
    random: RandomState,
    /// The resourceVersion of the last list, event or bookmark applied; empty before the
    /// first list.
    last_sync_rv: Mutex<String>,
}

/// A shared informer for one kind; cheap to clone.
///
/// Its list/watch loop moves between three states:
///
/// - relist: a paginated, consistent list (or, in streaming mode, a watch with
///   `sendInitialEvents`), then an atomic replace of the store, whose difference reaches the
///   handlers as adds, updates and tombstones;
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
            .field("list_watch", &self.inner.list_watch)
            .finish_non_exhaustive()
    }
}

/// Builds an [`Informer`].
pub struct InformerBuilder<K> {
    list_watch: ListWatch<K>,
    indexer: Option<Indexer<K>>,
    config: Config<K>,
}

impl<K: InformerObject> InformerBuilder<K> {
    /// Replays every cached object to the handlers as an update every `period` (client-go's
    /// resync). Off by default.
    pub fn resync(mut self, period: Duration) -> Self {
        self.config.resync = Some(period).filter(|p| !p.is_zero());
        self
    }

    /// Keeps `metadata.managedFields` in cached objects. By default the informer drops them
    /// before storing: decoded, they are half of a typical pod's memory and controllers
    /// rarely read them (client-go keeps them; controller-runtime users strip them with a
    /// cache transform).
    pub fn keep_managed_fields(mut self, keep: bool) -> Self {
        self.config.keep_managed_fields = keep;
        self
    }

    /// Runs `f` on every object before it is stored (after `managedFields` are dropped).
    pub fn transform(mut self, f: impl Fn(K) -> K + Send + Sync + 'static) -> Self {
        self.config.transform = Some(Arc::new(f));
        self
    }

    /// Backoff after failures (default: 800 ms doubling to 30 s, reset after 2 minutes).
    pub fn backoff(mut self, backoff: BackoffConfig) -> Self {
        self.config.backoff = backoff;
        self
    }

    /// Builds the cache from a streaming list (a watch with `sendInitialEvents`) instead of a
    /// paginated list; falls back to list + watch when the server refuses it.
    pub fn streaming_list(mut self, on: bool) -> Self {
        self.config.streaming_list = on;
        self
    }

    /// Uses `indexer` as the store (for indexes added before the informer is built).
    pub fn indexer(mut self, indexer: Indexer<K>) -> Self {
        self.indexer = Some(indexer);
        self
    }

    /// The informer.
    pub fn build(self) -> Informer<K> {
        let (synced, _) = watch::channel(false);
        Informer {
            inner: Arc::new(Inner {
                list_watch: self.list_watch,
                indexer: self.indexer.unwrap_or_default(),
                listeners: Mutex::new(Listeners {
                    active: Vec::new(),
                    pending: Vec::new(),
                    runtime: None,
                }),
                synced,
                config: self.config,
                running: AtomicBool::new(false),
                random: RandomState::new(),
                last_sync_rv: Mutex::new(String::new()),
            }),
        }
    }
}

/// Something whose cache can be synced; see [`wait_for_cache_sync`].
pub trait HasSynced: Send + Sync {
    /// Whether the first list is in the store.
    fn has_synced(&self) -> bool;
    /// A receiver that sees `true` once the first list is in the store.
    fn synced_receiver(&self) -> watch::Receiver<bool>;
}

impl<K: InformerObject> HasSynced for Informer<K> {
    fn has_synced(&self) -> bool {
        *self.inner.synced.borrow()
    }
    fn synced_receiver(&self) -> watch::Receiver<bool> {
        self.inner.synced.subscribe()
    }
}

/// Waits until every informer has synced (true) or `shutdown` completes first (false), as
/// client-go's `WaitForCacheSync`; it wakes on the sync itself rather than polling.
pub async fn wait_for_cache_sync(
    informers: &[&dyn HasSynced],
    shutdown: impl Future<Output = ()>,
) -> bool {
    let receivers: Vec<_> = informers.iter().map(|i| i.synced_receiver()).collect();
    let all_synced = async move {
        for mut rx in receivers {
            // An error means the informer is gone: it will never sync.
            if rx.wait_for(|synced| *synced).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        biased;
        _ = all_synced => true,
        _ = shutdown => false,
    }
}

impl<K: InformerObject> Informer<K> {
    /// An informer with default settings (no resync, no transform, list + watch).
    pub fn new(list_watch: ListWatch<K>) -> Self {
        Self::builder(list_watch).build()
    }

    /// A builder for resync, transform, backoff, streaming lists and a custom indexer.
    pub fn builder(list_watch: ListWatch<K>) -> InformerBuilder<K> {
        InformerBuilder {
            list_watch,
            indexer: None,
            config: Config {
                keep_managed_fields: false,
                resync: None,
                transform: None,
                backoff: BackoffConfig::default(),
                streaming_list: false,
            },
        }
    }

    /// The store this informer keeps current.
    pub fn indexer(&self) -> Indexer<K> {
        self.inner.indexer.clone()
    }

    /// The resourceVersion the cache is at: that of the last list, event or bookmark it
    /// applied (client-go's `LastSyncResourceVersion`); `None` before the first list. A
    /// resumed watch starts from it.
    pub fn last_sync_resource_version(&self) -> Option<String> {
        let rv = self.inner.last_sync_rv.lock().unwrap_or_else(PoisonError::into_inner);
        (!rv.is_empty()).then(|| rv.clone())
    }

    fn set_last_sync_resource_version(&self, rv: &str) {
        let mut last = self.inner.last_sync_rv.lock().unwrap_or_else(PoisonError::into_inner);
        rv.clone_into(&mut last);
    }

    /// Whether [`run`](Self::run) is running.
    pub fn is_running(&self) -> bool {
        self.inner.running.load(Ordering::SeqCst)
    }

    fn listeners(&self) -> MutexGuard<'_, Listeners<K>> {
        self.inner.listeners.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `handler`. A handler added after the informer started first receives the
    /// current contents as adds.
    pub fn add_event_handler(&self, handler: impl ResourceEventHandler<K>) {
        let handler: Arc<dyn ResourceEventHandler<K>> = Arc::new(handler);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut listeners = self.listeners();
        self.inner.indexer.with_items(|items| {
            for object in items.values() {
                let _ = tx.send(Notification::Add(object.clone()));
            }
        });
        match &listeners.runtime {
            Some(runtime) => {
                runtime.spawn(run_listener(handler, rx));
            }
            None => listeners.pending.push((handler, rx)),
        }
        listeners.active.push(tx);
    }

    /// Runs the list/watch loop until `shutdown` completes. A second concurrent call returns
    /// at once: one informer serves many controllers.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        if self.inner.running.swap(true, Ordering::SeqCst) {
            tracing::debug!("informer already running");
            return;
        }
        {
            let mut listeners = self.listeners();
            let runtime = tokio::runtime::Handle::current();
            for (handler, rx) in listeners.pending.drain(..) {
                runtime.spawn(run_listener(handler, rx));
            }
            listeners.runtime = Some(runtime);
        }
        tokio::select! {
            _ = shutdown => {}
            _ = self.list_watch_loop() => {}
            _ = self.resync_loop() => {}
        }
        self.inner.running.store(false, Ordering::SeqCst);
    }

    async fn list_watch_loop(&self) {
        let mut backoff = Backoff::new(self.inner.config.backoff);
        let mut streaming = self.inner.config.streaming_list;
        let mut state = State::Relist;
        loop {
            state = match state {
                State::Relist if streaming => match self.streaming_list().await {
                    Ok((rv, stream)) => {
                        self.after_watch(self.consume(stream, rv).await, &mut backoff)
                    }
                    Err(StreamingError::Refused(why)) => {
                        tracing::info!(%why, "server refused a streaming list; falling back to list + watch");
                        streaming = false;
                        State::Relist
                    }
                    Err(StreamingError::Expired) => State::Relist,
                    Err(StreamingError::Failed(err)) => {
                        tracing::warn!(error = %err, "streaming list failed");
                        State::Backoff(backoff.next_delay(), Box::new(State::Relist))
                    }
                },
                State::Relist => match self.list().await {
                    Ok(rv) => State::Watch(rv),
                    Err(err) => {
                        tracing::warn!(error = %err, "list failed");
                        State::Backoff(backoff.next_delay(), Box::new(State::Relist))
                    }
                },
                State::Watch(rv) => {
                    match self.inner.list_watch.watch(&rv, self.watch_timeout(), false).await {
                        Ok(stream) => {
                            self.after_watch(self.consume(stream, rv).await, &mut backoff)
                        }
                        Err(err) if is_expired(&err) => {
                            tracing::info!(%rv, "resourceVersion expired; relisting");
                            State::Relist
                        }
                        Err(source) => {
                            let err = InformerError::Watch { rv: rv.clone(), source };
                            tracing::warn!(error = %err, "watch failed");
                            State::Backoff(backoff.next_delay(), Box::new(State::Watch(rv)))
                        }
                    }
                }
                State::Backoff(delay, next) => {
                    tracing::debug!(?delay, "backing off");
                    tokio::time::sleep(delay).await;
                    *next
                }
            };
        }
    }

    /// The state after a watch ended.
    fn after_watch(&self, end: WatchEnd, backoff: &mut Backoff) -> State {
        match end {
            WatchEnd::Closed(rv) => State::Watch(rv),
            WatchEnd::Expired => {
                tracing::info!("watch expired (410); relisting");
                State::Relist
            }
            WatchEnd::Failed(rv, err) => {
                tracing::warn!(error = %err, "watch failed");
                let next = rv.map_or(State::Relist, State::Watch);
                State::Backoff(backoff.next_delay(), Box::new(next))
            }
        }
    }

    /// A server-side watch timeout between 5 and 10 minutes, so watchers spread out.
    fn watch_timeout(&self) -> u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        300 + (self.inner.random.hash_one(nanos) % 301) as u32
    }

    /// Lists every object, page by page, and replaces the store. Returns the list's
    /// resourceVersion. An expired continue token restarts the list in one request.
    ///
    /// Pages are fetched as text and decoded on blocking threads, up to two at once, while
    /// the next page is requested: decoding dominates a large list, and this spreads it over
    /// the cores. Each page is transformed (managedFields dropped) as soon as it is decoded,
    /// which keeps the peak memory of a large list down.
    async fn list(&self) -> Result<String, InformerError> {
        let mut decoding: VecDeque<JoinHandle<Result<Vec<Arc<K>>, serde_json::Error>>> =
            VecDeque::new();
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        let mut paginate = true;
        let decode_failed =
            |e: serde_json::Error| InformerError::List(kube_client::Error::SerdeError(e));
        let rv = loop {
            let text = match self.inner.list_watch.list_page_text(token.as_deref(), paginate).await
            {
                Ok(text) => text,
                Err(err) if is_expired(&err) && token.is_some() => {
                    tracing::info!("list continuation expired; listing again in one request");
                    for task in decoding.drain(..) {
                        task.abort();
                    }
                    items.clear();
                    token = None;
                    paginate = false;
                    continue;
                }
                Err(err) => return Err(InformerError::List(err)),
            };
            // Only the list's metadata; serde skips the items without building them.
            let head: ListHead = serde_json::from_str(&text).map_err(decode_failed)?;
            if decoding.len() >= 2 {
                let oldest = decoding.pop_front().expect("two in flight");
                items.extend(join_decode(oldest).await.map_err(decode_failed)?);
            }
            let this = self.clone();
            decoding.push_back(tokio::task::spawn_blocking(move || {
                let text = match this.inner.config.keep_managed_fields {
                    true => text,
                    false => strip_managed_fields(&text).unwrap_or(text),
                };
                let page: ObjectList<K> = serde_json::from_str(&text)?;
                // Into an `Arc` on the decoding thread: the store's final allocation, made once.
                Ok(page.items.into_iter().map(|o| Arc::new(this.transformed(o))).collect())
            }));
            match head.metadata.continue_.filter(|t| !t.is_empty()) {
                Some(next) => token = Some(next),
                None => break head.metadata.resource_version.unwrap_or_default(),
            }
        };
        for task in decoding {
            items.extend(join_decode(task).await.map_err(decode_failed)?);
        }
        tracing::debug!(objects = items.len(), %rv, "listed");
        self.replace(items);
        self.set_last_sync_resource_version(&rv);
        Ok(rv)
    }

    /// Opens a streaming list and reads it up to the initial-events-end bookmark, then
    /// replaces the store. Returns the bookmark's version and the open stream.
    async fn streaming_list(
        &self,
    ) -> Result<
        (String, impl Stream<Item = kube_client::Result<WatchEvent<K>>> + Send + use<K>),
        StreamingError,
    > {
        let refused = |err: &kube_client::Error| matches!(err, kube_client::Error::Api(s) if (400..500).contains(&s.code) && s.code != 410 && s.code != 429);
        let mut stream = match self.inner.list_watch.watch("", self.watch_timeout(), true).await {
            Ok(stream) => stream.boxed(),
            Err(err) if refused(&err) => return Err(StreamingError::Refused(err.to_string())),
            Err(err) => return Err(StreamingError::Failed(InformerError::List(err))),
        };
        let mut items: HashMap<ObjectKey, Arc<K>> = HashMap::new();
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                    if let Ok(key) = meta_namespace_key_func(&o) {
                        items.insert(key, Arc::new(self.transformed(o)));
                    }
                }
                Ok(WatchEvent::Deleted(o)) => {
                    if let Ok(key) = meta_namespace_key_func(&o) {
                        items.remove(&key);
                    }
                }
                Ok(WatchEvent::Bookmark(b)) => {
                    if b.metadata.annotations.get("k8s.io/initial-events-end").map(String::as_str)
                        == Some("true")
                    {
                        self.replace(items.into_values().collect());
                        self.set_last_sync_resource_version(&b.metadata.resource_version);
                        return Ok((b.metadata.resource_version, stream));
                    }
                }
                Ok(WatchEvent::Error(status)) if status.code == 410 => {
                    return Err(StreamingError::Expired);
                }
                Ok(WatchEvent::Error(status)) if (400..500).contains(&status.code) => {
                    return Err(StreamingError::Refused(describe_status(&status)));
                }
                Ok(WatchEvent::Error(status)) => {
                    return Err(StreamingError::Failed(InformerError::Event(describe_status(
                        &status,
                    ))));
                }
                Err(source) => {
                    return Err(StreamingError::Failed(InformerError::Stream {
                        rv: String::new(),
                        source,
                    }));
                }
            }
        }
        Err(StreamingError::Failed(InformerError::StreamingListCut))
    }

    /// Applies a watch stream's events until it ends; a watch that closes within a second
    /// with no events at all counts as a failure.
    async fn consume(
        &self,
        stream: impl Stream<Item = kube_client::Result<WatchEvent<K>>>,
        rv: String,
    ) -> WatchEnd {
        let started = tokio::time::Instant::now();
        let events = std::sync::atomic::AtomicUsize::new(0);
        let counted = stream.inspect(|_| {
            events.fetch_add(1, Ordering::Relaxed);
        });
        match self.consume_inner(counted, rv).await {
            WatchEnd::Closed(rv)
                if events.load(Ordering::Relaxed) == 0
                    && started.elapsed() < Duration::from_secs(1) =>
            {
                WatchEnd::Failed(Some(rv.clone()), InformerError::ShortWatch(rv))
            }
            end => end,
        }
    }

    /// Applies a watch stream's events until it ends.
    async fn consume_inner(
        &self,
        stream: impl Stream<Item = kube_client::Result<WatchEvent<K>>>,
        mut rv: String,
    ) -> WatchEnd {
        tokio::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                    rv = o.meta().resource_version.clone().unwrap_or(rv);
                    self.upsert(o);
                    self.set_last_sync_resource_version(&rv);
                }
                Ok(WatchEvent::Deleted(o)) => {
                    rv = o.meta().resource_version.clone().unwrap_or(rv);
                    self.delete(o);
                    self.set_last_sync_resource_version(&rv);
                }
                Ok(WatchEvent::Bookmark(b)) => {
                    rv = b.metadata.resource_version;
                    self.set_last_sync_resource_version(&rv);
                }
                Ok(WatchEvent::Error(status)) if status.code == 410 => return WatchEnd::Expired,
                Ok(WatchEvent::Error(status)) => {
                    // client-go relists after any other error event.
                    return WatchEnd::Failed(None, InformerError::Event(describe_status(&status)));
                }
                Err(source) => {
                    return WatchEnd::Failed(
                        Some(rv.clone()),
                        InformerError::Stream { rv, source },
                    );
                }
            }
        }
        WatchEnd::Closed(rv)
    }

    fn transformed(&self, mut object: K) -> K {
        if !self.inner.config.keep_managed_fields {
            object.meta_mut().managed_fields = None;
        }
        match &self.inner.config.transform {
            Some(f) => f(object),
            None => object,
        }
    }

    fn upsert(&self, object: K) {
        let object = self.transformed(object);
        let Ok(key) = meta_namespace_key_func(&object) else {
            tracing::warn!("ignoring an object without a name");
            return;
        };
        let object = Arc::new(object);
        let mut listeners = self.listeners();
        let notification = match self.inner.indexer.upsert(key, object.clone()) {
            Some(old) => Notification::Update(old, object),
            None => Notification::Add(object),
        };
        listeners.distribute(notification);
    }

    fn delete(&self, object: K) {
        let object = self.transformed(object);
        let Ok(key) = meta_namespace_key_func(&object) else {
            tracing::warn!("ignoring a deleted object without a name");
            return;
        };
        let mut listeners = self.listeners();
        self.inner.indexer.remove(&key);
        listeners.distribute(Notification::Delete(Deleted::Object(Arc::new(object))));
    }

    /// Replaces the store with `items` (transformed already) and tells the handlers the
    /// difference.
    fn replace(&self, items: Vec<Arc<K>>) {
        let mut fresh = HashMap::with_capacity(items.len());
        for object in items {
            match meta_namespace_key_func(object.as_ref()) {
                Ok(key) => {
                    fresh.insert(key, object);
                }
                Err(_) => tracing::warn!("ignoring a listed object without a name"),
            }
        }
        let mut listeners = self.listeners();
        let old = self.inner.indexer.replace(fresh.clone());
        for (key, new) in &fresh {
            match old.get(key) {
                None => listeners.distribute(Notification::Add(new.clone())),
                Some(prev) if prev.meta().resource_version != new.meta().resource_version => {
                    listeners.distribute(Notification::Update(prev.clone(), new.clone()))
                }
                Some(_) => {}
            }
        }
        for (key, object) in old {
            if !fresh.contains_key(&key) {
                let tombstone = DeletedFinalStateUnknown { key, object };
                listeners.distribute(Notification::Delete(Deleted::Tombstone(tombstone)));
            }
        }
        drop(listeners);
        self.inner.synced.send_replace(true);
    }

    /// Every resync period, replays the cache to the handlers as updates.
    async fn resync_loop(&self) {
        let Some(period) = self.inner.config.resync else {
            return std::future::pending().await;
        };
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        loop {
            tick.tick().await;
            if !self.has_synced() {
                continue;
            }
            let mut listeners = self.listeners();
            let objects = self.inner.indexer.list();
            tracing::debug!(objects = objects.len(), "resync");
            for object in objects {
                listeners.distribute(Notification::Update(object.clone(), object));
            }
        }
    }
}

/// The metadata of a list response, read without decoding its items.
#[derive(serde::Deserialize)]
struct ListHead {
    #[serde(default)]
    metadata: ListMeta,
}

/// The objects of a page decoded on a blocking thread. A decoding thread that panicked
/// (a bug in a transform) is reported as a decode error rather than tearing the informer down.
async fn join_decode<K>(
    task: JoinHandle<Result<Vec<Arc<K>>, serde_json::Error>>,
) -> Result<Vec<Arc<K>>, serde_json::Error> {
    match task.await {
        Ok(result) => result,
        Err(join) => Err(serde::de::Error::custom(format!("decoding a list page failed: {join}"))),
    }
}

enum StreamingError {
    Refused(String),
    Expired,
    Failed(InformerError),
}

/// Delivers notifications to one handler, catching its panics.
async fn run_listener<K: Send + Sync + 'static>(
    handler: Arc<dyn ResourceEventHandler<K>>,
    mut rx: mpsc::UnboundedReceiver<Notification<K>>,
) {
    while let Some(notification) = rx.recv().await {
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| match &notification {
            Notification::Add(o) => handler.on_add(o),
            Notification::Update(old, new) => handler.on_update(old, new),
            Notification::Delete(d) => handler.on_delete(d),
        }));
        if let Err(panic) = outcome {
            tracing::error!(panic = %panic_message(&panic), "event handler panicked; it keeps receiving events");
        }
    }
}

/// The message of a caught panic.
pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".to_owned())
}
