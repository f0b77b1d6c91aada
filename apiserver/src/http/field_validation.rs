//! Server-side field validation (`fieldValidation=Strict|Warn|Ignore`), as kube-apiserver 1.36
//! does it: a write's body is read against its kind's OpenAPI schema, and each field the kind
//! does not have (`unknown field "spec.foo"`) or that appears twice in one object (`duplicate
//! field "data"`) is a problem. `Strict` refuses the write (400, `strict decoding error: ...`),
//! `Warn` (the default, as on the real server) writes it and answers one `Warning` header per
//! problem, `Ignore` says nothing. kubectl sends `Strict` by default.
//!
//! Read against the schema: created and replaced objects, server-side apply configurations,
//! and merge and strategic merge patches (whose directives, `$patch` and the like, are not
//! fields). JSON patches are not read. A field under `x-kubernetes-preserve-unknown-fields`, or
//! of a type the schema leaves open (`RawExtension`, a map of anything), may hold anything.

use std::collections::HashSet;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::model::status::ApiError;

/// What `fieldValidation` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Validation {
    Strict,
    Warn,
    Ignore,
}

impl Validation {
    /// The query's `fieldValidation`; unset, `Warn`, as the real server. Another value is a
    /// 422 with the real server's message, naming the write's options kind (`CreateOptions`,
    /// `UpdateOptions`, `PatchOptions`).
    pub(crate) fn parse(value: Option<&str>, options: &str) -> Result<Self, ApiError> {
        match value {
            None | Some("") | Some("Warn") => Ok(Self::Warn),
            Some("Strict") => Ok(Self::Strict),
            Some("Ignore") => Ok(Self::Ignore),
            Some(other) => Err(ApiError::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!(
                    "{options}.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"{other}\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
                ),
            )),
        }
    }
}

/// A JSON tree that keeps every key of an object in order, repeats included.
enum Node {
    Object(Vec<(String, Node)>),
    Array(Vec<Node>),
    Scalar,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_str<E>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Node>()? {
            entries.push((key, value));
        }
        Ok(Node::Object(entries))
    }
}

/// Resolves a schema's `$ref` (and a lone `allOf` around one) in `schemas`.
fn resolve<'a>(schema: &'a Value, schemas: &'a serde_json::Map<String, Value>) -> &'a Value {
    let mut current = schema;
    for _ in 0..32 {
        if let Some(name) = current["$ref"].as_str().and_then(|r| r.rsplit('/').next()) {
            match schemas.get(name) {
                Some(next) => current = next,
                None => return current,
            }
        } else if let Some([only]) = current["allOf"].as_array().map(Vec::as_slice) {
            current = only;
        } else {
            return current;
        }
    }
    current
}

struct Walk<'a> {
    schemas: &'a serde_json::Map<String, Value>,
    /// Whether `$`-prefixed keys are patch directives rather than fields.
    patch: bool,
    problems: Vec<String>,
}

impl Walk<'_> {
    fn node(&mut self, schema: &Value, node: &Node, path: &str) {
        let schema = resolve(schema, self.schemas);
        if schema["x-kubernetes-preserve-unknown-fields"] == true {
            return;
        }
        match node {
            Node::Object(entries) => {
                let properties = schema["properties"].as_object();
                let additional = &schema["additionalProperties"];
                let mut seen = HashSet::new();
                for (key, child) in entries {
                    if self.patch && key.starts_with('$') {
                        continue;
                    }
                    let here = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                    if properties.is_some() && !seen.insert(key.as_str()) {
                        self.problems.push(format!("duplicate field \"{here}\""));
                        continue;
                    }
                    match properties.and_then(|p| p.get(key)) {
                        Some(field) => self.node(field, child, &here),
                        None if additional.is_object() => self.node(additional, child, &here),
                        None if properties.is_some() && *additional != true => {
                            self.problems.push(format!("unknown field \"{here}\""));
                        }
                        None => {}
                    }
                }
            }
            Node::Array(items) => {
                if let Some(item) = schema.get("items") {
                    for (i, child) in items.iter().enumerate() {
                        self.node(item, child, &format!("{path}[{i}]"));
                    }
                }
            }
            Node::Scalar => {}
        }
    }
}

/// The problems of `body` against the kind `schema` (a schema of `schemas`), in the order the
/// real server lists them; `patch` skips patch directives. A body that is not JSON has none
/// here (the write itself refuses it).
pub(crate) fn problems(
    schemas: &serde_json::Map<String, Value>,
    schema: &Value,
    body: &[u8],
    patch: bool,
) -> Vec<String> {
    let Ok(node) = crate::model::shapes::from_slice::<Node>(body) else { return Vec::new() };
    let mut walk = Walk { schemas, patch, problems: Vec::new() };
    walk.node(schema, &node, "");
    walk.problems
}

/// The 400 of a `Strict` write with `problems`, as the real server words it.
pub(crate) fn strict_error(kind: &str, version: &str, problems: &[String]) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        problems.join(", ")
    ))
}

/// The `Warning` header value of one problem: `299 - "unknown field \"spec\""`.
pub(crate) fn warning(problem: &str) -> String {
    format!("299 - {}", Value::String(problem.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schemas() -> serde_json::Map<String, Value> {
        json!({
            "Meta": {"type": "object", "properties": {"name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "Thing": {"type": "object", "properties": {
                "metadata": {"allOf": [{"$ref": "#/components/schemas/Meta"}]},
                "data": {"type": "object", "additionalProperties": {"type": "string"}},
                "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }},
        })
        .as_object()
        .unwrap()
        .clone()
    }

    #[test]
    fn unknown_and_duplicate_fields_are_named_by_path_in_order() {
        let s = schemas();
        let body = br#"{"metadata":{"name":"a","bogus":1,"labels":{"x":"1"}},"data":{"a":"1"},
            "spec":{},"items":[{"name":"i"},{"nmae":"j"}],"free":{"any":{"thing":1}},"data":{}}"#;
        assert_eq!(
            problems(&s, &s["Thing"], body, false),
            [
                "unknown field \"metadata.bogus\"",
                "unknown field \"spec\"",
                "unknown field \"items[1].nmae\"",
                "duplicate field \"data\"",
            ]
        );
        let patch = br#"{"$setElementOrder/items":[],"items":[{"$patch":"delete","name":"i"}]}"#;
        assert!(problems(&s, &s["Thing"], patch, true).is_empty());
        assert!(problems(&s, &s["Thing"], b"{not json", false).is_empty());
    }

    #[test]
    fn messages_and_parameters_are_the_real_servers() {
        let e = strict_error("ConfigMap", "v1", &["unknown field \"spec\"".into()]);
        assert_eq!(
            e.message,
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"spec\""
        );
        assert_eq!(warning("unknown field \"spec\""), r#"299 - "unknown field \"spec\"""#);
        assert_eq!(Validation::parse(None, "CreateOptions").unwrap(), Validation::Warn);
        assert_eq!(Validation::parse(Some("Strict"), "CreateOptions").unwrap(), Validation::Strict);
        let e = Validation::parse(Some("bogus"), "CreateOptions").unwrap_err();
        assert_eq!(
            (e.code.as_u16(), e.message.as_str()),
            (
                422,
                r#"CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "bogus": supported values: "", "Ignore", "Strict", "Warn""#
            )
        );
    }
}
