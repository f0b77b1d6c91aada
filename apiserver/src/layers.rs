//! What wraps every request before routing: the injected latency ([`latency`]) and the
//! body limit ([`body_limit`]).
//!
//! The other faults are not a layer, on purpose: an injected failure is taken by a request to
//! a resource (resolved by routing: discovery and unknown paths never take one), counted as
//! that request, and a watch takes the watch failure first, which needs the parsed request.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::Limited;

use crate::encoding::MAX_BODY;
use crate::state::Shared;

/// Limits every request's body to [`MAX_BODY`] bytes where the real server limits it: as a
/// handler reads a write's body (`limitedReadBody`). So a request answered without reading its
/// body is not refused for it, and a read past the limit fails, which the handler answers 413;
/// a body whose `Content-Length` is over the limit is still read up to it, so that a client
/// still writing gets the 413, not a broken pipe.
pub(crate) async fn body_limit(request: Request, next: Next) -> Response {
    next.run(request.map(|body| Body::new(Limited::new(body, MAX_BODY)))).await
}

/// Holds every request back by the latency injected with `Faults::latency`, then serves it.
pub(crate) async fn latency(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let latency = shared.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    next.run(request).await
}
