//! The strategy of every kind a CustomResourceDefinition defines, as kube-apiserver's
//! `customresource` strategy: a main-resource create of a kind with a status subresource
//! drops the status, and every write is validated against the types of the version's
//! structural schema (`openAPIV3Schema`): a value whose JSON type is not the one its schema
//! names is a 422 (`spec: Invalid value: "string": spec in body must be of type object:
//! "string"`, cause `FieldValueTypeInvalid`), read off v1.36.2. A `null` is no value (the
//! real server prunes it). Only `type` is checked, through `properties`, `items` and
//! `additionalProperties`: formats, patterns, enums, bounds and CEL rules are not.
//!
//! The schemas are those of the CRDs stored: [`Schemas`], which the CRD strategy keeps.
//!
//! Its Table: the name, then the CRD's `additionalPrinterColumns`, or `Age` (a date) when it
//! has none.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

use crate::model::resources::ResourceType;
use crate::model::status::{ApiError, ApiResult};
use crate::model::typed_fields::{Shape, TypedField};
use crate::registry::Strategy;
use crate::registry::printers::{self, Column, col, named};

/// The structural schema of each version a stored CRD serves, by API version and kind.
#[derive(Default)]
pub(crate) struct Schemas(Mutex<HashMap<(String, String), Arc<Value>>>);

impl Schemas {
    /// Keeps the schemas of `crd`'s versions (replacing those it had).
    pub(crate) fn define(&self, crd: &Value) {
        let (group, kind) = names(crd);
        let mut schemas = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        schemas.retain(|(api_version, k), _| !(k == &kind && group_of(api_version) == group));
        for version in crd["spec"]["versions"].as_array().into_iter().flatten() {
            let (Some(name), Some(schema)) =
                (version["name"].as_str(), version["schema"].get("openAPIV3Schema"))
            else {
                continue;
            };
            schemas.insert((format!("{group}/{name}"), kind.clone()), Arc::new(schema.clone()));
        }
    }

    /// Forgets the schemas of the deleted `crd`.
    pub(crate) fn forget(&self, crd: &Value) {
        let (group, kind) = names(crd);
        let mut schemas = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        schemas.retain(|(api_version, k), _| !(k == &kind && group_of(api_version) == group));
    }

    fn get(&self, api_version: &str, kind: &str) -> Option<Arc<Value>> {
        let schemas = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        schemas.get(&(api_version.to_owned(), kind.to_owned())).cloned()
    }
}

/// A CRD's group and kind.
fn names(crd: &Value) -> (String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (text(&crd["spec"]["group"]), text(&crd["spec"]["names"]["kind"]))
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// The rules of custom resources; see the module docs.
pub(crate) struct CustomResourceStrategy {
    pub(crate) schemas: Arc<Schemas>,
}

impl CustomResourceStrategy {
    /// The 422 for `object` unless its values have the types its schema names.
    fn validate(&self, object: &Value) -> ApiResult<()> {
        let (api_version, kind) = (object["apiVersion"].as_str(), object["kind"].as_str());
        let Some(schema) =
            self.schemas.get(api_version.unwrap_or_default(), kind.unwrap_or_default())
        else {
            return Ok(());
        };
        let errors = type_errors(object, &schema);
        if errors.is_empty() {
            return Ok(());
        }
        let group = group_of(api_version.unwrap_or_default());
        let qualified = format!("{}.{group}", kind.unwrap_or_default());
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let described: Vec<String> =
            errors.iter().map(|(field, why)| format!("{field}: {why}")).collect();
        let cause = match described.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut err = ApiError::invalid(&qualified, name, &cause);
        for (field, why) in &errors {
            err = err.with_cause("FieldValueTypeInvalid", why, field);
        }
        Err(err)
    }
}

impl Strategy for CustomResourceStrategy {
    fn validate_create(&self, rt: &ResourceType, object: &mut Value) -> ApiResult<()> {
        if rt.status_subresource
            && let Some(fields) = object.as_object_mut()
        {
            fields.remove("status");
        }
        self.validate(object)
    }

    fn validate_update(&self, _: &str, _: &Value, new: &Value, _: bool) -> ApiResult<()> {
        self.validate(new)
    }

    fn structural_schema(&self, rt: &ResourceType) -> Option<Arc<Value>> {
        self.schemas.get(&rt.api_version(), &rt.kind)
    }

    fn columns(&self, rt: &ResourceType) -> Vec<Column> {
        match rt.printer_columns.is_empty() {
            true => named(vec![col("Age", "date", 0)]),
            false => printers::default_columns(rt),
        }
    }

    fn applied_fields(&self, rt: &ResourceType) -> Vec<TypedField> {
        let Some(schema) = self.schemas.get(&rt.api_version(), &rt.kind) else {
            return Vec::new();
        };
        let properties = schema["properties"].as_object().into_iter().flatten();
        properties
            .filter(|(field, _)| !matches!(field.as_str(), "metadata" | "apiVersion" | "kind"))
            .filter_map(|(field, property)| {
                let shape = match property["type"].as_str()? {
                    "object" => Shape::Map,
                    "array" => Shape::List,
                    _ => return None,
                };
                Some(TypedField::new(&[field.as_str()], None, "", shape))
            })
            .collect()
    }
}

/// The JSON type of `value` as the schema names types.
fn schema_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether `value` is of the schema type `expected`.
fn is_of(value: &Value, expected: &str) -> bool {
    match expected {
        "number" => value.is_number(),
        other => schema_type(value) == other,
    }
}

/// Each field of `object` whose value is not of the type its schema names, with the real
/// server's words, in the order of their paths. Walked without recursion: objects are as deep
/// as the server takes them.
fn type_errors(object: &Value, schema: &Value) -> Vec<(String, String)> {
    let mut errors = Vec::new();
    let mut pending: Vec<(&Value, &Value, String)> = Vec::new();
    for (field, value) in object.as_object().into_iter().flatten() {
        if matches!(field.as_str(), "metadata" | "apiVersion" | "kind") {
            continue;
        }
        if let Some(property) = child_schema(schema, field) {
            pending.push((value, property, field.clone()));
        }
    }
    while let Some((value, schema, path)) = pending.pop() {
        if value.is_null() {
            continue;
        }
        if let Some(expected) = schema["type"].as_str()
            && !is_of(value, expected)
        {
            let found = schema_type(value);
            errors.push((
                path.clone(),
                format!("Invalid value: \"{found}\": {path} in body must be of type {expected}: \"{found}\""),
            ));
            continue;
        }
        match value {
            Value::Object(map) => {
                for (field, value) in map {
                    if let Some(property) = child_schema(schema, field) {
                        pending.push((value, property, format!("{path}.{field}")));
                    }
                }
            }
            Value::Array(items) => {
                if let Some(item) = schema.get("items").filter(|s| s.is_object()) {
                    for (i, value) in items.iter().enumerate() {
                        pending.push((value, item, format!("{path}[{i}]")));
                    }
                }
            }
            _ => {}
        }
    }
    errors.sort();
    errors
}

/// The schema of the field `field` of an object of `schema`: its property, or else the
/// schema of its `additionalProperties`.
fn child_schema<'a>(schema: &'a Value, field: &str) -> Option<&'a Value> {
    schema["properties"]
        .get(field)
        .or_else(|| schema.get("additionalProperties").filter(|s| s.is_object()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_of_another_type_than_the_schema_names_are_named_with_their_paths() {
        let schema = json!({ "type": "object", "properties": {
            "spec": { "type": "object", "properties": {
                "size": { "type": "integer" },
                "tags": { "type": "array", "items": { "type": "string" } },
                "labels": { "type": "object", "additionalProperties": { "type": "string" } },
            } },
        } });
        let object = json!({ "metadata": "x", "spec": { "size": 1.5, "tags": ["a", 2], "labels": { "a": true }, "other": 1 } });
        assert_eq!(
            type_errors(&object, &schema),
            [
                ("spec.labels.a".to_owned(), "Invalid value: \"boolean\": spec.labels.a in body must be of type string: \"boolean\"".to_owned()),
                ("spec.size".to_owned(), "Invalid value: \"number\": spec.size in body must be of type integer: \"number\"".to_owned()),
                ("spec.tags[1]".to_owned(), "Invalid value: \"integer\": spec.tags[1] in body must be of type string: \"integer\"".to_owned()),
            ]
        );
        assert!(type_errors(&json!({ "spec": null }), &schema).is_empty(), "null is no value");
        assert_eq!(type_errors(&json!({ "spec": "x" }), &schema).len(), 1);
    }
}
