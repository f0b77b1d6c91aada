//! The strategy of core/v1 ConfigMaps: `data` is a `map[string]string` and `binaryData` a
//! `map[string][]byte` in Go, so a write that makes either anything but an object is refused
//! as kube-apiserver's decoder refuses it (see the `typed_fields` module); one whose data is
//! over the real server's 1 MiB limit is refused with its 422. Its Table: `Name, Data, Age`.

use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::model::status::{ApiError, ApiResult};
use crate::model::typed_fields::TypedField;
use crate::registry::Strategy;
use crate::registry::printers::{Column, age, count, named, row, text};

/// The rules of ConfigMaps, registered for core/v1 `configmaps` by the server.
pub(crate) struct ConfigMapStrategy;

impl Strategy for ConfigMapStrategy {
    fn typed_fields(&self, _: &ResourceType) -> Vec<TypedField> {
        vec![
            TypedField::map("ConfigMap", "data", "map[string]string"),
            TypedField::map("ConfigMap", "binaryData", "map[string][]uint8"),
        ]
    }
    fn decode(&self, object: &mut Value) -> ApiResult<()> {
        check_size(object)
    }
    fn columns(&self, _: &ResourceType) -> Vec<Column> {
        named(vec![text("Data"), text("Age")])
    }
    fn cells(&self, _: &ResourceType, map: &Value, now: i64) -> Vec<Value> {
        row(map, vec![json!(count(&map["data"]) + count(&map["binaryData"])), age(map, now)])
    }
}

/// The real server's 1 MiB limit on a ConfigMap's data (its values, and binaryData's).
fn check_size(value: &Value) -> ApiResult<()> {
    const MAX: usize = 1 << 20;
    let data = value["data"].as_object().into_iter().flatten();
    let text: usize = data.filter_map(|(_, v)| v.as_str()).map(str::len).sum();
    let binary = value["binaryData"].as_object().into_iter().flatten();
    // base64 in JSON: the decoded size, three bytes for every four characters.
    let bytes: usize = binary.filter_map(|(_, v)| v.as_str()).map(|v| v.len() / 4 * 3).sum();
    if text + bytes <= MAX {
        return Ok(());
    }
    let name = value["metadata"]["name"].as_str().unwrap_or_default();
    let why = format!("Too long: must have at most {MAX} bytes");
    Err(ApiError::invalid("ConfigMap", name, &format!("[]: {why}")).with_cause(
        "FieldValueTooLong",
        &why,
        "[]",
    ))
}
