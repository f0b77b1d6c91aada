//! Realistic objects for benchmarks and load tests.

use serde_json::{Value, json};

/// A pod as a real cluster serves it: labels, annotations, an owner, two containers with
/// env, resources, ports, probes and volume mounts, volumes, tolerations, and a running
/// status with conditions. About 3 KB of JSON; with `managed_fields`, about 5 KB, much of it
/// `managedFields`, as kube-apiserver returns pods written by several managers.
pub fn realistic_pod(namespace: &str, index: usize, managed_fields: bool) -> Value {
    let name = format!("web-{index:06}");
    let hash = format!("{:010x}", (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 24);
    let container = |name: &str, image: &str, port: u16| {
        let mut c = json!({
            "name": name,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "ports": [{ "name": "http", "containerPort": port, "protocol": "TCP" }],
            "env": [
                { "name": "POD_NAME", "valueFrom": { "fieldRef": { "apiVersion": "v1", "fieldPath": "metadata.name" } } },
                { "name": "POD_NAMESPACE", "valueFrom": { "fieldRef": { "apiVersion": "v1", "fieldPath": "metadata.namespace" } } },
                { "name": "LOG_LEVEL", "value": "info" }
            ],
            "resources": {
                "limits": { "cpu": "500m", "memory": "256Mi" },
                "requests": { "cpu": "100m", "memory": "128Mi" }
            },
            "readinessProbe": {
                "httpGet": { "path": "/healthz", "port": port, "scheme": "HTTP" },
                "periodSeconds": 10, "failureThreshold": 3
            },
            "volumeMounts": [
                { "name": "config", "mountPath": "/etc/app", "readOnly": true },
                { "name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true }
            ],
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File"
        });
        if port != 8080 {
            // The sidecar: no probe, no upstream.
            let c = c.as_object_mut().expect("an object");
            c.remove("readinessProbe");
            c["env"].as_array_mut().expect("a list").truncate(2);
        }
        c
    };
    let condition = |kind: &str| json!({ "type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-01-01T00:00:00Z" });
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "generateName": format!("web-{hash}-"),
            "labels": {
                "app.kubernetes.io/name": "web",
                "app.kubernetes.io/instance": "web-prod",
                "app.kubernetes.io/version": "1.25.3",
                "pod-template-hash": hash,
                "tier": "frontend"
            },
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090"
            },
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("web-{hash}"),
                "uid": format!("6f1c2a34-{:04x}-4c1e-9d2b-{:012x}", index % 0xffff, index),
                "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "containers": [container("web", "nginx:1.25.3", 8080), container("metrics", "prom/exporter:0.15.0", 9090)],
            "volumes": [
                { "name": "config", "configMap": { "name": "web-config", "defaultMode": 420 } },
                { "name": "kube-api-access", "projected": { "defaultMode": 420, "sources": [
                    { "serviceAccountToken": { "expirationSeconds": 3607, "path": "token" } },
                    { "configMap": { "name": "kube-root-ca.crt", "items": [{ "key": "ca.crt", "path": "ca.crt" }] } }
                ] } }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "web",
            "nodeName": format!("node-{:03}", index % 100),
            "schedulerName": "default-scheduler",
            "tolerations": [
                { "key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 }
            ],
            "priority": 0,
            "enableServiceLinks": true
        },
        "status": {
            "phase": "Running",
            "conditions": [condition("Initialized"), condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
            "hostIP": format!("10.0.{}.{}", index / 250 % 250, index % 250),
            "podIP": format!("10.244.{}.{}", index / 250 % 250, index % 250),
            "startTime": "2026-01-01T00:00:00Z",
            "qosClass": "Burstable"
        }
    });
    if managed_fields {
        pod["metadata"]["managedFields"] = managed_fields_for(&pod);
    }
    pod
}

/// `managedFields` entries as the real server writes them: a fieldsV1 tree per manager.
fn managed_fields_for(pod: &Value) -> Value {
    fn fields_v1(value: &Value) -> Value {
        match value {
            Value::Object(m) => {
                Value::Object(m.iter().map(|(k, v)| (format!("f:{k}"), fields_v1(v))).collect())
            }
            Value::Array(items) => {
                let mut out = serde_json::Map::new();
                for (i, item) in items.iter().enumerate() {
                    let key = match item.get("name").and_then(Value::as_str) {
                        Some(name) => format!("k:{{\"name\":\"{name}\"}}"),
                        None => format!("i:{i}"),
                    };
                    out.insert(key, fields_v1(item));
                }
                out.insert(".".into(), json!({}));
                Value::Object(out)
            }
            _ => json!({}),
        }
    }
    json!([
        {
            "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
            "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {
                    "f:labels": fields_v1(&pod["metadata"]["labels"]),
                    "f:ownerReferences": fields_v1(&pod["metadata"]["ownerReferences"])
                },
                "f:spec": { "f:containers": fields_v1(&pod["spec"]["containers"]) }
            }
        },
        {
            "manager": "kubelet", "operation": "Update", "apiVersion": "v1",
            "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "subresource": "status",
            "fieldsV1": { "f:status": fields_v1(&pod["status"]) }
        }
    ])
}
