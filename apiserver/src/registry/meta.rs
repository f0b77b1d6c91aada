//! The checks of an object's metadata and body on create and update: names (`generateName`,
//! DNS labels and subdomains), the body's type and shape, empty metadata dropped, a built-in
//! object rewritten as the JSON of its Go type, what counts as the spec, and finalizers.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::model::shapes::{self, Malformed};
use crate::model::status::{ApiError, ApiResult};
use crate::model::typed_fields::{self, TypedField};
use crate::protobuf;

use super::strategy::{NameRule, Strategy};

/// Five characters from the alphabet Kubernetes uses for `generateName` suffixes.
pub(super) fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    use std::hash::{BuildHasher, RandomState};
    let mut x = RandomState::new().hash_one(Timestamp::now().as_nanosecond());
    (0..5)
        .map(|_| {
            let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
            x /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case \
    alphanumeric characters or '-', and must start and end with an alphanumeric character \
    (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
    alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
    (e.g. 'example.com', regex used for validation is \
    '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// Why `name` breaks `rule` (the kind's, see `Strategy::name_rule`), if it does.
pub(super) fn invalid_name(rule: NameRule, name: &str) -> Option<String> {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ends_ok = name.starts_with(alnum) && name.ends_with(alnum);
    match rule {
        NameRule::Label => {
            if name.len() > 63 {
                return Some("must be no more than 63 characters".into());
            }
            if !ends_ok || !name.chars().all(|c| alnum(c) || c == '-') {
                return Some(DNS1123_LABEL_MSG.into());
            }
        }
        NameRule::Subdomain => {
            if name.len() > 253 {
                return Some("must be no more than 253 characters".into());
            }
            if !ends_ok || !name.chars().all(|c| alnum(c) || c == '-' || c == '.') {
                return Some(DNS1123_SUBDOMAIN_MSG.into());
            }
        }
    }
    None
}

/// The 422 for an object of `rt` named `name`, as the real server words it: the kind
/// qualified by its group unless core (`Deployment.apps "web" is invalid: …`).
pub(super) fn invalid_object(rt: &ResourceType, name: &str, cause: &str) -> ApiError {
    let mut err = ApiError::invalid(&rt.kind, name, cause);
    if !rt.group.is_empty() {
        err.message = format!("{}.{} \"{name}\" is invalid: {cause}", rt.kind, rt.group);
    }
    err
}

/// The body of a create or update of `kind`: a JSON object nested within the limits of the
/// `shapes` module.
pub(crate) fn parse_body(kind: &str, body: &[u8]) -> ApiResult<Value> {
    let value: Value = shapes::from_slice(body).map_err(|e| match e {
        Malformed::TooDeep => shapes::too_deep_body(kind, body),
        Malformed::Syntax(e) => {
            ApiError::bad_request(format!("the body of the request was in an unknown format: {e}"))
        }
    })?;
    if !value.is_object() {
        return Err(ApiError::bad_request("the body of the request must be a JSON object"));
    }
    Ok(value)
}

/// Sets kind and apiVersion, refusing a body that names another type or holds one of
/// `fields` (the kind's structs, maps and lists) with another JSON type; then the kind's
/// `strategy` decodes it (`Strategy::decode`), and a kind with a protobuf message is
/// rewritten as the JSON of its Go type (`protobuf::typed_json`).
pub(super) fn check_type(
    rt: &ResourceType,
    fields: &[TypedField],
    strategy: &dyn Strategy,
    value: &mut Value,
) -> ApiResult<()> {
    if !value.is_object() {
        return Err(ApiError::bad_request("the body of the request must be a JSON object"));
    }
    let api_version = rt.api_version();
    if let Some(v) = value.get("apiVersion").and_then(Value::as_str)
        && v != api_version
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({v}) does not match the expected API version ({api_version})"
        )));
    }
    if let Some(k) = value.get("kind").and_then(Value::as_str)
        && k != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    if let Some(error) = typed_fields::decode_error(value, fields) {
        return Err(shapes::cannot_be_handled(&rt.kind, &api_version, &error));
    }
    shapes::check_depth(value)?;
    value["apiVersion"] = json!(api_version);
    value["kind"] = json!(rt.kind);
    if !value["metadata"].is_object() {
        value["metadata"] = json!({});
    }
    drop_empty_metadata(&mut value["metadata"]);
    strategy.decode(value)?;
    // What the real server keeps of a built-in object is its typed struct: answers are Go's
    // JSON of it (a ConfigMap's `data: {}` left out, as `omitempty` does).
    if let Some(typed) = protobuf::typed_json(value) {
        *value = typed;
    }
    Ok(())
}

/// Drops the metadata lists and maps that are empty (or null), as the real server's typed
/// `ObjectMeta` (`omitempty`) does: `"finalizers": []` is stored and served as no finalizers,
/// which JSON patches that `test` the field against `null` rely on.
fn drop_empty_metadata(meta: &mut Value) {
    let Some(meta) = meta.as_object_mut() else { return };
    for field in ["labels", "annotations", "finalizers", "ownerReferences", "managedFields"] {
        let empty = match meta.get(field) {
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            Some(Value::Null) => true,
            _ => false,
        };
        if empty {
            meta.remove(field);
        }
    }
}

/// Everything but metadata and status: what a change must touch to bump `generation`.
pub(super) fn spec_of(value: &Value) -> Vec<(&String, &Value)> {
    value
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "kind" | "apiVersion")
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn has_finalizers(value: &Value) -> bool {
    value["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty())
}
