//! Sending a read and keeping what kube-client's `request_text` and `request_stream` drop:
//! the answer's `Content-Type`, which says how to decode it, and error bodies in protobuf.
//!
//! # Errors
//! An answer of 4xx or 5xx becomes `kube_client::Error::Api` with the server's `Status`, as
//! kube-client makes it, read by the body's `Content-Type`: a protobuf `Status` (which
//! kube-apiserver sends whenever protobuf was acceptable, even for a custom resource whose
//! objects come back as JSON) or a JSON one; a body that is neither (a proxy's text or HTML)
//! becomes a `Failure` status carrying the HTTP code and the text, as kube-client does, so
//! that a 410 or a 429 is seen by its code whichever way it came.

use bytes::Bytes;
use futures::TryStreamExt as _;
use http_body_util::BodyExt as _;
use kube_client::Client;
use kube_client::client::Body;
use kube_client::core::Status;

use super::format::Encoding;
use super::frames::Body as WatchBody;

/// A successful answer: how it is encoded, and its body still to be read.
pub(crate) struct Answer {
    pub(crate) encoding: Encoding,
    body: Body,
}

impl Answer {
    /// The whole body.
    pub(crate) async fn bytes(self) -> kube_client::Result<Bytes> {
        self.body.collect_bytes().await
    }

    /// The body as a stream to read events from as they come.
    pub(crate) fn stream(self) -> WatchBody {
        let reader = self.body.into_data_stream().map_err(std::io::Error::other).into_async_read();
        Box::pin(reader)
    }
}

/// Sends `request` through `client` (its authentication, User-Agent and timeouts) and
/// returns the answer, or the server's error as kube-client would (module docs).
pub(crate) async fn send(
    client: &Client,
    request: http::Request<Vec<u8>>,
) -> kube_client::Result<Answer> {
    let response = client.send(request.map(Body::from)).await?;
    let encoding = Encoding::of(
        response.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()),
    );
    let code = response.status();
    if !(code.is_client_error() || code.is_server_error()) {
        return Ok(Answer { encoding, body: response.into_body() });
    }
    let body = response.into_body().collect_bytes().await?;
    Err(kube_client::Error::Api(api_status(code.as_u16(), encoding, &body).boxed()))
}

/// The `Status` of an error answer (module docs).
pub(crate) fn api_status(code: u16, encoding: Encoding, body: &[u8]) -> Status {
    let decoded = match encoding {
        Encoding::Protobuf => super::decode::status(body).ok(),
        Encoding::Json => serde_json::from_slice::<Status>(body).ok(),
    };
    if let Some(mut status) = decoded.filter(|s| s.code != 0 || !s.message.is_empty()) {
        // A Status without its code (a proxy's) still fails with the answer's.
        if status.code == 0 {
            status.code = code;
        }
        tracing::debug!(?status, "unsuccessful");
        return status;
    }
    let text = String::from_utf8_lossy(body);
    Status::failure(text.trim(), "Failed to parse error data").with_code(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_status_is_the_error() {
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old","reason":"Expired","code":410}"#;
        let status = api_status(410, Encoding::Json, body);
        assert_eq!((status.code, status.message.as_str()), (410, "too old"));
    }

    #[test]
    fn a_protobuf_status_is_the_error_and_a_status_without_a_code_takes_the_answers() {
        let status = serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
            "message": "the list was refused", "reason": "Invalid", "code": 422});
        let body = ctrlkit_protobuf::transcode::from_json(&status).unwrap();
        let decoded = api_status(422, Encoding::Protobuf, &body);
        assert_eq!((decoded.code, decoded.reason.as_str()), (422, "Invalid"));
        let without_code = br#"{"kind":"Status","status":"Failure","message":"slow down"}"#;
        let decoded = api_status(429, Encoding::Json, without_code);
        assert_eq!((decoded.code, decoded.message.as_str()), (429, "slow down"));
    }

    #[test]
    fn a_body_that_is_no_status_keeps_the_http_code_and_the_text() {
        let status = api_status(503, Encoding::Json, b"<html>bad gateway</html>\n");
        assert_eq!((status.code, status.message.as_str()), (503, "<html>bad gateway</html>"));
        let status = api_status(410, Encoding::Protobuf, b"k8s\0\xff\xff");
        assert_eq!(status.code, 410);
    }
}
