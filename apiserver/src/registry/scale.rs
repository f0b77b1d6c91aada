//! The `/scale` subresource: an `autoscaling/v1` `Scale` view of an object's replicas, as the
//! real server gives Deployments, ReplicaSets and StatefulSets.
//!
//! A `Scale` carries the object's name, namespace, uid, resourceVersion and creation time,
//! `spec.replicas` (omitted when 0, as the real server's `omitempty`), `status.replicas` (0
//! while no controller wrote a status) and `status.selector`, the object's label selector in
//! its string form (`app=web,tier in (a,b)`). Writing a `Scale` (update or patch) changes the
//! object's `spec.replicas` and nothing else; a `Scale` whose resourceVersion is stale is a
//! conflict, as any update.

use serde_json::{Value, json};

use crate::merge::patch::{self, PatchType};
use crate::model::shapes::{self, Malformed};
use crate::model::status::{ApiError, ApiResult};

/// A `Scale` written whole: an object whose `metadata`, `spec` and `status` are objects.
pub(crate) fn written_scale(body: &[u8]) -> ApiResult<Value> {
    let scale: Value = shapes::from_slice(body).map_err(|e| match e {
        Malformed::TooDeep => shapes::too_deep_body("Scale", body),
        Malformed::Syntax(e) => ApiError::bad_request(format!("decoding the Scale: {e}")),
    })?;
    if !scale.is_object() {
        return Err(ApiError::bad_request("the body of the request must be a JSON object"));
    }
    match shapes::unmarshal_error(&scale, "Scale", "autoscaling/v1", true) {
        Some(error) => Err(shapes::cannot_be_handled("Scale", "autoscaling/v1", &error)),
        None => Ok(scale),
    }
}

/// `current` with `body`, a patch of type `kind`, applied: a `Scale` still.
pub(crate) fn patched_scale(current: &Value, kind: PatchType, body: &[u8]) -> ApiResult<Value> {
    let mut scale = current.clone();
    patch::apply(&mut scale, kind, body)?;
    if !scale.is_object() {
        return Err(shapes::unprocessable_patch());
    }
    match shapes::unmarshal_error(&scale, "Scale", "autoscaling/v1", true) {
        Some(error) => Err(shapes::invalid_patch(&scale, &error)),
        None => Ok(scale),
    }
}

/// The `Scale` of `object`.
pub(crate) fn scale_of(object: &Value) -> Value {
    let meta = &object["metadata"];
    let mut metadata = json!({});
    for field in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = meta.get(field) {
            metadata[field] = v.clone();
        }
    }
    let replicas = object["spec"]["replicas"].as_i64().unwrap_or(1);
    let mut spec = json!({});
    if replicas != 0 {
        spec["replicas"] = json!(replicas);
    }
    let mut status = json!({ "replicas": object["status"]["replicas"].as_i64().unwrap_or(0) });
    let selector = selector_string(&object["spec"]["selector"]);
    if !selector.is_empty() {
        status["selector"] = json!(selector);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    })
}

/// `replicas` from a written `Scale`: a non-negative integer, 0 when left out.
pub(crate) fn replicas_of(scale: &Value) -> Result<i64, String> {
    match scale["spec"].get("replicas") {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v.as_i64().filter(|n| (0..=i64::from(i32::MAX)).contains(n)).ok_or_else(|| {
            format!("spec.replicas: Invalid value: {v}: must be greater than or equal to 0")
        }),
    }
}

/// A label selector as apimachinery's `labels.Selector.String()` writes it: requirements
/// sorted by key, `k=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`.
pub(crate) fn selector_string(selector: &Value) -> String {
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector["matchLabels"].as_object() {
        for (k, v) in labels {
            requirements.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
        }
    }
    for expression in selector["matchExpressions"].as_array().into_iter().flatten() {
        let key = expression["key"].as_str().unwrap_or_default();
        let mut values: Vec<&str> = expression["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        let text = match expression["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        requirements.push((key.to_owned(), text));
    }
    requirements.sort();
    requirements.into_iter().map(|(_, text)| text).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_are_written_as_apimachinery_writes_them() {
        let selector = json!({
            "matchLabels": {"tier": "web", "app": "shop"},
            "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["b", "a"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ],
        });
        assert_eq!(selector_string(&selector), "app=shop,!canary,tier=web,zone in (a,b)");
    }

    #[test]
    fn replicas_must_be_a_non_negative_integer() {
        assert_eq!(replicas_of(&json!({"spec": {"replicas": 3}})), Ok(3));
        assert_eq!(replicas_of(&json!({"spec": {}})), Ok(0));
        assert!(replicas_of(&json!({"spec": {"replicas": -1}})).is_err());
        assert!(replicas_of(&json!({"spec": {"replicas": "3"}})).is_err());
    }
}
