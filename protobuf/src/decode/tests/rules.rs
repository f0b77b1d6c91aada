//! Go's JSON rules, case by case, on bodies as Go writes them (k8s-pb's types: every
//! non-pointer field on the wire).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
    JSONSchemaPropsOrStringArray,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as OpenApiQuantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString as OpenApiIntOrString;
use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::RawExtension;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use super::{agree, crd, options};
use crate::from_slice;
use crate::transcode::tests::{body, go_metadata, s};
use crate::transcode::{from_json, to_json};

#[test]
fn empty_non_pointer_fields_are_left_out_and_pointer_zeros_kept() {
    let deployment = apps::Deployment {
        metadata: Some(go_metadata("web")),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0), // *int32: an explicit zero
            min_ready_seconds: Some(0),
            paused: Some(false),
            ..Default::default()
        }),
        status: Some(apps::DeploymentStatus {
            conditions: vec![apps::DeploymentCondition {
                r#type: s("Available"),
                last_update_time: Some(meta::Time { seconds: None, nanos: None }),
                ..Default::default()
            }],
            ..Default::default()
        }),
    };
    let body = body("apps/v1", "Deployment", &deployment);
    agree::<Deployment>(&body);
    let decoded: Deployment = from_slice(&body, &options()).unwrap();
    assert_eq!(decoded.metadata.namespace, None, "namespace \"\" is omitempty");
    assert_eq!(decoded.metadata.creation_timestamp, None, "the zero time is null");
    let value: serde_json::Value = from_slice(&body, &options()).unwrap();
    // omitempty never leaves out a struct: a zero Time is `null`; creationTimestamp is also
    // omitzero in v1.36.2, which leaves it out.
    assert_eq!(value["metadata"], json!({ "name": "web" }));
    assert_eq!(value["status"]["conditions"][0]["lastUpdateTime"], serde_json::Value::Null);
    assert!(value["status"]["conditions"][0].get("lastUpdateTime").is_some());
    let spec = decoded.spec;
    assert_eq!(spec.replicas, Some(0));
    assert_eq!((spec.min_ready_seconds, spec.paused), (None, None));
}

#[test]
fn inline_fields_are_flattened_into_their_parent() {
    let pod = core::Pod {
        metadata: Some(go_metadata("p")),
        spec: Some(core::PodSpec {
            volumes: vec![core::Volume {
                name: s("config"),
                volume_source: Some(core::VolumeSource {
                    config_map: Some(core::ConfigMapVolumeSource {
                        local_object_reference: Some(core::LocalObjectReference {
                            name: s("settings"),
                        }),
                        default_mode: Some(420),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }],
            ..Default::default()
        }),
        status: None,
    };
    let body = body("v1", "Pod", &pod);
    agree::<Pod>(&body);
    let decoded: Pod = from_slice(&body, &options()).unwrap();
    let volume = &decoded.spec.unwrap().volumes.unwrap()[0];
    let config_map = volume.config_map.as_ref().unwrap();
    assert_eq!((volume.name.as_str(), config_map.name.as_str()), ("config", "settings"));
    assert_eq!(config_map.default_mode, Some(420));
}

#[test]
fn times_quantities_and_int_or_strings_take_their_json_forms() {
    let mut metadata = go_metadata("svc");
    metadata.creation_timestamp = Some(meta::Time { seconds: Some(1_700_000_000), nanos: Some(9) });
    let port = |target: IntOrString| core::ServicePort {
        port: Some(80),
        target_port: Some(target),
        ..Default::default()
    };
    let service = core::Service {
        metadata: Some(metadata),
        spec: Some(core::ServiceSpec {
            ports: vec![
                port(IntOrString { r#type: Some(0), int_val: Some(8080), str_val: s("") }),
                port(IntOrString { r#type: Some(1), int_val: Some(0), str_val: s("http") }),
                // A non-pointer IntOrString with omitempty, Int 0: Go writes `targetPort: 0`.
                port(IntOrString { r#type: Some(0), int_val: Some(0), str_val: s("") }),
            ],
            ..Default::default()
        }),
        status: None,
    };
    let service = body("v1", "Service", &service);
    agree::<Service>(&service);
    let decoded: Service = from_slice(&service, &options()).unwrap();
    let created = decoded.metadata.creation_timestamp.unwrap();
    assert_eq!(created.0.to_string(), "2023-11-14T22:13:20Z", "seconds only, as Go keeps");
    let ports = decoded.spec.unwrap().ports.unwrap();
    assert_eq!(ports[0].target_port, Some(OpenApiIntOrString::Int(8080)));
    assert_eq!(ports[1].target_port, Some(OpenApiIntOrString::String("http".into())));
    assert_eq!(ports[2].target_port, Some(OpenApiIntOrString::Int(0)));
    assert_eq!(to_json(&service).unwrap()["spec"]["ports"][2]["targetPort"], json!(0));

    let pod = core::Pod {
        metadata: Some(go_metadata("p")),
        spec: Some(core::PodSpec {
            containers: vec![core::Container {
                name: s("c"),
                resources: Some(core::ResourceRequirements {
                    limits: BTreeMap::from([("cpu".into(), Quantity { string: s("500m") })]),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let body = body("v1", "Pod", &pod);
    agree::<Pod>(&body);
    let decoded: Pod = from_slice(&body, &options()).unwrap();
    let limits = decoded.spec.unwrap().containers[0].resources.clone().unwrap().limits.unwrap();
    assert_eq!(limits["cpu"], OpenApiQuantity("500m".into()));
}

#[test]
fn secret_data_is_bytes_as_base64_reads_them() {
    let secret = core::Secret {
        metadata: Some(go_metadata("s")),
        data: BTreeMap::from([("pw".into(), b"hunter2".to_vec()), ("empty".into(), vec![])]),
        r#type: s("Opaque"),
        ..Default::default()
    };
    let body = body("v1", "Secret", &secret);
    agree::<Secret>(&body);
    let decoded: Secret = from_slice(&body, &options()).unwrap();
    let data = decoded.data.unwrap();
    assert_eq!(data["pw"], ByteString(b"hunter2".to_vec()));
    assert_eq!(data["empty"], ByteString(vec![]));
}

#[test]
fn raw_extensions_hold_embedded_json_or_an_embedded_object() {
    let revision = |raw: Vec<u8>| {
        body(
            "apps/v1",
            "ControllerRevision",
            &apps::ControllerRevision {
                metadata: Some(go_metadata("r")),
                data: Some(RawExtension { raw: Some(raw) }),
                revision: Some(2),
            },
        )
    };
    let nested = revision(br#"{"a":[1,{"b":null,"c":"\u00e9"}],"d":2.5}"#.to_vec());
    agree::<ControllerRevision>(&nested);
    let decoded: ControllerRevision = from_slice(&nested, &options()).unwrap();
    assert_eq!(decoded.data.0, json!({ "a": [1, { "b": null, "c": "é" }], "d": 2.5 }));

    let config_map = json!({ "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "inner" }, "data": { "k": "v" } });
    let embedded = revision(from_json(&config_map).unwrap());
    agree::<ControllerRevision>(&embedded);
    let decoded: ControllerRevision = from_slice(&embedded, &options()).unwrap();
    assert_eq!(decoded.data.0, config_map);

    // omitempty on a RawExtension, a Go struct: never left out, so `false`, `0` and `""`
    // are kept, as Go writes them.
    for zero in [json!(false), json!(0), json!("")] {
        let body = revision(zero.to_string().into_bytes());
        agree::<ControllerRevision>(&body);
        let decoded: ControllerRevision = from_slice(&body, &options()).unwrap();
        assert_eq!(decoded.data.0, zero);
        assert_eq!(to_json(&body).unwrap()["data"], zero, "the transcoder");
        let value: serde_json::Value = from_slice(&body, &options()).unwrap();
        assert_eq!(value["data"], zero);
    }
    assert!(from_slice::<ControllerRevision>(&revision(b"{\"a\":".to_vec()), &options()).is_err());
}

#[test]
fn crd_schemas_take_the_or_forms() {
    let body = from_json(&crd()).unwrap();
    agree::<CustomResourceDefinition>(&body);
    let decoded: CustomResourceDefinition = from_slice(&body, &options()).unwrap();
    let schema = decoded.spec.versions[0].schema.clone().unwrap().open_api_v3_schema.unwrap();
    let spec = &schema.properties.unwrap()["spec"];
    let properties = spec.properties.as_ref().unwrap();
    assert!(
        matches!(properties["tuple"].items, Some(JSONSchemaPropsOrArray::Schemas(ref s)) if s.len() == 2)
    );
    assert!(matches!(properties["list"].items, Some(JSONSchemaPropsOrArray::Schema(_))));
    assert_eq!(properties["free"].additional_properties, Some(JSONSchemaPropsOrBool::Bool(true)));
    assert_eq!(
        properties["closed"].additional_properties,
        Some(JSONSchemaPropsOrBool::Bool(false))
    );
    assert!(matches!(
        properties["typed"].additional_properties,
        Some(JSONSchemaPropsOrBool::Schema(_))
    ));
    let dependencies = spec.dependencies.as_ref().unwrap();
    assert_eq!(
        dependencies["a"],
        JSONSchemaPropsOrStringArray::Strings(vec!["b".into(), "c".into()])
    );
    assert!(matches!(dependencies["d"], JSONSchemaPropsOrStringArray::Schema(_)));
    assert_eq!(properties["size"].default.as_ref().unwrap().0, json!(1));
    assert_eq!(properties["size"].maximum, Some(10.5));
    assert_eq!(spec.x_kubernetes_preserve_unknown_fields, Some(true));
}
