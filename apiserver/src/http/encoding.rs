//! Answers and bodies on the wire: JSON answers (objects, Status errors, the Status of a
//! completed delete), protobuf bodies decoded to JSON and JSON answers re-encoded as protobuf
//! where `Accept` negotiates it (see the `negotiate` module), and the refusals of bodies too large or in an
//! encoding the server does not speak.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::model::status::{ApiError, ApiResult};
use crate::protobuf;
use crate::storage::store::StoredObject;

/// The largest request body accepted: the real server's 3 MiB.
pub(crate) const MAX_BODY: usize = 3 << 20;

pub(crate) fn json_response(code: StatusCode, body: impl Into<Body>) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.into())
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

pub(crate) fn value_response(code: StatusCode, value: &Value) -> Response {
    json_response(code, value.to_string())
}

pub(crate) fn object_response(
    code: StatusCode,
    object: &StoredObject,
    metadata: Option<&str>,
) -> Response {
    json_response(code, object.json_as(metadata))
}

/// The real server's answer to a completed delete of most kinds: a Status naming what went
/// (its `kind` detail holds the resource, as the real one's does).
pub(crate) fn deleted_status(rt: &ResourceType, object: &StoredObject) -> Value {
    let value = object.value();
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": value["metadata"]["name"],
            "group": rt.group,
            "kind": rt.plural,
            "uid": value["metadata"]["uid"],
        }
    })
}

pub(crate) fn error_response(err: &ApiError) -> Response {
    let mut response = value_response(err.code, &err.to_status());
    if let Some(secs) = err.retry_after
        && let Ok(v) = secs.to_string().parse()
    {
        response.headers_mut().insert(header::RETRY_AFTER, v);
    }
    response
}

/// A protobuf body of a create, update or delete, as the JSON of its object; other bodies as
/// they are. 400 for a body that does not decode, or of a kind with no message (a custom
/// resource).
pub(crate) fn protobuf_body(method: &Method, headers: &HeaderMap, body: Bytes) -> ApiResult<Bytes> {
    let media = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let media = media.split(';').next().unwrap_or("").trim();
    if media != protobuf::MEDIA_TYPE || body.is_empty() || method == Method::PATCH {
        return Ok(body);
    }
    match protobuf::decode(&body) {
        Ok(value) => Ok(Bytes::from(value.to_string())),
        Err(protobuf::DecodeError::Malformed(why)) => {
            Err(ApiError::bad_request(format!("the protobuf body could not be decoded: {why}")))
        }
        // kube-apiserver 1.20 reads the body of a custom resource as JSON whatever its type,
        // and refuses it as an object without a kind.
        Err(protobuf::DecodeError::UnknownKind { api_version, kind }) => {
            Err(ApiError::bad_request(format!(
                "{kind} in version {api_version:?} cannot be handled as a {kind}: custom resources take JSON and YAML bodies, not protobuf"
            )))
        }
    }
}

/// A JSON answer re-encoded as protobuf, where it was negotiated so: one
/// envelope for an object, a list or a Status, length-prefixed `WatchEvent` frames for a
/// watch. A line of a watch that is not JSON (an injected corruption) is sent as a frame of
/// its raw bytes, which the client cannot decode either.
pub(crate) async fn protobuf_response(response: Response, watch: bool) -> Response {
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let media = if watch { protobuf::WATCH_MEDIA_TYPE } else { protobuf::MEDIA_TYPE };
    parts.headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(media));
    if watch {
        let frames = protobuf::watch_frames(body.into_data_stream());
        return Response::from_parts(parts, Body::from_stream(frames));
    }
    let encoded = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => crate::model::shapes::from_slice::<Value>(&bytes)
            .map_err(|e| e.to_string())
            .and_then(|value| {
                protobuf::encode(&value)
                    .unwrap_or_else(|| Err(format!("no protobuf message for {}", value["kind"])))
            }),
        Err(e) => Err(e.to_string()),
    };
    match encoded {
        Ok(bytes) => Response::from_parts(parts, Body::from(bytes)),
        Err(why) => {
            let err = ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                format!("encoding the answer as protobuf: {why}"),
            );
            value_response(err.code, &err.to_status())
        }
    }
}

/// The real server's answer to a body over its limit.
pub(crate) fn too_large_body() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "RequestEntityTooLarge",
        format!("Request entity too large: limit is {MAX_BODY}"),
    )
}

/// Refuses bodies in encodings the server does not speak (CBOR, YAML) with 415.
pub(crate) fn unsupported_body(headers: &HeaderMap, body: &[u8]) -> Option<ApiError> {
    if body.is_empty() {
        return None;
    }
    let content_type = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let media = content_type.split(';').next().unwrap_or("").trim();
    let json = media == "application/json"
        || media == protobuf::MEDIA_TYPE // decoded to JSON by `protobuf_body`
        || media.ends_with("+json")
        || media == "application/apply-patch+yaml"
        || media.is_empty()
        || media == "*/*";
    (!json).then(|| {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json (got {media})"),
        )
    })
}
