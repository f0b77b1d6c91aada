//! An apply's keyed lists checked before it merges, as structured-merge-diff types the patch
//! object on kube-apiserver: an item of a `map` list that has none of its key fields, or two
//! items of one apply with the same key, refuse the whole apply, with the real server's
//! answer (500, `failed to create typed patch object (<ns>/<name>; <group>/<version>,
//! Kind=<kind>): <path>: ...`, read off v1.36.2). An item with some of its keys is keyed by
//! those it has.

use axum::http::StatusCode;
use serde_json::Value;

use crate::merge::list_types::{ListType, Node};
use crate::model::status::{ApiError, ApiResult};

/// Refuses `applied` if a keyed list in it has an item without keys or two with one key.
pub(crate) fn check_keys(applied: &Value, root: Node<'_>) -> ApiResult<()> {
    let mut problem = None;
    walk(applied, root, &mut String::new(), &mut problem);
    let Some(problem) = problem else { return Ok(()) };
    // The patch body's own namespace and name, as the real server names it (no namespace
    // in the body: none in the message).
    let meta = |field: &str| applied["metadata"][field].as_str().unwrap_or_default();
    let api_version = applied["apiVersion"].as_str().unwrap_or_default();
    let group_version = match api_version.contains('/') {
        true => api_version.to_owned(),
        false => format!("/{api_version}"),
    };
    let kind = applied["kind"].as_str().unwrap_or_default();
    let (namespace, name) = (meta("namespace"), meta("name"));
    Err(ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "",
        format!(
            "failed to create typed patch object ({namespace}/{name}; {group_version}, Kind={kind}): {problem}"
        ),
    ))
}

/// Looks for the first problem under `v`, at `path` (SMD's: `.spec.items[type="x"].ports`).
fn walk(v: &Value, node: Node<'_>, path: &mut String, problem: &mut Option<String>) {
    if problem.is_some() {
        return;
    }
    match v {
        Value::Object(map) => {
            for (key, child) in map {
                let len = path.len();
                path.push('.');
                path.push_str(key);
                walk(child, node.child(key), path, problem);
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            let ListType::Map(keys) = node.list_type() else { return };
            let mut seen: Vec<String> = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let present: Vec<String> = keys
                    .iter()
                    .filter_map(|k| item.get(*k).map(|value| format!("{k}={value}")))
                    .collect();
                if present.is_empty() {
                    let keys = serde_json::to_string(&keys).unwrap_or_default();
                    *problem = Some(format!(
                        "{path}: element {i}: associative list with keys has an element that omits all key fields {keys} (and doesn't have default values for any key fields)"
                    ));
                    return;
                }
                let key = format!("[{}]", present.join(","));
                if seen.contains(&key) {
                    *problem = Some(format!("{path}: duplicate entries for key {key}"));
                    return;
                }
                let len = path.len();
                path.push_str(&key);
                walk(item, node.item(), path, problem);
                path.truncate(len);
                seen.push(key);
            }
        }
        _ => {}
    }
}
