//! Server-side apply (`PATCH` with `application/apply-patch+yaml`): field ownership in
//! `managedFields`, conflicts, `force`, removal of fields a manager stops applying.
//!
//! What users observe, as kube-apiserver 1.36 does it (each checked against it, and against
//! 1.20 where the two differ, by the shared protocol suite):
//! - `fieldManager` is required (422 otherwise); the body is YAML or JSON; an object that does
//!   not exist is created.
//! - The fields a manager applies are its own, recorded in `managedFields` as `FieldsV1`
//!   (`f:` fields, `k:` list items by merge key with their `.` marker, `v:` set members) with
//!   `operation: Apply`. A manager left owning nothing drops out.
//! - An applied empty map (`labels: {}`) is owned as a field of its own (`f:labels: {}`), as
//!   structured-merge-diff does in 1.36 (1.20 recorded nothing). Another applier that applies
//!   that map, empty or not, while the live object has none conflicts with its owner
//!   (`conflict with "bob": .metadata.labels`); where the live object has the map, the map's
//!   fields are compared, not the map.
//! - Applying a value different from the live one to a field another applier owns is a 409
//!   `Conflict` naming each manager and field (`conflict with "alice": .data.a`, `conflict
//!   with "bob" with subresource "status": .status.replicas` for what it applied through
//!   `/status`); `force=true`
//!   takes the fields over instead. The same value is shared ownership, no conflict.
//! - Fields a manager applied before and leaves out now are removed, unless another manager
//!   owns them; maps emptied that way go too.
//! - Lists merge as the `list_types` module says: a built-in kind's by its merge keys
//!   (containers by name, ports by port, ...: the strategic-merge table), a custom resource's
//!   by its CRD's schema (`x-kubernetes-list-type: map` by `x-kubernetes-list-map-keys`, at
//!   any depth, so that two managers each own their own `status.conditions` item; `set`);
//!   other lists are atomic, owned whole, and an apply of a different list where another
//!   manager owns it conflicts.
//! - A keyed list's item without any of its key fields, or two items of one apply with one
//!   key, refuse the apply as structured-merge-diff does (`apply_keys`).
//! - `dryRun=All` answers with the result and stores nothing; apply on `/status` applies the
//!   status alone, recorded in an entry of its own (`subresource: status`, as from 1.22), so a
//!   manager's applies to the object leave the status it applied alone.
//!
//! Simpler than structured-merge-diff, and so different from the real server:
//! - Ownership is tracked for appliers only. A create, update or non-apply patch neither
//!   records an `Update` manager nor takes fields from appliers, so it never causes a
//!   conflict, and an applier keeps owning a field another client changed since.
//! - A custom resource's maps are granular: `x-kubernetes-map-type: atomic` is not read.

use std::collections::BTreeSet;

use axum::http::StatusCode;
use serde_json::{Map, Value, json};

use crate::merge::apply_keys::check_keys;
use crate::merge::apply_order::order_lists;
use crate::merge::list_types::{ListType, Node};
use crate::merge::patch::strategic_merge;
use crate::model::status::{ApiError, ApiResult};

/// One field or item on the way from an object's root to a value: `f:name`, `k:{"name":"c"}`,
/// `v:"value"`, or `.` (the list item itself), as `FieldsV1` spells them.
type Path = Vec<String>;

/// What the options of an apply ask.
#[derive(Debug, Clone)]
pub(crate) struct ApplyOptions {
    pub(crate) manager: String,
    pub(crate) force: bool,
    pub(crate) dry_run: bool,
}

impl ApplyOptions {
    /// An apply's options from its query's `fieldManager`, `force` and `dryRun`; 422 without
    /// a manager, as the real server.
    pub(crate) fn new(field_manager: Option<&str>, force: bool, dry_run: bool) -> ApiResult<Self> {
        let manager = field_manager.filter(|m| !m.is_empty()).ok_or_else(|| {
            let mut e = ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            );
            e.causes = Box::new([json!({
                "reason": "FieldValueRequired",
                "message": "Required value: is required for apply patch",
                "field": "fieldManager",
            })]);
            e
        })?;
        Ok(Self { manager: manager.to_owned(), force, dry_run })
    }
}

/// Parses an apply body: YAML (JSON is YAML too).
pub(crate) fn parse_body(body: &[u8]) -> ApiResult<Value> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("an apply patch must be UTF-8 YAML or JSON"))?;
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(_) => serde_saphyr::from_str(text)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?,
    };
    if !value.is_object() {
        return Err(ApiError::bad_request("an apply patch must be an object"));
    }
    Ok(value)
}

/// Metadata fields a manager can own; the rest is the server's.
const OWNABLE_METADATA: [&str; 4] = ["labels", "annotations", "ownerReferences", "finalizers"];

/// The paths `applied` sets: its leaves, and the `.` of each keyed list item. `status`: the
/// status alone (an apply on `/status`); else everything but status when the kind has a
/// status subresource. `root`: how the kind's lists merge.
fn field_set(applied: &Value, status: bool, has_status: bool, root: Node<'_>) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    let Some(fields) = applied.as_object() else { return out };
    for (key, value) in fields {
        let wanted = match key.as_str() {
            "apiVersion" | "kind" => false,
            "status" => status || !has_status,
            "metadata" => !status,
            _ => !status,
        };
        if !wanted {
            continue;
        }
        let mut path = vec![format!("f:{key}")];
        let node = root.child(key);
        if key == "metadata" {
            for (field, v) in value.as_object().into_iter().flatten() {
                if OWNABLE_METADATA.contains(&field.as_str()) {
                    path.push(format!("f:{field}"));
                    collect(v, node.child(field), &mut path, &mut out);
                    path.pop();
                }
            }
        } else {
            collect(value, node, &mut path, &mut out);
        }
    }
    out
}

/// The paths `v`, at `path` and merging as `node` says, sets.
fn collect(v: &Value, node: Node<'_>, path: &mut Path, out: &mut BTreeSet<Path>) {
    match v {
        Value::Object(map) if map.is_empty() => {
            out.insert(path.clone());
        }
        Value::Object(map) => {
            for (key, child) in map {
                path.push(format!("f:{key}"));
                collect(child, node.child(key), path, out);
                path.pop();
            }
        }
        Value::Array(items) => match node.list_type() {
            ListType::Map(keys) => {
                for item in items {
                    let Some(key) = item_key(&keys, item) else { continue };
                    path.push(format!("k:{key}"));
                    path.push(".".to_owned());
                    out.insert(path.clone());
                    path.pop();
                    collect(item, node.item(), path, out);
                    path.pop();
                }
            }
            ListType::Set => {
                for item in items {
                    path.push(format!("v:{item}"));
                    out.insert(path.clone());
                    path.pop();
                }
            }
            ListType::Atomic => {
                out.insert(path.clone());
            }
        },
        _ => {
            out.insert(path.clone());
        }
    }
}

/// A keyed item's key as `FieldsV1` spells it, its fields sorted by name
/// (`{"port":80,"protocol":"TCP"}`), of the key fields `item` has; `None` if it has none (an
/// apply of such an item is refused: `apply_keys`).
fn item_key(keys: &[&str], item: &Value) -> Option<Value> {
    let key: Map<String, Value> = keys
        .iter()
        .filter_map(|field| Some(((*field).to_owned(), item.get(*field)?.clone())))
        .collect();
    (!key.is_empty()).then_some(Value::Object(key))
}

/// A path segment's prefix (`f:`, `k:`, `v:`) and the rest; `("", segment)` for `.` and for
/// anything else (`managedFields` written by clients can hold any keys).
fn split(segment: &str) -> (&str, &str) {
    match segment.get(..2) {
        Some(prefix @ ("f:" | "k:" | "v:")) => (prefix, &segment[2..]),
        _ => ("", segment),
    }
}

/// The value at `path` in `object`, if there is one.
fn value_at<'a>(object: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut current = object;
    for segment in path {
        current = match split(segment) {
            ("f:", field) => current.get(field)?,
            ("k:", key) => {
                let key: Map<String, Value> = serde_json::from_str(key).ok()?;
                current
                    .as_array()?
                    .iter()
                    .find(|item| key.iter().all(|(k, v)| item.get(k) == Some(v)))?
            }
            ("v:", value) => {
                let value: Value = serde_json::from_str(value).ok()?;
                current.as_array()?.iter().find(|item| **item == value)?
            }
            _ => current, // "." is the item itself
        };
    }
    Some(current)
}

/// Removes what `path` names from `object`, then maps left empty on the way.
fn remove_at(object: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else { return };
    let (last, parent) = if last == "." {
        match parent.split_last() {
            Some((item, list)) => (item, list),
            None => return,
        }
    } else {
        (last, parent)
    };
    let Some(container) = value_at_mut(object, parent) else { return };
    match split(last) {
        ("f:", field) => {
            if let Some(map) = container.as_object_mut() {
                map.remove(field);
            }
        }
        ("k:", key) => {
            let Ok(key) = serde_json::from_str::<Map<String, Value>>(key) else { return };
            if let Some(list) = container.as_array_mut() {
                list.retain(|item| !key.iter().all(|(k, v)| item.get(k) == Some(v)));
            }
        }
        ("v:", value) => {
            let Ok(value) = serde_json::from_str::<Value>(value) else { return };
            if let Some(list) = container.as_array_mut() {
                list.retain(|item| *item != value);
            }
        }
        _ => {}
    }
    // Maps emptied by the removal go too (not the object's top-level fields).
    if parent.len() > 1 && value_at(object, parent).is_some_and(is_empty_map) {
        remove_at(object, parent);
    }
}

fn is_empty_map(v: &Value) -> bool {
    v.as_object().is_some_and(Map::is_empty)
}

fn value_at_mut<'a>(object: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut current = object;
    for segment in path {
        current = match split(segment) {
            ("f:", field) => current.get_mut(field)?,
            ("k:", key) => {
                let key: Map<String, Value> = serde_json::from_str(key).ok()?;
                current
                    .as_array_mut()?
                    .iter_mut()
                    .find(|item| key.iter().all(|(k, v)| item.get(k) == Some(v)))?
            }
            _ => current,
        };
    }
    Some(current)
}

/// A path as the real server names fields in conflicts: `.spec.containers[name="c"].image`.
fn describe(path: &[String]) -> String {
    let mut out = String::new();
    for segment in path {
        match split(segment) {
            ("f:", field) => {
                out.push('.');
                out.push_str(field);
            }
            ("k:", key) => {
                let key: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
                let parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
            ("v:", value) => out.push_str(&format!("[={value}]")),
            _ => {}
        }
    }
    out
}

/// `FieldsV1` of a set of paths.
fn encode(set: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for segment in path {
            node = node
                .entry(segment.clone())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("built as objects");
        }
    }
    Value::Object(root)
}

/// The paths of a `FieldsV1` tree: every `{}` leaf and every `.` marker.
fn decode(fields: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
    let Some(map) = fields.as_object() else { return };
    if map.is_empty() && !path.is_empty() {
        out.insert(path.clone());
        return;
    }
    for (segment, child) in map {
        path.push(segment.clone());
        if segment == "." {
            out.insert(path.clone());
        } else {
            decode(child, path, out);
        }
        path.pop();
    }
}

/// One manager's recorded ownership.
struct Owner {
    entry: Value,
    fields: BTreeSet<Path>,
}

/// The managers of `object`, from its `managedFields`.
fn owners(object: &Value) -> Vec<Owner> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|entry| {
            let mut fields = BTreeSet::new();
            decode(&entry["fieldsV1"], &mut Vec::new(), &mut fields);
            Owner { entry: entry.clone(), fields }
        })
        .collect()
}

/// What an apply writes to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ApplyTo<'a> {
    /// The kind's storage version, recorded in `managedFields`.
    pub(crate) api_version: &'a str,
    /// Whether the apply is on `/status`.
    pub(crate) status: bool,
    /// Whether the kind has a status subresource.
    pub(crate) has_status: bool,
    /// How the kind's lists merge.
    pub(crate) root: Node<'a>,
}

/// Applies `applied` by `options.manager` to `live` (`None`: to be created), returning the
/// new object with its `managedFields`; 409 on conflicts unless forced.
pub(crate) fn apply(
    live: Option<&Value>,
    applied: &Value,
    options: &ApplyOptions,
    to: &ApplyTo<'_>,
    now: &str,
) -> ApiResult<Value> {
    let ApplyTo { api_version, status, has_status, root } = *to;
    check_keys(applied, root)?;
    let mut object = live.cloned().unwrap_or_else(|| json!({}));
    let mine_now = field_set(applied, status, has_status, root);
    let mut owners = owners(&object);
    // A manager's applies to the object and to `/status` are two entries, told apart by
    // `subresource`, as on the real server (from 1.22).
    let subresource = if status { json!("status") } else { Value::Null };
    let is_mine = |o: &Owner| {
        o.entry["manager"] == options.manager.as_str()
            && o.entry["operation"] == "Apply"
            && o.entry["subresource"] == subresource
    };
    let mine_before: BTreeSet<Path> =
        owners.iter().filter(|o| is_mine(o)).flat_map(|o| o.fields.iter().cloned()).collect();

    // Conflicts: a field another applier owns, applied with a different value.
    let mut conflicts: Vec<(usize, Path)> = Vec::new();
    for (i, owner) in owners.iter().enumerate().filter(|(_, o)| !is_mine(o)) {
        for path in mine_now.intersection(&owner.fields) {
            if path.last().is_some_and(|s| s == ".") {
                continue;
            }
            if value_at(&object, path) != value_at(applied, path) {
                conflicts.push((i, path.clone()));
            }
        }
        // A map the owner applied empty, applied with fields where the live object has none.
        for path in &owner.fields {
            let under = |p: &Path| p.len() > path.len() && p.starts_with(path);
            if path.last().is_some_and(|s| s != ".")
                && mine_now.iter().any(under)
                && value_at(&object, path).is_none()
            {
                conflicts.push((i, path.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !options.force {
        let named: Vec<(String, Path)> =
            conflicts.into_iter().map(|(i, path)| (named(&owners[i].entry), path)).collect();
        return Err(conflict_error(&named));
    }
    for (i, path) in &conflicts {
        owners[*i].fields.remove(path);
    }

    // Merge the applied fields in (maps merge, keyed lists by key, other lists whole), then
    // remove what this manager no longer applies and nobody else owns.
    let mut patch = applied.clone();
    if let Some(map) = patch.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
        if status {
            map.retain(|k, _| k == "status");
        } else if has_status {
            map.remove("status");
        }
    }
    strategic_merge(&mut object, &patch, root);
    order_lists(&mut object, live, &patch, root);
    let others: BTreeSet<&Path> =
        owners.iter().filter(|o| !is_mine(o)).flat_map(|o| o.fields.iter()).collect();
    // A map this manager applied empty stays while others own fields in it.
    let others_under =
        |p: &Path| others.iter().any(|o| o.len() > p.len() && o.starts_with(p.as_slice()));
    let mut dropped: Vec<&Path> = mine_before
        .difference(&mine_now)
        .filter(|p| !others.contains(p) && !others_under(p))
        .collect();
    // Deepest first, so that items go before the lists that hold them.
    dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for path in dropped {
        remove_at(&mut object, path);
    }

    // Record ownership: this manager's entry replaced, managers left owning nothing dropped.
    let mut entries: Vec<Value> = owners
        .into_iter()
        .filter(|o| !is_mine(o) && !o.fields.is_empty())
        .map(|mut o| {
            o.entry["fieldsV1"] = encode(&o.fields);
            o.entry
        })
        .collect();
    if !mine_now.is_empty() {
        let mut entry = json!({
            "manager": options.manager,
            "operation": "Apply",
            "apiVersion": api_version,
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": encode(&mine_now),
        });
        if status {
            entry["subresource"] = subresource;
        }
        entries.push(entry);
    }
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    object["metadata"]["managedFields"] = json!(entries);
    if object["metadata"]["name"].is_null() {
        object["metadata"]["name"] = applied["metadata"]["name"].clone();
    }
    Ok(object)
}

/// A managedFields entry's manager as the real server names it in a conflict: `"bob"`, or
/// `"bob" with subresource "status"` for what it applied through `/status`.
fn named(entry: &Value) -> String {
    let manager = json!(entry["manager"].as_str().unwrap_or_default());
    match entry["subresource"].as_str().filter(|s| !s.is_empty()) {
        Some(subresource) => format!("{manager} with subresource {}", json!(subresource)),
        None => manager.to_string(),
    }
}

/// The real server's 409 for apply conflicts, each with its owner as [`named`] names it.
fn conflict_error(conflicts: &[(String, Path)]) -> ApiError {
    let message = match conflicts {
        [(manager, path)] => {
            format!("Apply failed with 1 conflict: conflict with {manager}: {}", describe(path))
        }
        _ => {
            let mut text = format!("Apply failed with {} conflicts:", conflicts.len());
            for (manager, path) in conflicts {
                text.push_str(&format!(" conflict with {manager}: {}", describe(path)));
            }
            text
        }
    };
    let mut e = ApiError::new(StatusCode::CONFLICT, "Conflict", message);
    e.causes = conflicts
        .iter()
        .map(|(manager, path)| {
            json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with {manager}"),
                "field": describe(path),
            })
        })
        .collect::<Vec<_>>()
        .into_boxed_slice();
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(manager: &str, force: bool) -> ApplyOptions {
        ApplyOptions { manager: manager.into(), force, dry_run: false }
    }

    fn run(live: Option<&Value>, applied: Value, manager: &str, force: bool) -> ApiResult<Value> {
        let to =
            ApplyTo { api_version: "v1", status: false, has_status: false, root: Node::builtin() };
        apply(live, &applied, &options(manager, force), &to, "2026-11-30T00:00:00Z")
    }

    #[test]
    fn owners_conflict_force_and_removal_as_the_real_server() {
        let alice = run(
            None,
            json!({"metadata": {"name": "cm", "labels": {"x": "1"}}, "data": {"a": "1", "b": "2"}}),
            "alice",
            false,
        )
        .unwrap();
        assert_eq!(
            alice["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:x": {}}}})
        );
        let refused = run(
            Some(&alice),
            json!({"metadata": {"name": "cm"}, "data": {"a": "2"}}),
            "bob",
            false,
        );
        let e = refused.unwrap_err();
        assert_eq!(e.code, StatusCode::CONFLICT);
        assert_eq!(e.message, "Apply failed with 1 conflict: conflict with \"alice\": .data.a");
        let same = run(
            Some(&alice),
            json!({"metadata": {"name": "cm"}, "data": {"a": "1"}}),
            "bob",
            false,
        );
        assert!(same.is_ok(), "the same value is shared ownership");
        let bob =
            run(Some(&alice), json!({"metadata": {"name": "cm"}, "data": {"a": "2"}}), "bob", true)
                .unwrap();
        assert_eq!(bob["data"], json!({"a": "2", "b": "2"}));
        let after = run(Some(&bob), json!({"metadata": {"name": "cm"}}), "alice", false).unwrap();
        assert_eq!(after["data"], json!({"a": "2"}), "b removed; a is bob's now");
        assert!(after["metadata"].get("labels").is_none(), "emptied labels go");
        let managers: Vec<&Value> = after["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["manager"])
            .collect();
        assert_eq!(managers, [&json!("bob")], "alice owns nothing any more");
    }

    /// The sequence run against kube-apiserver 1.36.2 by hand, answer for answer.
    #[test]
    fn an_applied_empty_map_is_owned_and_conflicts_where_the_live_object_has_none() {
        let labels = |l: Value| json!({"metadata": {"name": "cm", "labels": l}});
        let fields = |o: &Value, manager: &str| -> Value {
            let entries = o["metadata"]["managedFields"].as_array().unwrap();
            entries.iter().find(|e| e["manager"] == manager).unwrap()["fieldsV1"].clone()
        };
        let alice = run(None, labels(json!({"x": "1"})), "alice", false).unwrap();
        // An empty map where the live one has fields: no conflict, and carol owns the map.
        let carol = run(Some(&alice), labels(json!({})), "carol", false).unwrap();
        assert_eq!(fields(&carol, "carol"), json!({"f:metadata": {"f:labels": {}}}));
        assert_eq!(carol["metadata"]["labels"], json!({"x": "1"}));
        let dave = run(Some(&carol), labels(json!({"y": "1"})), "dave", false).unwrap();
        assert_eq!(dave["metadata"]["labels"], json!({"x": "1", "y": "1"}));
        // Those who own its fields leave: the map goes, carol still owns it.
        let gone = run(Some(&dave), json!({"metadata": {"name": "cm"}}), "alice", false).unwrap();
        let gone = run(Some(&gone), json!({"metadata": {"name": "cm"}}), "dave", false).unwrap();
        assert!(gone["metadata"].get("labels").is_none(), "{gone}");
        assert_eq!(fields(&gone, "carol"), json!({"f:metadata": {"f:labels": {}}}));
        // Now applying the map, empty or not, conflicts with carol.
        for applied in [json!({}), json!({"z": "1"})] {
            let e = run(Some(&gone), labels(applied), "erin", false).unwrap_err();
            assert_eq!(
                e.message,
                "Apply failed with 1 conflict: conflict with \"carol\": .metadata.labels"
            );
            assert_eq!(e.causes[0]["field"], ".metadata.labels");
        }
        // A map carol applied empty stays while another manager owns fields in it.
        let frank = run(Some(&carol), labels(json!({"f": "1"})), "frank", false).unwrap();
        let left = run(Some(&frank), json!({"metadata": {"name": "cm"}}), "carol", false).unwrap();
        assert_eq!(left["metadata"]["labels"], json!({"x": "1", "f": "1"}));
    }

    #[test]
    fn a_manager_is_required_and_yaml_or_json_is_read() {
        for none in [None, Some("")] {
            let e = ApplyOptions::new(none, false, false).unwrap_err();
            assert_eq!((e.code, &*e.reason), (StatusCode::UNPROCESSABLE_ENTITY, "Invalid"));
            assert!(e.message.contains("fieldManager: Required value"), "{}", e.message);
        }
        let options = ApplyOptions::new(Some("m"), true, true).unwrap();
        assert!(options.force && options.dry_run && options.manager == "m");
        let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {a: \"1\"}\n";
        assert_eq!(parse_body(yaml).unwrap()["data"]["a"], "1");
        assert_eq!(
            parse_body(br#"{"metadata": {"name": "cm"}}"#).unwrap()["metadata"]["name"],
            "cm"
        );
        assert!(parse_body(b"- a list").is_err());
    }

    #[test]
    fn managed_fields_written_by_clients_never_make_apply_panic() {
        let live = json!({
            "metadata": {"name": "cm", "managedFields": [
                {"manager": "x", "operation": "Apply", "fieldsV1": {"x": {}, ".": {}, "f:data": {"k:not json": {}, "v:": {}}}},
                {"manager": "y", "operation": "Apply", "fieldsV1": "not a map"},
                "not an entry",
            ]},
            "data": "not a map",
        });
        let applied = json!({"metadata": {"name": "cm"}, "data": {"a": "1"}});
        let _ = run(Some(&live), applied.clone(), "me", false);
        let _ = run(Some(&live), applied, "x", true);
    }

    #[test]
    fn containers_merge_by_name_and_conflicts_name_the_item() {
        let deploy = |image: &str| json!({"metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}});
        let a = run(None, deploy("nginx:1"), "a", false).unwrap();
        let fields = &a["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:template"]["f:spec"]
            ["f:containers"];
        assert_eq!(fields, &json!({"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}));
        let e = run(Some(&a), deploy("nginx:2"), "b", false).unwrap_err();
        assert_eq!(
            e.message,
            "Apply failed with 1 conflict: conflict with \"a\": .spec.template.spec.containers[name=\"c\"].image"
        );
    }
    #[test]
    fn a_conflict_with_a_status_apply_names_its_subresource() {
        let status = |replicas: i64, manager: &str, live: Option<&Value>| {
            let applied = json!({"metadata": {"name": "d"}, "status": {"replicas": replicas}});
            let to = ApplyTo {
                api_version: "apps/v1",
                status: true,
                has_status: true,
                root: Node::builtin(),
            };
            apply(live, &applied, &options(manager, false), &to, "t")
        };
        let a = status(1, "a", Some(&json!({"metadata": {"name": "d"}}))).unwrap();
        let e = status(2, "b", Some(&a)).unwrap_err();
        assert_eq!(
            e.message,
            "Apply failed with 1 conflict: conflict with \"a\" with subresource \"status\": .status.replicas"
        );
        assert_eq!(e.causes[0]["message"], "conflict with \"a\" with subresource \"status\"");
    }

    /// A custom resource's status, applied through `/status` as `manager`, its lists merging
    /// by `schema`.
    fn apply_status(
        live: Option<&Value>,
        conditions: Value,
        manager: &str,
        force: bool,
        schema: &Value,
    ) -> ApiResult<Value> {
        let to = ApplyTo {
            api_version: "example.com/v1",
            status: true,
            has_status: true,
            root: Node::custom(Some(schema)),
        };
        let applied = json!({"metadata": {"name": "w"}, "status": {"conditions": conditions}});
        apply(live, &applied, &options(manager, force), &to, "2026-11-30T00:00:00Z")
    }

    fn conditions_schema(declared: bool) -> Value {
        let mut conditions = json!({"type": "array", "items": {"type": "object"}});
        if declared {
            conditions["x-kubernetes-list-type"] = json!("map");
            conditions["x-kubernetes-list-map-keys"] = json!(["type"]);
        }
        json!({"type": "object", "properties": {"status": {"type": "object", "properties": {"conditions": conditions}}}})
    }

    fn condition(kind: &str, status: &str) -> Value {
        json!({"type": kind, "status": status})
    }

    #[test]
    fn a_custom_resources_conditions_merge_by_type_where_its_crd_declares_the_map() {
        let schema = conditions_schema(true);
        let live = json!({"metadata": {"name": "w"}});
        let a = apply_status(Some(&live), json!([condition("A", "True")]), "a", false, &schema)
            .unwrap();
        let b =
            apply_status(Some(&a), json!([condition("B", "False")]), "b", false, &schema).unwrap();
        assert_eq!(
            b["status"]["conditions"],
            json!([condition("A", "True"), condition("B", "False")])
        );
        let entry = |o: &Value, m: &str| {
            o["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["manager"] == m)
                .unwrap()["fieldsV1"]
                .clone()
        };
        assert_eq!(
            entry(&b, "b"),
            json!({"f:status": {"f:conditions": {"k:{\"type\":\"B\"}": {".": {}, "f:status": {}, "f:type": {}}}}})
        );
        // Each owns its item's fields: a changes its own freely, and b's is a conflict.
        let a2 =
            apply_status(Some(&b), json!([condition("A", "False")]), "a", false, &schema).unwrap();
        assert_eq!(a2["status"]["conditions"][0], condition("A", "False"));
        let e = apply_status(Some(&a2), json!([condition("B", "True")]), "a", false, &schema)
            .unwrap_err();
        assert_eq!(
            e.message,
            "Apply failed with 1 conflict: conflict with \"b\" with subresource \"status\": .status.conditions[type=\"B\"].status"
        );
        // An item its manager stops applying goes; the other's stays.
        let gone = apply_status(Some(&a2), json!([]), "a", false, &schema).unwrap();
        assert_eq!(gone["status"]["conditions"], json!([condition("B", "False")]));
    }

    #[test]
    fn a_custom_resources_undeclared_list_is_atomic_and_replaced_whole() {
        for schema in [
            conditions_schema(false),
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        ] {
            let live = json!({"metadata": {"name": "w"}});
            let a = apply_status(Some(&live), json!([condition("A", "True")]), "a", false, &schema)
                .unwrap();
            let e = apply_status(Some(&a), json!([condition("B", "False")]), "b", false, &schema)
                .unwrap_err();
            assert_eq!(
                e.message,
                "Apply failed with 1 conflict: conflict with \"a\" with subresource \"status\": .status.conditions"
            );
            let b = apply_status(Some(&a), json!([condition("B", "False")]), "b", true, &schema)
                .unwrap();
            assert_eq!(b["status"]["conditions"], json!([condition("B", "False")]), "{schema}");
            let managers: Vec<&Value> = b["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| &e["manager"])
                .collect();
            assert_eq!(managers, [&json!("b")], "a lost the list to b");
        }
    }

    #[test]
    fn sets_and_lists_keyed_by_several_fields_merge_as_their_schema_declares() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port", "protocol"]},
            "tags": {"type": "array", "x-kubernetes-list-type": "set"},
        }}}});
        let to = ApplyTo {
            api_version: "example.com/v1",
            status: false,
            has_status: true,
            root: Node::custom(Some(&schema)),
        };
        let run = |live: Option<&Value>, spec: Value, manager: &str| {
            apply(
                live,
                &json!({"metadata": {"name": "w"}, "spec": spec}),
                &options(manager, false),
                &to,
                "t",
            )
        };
        let a = run(
            None,
            json!({"ports": [{"port": 80, "protocol": "TCP", "name": "http"}], "tags": ["x"]}),
            "a",
        )
        .unwrap();
        assert_eq!(
            a["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"],
            json!({
                "f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}}},
                "f:tags": {"v:\"x\"": {}},
            })
        );
        let b = run(
            Some(&a),
            json!({"ports": [{"port": 80, "protocol": "UDP"}], "tags": ["y", "x"]}),
            "b",
        )
        .unwrap();
        assert_eq!(
            b["spec"]["ports"],
            json!([{"port": 80, "protocol": "TCP", "name": "http"}, {"port": 80, "protocol": "UDP"}])
        );
        assert_eq!(b["spec"]["tags"], json!(["y", "x"]), "the applied order, as SMD's");
        // a leaves: its port goes, the tag b shares stays.
        let left = run(Some(&b), json!({}), "a").unwrap();
        assert_eq!(
            left["spec"],
            json!({"ports": [{"port": 80, "protocol": "UDP"}], "tags": ["y", "x"]})
        );
    }
}
