//! JSON → a message: the inverse of `to_json`, for answers to clients that accept nothing but
//! protobuf. JSON fields the message lacks are dropped, as Go's decoder drops unknown fields.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use jiff::Timestamp;
use prost_reflect::prost::Message as _;
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, Value as Proto,
};
use serde_json::Value;

use crate::Error;
use crate::go;
use crate::schema::{
    CODEC, MAGIC, Special, UNKNOWN, message_for, raw_field, rule, special, unknown_type_meta,
};

/// The message `descriptor` describes, from its JSON.
pub(crate) fn to_message(
    value: &Value,
    descriptor: &MessageDescriptor,
) -> Result<DynamicMessage, String> {
    if let Some(form) = special(descriptor.full_name()) {
        return special_message(value, descriptor, form);
    }
    let mut message = DynamicMessage::new(descriptor.clone());
    let object = match value {
        Value::Object(object) => object,
        Value::Null => return Ok(message),
        other => return Err(format!("{}: an object, not {other}", descriptor.full_name())),
    };
    for field in descriptor.fields() {
        let rule = rule(field.full_name());
        if rule.is_some_and(|r| r.inline) {
            let inner = field.kind();
            let inner = inner.as_message().ok_or("an inline field that is not a message")?;
            message.set_field(&field, Proto::Message(to_message(value, inner)?));
            continue;
        }
        let name = rule.and_then(|r| r.json_name.as_deref()).unwrap_or(field.name());
        match object.get(name) {
            None | Some(Value::Null) => {}
            Some(json) => message.set_field(&field, field_value(&field, json)?),
        }
    }
    Ok(message)
}

fn field_value(field: &FieldDescriptor, json: &Value) -> Result<Proto, String> {
    let at = |e: String| format!("{}: {e}", field.full_name());
    if field.is_map() {
        let entries = json.as_object().ok_or_else(|| at(format!("a map, not {json}")))?;
        let kind = field.kind();
        let entry = kind.as_message().ok_or("a map field without an entry message")?;
        let value_kind = entry.map_entry_value_field().kind();
        let mut out = std::collections::HashMap::new();
        for (key, value) in entries {
            out.insert(MapKey::String(key.clone()), scalar(&value_kind, value).map_err(at)?);
        }
        return Ok(Proto::Map(out));
    }
    if field.is_list() {
        let items = json.as_array().ok_or_else(|| at(format!("a list, not {json}")))?;
        let kind = field.kind();
        return items
            .iter()
            .map(|item| scalar(&kind, item))
            .collect::<Result<_, _>>()
            .map(Proto::List)
            .map_err(at);
    }
    scalar(&field.kind(), json).map_err(at)
}

fn scalar(kind: &Kind, json: &Value) -> Result<Proto, String> {
    let mismatch = || format!("{json} is not a {kind:?}");
    let int = || json.as_i64().ok_or_else(mismatch);
    Ok(match kind {
        Kind::Bool => Proto::Bool(json.as_bool().ok_or_else(mismatch)?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            Proto::I32(i32::try_from(int()?).map_err(|_| mismatch())?)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Proto::I64(int()?),
        Kind::Uint32 | Kind::Fixed32 => {
            Proto::U32(json.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(mismatch)?)
        }
        Kind::Uint64 | Kind::Fixed64 => Proto::U64(json.as_u64().ok_or_else(mismatch)?),
        Kind::Float => Proto::F32(json.as_f64().ok_or_else(mismatch)? as f32),
        Kind::Double => Proto::F64(json.as_f64().ok_or_else(mismatch)?),
        Kind::String => Proto::String(json.as_str().ok_or_else(mismatch)?.to_owned()),
        Kind::Bytes => {
            let text = json.as_str().ok_or_else(mismatch)?;
            Proto::Bytes(STANDARD.decode(text).map_err(|e| format!("base64: {e}"))?.into())
        }
        Kind::Enum(_) => Proto::EnumNumber(i32::try_from(int()?).map_err(|_| mismatch())?),
        Kind::Message(descriptor) => Proto::Message(to_message(json, descriptor)?),
    })
}

fn special_message(
    json: &Value,
    descriptor: &MessageDescriptor,
    form: Special,
) -> Result<DynamicMessage, String> {
    let mut message = DynamicMessage::new(descriptor.clone());
    let mismatch = || format!("{}: not {json}", descriptor.full_name());
    let mut set = |name: &str, value: Proto| message.set_field_by_name(name, value);
    match (form, json) {
        (_, Value::Null) => {}
        (Special::Time | Special::MicroTime, Value::String(text)) => {
            let at: Timestamp = text.parse().map_err(|e| format!("the time {text:?}: {e}"))?;
            set("seconds", Proto::I64(at.as_second()));
            if form == Special::MicroTime {
                set("nanos", Proto::I32(at.subsec_nanosecond()));
            }
        }
        (Special::Duration, Value::String(text)) => {
            set("duration", Proto::I64(go::parse_duration(text).ok_or_else(mismatch)?));
        }
        (Special::IntOrString, Value::Number(n)) => {
            let n = n.as_i64().and_then(|n| i32::try_from(n).ok()).ok_or_else(mismatch)?;
            set("type", Proto::I64(0));
            set("intVal", Proto::I32(n));
        }
        (Special::IntOrString, Value::String(s)) => {
            set("type", Proto::I64(1));
            set("strVal", Proto::String(s.clone()));
        }
        (Special::Quantity, Value::String(s)) => set("string", Proto::String(s.clone())),
        (Special::Quantity, Value::Number(n)) => set("string", Proto::String(n.to_string())),
        (Special::RawJson, json) => {
            let field = raw_field(descriptor).ok_or("a raw message without raw")?;
            message.set_field(&field, Proto::Bytes(json.to_string().into_bytes().into()));
        }
        (Special::SchemaOrArray, Value::Array(items)) => {
            let field = descriptor.get_field_by_name("jSONSchemas").ok_or_else(mismatch)?;
            set("jSONSchemas", field_value(&field, &Value::Array(items.clone()))?);
        }
        (Special::SchemaOrStringArray, Value::Array(items)) => {
            let field = descriptor.get_field_by_name("property").ok_or_else(mismatch)?;
            set("property", field_value(&field, &Value::Array(items.clone()))?);
        }
        (Special::StringList, Value::Array(items)) => {
            let field = descriptor.get_field_by_name("items").ok_or_else(mismatch)?;
            set("items", field_value(&field, &Value::Array(items.clone()))?);
        }
        (Special::SchemaOrBool, Value::Bool(b)) => set("allows", Proto::Bool(*b)),
        (Special::SchemaOrArray | Special::SchemaOrStringArray | Special::SchemaOrBool, object)
            if object.is_object() =>
        {
            let field = descriptor.get_field_by_name("schema").ok_or_else(mismatch)?;
            set("schema", field_value(&field, object)?);
            if form == Special::SchemaOrBool {
                set("allows", Proto::Bool(true));
            }
        }
        _ => return Err(mismatch()),
    }
    Ok(message)
}

/// Encodes the JSON of an object of a built-in kind (its `apiVersion` and `kind` say which)
/// as a protobuf body (`k8s\0` + `runtime.Unknown`); see the module docs.
///
/// [`Error::UnknownKind`] when `apiVersion` and `kind` name no message here (a custom
/// resource; empty when missing), [`Error::Json`] when a field's JSON does not fit its
/// message.
pub fn from_json(value: &Value) -> Result<Vec<u8>, Error> {
    let text = |name: &str| value.get(name).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let Some(descriptor) = message_for(api_version, kind) else {
        return Err(Error::UnknownKind { api_version: api_version.into(), kind: kind.into() });
    };
    let message = to_message(value, &descriptor).map_err(Error::Json)?;
    Ok(envelope(api_version, kind, message.encode_to_vec()))
}

/// `k8s\0` + a `runtime.Unknown` holding `raw` as an `apiVersion` `kind`.
pub(super) fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = CODEC.pool.get_message_by_name(UNKNOWN).expect("runtime.Unknown is vendored");
    let mut type_meta = DynamicMessage::new(unknown_type_meta());
    type_meta.set_field_by_name("apiVersion", prost_reflect::Value::String(api_version.to_owned()));
    type_meta.set_field_by_name("kind", prost_reflect::Value::String(kind.to_owned()));
    let mut envelope = DynamicMessage::new(unknown);
    envelope.set_field_by_name("typeMeta", prost_reflect::Value::Message(type_meta));
    envelope.set_field_by_name("raw", prost_reflect::Value::Bytes(raw.into()));
    let mut out = MAGIC.to_vec();
    envelope.encode(&mut out).expect("a Vec grows as needed");
    out
}
