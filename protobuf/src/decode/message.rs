//! A message as a serde map, a repeated field as a seq, a protobuf map as a map, a scalar as
//! itself: the deserializers over the wire bytes (the `decode` module's docs state the
//! contract).

use std::cell::Cell;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::de::{self, DeserializeSeed, IntoDeserializer as _, Visitor};

use super::field_set::FieldSet;
use super::options::{DecodeOptions, check_depth, grow};
use super::special::{self, Resolved, embedded_json};
use super::table::{Cardinality, Field, Kind, TABLES, Table};
use crate::body::Envelope;
use crate::wire::{self, Payload};
use crate::{Error, schema};

/// A message's bytes, presented as the JSON object Go writes for it.
pub(crate) struct MessageDe<'de, 'o> {
    pub(crate) table: &'static Table,
    pub(crate) bytes: &'de [u8],
    /// The nesting of this object in the JSON (the top object is 1).
    pub(crate) depth: usize,
    pub(crate) options: &'o DecodeOptions,
    /// `apiVersion` and `kind` of an envelope, yielded as the first two keys.
    pub(crate) type_meta: Option<(&'de str, &'de str)>,
}

/// A whole body's object, at `depth`.
pub(crate) fn body_de<'de, 'o>(
    body: &'de [u8],
    depth: usize,
    options: &'o DecodeOptions,
) -> Result<MessageDe<'de, 'o>, Error> {
    message_de(&crate::body::envelope(body)?, depth, options)
}

pub(crate) fn message_de<'de, 'o>(
    envelope: &Envelope<'de>,
    depth: usize,
    options: &'o DecodeOptions,
) -> Result<MessageDe<'de, 'o>, Error> {
    let unknown = || Error::UnknownKind {
        api_version: envelope.api_version.to_owned(),
        kind: envelope.kind.to_owned(),
    };
    let descriptor =
        schema::message_for(envelope.api_version, envelope.kind).ok_or_else(unknown)?;
    let table = TABLES.get(descriptor.full_name()).ok_or_else(unknown)?;
    Ok(MessageDe {
        table,
        bytes: envelope.raw,
        depth,
        options,
        type_meta: Some((envelope.api_version, envelope.kind)),
    })
}

impl<'de, 'o> MessageDe<'de, 'o> {
    fn special(&self, form: schema::Special) -> Result<SpecialDe<'de, 'o>, Error> {
        if self.options.deny_unknown_fields {
            // Resolved from a few fields by number, so the others are checked apart.
            all_known(self.table, self.bytes)?;
        }
        let resolved = special::resolve(form, self.table, self.bytes)?;
        Ok(SpecialDe { resolved, depth: self.depth, options: self.options })
    }

    fn map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        check_depth(self.depth, self.options)?;
        let frame = Frame::new(self.table, self.bytes)?;
        let map = MessageMap {
            frame,
            outer: Vec::new(),
            depth: self.depth,
            options: self.options,
            type_meta: self.type_meta,
            meta_step: 0,
            pending: None,
            run_end: Cell::new(None),
        };
        grow(|| visitor.visit_map(map))
    }
}

impl<'de> de::Deserializer<'de> for MessageDe<'de, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.table.special {
            Some(form) => self.special(form)?.deserialize_any(visitor),
            None => self.map(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.table.special {
            Some(form) => self.special(form)?.deserialize_option(visitor),
            None => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.table.special {
            Some(form) => self.special(form)?.deserialize_newtype_struct(_name, visitor),
            None => visitor.visit_newtype_struct(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.table.special {
            Some(form) => self.special(form)?.deserialize_enum(name, variants, visitor),
            None => self.map(visitor),
        }
    }

    forward_the_rest!();
}

/// One message being read: the bytes, where the next field starts, and which repeated fields
/// come in more than one run (and are read whole at their first).
struct Frame<'de> {
    table: &'static Table,
    bytes: &'de [u8],
    pos: usize,
    /// The fields that occur in more than one run of consecutive fields.
    multi: FieldSet,
    /// The fields read whole already; their later occurrences are skipped.
    done: FieldSet,
}

impl<'de> Frame<'de> {
    fn new(table: &'static Table, bytes: &'de [u8]) -> Result<Self, Error> {
        Ok(Frame { table, bytes, pos: 0, multi: runs(table, bytes)?, done: FieldSet::default() })
    }
}

/// The fields that occur in more than one run; also checks that the message's fields are
/// whole. Numbers from 64 up are counted only for the message's repeated fields, so a hostile
/// message of many unknown numbers costs no more than a few.
fn runs(table: &Table, bytes: &[u8]) -> Result<FieldSet, Error> {
    let (mut seen, mut multi) = (FieldSet::default(), FieldSet::default());
    let (mut last, mut pos) = (0u32, 0usize);
    while pos < bytes.len() {
        let (number, _) = wire::field(bytes, &mut pos).map_err(|e| malformed(table, e))?;
        let counted = number < 64
            || table.field(number).is_some_and(|f| f.cardinality != Cardinality::Single);
        if number != last && counted && !seen.insert(number) {
            multi.insert(number);
        }
        last = number;
    }
    Ok(multi)
}

/// [`Error::UnknownField`] for the first field of `bytes` that `table` lacks, but those
/// Kubernetes removed ([`REMOVED`]).
fn all_known(table: &Table, bytes: &[u8]) -> Result<(), Error> {
    let mut pos = 0;
    while pos < bytes.len() {
        let (number, _) = wire::field(bytes, &mut pos).map_err(|e| malformed(table, e))?;
        if table.field(number).is_none() && !removed(table, number) {
            return Err(unknown_field(table, number));
        }
    }
    Ok(())
}

/// Fields Kubernetes removed from its types after v1.20 that older servers still write, even
/// empty (`ObjectMeta.clusterName`, `""` on every object of v1.20.2): unknown to the tables,
/// yet no newer server's field, and absent from k8s-openapi's types too, so a JSON read drops
/// them as well. Skipped even when unknown fields are denied. Any other unknown field, empty
/// or not, may be a newer server's (a pointer set to its zero is still a value).
const REMOVED: &[(&str, u32)] = &[("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta", 15)];

/// Whether field `number` of `table` is one Kubernetes removed ([`REMOVED`]).
fn removed(table: &Table, number: u32) -> bool {
    REMOVED.iter().any(|(message, n)| *n == number && table.full_name == *message)
}

fn unknown_field(table: &Table, number: u32) -> Error {
    Error::UnknownField { message: table.full_name.clone(), number }
}

fn malformed(table: &Table, why: impl std::fmt::Display) -> Error {
    Error::malformed(table.full_name.clone(), why)
}

fn malformed_field(field: &Field, why: impl std::fmt::Display) -> Error {
    Error::malformed(field.full_name.clone(), why)
}

/// The field whose key was yielded, waiting for its value.
struct Pending<'de> {
    field: &'static Field,
    payload: Payload<'de>,
    /// Where its first occurrence starts (its tag).
    start: usize,
    /// Whether it occurs in more than one run.
    multi: bool,
}

struct MessageMap<'de, 'o> {
    frame: Frame<'de>,
    /// The messages an inline field was met in, innermost last.
    outer: Vec<Frame<'de>>,
    depth: usize,
    options: &'o DecodeOptions,
    type_meta: Option<(&'de str, &'de str)>,
    /// 0: `apiVersion` next; 1: its value; 2: `kind`; 3: its value; 4: the fields.
    meta_step: u8,
    pending: Option<Pending<'de>>,
    /// Where a repeated field's run ended, when its seq read it to the end.
    run_end: Cell<Option<usize>>,
}

impl<'de> de::MapAccess<'de> for MessageMap<'de, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        if self.type_meta.is_some() && matches!(self.meta_step, 0 | 2) {
            // apiVersion, then kind: the envelope's, before the object's own fields.
            let key = if self.meta_step == 0 { "apiVersion" } else { "kind" };
            self.meta_step += 1;
            return seed.deserialize(de::value::BorrowedStrDeserializer::new(key)).map(Some);
        }
        loop {
            if self.frame.pos >= self.frame.bytes.len() {
                match self.outer.pop() {
                    Some(frame) => {
                        self.frame = frame;
                        continue;
                    }
                    None => return Ok(None),
                }
            }
            let frame = &mut self.frame;
            let start = frame.pos;
            let (number, payload) =
                wire::field(frame.bytes, &mut frame.pos).map_err(|e| malformed(frame.table, e))?;
            let Some(field) = frame.table.field(number) else {
                if self.options.deny_unknown_fields && !removed(frame.table, number) {
                    return Err(unknown_field(frame.table, number));
                }
                continue; // a field of a newer server: dropped, as the transcoder drops it
            };
            if frame.done.contains(number)
                || (field.managed_fields && self.options.skip_managed_fields)
            {
                continue;
            }
            check_wire_type(field, &payload)?;
            if field.inline
                && field.cardinality == Cardinality::Single
                && let (Kind::Message(index), Payload::Len(bytes)) = (field.kind, payload)
                && TABLES.list[index].special.is_none()
            {
                // Its fields are the parent's in JSON: read them next, then come back.
                let inner = Frame::new(&TABLES.list[index], bytes)?;
                let outer = std::mem::replace(&mut self.frame, inner);
                self.outer.push(outer);
                continue;
            }
            if (field.omitempty || field.omitzero)
                && field.cardinality == Cardinality::Single
                && is_zero(field, &payload)?
            {
                continue;
            }
            let multi = frame.multi.contains(number) && field.cardinality != Cardinality::Single;
            if multi {
                frame.done.insert(number);
            }
            self.pending = Some(Pending { field, payload, start, multi });
            let key: &'static str = &field.json;
            return seed.deserialize(de::value::BorrowedStrDeserializer::new(key)).map(Some);
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let Some(pending) = self.pending.take() else {
            if let Some((api_version, kind)) = self.type_meta
                && matches!(self.meta_step, 1 | 3)
            {
                let text = if self.meta_step == 1 { api_version } else { kind };
                self.meta_step += 1;
                return seed.deserialize(de::value::BorrowedStrDeserializer::new(text));
            }
            return Err(Error::Deserialize("a value asked for before its key".into()));
        };
        let field = pending.field;
        if field.cardinality == Cardinality::Single {
            return seed.deserialize(ValueDe {
                field,
                kind: field.kind,
                payload: Some(pending.payload),
                depth: self.depth + 1,
                options: self.options,
            });
        }
        self.run_end.set(None);
        let value = seed.deserialize(RepeatedDe {
            field,
            bytes: self.frame.bytes,
            start: pending.start,
            contiguous: !pending.multi,
            depth: self.depth + 1,
            options: self.options,
            run_end: &self.run_end,
        })?;
        self.frame.pos = match self.run_end.take() {
            Some(end) => end,
            None => skip_run(self.frame.bytes, pending.start, field)?,
        };
        Ok(value)
    }
}

/// Past the run of consecutive occurrences of `field` that starts at `start`.
fn skip_run(bytes: &[u8], start: usize, field: &Field) -> Result<usize, Error> {
    let mut pos = start;
    while pos < bytes.len() && wire::peek_number(bytes, pos) == Some(field.number) {
        wire::field(bytes, &mut pos).map_err(|e| malformed_field(field, e))?;
    }
    Ok(pos)
}

/// A wire type other than the kind's (or, for a repeated number, packed) is malformed, as
/// prost reads it.
fn check_wire_type(field: &Field, payload: &Payload<'_>) -> Result<(), Error> {
    let wire_type = payload.wire_type();
    let expected = match field.cardinality {
        Cardinality::Map(_) => 2,
        _ => field.kind.wire_type(),
    };
    let packed =
        field.cardinality == Cardinality::Repeated && field.kind.packable() && wire_type == 2;
    if wire_type != expected && !packed {
        return Err(malformed_field(field, format!("wire type {wire_type}, not {expected}")));
    }
    Ok(())
}

/// Whether a single value of an `omitempty` or `omitzero` field is left out of JSON: a
/// scalar when `""`, `0`, `false`; a message (a Go struct, which `omitempty` never omits)
/// only under `omitzero`, when Go's `IsZero` says so (a `Time`'s empty message).
fn is_zero(field: &Field, payload: &Payload<'_>) -> Result<bool, Error> {
    Ok(match (field.kind, payload) {
        (Kind::Message(index), Payload::Len(bytes)) => {
            let table = &TABLES.list[index];
            field.omitzero && special::is_go_zero(table, bytes)?
        }
        (Kind::Float, Payload::Fixed32(bits)) => f32::from_bits(*bits) == 0.0,
        (Kind::Double, Payload::Fixed64(bits)) => f64::from_bits(*bits) == 0.0,
        (_, Payload::Len(bytes)) => bytes.is_empty(),
        (_, Payload::Varint(v)) => {
            // An int32 is sign-extended on the wire: its low 32 bits are what Go reads.
            match field.kind {
                Kind::Int32 | Kind::Uint32 | Kind::Sint32 | Kind::Enum => *v as u32 == 0,
                _ => *v == 0,
            }
        }
        (_, Payload::Fixed32(v)) => *v == 0,
        (_, Payload::Fixed64(v)) => *v == 0,
    })
}

/// One value of a field: a scalar, or a message (`None`: absent from a map entry, the
/// kind's default).
pub(crate) struct ValueDe<'de, 'o> {
    pub(crate) field: &'static Field,
    pub(crate) kind: Kind,
    pub(crate) payload: Option<Payload<'de>>,
    pub(crate) depth: usize,
    pub(crate) options: &'o DecodeOptions,
}

impl<'de, 'o> ValueDe<'de, 'o> {
    fn message(&self, index: usize) -> Result<MessageDe<'de, 'o>, Error> {
        let bytes = match self.payload {
            Some(Payload::Len(bytes)) => bytes,
            None => &[],
            Some(_) => {
                return Err(malformed_field(self.field, "a message that is not length-delimited"));
            }
        };
        Ok(MessageDe {
            table: &TABLES.list[index],
            bytes,
            depth: self.depth,
            options: self.options,
            type_meta: None,
        })
    }

    fn text(&self) -> Result<&'de str, Error> {
        match self.payload {
            Some(Payload::Len(bytes)) => {
                std::str::from_utf8(bytes).map_err(|e| malformed_field(self.field, e))
            }
            None => Ok(""),
            Some(_) => Err(malformed_field(self.field, "a string that is not length-delimited")),
        }
    }
}

impl<'de> de::Deserializer<'de> for ValueDe<'de, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let number = || match self.payload {
            Some(Payload::Varint(v) | Payload::Fixed64(v)) => v,
            Some(Payload::Fixed32(v)) => u64::from(v),
            _ => 0,
        };
        match self.kind {
            Kind::Message(index) => self.message(index)?.deserialize_any(visitor),
            Kind::String => visitor.visit_borrowed_str(self.text()?),
            Kind::Bytes => {
                let bytes = match self.payload {
                    Some(Payload::Len(bytes)) => bytes,
                    _ => &[],
                };
                // Go writes []byte as standard base64 (a Secret's data).
                visitor.visit_string(STANDARD.encode(bytes))
            }
            Kind::Bool => visitor.visit_bool(number() != 0),
            Kind::Int32 | Kind::Enum => visitor.visit_i64(i64::from(number() as i32)),
            Kind::Int64 => visitor.visit_i64(number() as i64),
            Kind::Uint32 | Kind::Fixed32 => visitor.visit_u64(u64::from(number() as u32)),
            Kind::Uint64 | Kind::Fixed64 => visitor.visit_u64(number()),
            Kind::Sint32 | Kind::Sint64 => {
                let n = number();
                visitor.visit_i64((n >> 1) as i64 ^ -((n & 1) as i64))
            }
            Kind::Sfixed32 => visitor.visit_i64(i64::from(number() as u32 as i32)),
            Kind::Sfixed64 => visitor.visit_i64(number() as i64),
            Kind::Float | Kind::Double => {
                let n = match self.kind {
                    Kind::Float => f64::from(f32::from_bits(number() as u32)),
                    _ => f64::from_bits(number()),
                };
                if !n.is_finite() {
                    return Err(malformed_field(self.field, format!("the number {n}, not JSON")));
                }
                visitor.visit_f64(n)
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.kind {
            Kind::Message(index) => self.message(index)?.deserialize_option(visitor),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.kind {
            Kind::Message(index) => self.message(index)?.deserialize_newtype_struct(name, visitor),
            _ => visitor.visit_newtype_struct(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.kind {
            Kind::String => visitor.visit_enum(self.text()?.into_deserializer()),
            Kind::Message(index) => self.message(index)?.deserialize_enum(name, variants, visitor),
            _ => self.deserialize_any(visitor),
        }
    }

    forward_the_rest!();
}

/// Every occurrence of a repeated or map field, from its first: a seq, or a map of entries.
pub(crate) struct RepeatedDe<'de, 'a, 'o> {
    pub(crate) field: &'static Field,
    /// The bytes of the message holding the field.
    pub(crate) bytes: &'de [u8],
    pub(crate) start: usize,
    /// The field comes in one run: stop at the first other field.
    pub(crate) contiguous: bool,
    pub(crate) depth: usize,
    pub(crate) options: &'o DecodeOptions,
    /// Set to where the run ends when it is read to its end (contiguous runs only: a
    /// scan reads past other fields).
    pub(crate) run_end: &'a Cell<Option<usize>>,
}

impl<'de> de::Deserializer<'de> for RepeatedDe<'de, '_, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        check_depth(self.depth, self.options)?;
        let occurrences = Occurrences {
            field: self.field,
            bytes: self.bytes,
            pos: self.start,
            contiguous: self.contiguous,
            run_end: self.run_end,
            packed: None,
        };
        let (depth, options) = (self.depth, self.options);
        grow(|| match self.field.cardinality {
            Cardinality::Map(_) => {
                visitor.visit_map(Entries { occurrences, depth, options, value: None })
            }
            _ => visitor.visit_seq(Elements { occurrences, depth, options }),
        })
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    forward_the_rest!(enum);
}

/// The occurrences of one field in its message's bytes.
struct Occurrences<'de, 'a> {
    field: &'static Field,
    bytes: &'de [u8],
    pos: usize,
    contiguous: bool,
    run_end: &'a Cell<Option<usize>>,
    /// The rest of a packed occurrence's numbers.
    packed: Option<(&'de [u8], usize)>,
}

impl<'de> Occurrences<'de, '_> {
    /// The next value: a payload of the field's kind.
    fn next(&mut self) -> Result<Option<Payload<'de>>, Error> {
        loop {
            if let Some((bytes, pos)) = &mut self.packed {
                if *pos < bytes.len() {
                    return self.packed_value().map(Some);
                }
                self.packed = None;
            }
            if self.pos >= self.bytes.len() {
                if self.contiguous {
                    self.run_end.set(Some(self.pos));
                }
                return Ok(None);
            }
            let at = self.pos;
            let (number, payload) = wire::field(self.bytes, &mut self.pos)
                .map_err(|e| malformed_field(self.field, e))?;
            if number != self.field.number {
                if self.contiguous {
                    self.run_end.set(Some(at));
                    return Ok(None);
                }
                continue;
            }
            check_wire_type(self.field, &payload)?;
            match payload {
                // A map's entries are messages whatever its values' kind.
                Payload::Len(bytes)
                    if self.field.kind.packable()
                        && self.field.cardinality == Cardinality::Repeated =>
                {
                    self.packed = Some((bytes, 0))
                }
                payload => return Ok(Some(payload)),
            }
        }
    }

    fn packed_value(&mut self) -> Result<Payload<'de>, Error> {
        let (bytes, pos) = self.packed.as_mut().expect("called with a packed run");
        let field = self.field;
        let cut = |e| malformed_field(field, e);
        Ok(match field.kind.wire_type() {
            0 => Payload::Varint(wire::varint(bytes, pos).map_err(cut)?),
            1 => {
                let end = pos
                    .checked_add(8)
                    .filter(|e| *e <= bytes.len())
                    .ok_or_else(|| cut("a cut packed fixed64"))?;
                let value = u64::from_le_bytes(bytes[*pos..end].try_into().expect("8 bytes"));
                *pos = end;
                Payload::Fixed64(value)
            }
            _ => {
                let end = pos
                    .checked_add(4)
                    .filter(|e| *e <= bytes.len())
                    .ok_or_else(|| cut("a cut packed fixed32"))?;
                let value = u32::from_le_bytes(bytes[*pos..end].try_into().expect("4 bytes"));
                *pos = end;
                Payload::Fixed32(value)
            }
        })
    }
}

struct Elements<'de, 'a, 'o> {
    occurrences: Occurrences<'de, 'a>,
    depth: usize,
    options: &'o DecodeOptions,
}

impl<'de> de::SeqAccess<'de> for Elements<'de, '_, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some(payload) = self.occurrences.next()? else {
            return Ok(None);
        };
        let field = self.occurrences.field;
        seed.deserialize(ValueDe {
            field,
            kind: field.kind,
            payload: Some(payload),
            depth: self.depth + 1,
            options: self.options,
        })
        .map(Some)
    }
}

struct Entries<'de, 'a, 'o> {
    occurrences: Occurrences<'de, 'a>,
    depth: usize,
    options: &'o DecodeOptions,
    /// The value of the entry whose key was yielded.
    value: Option<Option<Payload<'de>>>,
}

impl<'de> de::MapAccess<'de> for Entries<'de, '_, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some(entry) = self.occurrences.next()? else {
            return Ok(None);
        };
        let field = self.occurrences.field;
        let Payload::Len(entry) = entry else {
            return Err(malformed_field(field, "a map entry that is not length-delimited"));
        };
        let [key, value] =
            wire::last_fields(entry, [1, 2]).map_err(|e| malformed_field(field, e))?;
        let key = match key {
            None => "",
            Some(Payload::Len(bytes)) => {
                std::str::from_utf8(bytes).map_err(|e| malformed_field(field, e))?
            }
            Some(_) => return Err(malformed_field(field, "a map key that is not a string")),
        };
        if let Some(value) = value
            && value.wire_type() != field.kind.wire_type()
        {
            return Err(malformed_field(field, "a map value of the wrong wire type"));
        }
        self.value = Some(value);
        seed.deserialize(de::value::BorrowedStrDeserializer::new(key)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let field = self.occurrences.field;
        let payload = self
            .value
            .take()
            .ok_or_else(|| Error::Deserialize("a map value asked for before its key".into()))?;
        seed.deserialize(ValueDe {
            field,
            kind: field.kind,
            payload,
            depth: self.depth + 1,
            options: self.options,
        })
    }
}

/// A special message's JSON form, at `depth`.
pub(crate) struct SpecialDe<'de, 'o> {
    resolved: Resolved<'de>,
    depth: usize,
    options: &'o DecodeOptions,
}

impl<'de, 'o> SpecialDe<'de, 'o> {
    fn message(&self, table: &'static Table, bytes: &'de [u8]) -> MessageDe<'de, 'o> {
        MessageDe { table, bytes, depth: self.depth, options: self.options, type_meta: None }
    }
}

impl<'de> de::Deserializer<'de> for SpecialDe<'de, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let (depth, options) = (self.depth, self.options);
        match self.resolved {
            Resolved::Null => visitor.visit_unit(),
            Resolved::String(s) => visitor.visit_string(s),
            Resolved::Str(s) => visitor.visit_borrowed_str(s),
            Resolved::Int(n) => visitor.visit_i64(n),
            Resolved::Bool(b) => visitor.visit_bool(b),
            Resolved::Json { bytes, at } => {
                embedded_json(bytes, at, depth, options, visitor, |de, v, deep| match deep {
                    true => {
                        de::Deserializer::deserialize_any(serde_stacker::Deserializer::new(de), v)
                    }
                    false => de::Deserializer::deserialize_any(de, v),
                })
            }
            Resolved::Object(body) => body_de(body, depth, options)?.deserialize_any(visitor),
            Resolved::Message { table, bytes } => {
                self.message(table, bytes).deserialize_any(visitor)
            }
            Resolved::Seq { table, number, bytes } => {
                let field = table.field(number).ok_or_else(|| malformed(table, "no list field"))?;
                let run_end = Cell::new(None);
                let (start, contiguous, run_end) = (0, false, &run_end);
                RepeatedDe { field, bytes, start, contiguous, depth, options, run_end }
                    .deserialize_any(visitor)
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let (depth, options) = (self.depth, self.options);
        match self.resolved {
            Resolved::Null => visitor.visit_none(),
            Resolved::Json { bytes, at } => {
                embedded_json(bytes, at, depth, options, visitor, |de, v, deep| match deep {
                    true => de::Deserializer::deserialize_option(
                        serde_stacker::Deserializer::new(de),
                        v,
                    ),
                    false => de::Deserializer::deserialize_option(de, v),
                })
            }
            Resolved::Object(body) => body_de(body, depth, options)?.deserialize_option(visitor),
            Resolved::Message { table, bytes } => {
                self.message(table, bytes).deserialize_option(visitor)
            }
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let (depth, options) = (self.depth, self.options);
        match self.resolved {
            Resolved::Str(s) => visitor.visit_enum(s.into_deserializer()),
            Resolved::String(s) => visitor.visit_enum(s.into_deserializer()),
            Resolved::Json { bytes, at } => {
                embedded_json(bytes, at, depth, options, visitor, |de, v, deep| match deep {
                    true => {
                        let de = serde_stacker::Deserializer::new(de);
                        de::Deserializer::deserialize_enum(de, name, variants, v)
                    }
                    false => de::Deserializer::deserialize_enum(de, name, variants, v),
                })
            }
            _ => self.deserialize_any(visitor),
        }
    }

    forward_the_rest!();
}
