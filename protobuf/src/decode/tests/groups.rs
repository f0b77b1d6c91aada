//! The groups vendored beyond core, apps, batch, coordination, events, autoscaling v1 and
//! apiextensions: every kind k8s-openapi has a type for decodes as its JSON does, bare and
//! with realistic content (Go rules of their own: IntOrString ports, Quantities, bytes,
//! inline fields, pointer zeros).

use k8s_openapi::Resource;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{check, meta};
use crate::has_message;

/// A bare object of `T`: its kind's message is found, and its metadata decodes.
fn bare<T: Resource + DeserializeOwned + PartialEq + std::fmt::Debug>() {
    assert!(has_message(T::API_VERSION, T::KIND), "{} {}", T::API_VERSION, T::KIND);
    check::<T>(json!({ "apiVersion": T::API_VERSION, "kind": T::KIND, "metadata": meta("x") }));
}

macro_rules! bare {
    ($($ty:ty,)*) => {
        /// The kinds with a message here, of the groups vendored for client-go's protobuf
        /// reads (k8s-openapi 0.29's latest types that v1.36.2 has a message for).
        #[test]
        fn every_kind_of_the_other_groups_has_its_message() {
            $(bare::<$ty>();)*
        }
    };
}

bare! {
        k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicy,
        k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicyBinding,
        k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
        k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy,
        k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
        k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
        k8s_openapi::api::admissionregistration::v1beta1::MutatingAdmissionPolicy,
        k8s_openapi::api::admissionregistration::v1beta1::MutatingAdmissionPolicyBinding,
        k8s_openapi::api::apiserverinternal::v1alpha1::StorageVersion,
        k8s_openapi::api::authentication::v1::SelfSubjectReview,
        k8s_openapi::api::authentication::v1::TokenRequest,
        k8s_openapi::api::authentication::v1::TokenReview,
        k8s_openapi::api::authorization::v1::LocalSubjectAccessReview,
        k8s_openapi::api::authorization::v1::SelfSubjectAccessReview,
        k8s_openapi::api::authorization::v1::SelfSubjectRulesReview,
        k8s_openapi::api::authorization::v1::SubjectAccessReview,
        k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler,
        k8s_openapi::api::certificates::v1::CertificateSigningRequest,
        k8s_openapi::api::certificates::v1beta1::ClusterTrustBundle,
        k8s_openapi::api::certificates::v1beta1::PodCertificateRequest,
        k8s_openapi::api::coordination::v1beta1::LeaseCandidate,
        k8s_openapi::api::discovery::v1::EndpointSlice,
        k8s_openapi::api::flowcontrol::v1::FlowSchema,
        k8s_openapi::api::flowcontrol::v1::PriorityLevelConfiguration,
        k8s_openapi::api::networking::v1::Ingress,
        k8s_openapi::api::networking::v1::IngressClass,
        k8s_openapi::api::networking::v1::IPAddress,
        k8s_openapi::api::networking::v1::NetworkPolicy,
        k8s_openapi::api::networking::v1::ServiceCIDR,
        k8s_openapi::api::node::v1::RuntimeClass,
        k8s_openapi::api::policy::v1::Eviction,
        k8s_openapi::api::policy::v1::PodDisruptionBudget,
        k8s_openapi::api::rbac::v1::ClusterRole,
        k8s_openapi::api::rbac::v1::ClusterRoleBinding,
        k8s_openapi::api::rbac::v1::Role,
        k8s_openapi::api::rbac::v1::RoleBinding,
        k8s_openapi::api::resource::v1::DeviceClass,
        k8s_openapi::api::resource::v1::ResourceClaim,
        k8s_openapi::api::resource::v1::ResourceClaimTemplate,
        k8s_openapi::api::resource::v1::ResourceSlice,
        k8s_openapi::api::resource::v1beta1::DeviceClass,
        k8s_openapi::api::resource::v1beta1::ResourceClaim,
        k8s_openapi::api::resource::v1beta1::ResourceClaimTemplate,
        k8s_openapi::api::resource::v1beta1::ResourceSlice,
        k8s_openapi::api::resource::v1beta2::DeviceClass,
        k8s_openapi::api::resource::v1beta2::DeviceTaintRule,
        k8s_openapi::api::resource::v1beta2::ResourceClaim,
        k8s_openapi::api::resource::v1beta2::ResourceClaimTemplate,
        k8s_openapi::api::resource::v1beta2::ResourceSlice,
        k8s_openapi::api::scheduling::v1::PriorityClass,
        k8s_openapi::api::storage::v1::CSIDriver,
        k8s_openapi::api::storage::v1::CSINode,
        k8s_openapi::api::storage::v1::CSIStorageCapacity,
        k8s_openapi::api::storage::v1::StorageClass,
        k8s_openapi::api::storage::v1::VolumeAttachment,
        k8s_openapi::api::storage::v1::VolumeAttributesClass,
        k8s_openapi::api::storagemigration::v1beta1::StorageVersionMigration,
}

#[test]
fn kinds_newer_than_the_vendored_protos_have_none() {
    // Kubernetes 1.37's, which k8s-openapi's latest has: read in JSON.
    assert!(!has_message("certificates.k8s.io/v1", "PodCertificateRequest"));
    assert!(!has_message("scheduling.k8s.io/v1beta1", "Workload"));
    assert!(!has_message("rbac.authorization.k8s.io/v2", "Role"), "a version not vendored");
}

fn object(api_version: &str, kind: &str, rest: Value) -> Value {
    let mut object = json!({ "apiVersion": api_version, "kind": kind, "metadata": meta("o") });
    object.as_object_mut().unwrap().extend(rest.as_object().unwrap().clone());
    object
}

#[test]
fn objects_of_the_other_groups_decode_as_their_json_does() {
    use k8s_openapi::api::{
        admissionregistration, autoscaling, certificates, discovery, flowcontrol, networking, node,
        policy, rbac, resource, scheduling, storage,
    };
    check::<rbac::v1::Role>(object(
        "rbac.authorization.k8s.io/v1",
        "Role",
        json!({
        "rules": [{ "apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"] },
                  { "nonResourceURLs": ["/healthz"], "verbs": ["get"] }] }),
    ));
    check::<rbac::v1::ClusterRoleBinding>(object(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        json!({
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view" },
        "subjects": [{ "kind": "ServiceAccount", "name": "sa", "namespace": "default" }] }),
    ));
    check::<networking::v1::NetworkPolicy>(object(
        "networking.k8s.io/v1",
        "NetworkPolicy",
        json!({
        "spec": { "podSelector": { "matchLabels": { "app": "web" } }, "policyTypes": ["Ingress"],
            "ingress": [{ "from": [{ "ipBlock": { "cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"] } }],
                "ports": [{ "protocol": "TCP", "port": 0 }, { "port": "http", "endPort": 0 }] }] } }),
    ));
    check::<networking::v1::Ingress>(object(
        "networking.k8s.io/v1",
        "Ingress",
        json!({
        "spec": { "ingressClassName": "", "rules": [{ "host": "a.example.com", "http": { "paths": [{
            "path": "/", "pathType": "Prefix",
            "backend": { "service": { "name": "web", "port": { "number": 0 } } } }] } }] },
        "status": { "loadBalancer": { "ingress": [{ "ip": "10.0.0.9", "ports": [{ "port": 80, "protocol": "TCP" }] }] } } }),
    ));
    check::<policy::v1::PodDisruptionBudget>(object(
        "policy/v1",
        "PodDisruptionBudget",
        json!({
        "spec": { "minAvailable": 0, "selector": { "matchLabels": { "app": "web" } } },
        "status": { "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0, "disruptionsAllowed": 0,
            "observedGeneration": 0 } }),
    ));
    check::<storage::v1::StorageClass>(object(
        "storage.k8s.io/v1",
        "StorageClass",
        json!({
        "provisioner": "csi.example.com", "parameters": { "type": "ssd", "empty": "" },
        "allowVolumeExpansion": false, "reclaimPolicy": "Delete",
        "allowedTopologies": [{ "matchLabelExpressions": [{ "key": "zone", "values": ["a"] }] }] }),
    ));
    check::<storage::v1::CSIDriver>(object(
        "storage.k8s.io/v1",
        "CSIDriver",
        json!({
        "spec": { "attachRequired": false, "fsGroupPolicy": "File", "tokenRequests": [{ "audience": "", "expirationSeconds": 600 }] } }),
    ));
    check::<discovery::v1::EndpointSlice>(object(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        json!({
        "addressType": "IPv4",
        "endpoints": [{ "addresses": ["10.0.0.4"], "conditions": { "ready": false, "serving": true },
            "nodeName": "n", "targetRef": { "kind": "Pod", "name": "p" } }],
        "ports": [{ "name": "", "port": 0, "protocol": "TCP" }] }),
    ));
    check::<autoscaling::v2::HorizontalPodAutoscaler>(object(
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
        json!({
        "spec": { "scaleTargetRef": { "kind": "Deployment", "name": "d", "apiVersion": "apps/v1" },
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{ "type": "Resource", "resource": { "name": "cpu",
                "target": { "type": "AverageValue", "averageValue": "500m" } } }],
            "behavior": { "scaleDown": { "stabilizationWindowSeconds": 0,
                "policies": [{ "type": "Pods", "value": 1, "periodSeconds": 60 }] } } },
        "status": { "currentReplicas": 0, "desiredReplicas": 0,
            "conditions": [{ "type": "AbleToScale", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z" }] } }),
    ));
    check::<scheduling::v1::PriorityClass>(object(
        "scheduling.k8s.io/v1",
        "PriorityClass",
        json!({
        "value": 0, "globalDefault": false, "preemptionPolicy": "Never" }),
    ));
    check::<certificates::v1::CertificateSigningRequest>(object(
        "certificates.k8s.io/v1",
        "CertificateSigningRequest",
        json!({
        "spec": { "request": "LS0tLS1CRUdJTg==", "signerName": "example.com/s", "usages": ["client auth"],
            "expirationSeconds": 0, "extra": { "k": ["v"] } } }),
    ));
    let csr: certificates::v1::CertificateSigningRequest = crate::from_slice(
        &crate::transcode::from_json(&object("certificates.k8s.io/v1", "CertificateSigningRequest",
            json!({ "spec": { "request": "AAEC", "signerName": "s", "extra": { "k": ["v", "w"], "e": [] } } })))
        .unwrap(),
        &super::options(),
    )
    .unwrap();
    let extra = csr.spec.extra.unwrap();
    assert_eq!((extra["k"].clone(), extra["e"].clone()), (vec!["v".into(), "w".into()], vec![]));
    check::<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList>(json!({
        "apiVersion": "v1", "kind": "APIResourceList", "groupVersion": "rbac.authorization.k8s.io/v1",
        "resources": [{ "name": "roles", "singularName": "", "namespaced": true, "kind": "Role",
            "verbs": ["get", "list"], "shortNames": ["r"] }] }));
    check::<admissionregistration::v1::ValidatingWebhookConfiguration>(object(
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        json!({
        "webhooks": [{ "name": "v.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": { "caBundle": "AAEC", "service": { "namespace": "n", "name": "s", "port": 443 } },
            "rules": [{ "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"] }],
            "timeoutSeconds": 0 }] }),
    ));
    check::<flowcontrol::v1::FlowSchema>(object(
        "flowcontrol.apiserver.k8s.io/v1",
        "FlowSchema",
        json!({
        "spec": { "priorityLevelConfiguration": { "name": "global-default" }, "matchingPrecedence": 0,
            "rules": [{ "subjects": [{ "kind": "Group", "group": { "name": "system:authenticated" } }],
                "resourceRules": [{ "verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"] }] }] } }),
    ));
    check::<node::v1::RuntimeClass>(object(
        "node.k8s.io/v1",
        "RuntimeClass",
        json!({
        "handler": "runc", "overhead": { "podFixed": { "cpu": "250m", "memory": "0" } } }),
    ));
    check::<resource::v1::ResourceClaim>(object(
        "resource.k8s.io/v1",
        "ResourceClaim",
        json!({
        "spec": { "devices": { "requests": [{ "name": "gpu", "exactly": { "deviceClassName": "gpu.example.com",
            "count": 0, "allocationMode": "ExactCount" } }] } } }),
    ));
}
