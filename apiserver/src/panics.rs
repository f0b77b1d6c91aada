//! The layer that turns a handler's panic into an answer, as kube-apiserver's
//! `WithPanicRecovery` filter does: the request gets a 500 in Go's words, the panic is logged
//! with the request's method and URI and counted ([`ApiServer::handler_panics`]), and the
//! server goes on serving every other request, on that connection too.
//!
//! The real server writes its words as `text/plain`; this one sends them as a `Status`
//! (`reason: InternalError`), which every client reads as an error. A panic after a
//! response has begun (inside a watch's stream) cannot become an answer: that stream ends.
//!
//! [`ApiServer::handler_panics`]: super::ApiServer::handler_panics

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use futures::FutureExt;

use super::encoding::error_response;
use super::state::Shared;
use super::status::ApiError;

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
            shared.stats.panics.fetch_add(1, Ordering::SeqCst);
            let panic = message(panic.as_ref());
            tracing::error!(%method, %uri, %panic, "apiserver panic'd");
            error_response(&ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                PANICKED,
            ))
        }
    }
}

/// What a panic said, where it said it as text.
fn message(panic: &(dyn Any + Send)) -> &str {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => text,
        (None, Some(text)) => text,
        (None, None) => "a panic without a message",
    }
}
