//! The list/watch loop of one informer: client-go's `Reflector`, as an explicit state machine
//! ([`State`]) with one function per transition, in the manner of kube-runtime's watcher.
//!
//! - `Relist`: a streaming list (a watch with `sendInitialEvents`, read up to the bookmark
//!   annotated `k8s.io/initial-events-end`; the default, as client-go's since 1.35) or a
//!   paginated, consistent list, then the whole content handed to the [`Sink`] at once. →
//!   `Watch(rv)` (a streaming list goes on as that watch).
//! - `Watch(rv)`: a watch from `rv`, with bookmarks, and a server timeout drawn between 5 and
//!   10 minutes. A stream that ends resumes from the last resourceVersion seen (events and
//!   bookmarks alike) without a relist; 410 Expired, as an HTTP status or an `ERROR` event,
//!   → `Expired`.
//! - `Expired`: streaming lists are tried again (if configured), → `Relist`.
//! - `Backoff(delay, next)`: after any other failure, logged once with its cause (or handed
//!   to the [`WatchErrorHandler`] instead); 800 ms doubling to 30 s with jitter, reset after a
//!   healthy period.
//!
//! A server that refuses a streaming list (a 4xx other than 410 and 429, as Kubernetes before
//! 1.27 answers), or accepts it but ends the stream, or sends nothing for
//! [`INITIAL_EVENTS_END_WAIT`], without the initial-events-end bookmark (aggregated API servers
//! may; kubernetes/kubernetes#140890), does not support them: the informer warns once and
//! lists instead, in the same relist, and tries streaming again only at the relist a later
//! 410 forces. A transport failure of a streaming list is an ordinary failure: backed off, and
//! retried as a streaming list.
//!
//! A watch asks the server to end it after `timeoutSeconds` (5 to 10 minutes); one still open
//! 30 s after that has stalled (the server stopped sending without closing it, or the
//! connection died without a reset): it is given up and resumed from its last version, so a
//! silent stream costs at most 10.5 minutes, whatever the client's read timeout.
//!
//! Every object passes through [`Prepare`] (managedFields dropped, the user's transform) on
//! its way in. A transform that panics fails the list or watch it came in, like any other
//! failure: logged with the object's key, backed off, retried (a watch resumes from the
//! version before the object, a list starts over), on the list, watch and streaming-list
//! paths alike. Nothing is skipped, so the cache never silently lacks an object.
//!
//! Version skew: an informer reading protobuf that meets an object holding a field the
//! vendored messages lack (a server newer than them) caches nothing of that list page or
//! event, switches to JSON for the rest of its life, and relists (no backoff: the next
//! request differs). It warns once, naming the message and field number, and counts it
//! (`wire_format_fallback`). Lists, streaming lists and watches alike, so the cache never
//! holds an object with fewer fields than its JSON.
//!
//! But for depth: an object nested deeper than the informer's `max_depth` (see the `depth`
//! module) is skipped, named in an error log and counted (`object_skipped`). Where the cache
//! holds an older copy of it, that copy stays, and the log says so: a watch event that makes
//! a cached object too deep changes nothing, and a relist (a list, or a streaming list, after
//! a 410 say) that finds it too deep keeps the copy rather than reporting it deleted. A
//! controller sees the object as it last was within the limit, never a deletion it could act
//! on destructively; its `resourceVersion` says which version that was. A DELETED event whose
//! final state is too deep is still a delete: the cache drops its copy and handlers are told
//! of the delete with that last copy (as client-go tells the last state known), with a warning.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube_client::api::{ObjectList, WatchEvent};
use tokio::task::JoinHandle;

use super::backoff::{Backoff, BackoffConfig};
use super::initial_events::{Batches, Initial};
use super::list_watch::Page;
use super::metrics::{InformerMetrics, RequestResult, WatchEventType};
use super::object::depth::{self, TooDeep, is_too_deep};
use super::object::stored::Stored;
use super::object::strip::strip_managed_fields;
use super::watch_stream::{Line, SKIPPED, SKIPPED_DELETED, SKIPPED_OBJECT, UNKNOWN_FIELD, events};
use super::wire::{self, Body, Encoding, WireFormat};
use super::{InformerObject, ListWatch, ObjectKey};
use crate::panic::{catch, observe};

use super::informer_error::{InformerError, describe_status};
use super::object::prepare::Prepare;

/// Where a reflector puts what it learns: the informer's store, and through it the handlers.
pub(crate) trait Sink<K>: Send + Sync {
    /// A list's whole content, at its resourceVersion `rv`, by key, as the store keeps it.
    fn replace(&self, items: HashMap<ObjectKey, Stored<K>>, rv: &str);
    /// An object added or modified, by an event at `rv`.
    fn upsert(&self, object: Arc<K>, rv: &str);
    /// An object deleted, by an event at `rv`.
    fn delete(&self, object: Arc<K>, rv: &str);
    /// A bookmark: the cache is current up to `rv`.
    fn bookmark(&self, rv: &str);
    /// The object cached under `key`, as the store keeps it, if any.
    fn cached(&self, key: &ObjectKey) -> Option<Stored<K>>;
}

/// The reflector's settings.
pub(crate) struct ReflectorConfig<K> {
    pub(crate) prepare: Prepare<K>,
    pub(crate) backoff: BackoffConfig,
    pub(crate) streaming_list: bool,
    pub(crate) wire_format: WireFormat,
    pub(crate) metrics: Option<Arc<dyn InformerMetrics>>,
    pub(crate) error_handler: Option<WatchErrorHandler>,
}

/// Called with each failure of an informer's list or watch, before it backs off and tries
/// again (client-go's `WatchErrorHandler`); see
/// [`InformerBuilder::watch_error_handler`](super::InformerBuilder::watch_error_handler).
pub type WatchErrorHandler = Arc<dyn Fn(&InformerError) + Send + Sync>;

/// Lists and watches one [`ListWatch`] into a [`Sink`]; see the module docs.
pub(crate) struct Reflector<K> {
    pub(crate) list_watch: ListWatch<K>,
    config: ReflectorConfig<K>,
    random: RandomState,
    /// Protobuf met a field its messages lack: JSON from now on (module docs).
    read_json: AtomicBool,
}

/// How long past its requested timeout a watch may stay open before it counts as stalled.
const STALL_GRACE: Duration = Duration::from_secs(30);

/// How long a streaming list may send nothing before its initial-events-end bookmark: past
/// it the server counts as not supporting streaming lists. client-go warns after the same
/// minute (and keeps waiting).
const INITIAL_EVENTS_END_WAIT: Duration = Duration::from_secs(60);

/// When a watch asked to end after `timeout_seconds` counts as stalled.
fn give_up_at(timeout_seconds: u32) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(u64::from(timeout_seconds)) + STALL_GRACE
}

fn is_expired(err: &kube_client::Error) -> bool {
    matches!(err, kube_client::Error::Api(s) if s.code == 410)
}

/// Where the list/watch loop stands.
#[derive(Debug)]
enum State {
    Relist,
    Watch(String),
    /// 410: the cache must be rebuilt, by a streaming list again if one is configured.
    Expired,
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
    /// A protobuf object with a field the messages lack (the error): read JSON, relist.
    UnknownField(String),
}

/// Why a streaming list did not build the cache.
enum StreamingError {
    /// The server does not support streaming lists: it refused the request, or ended or
    /// stalled the stream without the initial-events-end bookmark. List instead.
    Unsupported(String),
    /// 410 Expired: start over.
    Expired,
    /// A transport or decoding failure: back off and try again.
    Failed(InformerError),
    /// A protobuf object with a field the messages lack (the error): read JSON, relist.
    UnknownField(String),
}

/// Why a list did not build the cache.
enum ListError {
    /// Back off and list again.
    Failed(InformerError),
    /// A protobuf object with a field the messages lack (the error): read JSON, relist.
    UnknownField(String),
}

impl From<InformerError> for ListError {
    fn from(err: InformerError) -> Self {
        Self::Failed(err)
    }
}

/// The metadata of a list response, read without decoding its items.
#[derive(serde::Deserialize)]
struct ListHead {
    #[serde(default)]
    metadata: ListMeta,
}

/// A list page's objects, ready for the store, and those skipped for their depth.
type DecodedPage<K> = Result<(Vec<(ObjectKey, Stored<K>)>, Vec<TooDeep>), ListError>;

impl<K: InformerObject> Reflector<K> {
    pub(crate) fn new(list_watch: ListWatch<K>, config: ReflectorConfig<K>) -> Self {
        Self { list_watch, config, random: RandomState::new(), read_json: AtomicBool::new(false) }
    }

    /// Lists and watches forever; the caller ends it by dropping the future. Under a shard
    /// selector that changes, each change starts over with a list under the new one (its
    /// replace drops the objects no longer selected), and while it selects nothing the store
    /// is empty and nothing is requested.
    pub(crate) async fn run(&self, sink: &impl Sink<K>) {
        let Some(mut shards) = self.list_watch.shard_selector_changes() else {
            return self.list_and_watch(sink).await;
        };
        loop {
            let selecting = shards.borrow_and_update().is_some();
            if selecting {
                tokio::select! {
                    () = self.list_and_watch(sink) => return,
                    changed = shards.changed() => if changed.is_err() {
                        // The selector can no longer change.
                        return self.list_and_watch(sink).await;
                    },
                }
                tracing::debug!(informer = %self.list_watch, "the shard selector changed; listing again");
            } else {
                // Nothing selected: an empty, synced cache (at no version: none was read).
                sink.replace(HashMap::new(), "");
                if shards.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        }
    }

    /// The list/watch loop under one set of selectors.
    async fn list_and_watch(&self, sink: &impl Sink<K>) {
        let mut backoff = Backoff::new(self.config.backoff);
        let mut streaming = self.config.streaming_list;
        let mut warned = false;
        let mut state = State::Relist;
        let mut listed = false;
        loop {
            if matches!(state, State::Relist) {
                if listed && let Some(metrics) = &self.config.metrics {
                    observe("relist", || metrics.relist());
                }
                listed = true;
            }
            state = match state {
                State::Relist if streaming => match self.streaming_list(sink).await {
                    Ok((rv, (encoding, body), give_up)) => self.after_watch(
                        self.consume(self.events(encoding, body), rv, sink, give_up).await,
                        &mut backoff,
                    ),
                    Err(StreamingError::Unsupported(why)) => {
                        let resource = self.list_watch.url();
                        if warned {
                            tracing::debug!(%why, resource, "streaming list not supported; listing");
                        } else {
                            tracing::warn!(
                                %why,
                                resource,
                                "the server does not support streaming lists of this resource; \
                                 listing instead (streaming is tried again after a 410)"
                            );
                            warned = true;
                        }
                        streaming = false;
                        self.list_now(sink, &mut backoff).await
                    }
                    // client-go backs off before every relist, a 410's too.
                    Err(StreamingError::Expired) => {
                        State::Backoff(backoff.next_delay(), Box::new(State::Relist))
                    }
                    Err(StreamingError::Failed(err)) => {
                        self.failed("streaming list failed", &err);
                        State::Backoff(backoff.next_delay(), Box::new(State::Relist))
                    }
                    Err(StreamingError::UnknownField(what)) => self.read_json(&what),
                },
                State::Relist => self.list_now(sink, &mut backoff).await,
                State::Expired => {
                    streaming = self.config.streaming_list;
                    State::Backoff(backoff.next_delay(), Box::new(State::Relist))
                }
                State::Watch(rv) => {
                    let timeout = self.watch_timeout();
                    let give_up = give_up_at(timeout);
                    let watch =
                        self.list_watch.watch(&rv, timeout, false, self.wire_format()).await;
                    self.count_request("watch_request", |m, r| m.watch_request(r), watch.is_ok());
                    match watch {
                        Ok((encoding, body)) => self.after_watch(
                            self.consume(self.events(encoding, body), rv, sink, give_up).await,
                            &mut backoff,
                        ),
                        Err(err) if is_expired(&err) => {
                            tracing::info!(%rv, "resourceVersion expired; relisting");
                            State::Expired
                        }
                        Err(source) => {
                            let err = InformerError::Watch { rv: rv.clone(), source };
                            self.failed("watch failed", &err);
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

    /// A decoded page's objects; those skipped for their depth go to `skipped`.
    fn decoded<T>(
        &self,
        (items, mut page_skipped): (Vec<T>, Vec<TooDeep>),
        skipped: &mut Vec<TooDeep>,
    ) -> Vec<T> {
        skipped.append(&mut page_skipped);
        items
    }

    /// A watch's events, `managedFields` left out unless kept.
    fn events(
        &self,
        encoding: Encoding,
        body: Body,
    ) -> impl Stream<Item = kube_client::Result<WatchEvent<K>>> + Send + use<K> {
        let prepare = &self.config.prepare;
        events(body, encoding, !prepare.keep_managed_fields, prepare.max_depth)
    }

    /// Reports an object skipped for its depth (`what`: which and why; `object`: its key):
    /// an error naming it, and the metric. Where the cache holds an older copy of it, the
    /// error says the copy is kept, and a relist (`relisted`: the objects it will replace the
    /// cache with) keeps it too, so that the object is not reported deleted.
    fn skipped(
        &self,
        sink: &impl Sink<K>,
        what: &str,
        object: Option<&str>,
        relisted: Option<&mut HashMap<ObjectKey, Stored<K>>>,
    ) {
        let resource = self.list_watch.url();
        let key = object.and_then(|o| o.parse::<ObjectKey>().ok());
        match key.and_then(|key| sink.cached(&key).map(|copy| (key, copy))) {
            Some((key, copy)) => {
                let version = copy.resource_version().unwrap_or_default().to_owned();
                tracing::error!(
                    resource,
                    kept_resource_version = %version,
                    "skipped an object: {what}; the cache keeps its last copy, at resourceVersion {version}"
                );
                if let Some(relisted) = relisted {
                    relisted.entry(key).or_insert(copy);
                }
            }
            None => tracing::error!(resource, "skipped an object: {what}"),
        }
        if let Some(metrics) = &self.config.metrics {
            observe("object_skipped", || metrics.object_skipped());
        }
    }

    /// A DELETED event whose final state is too deep (`what`) for an object (`object`, its
    /// key) the cache holds: the copy is removed and handlers are told of the delete with it,
    /// the last state known (as client-go does), so the delete is not lost until a relist.
    /// Whether the cache held it; if not, the skip is reported as any other.
    fn deleted_too_deep(
        &self,
        sink: &impl Sink<K>,
        what: &str,
        object: Option<&str>,
        rv: &str,
    ) -> bool {
        let key = object.and_then(|o| o.parse::<ObjectKey>().ok());
        let Some(copy) = key.and_then(|key| sink.cached(&key)).and_then(|c| c.load_transient())
        else {
            return false;
        };
        let version = copy.meta().resource_version.clone().unwrap_or_default();
        tracing::warn!(
            resource = self.list_watch.url(),
            kept_resource_version = %version,
            "deleted an object whose final state was too deep: {what}; handlers are told \
             its last copy, at resourceVersion {version}"
        );
        if let Some(metrics) = &self.config.metrics {
            observe("object_skipped", || metrics.object_skipped());
        }
        sink.delete(copy, rv);
        true
    }

    /// The format reads ask for: the configured one, until protobuf met an unknown field.
    fn wire_format(&self) -> WireFormat {
        match self.read_json.load(Ordering::Relaxed) {
            true => WireFormat::Json,
            false => self.config.wire_format,
        }
    }

    /// Protobuf met a field its messages lack (`what`: the message and field number): reads
    /// are JSON from now on, said once and counted, and the cache is built again.
    fn read_json(&self, what: &str) -> State {
        if !self.read_json.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                resource = self.list_watch.url(),
                "protobuf from a server newer than this build's messages: {what}; reading JSON \
                 from now on, and relisting so that no object lacks the field"
            );
            if let Some(metrics) = &self.config.metrics {
                observe("wire_format_fallback", || metrics.wire_format_fallback());
            }
        }
        State::Relist
    }

    /// Reports a failure of the list or watch: to the watch error handler if one is set (a
    /// panic in it is logged, and the informer goes on), else to the log.
    fn failed(&self, what: &str, err: &InformerError) {
        let resource = self.list_watch.url();
        match &self.config.error_handler {
            Some(handler) => {
                if let Err(panic) = catch(|| handler(err)) {
                    tracing::error!(%panic, error = %err, resource, "the watch error handler panicked");
                }
            }
            None => tracing::warn!(error = %err, resource, "{what}; backing off"),
        }
    }

    /// Counts a request with the metrics, if any.
    fn count_request(
        &self,
        hook: &'static str,
        count: impl Fn(&dyn InformerMetrics, RequestResult),
        ok: bool,
    ) {
        if let Some(metrics) = &self.config.metrics {
            let result = if ok { RequestResult::Success } else { RequestResult::Error };
            observe(hook, || count(metrics.as_ref(), result));
        }
    }

    /// The state after a watch ended.
    fn after_watch(&self, end: WatchEnd, backoff: &mut Backoff) -> State {
        match end {
            WatchEnd::Closed(rv) => State::Watch(rv),
            WatchEnd::Expired => {
                tracing::info!("watch expired (410); relisting");
                State::Expired
            }
            WatchEnd::Failed(rv, err) => {
                self.failed("watch failed", &err);
                let next = rv.map_or(State::Relist, State::Watch);
                State::Backoff(backoff.next_delay(), Box::new(next))
            }
            WatchEnd::UnknownField(what) => self.read_json(&what),
        }
    }

    /// A paginated list, then the watch from its version; a failure backs off and relists.
    async fn list_now(&self, sink: &impl Sink<K>, backoff: &mut Backoff) -> State {
        match self.list(sink).await {
            Ok(rv) => State::Watch(rv),
            Err(ListError::Failed(err)) => {
                self.failed("list failed", &err);
                State::Backoff(backoff.next_delay(), Box::new(State::Relist))
            }
            Err(ListError::UnknownField(what)) => self.read_json(&what),
        }
    }

    /// A server-side watch timeout between 5 and 10 minutes, so watchers spread out.
    fn watch_timeout(&self) -> u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        300 + (self.random.hash_one(nanos) % 301) as u32
    }

    /// Lists every object, page by page, and replaces the store. Returns the list's
    /// resourceVersion. An expired continue token restarts the list in one request.
    ///
    /// Pages are fetched as text and decoded on blocking threads, up to two at once, while
    /// the next page is requested: decoding dominates a large list, and this spreads it over
    /// the cores. Each page is prepared (managedFields dropped, transformed) as soon as it is
    /// decoded, which keeps the peak memory of a large list down.
    async fn list(&self, sink: &impl Sink<K>) -> Result<String, ListError> {
        let mut decoding: VecDeque<JoinHandle<DecodedPage<K>>> = VecDeque::new();
        let mut items = HashMap::new();
        let mut skipped = Vec::new();
        let mut token: Option<String> = None;
        let mut paginate = true;
        let rv = loop {
            let page =
                self.list_watch.list_page(token.as_deref(), paginate, self.wire_format()).await;
            self.count_request("list_request", |m, r| m.list_request(r), page.is_ok());
            let page = match page {
                Ok(page) => page,
                Err(err) if is_expired(&err) && token.is_some() => {
                    tracing::info!("list continuation expired; listing again in one request");
                    for task in decoding.drain(..) {
                        task.abort();
                    }
                    items.clear();
                    skipped.clear();
                    token = None;
                    paginate = false;
                    continue;
                }
                Err(err) => return Err(InformerError::List(err).into()),
            };
            // Only the list's metadata; the items are skipped without building them.
            let head = list_head(&page)?;
            if decoding.len() >= 2 {
                let oldest = decoding.pop_front().expect("two in flight");
                items.extend(self.decoded(join_decode(oldest).await?, &mut skipped));
            }
            let prepare = self.config.prepare.clone();
            decoding.push_back(tokio::task::spawn_blocking(move || decode_page(page, &prepare)));
            match head.continue_.filter(|t| !t.is_empty()) {
                Some(next) => token = Some(next),
                None => break head.resource_version.unwrap_or_default(),
            }
        };
        for task in decoding {
            items.extend(self.decoded(join_decode(task).await?, &mut skipped));
        }
        for too_deep in skipped {
            self.skipped(sink, &too_deep.to_string(), Some(&too_deep.object), Some(&mut items));
        }
        tracing::debug!(objects = items.len(), %rv, "listed");
        sink.replace(items, &rv);
        Ok(rv)
    }

    /// Opens a streaming list and reads it up to the initial-events-end bookmark, then
    /// replaces the store. Returns the bookmark's version, the open stream, and when the
    /// stream counts as stalled. A stream that ends, or sends nothing for
    /// [`INITIAL_EVENTS_END_WAIT`], before that bookmark is [`StreamingError::Unsupported`].
    ///
    /// The events are decoded in batches on blocking threads while the next lines are read
    /// (see the `initial_events` module), and applied in the order they came.
    async fn streaming_list(
        &self,
        sink: &impl Sink<K>,
    ) -> Result<(String, (Encoding, Body), tokio::time::Instant), StreamingError> {
        let refused = |err: &kube_client::Error| matches!(err, kube_client::Error::Api(s) if (400..500).contains(&s.code) && s.code != 410 && s.code != 429);
        let timeout = self.watch_timeout();
        let give_up = give_up_at(timeout);
        let watch = self.list_watch.watch("", timeout, true, self.wire_format()).await;
        self.count_request("watch_request", |m, r| m.watch_request(r), watch.is_ok());
        let (encoding, mut body) = match watch {
            Ok(watch) => watch,
            Err(err) if refused(&err) => return Err(StreamingError::Unsupported(err.to_string())),
            Err(err) => return Err(StreamingError::Failed(InformerError::List(err))),
        };
        let mut items: HashMap<ObjectKey, Stored<K>> = HashMap::new();
        let mut batches = Batches::new(self.config.prepare.clone(), encoding);
        let mut events = 0usize;
        loop {
            let idle = tokio::time::Instant::now() + INITIAL_EVENTS_END_WAIT;
            let read = tokio::time::timeout_at(idle.min(give_up), batches.read(&mut body)).await;
            // How the stream ended, if it did; its events before that are applied first.
            let ended = match read {
                Ok(Line::Read) => {
                    events += 1;
                    None
                }
                Ok(Line::End) => Some(StreamingError::Unsupported(format!(
                    "the stream ended after {events} events without the initial-events-end bookmark"
                ))),
                Ok(Line::Failed(e)) => Some(StreamingError::Failed(InformerError::Stream {
                    rv: String::new(),
                    source: kube_client::Error::ReadEvents(e),
                })),
                Err(_) => Some(StreamingError::Unsupported(format!(
                    "no initial-events-end bookmark: nothing for {INITIAL_EVENTS_END_WAIT:?} after {events} events"
                ))),
            };
            if ended.is_some() {
                batches.dispatch();
            }
            while let Some(decoded) = batches.decoded(ended.is_some()).await {
                if let Some(rv) = self.apply_initial(decoded, &mut items, sink)? {
                    sink.replace(items, &rv);
                    return Ok((rv, (encoding, body), give_up));
                }
            }
            if let Some(ended) = ended {
                return Err(ended);
            }
        }
    }

    /// Applies a batch of a streaming list's initial events to the objects listed so far;
    /// the version of the initial-events-end bookmark when the batch ends with it.
    fn apply_initial(
        &self,
        decoded: Vec<Initial<K>>,
        items: &mut HashMap<ObjectKey, Stored<K>>,
        sink: &impl Sink<K>,
    ) -> Result<Option<String>, StreamingError> {
        for event in decoded {
            match event {
                Initial::Upsert(key, object) => {
                    items.insert(key, object);
                }
                Initial::Delete(key) => {
                    items.remove(&key);
                }
                Initial::Bookmark(mut bookmark) => {
                    if let Some(what) = bookmark.annotations.remove(UNKNOWN_FIELD) {
                        return Err(StreamingError::UnknownField(what));
                    }
                    if let Some(what) = bookmark.annotations.get(SKIPPED) {
                        let object = bookmark.annotations.get(SKIPPED_OBJECT);
                        self.skipped(sink, what, object.map(String::as_str), Some(items));
                    }
                    if bookmark.annotations.get("k8s.io/initial-events-end").map(String::as_str)
                        == Some("true")
                    {
                        return Ok(Some(bookmark.resource_version));
                    }
                }
                Initial::Error(status) if status.code == 410 => {
                    return Err(StreamingError::Expired);
                }
                Initial::Error(status) if (400..500).contains(&status.code) => {
                    return Err(StreamingError::Unsupported(describe_status(&status)));
                }
                Initial::Error(status) => {
                    return Err(StreamingError::Failed(InformerError::Event(status)));
                }
                Initial::Undecodable(source) => {
                    return Err(StreamingError::Failed(InformerError::Stream {
                        rv: String::new(),
                        source,
                    }));
                }
                Initial::Rejected(err) => return Err(StreamingError::Failed(err)),
            }
        }
        Ok(None)
    }

    /// Applies a watch stream's events until it ends; a watch that closes within a second
    /// with no events at all counts as a failure, and one still open at `give_up` as stalled.
    async fn consume(
        &self,
        stream: impl Stream<Item = kube_client::Result<WatchEvent<K>>>,
        rv: String,
        sink: &impl Sink<K>,
        give_up: tokio::time::Instant,
    ) -> WatchEnd {
        let started = tokio::time::Instant::now();
        let events = AtomicUsize::new(0);
        let counted = stream
            .inspect(|_| {
                events.fetch_add(1, Ordering::Relaxed);
            })
            .take_until(tokio::time::sleep_until(give_up));
        match self.consume_events(counted, rv, sink).await {
            WatchEnd::Closed(rv) if tokio::time::Instant::now() >= give_up => WatchEnd::Failed(
                Some(rv.clone()),
                InformerError::Stalled { rv, waited: STALL_GRACE },
            ),
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
    async fn consume_events(
        &self,
        stream: impl Stream<Item = kube_client::Result<WatchEvent<K>>>,
        mut rv: String,
        sink: &impl Sink<K>,
    ) -> WatchEnd {
        tokio::pin!(stream);
        while let Some(event) = stream.next().await {
            if let (Some(metrics), Ok(event)) = (&self.config.metrics, &event) {
                observe("watch_event", || metrics.watch_event(event_type(event)));
            }
            let (object, deleted) = match event {
                Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => (o, false),
                Ok(WatchEvent::Deleted(o)) => (o, true),
                Ok(WatchEvent::Bookmark(mut b)) => {
                    if let Some(what) = b.metadata.annotations.remove(UNKNOWN_FIELD) {
                        return WatchEnd::UnknownField(what);
                    }
                    let annotations = &b.metadata.annotations;
                    if let Some(what) = annotations.get(SKIPPED) {
                        let object = annotations.get(SKIPPED_OBJECT).map(String::as_str);
                        let deleted = annotations.contains_key(SKIPPED_DELETED);
                        let rv = &b.metadata.resource_version;
                        if !(deleted && self.deleted_too_deep(sink, what, object, rv)) {
                            self.skipped(sink, what, object, None);
                        }
                    }
                    rv = b.metadata.resource_version;
                    sink.bookmark(&rv);
                    continue;
                }
                Ok(WatchEvent::Error(status)) if status.code == 410 => return WatchEnd::Expired,
                Ok(WatchEvent::Error(status)) => {
                    // client-go relists after any other error event.
                    return WatchEnd::Failed(None, InformerError::Event(status));
                }
                Err(source) => {
                    return WatchEnd::Failed(
                        Some(rv.clone()),
                        InformerError::Stream { rv, source },
                    );
                }
            };
            let event_rv = object.meta().resource_version.clone().unwrap_or_else(|| rv.clone());
            match self.config.prepare.apply(object) {
                Ok(o) if deleted => sink.delete(Arc::new(o), &event_rv),
                Ok(o) => sink.upsert(Arc::new(o), &event_rv),
                // Resume from before this event, so that it comes again.
                Err(err) => return WatchEnd::Failed(Some(rv), err),
            }
            rv = event_rv;
        }
        WatchEnd::Closed(rv)
    }
}

fn event_type<K>(event: &WatchEvent<K>) -> WatchEventType {
    match event {
        WatchEvent::Added(_) => WatchEventType::Added,
        WatchEvent::Modified(_) => WatchEventType::Modified,
        WatchEvent::Deleted(_) => WatchEventType::Deleted,
        WatchEvent::Bookmark(_) => WatchEventType::Bookmark,
        WatchEvent::Error(_) => WatchEventType::Error,
    }
}

fn decode_failed(err: serde_json::Error) -> InformerError {
    InformerError::List(kube_client::Error::SerdeError(err))
}

/// A list answer that does not decode, with its beginning, so the log shows what came (an
/// HTML page, an object of another kind).
fn undecodable(source: serde_json::Error, text: &str) -> InformerError {
    InformerError::Undecodable { source, excerpt: text.chars().take(120).collect() }
}

/// The metadata of a list page, its items skipped.
fn list_head(page: &Page) -> Result<ListMeta, InformerError> {
    match page.encoding {
        Encoding::Json => {
            let head: ListHead = serde_json::from_slice(&page.bytes)
                .map_err(|e| undecodable(e, &String::from_utf8_lossy(&page.bytes)))?;
            Ok(head.metadata)
        }
        Encoding::Protobuf => wire::list_meta(&page.bytes).map_err(protobuf_undecodable),
    }
}

/// Decodes one list page and prepares its objects, each into the form the store keeps (the
/// final allocation, made once, on the decoding thread). `managedFields` are left out unless
/// kept: cut out of JSON's text first, skipped on protobuf's wire.
fn decode_page<K: InformerObject>(page: Page, prepare: &Prepare<K>) -> DecodedPage<K> {
    let text = match page.encoding {
        Encoding::Protobuf => return decode_protobuf_page(&page.bytes, prepare),
        Encoding::Json => String::from_utf8(page.bytes.into()).map_err(|e| {
            decode_failed(serde::de::Error::custom(format!("a list page is not UTF-8: {e}")))
        })?,
    };
    let text = match prepare.keep_managed_fields {
        true => text,
        false => strip_managed_fields(&text).unwrap_or(text),
    };
    let page: ObjectList<K> = match serde_json::from_str(&text) {
        Ok(page) => page,
        Err(err) if is_too_deep(&err) => return decode_deep_page(&text, prepare),
        Err(err) => return Err(undecodable(err, &text).into()),
    };
    let mut items = Vec::with_capacity(page.items.len());
    for object in page.items {
        items.extend(prepare.store(object)?);
    }
    Ok((items, Vec::new()))
}

/// A page holding an object deeper than serde_json's default limit, decoded object by object
/// as deep as the API server serves them; deeper ones skipped and named.
fn decode_deep_page<K: InformerObject>(text: &str, prepare: &Prepare<K>) -> DecodedPage<K> {
    let raw: depth::RawItems<'_> = serde_json::from_str(text).map_err(|e| undecodable(e, text))?;
    let mut items = Vec::with_capacity(raw.items.len());
    let mut skipped = Vec::new();
    for item in raw.items {
        let decoded = depth::object::<K>(item.get(), prepare.max_depth);
        match decoded.map_err(|e| undecodable(e, item.get()))? {
            Ok(object) => items.extend(prepare.store(object)?),
            Err(too_deep) => skipped.push(too_deep),
        }
    }
    Ok((items, skipped))
}

/// A protobuf list page, item by item; items deeper than `max_depth` skipped and named.
fn decode_protobuf_page<K: InformerObject>(bytes: &[u8], prepare: &Prepare<K>) -> DecodedPage<K> {
    let strip = !prepare.keep_managed_fields;
    let (decoded, skipped) =
        wire::list_items::<K>(bytes, strip, prepare.max_depth).map_err(|err| {
            match wire::unknown_field(&err) {
                Some(what) => ListError::UnknownField(what),
                None => protobuf_undecodable(err).into(),
            }
        })?;
    let mut items = Vec::with_capacity(decoded.len());
    for object in decoded {
        items.extend(prepare.store(object)?);
    }
    Ok((items, skipped))
}

/// A protobuf answer that does not decode.
fn protobuf_undecodable(err: wire::DecodeError) -> InformerError {
    decode_failed(serde::de::Error::custom(format!("a protobuf list page does not decode: {err}")))
}

/// The objects of a page decoded on a blocking thread. A decoding thread that panicked is
/// reported as a list failure rather than tearing the informer down.
async fn join_decode<K>(task: JoinHandle<DecodedPage<K>>) -> DecodedPage<K> {
    match task.await {
        Ok(result) => result,
        Err(join) => Err(decode_failed(serde::de::Error::custom(format!(
            "decoding a list page failed: {join}"
        )))
        .into()),
    }
}
