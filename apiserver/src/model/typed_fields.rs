//! The fields a kind's Go type holds as a struct, a map or a list, and what kube-apiserver
//! answers a write that puts another JSON type there (each answer read off v1.36.2, and the
//! same codes and reasons off v1.20.2; the protocol suite's `shapes` cases assert them):
//! - created or replaced: its decoder's error, a 400 (`shapes::cannot_be_handled`);
//! - merge or JSON patched: the same error about the patched object, a 422
//!   (`shapes::invalid_patch`);
//! - strategic-merge patched: a 422 quoting the patch as Go prints it (`cannot restore map
//!   from string`);
//! - applied: a 500, structured-merge-diff's `expected map, got &{x}`.
//!
//! Every kind has `metadata` and its maps and lists ([`metadata_fields`]); a built-in kind's
//! `spec` and `status`, where its schema has them, are structs ([`spec_and_status`]); a kind's own (a ConfigMap's `data`)
//! come from its strategy. A `null` is no value, as Go decodes it.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::model::status::ApiError;
use crate::model::vendored;

/// What Go holds a field as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A struct: a JSON object.
    Struct,
    /// A map: a JSON object.
    Map,
    /// A slice: a JSON array.
    List,
}

/// A field that is a struct, a map or a list in its kind's Go type.
#[derive(Debug, Clone)]
pub(crate) struct TypedField {
    /// Its path from the object's root: `["metadata", "labels"]`.
    pub(crate) path: Vec<String>,
    /// How Go's decoder names it: `ObjectMeta.metadata.labels`; `None` where the decoder
    /// decodes it as a value of its own (a custom resource's `metadata`).
    pub(crate) go_field: Option<String>,
    /// Its Go type: `map[string]string`.
    pub(crate) go_type: String,
    pub(crate) shape: Shape,
}

impl TypedField {
    /// The field at `path`, named `go_field` by Go's decoder, of `go_type`.
    pub(crate) fn new(
        path: &[&str],
        go_field: Option<String>,
        go_type: &str,
        shape: Shape,
    ) -> Self {
        let path = path.iter().map(|p| (*p).to_owned()).collect();
        Self { path, go_field, go_type: go_type.to_owned(), shape }
    }

    /// The top-level field `field` of `kind`, a map of `go_type` in Go (a ConfigMap's `data`).
    pub(crate) fn map(kind: &str, field: &str, go_type: &str) -> Self {
        Self::new(&[field], Some(format!("{kind}.{field}")), go_type, Shape::Map)
    }

    /// The field's value in `object`, unless absent, null or of the right JSON type.
    fn misfit<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        let mut value = object;
        for step in &self.path {
            value = value.as_object()?.get(step)?;
        }
        match (self.shape, value) {
            (_, Value::Null) | (Shape::Struct | Shape::Map, Value::Object(_)) => None,
            (Shape::List, Value::Array(_)) => None,
            _ => Some(value),
        }
    }
}

/// `metadata` and its fields Go holds as maps and lists. A built-in kind's decoder names
/// them as fields of the kind (`Deployment.metadata`, `ObjectMeta.metadata.labels`); a custom
/// resource's decodes metadata on its own (`v1.ObjectMeta`, `ObjectMeta.labels`).
pub(crate) fn metadata_fields(kind: &str, builtin: bool) -> Vec<TypedField> {
    let named = |field: &str| match builtin {
        true => format!("ObjectMeta.metadata.{field}"),
        false => format!("ObjectMeta.{field}"),
    };
    let metadata = builtin.then(|| format!("{kind}.metadata"));
    vec![
        TypedField::new(&["metadata"], metadata, "v1.ObjectMeta", Shape::Struct),
        TypedField::new(
            &["metadata", "labels"],
            Some(named("labels")),
            "map[string]string",
            Shape::Map,
        ),
        TypedField::new(
            &["metadata", "annotations"],
            Some(named("annotations")),
            "map[string]string",
            Shape::Map,
        ),
        TypedField::new(
            &["metadata", "finalizers"],
            Some(named("finalizers")),
            "[]string",
            Shape::List,
        ),
        TypedField::new(
            &["metadata", "ownerReferences"],
            Some(named("ownerReferences")),
            "[]v1.OwnerReference",
            Shape::List,
        ),
    ]
}

/// A built-in kind's `spec` and `status`, structs of its version's package (`v1.DeploymentSpec`),
/// those of the two its published schema has: a ConfigMap's, a Secret's or a Role's `spec` is
/// an unknown field, dropped or refused by field validation, not a struct.
pub(crate) fn spec_and_status(kind: &str, api_version: &str) -> Vec<TypedField> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ["spec", "status"]
        .into_iter()
        .filter(|field| vendored::builtin_kind_has(group, version, kind, field).unwrap_or(false))
        .map(|field| {
            let suffix = if field == "spec" { "Spec" } else { "Status" };
            let go_type = format!("{version}.{kind}{suffix}");
            TypedField::new(&[field], Some(format!("{kind}.{field}")), &go_type, Shape::Struct)
        })
        .collect()
}

/// Go's decoder's error for the first of `fields` that `object` holds with another JSON type.
pub(crate) fn decode_error(object: &Value, fields: &[TypedField]) -> Option<String> {
    fields.iter().find_map(|field| {
        let value = field.misfit(object)?;
        let json = json_type(value);
        Some(match &field.go_field {
            Some(name) => format!(
                "json: cannot unmarshal {json} into Go struct field {name} of type {}",
                field.go_type
            ),
            None => {
                format!("json: cannot unmarshal {json} into Go value of type {}", field.go_type)
            }
        })
    })
}

/// The 422 for a strategic-merge `patch` that sets one of `fields` to another JSON type.
pub(crate) fn strategic_error(patch: &Value, fields: &[TypedField]) -> Option<ApiError> {
    let (field, value) = fields.iter().find_map(|f| f.misfit(patch).map(|v| (f, v)))?;
    let restore = match field.shape {
        Shape::Struct => "struct from:",
        Shape::Map => "map from",
        Shape::List => "slice from",
    };
    let cause = format!(
        "Invalid value: {}: cannot restore {restore} {}",
        json!(go_print(patch)),
        go_kind(value)
    );
    Some(
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!(" \"\" is invalid: patch: {cause}"),
        )
        .with_cause("FieldValueInvalid", &cause, "patch"),
    )
}

/// The 500 for an apply whose body sets one of `fields` to another JSON type; `gvk` as Go
/// prints a kind (`apps/v1, Kind=Deployment`, `/v1, Kind=ConfigMap`).
pub(crate) fn apply_error(applied: &Value, fields: &[TypedField], gvk: &str) -> Option<ApiError> {
    let (field, value) = fields.iter().find_map(|f| f.misfit(applied).map(|v| (f, v)))?;
    let text = |field: &str| applied["metadata"][field].as_str().unwrap_or_default().to_owned();
    let expected = if field.shape == Shape::List { "list" } else { "map" };
    let message = format!(
        "failed to create typed patch object ({}/{}; {gvk}): .{}: expected {expected}, got &{{{}}}",
        text("namespace"),
        text("name"),
        field.path.join("."),
        go_print(value)
    );
    // The real server's Status of this error has no reason.
    Some(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "", message))
}

/// The JSON type of `value` as Go's decoder names it in its errors.
pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The Go kind of a decoded JSON value, as the strategic-merge code names it.
fn go_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nil",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "slice",
        Value::Object(_) => "map",
    }
}

/// A decoded JSON value as Go's `%v` prints it: `map[a:b c:[1 2]]`, keys sorted.
pub(crate) fn go_print(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            format!("[{}]", items.iter().map(go_print).collect::<Vec<_>>().join(" "))
        }
        Value::Object(map) => {
            let mut entries: Vec<String> =
                map.iter().map(|(k, v)| format!("{k}:{}", go_print(v))).collect();
            entries.sort();
            format!("map[{}]", entries.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misshapen_fields_are_named_as_go_names_them() {
        let fields = metadata_fields("ConfigMap", true);
        let labels = json!({ "metadata": { "labels": "x" } });
        assert_eq!(
            decode_error(&labels, &fields).as_deref(),
            Some(
                "json: cannot unmarshal string into Go struct field ObjectMeta.metadata.labels of type map[string]string"
            )
        );
        let custom = metadata_fields("Widget", false);
        assert_eq!(
            decode_error(&json!({ "metadata": [1] }), &custom).as_deref(),
            Some("json: cannot unmarshal array into Go value of type v1.ObjectMeta")
        );
        assert_eq!(decode_error(&json!({ "metadata": null }), &fields), None);
        let patch = json!({ "metadata": { "finalizers": { "a": "b" } } });
        let err = strategic_error(&patch, &fields).unwrap();
        assert_eq!(
            err.message,
            " \"\" is invalid: patch: Invalid value: \"map[metadata:map[finalizers:map[a:b]]]\": cannot restore slice from map"
        );
        let applied = json!({ "metadata": { "name": "c", "labels": 1 } });
        let err = apply_error(&applied, &fields, "/v1, Kind=ConfigMap").unwrap();
        assert_eq!(
            err.message,
            "failed to create typed patch object (/c; /v1, Kind=ConfigMap): .metadata.labels: expected map, got &{1}"
        );
    }

    #[test]
    fn spec_and_status_are_typed_only_where_the_kind_has_them() {
        let paths = |kind, api_version| -> Vec<String> {
            spec_and_status(kind, api_version).into_iter().map(|f| f.path.join(".")).collect()
        };
        assert_eq!(paths("Deployment", "apps/v1"), ["spec", "status"]);
        assert_eq!(paths("Scale", "autoscaling/v1"), ["spec", "status"]);
        assert_eq!(paths("Lease", "coordination.k8s.io/v1"), ["spec"]);
        for (kind, api_version) in [
            ("ConfigMap", "v1"),
            ("Secret", "v1"),
            ("ServiceAccount", "v1"),
            ("Role", "rbac.authorization.k8s.io/v1"),
            ("Event", "events.k8s.io/v1"),
        ] {
            assert!(paths(kind, api_version).is_empty(), "{kind} has no spec or status");
        }
    }
}
