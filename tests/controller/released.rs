//! A released informer (its last guard dropped) as those that kept a handle on it see it: not
//! synced, holding no version, dropped from a factory's wait for sync, not emptying a store
//! a new informer fills, and gone from the metrics.

use std::future::pending;
use std::time::Duration;

use ctrlkit::cache::{
    CacheSyncError, GuardedInformer, HasSynced, Indexer, ListWatch, SharedInformerFactory,
};
use k8s_openapi::api::core::v1::Pod;
use kube_client::Api;

use super::common::*;

/// Longer than every backoff and watch timeout: anything still to happen has happened.
const AN_HOUR: Duration = Duration::from_secs(3600);

#[tokio::test(start_paused = true)]
async fn a_released_informer_is_not_synced_and_holds_no_version() {
    let server = server().await;
    let client = server.in_process_client();
    create(&Api::namespaced(client.clone(), "default"), &["a"]).await;
    let factory = SharedInformerFactory::new(client);
    factory.start(pending());
    let guarded = factory.guarded_informer::<Pod>();
    factory.wait_for_cache_sync(pending()).await.unwrap();
    let informer = guarded.informer().clone();
    let version = informer.last_sync_resource_version().unwrap();
    assert!(informer.wait_for_resource_version(&version).await);
    drop(guarded);
    assert!(informer.is_released());
    assert!(!informer.has_synced(), "a released informer reports itself synced");
    let answer = informer.synced_indexer(Duration::from_secs(1)).await.map(|i| i.len());
    assert_eq!(answer, Err(CacheSyncError::Released("pods in all namespaces".into())));
    assert!(
        !informer.wait_for_resource_version(&version).await,
        "its empty store holds no version"
    );
    factory.shutdown().await;
}

/// The factory's wait for sync, polled once before `guarded` is dropped (one task: the
/// informer's own does not run in between).
async fn wait_while_released(
    factory: &SharedInformerFactory,
    guarded: GuardedInformer<Pod>,
) -> Result<(), CacheSyncError> {
    let both =
        async { tokio::join!(factory.wait_for_cache_sync(pending()), async { drop(guarded) }).0 };
    tokio::time::timeout(AN_HOUR, both).await.expect("the wait hangs on a released informer")
}

#[tokio::test(start_paused = true)]
async fn an_informer_released_before_its_task_ran_drops_out_of_the_wait_for_sync() {
    let server = server().await;
    let factory = SharedInformerFactory::new(server.in_process_client());
    factory.start(pending());
    let guarded = factory.guarded_informer::<Pod>();
    // The wait is polled first, then the guard goes before the informer's task ever runs.
    let waited = wait_while_released(&factory, guarded).await;
    assert_eq!(waited, Ok(()));
    factory.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_informer_released_while_it_lists_drops_out_of_the_wait_for_sync() {
    let server = server().await;
    let factory = SharedInformerFactory::new(server.in_process_client());
    factory.start(pending());
    let guarded = factory.guarded_informer::<Pod>();
    let informer = guarded.informer().clone();
    // One turn: its task starts the run and sends the list, which is not answered yet.
    tokio::task::yield_now().await;
    assert!(informer.is_running() && !informer.has_synced());
    let waited = wait_while_released(&factory, guarded).await;
    assert_eq!(waited, Ok(()), "a release fails the wait");
    factory.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_store_handed_to_the_informer_made_afresh_is_not_emptied_by_the_released_one() {
    let server = server().await;
    let client = server.in_process_client();
    create(&Api::namespaced(client.clone(), "default"), &["a", "b"]).await;
    let factory = SharedInformerFactory::new(client.clone());
    factory.start(pending());
    let store = Indexer::<Pod>::default();
    let list_watch = || ListWatch::new(Api::<Pod>::namespaced(client.clone(), "default"));
    let ask = || factory.guarded_informer_with(list_watch(), |b| b.indexer(store.clone()));
    let first = ask();
    factory.wait_for_cache_sync(pending()).await.unwrap();
    let old = first.informer().clone();
    assert_eq!(store.len(), 2);
    drop(first);
    assert!(store.is_empty() && store.is_stale(), "emptied at the release");
    let second = ask();
    factory.wait_for_cache_sync(pending()).await.unwrap();
    assert_eq!(second.indexer().len(), 2, "the new informer listed into the store");
    eventually("the old run ended", || old.has_stopped()).await;
    tokio::time::sleep(AN_HOUR).await;
    assert_eq!(store.len(), 2, "the old informer emptied the new one's store");
    assert!(!store.is_stale());
    factory.shutdown().await;
}

/// `wait_for_cache_sync` (client-go's, over `HasSynced`) returns once an informer it waits
/// for is released, naming it: a released informer never syncs.
#[tokio::test(start_paused = true)]
async fn the_wait_for_cache_sync_of_a_released_informer_returns_naming_it() {
    use ctrlkit::cache::wait_for_cache_sync;

    let server = server().await;
    let factory = SharedInformerFactory::new(server.in_process_client());
    // Never started: it cannot sync before its release.
    let guarded = factory.guarded_informer::<Pod>();
    let informer = guarded.informer().clone();
    let waited = {
        let informer = informer.clone();
        tokio::spawn(async move { wait_for_cache_sync(&[&informer], pending()).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(guarded);
    let waited = tokio::time::timeout(AN_HOUR, waited).await;
    let released = Err(CacheSyncError::Released("pods in all namespaces".into()));
    assert_eq!(waited.ok().map(Result::unwrap), Some(released.clone()), "the wait went on");
    let again = tokio::time::timeout(AN_HOUR, wait_for_cache_sync(&[&informer], pending())).await;
    assert_eq!(again.ok(), Some(released), "a wait begun after the release went on");
}

#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn a_released_informer_leaves_no_series_behind() {
    use std::sync::Arc;

    use ctrlkit::metrics::Registry;

    let server = server().await;
    let client = server.in_process_client();
    create(&Api::namespaced(client.clone(), "default"), &["a"]).await;
    let registry = Arc::new(Registry::new());
    let factory = SharedInformerFactory::builder(client).informer_metrics(registry.clone()).build();
    factory.start(pending());
    let guarded = factory.guarded_informer::<Pod>();
    factory.wait_for_cache_sync(pending()).await.unwrap();
    let series = r#"ctrlkit_informer_objects{resource="pods",namespace="",selector=""} 1"#;
    assert!(registry.encode().contains(series), "{}", registry.encode());
    let informer = guarded.informer().clone();
    drop(guarded);
    eventually("the run ended", || informer.has_stopped()).await;
    tokio::time::sleep(AN_HOUR).await;
    let text = registry.encode();
    let left: Vec<_> = text.lines().filter(|l| l.contains(r#"resource="pods""#)).collect();
    assert!(left.is_empty(), "series of a released informer: {left:#?}");
    factory.shutdown().await;
}

/// Two informers of one label set (a full and a metadata-only informer of pods) report under
/// one set of series: releasing one leaves them to the other, which keeps them current.
#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn releasing_an_informer_leaves_the_series_of_another_of_the_same_labels() {
    use std::sync::Arc;

    use ctrlkit::metrics::Registry;
    use kube_client::core::PartialObjectMeta;

    let server = server().await;
    let client = server.in_process_client();
    let pods = Api::namespaced(client.clone(), "default");
    create(&pods, &["a"]).await;
    let registry = Arc::new(Registry::new());
    let factory = SharedInformerFactory::builder(client).informer_metrics(registry.clone()).build();
    factory.start(pending());
    let full = factory.guarded_informer::<Pod>();
    let metadata = factory.guarded_informer::<PartialObjectMeta<Pod>>();
    factory.wait_for_cache_sync(pending()).await.unwrap();
    let released = metadata.informer().clone();
    drop(metadata);
    eventually("the released run ended", || released.has_stopped()).await;
    create(&pods, &["b"]).await;
    eventually("the live informer holds both", || full.indexer().len() == 2).await;
    let series = r#"ctrlkit_informer_objects{resource="pods",namespace="",selector=""} 2"#;
    let text = registry.encode();
    assert!(text.contains(series), "the live informer's series went with the other: {text}");
    drop(full);
    eventually("the last one's series went", || !registry.encode().contains(r#"resource="pods""#))
        .await;
    factory.shutdown().await;
}

/// Releases the informer it is given from inside the informer's own report of a list's
/// version: the moment between a list's store write and its informer counting as synced.
#[derive(Default)]
struct ReleasesOnTheFirstVersion(std::sync::Mutex<Option<GuardedInformer<Pod>>>);

impl ctrlkit::cache::InformerMetrics for ReleasesOnTheFirstVersion {
    fn list_request(&self, _: ctrlkit::cache::RequestResult) {}
    fn watch_request(&self, _: ctrlkit::cache::RequestResult) {}
    fn watch_event(&self, _: ctrlkit::cache::WatchEventType) {}
    fn relist(&self) {}
    fn objects(&self, _: usize) {}
    fn resource_version(&self, _: &str) {
        let guarded = self.0.lock().unwrap().take();
        drop(guarded);
    }
}

struct Provider(std::sync::Arc<ReleasesOnTheFirstVersion>);

impl ctrlkit::cache::InformerMetricsProvider for Provider {
    fn new_informer_metrics(
        &self,
        _: &ctrlkit::cache::InformerLabels,
    ) -> std::sync::Arc<dyn ctrlkit::cache::InformerMetrics> {
        self.0.clone()
    }
}

/// A release that lands while a list's end is being recorded leaves the informer not synced:
/// the list cannot mark it synced after the release emptied it.
#[tokio::test(start_paused = true)]
async fn a_release_during_a_lists_end_leaves_the_informer_not_synced() {
    let server = server().await;
    let client = server.in_process_client();
    create(&Api::namespaced(client.clone(), "default"), &["a"]).await;
    let metrics = std::sync::Arc::new(ReleasesOnTheFirstVersion::default());
    let factory = SharedInformerFactory::builder(client)
        .informer_metrics(std::sync::Arc::new(Provider(metrics.clone())))
        .build();
    let guarded = factory.guarded_informer::<Pod>();
    let informer = guarded.informer().clone();
    *metrics.0.lock().unwrap() = Some(guarded);
    factory.start(pending());
    eventually("released by its first version", || informer.is_released()).await;
    tokio::time::sleep(AN_HOUR).await;
    assert!(!informer.has_synced(), "a list ending at the release marked it synced");
    factory.shutdown().await;
}
