//! The messages with a JSON form of their own (`schema::Special`), as the transcoder writes
//! them: resolved from the wire first, then handed to the visitor.

use serde::de::Visitor;

use super::options::{DecodeOptions, check_depth, grow};
use super::table::{Kind, TABLES, Table};
use crate::schema::{MAGIC, Special};
use crate::wire::{self, Payload};
use crate::{Error, go};

/// What a special message is in JSON.
pub(crate) enum Resolved<'de> {
    Null,
    String(String),
    Str(&'de str),
    Int(i64),
    Bool(bool),
    /// Embedded JSON text (`RawExtension`, `FieldsV1`, the CRD schema's `JSON`) of `at`.
    Json {
        bytes: &'de [u8],
        at: &'static Table,
    },
    /// An embedded object: a whole `k8s\0` body.
    Object(&'de [u8]),
    /// A message (a `JSONSchemaProps`).
    Message {
        table: &'static Table,
        bytes: &'de [u8],
    },
    /// Field `number` of `table`, repeated (`JSONSchemaPropsOrArray.jSONSchemas`,
    /// `…OrStringArray.property`), in the message's `bytes`.
    Seq {
        table: &'static Table,
        number: u32,
        bytes: &'de [u8],
    },
}

fn malformed(table: &Table, why: impl std::fmt::Display) -> Error {
    Error::malformed(table.full_name.clone(), why)
}

fn fields<'de, const N: usize>(
    table: &Table,
    bytes: &'de [u8],
    numbers: [u32; N],
) -> Result<[Option<Payload<'de>>; N], Error> {
    wire::last_fields(bytes, numbers).map_err(|e| malformed(table, e))
}

fn int(table: &Table, payload: Option<Payload<'_>>) -> Result<u64, Error> {
    match payload {
        None => Ok(0),
        Some(Payload::Varint(v)) => Ok(v),
        Some(_) => Err(malformed(table, "a number that is not a varint")),
    }
}

fn text<'de>(table: &Table, payload: Option<Payload<'de>>) -> Result<&'de str, Error> {
    match payload {
        None => Ok(""),
        Some(Payload::Len(bytes)) => std::str::from_utf8(bytes).map_err(|e| malformed(table, e)),
        Some(_) => Err(malformed(table, "a string that is not length-delimited")),
    }
}

fn len<'de>(table: &Table, payload: Payload<'de>) -> Result<&'de [u8], Error> {
    match payload {
        Payload::Len(bytes) => Ok(bytes),
        _ => Err(malformed(table, "a message or bytes that are not length-delimited")),
    }
}

/// Whether a repeated field of the message occurs.
fn has(table: &Table, bytes: &[u8], number: u32) -> Result<bool, Error> {
    let mut pos = 0;
    while pos < bytes.len() {
        let (n, _) = wire::field(bytes, &mut pos).map_err(|e| malformed(table, e))?;
        if n == number {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The schema (`JSONSchemaProps`) of field `number`, or `null`.
fn schema<'de>(
    table: &'static Table,
    payload: Option<Payload<'de>>,
    number: u32,
) -> Result<Resolved<'de>, Error> {
    let Some(payload) = payload else {
        return Ok(Resolved::Null);
    };
    let Some(Kind::Message(index)) = table.field(number).map(|f| f.kind) else {
        return Err(malformed(table, "no schema field"));
    };
    Ok(Resolved::Message { table: &TABLES.list[index], bytes: len(table, payload)? })
}

/// The JSON form of the special message `table` (of form `form`), from its bytes.
pub(crate) fn resolve<'de>(
    form: Special,
    table: &'static Table,
    bytes: &'de [u8],
) -> Result<Resolved<'de>, Error> {
    Ok(match form {
        Special::Time | Special::MicroTime => {
            let [seconds, nanos] = fields(table, bytes, [1, 2])?;
            match seconds {
                // Go's zero time is an empty message, written as null in JSON.
                None => Resolved::Null,
                Some(_) => {
                    let seconds = int(table, seconds)? as i64;
                    let text = if form == Special::Time {
                        go::time(seconds)
                    } else {
                        go::micro_time(seconds, i64::from(int(table, nanos)? as i32))
                    };
                    Resolved::String(text.map_err(|e| malformed(table, e))?)
                }
            }
        }
        Special::Duration => {
            let [nanos] = fields(table, bytes, [1])?;
            Resolved::String(go::duration(int(table, nanos)? as i64))
        }
        Special::IntOrString => {
            let [kind, int_val, str_val] = fields(table, bytes, [1, 2, 3])?;
            match int(table, kind)? as i64 {
                1 => Resolved::Str(text(table, str_val)?),
                _ => Resolved::Int(i64::from(int(table, int_val)? as i32)),
            }
        }
        Special::Quantity => {
            let [string] = fields(table, bytes, [1])?;
            Resolved::Str(text(table, string)?)
        }
        Special::RawJson => {
            let [raw] = fields(table, bytes, [1])?;
            let raw = match raw {
                None => &[][..],
                Some(payload) => len(table, payload)?,
            };
            if raw.is_empty() {
                Resolved::Null
            } else if raw.starts_with(MAGIC) {
                Resolved::Object(raw)
            } else {
                Resolved::Json { bytes: raw, at: table }
            }
        }
        Special::SchemaOrArray | Special::SchemaOrStringArray => {
            if has(table, bytes, 2)? {
                Resolved::Seq { table, number: 2, bytes }
            } else {
                let [one] = fields(table, bytes, [1])?;
                schema(table, one, 1)?
            }
        }
        Special::StringList => Resolved::Seq { table, number: 1, bytes },
        Special::SchemaOrBool => {
            let [allows, one] = fields(table, bytes, [1, 2])?;
            match one {
                Some(_) => schema(table, one, 2)?,
                None => Resolved::Bool(int(table, allows)? != 0),
            }
        }
    })
}

/// Whether a message is zero as Go's `omitzero` sees it. Only `Time` and `MicroTime` carry
/// it in the vendored types (their `IsZero`: the empty message, read as Go's zero time); a
/// test keeps every `omitzero` rule on a field of one of them or a scalar.
pub(crate) fn is_go_zero(table: &'static Table, bytes: &[u8]) -> Result<bool, Error> {
    Ok(match table.special {
        Some(form @ (Special::Time | Special::MicroTime)) => {
            matches!(resolve(form, table, bytes)?, Resolved::Null)
        }
        _ => false,
    })
}

/// The deepest nesting of arrays and objects in JSON `text` (strings skipped), without
/// recursion: how [`DecodeOptions::max_depth`](crate::DecodeOptions::max_depth) counts
/// embedded JSON, and how a JSON reader can count its objects the same way.
pub fn json_depth(text: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &byte in text {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Embedded JSON nested at most this deep is read within serde_json's own recursion limit.
const SHALLOW_JSON: usize = 100;

/// Forwards one deserialize call to serde_json over the embedded JSON of `at`, which starts
/// at `depth`: [`Error::TooDeep`] when it nests past the limit.
pub(crate) fn embedded_json<'de, V, F>(
    bytes: &'de [u8],
    at: &Table,
    depth: usize,
    options: &DecodeOptions,
    visitor: V,
    call: F,
) -> Result<V::Value, Error>
where
    V: Visitor<'de>,
    F: FnOnce(
        &mut serde_json::Deserializer<serde_json::de::SliceRead<'de>>,
        V,
        bool,
    ) -> Result<V::Value, serde_json::Error>,
{
    let nesting = json_depth(bytes);
    if nesting > 0 {
        check_depth(depth + nesting - 1, options)?;
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    // Past serde_json's own limit (128), which would refuse what max_depth allows, the stack
    // grows instead; shallower JSON (all but the rarest) is read plainly, which is faster.
    let deep = nesting > SHALLOW_JSON;
    if deep {
        de.disable_recursion_limit();
    }
    let value = grow(|| call(&mut de, visitor, deep))
        .map_err(|e| Error::malformed(at.full_name.clone(), format!("embedded JSON: {e}")))?;
    de.end().map_err(|e| Error::malformed(at.full_name.clone(), format!("embedded JSON: {e}")))?;
    Ok(value)
}
