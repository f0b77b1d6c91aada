//! A body ⇄ its JSON, through `ctrlkit-protobuf`'s transcoder, in the server's own error
//! forms (a 400's message, `None` for a kind with no message).

use serde_json::Value;

/// A protobuf body whose object could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Not a Kubernetes protobuf body, or a message that does not decode.
    Malformed(String),
    /// A kind with no message here (a custom resource): the real server's 415.
    UnknownKind { api_version: String, kind: String },
}

/// Decodes a protobuf body (`k8s\0` + `runtime.Unknown`) into the JSON of its object, with
/// `apiVersion` and `kind` from the envelope.
pub(crate) fn decode(body: &[u8]) -> Result<Value, DecodeError> {
    ctrlkit_protobuf::transcode::to_json(body).map_err(|e| match e {
        ctrlkit_protobuf::Error::UnknownKind { api_version, kind } => {
            DecodeError::UnknownKind { api_version, kind }
        }
        other => DecodeError::Malformed(other.to_string()),
    })
}

/// Encodes a JSON object of a built-in kind (its `apiVersion` and `kind` say which) as a
/// protobuf body; `None` when the kind has no message.
pub(crate) fn encode(value: &Value) -> Option<Result<Vec<u8>, String>> {
    match ctrlkit_protobuf::transcode::from_json(value) {
        Err(ctrlkit_protobuf::Error::UnknownKind { .. }) => None,
        other => Some(other.map_err(|e| e.to_string())),
    }
}

/// The JSON kube-apiserver answers for `value`, an object of a built-in kind with a message:
/// what Go's `encoding/json` writes of it once decoded into its typed struct and stored in
/// protobuf (empty `omitempty` fields and empty maps and lists left out, pointers kept, fields
/// the type lacks dropped, times to the second); see `ctrlkit-protobuf`'s Go JSON rules.
/// `None` when the kind has no message, or a field does not fit it (left to the checks that
/// answer such a body, as it was).
pub(crate) fn typed_json(value: &Value) -> Option<Value> {
    let body = ctrlkit_protobuf::transcode::from_json(value).ok()?;
    ctrlkit_protobuf::transcode::to_json(&body).ok()
}

/// Whether a kind has a message (`Some`) or takes JSON only (a custom resource).
pub(crate) fn message_for(api_version: &str, kind: &str) -> Option<()> {
    ctrlkit_protobuf::has_message(api_version, kind).then_some(())
}
