//! The strategy of core/v1 Secrets, as kube-apiserver v1.36.2 decodes and validates them (read
//! off it): `data` is a `map[string][]byte` and `stringData` a `map[string]string` in Go (a
//! write that makes either anything but an object is refused as its decoder refuses it: see
//! the `typed_fields` module); `stringData` is folded into `data` and an untyped Secret is
//! `Opaque`, as its decoder and defaulting store it; on update, `type` never changes, and a
//! Secret with `immutable: true` keeps its `data` and `stringData`, and stays immutable. Its
//! Table: `Name, Type, Data, Age`.

use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::model::status::{ApiError, ApiResult};
use crate::model::typed_fields::TypedField;
use crate::registry::Strategy;
use crate::registry::printers::{Column, age, count, named, row, text};

/// The rules of Secrets, registered for core/v1 `secrets` by the server.
pub(crate) struct SecretStrategy;

impl Strategy for SecretStrategy {
    fn typed_fields(&self, _: &ResourceType) -> Vec<TypedField> {
        vec![
            TypedField::map("Secret", "data", "map[string][]uint8"),
            TypedField::map("Secret", "stringData", "map[string]string"),
        ]
    }
    fn decode(&self, object: &mut Value) -> ApiResult<()> {
        fold_string_data(object);
        // The real server's defaulting: a Secret without a type is Opaque.
        if object["type"].as_str().is_none_or(str::is_empty) {
            object["type"] = json!("Opaque");
        }
        Ok(())
    }
    fn validate_update(&self, name: &str, old: &Value, new: &Value, _: bool) -> ApiResult<()> {
        validate_update(name, old, new)
    }
    fn columns(&self, _: &ResourceType) -> Vec<Column> {
        named(vec![text("Type"), text("Data"), text("Age")])
    }
    fn cells(&self, _: &ResourceType, secret: &Value, now: i64) -> Vec<Value> {
        let kind = secret["type"].as_str().unwrap_or("Opaque");
        row(secret, vec![json!(kind), json!(count(&secret["data"])), age(secret, now)])
    }
}

/// A Secret's `stringData` written into `data`, base64-encoded, as the real server stores
/// Secrets (a `stringData` key wins over the same key of `data`).
fn fold_string_data(secret: &mut Value) {
    use base64::Engine;
    let Some(Value::Object(strings)) = secret.as_object_mut().and_then(|s| s.remove("stringData"))
    else {
        return;
    };
    if !secret["data"].is_object() {
        secret["data"] = json!({});
    }
    for (key, value) in strings {
        let text = value.as_str().unwrap_or_default();
        secret["data"][key] = json!(base64::engine::general_purpose::STANDARD.encode(text));
    }
}

/// Checks an update of the Secret `old` to `new`.
fn validate_update(name: &str, old: &Value, new: &Value) -> ApiResult<()> {
    let kind_of = |v: &Value| v.get("type").and_then(Value::as_str).unwrap_or("Opaque").to_owned();
    if kind_of(new) != kind_of(old) {
        let message = format!("Invalid value: \"{}\": field is immutable", kind_of(new));
        return Err(ApiError::invalid("Secret", name, &format!("type: {message}")).with_cause(
            "FieldValueInvalid",
            &message,
            "type",
        ));
    }
    if old.get("immutable").and_then(Value::as_bool) == Some(true) {
        let forbidden = "Forbidden: field is immutable when `immutable` is set";
        let refuse = |field: &str| {
            Err(ApiError::invalid("Secret", name, &format!("{field}: {forbidden}")).with_cause(
                "FieldValueForbidden",
                forbidden,
                field,
            ))
        };
        let data = |v: &Value| v.get("data").cloned().filter(|d| !d.is_null());
        if data(new) != data(old) || new.get("stringData").is_some_and(|d| !d.is_null()) {
            return refuse("data");
        }
        if new.get("immutable").and_then(Value::as_bool) != Some(true) {
            return refuse("immutable");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_secret_keeps_its_type_and_an_immutable_one_its_data() {
        let opaque = json!({ "type": "Opaque", "data": { "a": "YQ==" } });
        let tls = json!({ "type": "kubernetes.io/tls", "data": { "a": "YQ==" } });
        let err = validate_update("s", &opaque, &tls).unwrap_err();
        assert_eq!(
            err.message,
            "Secret \"s\" is invalid: type: Invalid value: \"kubernetes.io/tls\": field is immutable"
        );
        assert!(validate_update("s", &json!({}), &json!({ "type": "Opaque" })).is_ok());
        let frozen = json!({ "immutable": true, "data": { "a": "YQ==" } });
        let changed = json!({ "immutable": true, "data": { "a": "Yg==" } });
        let err = validate_update("f", &frozen, &changed).unwrap_err();
        assert_eq!(
            err.message,
            "Secret \"f\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
        );
        let thawed = json!({ "immutable": false, "data": { "a": "YQ==" } });
        let err = validate_update("f", &frozen, &thawed).unwrap_err();
        assert!(err.message.contains("immutable: Forbidden"), "{}", err.message);
        let labelled = json!({ "immutable": true, "data": { "a": "YQ==" }, "metadata": { "labels": { "x": "y" } } });
        assert!(validate_update("f", &frozen, &labelled).is_ok(), "metadata may change");
    }
}
