//! Envelopes, `Status` bodies, managed fields skipped.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde_json::json;

use super::options;
use crate::transcode::{from_json, to_json};
use crate::{DecodeOptions, Envelope, Error, envelope, from_slice, has_message};

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
