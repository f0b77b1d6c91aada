//! What wraps every request before routing: the injected latency ([`latency`]).
//!
//! The other faults and the body limit are not layers, on purpose. An injected failure is
//! taken by a request to a resource (resolved by routing: discovery and unknown paths never
//! take one), and a watch takes the watch failure first, which needs the parsed request. The
//! body limit applies where the real server applies it, as a handler reads a write's body
//! (`limitedReadBody`): a request answered without reading its body is not refused for it.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::state::Shared;

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
