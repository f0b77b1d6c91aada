//! The codec against k8s-pb's generated types: bodies made as a Go client makes them (every
//! non-pointer field on the wire, empty or not), decoded into the JSON Go would write.

use std::collections::BTreeMap;

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::coordination::v1 as coordination;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::json;

use super::*;
use crate::Error;
use crate::go;
use crate::schema::{CODEC, Special};

pub(crate) fn body(api_version: &str, kind: &str, object: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(object.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// ObjectMeta as Go marshals it: every non-pointer field present, the zero time an empty
/// message.
pub(crate) fn go_metadata(name: &str) -> meta::ObjectMeta {
    meta::ObjectMeta {
        name: Some(name.into()),
        generate_name: Some(String::new()),
        namespace: Some(String::new()),
        self_link: Some(String::new()),
        uid: Some(String::new()),
        resource_version: Some(String::new()),
        generation: Some(0),
        creation_timestamp: Some(meta::Time { seconds: None, nanos: None }),
        ..Default::default()
    }
}

pub(crate) fn s(text: &str) -> Option<String> {
    Some(text.to_owned())
}

#[test]
fn empty_non_pointer_fields_are_dropped_and_pointer_zeros_kept() {
    let deployment = apps::Deployment {
        metadata: Some(go_metadata("web")),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0), // *int32: an explicit zero
            min_ready_seconds: Some(0),
            paused: Some(false),
            selector: Some(meta::LabelSelector {
                match_labels: BTreeMap::from([("app".into(), "web".into())]),
                ..Default::default()
            }),
            strategy: Some(apps::DeploymentStrategy { r#type: s(""), rolling_update: None }),
            template: Some(core::PodTemplateSpec {
                metadata: Some(go_metadata("")),
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: s("web"),
                        image: s("nginx"),
                        ports: vec![core::ContainerPort {
                            container_port: Some(80),
                            protocol: s("TCP"),
                            host_port: Some(0),
                            ..Default::default()
                        }],
                        resources: Some(core::ResourceRequirements {
                            limits: BTreeMap::from([(
                                "cpu".into(),
                                Quantity { string: s("500m") },
                            )]),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    volumes: vec![core::Volume {
                        name: s("config"),
                        volume_source: Some(core::VolumeSource {
                            config_map: Some(core::ConfigMapVolumeSource {
                                local_object_reference: Some(core::LocalObjectReference {
                                    name: s("settings"),
                                }),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                    }],
                    automount_service_account_token: Some(false), // *bool
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }),
        status: Some(apps::DeploymentStatus {
            replicas: Some(0),
            conditions: vec![apps::DeploymentCondition {
                r#type: s("Available"),
                status: s("True"),
                // A non-pointer Time, zero: `omitempty` never leaves a struct out.
                last_update_time: Some(meta::Time { seconds: None, nanos: None }),
                ..Default::default()
            }],
            ..Default::default()
        }),
    };
    let value = to_json(&body("apps/v1", "Deployment", &deployment)).unwrap();
    assert_eq!(
        value,
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            // creationTimestamp is `omitempty,omitzero` in v1.36.2: a zero one is
            // left out, not `null`.
            "metadata": { "name": "web" },
            "spec": {
                "replicas": 0,
                "selector": { "matchLabels": { "app": "web" } },
                "strategy": {},
                "template": {
                    "metadata": {},
                    "spec": {
                        "containers": [{
                            "name": "web",
                            "image": "nginx",
                            "ports": [{ "containerPort": 80, "protocol": "TCP" }],
                            "resources": { "limits": { "cpu": "500m" } },
                        }],
                        "volumes": [{ "name": "config", "configMap": { "name": "settings" } }],
                        "automountServiceAccountToken": false,
                    },
                },
            },
            "status": { "conditions": [{ "type": "Available", "status": "True",
                "lastUpdateTime": null }] },
        })
    );
}

#[test]
fn special_messages_take_their_json_forms() {
    let lease = coordination::Lease {
        metadata: Some(meta::ObjectMeta {
            creation_timestamp: Some(meta::Time { seconds: Some(1_700_000_000), nanos: Some(5) }),
            managed_fields: vec![meta::ManagedFieldsEntry {
                manager: s("kubectl"),
                fields_v1: Some(meta::FieldsV1 { raw: Some(br#"{"f:spec":{}}"#.to_vec()) }),
                ..Default::default()
            }],
            ..go_metadata("lock")
        }),
        spec: Some(coordination::LeaseSpec {
            holder_identity: s("a"),
            renew_time: Some(meta::MicroTime {
                seconds: Some(1_700_000_000),
                nanos: Some(123_456_789),
            }),
            ..Default::default()
        }),
    };
    let value = to_json(&body("coordination.k8s.io/v1", "Lease", &lease)).unwrap();
    assert_eq!(value["metadata"]["creationTimestamp"], json!("2023-11-14T22:13:20Z"));
    assert_eq!(value["metadata"]["managedFields"][0]["fieldsV1"], json!({ "f:spec": {} }));
    assert_eq!(value["spec"]["renewTime"], json!("2023-11-14T22:13:20.123456Z"));

    let port = |target: IntOrString| core::ServicePort {
        port: Some(80),
        target_port: Some(target),
        ..Default::default()
    };
    let service = core::Service {
        metadata: Some(go_metadata("svc")),
        spec: Some(core::ServiceSpec {
            ports: vec![
                port(IntOrString { r#type: Some(0), int_val: Some(8080), str_val: s("") }),
                port(IntOrString { r#type: Some(1), int_val: Some(0), str_val: s("http") }),
            ],
            ..Default::default()
        }),
        status: None,
    };
    let value = to_json(&body("v1", "Service", &service)).unwrap();
    assert_eq!(value["spec"]["ports"][0]["targetPort"], json!(8080));
    assert_eq!(value["spec"]["ports"][1]["targetPort"], json!("http"));

    let secret = core::Secret {
        metadata: Some(go_metadata("s")),
        data: BTreeMap::from([("pw".into(), b"hunter2".to_vec())]),
        r#type: s("Opaque"),
        ..Default::default()
    };
    let value = to_json(&body("v1", "Secret", &secret)).unwrap();
    assert_eq!(value["data"], json!({ "pw": "aHVudGVyMg==" }));
}

#[test]
fn json_encodes_to_the_message_it_came_from() {
    let configmap = core::ConfigMap {
        metadata: Some(meta::ObjectMeta {
            name: s("settings"),
            labels: BTreeMap::from([("a".into(), "b".into())]),
            ..Default::default()
        }),
        data: BTreeMap::from([("empty".into(), String::new()), ("level".into(), "1".into())]),
        binary_data: BTreeMap::from([("blob".into(), vec![0, 159, 146, 150])]),
        immutable: Some(false),
    };
    let value = to_json(&body("v1", "ConfigMap", &configmap)).unwrap();
    let encoded = from_json(&value).unwrap();
    let unknown = Unknown::decode(&encoded[4..]).unwrap();
    assert_eq!(unknown.type_meta.unwrap().kind.as_deref(), Some("ConfigMap"));
    assert_eq!(core::ConfigMap::decode(&unknown.raw.unwrap()[..]).unwrap(), configmap);
}

#[test]
fn bodies_that_do_not_decode_are_errors_and_custom_kinds_unknown() {
    assert_eq!(to_json(b"{\"kind\":\"ConfigMap\"}"), Err(Error::NotProtobuf));
    assert!(matches!(to_json(b"k8s\0\xff\xff\xff"), Err(Error::Malformed { .. })));
    let widget = body("example.com/v1", "Widget", &core::ConfigMap::default());
    let unknown =
        Error::UnknownKind { api_version: "example.com/v1".into(), kind: "Widget".into() };
    assert_eq!(to_json(&widget), Err(unknown.clone()));
    assert_eq!(
        from_json(&json!({ "apiVersion": "example.com/v1", "kind": "Widget" })),
        Err(unknown)
    );
    assert!(matches!(
        from_json(&json!({ "apiVersion": "v1", "kind": "ConfigMap", "data": [1] })),
        Err(Error::Json(_))
    ));
}

#[test]
fn durations_are_written_and_read_as_go_does() {
    for (nanos, text) in [
        (0, "0s"),
        (1_500, "1.5µs"),
        (150_000_000, "150ms"),
        (1_500_000_000, "1.5s"),
        (3_723_000_000_000, "1h2m3s"),
        (-90_000_000_000, "-1m30s"),
    ] {
        assert_eq!(go::duration(nanos), text);
        assert_eq!(go::parse_duration(text), Some(nanos), "{text}");
    }
    assert_eq!(go::parse_duration("5 parsecs"), None);
}

#[test]
fn every_rule_names_a_field_of_the_vendored_messages() {
    for name in CODEC.rules.keys() {
        let (message, field) = name.rsplit_once('.').unwrap();
        let message = CODEC.pool.get_message_by_name(message).unwrap_or_else(|| panic!("{name}"));
        let field = message.get_field_by_name(field).unwrap_or_else(|| panic!("{name}"));
        // omitzero is read for scalars and for Time and MicroTime (their IsZero) only.
        if CODEC.rules[name].omitzero
            && let Some(inner) = field.kind().as_message()
        {
            let form = crate::schema::special(inner.full_name());
            assert!(
                matches!(form, Some(Special::Time | Special::MicroTime)),
                "{name}: omitzero on a message whose zero is not read"
            );
        }
    }
    assert!(CODEC.rules.len() > 500, "go-json.txt was read");
    assert!(CODEC.rules.values().any(|r| r.omitzero), "omitzero rules were read");
}
