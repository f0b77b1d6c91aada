//! The deserializer: a protobuf body read straight into any serde type, as if it were the
//! JSON the real server would answer for the same object.
//!
//! # Contract
//! - [`from_slice`]`::<T>(body, &options)` gives what
//!   `serde_json::from_value::<T>(`[`transcode::to_json`](crate::transcode::to_json)`(body)?)`
//!   gives (the tests check it kind by kind), without building a message or a JSON value: a
//!   message is a serde map, a repeated field a seq, a protobuf `map<…>` a map, and the keys
//!   are the JSON names, borrowed from tables built once from the descriptors.
//! - Go's JSON rules (see the crate docs): an `omitempty` non-pointer scalar field that is
//!   `""`, `0` or `false` is skipped (its key is never yielded, so `Option<String>` stays
//!   `None` as from JSON), a message never is (Go never omits a struct: `targetPort: 0`, a
//!   zero `Time` as `null`), an `omitzero` zero `Time` is (`creationTimestamp`); an inline field's fields are yielded as the parent's; the special messages take
//!   their JSON forms (`Time` a string, or `None` when zero; `IntOrString` a number or a
//!   string; `Quantity` a string; `RawExtension`, `FieldsV1` and the CRD `JSON` are their
//!   embedded JSON, read by serde_json, or an embedded `k8s\0` object read by this
//!   deserializer; bytes are standard base64 strings).
//! - `apiVersion` and `kind` of the envelope come first, as the first two keys of the top
//!   object (generic types need them; k8s-openapi's types check them).
//! - Repeated fields are read whole at their first occurrence, wherever the others are
//!   (Go's marshaller writes them together, the fast case; interleaved occurrences are
//!   collected). A singular field written twice (Go never writes one twice) is yielded
//!   twice, as a JSON object with the key twice would be: what happens is the type's.
//!   k8s-openapi's types and `serde_json::Value` keep the last, as protobuf reads a scalar
//!   (a message written twice is not merged, as protobuf would merge it); a serde-derive
//!   type (kube's `PartialObjectMeta`, say) fails with [`Error::Deserialize`] "duplicate
//!   field". Finding them would cost every message a second look at its singular fields,
//!   for bytes no Kubernetes server writes.
//! - Fields the vendored messages lack (a newer server's) are skipped, or, with
//!   [`DecodeOptions::deny_unknown_fields`], an [`Error::UnknownField`] naming the message
//!   and the number, in every message the type reads (list items, embedded objects, inline
//!   and special messages included), but for fields Kubernetes removed that older servers
//!   still write (`ObjectMeta.clusterName`).
//! - Depth ([`DecodeOptions::max_depth`]) counts as the object's JSON nests: each object and
//!   array, embedded JSON included. Beyond it, [`Error::TooDeep`]; within it, the stack grows
//!   as needed, so no depth overflows it.
//! - Malformed bytes (a cut varint, a length past the end, a wrong wire type, invalid UTF-8,
//!   embedded JSON that does not parse) are an [`Error::Malformed`] naming the message or
//!   field, never a panic.

/// The deserialize methods every deserializer here forwards to `deserialize_any` (a value
/// knows its own shape, as JSON's does), and `deserialize_ignored_any`, which skips the value
/// without decoding it.
macro_rules! forward_the_rest {
    ($($extra:ident)*) => {
        fn deserialize_ignored_any<V: serde::de::Visitor<'de>>(
            self,
            visitor: V,
        ) -> Result<V::Value, crate::Error> {
            visitor.visit_unit()
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier
            $($extra)*
        }
    };
}

mod field_set;
mod message;
mod options;
mod special;
mod table;

pub use options::DecodeOptions;
pub use special::json_depth;

#[cfg(test)]
mod tests;

use serde::Deserialize;

use crate::Error;
use crate::body::{Envelope, List};

/// Decodes a protobuf body (`k8s\0` + `runtime.Unknown`) into `T`, as `T` would be read from
/// the JSON the real server answers for the same object (see the module docs).
///
/// [`Error::UnknownKind`] for a kind with no message here; [`Error::Malformed`],
/// [`Error::TooDeep`] or [`Error::Deserialize`] (the value does not fit `T`) otherwise.
pub fn from_slice<'de, T: Deserialize<'de>>(
    body: &'de [u8],
    options: &DecodeOptions,
) -> Result<T, Error> {
    T::deserialize(message::body_de(body, 1, options)?)
}

impl<'a> List<'a> {
    /// Decodes the list's `metadata` into `T` (k8s-openapi's `ListMeta`, say).
    pub fn metadata<T: Deserialize<'a>>(&self, options: &DecodeOptions) -> Result<T, Error> {
        const LIST_META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.ListMeta";
        let table = table::TABLES.get(LIST_META).expect("ListMeta is vendored");
        T::deserialize(message::MessageDe {
            table,
            bytes: self.metadata,
            depth: 1,
            options,
            type_meta: None,
        })
    }
}

impl<'a> Envelope<'a> {
    /// Decodes the object into `T`, `apiVersion` and `kind` first (see [`from_slice`]).
    pub fn decode<T: Deserialize<'a>>(&self, options: &DecodeOptions) -> Result<T, Error> {
        T::deserialize(message::message_de(self, 1, options)?)
    }
}

impl serde::de::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error::Deserialize(msg.to_string())
    }
}
