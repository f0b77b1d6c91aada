//! Watch streams: past changes from the history, then live ones, as newline-delimited JSON
//! events, filtered by namespace and selectors, with bookmarks, timeouts, streaming lists
//! (`sendInitialEvents`), and the injected faults.
//!
//! Each watch runs as its own task writing into a bounded channel that is the response body,
//! so a client that stops reading slows only its own watch; one that falls more than the
//! broadcast's capacity behind is closed and must resume from its last resourceVersion, as
//! the real server closes slow watchers.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::Response;
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::faults::WatchSignal;
use crate::http::negotiate::Form;
use crate::http::panics;
use crate::http::state::Shared;
use crate::http::table::{self, Include};
use crate::model::status::ApiError;
use crate::protobuf::PANIC_LINE;
use crate::storage::selectors::{FieldSelector, LabelSelector};
use crate::storage::shards::{ShardSelector, selected};
use crate::storage::store::{Change, ChangeType, StoredObject};

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Start {
    /// After this resourceVersion.
    After(u64),
    /// With `ADDED` for every current object; with `end_bookmark`, then a bookmark annotated
    /// `k8s.io/initial-events-end` (a streaming list, or a watch without a version that
    /// allows bookmarks).
    Initial { end_bookmark: bool },
}

/// A parsed watch request.
pub(crate) struct WatchRequest {
    pub(crate) resource: usize,
    pub(crate) namespace: Option<String>,
    pub(crate) labels: LabelSelector,
    pub(crate) fields: FieldSelector,
    /// A shard selector's ranges, if any.
    pub(crate) shard: Option<ShardSelector>,
    pub(crate) start: Start,
    pub(crate) bookmarks: bool,
    pub(crate) timeout: Option<Duration>,
    /// The form of the events' objects (whole, metadata only, or a one-row table).
    pub(crate) form: Form,
    /// For tables: what each row carries of its object.
    pub(crate) include: Include,
    /// Whether the events are re-encoded as protobuf frames on their way out.
    pub(crate) protobuf: bool,
}

impl WatchRequest {
    fn matches(&self, object: &StoredObject) -> bool {
        self.namespace.as_ref().is_none_or(|ns| object.fields.namespace == *ns)
            && self.labels.matches(&object.labels)
            && self.fields.matches(&object.fields)
            && selected(self.shard.as_ref(), object)
    }

    /// The event a change becomes for this watch: selector transitions turn a modify into an
    /// add (starts matching) or a delete (stops matching).
    fn event<'c>(&self, change: &'c Change) -> Option<(ChangeType, &'c StoredObject)> {
        if change.resource != self.resource {
            return None;
        }
        let now = self.matches(&change.object);
        let before = change.prev.as_deref().is_some_and(|p| self.matches(p));
        let kind = match (change.kind, before, now) {
            (ChangeType::Added, _, true) => ChangeType::Added,
            (ChangeType::Modified, true, true) => ChangeType::Modified,
            (ChangeType::Modified, false, true) => ChangeType::Added,
            // Stopped matching: for this watcher the object is gone.
            (ChangeType::Modified, true, false) => ChangeType::Deleted,
            (ChangeType::Deleted, true, _) => ChangeType::Deleted,
            _ => return None,
        };
        Some((kind, &change.object))
    }
}

fn event_line(kind: &str, object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object.len() + 32);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn bookmark_line(shared: &Shared, req: &WatchRequest, rv: u64, initial_end: bool) -> Bytes {
    let rt = shared.registry.store.resource_type(req.resource);
    let mut metadata = json!({ "resourceVersion": rv.to_string() });
    if initial_end {
        metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
    }
    let object = match req.form {
        // As kube-apiserver 1.36 writes it: the resourceVersion (and the annotation) alone;
        // 1.20 added `creationTimestamp: null`.
        Form::Metadata(version) => {
            json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": format!("meta.k8s.io/{version}"),
                "metadata": metadata,
            })
        }
        _ => json!({ "kind": rt.kind, "apiVersion": rt.api_version(), "metadata": metadata }),
    };
    event_line("BOOKMARK", object.to_string().as_bytes())
}

fn error_line(status: &Value) -> Bytes {
    event_line("ERROR", status.to_string().as_bytes())
}

/// When the next bookmark is due, as the real server's watch cache decides: every `period`,
/// and 2 s before the watch's deadline; none once that has passed.
fn next_bookmark_time(
    now: Instant,
    period: Duration,
    deadline: Option<Instant>,
) -> Option<Instant> {
    let periodic = now + period;
    let Some(deadline) = deadline else {
        return Some(periodic);
    };
    let before_timeout = deadline.checked_sub(Duration::from_secs(2))?;
    let at = periodic.min(before_timeout);
    (at > now).then_some(at)
}

/// Starts the watch and returns the streaming response.
pub(crate) fn serve(shared: Arc<Shared>, req: WatchRequest) -> Response {
    let (mut tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    let mut control = shared.control.subscribe();
    let store = &shared.registry.store;
    // The initial state, the history and the subscription come from one lock, so nothing is
    // missed or sent twice between them.
    let setup = match req.start {
        Start::After(rv) => {
            store.watch_from(req.resource, rv).map(|(past, rx)| (Vec::new(), past, rv, rx))
        }
        Start::Initial { .. } => {
            let (rv, objects, rx) =
                store.snapshot_and_subscribe(req.resource, req.namespace.as_deref());
            Ok((objects, Vec::new(), rv, rx))
        }
    };
    let response =
        Response::builder().status(StatusCode::OK).header("content-type", "application/json");
    let (initial, past, start_rv, mut changes) = match setup {
        Ok(setup) => setup,
        Err(err) => {
            // A watch from a compacted version: HTTP 200 and one ERROR event, as the real
            // server answers.
            let line = error_line(&err.to_status());
            return response
                .body(Body::from(line))
                .unwrap_or_else(|_| Response::new(Body::empty()));
        }
    };
    let open = shared.stats.open_watches.open(&store.resource_type(req.resource));
    // Dropped with the response body: a client gone ends the task at once, not at the next
    // event it would have been sent (a quiet watch may see none before its timeout).
    let (client_here, mut client_gone) = tokio::sync::oneshot::channel::<()>();
    let guard = (shared.clone(), tx.clone(), error_line(&panics::panicked().to_status()));
    let shared2 = shared.clone();
    let events = async move {
        let shared = shared2;
        let deadline = req.timeout.map(|t| Instant::now() + t);
        if req.timeout.is_some_and(|t| t.is_zero()) {
            return; // an injected zero lifetime: the watch ends before any event
        }
        let metadata = match req.form {
            Form::Full | Form::Table(_) => None,
            Form::Metadata(version) => Some(version),
            // The real server cannot turn an event's object into a list: it sends nothing.
            Form::MetadataList(_) => return,
        };
        let rt = shared.registry.store.resource_type(req.resource);
        // As the real server: only the first table of a watch defines the columns.
        let mut columns_sent = false;
        let mut encode = |object: &StoredObject| -> Bytes {
            match req.form {
                Form::Table(version) => {
                    let metadata = json!({ "resourceVersion": object.rv.to_string() });
                    let one = [object.value()];
                    let (registry, include) = (&shared.registry, req.include);
                    let t = table::table(
                        registry,
                        &rt,
                        version,
                        metadata,
                        &one,
                        include,
                        !columns_sent,
                    );
                    columns_sent = true;
                    Bytes::from(t.to_string())
                }
                _ => object.json_as(metadata),
            }
        };
        let mut last_rv = start_rv;
        for object in initial.iter().filter(|o| req.matches(o)) {
            if tx.send(Ok(event_line("ADDED", &encode(object)))).await.is_err() {
                return;
            }
        }
        if let Start::Initial { end_bookmark: true } = req.start
            && tx.send(Ok(bookmark_line(&shared, &req, start_rv, true))).await.is_err()
        {
            return;
        }
        for change in &past {
            last_rv = change.rv;
            if let Some((kind, object)) = req.event(change)
                && tx.send(Ok(event_line(kind.as_str(), &encode(object)))).await.is_err()
            {
                return;
            }
        }
        let period = shared.bookmark_interval;
        let mut next_bookmark = next_bookmark_time(Instant::now(), period, deadline);
        loop {
            let bookmark_due = async {
                match next_bookmark {
                    Some(at) if req.bookmarks => tokio::time::sleep_until(at).await,
                    _ => std::future::pending().await,
                }
            };
            let timeout = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let line = tokio::select! {
                change = changes.recv() => match change {
                    Ok(change) => {
                        if change.rv <= last_rv {
                            continue;
                        }
                        last_rv = change.rv;
                        if tx.is_closed() {
                            return;
                        }
                        match req.event(&change) {
                            Some((kind, object)) => event_line(kind.as_str(), &encode(object)),
                            None => continue,
                        }
                    }
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
                },
                _ = bookmark_due => {
                    next_bookmark = next_bookmark_time(Instant::now(), period, deadline);
                    // As the real server: a bookmark only once something changed after the
                    // watch's starting version.
                    if last_rv <= start_rv {
                        continue;
                    }
                    bookmark_line(&shared, &req, last_rv, false)
                }
                signal = control.recv() => match signal {
                    Ok(WatchSignal::Close) | Err(_) => return,
                    Ok(WatchSignal::Malformed) => Bytes::from_static(b"{this is not json\n"),
                    // The injected bug: in this task, or in the protobuf encoder it feeds.
                    Ok(WatchSignal::Panic) if req.protobuf => Bytes::from_static(PANIC_LINE),
                    Ok(WatchSignal::Panic) => panic!("a panic injected by Faults::panic_watches"),
                    Ok(WatchSignal::Error(status)) => {
                        let _ = tx.send(Ok(error_line(&status))).await;
                        return;
                    }
                },
                _ = timeout => return,
                _ = &mut client_gone => return,
            };
            if tx.send(Ok(line)).await.is_err() {
                return;
            }
        }
    };
    tokio::spawn(panics::guard_watch(guard.0, events, guard.1, guard.2));
    // The body holds the gauge's count and the task's sign that the client is here: both go
    // when the stream ends or the client goes away.
    let body = rx.map(move |chunk| {
        let _held = (&open, &client_here);
        chunk
    });
    response.body(Body::from_stream(body)).unwrap_or_else(|_| Response::new(Body::empty()))
}

/// Checks the parameters of a streaming list, as kube-apiserver 1.36 does: `sendInitialEvents`
/// needs `resourceVersionMatch=NotOlderThan`; without `allowWatchBookmarks` the initial events
/// come with no bookmark after them (1.36 no longer refuses that).
pub(crate) fn check_streaming_list(rv_match: Option<&str>) -> Result<(), ApiError> {
    if rv_match == Some("NotOlderThan") {
        return Ok(());
    }
    let message =
        "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan";
    let mut e = ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        format!("ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: {message}"),
    );
    e.causes = Box::new([json!({
        "reason": "FieldValueForbidden",
        "message": message,
        "field": "resourceVersionMatch",
    })]);
    Err(e)
}
