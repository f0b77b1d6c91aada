//! The tables the deserializer reads by, built once from the descriptor pool and
//! `go-json.txt`: per message, its fields by number with their JSON names, kinds and Go JSON
//! rules, and its special form.

use std::collections::HashMap;
use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, FieldDescriptor, Kind as ProtoKind};

use crate::schema::{CODEC, Special, rule, special};

/// The protobuf type of a field's values (a map's values for a map).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Bool,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Fixed32,
    Fixed64,
    Sfixed32,
    Sfixed64,
    Float,
    Double,
    String,
    Bytes,
    Enum,
    /// A message, by its index in [`Tables::list`].
    Message(usize),
}

impl Kind {
    /// The wire type a single value of this kind is written with.
    pub(crate) fn wire_type(self) -> u8 {
        match self {
            Kind::Bool
            | Kind::Int32
            | Kind::Int64
            | Kind::Uint32
            | Kind::Uint64
            | Kind::Sint32
            | Kind::Sint64
            | Kind::Enum => 0,
            Kind::Fixed64 | Kind::Sfixed64 | Kind::Double => 1,
            Kind::String | Kind::Bytes | Kind::Message(_) => 2,
            Kind::Fixed32 | Kind::Sfixed32 | Kind::Float => 5,
        }
    }

    /// Whether a repeated field of this kind may be packed (numbers only).
    pub(crate) fn packable(self) -> bool {
        self.wire_type() != 2
    }
}

/// Single, repeated, or a protobuf `map<…>` (repeated entries, key 1 and value 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cardinality {
    Single,
    Repeated,
    /// A map; the key's kind (Kubernetes' maps all have string keys).
    Map(Kind),
}

/// One field of a message.
#[derive(Debug)]
pub(crate) struct Field {
    /// `package.Message.field`, for errors.
    pub(crate) full_name: String,
    /// The key in JSON (the proto name, or `json=` of `go-json.txt`).
    pub(crate) json: String,
    pub(crate) number: u32,
    pub(crate) kind: Kind,
    pub(crate) cardinality: Cardinality,
    /// A non-pointer Go field with `omitempty`: left out when `""`, `0` or `false` (scalars
    /// only: Go never omits a struct, a message here).
    pub(crate) omitempty: bool,
    /// A Go field with `omitzero`: left out when its Go value is zero.
    pub(crate) omitzero: bool,
    /// Flattened into the parent's JSON object.
    pub(crate) inline: bool,
    /// `ObjectMeta.managedFields`, which `DecodeOptions::skip_managed_fields` skips.
    pub(crate) managed_fields: bool,
}

/// One message: its fields by number, and its special form.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) full_name: String,
    pub(crate) special: Option<Special>,
    /// Indexed by field number (Kubernetes' numbers are small: at most 44 in v1.36.2).
    fields: Vec<Option<Field>>,
}

impl Table {
    /// The field of number `number`, if the message has it (a newer server's has not).
    #[inline]
    pub(crate) fn field(&self, number: u32) -> Option<&Field> {
        self.fields.get(number as usize).and_then(Option::as_ref)
    }
}

/// Every message's table.
pub(crate) struct Tables {
    pub(crate) list: Vec<Table>,
    by_name: HashMap<String, usize>,
}

impl Tables {
    /// The table of the message `full_name`.
    pub(crate) fn get(&self, full_name: &str) -> Option<&Table> {
        self.by_name.get(full_name).map(|i| &self.list[*i])
    }
}

/// Built on first use from the committed descriptor set.
pub(crate) static TABLES: LazyLock<Tables> = LazyLock::new(|| build(&CODEC.pool));

const MANAGED_FIELDS: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta.managedFields";

/// The tables of every message of `pool` (the committed set's, or a test's).
pub(crate) fn build(pool: &DescriptorPool) -> Tables {
    let messages: Vec<_> = pool.all_messages().collect();
    let by_name: HashMap<String, usize> =
        messages.iter().enumerate().map(|(i, m)| (m.full_name().to_owned(), i)).collect();
    let kind_of = |kind: &ProtoKind| match kind {
        ProtoKind::Bool => Kind::Bool,
        ProtoKind::Int32 => Kind::Int32,
        ProtoKind::Int64 => Kind::Int64,
        ProtoKind::Uint32 => Kind::Uint32,
        ProtoKind::Uint64 => Kind::Uint64,
        ProtoKind::Sint32 => Kind::Sint32,
        ProtoKind::Sint64 => Kind::Sint64,
        ProtoKind::Fixed32 => Kind::Fixed32,
        ProtoKind::Fixed64 => Kind::Fixed64,
        ProtoKind::Sfixed32 => Kind::Sfixed32,
        ProtoKind::Sfixed64 => Kind::Sfixed64,
        ProtoKind::Float => Kind::Float,
        ProtoKind::Double => Kind::Double,
        ProtoKind::String => Kind::String,
        ProtoKind::Bytes => Kind::Bytes,
        ProtoKind::Enum(_) => Kind::Enum,
        ProtoKind::Message(m) => Kind::Message(by_name[m.full_name()]),
    };
    let field_of = |field: FieldDescriptor| {
        let rule = rule(field.full_name());
        let (kind, cardinality) = if field.is_map() {
            let entry = field.kind();
            let entry = entry.as_message().expect("a map field's kind is its entry message");
            let key = kind_of(&entry.map_entry_key_field().kind());
            (kind_of(&entry.map_entry_value_field().kind()), Cardinality::Map(key))
        } else if field.is_list() {
            (kind_of(&field.kind()), Cardinality::Repeated)
        } else {
            (kind_of(&field.kind()), Cardinality::Single)
        };
        Field {
            full_name: field.full_name().to_owned(),
            json: rule.and_then(|r| r.json_name.clone()).unwrap_or_else(|| field.name().to_owned()),
            number: field.number(),
            kind,
            cardinality,
            omitempty: rule.is_some_and(|r| r.omitempty),
            omitzero: rule.is_some_and(|r| r.omitzero),
            inline: rule.is_some_and(|r| r.inline),
            managed_fields: field.full_name() == MANAGED_FIELDS,
        }
    };
    let list = messages
        .iter()
        .map(|message| {
            let mut fields: Vec<Option<Field>> = Vec::new();
            for field in message.fields() {
                let number = field.number() as usize;
                if fields.len() <= number {
                    fields.resize_with(number + 1, || None);
                }
                fields[number] = Some(field_of(field));
            }
            Table {
                full_name: message.full_name().to_owned(),
                special: special(message.full_name()),
                fields,
            }
        })
        .collect();
    Tables { list, by_name }
}
