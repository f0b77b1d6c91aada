//! The injected latency, a layer that wraps every request before routing.
//!
//! The other faults are not a layer, on purpose: an injected failure is taken by a request to
//! a resource (resolved by routing: discovery and unknown paths never take one), counted as
//! that request, and a watch takes the watch failure first, which needs the parsed request.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::FaultState;

/// Holds every request back by the latency injected with `Faults::latency`, then serves it.
pub(crate) async fn latency(
    State(faults): State<Arc<FaultState>>,
    request: Request,
    next: Next,
) -> Response {
    let latency = faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    next.run(request).await
}
