//! The transcoder: a protobuf body ⇄ the JSON Go's `encoding/json` makes of the same object.
//!
//! # Contract
//! - [`to_json`] reads a whole body (`k8s\0` + `runtime.Unknown`), decodes the object's
//!   message with prost-reflect, and returns the JSON the real server would answer for it,
//!   `apiVersion` and `kind` included (from the envelope: the Go types carry them in JSON
//!   only). [`from_json`] is the reverse: what client-go's protobuf serializer writes for the
//!   object whose JSON it is given.
//! - The Go JSON rules (see the crate docs): a non-pointer `omitempty` scalar field is
//!   dropped when `""`, `0` or `false` (a message never: Go never omits a struct); an
//!   `omitzero` zero `Time` is dropped; a pointer field is kept whenever it is on the wire
//!   (`spec.replicas: 0`); an inline field's message is flattened into its parent; a few JSON
//!   names differ from the proto names (`$ref`). Messages with a JSON form of their own:
//!   `Time` (RFC 3339 seconds, `null` when zero), `MicroTime`, `Duration` (Go's text),
//!   `IntOrString`, `Quantity` (its string), `RawExtension`, `FieldsV1` and the CRD schema's
//!   `JSON` (the embedded JSON, or an embedded `k8s\0` object decoded in turn), and the CRD
//!   schema's `JSONSchemaPropsOrArray`, `…OrBool`, `…OrStringArray`. Bytes are standard
//!   base64, as Go writes a `[]byte`.
//! - `from_json` drops the JSON fields a message lacks, as Go's decoder drops unknown fields;
//!   `to_json` drops the wire fields the vendored messages lack (a newer server's).
//!
//! # Cost
//! Both directions build a `prost_reflect::DynamicMessage` and a `serde_json::Value`: simple,
//! but slower than decoding JSON text.

mod from_json;
mod to_json;

pub use from_json::from_json;
pub use to_json::to_json;

/// `k8s\0` + a `runtime.Unknown` holding `raw`, for the deserializer's tests.
#[cfg(test)]
pub(crate) fn envelope_for_tests(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    from_json::envelope(api_version, kind, raw)
}

#[cfg(test)]
pub(crate) mod tests;
