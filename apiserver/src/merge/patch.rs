//! Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and Kubernetes' strategic
//! merge patch for the built-in kinds.
//!
//! Strategic merge, as implemented here: maps merge recursively; `null` deletes a key; lists
//! merge as the `list_types` module says (for a built-in kind: containers, env, volumes by
//! `name`, container ports by `containerPort`, conditions by `type`, `finalizers` as a set,
//! ...; other lists are replaced). Directives: `$patch: delete` on a list element removes the
//! element with its key, `$patch: replace` on a map or in a list replaces it whole,
//! `$patch: delete` on a map removes it, and `$deleteFromPrimitiveList/<field>` removes
//! values. `$setElementOrder/<field>` and `$retainKeys` are accepted and ignored (known gap:
//! merged lists keep the server's order, new elements appended). A custom resource takes no
//! strategic merge patch (415, as on the real server); a JSON merge patch replaces its lists,
//! whatever their CRD declares.

use serde_json::{Map, Value};

use crate::merge::list_types::{ListType, Node, same_key};
use crate::model::shapes::{self, Malformed};
use crate::model::status::{ApiError, ApiResult};

/// The patch types of the `Content-Type` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchType {
    pub(crate) fn from_content_type(content_type: &str) -> Option<Self> {
        match content_type.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Applies `patch` of type `kind` to `target`. A patch nested past the `shapes` module's limit,
/// or a JSON patch operation that would nest `target` past it, is refused (a 422, as the real
/// server refuses one past Go's); a merge leaves nothing deeper than its two sides.
pub(crate) fn apply(target: &mut Value, kind: PatchType, patch: &[u8]) -> ApiResult<()> {
    match kind {
        PatchType::Merge => {
            let patch: Value = parse(patch)?;
            json_patch::merge(target, &patch);
            Ok(())
        }
        PatchType::Json => {
            let ops: json_patch::Patch = shapes::from_slice(patch).map_err(|e| match e {
                Malformed::TooDeep => shapes::unprocessable_patch(),
                Malformed::Syntax(e) => ApiError::bad_request(format!(
                    "the body of the request was in an unknown format: {e}"
                )),
            })?;
            // One operation at a time, so that a `test` of a missing path against `null`
            // passes, as in the real server's JSON patch library (kube-runtime's finalizer
            // patches rely on it); every other operation as RFC 6902 says.
            for op in ops.0 {
                if let json_patch::PatchOperation::Test(test) = &op
                    && test.value.is_null()
                    && target.pointer(test.path.as_str()).is_none()
                {
                    continue;
                }
                // Refused before it is applied: a deeper result would have to be dropped.
                if deepens_past_the_limit(target, &op) {
                    return Err(shapes::unprocessable_patch());
                }
                json_patch::patch(target, &[op]).map_err(|e| {
                    ApiError::new(
                        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                        "Invalid",
                        format!(
                            "the server rejected our request due to an error in our request: {e}"
                        ),
                    )
                })?;
            }
            Ok(())
        }
        PatchType::Strategic => {
            let patch: Value = parse(patch)?;
            if !patch.is_object() {
                return Err(ApiError::bad_request("a strategic merge patch must be a JSON object"));
            }
            strategic_merge(target, &patch, Node::builtin());
            Ok(())
        }
        PatchType::Apply => Err(ApiError::new(
            axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            "server-side apply of this subresource is not supported by ctrlkit's embedded API server",
        )),
    }
}

/// Whether JSON patch operation `op` would leave `target` nested past the `shapes` module's
/// limit: the depth of its path plus that of the value it puts there.
fn deepens_past_the_limit(target: &Value, op: &json_patch::PatchOperation) -> bool {
    use json_patch::PatchOperation::{Add, Copy, Move, Replace};
    let (path, value) = match op {
        Add(add) => (&add.path, Some(&add.value)),
        Replace(replace) => (&replace.path, Some(&replace.value)),
        Copy(copy) => (&copy.path, target.pointer(copy.from.as_str())),
        Move(moved) => (&moved.path, target.pointer(moved.from.as_str())),
        _ => return false,
    };
    let segments = path.as_str().matches('/').count();
    value.is_some_and(|value| segments + shapes::depth_of(value) > shapes::MAX_DEPTH)
}

fn parse(body: &[u8]) -> ApiResult<Value> {
    shapes::from_slice(body).map_err(|e| match e {
        Malformed::TooDeep => shapes::unprocessable_patch(),
        Malformed::Syntax(e) => ApiError::bad_request(format!("error decoding patch: {e}")),
    })
}

/// A patch value with every `$` directive removed, for values that land where nothing was.
fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.iter().filter(|e| directive(e).is_none()).map(strip_directives).collect(),
        ),
        other => other.clone(),
    }
}

/// The `$patch` directive of a map, if any.
fn directive(v: &Value) -> Option<&str> {
    v.as_object()?.get("$patch")?.as_str()
}

/// Merges map `patch` into `target`, whose lists merge as `node` says (see the `list_types`
/// module).
pub(crate) fn strategic_merge(target: &mut Value, patch: &Value, node: Node<'_>) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if directive(&Value::Object(patch.clone())) == Some("replace") {
        *target = strip_directives(&Value::Object(patch.clone()));
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let target = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(remove)) =
                (target.get_mut(field), value.as_array())
            {
                list.retain(|e| !remove.contains(e));
            }
            continue;
        }
        if key.starts_with('$') {
            continue; // $patch handled above; $setElementOrder and $retainKeys ignored
        }
        match value {
            Value::Null => {
                target.remove(key);
            }
            Value::Object(_) if directive(value) == Some("delete") => {
                target.remove(key);
            }
            Value::Object(_) => {
                let slot = target.entry(key.clone()).or_insert(Value::Null);
                strategic_merge(slot, value, node.child(key));
            }
            Value::Array(items) => {
                let merged = merge_list(target.get(key), items, node.child(key));
                target.insert(key.clone(), merged);
            }
            scalar => {
                target.insert(key.clone(), scalar.clone());
            }
        }
    }
}

fn merge_list(current: Option<&Value>, items: &[Value], node: Node<'_>) -> Value {
    if items.iter().any(|e| directive(e) == Some("replace")) {
        return strip_directives(&Value::Array(items.to_vec()));
    }
    let mut list = match current {
        Some(Value::Array(list)) => list.clone(),
        _ => Vec::new(),
    };
    match node.list_type() {
        ListType::Atomic => return strip_directives(&Value::Array(items.to_vec())),
        ListType::Set => {
            for item in items {
                if !list.contains(item) {
                    list.push(item.clone());
                }
            }
        }
        ListType::Map(keys) => {
            for item in items {
                let existing = list.iter().position(|e| same_key(&keys, item, e));
                match (directive(item), existing) {
                    (Some("delete"), Some(i)) => {
                        list.remove(i);
                    }
                    (Some("delete"), None) => {}
                    (_, Some(i)) => strategic_merge(&mut list[i], item, node.item()),
                    (_, None) => list.push(strip_directives(item)),
                }
            }
        }
    }
    Value::Array(list)
}

/// The refusal of a strategic merge patch of a custom resource (which has no patch strategy),
/// as the real server words it.
pub(crate) fn strategic_refused() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(target: Value, patch: Value) -> Value {
        let mut t = target;
        apply(&mut t, PatchType::Strategic, patch.to_string().as_bytes()).unwrap();
        t
    }

    #[test]
    fn containers_and_env_merge_by_name() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
            {"name": "b", "image": "b:1"}
        ]}});
        let out = smp(
            pod,
            json!({"spec": {"containers": [
                {"name": "a", "env": [{"name": "Y", "value": "3"}, {"name": "Z", "value": "4"}]},
                {"name": "b", "$patch": "delete"},
                {"name": "c", "image": "c:1"}
            ]}}),
        );
        assert_eq!(
            out,
            json!({"spec": {"containers": [
                {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "3"}, {"name": "Z", "value": "4"}]},
                {"name": "c", "image": "c:1"}
            ]}})
        );
    }

    #[test]
    fn maps_merge_nulls_delete_and_directives_apply() {
        let obj = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]}, "spec": {"tolerations": [{"key": "k"}], "m": {"q": 1}}});
        let out = smp(
            obj,
            json!({
                "metadata": {"labels": {"b": null, "c": "3"}, "finalizers": ["y", "x"]},
                "spec": {"tolerations": [{"key": "j"}], "m": {"$patch": "delete"}}
            }),
        );
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"a": "1", "c": "3"}, "finalizers": ["x", "y"]}, "spec": {"tolerations": [{"key": "j"}]}})
        );
        let out = smp(
            out,
            json!({"$deleteFromPrimitiveList/finalizers": ["x"], "metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["y"]));
        let out = smp(out, json!({"metadata": {"labels": {"$patch": "replace", "z": "9"}}}));
        assert_eq!(out["metadata"]["labels"], json!({"z": "9"}));
    }

    #[test]
    fn container_ports_merge_on_container_port_and_service_ports_on_port() {
        let pod = json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80, "name": "http"}]}]}});
        let out = smp(
            pod,
            json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}]}]}}),
        );
        assert_eq!(
            out["spec"]["containers"][0]["ports"],
            json!([{"containerPort": 80, "name": "http", "protocol": "TCP"}, {"containerPort": 443}])
        );
        let svc = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}]}});
        let out = smp(svc, json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}));
        assert_eq!(out["spec"]["ports"], json!([{"port": 80, "targetPort": 9090}]));
    }

    #[test]
    fn merge_and_json_patches() {
        let mut v = json!({"a": {"b": 1, "c": 2}});
        apply(&mut v, PatchType::Merge, br#"{"a": {"b": null, "d": [1]}}"#).unwrap();
        assert_eq!(v, json!({"a": {"c": 2, "d": [1]}}));
        apply(&mut v, PatchType::Json, br#"[{"op": "add", "path": "/a/e", "value": 5}]"#).unwrap();
        assert_eq!(v["a"]["e"], 5);
        let err =
            apply(&mut v, PatchType::Json, br#"[{"op": "test", "path": "/a/e", "value": 6}]"#)
                .unwrap_err();
        assert_eq!(err.code.as_u16(), 422);
        assert_eq!(apply(&mut v, PatchType::Merge, b"{not json").unwrap_err().code.as_u16(), 400);
    }
}
