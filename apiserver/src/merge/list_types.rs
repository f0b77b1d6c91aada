//! How an object's lists merge, under server-side apply and strategic merge patch, as
//! kube-apiserver merges them:
//! - a built-in kind's by the strategic-merge table of its Go types, read by field name
//!   (containers by `name`, container ports by `containerPort`, service ports by `port`,
//!   conditions by `type`, `finalizers` as a set, ...; other lists atomic);
//! - a custom resource's by its CRD's structural schema, at every depth (`status.conditions`
//!   included): `x-kubernetes-list-type: map` merges items keyed by the fields
//!   `x-kubernetes-list-map-keys` names, `set` merges scalars as a set, and `atomic`, or a list
//!   that declares no type or has no schema (under `x-kubernetes-preserve-unknown-fields`), is
//!   replaced whole. Its `metadata` is the built-in `ObjectMeta`.
//!
//! A JSON merge patch replaces every list whatever its type (RFC 7386), and a strategic merge
//! patch of a custom resource is refused (415), as on the real server; neither reads this.

use serde_json::Value;

/// How one list merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListType<'a> {
    /// Items are keyed by these fields (one or more) and merge item by item.
    Map(Vec<&'a str>),
    /// Scalars merged as a set.
    Set,
    /// Replaced whole.
    Atomic,
}

/// Where a value sits in its object, as far as merging its lists goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Node<'a> {
    /// In a built-in kind (or a custom resource's metadata): the field the value is held
    /// under, and whether it is within a container (container ports merge on
    /// `containerPort`, a service's on `port`).
    Builtin { field: &'a str, in_container: bool },
    /// In a custom resource: the value's structural schema, if it has one; `root` for the
    /// object itself, whose `metadata` is the built-in one.
    Schema { schema: Option<&'a Value>, root: bool },
}

impl<'a> Node<'a> {
    /// The root of a built-in kind's object.
    pub(crate) fn builtin() -> Self {
        Node::Builtin { field: "", in_container: false }
    }

    /// The root of a custom resource's object whose version's schema is `schema`.
    pub(crate) fn custom(schema: Option<&'a Value>) -> Self {
        Node::Schema { schema, root: true }
    }

    /// The value of this map's field `key`.
    pub(crate) fn child<'b>(self, key: &'b str) -> Node<'b>
    where
        'a: 'b,
    {
        match self {
            Node::Builtin { in_container, .. } => Node::Builtin { field: key, in_container },
            Node::Schema { root: true, .. } if key == "metadata" => {
                Node::Builtin { field: key, in_container: false }
            }
            Node::Schema { schema, .. } => {
                let child = schema.and_then(|s| {
                    s.get("properties")
                        .and_then(|p| p.get(key))
                        .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
                });
                Node::Schema { schema: child, root: false }
            }
        }
    }

    /// How this value merges, if it is a list.
    pub(crate) fn list_type(self) -> ListType<'a> {
        match self {
            Node::Builtin { field, in_container } => builtin_list_type(field, in_container),
            Node::Schema { schema: Some(schema), .. } => {
                match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
                    Some("map") => {
                        let keys: Vec<&str> = schema
                            .get("x-kubernetes-list-map-keys")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str)
                            .collect();
                        // A CRD is refused without keys for a map (crd_list_types); atomic if stored so.
                        if keys.is_empty() { ListType::Atomic } else { ListType::Map(keys) }
                    }
                    Some("set") => ListType::Set,
                    _ => ListType::Atomic,
                }
            }
            Node::Schema { schema: None, .. } => ListType::Atomic,
        }
    }

    /// An item of this list.
    pub(crate) fn item(self) -> Node<'a> {
        match self {
            Node::Builtin { field, in_container } => {
                Node::Builtin { field: "", in_container: in_container || is_container_list(field) }
            }
            Node::Schema { schema, .. } => Node::Schema {
                schema: schema.and_then(|s| s.get("items")).filter(|i| i.is_object()),
                root: false,
            },
        }
    }
}

/// The strategic-merge table of the built-in kinds' Go types, by field name.
fn builtin_list_type(field: &str, in_container: bool) -> ListType<'static> {
    let by = |key: &'static str| ListType::Map(vec![key]);
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets" => by("name"),
        "volumeMounts" => by("mountPath"),
        "volumeDevices" => by("devicePath"),
        "ports" if in_container => by("containerPort"),
        "ports" => by("port"),
        "conditions" => by("type"),
        "ownerReferences" => by("uid"),
        "hostAliases" => by("ip"),
        "finalizers" => ListType::Set,
        _ => ListType::Atomic,
    }
}

fn is_container_list(field: &str) -> bool {
    matches!(field, "containers" | "initContainers" | "ephemeralContainers")
}

/// Whether list items `a` and `b` have the same values for `keys` (and `a` has them all).
pub(crate) fn same_key(keys: &[&str], a: &Value, b: &Value) -> bool {
    keys.iter().all(|k| a.get(*k).is_some_and(|v| b.get(*k) == Some(v)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_schema_declares_each_lists_type_at_any_depth_and_metadata_is_built_in() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["port", "protocol"],
                    "items": {"type": "object", "properties": {
                        "hosts": {"type": "array", "x-kubernetes-list-type": "set"}}}},
                "tags": {"type": "array", "x-kubernetes-list-type": "atomic"},
                "plain": {"type": "array"},
                "free": {"type": "object", "additionalProperties": {
                    "type": "array", "x-kubernetes-list-type": "set"}},
            }},
            "status": {"type": "object", "properties": {"conditions": {"type": "array",
                "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}}},
        }});
        let root = Node::custom(Some(&schema));
        let spec = root.child("spec");
        assert_eq!(spec.child("ports").list_type(), ListType::Map(vec!["port", "protocol"]));
        assert_eq!(spec.child("ports").item().child("hosts").list_type(), ListType::Set);
        assert_eq!(spec.child("tags").list_type(), ListType::Atomic);
        assert_eq!(spec.child("plain").list_type(), ListType::Atomic, "undeclared");
        assert_eq!(spec.child("free").child("any").list_type(), ListType::Set);
        assert_eq!(spec.child("unknown").list_type(), ListType::Atomic, "no schema");
        let conditions = root.child("status").child("conditions");
        assert_eq!(conditions.list_type(), ListType::Map(vec!["type"]));
        assert_eq!(root.child("metadata").child("finalizers").list_type(), ListType::Set);
        assert_eq!(
            Node::custom(None).child("status").child("conditions").list_type(),
            ListType::Atomic
        );
        // Built-in kinds: by field name, container ports apart from a service's.
        let pod_spec = Node::builtin().child("spec");
        let ports = pod_spec.child("containers").item().child("ports");
        assert_eq!(ports.list_type(), ListType::Map(vec!["containerPort"]));
        assert_eq!(pod_spec.child("ports").list_type(), ListType::Map(vec!["port"]));
    }
}
