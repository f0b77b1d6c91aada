//! Removes `metadata.managedFields` from JSON text before it is decoded, so a list page's
//! objects never allocate them: they are about half of a real pod's JSON and of its decoded
//! size, and an informer that drops them anyway should not pay to build them.
//!
//! A single pass over the bytes, aware of strings and escapes: a member named
//! `managedFields` is removed, with one adjacent comma, when its object is the value of a
//! member named `metadata`. Anything else is copied unchanged. Text that is not well-formed
//! JSON is returned unchanged, for the decoder to report.

/// One open object or array, and the key it is the value of.
struct Frame {
    is_object: bool,
    under_metadata: bool,
    /// In an object: a key was read and its value has not started yet.
    after_key: bool,
}

/// `text` without `metadata.managedFields` members, or `None` if it has none (or is not
/// well-formed enough to edit safely).
pub(crate) fn strip_managed_fields(text: &str) -> Option<String> {
    const KEY: &[u8] = b"\"managedFields\"";
    if !text.contains("\"managedFields\"") {
        return None;
    }
    let bytes = text.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut stack: Vec<Frame> = Vec::new();
    let mut last_key_metadata = false;
    let mut skip_next_comma = false;
    let mut removed = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'"' => {
                let end = string_end(bytes, i)?;
                let in_object_key_position =
                    stack.last().is_some_and(|f| f.is_object && !f.after_key)
                        && next_non_ws(bytes, end) == Some(b':');
                if in_object_key_position {
                    let frame = stack.last_mut().expect("checked above");
                    if frame.under_metadata && &bytes[i..end] == KEY {
                        // Skip `"managedFields": value` and one comma.
                        let colon = next_non_ws_index(bytes, end)?;
                        let value_start = next_non_ws_index(bytes, colon + 1)?;
                        let value_end = value_end(bytes, value_start)?;
                        match out.iter().rposition(|c| !c.is_ascii_whitespace()) {
                            Some(p) if out[p] == b',' => out.truncate(p),
                            _ => skip_next_comma = true,
                        }
                        removed = true;
                        i = value_end;
                        continue;
                    }
                    last_key_metadata = &bytes[i..end] == b"\"metadata\"";
                    frame.after_key = true;
                } else {
                    // A string value ends the pending key.
                    if let Some(f) = stack.last_mut() {
                        f.after_key = false;
                    }
                    last_key_metadata = false;
                }
                out.extend_from_slice(&bytes[i..end]);
                i = end;
                continue;
            }
            b',' if skip_next_comma => {
                skip_next_comma = false;
                i += 1;
                continue;
            }
            b'{' | b'[' => {
                let under_metadata = b == b'{'
                    && stack.last().is_some_and(|f| f.is_object && f.after_key)
                    && last_key_metadata;
                if let Some(f) = stack.last_mut() {
                    f.after_key = false;
                }
                stack.push(Frame { is_object: b == b'{', under_metadata, after_key: false });
                last_key_metadata = false;
            }
            b'}' | b']' => {
                stack.pop()?;
                skip_next_comma = false;
            }
            b':' => {}
            c if c.is_ascii_whitespace() => {}
            _ => {
                // A scalar value (number, true, false, null) ends the pending key.
                if let Some(f) = stack.last_mut() {
                    f.after_key = false;
                }
                last_key_metadata = false;
            }
        }
        out.push(b);
        i += 1;
    }
    if !removed || !stack.is_empty() {
        return None;
    }
    String::from_utf8(out).ok()
}

/// The index just past the string starting at `start` (a quote).
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

fn next_non_ws_index(bytes: &[u8], from: usize) -> Option<usize> {
    (from..bytes.len()).find(|&i| !bytes[i].is_ascii_whitespace())
}

fn next_non_ws(bytes: &[u8], from: usize) -> Option<u8> {
    next_non_ws_index(bytes, from).map(|i| bytes[i])
}

/// The index just past the JSON value starting at `start`.
fn value_end(bytes: &[u8], start: usize) -> Option<usize> {
    match bytes[start] {
        b'"' => string_end(bytes, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            while i < bytes.len() {
                match bytes[i] {
                    b'"' => {
                        i = string_end(bytes, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => (start..bytes.len())
            .find(|&i| matches!(bytes[i], b',' | b'}' | b']') || bytes[i].is_ascii_whitespace()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn strip(v: &Value) -> Value {
        let text = v.to_string();
        match strip_managed_fields(&text) {
            Some(s) => serde_json::from_str(&s).expect("still JSON"),
            None => v.clone(),
        }
    }

    #[test]
    fn removes_metadata_managed_fields_in_any_position() {
        let mf =
            json!([{"manager": "kubectl", "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]);
        for meta in [
            json!({"managedFields": mf, "name": "a"}),
            json!({"name": "a", "managedFields": mf}),
            json!({"name": "a", "managedFields": mf, "uid": "u"}),
            json!({"managedFields": mf}),
        ] {
            let list = json!({"kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": [
                {"metadata": meta.clone(), "spec": {"x": 1}}, {"metadata": meta, "spec": {"x": 2}}
            ]});
            let out = strip(&list);
            for item in out["items"].as_array().unwrap() {
                assert!(item["metadata"].get("managedFields").is_none(), "{out}");
                assert!(item["spec"]["x"].is_number());
            }
            assert_eq!(out["metadata"]["resourceVersion"], "5");
        }
    }

    #[test]
    fn leaves_everything_else_alone() {
        let tricky = json!({"items": [{
            "metadata": {"name": "a", "annotations": {"managedFields": "not metadata's own", "q": "\"managedFields\":[1]"}},
            "spec": {"managedFields": [1, 2], "template": {"metadata": {"labels": {"a": "b"}}}},
            "data": "{\"metadata\": {\"managedFields\": []}}"
        }]});
        assert_eq!(strip(&tricky), tricky);
        assert!(
            strip_managed_fields("{\"metadata\": {\"managedFields\": [").is_none(),
            "truncated text is left alone"
        );
    }

    #[test]
    fn a_realistic_pod_decodes_the_same_without_managed_fields() {
        let pod = ctrlkit_apiserver::fixtures::realistic_pod("default", 3, true);
        let stripped: Value =
            serde_json::from_str(&strip_managed_fields(&pod.to_string()).unwrap()).unwrap();
        let mut expected = pod.clone();
        expected["metadata"].as_object_mut().unwrap().remove("managedFields");
        assert_eq!(stripped, expected);
    }

    /// The reference: walk the tree and drop `managedFields` from every object that is the
    /// value of a `metadata` member.
    fn reference(v: &Value, under_metadata: bool) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(k, _)| !(under_metadata && k.as_str() == "managedFields"))
                    .map(|(k, v)| (k.clone(), reference(v, k == "metadata")))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(|v| reference(v, false)).collect()),
            other => other.clone(),
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-1000i64..1000).prop_map(|n| json!(n)),
            prop::sample::select(vec!["", "managedFields", "\"metadata\":{", "a\\b", "x,y}"])
                .prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(
                    (
                        prop::sample::select(vec![
                            "metadata",
                            "managedFields",
                            "name",
                            "items",
                            "a\"b"
                        ]),
                        inner
                    ),
                    0..5
                )
                .prop_map(|members| Value::Object(
                    members.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                )),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn agrees_with_the_reference(v in json_value()) {
            let text = v.to_string();
            let out = match strip_managed_fields(&text) {
                Some(s) => serde_json::from_str::<Value>(&s).expect("still JSON"),
                None => v.clone(),
            };
            proptest::prop_assert_eq!(out, reference(&v, false));
        }
    }
}
