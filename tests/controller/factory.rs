//! The shared informer factory: one informer per kind, namespace and selectors; the one owner
//! of their runs; sync waits that name what did not sync.

use std::time::Duration;

use ctrlkit::cache::{CacheSyncError, ListWatch, SharedInformerFactory};
use ctrlkit_apiserver::{Failure, ResourceType};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube_client::Api;
use kube_client::core::discovery::Scope;

use super::common::*;

#[tokio::test]
async fn one_informer_per_kind_namespace_and_selector() {
    let server = server().await;
    let client = server.client();
    let factory = SharedInformerFactory::builder(client.clone()).namespace("default").build();
    let pods = factory.informer::<Pod>();
    assert!(pods.indexer().same_store(&factory.informer::<Pod>().indexer()), "asked twice: one");
    let same = factory.informer_for(Api::<Pod>::namespaced(client.clone(), "default"));
    assert!(same.indexer().same_store(&pods.indexer()), "the same collection through an Api");
    let selected = factory.informer_for(
        ListWatch::new(Api::<Pod>::namespaced(client.clone(), "default")).labels("app=web"),
    );
    assert!(!selected.indexer().same_store(&pods.indexer()), "another selector: another informer");
    let everywhere = factory.informer_for(Api::<Pod>::all(client.clone()));
    assert!(!everywhere.indexer().same_store(&pods.indexer()), "another namespace: another");
    let metadata = factory.metadata_informer::<Pod>();
    assert!(metadata.list_watch().metadata_only());
    // The factory's namespace applies to namespaced kinds only.
    assert_eq!(pods.list_watch().url(), "/api/v1/namespaces/default/pods");
    assert_eq!(factory.informer::<Namespace>().list_watch().url(), "/api/v1/namespaces");
    let widgets = ResourceType::new("example.com", "v1", "Widget", "widgets", true).api_resource();
    let dynamic = factory.dynamic_informer(&widgets, Scope::Namespaced);
    assert_eq!(dynamic.list_watch().url(), "/apis/example.com/v1/namespaces/default/widgets");
    assert_eq!(factory.informers().len(), 6, "{:#?}", factory.informers());
}

#[tokio::test]
async fn informers_asked_for_after_start_run_at_once_and_shutdown_stops_them_all() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a"]).await;
    let factory = SharedInformerFactory::new(server.client());
    let early = factory.informer::<Pod>();
    assert!(!early.is_running(), "nothing runs before start");
    let (_stop, stopped) = shutdown();
    factory.start(stopped);
    factory.wait_for_cache_sync(std::future::pending()).await.unwrap();
    assert_eq!(early.indexer().len(), 1);
    let late = factory.informer::<ConfigMap>();
    eventually("the late informer runs", || late.is_running()).await;
    factory.wait_for_cache_sync(std::future::pending()).await.unwrap();
    factory.shutdown().await;
    assert!(early.has_stopped() && late.has_stopped());
    assert_eq!(early.indexer().len(), 1, "a stopped informer keeps its store");
    let after = factory.informer::<Namespace>();
    factory.start(std::future::pending());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!after.is_running(), "a shut-down factory starts nothing");
}

#[tokio::test]
async fn the_shutdown_given_to_start_stops_the_informers() {
    let server = server().await;
    let factory = SharedInformerFactory::new(server.client());
    let pods = factory.informer::<Pod>();
    let (stop, stopped) = shutdown();
    factory.start(stopped);
    factory.wait_for_cache_sync(std::future::pending()).await.unwrap();
    stop.send(()).unwrap();
    eventually("stopped", || pods.has_stopped()).await;
}

#[tokio::test]
async fn wait_for_cache_sync_names_the_informers_that_did_not_sync() {
    let server = server().await;
    server.faults().fail_next(usize::MAX, Failure::InternalError);
    let factory = SharedInformerFactory::builder(server.client()).namespace("default").build();
    factory.informer_with(Api::<Pod>::namespaced(server.client(), "default"), |b| {
        b.backoff(fast_backoff())
    });
    let (stop, stopped) = shutdown();
    factory.start(stopped);
    let result = factory.wait_for_cache_sync(tokio::time::sleep(Duration::from_millis(200))).await;
    assert_eq!(result, Err(CacheSyncError::Shutdown(vec!["pods in namespace default".into()])));
    // An informer that stops before it syncs (its owner shut it down) fails the wait at once.
    stop.send(()).unwrap();
    let result = factory.wait_for_cache_sync(std::future::pending()).await;
    assert_eq!(result, Err(CacheSyncError::Stopped("pods in namespace default".into())));
    server.faults().fail_next(0, Failure::InternalError);
}

#[tokio::test]
async fn informer_with_shapes_a_new_informer_only() {
    let server = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    create_configmap(&server, "a").await;
    let factory = SharedInformerFactory::new(server.client());
    let marked = |mut cm: ConfigMap| {
        cm.metadata.labels.get_or_insert_default().insert("seen".into(), "yes".into());
        cm
    };
    let first = factory.informer_with(cms.clone(), |b| b.transform(marked));
    // Asked again with another shape: the informer keeps the first.
    let second = factory.informer_with(cms.clone(), |b| b.transform(|cm| cm));
    assert!(first.indexer().same_store(&second.indexer()));
    factory.start(std::future::pending());
    factory.wait_for_cache_sync(std::future::pending()).await.unwrap();
    let cached = second.indexer().get_by_key("default/a").unwrap();
    assert_eq!(cached.metadata.labels.as_ref().unwrap()["seen"], "yes");
    factory.shutdown().await;
}
