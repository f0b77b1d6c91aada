//! The deserializer against the transcoder: `from_slice::<T>(body)` ==
//! `from_value::<T>(to_json(body))`, kind by kind, for bodies as `from_json` writes them and
//! as Go writes them (every `omitempty` field on the wire, empty or not); the Go rules by
//! name; and the failure cases.

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Namespace, Node, PersistentVolumeClaim, Pod, Secret, Service,
    ServiceAccount,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use prost_reflect::prost::Message as _;
use prost_reflect::{DynamicMessage, ReflectMessage as _, Value as Proto};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::schema::rule;
use crate::transcode::{from_json, to_json};
use crate::{DecodeOptions, from_slice};

fn options() -> DecodeOptions {
    DecodeOptions::default()
}

/// The body `from_json` writes, and the same object as Go writes it (every `omitempty`
/// scalar on the wire even when empty).
fn bodies(object: &Value) -> [Vec<u8>; 2] {
    let body = from_json(object).unwrap_or_else(|e| panic!("{e}: {object}"));
    let go = go_like(&body);
    [body, go]
}

/// `body` with every unset `omitempty` scalar field set to its zero, as Go's marshaller
/// writes non-pointer fields.
pub(super) fn go_like(body: &[u8]) -> Vec<u8> {
    fn fill(message: &mut DynamicMessage) {
        for field in message.descriptor().fields() {
            let omitempty = rule(field.full_name()).is_some_and(|r| r.omitempty);
            let scalar = field.kind().as_message().is_none() && !field.is_list() && !field.is_map();
            if omitempty && scalar && !message.has_field(&field) {
                message.set_field(&field, Proto::default_value_for_field(&field));
            }
            if !message.has_field(&field) {
                continue;
            }
            match message.get_field_mut(&field) {
                Proto::Message(inner) => fill(inner),
                Proto::List(items) => items.iter_mut().for_each(|item| {
                    if let Proto::Message(inner) = item {
                        fill(inner)
                    }
                }),
                Proto::Map(entries) => entries.values_mut().for_each(|value| {
                    if let Proto::Message(inner) = value {
                        fill(inner)
                    }
                }),
                _ => {}
            }
        }
    }
    let envelope = crate::envelope(body).unwrap();
    let descriptor = crate::schema::message_for(envelope.api_version, envelope.kind).unwrap();
    let mut message = DynamicMessage::decode(descriptor, envelope.raw).unwrap();
    fill(&mut message);
    crate::transcode::envelope_for_tests(
        envelope.api_version,
        envelope.kind,
        message.encode_to_vec(),
    )
}

/// The deserializer and the transcoder + serde_json agree on `body`, typed and as JSON.
fn agree<T: DeserializeOwned + PartialEq + Debug>(body: &[u8]) {
    let json = to_json(body).unwrap();
    let expected: T =
        serde_json::from_value(json.clone()).unwrap_or_else(|e| panic!("{e}: {json}"));
    let typed: T = from_slice(body, &options()).unwrap();
    assert_eq!(typed, expected);
    let value: Value = from_slice(body, &options()).unwrap();
    assert_eq!(value, json);
}

fn check<T: DeserializeOwned + PartialEq + Debug>(object: Value) {
    for body in bodies(&object) {
        agree::<T>(&body);
    }
}

fn meta(name: &str) -> Value {
    json!({ "name": name, "namespace": "default", "uid": "u-1", "resourceVersion": "7",
            "creationTimestamp": "2026-01-01T00:00:00Z", "labels": { "app": "web" } })
}

#[test]
fn every_kind_decodes_as_its_json_does() {
    check::<Pod>(ctrlkit_apiserver::fixtures::realistic_pod("default", 7, false));
    check::<Pod>(ctrlkit_apiserver::fixtures::realistic_pod("default", 8, true));
    check::<ConfigMap>(json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("c"),
        "data": { "a": "1", "empty": "" }, "binaryData": { "b": "AAEC" }, "immutable": false }));
    check::<Secret>(json!({ "apiVersion": "v1", "kind": "Secret", "metadata": meta("s"),
        "type": "Opaque", "data": { "pw": "aHVudGVyMg==" }, "stringData": { "x": "y" } }));
    check::<Service>(json!({ "apiVersion": "v1", "kind": "Service", "metadata": meta("svc"),
        "spec": { "type": "ClusterIP", "clusterIP": "10.0.0.1", "selector": { "app": "web" },
            "ports": [{ "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" },
                      { "name": "h2", "port": 81, "targetPort": "h2" }],
            "sessionAffinityConfig": { "clientIP": { "timeoutSeconds": 0 } } } }));
    check::<Deployment>(
        json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("d"),
        "spec": { "replicas": 0, "selector": { "matchLabels": { "app": "web" },
                "matchExpressions": [{ "key": "tier", "operator": "In", "values": ["a", "b"] }] },
            "strategy": { "type": "RollingUpdate", "rollingUpdate": { "maxSurge": "25%", "maxUnavailable": 0 } },
            "template": { "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "nginx",
                    "resources": { "limits": { "cpu": "0.5", "memory": "1Gi" } } }] } } },
        "status": { "replicas": 3, "conditions": [{ "type": "Available", "status": "True",
            "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:01Z" }] } }),
    );
    check::<StatefulSet>(
        json!({ "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("st"),
        "spec": { "serviceName": "st", "selector": { "matchLabels": { "a": "b" } },
            "template": { "spec": { "containers": [{ "name": "c", "image": "i" }] } },
            "volumeClaimTemplates": [{ "metadata": { "name": "data" }, "spec": {
                "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "1Gi" } } } }] } }),
    );
    check::<DaemonSet>(
        json!({ "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta("ds"),
        "spec": { "selector": {}, "template": { "spec": { "containers": [] } } },
        "status": { "currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0, "numberReady": 0 } }),
    );
    check::<ReplicaSet>(
        json!({ "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta("rs"),
        "spec": { "replicas": 2, "selector": { "matchLabels": { "a": "b" } } }, "status": { "replicas": 2 } }),
    );
    check::<Job>(json!({ "apiVersion": "batch/v1", "kind": "Job", "metadata": meta("j"),
        "spec": { "backoffLimit": 0, "template": { "spec": { "restartPolicy": "Never",
            "containers": [{ "name": "c", "image": "i", "command": ["sh", "-c", "true"] }] } } },
        "status": { "startTime": "2026-01-01T00:00:00Z", "succeeded": 1 } }));
    check::<CronJob>(json!({ "apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta("cj"),
        "spec": { "schedule": "*/5 * * * *", "suspend": false, "jobTemplate": { "spec": {
            "template": { "spec": { "containers": [{ "name": "c", "image": "i" }] } } } } } }));
    check::<Lease>(
        json!({ "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta("l"),
        "spec": { "holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 0,
            "acquireTime": "2026-01-01T00:00:00.123456Z", "renewTime": "2026-01-01T00:00:01.000001Z" } }),
    );
    check::<Event>(
        json!({ "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": meta("e"),
        "eventTime": "2026-01-01T00:00:00.500000Z", "reason": "Started", "action": "Start",
        "regarding": { "kind": "Pod", "name": "p", "namespace": "default" }, "type": "Normal",
        "reportingController": "c", "reportingInstance": "i", "note": "n" }),
    );
    check::<Namespace>(
        json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "ns" },
        "spec": { "finalizers": ["kubernetes"] }, "status": { "phase": "Active" } }),
    );
    check::<Node>(json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": "n" },
        "spec": { "podCIDR": "10.0.0.0/24", "taints": [{ "key": "k", "effect": "NoSchedule" }] },
        "status": { "capacity": { "cpu": "4", "memory": "16Gi", "pods": "110" },
            "addresses": [{ "type": "InternalIP", "address": "10.0.0.2" }],
            "conditions": [{ "type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z" }],
            "daemonEndpoints": { "kubeletEndpoint": { "Port": 10250 } },
            "nodeInfo": { "machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "k",
                "osImage": "o", "containerRuntimeVersion": "c", "kubeletVersion": "v", "kubeProxyVersion": "",
                "operatingSystem": "linux", "architecture": "amd64" } } }));
    check::<PersistentVolumeClaim>(
        json!({ "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta("pvc"),
        "spec": { "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "5Gi" } },
            "storageClassName": "" } }),
    );
    check::<ServiceAccount>(
        json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("sa"),
        "secrets": [{ "name": "t" }], "automountServiceAccountToken": false }),
    );
    check::<Endpoints>(json!({ "apiVersion": "v1", "kind": "Endpoints", "metadata": meta("ep"),
        "subsets": [{ "addresses": [{ "ip": "10.0.0.3", "targetRef": { "kind": "Pod", "name": "p" } }],
            "ports": [{ "port": 80, "protocol": "TCP" }] }] }));
    check::<HorizontalPodAutoscaler>(
        json!({ "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": meta("hpa"), "spec": { "scaleTargetRef": { "kind": "Deployment", "name": "d", "apiVersion": "apps/v1" },
            "minReplicas": 1, "maxReplicas": 5, "targetCPUUtilizationPercentage": 80 },
        "status": { "currentReplicas": 1, "desiredReplicas": 1 } }),
    );
    check::<CustomResourceDefinition>(crd());
    check::<Status>(
        json!({ "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
        "message": "pods \"x\" not found", "reason": "NotFound",
        "details": { "name": "x", "kind": "pods" }, "code": 404 }),
    );
    check::<k8s_openapi::List<Pod>>(json!({ "apiVersion": "v1", "kind": "PodList",
        "metadata": { "resourceVersion": "12", "continue": "abc", "remainingItemCount": 3 },
        "items": [ctrlkit_apiserver::fixtures::realistic_pod("a", 1, true),
                  ctrlkit_apiserver::fixtures::realistic_pod("b", 2, false)] }));
}

/// A CRD whose schema has every special form: `JSONSchemaPropsOrArray` (a schema and a list),
/// `…OrBool` (a bool and a schema), `…OrStringArray` (a list), `JSON` (defaults, enums).
fn crd() -> Value {
    json!({ "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.example.com" },
        "spec": { "group": "example.com", "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList" },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "additionalPrinterColumns": [{ "name": "Size", "type": "integer", "jsonPath": ".spec.size" }],
                "schema": { "openAPIV3Schema": { "type": "object", "properties": {
                    "spec": { "type": "object", "required": ["size"],
                        "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {
                            "size": { "type": "integer", "minimum": 0, "maximum": 10.5, "default": 1 },
                            "mode": { "type": "string", "enum": ["a", "b", null] },
                            "tuple": { "type": "array", "items": [{ "type": "string" }, { "type": "integer" }] },
                            "list": { "type": "array", "items": { "type": "string" } },
                            "free": { "type": "object", "additionalProperties": true },
                            "typed": { "type": "object", "additionalProperties": { "type": "string" } },
                            "closed": { "type": "object", "additionalProperties": false }
                        },
                        "dependencies": { "a": ["b", "c"], "d": { "required": ["e"] } } } } } },
                "subresources": { "status": {} } }] },
        "status": { "acceptedNames": { "plural": "widgets", "kind": "Widget" }, "storedVersions": ["v1"],
            "conditions": [{ "type": "Established", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z" }] } })
}

mod groups;
mod limits;
mod parts;
mod rules;
mod small;
mod unknown;

mod generated {
    //! Objects made of random parts (empty strings, zeros, unicode, optional fields), each
    //! decoded both ways.

    use std::collections::BTreeMap;

    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use proptest::collection::{btree_map, vec};
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::check;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), "[a-z]{1,8}", "\\PC{0,6}"]
    }

    fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
        btree_map(text(), text(), 0..4)
    }

    fn metadata() -> impl Strategy<Value = Value> {
        ("[a-z]{1,10}", text(), labels(), proptest::option::of(0i64..3), any::<bool>()).prop_map(
            |(name, namespace, labels, generation, created)| {
                let mut m = json!({ "name": name, "namespace": namespace, "labels": labels });
                if let Some(g) = generation {
                    m["generation"] = json!(g);
                }
                if created {
                    m["creationTimestamp"] = json!("2026-01-02T03:04:05Z");
                }
                m
            },
        )
    }

    fn port() -> impl Strategy<Value = Value> {
        prop_oneof![(0i32..65535).prop_map(|n| json!(n)), "[a-z]{0,5}".prop_map(|s| json!(s))]
    }

    fn container() -> impl Strategy<Value = Value> {
        (text(), text(), vec(0i32..70_000, 0..3), any::<bool>(), port(), labels()).prop_map(
            |(name, image, ports, tty, probe, env)| {
                json!({ "name": name, "image": image, "tty": tty,
                    "ports": ports.iter().map(|p| json!({ "containerPort": p })).collect::<Vec<_>>(),
                    "env": env.iter().map(|(k, v)| json!({ "name": k, "value": v })).collect::<Vec<_>>(),
                    "livenessProbe": { "httpGet": { "port": probe } },
                    "resources": { "requests": { "cpu": "100m" } } })
            },
        )
    }

    fn schema() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(json!({ "type": "string" })),
            Just(json!({ "type": "integer", "minimum": 0 })),
            Just(json!({ "x-kubernetes-preserve-unknown-fields": true })),
        ];
        leaf.prop_recursive(4, 16, 3, |inner| {
            prop_oneof![
                btree_map("[a-z]{1,4}", inner.clone(), 0..3)
                    .prop_map(|p| json!({ "type": "object", "properties": p })),
                inner.clone().prop_map(|i| json!({ "type": "array", "items": i })),
                vec(inner.clone(), 1..3).prop_map(|i| json!({ "type": "array", "items": i })),
                any::<bool>().prop_map(|b| json!({ "type": "object", "additionalProperties": b })),
                inner.prop_map(|i| json!({ "type": "object", "additionalProperties": i })),
            ]
        })
    }

    fn rule() -> impl Strategy<Value = Value> {
        (vec(text(), 0..3), vec(text(), 0..3), vec(text(), 0..3))
            .prop_map(|(g, r, v)| json!({ "apiGroups": g, "resources": r, "verbs": v }))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn generated_objects_of_the_other_groups_decode_as_their_json_does(
            meta in metadata(),
            rules in vec(rule(), 0..3),
            ports in vec((port(), proptest::option::of(0i32..3)), 0..3),
            min_available in proptest::option::of(port()),
            parameters in labels(),
        ) {
            use k8s_openapi::api::{networking, policy, rbac, storage};
            check::<rbac::v1::Role>(json!({ "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role", "metadata": meta, "rules": rules }));
            let ports: Vec<_> = ports.iter().map(|(port, end)| {
                let mut p = json!({ "port": port });
                if let Some(end) = end {
                    p["endPort"] = json!(end);
                }
                p
            }).collect();
            check::<networking::v1::NetworkPolicy>(json!({ "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy", "metadata": meta,
                "spec": { "podSelector": {}, "ingress": [{ "ports": ports }] } }));
            let mut spec = json!({ "selector": { "matchLabels": parameters } });
            if let Some(min) = min_available {
                spec["minAvailable"] = min;
            }
            check::<policy::v1::PodDisruptionBudget>(json!({ "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget", "metadata": meta, "spec": spec }));
            check::<storage::v1::StorageClass>(json!({ "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass", "metadata": meta, "provisioner": "p",
                "parameters": parameters }));
        }

        #[test]
        fn generated_objects_decode_as_their_json_does(
            meta in metadata(),
            containers in vec(container(), 0..3),
            replicas in proptest::option::of(0i32..3),
            data in labels(),
            bytes in btree_map("[a-z]{1,5}", vec(any::<u8>(), 0..8), 0..3),
            schema in schema(),
        ) {
            check::<Pod>(json!({ "apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": { "containers": containers } }));
            let mut spec = json!({ "selector": { "matchLabels": data },
                "template": { "spec": { "containers": containers } } });
            if let Some(r) = replicas {
                spec["replicas"] = json!(r);
            }
            check::<Deployment>(json!({ "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": meta, "spec": spec }));
            check::<ConfigMap>(json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                "data": data }));
            use base64::Engine as _;
            let encoded: BTreeMap<_, _> = bytes.iter()
                .map(|(k, v)| (k.clone(), base64::engine::general_purpose::STANDARD.encode(v)))
                .collect();
            check::<Secret>(json!({ "apiVersion": "v1", "kind": "Secret", "metadata": meta,
                "data": encoded }));
            check::<CustomResourceDefinition>(json!({ "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition", "metadata": { "name": "a.b" },
                "spec": { "group": "b", "scope": "Namespaced",
                    "names": { "plural": "a", "kind": "A" },
                    "versions": [{ "name": "v1", "served": true, "storage": true,
                        "schema": { "openAPIV3Schema": schema } }] } }));
        }
    }
}
