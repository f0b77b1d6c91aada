//! The layer that turns a handler's panic into an answer, as kube-apiserver's
//! `WithPanicRecovery` filter does: the request gets a 500 in Go's words, the panic is logged
//! with the request's method and URI and counted ([`ApiServer::handler_panics`]), and the
//! server goes on serving every other request, on that connection too.
//!
//! The real server writes its words as `text/plain`; this one sends them as a `Status`
//! (`reason: InternalError`), which every client reads as an error. A panic after a watch's
//! answer has begun (in the task that makes its events, or in the protobuf encoder hyper
//! polls) is caught where it happens ([`guard_watch`], [`guard_frames`]), counted and logged
//! the same way, and ends the watch as kube-apiserver ends a broken one: an `ERROR` event
//! with a 500 `Status`, then the end of the stream.
//!
//! [`ApiServer::handler_panics`]: crate::ApiServer::handler_panics

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use futures::{FutureExt, Stream, StreamExt};

use crate::http::encoding::error_response;
use crate::http::state::Shared;
use crate::model::status::ApiError;
use crate::protobuf;

/// kube-apiserver's answer to a request whose handler panicked.
pub(crate) const PANICKED: &str =
    "This request caused apiserver to panic. Look in the logs for details.";

/// Serves the request, answering a panic of its handler with a 500; see the module docs.
pub(crate) async fn catch_panic(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let (method, uri) = (request.method().clone(), request.uri().clone());
    match AssertUnwindSafe(next.run(request)).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => {
            record(&shared, panic.as_ref(), &format!("{method} {uri}"));
            error_response(&panicked())
        }
    }
}

/// The error a panic is answered with.
pub(crate) fn panicked() -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", PANICKED)
}

/// Counts and logs a panic of the code serving `what` (a request, a watch).
fn record(shared: &Shared, panic: &(dyn Any + Send), what: &str) {
    shared.stats.panics.fetch_add(1, Ordering::SeqCst);
    let panic = message(panic);
    tracing::error!(request = %what, %panic, "apiserver panic'd");
}

/// Runs a watch's event task, `events`; if it panics, records the panic and sends
/// `broken` (the watch's `ERROR` event, see the module docs) through `tx`, a clone of the
/// task's sender, before the stream ends.
pub(crate) async fn guard_watch<F, S>(shared: Arc<Shared>, events: F, mut tx: S, broken: Bytes)
where
    F: Future<Output = ()>,
    S: futures::Sink<Result<Bytes, std::convert::Infallible>> + Unpin,
{
    if let Err(panic) = AssertUnwindSafe(events).catch_unwind().await {
        record(&shared, panic.as_ref(), "a watch's events");
        let _ = futures::SinkExt::send(&mut tx, Ok(broken)).await;
    }
}

/// A protobuf watch's answer, ending after its `ERROR` frame where encoding its frames
/// panics, the panic recorded (see the module docs).
pub(crate) fn guard_protobuf_watch(shared: Arc<Shared>, response: Response) -> Response {
    let status = panicked().to_status();
    let event = serde_json::json!({ "type": "ERROR", "object": status });
    let broken = protobuf::watch_frame(&event).map(Bytes::from).unwrap_or_default();
    let (parts, body) = response.into_parts();
    let frames = guard_frames(shared, body.into_data_stream(), broken);
    Response::from_parts(parts, Body::from_stream(frames))
}

/// `frames`, ending after `broken` where polling it panics, the panic recorded.
fn guard_frames<S, E>(
    shared: Arc<Shared>,
    frames: S,
    broken: Bytes,
) -> impl Stream<Item = Result<Bytes, E>> + Send
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Send + 'static,
{
    let mut frames = Box::pin(frames);
    let mut done = false;
    futures::stream::poll_fn(move |cx| {
        if done {
            return std::task::Poll::Ready(None);
        }
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| frames.poll_next_unpin(cx)));
        match polled {
            Ok(item) => item,
            Err(panic) => {
                done = true;
                record(&shared, panic.as_ref(), "a protobuf watch's frames");
                std::task::Poll::Ready(Some(Ok(broken.clone())))
            }
        }
    })
}

/// What a panic said, where it said it as text.
fn message(panic: &(dyn Any + Send)) -> &str {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => text,
        (None, Some(text)) => text,
        (None, None) => "a panic without a message",
    }
}
