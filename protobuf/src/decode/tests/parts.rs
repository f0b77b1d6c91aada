//! Envelopes, lists and their items, watch events, `Status` bodies, managed fields skipped.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, Status};
use serde_json::{Value, json};

use super::options;
use crate::transcode::{from_json, to_json};
use crate::{DecodeOptions, Envelope, Error, envelope, from_slice, has_message, list, watch};

fn pod_list() -> Value {
    let pods = (0..3).map(|i| ctrlkit_apiserver::fixtures::realistic_pod("ns", i, i == 1));
    json!({ "apiVersion": "v1", "kind": "PodList",
        "metadata": { "resourceVersion": "42", "continue": "next" }, "items": pods.collect::<Vec<_>>() })
}

#[test]
fn a_lists_items_decode_alone_and_name_themselves() {
    let object = pod_list();
    let body = from_json(&object).unwrap();
    let parts = list(&body).unwrap();
    assert_eq!((parts.api_version, parts.kind, parts.items.len()), ("v1", "PodList", 3));
    let metadata: ListMeta = parts.metadata(&options()).unwrap();
    assert_eq!(metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(metadata.continue_.as_deref(), Some("next"));
    let json = to_json(&body).unwrap();
    for (i, item) in parts.items.iter().enumerate() {
        assert_eq!((item.api_version, item.kind), ("v1", "Pod"));
        let name = item.object_name().unwrap();
        assert_eq!((name.namespace, name.name), ("ns", format!("web-{i:06}").as_str()));
        let decoded: Pod = item.decode(&options()).unwrap();
        let expected: Pod = serde_json::from_value(json["items"][i].clone()).unwrap();
        assert_eq!(decoded, expected);
        // Generic types get apiVersion and kind, which the list's items lack in JSON.
        let value: Value = item.decode(&options()).unwrap();
        assert_eq!(
            (value["apiVersion"].as_str(), value["kind"].as_str()),
            (Some("v1"), Some("Pod"))
        );
    }
    let config_map = from_json(&json!({ "apiVersion": "v1", "kind": "ConfigMap" })).unwrap();
    assert!(matches!(list(&config_map), Err(Error::UnknownKind { .. })));
}

#[test]
fn the_envelope_names_the_object_and_has_message_the_kinds() {
    let body = from_json(&json!({ "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "c", "namespace": "n" } }))
    .unwrap();
    let parts: Envelope<'_> = envelope(&body).unwrap();
    assert_eq!((parts.api_version, parts.kind), ("v1", "ConfigMap"));
    assert_eq!(parts.object_name().unwrap().name, "c");
    let decoded: ConfigMap = parts.decode(&options()).unwrap();
    assert_eq!(decoded.metadata.namespace.as_deref(), Some("n"));
    assert_eq!(envelope(b"{\"kind\":\"Pod\"}"), Err(Error::NotProtobuf));
    assert!(has_message("v1", "Pod") && has_message("apps/v1", "Deployment"));
    assert!(
        has_message("meta.k8s.io/v1", "PartialObjectMetadataList") && has_message("v1", "Status")
    );
    assert!(!has_message("example.com/v1", "Widget") && !has_message("v1", "Widget"));
}

#[test]
fn a_watch_frame_holds_an_event_whose_object_decodes() {
    let object = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "a", "resourceVersion": "9" } });
    let frame = watch::event_frame("MODIFIED", &from_json(&object).unwrap());
    let mut reader = watch::FrameReader::new(1 << 20);
    reader.extend(&frame);
    let event = watch::Event::parse(reader.next_frame().unwrap().unwrap()).unwrap();
    assert_eq!(event.event_type, "MODIFIED");
    let decoded: ConfigMap = from_slice(event.object, &options()).unwrap();
    assert_eq!(decoded.metadata.resource_version.as_deref(), Some("9"));
}

#[test]
fn a_status_body_decodes_to_k8s_openapis_status() {
    let status = json!({ "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
        "message": "too old resource version: 1 (42)", "reason": "Expired", "code": 410 });
    let body = from_json(&status).unwrap();
    let decoded: Status = from_slice(&body, &options()).unwrap();
    assert_eq!((decoded.code, decoded.reason.as_deref()), (Some(410), Some("Expired")));
    assert_eq!(decoded.message.as_deref(), Some("too old resource version: 1 (42)"));
}

#[test]
fn managed_fields_are_skipped_on_the_wire_when_asked() {
    let body = from_json(&ctrlkit_apiserver::fixtures::realistic_pod("a", 1, true)).unwrap();
    let skip = DecodeOptions::default().skip_managed_fields(true);
    let kept: Pod = from_slice(&body, &options()).unwrap();
    assert!(kept.metadata.managed_fields.is_some());
    let skipped: Pod = from_slice(&body, &skip).unwrap();
    let mut expected = to_json(&body).unwrap();
    expected["metadata"].as_object_mut().unwrap().remove("managedFields");
    assert_eq!(skipped, serde_json::from_value::<Pod>(expected).unwrap());
}
