//! Built-in workload kinds: apps/v1 Deployments, ReplicaSets, StatefulSets, DaemonSets,
//! batch/v1 Jobs and ServiceAccounts, with their `/status` and `/scale` subresources. No
//! controllers run behind them, on either server: a Deployment makes no ReplicaSet.

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube_client::api::{Patch, PatchParams, PostParams};
use kube_client::{Api, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::common::*;

/// A pod template labelled `app: name`, as every workload kind needs.
fn template(name: &str, restart: &str) -> Value {
    json!({
        "metadata": { "labels": { "app": name } },
        "spec": {
            "restartPolicy": restart,
            "containers": [{ "name": "main", "image": "busybox:1.36" }],
        },
    })
}

/// A workload of kind `K` named `name`, selecting `app: name`, with `spec` merged in.
fn workload<K: DeserializeOwned>(name: &str, spec: Value) -> K {
    let mut body = json!({
        "metadata": { "name": name },
        "spec": {
            "selector": { "matchLabels": { "app": name } },
            "template": template(name, "Always"),
        },
    });
    json_patch::merge(&mut body["spec"], &spec);
    serde_json::from_value(body).expect("a valid workload")
}

/// Creates a workload, then reads, patches and replaces its scale, and writes its status.
async fn scales<K>(t: &Target, api: Api<K>, object: K)
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let created = api.create(&PostParams::default(), &object).await.unwrap();
    let name = created.meta().name.clone().unwrap();
    let scale = api.get_scale(&name).await.unwrap();
    assert_eq!(scale.metadata.name.as_deref(), Some(name.as_str()));
    assert_eq!(scale.metadata.namespace.as_deref(), Some(t.ns.as_str()));
    assert_eq!(scale.metadata.resource_version, created.meta().resource_version);
    assert_eq!(scale.spec.as_ref().and_then(|s| s.replicas), Some(2));
    let status = scale.status.clone().expect("a scale status");
    assert_eq!(status.replicas, 0, "no controller wrote a status");
    assert_eq!(status.selector.as_deref(), Some(format!("app={name}").as_str()));

    let patch = Patch::Merge(json!({ "spec": { "replicas": 5 } }));
    let patched = api.patch_scale(&name, &PatchParams::default(), &patch).await.unwrap();
    assert_eq!(patched.spec.as_ref().and_then(|s| s.replicas), Some(5));
    let object = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
    assert_eq!(object["spec"]["replicas"], 5, "the scale wrote the object's replicas");
    assert_eq!(object["metadata"]["generation"], 2);
    assert_eq!(
        object["metadata"]["resourceVersion"].as_str(),
        patched.metadata.resource_version.as_deref()
    );

    // A dry run answers the scale it would write, and writes nothing.
    let dry_run = PatchParams::default().dry_run();
    let more = Patch::Merge(json!({ "spec": { "replicas": 8 } }));
    let answered = api.patch_scale(&name, &dry_run, &more).await.unwrap();
    assert_eq!(answered.spec.as_ref().and_then(|s| s.replicas), Some(8));
    let object = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
    assert_eq!(object["spec"]["replicas"], 5, "a dry run of the scale wrote the object");

    // A replace with a stale version conflicts; a fresh one goes through.
    let mut stale = scale.clone();
    stale.spec.as_mut().unwrap().replicas = Some(7);
    assert_eq!(
        api_error(api.replace_scale(&name, &PostParams::default(), &stale).await),
        (409, "Conflict".into())
    );
    let mut fresh = patched.clone();
    fresh.spec.as_mut().unwrap().replicas = Some(0);
    let replaced = api.replace_scale(&name, &PostParams::default(), &fresh).await.unwrap();
    assert_eq!(replaced.spec.as_ref().and_then(|s| s.replicas), None, "0 is left out");
    let object = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
    assert_eq!(object["spec"]["replicas"], 0);

    let negative = Patch::Merge(json!({ "spec": { "replicas": -1 } }));
    let refused = api.patch_scale(&name, &PatchParams::default(), &negative).await;
    assert_eq!(api_error(refused), (422, "Invalid".into()));

    let status = Patch::Merge(json!({ "status": { "replicas": 3 }, "spec": { "replicas": 9 } }));
    let written = api.patch_status(&name, &PatchParams::default(), &status).await.unwrap();
    let written = serde_json::to_value(written).unwrap();
    assert_eq!(written["status"]["replicas"], 3);
    assert_eq!(written["spec"]["replicas"], 0, "status does not write spec");
    let scale = api.get_scale(&name).await.unwrap();
    assert_eq!(scale.status.unwrap().replicas, 3);
}

async fn workload_kinds_serve_status_and_scale(t: &Target) {
    let client = t.client.clone();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &t.ns);
    let deployment = workload("web", json!({ "replicas": 2 }));
    scales(t, deployments.clone(), deployment).await;
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), &t.ns);
    scales(t, replicasets, workload("web-rs", json!({ "replicas": 2 }))).await;
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &t.ns);
    let statefulset = workload("db", json!({ "replicas": 2, "serviceName": "db" }));
    scales(t, statefulsets, statefulset).await;

    // No controllers: a Deployment makes no ReplicaSet.
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), &t.ns);
    let names: Vec<String> = replicasets
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|rs| rs.metadata.name)
        .collect();
    assert_eq!(names, ["web-rs"]);

    // DaemonSets and Jobs have a status but no scale.
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), &t.ns);
    daemonsets.create(&PostParams::default(), &workload("agent", json!({}))).await.unwrap();
    assert_eq!(api_error(daemonsets.get_scale("agent").await), (404, "NotFound".into()));
    let status = Patch::Merge(json!({ "status": { "numberReady": 1 } }));
    let ds = daemonsets.patch_status("agent", &PatchParams::default(), &status).await.unwrap();
    assert_eq!(ds.status.map(|s| s.number_ready), Some(1));

    let jobs: Api<Job> = Api::namespaced(client.clone(), &t.ns);
    let job: Job = serde_json::from_value(json!({
        "metadata": { "name": "once" },
        "spec": { "template": template("once", "Never") },
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let status = Patch::Merge(json!({ "status": { "succeeded": 1 } }));
    let job = jobs.patch_status("once", &PatchParams::default(), &status).await.unwrap();
    assert_eq!(job.status.and_then(|s| s.succeeded), Some(1));
    assert_eq!(api_error(jobs.get_scale("once").await), (404, "NotFound".into()));

    let accounts: Api<ServiceAccount> = Api::namespaced(client, &t.ns);
    let account: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": "robot" } })).unwrap();
    accounts.create(&PostParams::default(), &account).await.unwrap();
    assert_eq!(accounts.get("robot").await.unwrap().metadata.name.as_deref(), Some("robot"));
}
case!(Needs::Protocol, workload_kinds_serve_status_and_scale);

/// A Secret's `type` never changes, and one created `immutable` keeps its data and stays so;
/// its metadata still changes. The same words on every server.
async fn a_secret_keeps_its_type_and_an_immutable_one_its_data(t: &Target) {
    use k8s_openapi::api::core::v1::Secret;
    let secrets: Api<Secret> = Api::namespaced(t.client.clone(), &t.ns);
    let create = |body: Value| serde_json::from_value::<Secret>(body).expect("a valid Secret");
    let opaque = secrets
        .create(&PostParams::default(), &create(json!({ "metadata": { "name": "opaque" } })))
        .await
        .unwrap();
    // As a writer of TLS keys would replace it: the keys a `kubernetes.io/tls` Secret needs,
    // and that type.
    let mut tls = opaque.clone();
    tls.type_ = Some("kubernetes.io/tls".into());
    let key = |k: &str| (k.to_owned(), k8s_openapi::ByteString(b"x".to_vec()));
    tls.data = Some([key("tls.crt"), key("tls.key")].into());
    let err = secrets.replace("opaque", &PostParams::default(), &tls).await.unwrap_err();
    let kube_client::Error::Api(status) = err else { panic!("{err}") };
    assert_eq!(status.code, 422);
    assert_eq!(
        status.message,
        "Secret \"opaque\" is invalid: type: Invalid value: \"kubernetes.io/tls\": field is immutable"
    );
    let frozen =
        json!({ "metadata": { "name": "frozen" }, "immutable": true, "data": { "a": "YQ==" } });
    secrets.create(&PostParams::default(), &create(frozen)).await.unwrap();
    let forbidden = "field is immutable when `immutable` is set";
    for (patch, field) in
        [(json!({ "data": { "a": "Yg==" } }), "data"), (json!({ "immutable": false }), "immutable")]
    {
        let err = secrets.patch("frozen", &PatchParams::default(), &Patch::Merge(&patch)).await;
        let Err(kube_client::Error::Api(status)) = err else { panic!("{err:?}") };
        assert_eq!(status.code, 422);
        assert_eq!(
            status.message,
            format!("Secret \"frozen\" is invalid: {field}: Forbidden: {forbidden}")
        );
    }
    let labels = json!({ "metadata": { "labels": { "tier": "web" } } });
    let labelled = secrets.patch("frozen", &PatchParams::default(), &Patch::Merge(&labels)).await;
    assert_eq!(labelled.unwrap().metadata.labels.unwrap()["tier"], "web");
}
case!(Needs::Protocol, a_secret_keeps_its_type_and_an_immutable_one_its_data);
