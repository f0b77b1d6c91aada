//! `status::ConditionWriter` against the embedded server: conditions written by server-side
//! apply through `/status`, each field manager owning its own, with apimachinery's
//! transition-time and generation rules; on a custom resource whose CRD keys its conditions
//! by `type`, and on a Pod's readiness-gate condition.

use ctrlkit::status::{ConditionStatus, ConditionWriter, find_status_condition};
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::CustomResourceExt;
use kube_client::Api;
use kube_client::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::common::{pod, server};
use ctrlkit_apiserver::ApiServer;

const CONTROLLER: &str = "example.com/gauge-controller";
const POLICY: &str = "example.com/policy-agent";

/// A gauge: `spec.size`, and conditions keyed by `type` in its CRD's schema.
#[derive(
    kube::CustomResource, Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[kube(group = "example.com", version = "v1", kind = "Gauge", namespaced)]
#[kube(status = "GaugeStatus")]
pub struct GaugeSpec {
    size: i32,
}

/// A gauge's status.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct GaugeStatus {
    #[serde(default)]
    #[schemars(schema_with = "conditions")]
    conditions: Vec<Condition>,
}

/// `metav1.Condition`s keyed by `type`, as a CRD declares them for two writers to share.
fn conditions(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": { "type": "object", "required": ["type", "status"], "properties": {
            "type": { "type": "string" },
            "status": { "type": "string" },
            "reason": { "type": "string" },
            "message": { "type": "string" },
            "lastTransitionTime": { "type": "string", "format": "date-time" },
            "observedGeneration": { "type": "integer", "format": "int64" },
        } },
    })
}

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).expect("a valid time"))
}

/// The manager of each condition type in `object`'s managedFields, sorted.
fn owners(object: &impl serde::Serialize) -> Vec<(String, String)> {
    let value = serde_json::to_value(object).unwrap();
    let mut out = Vec::new();
    for entry in value["metadata"]["managedFields"].as_array().into_iter().flatten() {
        let items = entry["fieldsV1"]["f:status"]["f:conditions"].as_object();
        for key in items.into_iter().flat_map(|i| i.keys()) {
            let key: Value = serde_json::from_str(key.trim_start_matches("k:")).unwrap();
            let manager = entry["manager"].as_str().unwrap().to_owned();
            out.push((key["type"].as_str().unwrap().to_owned(), manager));
        }
    }
    out.sort();
    out
}

/// `object` created, its kind defined by `crd` first, on `server`, in `default`.
async fn created<K>(server: &ApiServer, crd: CustomResourceDefinition, object: K) -> (Api<K>, K)
where
    K: kube_client::Resource<Scope = kube_client::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
    K::DynamicType: Default,
{
    let crds: Api<CustomResourceDefinition> = Api::all(server.client());
    crds.create(&PostParams::default(), &crd).await.expect("the CRD is created");
    let api: Api<K> = Api::namespaced(server.client(), "default");
    let object = api.create(&PostParams::default(), &object).await.expect("the object is created");
    (api, object)
}

#[tokio::test]
async fn two_managers_each_own_their_conditions_and_transition_times_follow_the_status() {
    let server = server().await;
    let (gauges, gauge) =
        created(&server, Gauge::crd(), Gauge::new("g", GaugeSpec { size: 1 })).await;

    let mut controller = ConditionWriter::<Condition>::new(&gauge, CONTROLLER).unwrap();
    controller.set_at("Ready", ConditionStatus::False, "Starting", "scaling up", at(100));
    let written = controller.apply(&gauges, &gauge).await.unwrap();
    let mut policy = ConditionWriter::<Condition>::new(&written, POLICY).unwrap();
    assert!(policy.conditions().is_empty(), "Ready is not the policy agent's");
    policy.set_at("Compliant", ConditionStatus::True, "Checked", "", at(110));
    let written = policy.apply(&gauges, &written).await.unwrap();
    let status = written.status.clone().unwrap();
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Ready", "Compliant"], "both kept");
    assert_eq!(
        owners(&written),
        [("Compliant".to_owned(), POLICY.to_owned()), ("Ready".to_owned(), CONTROLLER.to_owned())]
    );

    // The controller's next write, from what it reads: its own condition alone. While Ready
    // stays False its transition time stays; the policy agent's condition is untouched.
    let mut controller = ConditionWriter::<Condition>::new(&written, CONTROLLER).unwrap();
    assert_eq!(controller.conditions().len(), 1);
    assert!(controller.set_at("Ready", ConditionStatus::False, "Waiting", "1 of 3", at(200)));
    let written = controller.apply(&gauges, &written).await.unwrap();
    let status = written.status.clone().unwrap();
    let ready = find_status_condition(&status.conditions, "Ready").unwrap();
    assert_eq!((ready.reason.as_str(), &ready.last_transition_time), ("Waiting", &at(100)));
    let compliant = find_status_condition(&status.conditions, "Compliant").unwrap();
    assert_eq!((compliant.status.as_str(), &compliant.last_transition_time), ("True", &at(110)));

    // A new spec, then Ready turns True: a transition, at the new generation.
    let spec = Patch::Merge(json!({ "spec": { "size": 3 } }));
    let changed = gauges.patch("g", &PatchParams::default(), &spec).await.unwrap();
    assert_eq!(changed.metadata.generation, Some(2));
    let mut controller = ConditionWriter::<Condition>::new(&changed, CONTROLLER).unwrap();
    assert!(controller.set_at("Ready", ConditionStatus::True, "Available", "", at(300)));
    let written = controller.apply(&gauges, &changed).await.unwrap();
    let status = written.status.clone().unwrap();
    let ready = find_status_condition(&status.conditions, "Ready").unwrap();
    assert_eq!((&ready.last_transition_time, ready.observed_generation), (&at(300), Some(2)));

    // The controller drops its condition: the policy agent's stays, and stays its own.
    let mut controller = ConditionWriter::<Condition>::new(&written, CONTROLLER).unwrap();
    assert!(controller.remove("Ready") && controller.changed());
    let written = controller.apply(&gauges, &written).await.unwrap();
    let status = written.status.clone().unwrap();
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Compliant"]);
    assert_eq!(owners(&written), [("Compliant".to_owned(), POLICY.to_owned())]);
}

#[tokio::test]
async fn a_pods_readiness_gate_condition_is_written_beside_the_kubelets() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let created = pods.create(&PostParams::default(), &pod("web", json!({}))).await.unwrap();
    // What a kubelet reports, by its own apply.
    let kubelet = Patch::Apply(json!({
        "apiVersion": "v1", "kind": "Pod",
        "status": { "conditions": [{ "type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady" }] },
    }));
    let reported =
        pods.patch_status("web", &PatchParams::apply("kubelet"), &kubelet).await.unwrap();

    let gate = "example.com/load-balancer-ready";
    let mut writer = ConditionWriter::<PodCondition>::new(&reported, CONTROLLER).unwrap();
    assert!(writer.conditions().is_empty(), "the kubelet's Ready is not the controller's");
    writer.set_at(gate, ConditionStatus::True, "TargetHealthy", "", at(500));
    let written = writer.apply(&pods, &reported).await.unwrap();
    let conditions = written.status.unwrap().conditions.unwrap();
    let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Ready", gate]);
    let set = find_status_condition(&conditions, gate).unwrap();
    assert_eq!(set.last_transition_time, Some(at(500)));
    assert_eq!(set.observed_generation, created.metadata.generation);
    assert_eq!(set.message, None, "an empty message is left out");
}

/// The gauge as an informer's cache holds it: without `managedFields` (informers drop them).
fn as_cached(gauge: &Gauge) -> Gauge {
    let mut cached = gauge.clone();
    cached.metadata.managed_fields = None;
    cached
}

#[tokio::test]
async fn a_writer_built_from_a_cached_object_keeps_the_types_its_controller_owns() {
    let server = server().await;
    let (gauges, gauge) =
        created(&server, Gauge::crd(), Gauge::new("g", GaugeSpec { size: 1 })).await;
    let owned = ["Ready", "Progressing"];

    let mut controller = ConditionWriter::<Condition>::new(&gauge, CONTROLLER).unwrap().owns(owned);
    controller.set_at("Ready", ConditionStatus::False, "Starting", "", at(100));
    controller.set_at("Progressing", ConditionStatus::True, "Scaling", "", at(100));
    let written = controller.apply(&gauges, &gauge).await.unwrap();
    let mut policy = ConditionWriter::<Condition>::new(&written, POLICY).unwrap();
    policy.set_at("Compliant", ConditionStatus::True, "Checked", "", at(110));
    let written = policy.apply(&gauges, &written).await.unwrap();

    // The next reconcile, from the cache: it sets one of its two conditions.
    let cached = as_cached(&written);
    let mut controller =
        ConditionWriter::<Condition>::new(&cached, CONTROLLER).unwrap().owns(owned);
    assert!(controller.set_at("Ready", ConditionStatus::True, "Available", "", at(200)));
    let written = controller.apply(&gauges, &cached).await.unwrap();
    let status = written.status.clone().unwrap();
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Ready", "Progressing", "Compliant"], "its other condition kept");
    let progressing = find_status_condition(&status.conditions, "Progressing").unwrap();
    assert_eq!(progressing.last_transition_time, at(100));
    assert_eq!(
        owners(&written),
        [
            ("Compliant".to_owned(), POLICY.to_owned()),
            ("Progressing".to_owned(), CONTROLLER.to_owned()),
            ("Ready".to_owned(), CONTROLLER.to_owned()),
        ]
    );

    // Removing an owned type from a cached read is a change, and the apply drops it.
    let cached = as_cached(&written);
    let mut controller =
        ConditionWriter::<Condition>::new(&cached, CONTROLLER).unwrap().owns(owned);
    assert!(controller.remove("Progressing") && controller.changed());
    let written = controller.apply(&gauges, &cached).await.unwrap();
    let types: Vec<String> =
        written.status.unwrap().conditions.into_iter().map(|c| c.type_).collect();
    assert_eq!(types, ["Ready", "Compliant"]);
}

/// A dial: like a gauge, but its CRD declares no list type for the conditions (atomic).
#[derive(
    kube::CustomResource, Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[kube(group = "example.com", version = "v1", kind = "Dial", namespaced)]
#[kube(status = "DialStatus")]
pub struct DialSpec {
    size: i32,
}

/// A dial's status: its conditions one atomic list.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct DialStatus {
    #[serde(default)]
    #[schemars(schema_with = "atomic_conditions")]
    conditions: Vec<Condition>,
}

fn atomic_conditions(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
    })
}

#[tokio::test]
async fn where_the_crd_declares_no_list_type_the_forced_apply_replaces_the_whole_list() {
    let server = server().await;
    let (dials, dial) = created(&server, Dial::crd(), Dial::new("d", DialSpec { size: 1 })).await;

    let mut policy = ConditionWriter::<Condition>::new(&dial, POLICY).unwrap();
    policy.set_at("Compliant", ConditionStatus::True, "Checked", "", at(110));
    let written = policy.apply(&dials, &dial).await.unwrap();
    let mut controller = ConditionWriter::<Condition>::new(&written, CONTROLLER).unwrap();
    controller.set_at("Ready", ConditionStatus::True, "Available", "", at(200));
    let written = controller.apply(&dials, &written).await.expect("forced: no conflict");
    let types: Vec<String> =
        written.status.unwrap().conditions.into_iter().map(|c| c.type_).collect();
    assert_eq!(types, ["Ready"], "the policy agent's condition is gone with its list");
}
