//! Informers counted by their users: the factory's last guard of an informer stops its list
//! and watch (no request of it reaches the server after) and empties its store, marked stale;
//! asked for again it lists afresh; an informer asked for without a guard runs on; a dropped
//! controller drops its guards.
//!
//! On a paused clock, through the server's in-process client (no socket for the clock to
//! jump ahead of): an hour passes in an instant while the test checks that nothing asks.

use std::future::pending;
use std::time::Duration;

use ctrlkit::cache::SharedInformerFactory;
use ctrlkit::controller::Controller;
use ctrlkit_apiserver::harness::{RequestLog, in_process_recording_client};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube_client::Api;

use super::common::*;

/// Longer than a watch's server timeout (5 to 10 minutes) and every backoff: an informer
/// still running would list or watch again within it.
const AN_HOUR: Duration = Duration::from_secs(3600);

/// The list and watch requests of `plural` sent so far (streaming lists are watches).
fn asked(log: &RequestLog, plural: &str) -> (usize, usize) {
    let of = |line: &String| line.split('?').next().is_some_and(|p| p.ends_with(plural));
    (log.lists().iter().filter(|l| of(l)).count(), log.watches().iter().filter(|l| of(l)).count())
}

#[tokio::test(start_paused = true)]
async fn the_last_guard_dropped_stops_the_watch_and_empties_the_store_and_a_new_ask_lists_afresh() {
    let server = server().await;
    let (client, log) = in_process_recording_client(&server);
    create(&Api::namespaced(client.clone(), "default"), &["a", "b"]).await;
    let factory = SharedInformerFactory::new(client);
    factory.start(pending());
    let first = factory.guarded_informer::<Pod>();
    let second = factory.guarded_informer::<Pod>();
    assert!(first.indexer().same_store(&second.indexer()), "two users, one informer");
    factory.wait_for_cache_sync(pending()).await.unwrap();
    eventually("its watch is open", || server.open_watches_of("pods") == 1).await;
    let indexer = first.indexer();
    assert_eq!(indexer.len(), 2);
    // A clone of the handle is no user: it keeps nothing running.
    let clone = first.informer().clone();
    drop(first);
    tokio::time::sleep(AN_HOUR).await;
    assert!(clone.is_running(), "a user is left: the informer runs");
    assert_eq!(server.open_watches_of("pods"), 1);
    assert_eq!(indexer.len(), 2);

    drop(second);
    eventually("the informer stopped", || clone.has_stopped()).await;
    eventually("its watch closed", || server.open_watches_of("pods") == 0).await;
    assert!(indexer.is_stale(), "a reader left holding the indexer is told it is stale");
    assert!(indexer.is_empty() && indexer.get_by_key("default/a").is_none());
    assert!(factory.informers().is_empty(), "{:?}", factory.informers());
    let before = asked(&log, "pods");
    tokio::time::sleep(AN_HOUR).await;
    assert_eq!(asked(&log, "pods"), before, "no list or watch of a released informer");
    assert_eq!(server.open_watches(), 0);

    let again = factory.guarded_informer::<Pod>();
    assert!(!again.indexer().same_store(&indexer), "a new informer, with a new store");
    factory.wait_for_cache_sync(pending()).await.unwrap();
    assert_eq!(again.indexer().len(), 2, "listed afresh");
    assert!(!again.indexer().is_stale());
    let streaming_lists = log.streaming_lists().len();
    assert_eq!(streaming_lists, 2, "a new streaming list: {:#?}", log.all());
    eventually("its watch is open", || server.open_watches_of("pods") == 1).await;
    assert!(indexer.is_empty() && indexer.is_stale(), "the old store stays released");
    factory.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_informer_asked_for_without_a_guard_runs_until_the_factory_stops() {
    let server = server().await;
    let client = server.in_process_client();
    create(&Api::namespaced(client.clone(), "default"), &["a"]).await;
    let factory = SharedInformerFactory::new(client);
    let pinned = factory.informer::<Pod>();
    let guarded = factory.guarded_informer::<Pod>();
    factory.start(pending());
    factory.wait_for_cache_sync(pending()).await.unwrap();
    drop(guarded);
    tokio::time::sleep(AN_HOUR).await;
    assert!(pinned.is_running(), "asked for without a guard: it never loses that user");
    assert_eq!(server.open_watches_of("pods"), 1);
    assert_eq!(pinned.indexer().len(), 1);
    assert!(!pinned.indexer().is_stale());
    factory.shutdown().await;
    assert!(pinned.has_stopped());
    eventually("its watch closed", || server.open_watches_of("pods") == 0).await;
    assert_eq!(pinned.indexer().len(), 1, "a shut-down factory's stores keep what they held");
}

#[tokio::test(start_paused = true)]
async fn a_guard_dropped_before_start_leaves_nothing_to_start() {
    let server = server().await;
    let (client, log) = in_process_recording_client(&server);
    let factory = SharedInformerFactory::new(client);
    let guarded = factory.guarded_informer::<Pod>();
    let indexer = guarded.indexer();
    drop(guarded);
    assert!(indexer.is_stale());
    factory.start(pending());
    factory.wait_for_cache_sync(pending()).await.unwrap();
    tokio::time::sleep(AN_HOUR).await;
    assert!(log.all().is_empty(), "nothing listed or watched: {:#?}", log.all());
}

#[tokio::test(start_paused = true)]
async fn a_dropped_controller_releases_the_informers_only_it_used() {
    let server = server().await;
    let (client, log) = in_process_recording_client(&server);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    create(&pods, &["a"]).await;
    let factory = SharedInformerFactory::new(client);
    factory.start(pending());
    // Both controllers reconcile pods; only the one dropped watches ConfigMaps.
    let staying = Controller::builder(pods.clone()).name("staying").factory(&factory).build();
    let leaving = Controller::builder(pods.clone())
        .name("leaving")
        .factory(&factory)
        .watches(configmaps, |_: &ConfigMap| Vec::new())
        .build();
    let (stays, left) = (ReconcileLog::default(), ReconcileLog::default());
    let (_stop, _staying_run) = run_controller(&staying, stays.reconciler());
    let (_stop_leaving, leaving_run) = run_controller(&leaving, left.reconciler());
    eventually("both reconciled a", || {
        stays.count("default/a") == 1 && left.count("default/a") == 1
    })
    .await;
    assert_eq!(
        server.open_watches_by_resource().len(),
        2,
        "{:?}",
        server.open_watches_by_resource()
    );
    let pods_store = leaving.informer().indexer();
    let watched = factory.informers();
    assert_eq!(watched.len(), 2, "{watched:?}");

    // A Manager removing a controller drops its run and every clone of it.
    leaving_run.abort();
    let _ = leaving_run.await;
    drop(leaving);
    eventually("the ConfigMap watch closed", || server.open_watches_of("configmaps") == 0).await;
    assert_eq!(server.open_watches_of("pods"), 1, "the pods informer has a user left");
    assert_eq!(factory.informers(), ["pods in namespace default"]);
    assert!(!pods_store.is_stale(), "the pods store is the staying controller's too");
    let before = (asked(&log, "configmaps"), asked(&log, "pods"));
    tokio::time::sleep(AN_HOUR).await;
    assert_eq!(asked(&log, "configmaps"), before.0, "no list or watch of ConfigMaps");
    assert!(asked(&log, "pods").1 > before.1.1, "the pods watch renews within the hour");
    assert_eq!(server.open_watches_of("configmaps"), 0);

    create(&pods, &["b"]).await;
    eventually("the staying controller reconciles b", || stays.count("default/b") == 1).await;
    assert_eq!(left.count("default/b"), 0);
    factory.shutdown().await;
}

/// Over a socket, the server learns the watch is gone when the client's connection closes.
#[tokio::test]
async fn over_a_connection_the_released_watch_closes_on_the_server() {
    let server = server().await;
    let factory = SharedInformerFactory::new(server.client());
    factory.start(pending());
    let guarded = factory.guarded_informer::<ConfigMap>();
    factory.wait_for_cache_sync(pending()).await.unwrap();
    eventually("its watch is open", || server.open_watches_of("configmaps") == 1).await;
    drop(guarded);
    eventually("its watch closed", || server.open_watches_of("configmaps") == 0).await;
    factory.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_controller_dropped_and_built_again_reconciles_every_object_of_its_kind() {
    let server = server().await;
    let (client, requests) = in_process_recording_client(&server);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    create_configmap(&server, "a").await;
    let factory = SharedInformerFactory::new(client);
    factory.start(pending());
    let first = Controller::builder(configmaps.clone()).factory(&factory).build();
    // Streaming lists of ConfigMaps: the informer's lists (the only kind listed here).
    let listed = || requests.streaming_lists().iter().filter(|r| r.contains("configmaps")).count();
    let log = ReconcileLog::default();
    let (_stop, run) = run_controller(&first, log.reconciler());
    eventually("a reconciled", || log.count("default/a") == 1).await;
    run.abort();
    let _ = run.await;
    drop(first);
    eventually("its watch closed", || server.open_watches_of("configmaps") == 0).await;
    // Made while nothing watches: only a fresh list can bring it.
    create_configmap(&server, "b").await;
    let before = listed();

    let again = Controller::builder(configmaps).factory(&factory).build();
    let log = ReconcileLog::default();
    let (_stop, _run) = run_controller(&again, log.reconciler());
    eventually("a and b reconciled by the new controller", || {
        log.count("default/a") >= 1 && log.count("default/b") >= 1
    })
    .await;
    let after = listed();
    assert_eq!(
        after,
        before + 1,
        "the new controller's informer listed afresh: {before:?} then {after:?}"
    );
    factory.shutdown().await;
}

#[tokio::test]
async fn a_controller_dropped_without_running_takes_its_handlers_off_shared_informers() {
    let server = server().await;
    let factory = SharedInformerFactory::new(server.client());
    let pods = factory.informer::<Pod>();
    let controller =
        Controller::builder(Api::<Pod>::all(server.client())).factory(&factory).build();
    assert_eq!(
        pods.handler_count(),
        2,
        "the controller's handler, and the observer of the children it creates"
    );
    drop(controller);
    assert_eq!(pods.handler_count(), 0, "no handler left feeding a queue nobody reads");
}

/// A handler that owns its informer's last guard, dropped as it is removed (under the lock
/// its informer's handlers are kept under), releases the informer instead of deadlocking:
/// the release takes no lock a handler's code may hold. Run on a thread of its own, so that
/// a deadlock fails the test rather than hanging it.
#[tokio::test]
async fn a_handler_dropping_its_informers_last_guard_releases_it_without_a_deadlock() {
    use std::sync::Arc;

    use ctrlkit::cache::ResourceEventHandlerFuncs;

    let server = server().await;
    let factory = SharedInformerFactory::new(server.in_process_client());
    let (informer, guard) = factory.guarded_informer::<Pod>().into_parts();
    let handler = ResourceEventHandlerFuncs::new().on_add(move |_: &Arc<Pod>| {
        let _ = &guard;
    });
    let registration = informer.add_event_handler(handler);
    let (done, removed) = std::sync::mpsc::channel();
    let remover = informer.clone();
    std::thread::spawn(move || {
        let _ = done.send(remover.remove_event_handler(&registration));
    });
    let removed = removed.recv_timeout(Duration::from_secs(30));
    assert_eq!(removed, Ok(true), "removing the handler that held the last guard deadlocked");
    assert!(informer.is_released(), "its guard dropped with it released the informer");
    assert!(factory.informers().is_empty(), "{:?}", factory.informers());
}
