//! A CRD's list-type declarations, checked as kube-apiserver checks them on create and update
//! (apiextensions' `ValidateCustomResourceDefinitionOpenAPISchema` and
//! `validateMapListKeysMapSet`), so that a CRD the embedded server serves is one a cluster
//! serves too: `x-kubernetes-list-type` is `atomic`, `set` or `map`; map keys only on a map;
//! a map's keys are scalar properties of its object items, each required or defaulted, not
//! nullable, none twice. The messages are the real server's (read off v1.36.2), under the
//! path it names them by (`spec.validation.openAPIV3Schema` where every version shares one
//! schema, as the v1 → internal conversion leaves it).

use serde_json::Value;

/// What is wrong with the list types `crd` declares, as the real server words it; empty if
/// nothing is.
pub(crate) fn list_type_errors(crd: &Value) -> Vec<String> {
    let versions: Vec<&Value> = crd["spec"]["versions"].as_array().into_iter().flatten().collect();
    let schemas: Vec<&Value> = versions.iter().map(|v| &v["schema"]["openAPIV3Schema"]).collect();
    let mut errors = Vec::new();
    if let Some(first) = schemas.first()
        && schemas.iter().all(|s| s == first)
    {
        walk(first, "spec.validation.openAPIV3Schema", &mut errors);
    } else {
        for (i, schema) in schemas.iter().enumerate() {
            walk(schema, &format!("spec.versions[{i}].schema.openAPIV3Schema"), &mut errors);
        }
    }
    // The same error twice is reported once, as Go's ErrorList aggregate does.
    let mut seen = std::collections::HashSet::new();
    errors.retain(|e| seen.insert(e.clone()));
    errors
}

/// Checks `schema` at `path` and every schema under it.
fn walk(schema: &Value, path: &str, errors: &mut Vec<String>) {
    if !schema.is_object() {
        return;
    }
    check(schema, path, errors);
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            walk(property, &format!("{path}.properties[{name}]"), errors);
        }
    }
    walk(&schema["items"], &format!("{path}.items"), errors);
    walk(&schema["additionalProperties"], &format!("{path}.additionalProperties"), errors);
}

/// Checks the list-type declarations of one schema.
fn check(schema: &Value, path: &str, errors: &mut Vec<String>) {
    let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
    let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if let Some(other) = list_type.filter(|t| !["atomic", "set", "map"].contains(t)) {
        errors.push(format!(
            "{path}.x-kubernetes-list-type: Unsupported value: \"{other}\": supported values: \"atomic\", \"set\", \"map\""
        ));
    }
    if !keys.is_empty() && list_type != Some("map") {
        errors.push(format!(
            "{path}.x-kubernetes-list-type: Required value: must be map if x-kubernetes-list-map-keys is non-empty"
        ));
    }
    if list_type != Some("map") {
        return;
    }
    let shown = serde_json::to_string(&keys).unwrap_or_default();
    if keys.is_empty() {
        errors.push(format!(
            "{path}.x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
        ));
    }
    let items = &schema["items"];
    if !items.is_object() {
        errors.push(format!(
            "{path}.items: Required value: must have a schema if x-kubernetes-list-type is map"
        ));
        return;
    }
    let item_type = items["type"].as_str().unwrap_or_default();
    if item_type != "object" {
        errors.push(format!(
            "{path}.items.type: Invalid value: \"{item_type}\": must be object if parent array's x-kubernetes-list-type is map"
        ));
    }
    for (i, key) in keys.iter().enumerate() {
        let Some(property) = items["properties"].get(*key) else {
            errors.push(format!(
                "{path}.x-kubernetes-list-map-keys: Invalid value: {shown}: entries must all be names of item properties"
            ));
            break;
        };
        let at = format!("{path}.items.properties[{key}]");
        if let Some(t) = property["type"].as_str().filter(|t| ["array", "object"].contains(t)) {
            errors.push(format!(
                "{at}.type: Invalid value: \"{t}\": must be a scalar type if parent array's x-kubernetes-list-type is map"
            ));
        }
        if keys[..i].contains(key) {
            errors.push(format!(
                "{path}.x-kubernetes-list-map-keys: Invalid value: {shown}: must not contain duplicate entries"
            ));
        }
        let required = items["required"].as_array().into_iter().flatten().any(|r| r == *key);
        if !required && property.get("default").is_none() {
            errors.push(format!(
                "{at}.default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property"
            ));
        }
        if property["nullable"] == Value::Bool(true) {
            errors.push(format!(
                "{at}.nullable: Forbidden: this property is in x-kubernetes-list-map-keys, so it must not be nullable"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd(conditions: Value) -> Value {
        json!({ "spec": { "versions": [{ "name": "v1", "schema": { "openAPIV3Schema": {
            "type": "object", "properties": { "status": { "type": "object",
                "properties": { "conditions": conditions } } },
        } } }] } })
    }

    const AT: &str = "spec.validation.openAPIV3Schema.properties[status].properties[conditions]";

    #[test]
    fn a_map_list_keyed_by_a_required_item_property_is_valid() {
        let keyed = crd(json!({ "type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
            "items": { "type": "object", "required": ["type"],
                "properties": { "type": { "type": "string" } } } }));
        assert_eq!(list_type_errors(&keyed), Vec::<String>::new());
        let defaulted = crd(json!({ "type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["port"],
            "items": { "type": "object",
                "properties": { "port": { "type": "integer", "default": 80 } } } }));
        assert_eq!(list_type_errors(&defaulted), Vec::<String>::new());
    }

    #[test]
    fn declarations_kube_apiserver_refuses_are_refused_in_its_words() {
        let unnamed = crd(json!({ "type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
            "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } }));
        assert_eq!(
            list_type_errors(&unnamed),
            [format!(
                "{AT}.x-kubernetes-list-map-keys: Invalid value: [\"type\"]: entries must all be names of item properties"
            )]
        );
        let optional = crd(json!({ "type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
            "items": { "type": "object", "properties": { "type": { "type": "string" } } } }));
        assert_eq!(
            list_type_errors(&optional),
            [format!(
                "{AT}.items.properties[type].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property"
            )]
        );
        let twice = crd(json!({ "type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type", "type"],
            "items": { "type": "object", "required": ["type"],
                "properties": { "type": { "type": "object" } } } }));
        assert_eq!(
            list_type_errors(&twice),
            [
                format!(
                    "{AT}.items.properties[type].type: Invalid value: \"object\": must be a scalar type if parent array's x-kubernetes-list-type is map"
                ),
                format!(
                    "{AT}.x-kubernetes-list-map-keys: Invalid value: [\"type\",\"type\"]: must not contain duplicate entries"
                ),
            ]
        );
        let keyless = crd(json!({ "type": "array", "x-kubernetes-list-type": "map",
            "items": { "type": "object" } }));
        assert_eq!(
            list_type_errors(&keyless),
            [format!(
                "{AT}.x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
            )]
        );
        let not_a_map = crd(json!({ "type": "array", "x-kubernetes-list-map-keys": ["type"],
            "items": { "type": "object", "required": ["type"],
                "properties": { "type": { "type": "string" } } } }));
        assert_eq!(
            list_type_errors(&not_a_map),
            [format!(
                "{AT}.x-kubernetes-list-type: Required value: must be map if x-kubernetes-list-map-keys is non-empty"
            )]
        );
        let bag = crd(json!({ "type": "array", "x-kubernetes-list-type": "bag",
            "items": { "type": "string" } }));
        assert_eq!(
            list_type_errors(&bag),
            [format!(
                "{AT}.x-kubernetes-list-type: Unsupported value: \"bag\": supported values: \"atomic\", \"set\", \"map\""
            )]
        );
    }
}
