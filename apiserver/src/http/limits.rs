//! What wraps every request before routing: the body limit ([`body_limit`]). The injected
//! latency is the other such layer (`faults::latency`).

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::Limited;

use crate::http::encoding::MAX_BODY;

/// Limits every request's body to [`MAX_BODY`] bytes where the real server limits it: as a
/// handler reads a write's body (`limitedReadBody`). So a request answered without reading its
/// body is not refused for it, and a read past the limit fails, which the handler answers 413;
/// a body whose `Content-Length` is over the limit is still read up to it, so that a client
/// still writing gets the 413, not a broken pipe.
pub(crate) async fn body_limit(request: Request, next: Next) -> Response {
    next.run(request.map(|body| Body::new(Limited::new(body, MAX_BODY)))).await
}
