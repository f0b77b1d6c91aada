//! Wire shapes Go does not write but protobuf allows (interleaved and packed repeated fields,
//! unknown fields), the depth limit, and malformed bytes.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_pb::api::core::v1 as core;
use prost::Message as _;
use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::{agree, options};
use crate::schema::CODEC;
use crate::transcode::tests::{body, go_metadata, s};
use crate::transcode::{envelope_for_tests, from_json, to_json};
use crate::{DecodeOptions, Error, from_slice};

pub(super) fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Field `number`, length-delimited, holding `bytes`.
pub(super) fn len_field(number: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    varint(u64::from(number) << 3 | 2, &mut out);
    varint(bytes.len() as u64, &mut out);
    out.extend_from_slice(bytes);
    out
}

pub(super) fn varint_field(number: u32, value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    varint(u64::from(number) << 3, &mut out);
    varint(value, &mut out);
    out
}

/// The number of a field, from the descriptors.
pub(super) fn number(message: &str, field: &str) -> u32 {
    let message = CODEC.pool.get_message_by_name(message).unwrap();
    message.get_field_by_name(field).unwrap().number()
}

#[test]
fn interleaved_and_packed_repeated_fields_are_collected_whole() {
    let container = |name: &str| core::Container { name: s(name), ..Default::default() };
    let volume = |name: &str| core::Volume { name: s(name), volume_source: None };
    let parts = [
        core::PodSpec { containers: vec![container("a")], ..Default::default() },
        core::PodSpec { node_name: s("n1"), ..Default::default() },
        core::PodSpec { containers: vec![container("b")], ..Default::default() },
        core::PodSpec { volumes: vec![volume("v1")], ..Default::default() },
        core::PodSpec {
            containers: vec![container("c")],
            volumes: vec![volume("v2")],
            ..Default::default()
        },
    ];
    // Concatenated messages are one message whose repeated fields are each part's, in order.
    let mut spec: Vec<u8> = parts.iter().flat_map(|p| p.encode_to_vec()).collect();
    let groups = number("k8s.io.api.core.v1.PodSecurityContext", "supplementalGroups");
    let mut context = varint_field(groups, 1);
    context.extend(varint_field(groups, 2));
    let mut packed = Vec::new();
    varint(3, &mut packed);
    varint(4, &mut packed);
    context.extend(len_field(groups, &packed));
    spec.extend(len_field(number("k8s.io.api.core.v1.PodSpec", "securityContext"), &context));
    let mut raw = len_field(1, &go_metadata("p").encode_to_vec());
    raw.extend(len_field(number("k8s.io.api.core.v1.Pod", "spec"), &spec));
    let body = envelope_for_tests("v1", "Pod", raw);
    agree::<Pod>(&body);
    let spec = from_slice::<Pod>(&body, &options()).unwrap().spec.unwrap();
    let names: Vec<_> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let volumes: Vec<_> = spec.volumes.unwrap().into_iter().map(|v| v.name).collect();
    assert_eq!(volumes, ["v1", "v2"]);
    assert_eq!(spec.node_name.as_deref(), Some("n1"));
    assert_eq!(spec.security_context.unwrap().supplemental_groups, Some(vec![1, 2, 3, 4]));
}

#[test]
fn fields_of_a_newer_server_are_skipped() {
    let config_map =
        core::ConfigMap { data: [("k".to_owned(), "v".to_owned())].into(), ..Default::default() };
    let mut metadata = go_metadata("c").encode_to_vec();
    metadata.extend(varint_field(999, 5));
    metadata.extend(len_field(1000, b"a newer field"));
    let mut raw = len_field(1, &metadata);
    raw.extend(config_map.encode_to_vec());
    raw.extend([0x9d, 0x3e, 1, 2, 3, 4]); // field 999, fixed32
    raw.extend(varint_field(77, 1));
    let body = envelope_for_tests("v1", "ConfigMap", raw);
    agree::<ConfigMap>(&body);
    let decoded: ConfigMap = from_slice(&body, &options()).unwrap();
    assert_eq!(decoded.metadata.name.as_deref(), Some("c"));
}

/// How deep a value nests, counted as JSON nests (objects and arrays).
struct Depth(usize);

impl<'de> Deserialize<'de> for Depth {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Count;
        impl<'de> Visitor<'de> for Count {
            type Value = Depth;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("anything")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Depth, A::Error> {
                let mut deepest = 0;
                while map.next_key::<IgnoredAny>()?.is_some() {
                    deepest = deepest.max(map.next_value::<Depth>()?.0);
                }
                Ok(Depth(deepest + 1))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Depth, A::Error> {
                let mut deepest = 0;
                while let Some(Depth(d)) = seq.next_element()? {
                    deepest = deepest.max(d);
                }
                Ok(Depth(deepest + 1))
            }
            fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Depth, D::Error> {
                Depth::deserialize(d)
            }
            fn visit_none<E>(self) -> Result<Depth, E> {
                Ok(Depth(0))
            }
            fn visit_unit<E>(self) -> Result<Depth, E> {
                Ok(Depth(0))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Depth, E> {
                Ok(Depth(0))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Depth, E> {
                Ok(Depth(0))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Depth, E> {
                Ok(Depth(0))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Depth, E> {
                Ok(Depth(0))
            }
            fn visit_str<E>(self, _: &str) -> Result<Depth, E> {
                Ok(Depth(0))
            }
        }
        deserializer.deserialize_any(Count)
    }
}

/// A CRD whose schema nests `levels` schemas (`not`), built on the wire by hand (prost stops
/// at 100 levels). Its JSON nests `levels + 6` deep.
fn deep_crd(levels: usize) -> Vec<u8> {
    const CRD: &str = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1";
    let not = number(&format!("{CRD}.JSONSchemaProps"), "not");
    let mut schema = Vec::new();
    for _ in 0..levels {
        schema = len_field(not, &schema);
    }
    let validation =
        len_field(number(&format!("{CRD}.CustomResourceValidation"), "openAPIV3Schema"), &schema);
    let version =
        len_field(number(&format!("{CRD}.CustomResourceDefinitionVersion"), "schema"), &validation);
    let spec =
        len_field(number(&format!("{CRD}.CustomResourceDefinitionSpec"), "versions"), &version);
    let raw = len_field(number(&format!("{CRD}.CustomResourceDefinition"), "spec"), &spec);
    envelope_for_tests("apiextensions.k8s.io/v1", "CustomResourceDefinition", raw)
}

/// A ControllerRevision whose data is JSON arrays nested `levels` deep: its JSON nests
/// `levels + 1` deep.
fn deep_revision(levels: usize) -> Vec<u8> {
    let mut json = "[".repeat(levels);
    json.push_str(&"]".repeat(levels));
    let mut raw = len_field(1, &go_metadata("r").encode_to_vec());
    raw.extend(len_field(
        number("k8s.io.api.apps.v1.ControllerRevision", "data"),
        &len_field(1, json.as_bytes()),
    ));
    envelope_for_tests("apps/v1", "ControllerRevision", raw)
}

#[test]
fn depth_counts_as_the_json_nests_and_stops_at_the_limit() {
    let limit = |max_depth| DecodeOptions::default().max_depth(max_depth);
    for (body, deepest) in [(deep_crd(20), 26), (deep_revision(20), 21)] {
        assert_eq!(from_slice::<Depth>(&body, &limit(deepest)).unwrap().0, deepest);
        assert_eq!(
            from_slice::<Depth>(&body, &limit(deepest - 1)).err(),
            Some(Error::TooDeep { max_depth: deepest - 1 })
        );
        // The transcoder's JSON nests as deep.
        let json: Depth = serde_json::from_value(to_json(&body).unwrap()).unwrap();
        assert_eq!(json.0, deepest);
    }
    // The same count on ordinary objects: a pod with managed fields, a CRD.
    for object in [ctrlkit_apiserver::fixtures::realistic_pod("a", 1, true), super::crd()] {
        let body = from_json(&object).unwrap();
        let deepest = serde_json::from_value::<Depth>(to_json(&body).unwrap()).unwrap().0;
        assert_eq!(from_slice::<Depth>(&body, &limit(deepest)).unwrap().0, deepest);
        assert!(matches!(
            from_slice::<Value>(&body, &limit(deepest - 1)),
            Err(Error::TooDeep { .. })
        ));
    }
}

#[test]
fn ten_thousand_levels_are_refused_or_read_without_overflowing_the_stack() {
    for body in [deep_crd(10_000), deep_revision(10_000)] {
        assert_eq!(
            from_slice::<Value>(&body, &options()).err(),
            Some(Error::TooDeep { max_depth: 512 })
        );
        let deep = DecodeOptions::default().max_depth(20_000);
        assert!(from_slice::<Depth>(&body, &deep).unwrap().0 > 10_000);
    }
    assert!(from_slice::<ControllerRevision>(&deep_revision(10_000), &options()).is_err());
}

#[test]
fn every_truncation_of_a_pod_is_an_error_as_prost_finds_it() {
    let body = from_json(&ctrlkit_apiserver::fixtures::realistic_pod("a", 1, false)).unwrap();
    let envelope_end = 4 + len_field(1, b"").len() + "v1".len() + "Pod".len() + 4;
    for cut in 0..body.len() {
        let decoded = from_slice::<Pod>(&body[..cut], &options());
        let oracle = to_json(&body[..cut]).map(|v| serde_json::from_value::<Pod>(v).unwrap());
        assert_eq!(decoded.is_ok(), oracle.is_ok(), "cut at {cut}: {decoded:?}");
        if cut != envelope_end {
            // Only the cut between the envelope's typeMeta and raw leaves a whole body.
            assert!(decoded.is_err(), "cut at {cut}");
        }
    }
    let managed = from_json(&ctrlkit_apiserver::fixtures::realistic_pod("a", 1, true)).unwrap();
    for cut in envelope_end + 1..managed.len() {
        assert!(from_slice::<Value>(&managed[..cut], &options()).is_err(), "cut at {cut}");
    }
}

#[test]
fn wrong_wire_types_and_bad_utf8_are_errors_naming_the_field() {
    let name = |raw: Vec<u8>| {
        from_slice::<ConfigMap>(&envelope_for_tests("v1", "ConfigMap", raw), &options())
    };
    let err = name(len_field(1, &varint_field(1, 5))).unwrap_err();
    assert!(err.to_string().contains("ObjectMeta.name"), "{err}");
    let err = name(len_field(1, &len_field(1, b"\xff\xfe"))).unwrap_err();
    assert!(err.to_string().contains("ObjectMeta.name"), "{err}");
    assert_eq!(from_slice::<Value>(b"{}", &options()), Err(Error::NotProtobuf));
    let widget = body("example.com/v1", "Widget", &core::ConfigMap::default());
    assert!(matches!(from_slice::<Value>(&widget, &options()), Err(Error::UnknownKind { .. })));
}

proptest::proptest! {
    #[test]
    fn corrupted_bytes_never_panic_and_agree_with_prost(at in 0usize..4096, byte: u8) {
        let body = from_json(&ctrlkit_apiserver::fixtures::realistic_pod("a", 1, true)).unwrap();
        let mut body = body;
        let at = at % body.len();
        body[at] = byte;
        let decoded = from_slice::<Value>(&body, &options());
        if let (Ok(decoded), Ok(json)) = (&decoded, to_json(&body)) {
            proptest::prop_assert_eq!(decoded, &json);
        }
    }
}

#[test]
fn k8s_openapi_keeps_the_last_of_a_singular_field_written_twice() {
    let mut metadata = go_metadata("first").encode_to_vec();
    metadata.extend(len_field(
        number("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta", "name"),
        b"second",
    ));
    let body = envelope_for_tests("v1", "ConfigMap", len_field(1, &metadata));
    let decoded: ConfigMap = from_slice(&body, &options()).unwrap();
    assert_eq!(decoded.metadata.name.as_deref(), Some("second"));
}
