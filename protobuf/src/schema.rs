//! What the vendored `.proto` files and `protos/go-json.txt` say: the message of each kind,
//! the Go JSON rules of each field, and the messages with a JSON form of their own. The
//! transcoder (both directions) and the deserializer all read it.

use std::collections::HashMap;
use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};

/// The 4 bytes every protobuf body starts with.
pub(crate) const MAGIC: &[u8; 4] = b"k8s\0";

pub(crate) const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";
pub(crate) const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";

/// The descriptor set compiled from `protos/` (see the crate docs to regenerate it).
pub(crate) const DESCRIPTOR_SET: &[u8] = include_bytes!("../kubernetes.fds");

/// The descriptors compiled from `protos/` and the Go JSON rules of their fields.
pub(crate) struct Codec {
    pub(crate) pool: DescriptorPool,
    pub(crate) rules: HashMap<String, FieldRule>,
}

/// How Go's JSON treats one field; see the module docs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct FieldRule {
    /// Left out of JSON when `""`, `0` or `false` (a scalar; Go never omits a struct).
    pub(crate) omitempty: bool,
    /// Left out of JSON when its Go value is zero (`omitzero`; a `Time` when the empty
    /// message).
    pub(crate) omitzero: bool,
    /// The field's message is flattened into the parent's JSON object.
    pub(crate) inline: bool,
    /// The JSON name, where it is not the proto name.
    pub(crate) json_name: Option<String>,
}

pub(crate) static CODEC: LazyLock<Codec> = LazyLock::new(|| {
    // A test recompiles protos/ and compares: the committed set decodes unless it is corrupt.
    let pool = DescriptorPool::decode(DESCRIPTOR_SET).expect("the committed kubernetes.fds");
    Codec { pool, rules: parse_rules(include_str!("../protos/go-json.txt")) }
});

/// Parses `protos/go-json.txt`: `MESSAGE FIELD omitempty|omitzero|inline|json=NAME` lines.
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
            "omitzero" => entry.omitzero = true,
            "inline" => entry.inline = true,
            name => entry.json_name = name.strip_prefix("json=").map(str::to_owned),
        }
    }
    rules
}

/// The rule of a field, by the field's full name (`package.Message.field`).
pub(crate) fn rule(full_name: &str) -> Option<&'static FieldRule> {
    CODEC.rules.get(full_name)
}

/// The message of a built-in kind, if the server has one: `apiVersion` `v1` → core,
/// `apps/v1` → `k8s.io.api.apps.v1`, `rbac.authorization.k8s.io/v1` → `k8s.io.api.rbac.v1`
/// (see [`GROUPS`]), and `meta.k8s.io` kinds (`Status`, `DeleteOptions`,
/// `WatchEvent`, which clients send with either `v1` or `meta.k8s.io/v1`).
pub(crate) fn message_for(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    let package = match api_version {
        "v1" => "k8s.io.api.core.v1",
        "apiextensions.k8s.io/v1" => "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1",
        "meta.k8s.io/v1" => META,
        _ => {
            let (group, version) = api_version.split_once('/')?;
            let (_, package) = GROUPS.iter().find(|(g, _)| *g == group)?;
            // Versions not vendored have no package in the pool.
            return message_in(&format!("k8s.io.api.{package}.{version}"), kind);
        }
    };
    let pool = &CODEC.pool;
    message_in(package, kind).or_else(|| {
        matches!(api_version, "v1" | "meta.k8s.io/v1")
            .then(|| pool.get_message_by_name(&format!("{META}.{kind}")))
            .flatten()
    })
}

/// The API groups with vendored messages, and their Go package (`k8s.io/api/<package>`); the
/// versions are those `protobuf/scripts/vendor-protos.py` vendors.
const GROUPS: &[(&str, &str)] = &[
    ("admissionregistration.k8s.io", "admissionregistration"),
    ("apps", "apps"),
    ("authentication.k8s.io", "authentication"),
    ("authorization.k8s.io", "authorization"),
    ("autoscaling", "autoscaling"),
    ("batch", "batch"),
    ("certificates.k8s.io", "certificates"),
    ("coordination.k8s.io", "coordination"),
    ("discovery.k8s.io", "discovery"),
    ("events.k8s.io", "events"),
    ("flowcontrol.apiserver.k8s.io", "flowcontrol"),
    ("internal.apiserver.k8s.io", "apiserverinternal"),
    ("networking.k8s.io", "networking"),
    ("node.k8s.io", "node"),
    ("policy", "policy"),
    ("rbac.authorization.k8s.io", "rbac"),
    ("resource.k8s.io", "resource"),
    ("scheduling.k8s.io", "scheduling"),
    ("storage.k8s.io", "storage"),
    ("storagemigration.k8s.io", "storagemigration"),
];

/// The message `kind` of `package`, if it is vendored.
fn message_in(package: &str, kind: &str) -> Option<MessageDescriptor> {
    CODEC.pool.get_message_by_name(&format!("{package}.{kind}"))
}

pub(crate) fn unknown_type_meta() -> MessageDescriptor {
    CODEC
        .pool
        .get_message_by_name("k8s.io.apimachinery.pkg.runtime.TypeMeta")
        .expect("runtime.TypeMeta is vendored")
}

/// Which JSON form of its own a message has, by its full name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    /// `meta.v1.Time`: RFC 3339 seconds, `null` when zero.
    Time,
    /// `meta.v1.MicroTime`: RFC 3339 microseconds, `null` when zero.
    MicroTime,
    /// `meta.v1.Duration`: Go's `time.Duration` text.
    Duration,
    /// `intstr.IntOrString`: a number or a string.
    IntOrString,
    /// `resource.Quantity`: its string.
    Quantity,
    /// `RawExtension`, `FieldsV1` and the CRD schema's `JSON`: bytes of embedded JSON.
    RawJson,
    /// The CRD schema's `JSONSchemaPropsOrArray`: a schema or a list of them.
    SchemaOrArray,
    /// The CRD schema's `JSONSchemaPropsOrBool`: a schema or a bool.
    SchemaOrBool,
    /// The CRD schema's `JSONSchemaPropsOrStringArray`: a schema or a list of strings.
    SchemaOrStringArray,
    /// A Go `[]string` type of its own, a message of one repeated `items` field in protobuf
    /// (`+protobuf.nullable=true`): the list in JSON (`UserInfo.extra`'s `ExtraValue`,
    /// `APIResource.verbs`' `Verbs`).
    StringList,
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
        (META, "Verbs") => Special::StringList,
        (p, "ExtraValue") if p.starts_with("k8s.io.api.") => Special::StringList,
        _ => return None,
    })
}

/// The bytes field of a [`Special::RawJson`] message (`raw`, or `Raw` in `FieldsV1`).
pub(crate) fn raw_field(message: &MessageDescriptor) -> Option<prost_reflect::FieldDescriptor> {
    message.get_field_by_name("raw").or_else(|| message.get_field_by_name("Raw"))
}
