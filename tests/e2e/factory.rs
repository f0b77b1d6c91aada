//! Shared informers: controllers and handlers on one factory share one list and one watch
//! per kind; a controller that stops leaves the informers to the factory; metadata-only
//! informers cache metadata alone.

use ctrlkit::cache::{ObjectKey, SharedInformerFactory};
use ctrlkit::controller::Controller;
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target, recording_client};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube_client::api::PostParams;
use kube_client::{Api, ResourceExt};
use serde_json::json;

use super::common::*;

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": "web"}}, "data": {"k": "v"}}),
    )
    .unwrap()
}

async fn two_controllers_and_a_handler_share_one_list_and_one_watch_per_kind(t: &Target) {
    let (client, log) = recording_client(t.config());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &t.ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &t.ns);
    create(&pods, &["a", "b"], json!({})).await;
    cms.create(&PostParams::default(), &configmap("c")).await.unwrap();

    let factory = SharedInformerFactory::builder(client.clone()).namespace(&t.ns).build();
    let handler = Recorder::default();
    factory.informer::<Pod>().add_event_handler(handler.clone());
    let (by_pod, by_cm) = (ReconcileLog::default(), ReconcileLog::default());
    let (ns1, ns2) = (t.ns.clone(), t.ns.clone());
    // Pods, also reconciled when a configmap of their name changes; and the other way round.
    let pod_controller = Controller::builder(pods.clone())
        .factory(&factory)
        .watches(cms.clone(), move |cm: &ConfigMap| {
            Some(ObjectKey::namespaced(&ns1, &cm.name_any()))
        })
        .build();
    let cm_controller = Controller::builder(cms.clone())
        .factory(&factory)
        .watches(pods.clone(), move |pod: &Pod| Some(ObjectKey::namespaced(&ns2, &pod.name_any())))
        .build();
    let (stop_factory, factory_stopped) = shutdown();
    factory.start(factory_stopped);
    factory.wait_for_cache_sync(std::future::pending()).await.expect("the caches sync");
    let (stop_pods, running_pods) = run_controller(&pod_controller, by_pod.reconciler::<Pod>());
    let (stop_cms, running_cms) = run_controller(&cm_controller, by_cm.reconciler::<ConfigMap>());
    let k = |name: &str| format!("{}/{name}", t.ns);
    eventually("every object reconciled by both controllers", || {
        ["a", "b", "c"].iter().all(|n| by_pod.count(&k(n)) >= 1 && by_cm.count(&k(n)) >= 1)
    })
    .await;
    eventually("the plain handler heard both pods", || {
        handler.saw(&Seen::Add("a".into())) && handler.saw(&Seen::Add("b".into()))
    })
    .await;
    let per_kind = |requests: Vec<String>, plural: &str| {
        requests.iter().filter(|r| r.contains(&format!("/{plural}?"))).count()
    };
    // Per kind, one sync and one watch: a streaming list that goes on as the watch; on 1.20,
    // which refuses it, a list and then a watch from its version (which may open a moment
    // after the sync: waited for, not raced).
    let streaming = t.version().at_least(27);
    for plural in ["pods", "configmaps"] {
        let shared = || {
            let requests = (
                per_kind(log.streaming_lists(), plural),
                per_kind(log.lists(), plural),
                per_kind(log.plain_watches(), plural),
            );
            requests == if streaming { (1, 0, 0) } else { (1, 1, 1) }
        };
        eventually(&format!("one sync and one watch of {plural}"), shared).await;
    }
    if !t.is_real() {
        let served = t.embedded().requests();
        // The namespace's creation is the case's own, through another client.
        assert_eq!((served.list, served.watch), (0, 2), "the server saw {served:?}");
    }

    // The pod controller stops; the informers are the factory's and go on.
    stop_pods.send(()).unwrap();
    running_pods.await.unwrap().expect("the pod controller stops cleanly");
    assert!(factory.informer::<Pod>().is_running(), "a controller stopped a shared informer");
    create(&pods, &["late"], json!({})).await;
    eventually("the other controller and the handler still hear pods", || {
        by_cm.count(&k("late")) >= 1 && handler.saw(&Seen::Add("late".into()))
    })
    .await;
    assert_eq!(by_pod.count(&k("late")), 0, "the stopped controller reconciled nothing more");
    let pod_watches = if streaming { 1 } else { 2 }; // 1.20: the refused streaming list too
    assert_eq!(per_kind(log.watches(), "pods"), pod_watches, "no second watch: {:#?}", log.all());
    // Left: the plain handler and the configmap controller's two (its watch of pods, and the
    // observer that counts the new children its own writes expect).
    assert_eq!(
        factory.informer::<Pod>().handler_count(),
        3,
        "the stopped controller's handlers are gone"
    );

    stop_cms.send(()).unwrap();
    running_cms.await.unwrap().expect("the configmap controller stops cleanly");
    stop_factory.send(()).unwrap();
    factory.shutdown().await;
    assert!(factory.informer::<Pod>().has_stopped());
}
case!(Needs::Protocol, two_controllers_and_a_handler_share_one_list_and_one_watch_per_kind);

/// A metadata-only informer holds each object's metadata, labels and owner included, and
/// none of its data; a full informer of the same kind is another informer.
async fn a_metadata_informer_caches_only_metadata(t: &Target) {
    let (client, log) = recording_client(t.config());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &t.ns);
    cms.create(&PostParams::default(), &configmap("a")).await.unwrap();
    let factory = SharedInformerFactory::builder(client).namespace(&t.ns).build();
    let metadata = factory.metadata_informer::<ConfigMap>();
    let full = factory.informer::<ConfigMap>();
    let recorder = Recorder::default();
    metadata.add_event_handler(recorder.clone());
    let (stop, stopped) = shutdown();
    factory.start(stopped);
    factory.wait_for_cache_sync(std::future::pending()).await.unwrap();
    let key = ObjectKey::namespaced(&t.ns, "a");
    let cached = metadata.indexer().get(&key).expect("a cached");
    assert_eq!(cached.labels().get("app").map(String::as_str), Some("web"));
    assert!(cached.metadata.managed_fields.is_none(), "managedFields dropped here too");
    assert!(full.indexer().get(&key).unwrap().data.is_some(), "the full informer has the data");
    cms.create(&PostParams::default(), &configmap("b")).await.unwrap();
    eventually("b through the metadata watch", || recorder.saw(&Seen::Add("b".into()))).await;
    // One sync each for the full and the metadata informer: streaming lists, or (1.20) lists.
    let (syncs, metadata_accept) = if t.version().at_least(27) {
        (log.streaming_lists(), "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
    } else {
        (log.lists(), "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
    };
    assert_eq!(syncs.len(), 2, "one sync each on {}: {:#?}", t.version(), log.all());
    let metadata_syncs = log
        .accepts()
        .into_iter()
        // With protobuf on (CTRLKIT_WIRE_FORMAT), the JSON form comes second.
        .filter(|(line, accept)| syncs.contains(line) && accept.contains(metadata_accept))
        .count();
    assert_eq!(metadata_syncs, 1, "the metadata informer asks for metadata: {:#?}", log.accepts());
    stop.send(()).unwrap();
    factory.shutdown().await;
}
case!(Needs::Protocol, a_metadata_informer_caches_only_metadata);
