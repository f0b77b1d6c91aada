//! The protobuf read-back check: with `CTRLKIT_PROTOBUF_DIFF=1`, the client of every case's
//! [`Target`](super::Target) (but those of cases that need the embedded server alone, whose
//! faults count requests) reads back every built-in object it writes (create, update,
//! patch, apply of a kind `ctrlkit_protobuf::has_message` accepts) twice, as protobuf and as
//! JSON, decodes the first with `ctrlkit_protobuf::from_slice` and the second with
//! serde_json into the same k8s-openapi type, and panics (failing the case) when the two
//! differ; once per kind it does the same for a list of the object's namespace. The runner
//! wraps the client ([`diffing`]); a client a case builds itself (from
//! [`Target::config`](super::Target::config), through a proxy) is not wrapped.
//!
//! # Contract
//! - The first [`PER_CLIENT`] writes of each case's client are read back, not those after.
//! - What the wrapped client's caller sees is unchanged: the reads go through a separate
//!   client, after the write's answer and before it is returned, and the answer's body is
//!   returned byte for byte.
//! - Two reads that saw different resourceVersions (a controller wrote between them) are
//!   read again, up to a few times; an object gone meanwhile (404), or a read the server
//!   failed (5xx, 429: faults a case injects into the embedded server), is skipped, uncounted.
//! - Checks are counted per kind ([`counts`]); the runner ([`main`](super::main)) prints them
//!   at the end and fails the run when the variable was set and no check ran, so the check
//!   cannot silently do nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use ctrlkit_protobuf::DecodeOptions;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use kube_client::Client;
use kube_client::client::Body;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The variable that turns the check on.
pub const ENV: &str = "CTRLKIT_PROTOBUF_DIFF";

/// The writes one case's client reads back: the first ones; a case that writes thousands of
/// objects of one shape (the convergence runs) would otherwise spend minutes on them.
pub const PER_CLIENT: usize = 500;

/// How many times two reads that saw different resourceVersions are repeated.
const ATTEMPTS: usize = 5;

/// Whether the check is on (`CTRLKIT_PROTOBUF_DIFF=1`).
pub fn enabled() -> bool {
    std::env::var(ENV).is_ok_and(|v| v == "1")
}

/// Checks run so far, per `apiVersion/kind`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Objects read back both ways and found equal.
    pub objects: u64,
    /// Lists read both ways and found equal.
    pub lists: u64,
}

static COUNTS: Mutex<BTreeMap<String, Counts>> = Mutex::new(BTreeMap::new());
/// The kinds whose list was compared already (once per kind per process).
static LISTED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// The checks run so far, per `apiVersion/kind`.
pub fn counts() -> BTreeMap<String, Counts> {
    COUNTS.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

fn count(key: &str, f: impl FnOnce(&mut Counts)) {
    f(COUNTS.lock().unwrap_or_else(PoisonError::into_inner).entry(key.to_owned()).or_default())
}

/// The run's end: with the check on, prints the counts per kind and turns `code` into a
/// failure when cases ran (`ran`) but no check did.
pub(crate) fn finish(ran: bool, code: ExitCode) -> ExitCode {
    if !enabled() || !ran {
        return code;
    }
    let counts = counts();
    println!("{ENV}: protobuf and JSON read-backs compared, per kind (objects, lists):");
    for (kind, c) in &counts {
        println!("  {kind}: {} objects, {} lists", c.objects, c.lists);
    }
    if counts.values().all(|c| c.objects == 0) {
        eprintln!("{ENV}=1 but no object was read back: the check did nothing");
        return ExitCode::FAILURE;
    }
    code
}

/// Wraps `client`: with the check on, a client whose writes of built-in kinds are read back
/// both ways (through `client` itself, outside the wrapper); off, `client` as it is.
pub fn diffing(client: Client) -> Client {
    if !enabled() {
        return client;
    }
    let namespace = client.default_namespace().to_owned();
    let service = DiffService { client, budget: Arc::new(AtomicUsize::new(PER_CLIENT)) };
    Client::new(service, namespace)
}

/// The service under a [`diffing`] client: sends each request through `client` (the one
/// wrapped), and reads each successful write of a built-in kind back through it too (see the
/// module docs).
#[derive(Clone)]
struct DiffService {
    client: Client,
    /// The writes left to read back (shared by the clones of the client).
    budget: Arc<AtomicUsize>,
}

impl tower::Service<Request<Body>> for DiffService {
    type Response = Response<Body>;
    type Error = kube_client::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, kube_client::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let (client, budget) = (self.client.clone(), self.budget.clone());
        Box::pin(async move {
            let write = Write::of(&request).filter(|_| {
                budget
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
            });
            let response = client.send(request).await?;
            let Some(write) = write.filter(|_| response.status().is_success()) else {
                return Ok(response);
            };
            let (parts, body) = response.into_parts();
            let bytes =
                body.collect().await.map_err(|e| kube_client::Error::Service(e.into()))?.to_bytes();
            write.check(&client, &bytes).await;
            Ok(Response::from_parts(parts, Body::from(bytes)))
        })
    }
}

/// A write's target: the path of the object's collection.
struct Write {
    /// `/api/v1/namespaces/ns/pods` (or a cluster-scoped collection).
    collection: String,
}

impl Write {
    /// The collection a create, update, patch or apply writes to (the object itself or its
    /// `status`); `None` for other requests, dry runs and other subresources.
    fn of(request: &Request<Body>) -> Option<Write> {
        if ![Method::POST, Method::PUT, Method::PATCH].contains(request.method()) {
            return None;
        }
        if request.uri().query().is_some_and(|q| q.contains("dryRun")) {
            return None;
        }
        let segments: Vec<&str> = request.uri().path().trim_matches('/').split('/').collect();
        let prefix = match segments.first() {
            Some(&"api") => 2,
            Some(&"apis") => 3,
            _ => return None,
        };
        let rest = segments.get(prefix..)?;
        let scoped = rest.len() >= 3 && rest[0] == "namespaces";
        let collection_len = if scoped { prefix + 3 } else { prefix + 1 };
        let tail = segments.get(collection_len..)?;
        let fits = match request.method() {
            &Method::POST => tail.is_empty(),
            _ => tail.len() == 1 || (tail.len() == 2 && tail[1] == "status"),
        };
        fits.then(|| Write { collection: format!("/{}", segments[..collection_len].join("/")) })
    }

    /// Reads the object the write answered `body` for back both ways and compares.
    async fn check(&self, reader: &Client, body: &[u8]) {
        let Ok(object) = serde_json::from_slice::<Value>(body) else { return };
        let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let (Some(api_version), Some(kind)) =
            (field(&object, "apiVersion"), field(&object, "kind"))
        else {
            return;
        };
        let Some(name) = object.get("metadata").and_then(|m| field(m, "name")) else { return };
        if kind == "Status" || !ctrlkit_protobuf::has_message(&api_version, &kind) {
            return;
        }
        let key = format!("{api_version}/{kind}");
        let Some(compare) = comparer(&api_version, &kind) else {
            panic!("{ENV}: {key} has a protobuf message but no k8s-openapi type in KINDS");
        };
        let path = format!("{}/{name}", self.collection);
        if read_back(reader, &path, &key, compare.object).await {
            count(&key, |c| c.objects += 1);
        } else {
            return;
        }
        let listed = || LISTED.lock().unwrap_or_else(PoisonError::into_inner);
        if !listed().insert(key.clone()) {
            return;
        }
        match read_back(reader, &self.collection, &key, compare.list).await {
            true => count(&key, |c| c.lists += 1),
            // Skipped (a failed read): a later write of the kind lists it.
            false => _ = listed().remove(&key),
        }
    }
}

/// A comparison of a protobuf body with a JSON one: `Ok(true)` equal, `Ok(false)` they saw
/// different resourceVersions, `Err` what differs.
type Compare = fn(&[u8], &[u8]) -> Result<bool, String>;

/// How to compare an object and a list of one kind.
struct Comparer {
    object: Compare,
    list: Compare,
}

/// GETs `path` as protobuf and as JSON and compares them with `compare`, again while they saw
/// different versions; `false` when the object is gone or a read failed (see [`get`]).
/// Panics on a difference.
async fn read_back(reader: &Client, path: &str, key: &str, compare: Compare) -> bool {
    for _ in 0..ATTEMPTS {
        let Some(proto) = get(reader, path, ctrlkit_protobuf::MEDIA_TYPE, key).await else {
            return false;
        };
        let Some(json) = get(reader, path, "application/json", key).await else { return false };
        match compare(&proto, &json) {
            Ok(true) => return true,
            Ok(false) => continue,
            Err(difference) => {
                panic!("{ENV}: {key} at {path} differs read as protobuf and as JSON: {difference}")
            }
        }
    }
    panic!("{ENV}: {key} at {path}: the two reads saw different versions {ATTEMPTS} times")
}

/// The body of a GET of `path` in `accept`; `None` when it is gone (404) or the server failed
/// the read (5xx, 429: a case's injected faults).
async fn get(reader: &Client, path: &str, accept: &str, key: &str) -> Option<Vec<u8>> {
    let request = Request::get(path)
        .header(header::ACCEPT, accept)
        .body(Body::empty())
        .expect("a valid request");
    let response = reader
        .send(request)
        .await
        .unwrap_or_else(|e| panic!("{ENV}: reading {key} at {path} as {accept}: {e}"));
    let status = response.status();
    if status == StatusCode::NOT_FOUND
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
    {
        return None;
    }
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = response.into_body().collect().await;
    let body =
        body.unwrap_or_else(|e| panic!("{ENV}: reading {key} at {path}: {e}")).to_bytes().to_vec();
    let text = String::from_utf8_lossy(&body);
    assert!(status.is_success(), "{ENV}: {key} at {path} as {accept}: {status}: {text}");
    assert!(
        content_type.starts_with(accept),
        "{ENV}: {key} at {path}: asked for {accept}, answered {content_type}"
    );
    Some(body)
}

/// Compares one object read both ways.
fn compare_object<T>(proto: &[u8], json: &[u8]) -> Result<bool, String>
where
    T: DeserializeOwned + PartialEq + serde::Serialize,
    T: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
{
    let from_proto: T = ctrlkit_protobuf::from_slice(proto, &options())
        .map_err(|e| format!("the protobuf body does not decode: {e}"))?;
    let from_json: T =
        serde_json::from_slice(json).map_err(|e| format!("the JSON body does not decode: {e}"))?;
    let version = |t: &T| t.metadata().resource_version.clone();
    if version(&from_proto) != version(&from_json) {
        return Ok(false);
    }
    equal(&from_proto, &from_json)
}

/// Compares one list read both ways: the items both reads saw at one resourceVersion (a
/// list's own version is the server's latest, which any write anywhere moves on a shared
/// server); `Ok(false)` when no item was seen alike by both.
fn compare_list<T>(proto: &[u8], json: &[u8]) -> Result<bool, String>
where
    T: DeserializeOwned + PartialEq + serde::Serialize + k8s_openapi::Resource,
    T: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
{
    let list = ctrlkit_protobuf::list(proto).map_err(|e| format!("the protobuf list: {e}"))?;
    let proto_items = list
        .items
        .iter()
        .map(|item| item.decode::<T>(&options()))
        .collect::<Result<Vec<T>, _>>()
        .map_err(|e| format!("a protobuf list item does not decode: {e}"))?;
    let mut json: Value =
        serde_json::from_slice(json).map_err(|e| format!("the JSON list does not parse: {e}"))?;
    let items = match json["items"].take() {
        Value::Array(items) => items,
        Value::Null => Vec::new(),
        other => return Err(format!("the JSON list's items are not an array: {other}")),
    };
    // A list's items carry no apiVersion and kind in JSON; k8s-openapi's types want them.
    let json_items = items
        .into_iter()
        .map(|mut item| {
            item["apiVersion"] = T::API_VERSION.into();
            item["kind"] = T::KIND.into();
            serde_json::from_value::<T>(item)
        })
        .collect::<Result<Vec<T>, _>>()
        .map_err(|e| format!("a JSON list item does not decode: {e}"))?;
    let key = |t: &T| {
        let m = t.metadata();
        (m.namespace.clone(), m.name.clone(), m.resource_version.clone())
    };
    let by_key: BTreeMap<_, &T> = json_items.iter().map(|t| (key(t), t)).collect();
    let mut compared = 0;
    for item in &proto_items {
        if let Some(other) = by_key.get(&key(item)) {
            equal(item, *other).map_err(|d| format!("item {:?}: {d}", key(item).1))?;
            compared += 1;
        }
    }
    Ok(compared > 0 || (proto_items.is_empty() && json_items.is_empty()))
}

/// The decode options of the check: the production defaults.
fn options() -> DecodeOptions {
    DecodeOptions::default()
}

/// `Ok(true)` when equal, else the JSON paths at which they differ, protobuf's value first.
fn equal<T: PartialEq + serde::Serialize>(proto: &T, json: &T) -> Result<bool, String> {
    if proto == json {
        return Ok(true);
    }
    let (p, j) = (serde_json::to_value(proto), serde_json::to_value(json));
    let (p, j) = (p.map_err(|e| e.to_string())?, j.map_err(|e| e.to_string())?);
    let mut found = Vec::new();
    differences("", &p, &j, &mut found);
    Err(found.join("; "))
}

/// The paths at which `p` and `j` differ, with both values.
fn differences(at: &str, p: &Value, j: &Value, found: &mut Vec<String>) {
    match (p, j) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let null = Value::Null;
                let (x, y) = (a.get(k).unwrap_or(&null), b.get(k).unwrap_or(&null));
                differences(&format!("{at}.{k}"), x, y, found);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(&format!("{at}[{i}]"), x, y, found);
            }
        }
        _ if p != j => found.push(format!("{at}: protobuf {p} vs JSON {j}")),
        _ => {}
    }
}

/// The k8s-openapi type of every kind `ctrlkit_protobuf::has_message` accepts that k8s-openapi
/// 0.29 has, by `apiVersion` and `kind`.
macro_rules! kinds {
    ($($api_version:literal $kind:literal => $ty:ty,)*) => {
        fn comparer(api_version: &str, kind: &str) -> Option<Comparer> {
            match (api_version, kind) {
                $(($api_version, $kind) => Some(Comparer {
                    object: compare_object::<$ty>,
                    list: compare_list::<$ty>,
                }),)*
                _ => None,
            }
        }

        /// Every `(apiVersion, kind)` the check has a type for.
        pub const KINDS: &[(&str, &str)] = &[$(($api_version, $kind),)*];
    };
}

kinds! {
    "v1" "ComponentStatus" => k8s_openapi::api::core::v1::ComponentStatus,
    "v1" "ConfigMap" => k8s_openapi::api::core::v1::ConfigMap,
    "v1" "Endpoints" => k8s_openapi::api::core::v1::Endpoints,
    "v1" "Event" => k8s_openapi::api::core::v1::Event,
    "v1" "LimitRange" => k8s_openapi::api::core::v1::LimitRange,
    "v1" "Namespace" => k8s_openapi::api::core::v1::Namespace,
    "v1" "Node" => k8s_openapi::api::core::v1::Node,
    "v1" "PersistentVolume" => k8s_openapi::api::core::v1::PersistentVolume,
    "v1" "PersistentVolumeClaim" => k8s_openapi::api::core::v1::PersistentVolumeClaim,
    "v1" "Pod" => k8s_openapi::api::core::v1::Pod,
    "v1" "PodTemplate" => k8s_openapi::api::core::v1::PodTemplate,
    "v1" "ReplicationController" => k8s_openapi::api::core::v1::ReplicationController,
    "v1" "ResourceQuota" => k8s_openapi::api::core::v1::ResourceQuota,
    "v1" "Secret" => k8s_openapi::api::core::v1::Secret,
    "v1" "Service" => k8s_openapi::api::core::v1::Service,
    "v1" "ServiceAccount" => k8s_openapi::api::core::v1::ServiceAccount,
    "apps/v1" "ControllerRevision" => k8s_openapi::api::apps::v1::ControllerRevision,
    "apps/v1" "DaemonSet" => k8s_openapi::api::apps::v1::DaemonSet,
    "apps/v1" "Deployment" => k8s_openapi::api::apps::v1::Deployment,
    "apps/v1" "ReplicaSet" => k8s_openapi::api::apps::v1::ReplicaSet,
    "apps/v1" "StatefulSet" => k8s_openapi::api::apps::v1::StatefulSet,
    "batch/v1" "CronJob" => k8s_openapi::api::batch::v1::CronJob,
    "batch/v1" "Job" => k8s_openapi::api::batch::v1::Job,
    "coordination.k8s.io/v1" "Lease" => k8s_openapi::api::coordination::v1::Lease,
    "events.k8s.io/v1" "Event" => k8s_openapi::api::events::v1::Event,
    "autoscaling/v1" "HorizontalPodAutoscaler" =>
        k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler,
    "apiextensions.k8s.io/v1" "CustomResourceDefinition" =>
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    "admissionregistration.k8s.io/v1" "MutatingAdmissionPolicy" => k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicy,
    "admissionregistration.k8s.io/v1" "MutatingAdmissionPolicyBinding" => k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicyBinding,
    "admissionregistration.k8s.io/v1" "MutatingWebhookConfiguration" => k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
    "admissionregistration.k8s.io/v1" "ValidatingAdmissionPolicy" => k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy,
    "admissionregistration.k8s.io/v1" "ValidatingAdmissionPolicyBinding" => k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
    "admissionregistration.k8s.io/v1" "ValidatingWebhookConfiguration" => k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
    "admissionregistration.k8s.io/v1beta1" "MutatingAdmissionPolicy" => k8s_openapi::api::admissionregistration::v1beta1::MutatingAdmissionPolicy,
    "admissionregistration.k8s.io/v1beta1" "MutatingAdmissionPolicyBinding" => k8s_openapi::api::admissionregistration::v1beta1::MutatingAdmissionPolicyBinding,
    "internal.apiserver.k8s.io/v1alpha1" "StorageVersion" => k8s_openapi::api::apiserverinternal::v1alpha1::StorageVersion,
    "authentication.k8s.io/v1" "SelfSubjectReview" => k8s_openapi::api::authentication::v1::SelfSubjectReview,
    "authentication.k8s.io/v1" "TokenRequest" => k8s_openapi::api::authentication::v1::TokenRequest,
    "authentication.k8s.io/v1" "TokenReview" => k8s_openapi::api::authentication::v1::TokenReview,
    "authorization.k8s.io/v1" "LocalSubjectAccessReview" => k8s_openapi::api::authorization::v1::LocalSubjectAccessReview,
    "authorization.k8s.io/v1" "SelfSubjectAccessReview" => k8s_openapi::api::authorization::v1::SelfSubjectAccessReview,
    "authorization.k8s.io/v1" "SelfSubjectRulesReview" => k8s_openapi::api::authorization::v1::SelfSubjectRulesReview,
    "authorization.k8s.io/v1" "SubjectAccessReview" => k8s_openapi::api::authorization::v1::SubjectAccessReview,
    "autoscaling/v2" "HorizontalPodAutoscaler" => k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler,
    "certificates.k8s.io/v1" "CertificateSigningRequest" => k8s_openapi::api::certificates::v1::CertificateSigningRequest,
    "certificates.k8s.io/v1beta1" "ClusterTrustBundle" => k8s_openapi::api::certificates::v1beta1::ClusterTrustBundle,
    "certificates.k8s.io/v1beta1" "PodCertificateRequest" => k8s_openapi::api::certificates::v1beta1::PodCertificateRequest,
    "coordination.k8s.io/v1beta1" "LeaseCandidate" => k8s_openapi::api::coordination::v1beta1::LeaseCandidate,
    "discovery.k8s.io/v1" "EndpointSlice" => k8s_openapi::api::discovery::v1::EndpointSlice,
    "flowcontrol.apiserver.k8s.io/v1" "FlowSchema" => k8s_openapi::api::flowcontrol::v1::FlowSchema,
    "flowcontrol.apiserver.k8s.io/v1" "PriorityLevelConfiguration" => k8s_openapi::api::flowcontrol::v1::PriorityLevelConfiguration,
    "networking.k8s.io/v1" "Ingress" => k8s_openapi::api::networking::v1::Ingress,
    "networking.k8s.io/v1" "IngressClass" => k8s_openapi::api::networking::v1::IngressClass,
    "networking.k8s.io/v1" "IPAddress" => k8s_openapi::api::networking::v1::IPAddress,
    "networking.k8s.io/v1" "NetworkPolicy" => k8s_openapi::api::networking::v1::NetworkPolicy,
    "networking.k8s.io/v1" "ServiceCIDR" => k8s_openapi::api::networking::v1::ServiceCIDR,
    "node.k8s.io/v1" "RuntimeClass" => k8s_openapi::api::node::v1::RuntimeClass,
    "policy/v1" "Eviction" => k8s_openapi::api::policy::v1::Eviction,
    "policy/v1" "PodDisruptionBudget" => k8s_openapi::api::policy::v1::PodDisruptionBudget,
    "rbac.authorization.k8s.io/v1" "ClusterRole" => k8s_openapi::api::rbac::v1::ClusterRole,
    "rbac.authorization.k8s.io/v1" "ClusterRoleBinding" => k8s_openapi::api::rbac::v1::ClusterRoleBinding,
    "rbac.authorization.k8s.io/v1" "Role" => k8s_openapi::api::rbac::v1::Role,
    "rbac.authorization.k8s.io/v1" "RoleBinding" => k8s_openapi::api::rbac::v1::RoleBinding,
    "resource.k8s.io/v1" "DeviceClass" => k8s_openapi::api::resource::v1::DeviceClass,
    "resource.k8s.io/v1" "ResourceClaim" => k8s_openapi::api::resource::v1::ResourceClaim,
    "resource.k8s.io/v1" "ResourceClaimTemplate" => k8s_openapi::api::resource::v1::ResourceClaimTemplate,
    "resource.k8s.io/v1" "ResourceSlice" => k8s_openapi::api::resource::v1::ResourceSlice,
    "resource.k8s.io/v1beta1" "DeviceClass" => k8s_openapi::api::resource::v1beta1::DeviceClass,
    "resource.k8s.io/v1beta1" "ResourceClaim" => k8s_openapi::api::resource::v1beta1::ResourceClaim,
    "resource.k8s.io/v1beta1" "ResourceClaimTemplate" => k8s_openapi::api::resource::v1beta1::ResourceClaimTemplate,
    "resource.k8s.io/v1beta1" "ResourceSlice" => k8s_openapi::api::resource::v1beta1::ResourceSlice,
    "resource.k8s.io/v1beta2" "DeviceClass" => k8s_openapi::api::resource::v1beta2::DeviceClass,
    "resource.k8s.io/v1beta2" "DeviceTaintRule" => k8s_openapi::api::resource::v1beta2::DeviceTaintRule,
    "resource.k8s.io/v1beta2" "ResourceClaim" => k8s_openapi::api::resource::v1beta2::ResourceClaim,
    "resource.k8s.io/v1beta2" "ResourceClaimTemplate" => k8s_openapi::api::resource::v1beta2::ResourceClaimTemplate,
    "resource.k8s.io/v1beta2" "ResourceSlice" => k8s_openapi::api::resource::v1beta2::ResourceSlice,
    "scheduling.k8s.io/v1" "PriorityClass" => k8s_openapi::api::scheduling::v1::PriorityClass,
    "storage.k8s.io/v1" "CSIDriver" => k8s_openapi::api::storage::v1::CSIDriver,
    "storage.k8s.io/v1" "CSINode" => k8s_openapi::api::storage::v1::CSINode,
    "storage.k8s.io/v1" "CSIStorageCapacity" => k8s_openapi::api::storage::v1::CSIStorageCapacity,
    "storage.k8s.io/v1" "StorageClass" => k8s_openapi::api::storage::v1::StorageClass,
    "storage.k8s.io/v1" "VolumeAttachment" => k8s_openapi::api::storage::v1::VolumeAttachment,
    "storage.k8s.io/v1" "VolumeAttributesClass" => k8s_openapi::api::storage::v1::VolumeAttributesClass,
    "storagemigration.k8s.io/v1beta1" "StorageVersionMigration" => k8s_openapi::api::storagemigration::v1beta1::StorageVersionMigration,
}
