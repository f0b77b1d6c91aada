//! Kubernetes' protobuf encoding, for the built-in kinds: what kubectl's generator commands
//! (`kubectl create namespace`, `create configmap`, …) and client-go clients configured for
//! protobuf send.
//!
//! A protobuf body is the 4 bytes `k8s\0` and a `runtime.Unknown` message whose `typeMeta`
//! names the object's `apiVersion` and `kind` and whose `raw` holds the object's message.
//! Messages are decoded and encoded by prost-reflect from Kubernetes' own `.proto` files
//! (v1.36.2, vendored in `protos/` by `scripts/vendor-protos.py`, compiled by `build.rs`);
//! nothing here reads the wire format by hand.
//!
//! What this module writes is the rest: the mapping between a message and the JSON that Go's
//! `encoding/json` makes of the same Go object, which is what the real server stores and
//! returns. Protobuf cannot tell it alone, so `protos/go-json.txt` records it from the Go
//! types: a non-pointer field with `omitempty` is on the wire even when empty but out of JSON
//! when `""`, `0` or `false` (`metadata.namespace`), a pointer field is in JSON whenever it is
//! on the wire (`spec.replicas: 0` stays), an inline field's message is flattened into its
//! parent (`Volume.volumeSource`), and a few JSON names differ (`$ref`). Some messages have a
//! JSON form of their own ([`special`](schema::special)): `Time` (RFC 3339 seconds, `null` when zero),
//! `MicroTime`, `Duration`, `IntOrString`, `Quantity`, `RawExtension` and `FieldsV1` (the
//! embedded JSON), and the CRD schema's `JSON`, `JSONSchemaPropsOrArray`, `…OrBool`,
//! `…OrStringArray`.
//!
//! Custom resources have no messages: a protobuf body for one is 400 (as kube-apiserver 1.20
//! answers; 1.36.2 closes the connection unanswered), and a client that accepts nothing but
//! protobuf for one gets 406.
//!
//! Known differences from the real server: messages are those of Kubernetes v1.36.2, so a
//! field added later is dropped from a protobuf body (a JSON body keeps it); a `Quantity` is kept as
//! written, not canonicalized (`"0.5"` stays, the real server answers `"500m"`), as the
//! server does for JSON bodies.

mod frames;
mod from_json;
mod schema;
mod to_json;

pub(crate) use frames::{PANIC_LINE, watch_frame, watch_frames};
pub(crate) use from_json::encode;
pub(crate) use schema::message_for;
pub(crate) use to_json::{DecodeError, decode};

/// The media type of Kubernetes' protobuf encoding.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The media type of a watch in protobuf.
pub(crate) const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

#[cfg(test)]
mod tests;
