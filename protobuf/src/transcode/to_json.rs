//! A decoded message → the JSON Go's `encoding/json` makes of the same object (module docs).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use prost_reflect::{DynamicMessage, FieldDescriptor, MapKey, ReflectMessage as _, Value as Proto};
use serde_json::{Map, Value};

use crate::Error;
use crate::go;
use crate::schema::{
    CODEC, MAGIC, Special, UNKNOWN, message_for, raw_field, rule, special, unknown_type_meta,
};

/// The JSON of a message.
pub(crate) fn to_value(message: &DynamicMessage) -> Result<Value, String> {
    let descriptor = message.descriptor();
    if let Some(form) = special(descriptor.full_name()) {
        return special_value(message, form);
    }
    let mut out = Map::new();
    for (field, value) in message.fields() {
        let json = field_value(&field, value)?;
        let rule = rule(field.full_name());
        // Go's omitempty never leaves out a struct (a message: `targetPort: 0`, a
        // RawExtension's `0`); omitzero leaves out a zero Time, which is `null` here.
        let message = field.kind().as_message().is_some();
        let omitted = rule.is_some_and(|r| {
            (r.omitempty && !message && is_zero(&json))
                || (r.omitzero && (is_zero(&json) || json.is_null()))
        });
        if omitted {
            continue;
        }
        match (rule.is_some_and(|r| r.inline), json) {
            (true, Value::Object(inner)) => out.extend(inner),
            (_, json) => {
                let name = rule.and_then(|r| r.json_name.clone());
                out.insert(name.unwrap_or_else(|| field.name().to_owned()), json);
            }
        }
    }
    Ok(Value::Object(out))
}

/// `""`, `0`, `false`: what `omitempty` leaves out.
fn is_zero(value: &Value) -> bool {
    match value {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

fn field_value(field: &FieldDescriptor, value: &Proto) -> Result<Value, String> {
    match value {
        Proto::List(items) => items.iter().map(scalar).collect::<Result<_, _>>().map(Value::Array),
        Proto::Map(entries) => {
            let mut out = Map::new();
            for (key, value) in entries {
                let key = match key {
                    MapKey::String(s) => s.clone(),
                    other => return Err(format!("{}: a map key {other:?}", field.full_name())),
                };
                out.insert(key, scalar(value)?);
            }
            Ok(Value::Object(out))
        }
        value => scalar(value),
    }
}

fn scalar(value: &Proto) -> Result<Value, String> {
    Ok(match value {
        Proto::Bool(b) => Value::Bool(*b),
        Proto::I32(n) => (*n).into(),
        Proto::I64(n) => (*n).into(),
        Proto::U32(n) => (*n).into(),
        Proto::U64(n) => (*n).into(),
        Proto::EnumNumber(n) => (*n).into(),
        Proto::F32(n) => float(f64::from(*n))?,
        Proto::F64(n) => float(*n)?,
        Proto::String(s) => Value::String(s.clone()),
        // Go writes []byte as standard base64 (a Secret's data).
        Proto::Bytes(b) => Value::String(STANDARD.encode(b)),
        Proto::Message(m) => to_value(m)?,
        Proto::List(_) | Proto::Map(_) => return Err("a list or map nested in a list".into()),
    })
}

fn float(n: f64) -> Result<Value, String> {
    serde_json::Number::from_f64(n).map(Value::Number).ok_or_else(|| format!("the number {n}"))
}

fn int(message: &DynamicMessage, name: &str) -> i64 {
    message.get_field_by_name(name).map_or(0, |v| match v.as_ref() {
        Proto::I64(n) => *n,
        Proto::I32(n) => i64::from(*n),
        _ => 0,
    })
}

fn text(message: &DynamicMessage, name: &str) -> Option<String> {
    message.get_field_by_name(name).and_then(|v| v.as_str().map(str::to_owned))
}

fn special_value(message: &DynamicMessage, form: Special) -> Result<Value, String> {
    let has = |name: &str| message.has_field_by_name(name);
    Ok(match form {
        // Go's zero time is marshalled as an empty message, and written as null in JSON.
        Special::Time | Special::MicroTime if !has("seconds") => Value::Null,
        Special::Time => Value::String(go::time(int(message, "seconds"))?),
        Special::MicroTime => {
            Value::String(go::micro_time(int(message, "seconds"), int(message, "nanos"))?)
        }
        Special::Duration => Value::String(go::duration(int(message, "duration"))),
        Special::IntOrString => match int(message, "type") {
            1 => Value::String(text(message, "strVal").unwrap_or_default()),
            _ => int(message, "intVal").into(),
        },
        Special::Quantity => Value::String(text(message, "string").unwrap_or_default()),
        Special::RawJson => {
            let field = raw_field(&message.descriptor()).ok_or("a raw message without raw")?;
            let raw = message.get_field(&field);
            let bytes = raw.as_bytes().map(|b| b.as_ref()).unwrap_or_default();
            if bytes.is_empty() {
                Value::Null
            } else if bytes.starts_with(MAGIC) {
                to_json(bytes).map_err(|e| format!("an embedded object: {e}"))?
            } else {
                serde_json::from_slice(bytes)
                    .map_err(|e| format!("{}: embedded JSON: {e}", message.descriptor().name()))?
            }
        }
        Special::SchemaOrArray => match message.get_field_by_name("jSONSchemas") {
            Some(list) if list.as_list().is_some_and(|l| !l.is_empty()) => {
                field_value(&field(message, "jSONSchemas")?, &list)?
            }
            _ => schema(message)?,
        },
        Special::StringList => match message.get_field_by_name("items") {
            Some(list) => field_value(&field(message, "items")?, &list)?,
            None => Value::Array(Vec::new()),
        },
        Special::SchemaOrBool if has("schema") => schema(message)?,
        Special::SchemaOrBool => Value::Bool(
            message.get_field_by_name("allows").and_then(|v| v.as_bool()).unwrap_or(false),
        ),
        Special::SchemaOrStringArray => match message.get_field_by_name("property") {
            Some(list) if list.as_list().is_some_and(|l| !l.is_empty()) => {
                field_value(&field(message, "property")?, &list)?
            }
            _ => schema(message)?,
        },
    })
}

fn field(message: &DynamicMessage, name: &str) -> Result<FieldDescriptor, String> {
    message.descriptor().get_field_by_name(name).ok_or_else(|| format!("no field {name}"))
}

fn schema(message: &DynamicMessage) -> Result<Value, String> {
    match message.get_field_by_name("schema") {
        Some(value) if message.has_field_by_name("schema") => scalar(&value),
        _ => Ok(Value::Null),
    }
}

/// Decodes a protobuf body (`k8s\0` + `runtime.Unknown`) into the JSON of its object, with
/// `apiVersion` and `kind` from the envelope (see the module docs).
pub fn to_json(body: &[u8]) -> Result<Value, Error> {
    let raw = body.strip_prefix(MAGIC).ok_or(Error::NotProtobuf)?;
    let unknown = CODEC.pool.get_message_by_name(UNKNOWN).expect("runtime.Unknown is vendored");
    let envelope =
        DynamicMessage::decode(unknown, raw).map_err(|e| Error::malformed("runtime.Unknown", e))?;
    let text = |m: &DynamicMessage, name: &str| {
        m.get_field_by_name(name).and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
    };
    let type_meta = envelope
        .get_field_by_name("typeMeta")
        .and_then(|v| v.as_message().cloned())
        .unwrap_or_else(|| DynamicMessage::new(unknown_type_meta()));
    let (api_version, kind) = (text(&type_meta, "apiVersion"), text(&type_meta, "kind"));
    let encoding = text(&envelope, "contentEncoding");
    if !encoding.is_empty() {
        return Err(Error::ContentEncoding(encoding));
    }
    let Some(descriptor) = message_for(&api_version, &kind) else {
        return Err(Error::UnknownKind { api_version, kind });
    };
    let object_bytes =
        envelope.get_field_by_name("raw").and_then(|v| v.as_bytes().cloned()).unwrap_or_default();
    let message = DynamicMessage::decode(descriptor, object_bytes)
        .map_err(|e| Error::malformed(format!("{api_version} {kind}"), e))?;
    let mut value = to_value(&message).map_err(|e| Error::malformed(kind.clone(), e))?;
    if let Value::Object(map) = &mut value {
        // The Go types carry apiVersion and kind only in JSON (TypeMeta has no protobuf tag).
        map.insert("apiVersion".into(), Value::String(api_version));
        map.insert("kind".into(), Value::String(kind));
    }
    Ok(value)
}
