//! `DecodeOptions::deny_unknown_fields`: fields the vendored messages lack (a newer server's),
//! written by hand, are skipped by default and an `Error::UnknownField` naming the message
//! and the number when denied, at any depth.

use k8s_openapi::api::core::v1::Pod;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use prost::Message as _;
use serde_json::Value;

use super::limits::{len_field, number, varint_field};
use crate::transcode::envelope_for_tests;
use crate::transcode::tests::{go_metadata, s};
use crate::{DecodeOptions, Error, from_slice, list, watch};

const CORE: &str = "k8s.io.api.core.v1";

/// Where a pod carries the unknown field (number 99, a varint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Nowhere,
    Pod,
    Container,
    VolumeSource,
    CreationTimestamp,
}

/// A pod's message (no envelope), with field 99 where `at` says.
fn pod(at: At) -> Vec<u8> {
    let extra = |place: At, mut bytes: Vec<u8>| {
        if at == place {
            bytes.extend(varint_field(99, 1));
        }
        bytes
    };
    let mut metadata = go_metadata("p");
    metadata.creation_timestamp = None;
    let mut metadata = metadata.encode_to_vec();
    let created = meta::Time { seconds: Some(1_700_000_000), nanos: Some(0) }.encode_to_vec();
    let created_number =
        number("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta", "creationTimestamp");
    metadata.extend(len_field(created_number, &extra(At::CreationTimestamp, created)));
    let container = core::Container { name: s("c"), image: s("i"), ..Default::default() };
    let container = extra(At::Container, container.encode_to_vec());
    let source = core::VolumeSource {
        empty_dir: Some(core::EmptyDirVolumeSource::default()),
        ..Default::default()
    };
    let source = extra(At::VolumeSource, source.encode_to_vec());
    let mut volume = core::Volume { name: s("v"), volume_source: None }.encode_to_vec();
    volume.extend(len_field(number(&format!("{CORE}.Volume"), "volumeSource"), &source));
    let mut spec = len_field(number(&format!("{CORE}.PodSpec"), "containers"), &container);
    spec.extend(len_field(number(&format!("{CORE}.PodSpec"), "volumes"), &volume));
    let mut raw = len_field(1, &metadata);
    raw.extend(len_field(number(&format!("{CORE}.Pod"), "spec"), &spec));
    extra(At::Pod, raw)
}

fn deny() -> DecodeOptions {
    DecodeOptions::default().deny_unknown_fields(true)
}

fn unknown(message: &str) -> Error {
    Error::UnknownField { message: message.to_owned(), number: 99 }
}

#[test]
fn unknown_fields_are_skipped_by_default_and_named_when_denied() {
    assert!(!DecodeOptions::default().deny_unknown_fields, "off by default, as before");
    let plain = envelope_for_tests("v1", "Pod", pod(At::Nowhere));
    let expected: Pod = from_slice(&plain, &DecodeOptions::default()).unwrap();
    assert_eq!(from_slice::<Pod>(&plain, &deny()).unwrap(), expected, "nothing unknown");
    assert_eq!(expected.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("i"));
    let cases = [
        (At::Pod, format!("{CORE}.Pod")),
        (At::Container, format!("{CORE}.Container")),
        (At::VolumeSource, format!("{CORE}.VolumeSource")),
        (At::CreationTimestamp, "k8s.io.apimachinery.pkg.apis.meta.v1.Time".to_owned()),
    ];
    for (at, message) in cases {
        let body = envelope_for_tests("v1", "Pod", pod(at));
        let skipped: Pod = from_slice(&body, &DecodeOptions::default()).unwrap();
        assert_eq!(skipped, expected, "{at:?}: skipped when not denied");
        assert_eq!(from_slice::<Pod>(&body, &deny()), Err(unknown(&message)), "{at:?}");
        assert_eq!(from_slice::<Value>(&body, &deny()), Err(unknown(&message)), "{at:?}");
    }
    let error = from_slice::<Pod>(&envelope_for_tests("v1", "Pod", pod(At::Pod)), &deny());
    let text = error.unwrap_err().to_string();
    assert!(text.contains("k8s.io.api.core.v1.Pod") && text.contains("99"), "{text}");
}

#[test]
fn unknown_fields_are_denied_inside_lists_and_watch_events() {
    let items = [pod(At::Nowhere), pod(At::Container)];
    let raw: Vec<u8> = items.iter().flat_map(|item| len_field(2, item)).collect();
    let body = envelope_for_tests("v1", "PodList", raw);
    let container = unknown(&format!("{CORE}.Container"));
    let all: k8s_openapi::List<Pod> = from_slice(&body, &DecodeOptions::default()).unwrap();
    assert_eq!(all.items.len(), 2);
    assert_eq!(from_slice::<k8s_openapi::List<Pod>>(&body, &deny()), Err(container.clone()));
    let parts = list(&body).unwrap();
    assert!(parts.items[0].decode::<Pod>(&deny()).is_ok());
    assert_eq!(parts.items[1].decode::<Pod>(&deny()), Err(container.clone()));

    let object = envelope_for_tests("v1", "Pod", pod(At::Container));
    let frame = watch::event_frame("ADDED", &object);
    let event = watch::Event::parse(&frame[4..]).unwrap();
    assert!(from_slice::<Pod>(event.object, &DecodeOptions::default()).is_ok());
    assert_eq!(from_slice::<Pod>(event.object, &deny()), Err(container.clone()));
    // A whole WatchEvent: its object is an embedded body, read with the same options.
    let whole = envelope_for_tests("meta.k8s.io/v1", "WatchEvent", frame[4..].to_vec());
    let read: Value = from_slice(&whole, &DecodeOptions::default()).unwrap();
    assert_eq!(read["object"]["spec"]["containers"][0]["name"], "c");
    assert_eq!(from_slice::<Value>(&whole, &deny()), Err(container));
}

/// An older server writes a field later releases removed on every object, empty or not
/// (v1.20's `ObjectMeta.clusterName`, number 15, as `""`); k8s-openapi's types lack it too,
/// so denying unknown fields still reads the object. Any other unknown field is denied,
/// even holding its zero: it may be a newer server's pointer set to zero.
#[test]
fn fields_kubernetes_removed_are_not_denied() {
    let mut metadata = go_metadata("p");
    metadata.creation_timestamp = None;
    let meta = "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta";
    let with = |extra: &[u8]| {
        let mut metadata = metadata.encode_to_vec();
        metadata.extend_from_slice(extra);
        envelope_for_tests("v1", "Pod", len_field(1, &metadata))
    };
    let expected: Pod = from_slice(&with(&[]), &deny()).unwrap();
    assert_eq!(from_slice::<Pod>(&with(&len_field(15, b"")), &deny()).unwrap(), expected);
    assert_eq!(from_slice::<Pod>(&with(&len_field(15, b"east")), &deny()).unwrap(), expected);
    let zero = Error::UnknownField { message: meta.to_owned(), number: 99 };
    assert_eq!(from_slice::<Pod>(&with(&varint_field(99, 0)), &deny()), Err(zero));
}
