//! Bodies as kube-apiserver's decoder sees them: how deep they nest, and whether the fields
//! its Go types hold as structs are objects. Every answer here was read off kube-apiserver
//! v1.36.2.
//!
//! **Depth.** Go's `encoding/json` decodes values nested up to 10,000 levels, serde_json
//! stops at 128 by default. The embedded server decodes past 128, up to [`MAX_DEPTH`] (512)
//! levels: `serde_json::Value` decodes, drops, clones, compares and serializes itself
//! recursively, and a much deeper object would overflow a 2 MiB thread stack, aborting the
//! whole test binary; the limit keeps a margin for the frames of the caller's own code
//! (`docs/design/depth.md` in the repository has the measurements). Past it the server answers
//! what kube-apiserver answers past 10,000: a body is a 400 (`… exceeded max depth …`), a
//! patch that would store such an object a 422 (`the server rejected our request due to an
//! error in our request`). This is the one place where the embedded server is deliberately
//! stricter than the real one.
//!
//! **Shapes.** A built-in kind's `metadata`, `spec` and `status` are Go structs: a body where
//! one of them is a string or a list does not decode. Created or replaced, that is a 400 (`Kind
//! in version "v1" cannot be handled as a Kind: json: cannot unmarshal string into Go struct
//! field Kind.spec of type v1.KindSpec`); patched, a 422 quoting the patched object; left by
//! a mutating webhook's patch, a 500. A custom resource's `metadata` is checked alike, and
//! `metadata`'s maps and lists in every kind (see the `typed_fields` module).

use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::model::status::ApiError;
use crate::model::typed_fields;

/// The deepest nesting of objects and arrays the embedded server decodes and stores.
pub(crate) const MAX_DEPTH: usize = 512;

/// Why a body did not decode.
#[derive(Debug)]
pub(crate) enum Malformed {
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// Not JSON of the type asked for.
    Syntax(serde_json::Error),
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooDeep => write!(f, "nested deeper than {MAX_DEPTH} levels"),
            Self::Syntax(e) => e.fmt(f),
        }
    }
}

/// Decodes `bytes` nested up to [`MAX_DEPTH`] levels. The common case (up to serde_json's
/// 128) takes serde_json's own path; a deeper body is measured, then decoded with the limit
/// lifted.
pub(crate) fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Malformed> {
    match serde_json::from_slice(bytes) {
        Ok(value) => Ok(value),
        Err(e) if !e.to_string().starts_with("recursion limit exceeded") => {
            Err(Malformed::Syntax(e))
        }
        Err(_) if ctrlkit_protobuf::json_depth(bytes) > MAX_DEPTH => Err(Malformed::TooDeep),
        Err(_) => {
            let mut decoder = serde_json::Deserializer::from_slice(bytes);
            decoder.disable_recursion_limit();
            let value = T::deserialize(&mut decoder).map_err(Malformed::Syntax)?;
            decoder.end().map_err(Malformed::Syntax)?;
            Ok(value)
        }
    }
}

/// The deepest nesting of objects and arrays in `value`, without recursion.
pub(crate) fn depth_of(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(value, 1usize)];
    while let Some((value, depth)) = pending.pop() {
        match value {
            Value::Object(map) => pending.extend(map.values().map(|child| (child, depth + 1))),
            Value::Array(items) => pending.extend(items.iter().map(|child| (child, depth + 1))),
            _ => continue,
        }
        deepest = deepest.max(depth);
    }
    deepest
}

/// The 400 for a body of `kind` nested past the limit: Go's words, quoting its start.
pub(crate) fn too_deep_body(kind: &str, body: &[u8]) -> ApiError {
    let start = String::from_utf8_lossy(&body[..body.len().min(30)]).into_owned();
    ApiError::bad_request(format!(
        "the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; \
         json parse error: invalid character '{{' exceeded max depth ({start} ...)"
    ))
}

/// The 422 for a patch that does not apply, or would store an object nested past the limit.
pub(crate) fn unprocessable_patch() -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        "the server rejected our request due to an error in our request",
    )
}

/// The 422 for an error unless `value` is nested within the limit.
pub(crate) fn check_depth(value: &Value) -> Result<(), ApiError> {
    match depth_of(value) > MAX_DEPTH {
        true => Err(unprocessable_patch()),
        false => Ok(()),
    }
}

/// Go's decoder's error for a field of `object` (of `kind` at API version `api_version`)
/// that is not the struct, map or list it must be: `metadata` and its maps and lists for
/// every kind; `spec` and `status` too where `typed` (built-in kinds, and `Scale`). A kind's
/// own fields are its strategy's (see the `typed_fields` module).
pub(crate) fn unmarshal_error(
    object: &Value,
    kind: &str,
    api_version: &str,
    typed: bool,
) -> Option<String> {
    let mut fields = typed_fields::metadata_fields(kind, typed);
    if typed {
        fields.extend(typed_fields::spec_and_status(kind, api_version));
    }
    typed_fields::decode_error(object, &fields)
}

/// The 400 for a created or replaced body that does not decode as its kind.
pub(crate) fn cannot_be_handled(kind: &str, api_version: &str, error: &str) -> ApiError {
    let version = api_version.rsplit('/').next().unwrap_or(api_version);
    ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: {error}"
    ))
}

/// The 422 for a patch whose result does not decode: it quotes the patched object.
pub(crate) fn invalid_patch(patched: &Value, error: &str) -> ApiError {
    let quoted = serde_json::to_string(patched).unwrap_or_default();
    let detail = format!("Invalid value: {}: {error}", json!(quoted));
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        format!(" \"\" is invalid: patch: {detail}"),
    )
    .with_cause("FieldValueInvalid", &detail, "patch")
}

/// Go's decoder's error for a body that is not an object at all.
pub(crate) fn not_an_object(value: &Value) -> String {
    format!(
        "couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go value \
         of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \
         \"json:\\\"kind,omitempty\\\"\" }}",
        typed_fields::json_type(value)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn bodies_decode_up_to_the_limit_and_no_deeper() {
        let value: Value = from_slice(nested(MAX_DEPTH).as_bytes()).unwrap();
        assert_eq!(depth_of(&value), MAX_DEPTH);
        let too_deep = from_slice::<Value>(nested(MAX_DEPTH + 1).as_bytes());
        assert!(matches!(too_deep, Err(Malformed::TooDeep)));
        assert!(matches!(from_slice::<Value>(b"{\"a\":"), Err(Malformed::Syntax(_))));
        // Brackets inside strings do not count.
        assert_eq!(ctrlkit_protobuf::json_depth(br#"{"a":"[[[\"{{"}"#), 1);
    }

    #[test]
    fn fields_that_are_not_structs_are_named_as_gos_decoder_names_them() {
        let spec = json!({ "metadata": {}, "spec": "x" });
        assert_eq!(
            unmarshal_error(&spec, "Deployment", "apps/v1", true).as_deref(),
            Some(
                "json: cannot unmarshal string into Go struct field Deployment.spec of type v1.DeploymentSpec"
            )
        );
        assert_eq!(unmarshal_error(&spec, "Widget", "example.com/v1", false), None);
        let metadata = json!({ "metadata": [1] });
        assert_eq!(
            unmarshal_error(&metadata, "Widget", "example.com/v1", false).as_deref(),
            Some("json: cannot unmarshal array into Go value of type v1.ObjectMeta")
        );
        assert_eq!(unmarshal_error(&json!({ "spec": null }), "Pod", "v1", true), None);
    }
}
