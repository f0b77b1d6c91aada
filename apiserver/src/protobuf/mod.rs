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
//! JSON form of their own ([`special`]): `Time` (RFC 3339 seconds, `null` when zero),
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
mod to_json;

use std::collections::HashMap;
use std::sync::LazyLock;

use prost_reflect::prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};
use serde_json::Value;

pub(crate) use frames::watch_frames;
pub(crate) use from_json::to_message;
pub(crate) use to_json::to_value;

/// The media type of Kubernetes' protobuf encoding.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The media type of a watch in protobuf.
pub(crate) const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// The 4 bytes every protobuf body starts with.
const MAGIC: &[u8; 4] = b"k8s\0";

const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";
const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";

/// The descriptors compiled from `protos/` and the Go JSON rules of their fields.
struct Codec {
    pool: DescriptorPool,
    rules: HashMap<String, FieldRule>,
}

/// How Go's JSON treats one field; see the module docs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct FieldRule {
    /// Left out of JSON when `""`, `0` or `false`.
    pub(crate) omitempty: bool,
    /// The field's message is flattened into the parent's JSON object.
    pub(crate) inline: bool,
    /// The JSON name, where it is not the proto name.
    pub(crate) json_name: Option<String>,
}

static CODEC: LazyLock<Codec> = LazyLock::new(|| {
    let bytes = include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes.fds"));
    // build.rs compiled these very files: decoding them cannot fail but on a broken build.
    let pool = DescriptorPool::decode(&bytes[..]).expect("the descriptor set build.rs compiled");
    Codec { pool, rules: parse_rules(include_str!("../../protos/go-json.txt")) }
});

/// Parses `protos/go-json.txt`: `MESSAGE FIELD omitempty|inline|json=NAME` lines.
fn parse_rules(text: &str) -> HashMap<String, FieldRule> {
    let mut rules: HashMap<String, FieldRule> = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut words = line.split_whitespace();
        let (Some(message), Some(field), Some(rule)) = (words.next(), words.next(), words.next())
        else {
            continue;
        };
        let entry = rules.entry(format!("{message}.{field}")).or_default();
        match rule {
            "omitempty" => entry.omitempty = true,
            "inline" => entry.inline = true,
            name => entry.json_name = name.strip_prefix("json=").map(str::to_owned),
        }
    }
    rules
}

/// The rule of a field, by the field's full name (`package.Message.field`).
fn rule(full_name: &str) -> Option<&'static FieldRule> {
    CODEC.rules.get(full_name)
}

/// The message of a built-in kind, if the server has one: `apiVersion` `v1` → core,
/// `apps/v1` → `k8s.io.api.apps.v1`, and `meta.k8s.io` kinds (`Status`, `DeleteOptions`,
/// `WatchEvent`, which clients send with either `v1` or `meta.k8s.io/v1`).
pub(crate) fn message_for(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    let package = match api_version {
        "v1" => "k8s.io.api.core.v1",
        "apps/v1" => "k8s.io.api.apps.v1",
        "batch/v1" => "k8s.io.api.batch.v1",
        "coordination.k8s.io/v1" => "k8s.io.api.coordination.v1",
        "events.k8s.io/v1" => "k8s.io.api.events.v1",
        "autoscaling/v1" => "k8s.io.api.autoscaling.v1",
        "apiextensions.k8s.io/v1" => "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1",
        "meta.k8s.io/v1" => META,
        _ => return None,
    };
    let pool = &CODEC.pool;
    pool.get_message_by_name(&format!("{package}.{kind}")).or_else(|| {
        matches!(api_version, "v1" | "meta.k8s.io/v1")
            .then(|| pool.get_message_by_name(&format!("{META}.{kind}")))
            .flatten()
    })
}

/// A protobuf body whose object could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Not a Kubernetes protobuf body, or a message that does not decode.
    Malformed(String),
    /// A kind with no message here (a custom resource): the real server's 415.
    UnknownKind { api_version: String, kind: String },
}

/// Decodes a protobuf body (`k8s\0` + `runtime.Unknown`) into the JSON of its object, with
/// `apiVersion` and `kind` from the envelope.
pub(crate) fn decode(body: &[u8]) -> Result<Value, DecodeError> {
    let malformed = |what: String| DecodeError::Malformed(what);
    let raw = body.strip_prefix(MAGIC).ok_or_else(|| {
        malformed("the body does not start with the protobuf magic number k8s\\0".to_owned())
    })?;
    let unknown = CODEC.pool.get_message_by_name(UNKNOWN).expect("runtime.Unknown is vendored");
    let envelope = DynamicMessage::decode(unknown, raw)
        .map_err(|e| malformed(format!("decoding the runtime.Unknown envelope: {e}")))?;
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
        return Err(malformed(format!("unsupported contentEncoding {encoding:?}")));
    }
    let Some(descriptor) = message_for(&api_version, &kind) else {
        return Err(DecodeError::UnknownKind { api_version, kind });
    };
    let object_bytes =
        envelope.get_field_by_name("raw").and_then(|v| v.as_bytes().cloned()).unwrap_or_default();
    let message = DynamicMessage::decode(descriptor, object_bytes)
        .map_err(|e| malformed(format!("decoding {api_version} {kind}: {e}")))?;
    let mut value = to_value(&message).map_err(malformed)?;
    if let Value::Object(map) = &mut value {
        // The Go types carry apiVersion and kind only in JSON (TypeMeta has no protobuf tag).
        map.insert("apiVersion".into(), Value::String(api_version));
        map.insert("kind".into(), Value::String(kind));
    }
    Ok(value)
}

fn unknown_type_meta() -> MessageDescriptor {
    CODEC
        .pool
        .get_message_by_name("k8s.io.apimachinery.pkg.runtime.TypeMeta")
        .expect("runtime.TypeMeta is vendored")
}

/// Encodes a JSON object of a built-in kind (its `apiVersion` and `kind` say which) as a
/// protobuf body; `None` when the kind has no message.
pub(crate) fn encode(value: &Value) -> Option<Result<Vec<u8>, String>> {
    let api_version = value.get("apiVersion")?.as_str()?;
    let kind = value.get("kind")?.as_str()?;
    let descriptor = message_for(api_version, kind)?;
    Some(
        to_message(value, &descriptor)
            .map(|message| envelope(api_version, kind, message.encode_to_vec())),
    )
}

/// `k8s\0` + a `runtime.Unknown` holding `raw` as an `apiVersion` `kind`.
pub(crate) fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
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

/// Which JSON form of its own a message has, by its full name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    Time,
    MicroTime,
    Duration,
    IntOrString,
    Quantity,
    /// `RawExtension`, `FieldsV1` and the CRD schema's `JSON`: bytes of embedded JSON.
    RawJson,
    SchemaOrArray,
    SchemaOrBool,
    SchemaOrStringArray,
}

/// The [`Special`] form of a message, if it has one.
pub(crate) fn special(full_name: &str) -> Option<Special> {
    let (package, name) = full_name.rsplit_once('.')?;
    let crd = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1";
    Some(match (package, name) {
        (META, "Time") => Special::Time,
        (META, "MicroTime") => Special::MicroTime,
        (META, "Duration") => Special::Duration,
        (META, "FieldsV1") => Special::RawJson,
        ("k8s.io.apimachinery.pkg.util.intstr", "IntOrString") => Special::IntOrString,
        ("k8s.io.apimachinery.pkg.api.resource", "Quantity") => Special::Quantity,
        ("k8s.io.apimachinery.pkg.runtime", "RawExtension") => Special::RawJson,
        (p, "JSON") if p == crd => Special::RawJson,
        (p, "JSONSchemaPropsOrArray") if p == crd => Special::SchemaOrArray,
        (p, "JSONSchemaPropsOrBool") if p == crd => Special::SchemaOrBool,
        (p, "JSONSchemaPropsOrStringArray") if p == crd => Special::SchemaOrStringArray,
        _ => return None,
    })
}

/// The bytes field of a [`Special::RawJson`] message (`raw`, or `Raw` in `FieldsV1`).
fn raw_field(message: &MessageDescriptor) -> Option<prost_reflect::FieldDescriptor> {
    message.get_field_by_name("raw").or_else(|| message.get_field_by_name("Raw"))
}

#[cfg(test)]
mod tests;
