//! The informer: sync, events, resume, relist with tombstones, resync, late handlers,
//! transforms, streaming lists, failures.

use std::sync::Arc;
use std::time::Duration;

use ctrlkit::cache::{
    CacheSyncError, HasSynced, Informer, ListWatch, ObjectKey, ResourceEventHandler,
    wait_for_cache_sync,
};
use ctrlkit_apiserver::{ApiServer, Failure};
use k8s_openapi::api::core::v1::Pod;
use kube_client::Api;
use kube_client::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::common::*;

/// An informer on the list + watch path (streaming lists off), in pages of two: what a
/// server without streaming lists gets, and what these cases count requests of.
fn informer(pods: &Api<Pod>) -> Informer<Pod> {
    Informer::builder(ListWatch::new(pods.clone()).page_size(2))
        .backoff(fast_backoff())
        .streaming_list(false)
        .build()
}

#[tokio::test]
async fn initial_sync_lists_page_by_page_and_fills_the_store() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a", "b", "c", "d", "e"]).await;
    let inf = informer(&pods);
    let rec = Recorder::default();
    inf.add_event_handler(rec.clone());
    assert!(!inf.has_synced());
    let (stop, run) = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    assert_eq!(inf.indexer().len(), 5);
    assert_eq!(server.requests().list, 3, "five pods in pages of two");
    eventually("five adds", || rec.count(|s| matches!(s, Seen::Add(_))) == 5).await;
    stop.send(()).unwrap();
    run.await.unwrap();
    assert!(!inf.is_running());
}

#[tokio::test]
async fn adds_updates_and_deletes_reach_the_store_then_the_handlers() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let inf = informer(&pods);
    let rec = Recorder::default();
    inf.add_event_handler(rec.clone());
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    create(&pods, &["a"]).await;
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}})),
    )
    .await
    .unwrap();
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    // As from a real server, a pod's delete arrives as an update (its deletion timestamp)
    // and then the delete.
    eventually("add, update, delete", || rec.seen().len() == 4).await;
    assert_eq!(
        rec.seen(),
        [
            Seen::Add("a".into()),
            Seen::Update("a".into(), false),
            Seen::Update("a".into(), false),
            Seen::Delete("a".into())
        ]
    );
    assert!(inf.indexer().get(&ObjectKey::namespaced("default", "a")).is_none());
}

#[tokio::test]
async fn a_dropped_watch_resumes_from_the_last_version_without_a_relist() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a"]).await;
    let inf = informer(&pods);
    let rec = Recorder::default();
    inf.add_event_handler(rec.clone());
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    eventually("a watch", || server.requests().watch == 1).await;
    for round in 0..3 {
        server.faults().close_watches();
        let name = format!("after-{round}");
        create(&pods, &[&name]).await;
        eventually("the pod created after the drop", || {
            inf.indexer().get_by_key(&format!("default/{name}")).is_some()
        })
        .await;
    }
    assert_eq!(server.requests().list, 1, "no relist");
    assert!(server.requests().watch >= 4, "three resumed watches");
    assert_eq!(
        rec.count(|s| matches!(s, Seen::Add(_))),
        4,
        "each pod added once: nothing replayed twice"
    );
}

#[tokio::test]
async fn a_410_relists_and_delivers_tombstones_for_deletes_missed_while_disconnected() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a", "b", "c"]).await;
    let inf = informer(&pods);
    let rec = Recorder::default();
    inf.add_event_handler(rec.clone());
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    let lists_before = server.requests().list;

    // Disconnect and keep the informer out while the world changes behind its back.
    server.faults().fail_next_watches(usize::MAX, Failure::InternalError);
    server.faults().close_watches();
    pods.delete("b", &DeleteParams::default()).await.unwrap();
    pods.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}})),
    )
    .await
    .unwrap();
    create(&pods, &["d"]).await;
    server.faults().compact();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.faults().fail_next_watches(0, Failure::InternalError);

    eventually("the tombstone for b", || rec.seen().contains(&Seen::Tombstone("default/b".into())))
        .await;
    assert!(server.requests().list > lists_before, "410 made it relist");
    eventually("d added and c updated", || {
        rec.seen().contains(&Seen::Add("d".into()))
            && rec.seen().contains(&Seen::Update("c".into(), false))
    })
    .await;
    let mut keys: Vec<String> = inf.indexer().list_keys().iter().map(|k| k.to_string()).collect();
    keys.sort();
    assert_eq!(keys, ["default/a", "default/c", "default/d"]);
    assert!(
        !rec.seen().contains(&Seen::Update("a".into(), false)),
        "an unchanged object is not reported"
    );
}

#[tokio::test]
async fn resync_replays_the_cache_as_updates() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a", "b"]).await;
    let inf =
        Informer::builder(ListWatch::new(pods.clone())).resync(Duration::from_millis(150)).build();
    let rec = Recorder::default();
    inf.add_event_handler(rec.clone());
    let _running = start(&inf);
    eventually("two resyncs of both pods", || {
        rec.count(|s| matches!(s, Seen::Update(_, true))) >= 4
    })
    .await;
}

#[tokio::test]
async fn a_handler_added_late_first_receives_the_current_contents() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a", "b"]).await;
    let inf = informer(&pods);
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    let late = Recorder::default();
    inf.add_event_handler(late.clone());
    create(&pods, &["c"]).await;
    eventually("three adds", || late.seen().len() == 3).await;
    let mut adds = late.seen();
    adds[..2].sort_by_key(|s| format!("{s:?}"));
    assert_eq!(adds, [Seen::Add("a".into()), Seen::Add("b".into()), Seen::Add("c".into())]);
}

#[tokio::test]
async fn a_panicking_handler_keeps_receiving() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let inf = informer(&pods);
    let rec = Recorder::default();
    let inner = rec.clone();
    inf.add_event_handler(ctrlkit::cache::ResourceEventHandlerFuncs::new().on_add(
        move |p: &Arc<Pod>| {
            ResourceEventHandler::<Pod>::on_add(&inner, p, false);
            assert_ne!(p.metadata.name.as_deref(), Some("boom"), "handler panics on boom");
        },
    ));
    let _running = start(&inf);
    create(&pods, &["boom", "after"]).await;
    eventually("the add after the panic", || rec.seen().contains(&Seen::Add("after".into()))).await;
}

#[tokio::test]
async fn transform_runs_before_objects_are_stored() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a"]).await;
    let inf = Informer::builder(ListWatch::new(pods.clone()))
        .transform(|mut p: Pod| {
            p.metadata.managed_fields = None;
            p.metadata.labels.get_or_insert_default().insert("transformed".into(), "yes".into());
            p
        })
        .build();
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    let cached = inf.indexer().get_by_key("default/a").unwrap();
    assert_eq!(
        cached.metadata.labels.as_ref().unwrap().get("transformed").map(String::as_str),
        Some("yes")
    );
}

#[tokio::test]
async fn streaming_lists_sync_without_a_list_request_and_fall_back_when_refused() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a", "b"]).await;
    let streaming = Informer::builder(ListWatch::new(pods.clone()))
        .streaming_list(true)
        .backoff(fast_backoff())
        .build();
    let _running = start(&streaming);
    assert!(wait_for_cache_sync(&[&streaming], std::future::pending()).await.is_ok());
    assert_eq!(streaming.indexer().len(), 2);
    assert_eq!(server.requests().list, 0, "synced from the watch alone");
    create(&pods, &["c"]).await;
    eventually("c through the same stream", || streaming.indexer().len() == 3).await;

    // A server that refuses streaming lists (as Kubernetes 1.20 does, with 422).
    server.faults().fail_next_watches(1, Failure::Invalid);
    let fallback = Informer::builder(ListWatch::new(pods.clone()))
        .streaming_list(true)
        .backoff(fast_backoff())
        .build();
    let _running = start(&fallback);
    assert!(wait_for_cache_sync(&[&fallback], std::future::pending()).await.is_ok());
    assert_eq!(fallback.indexer().len(), 3);
    assert_eq!(server.requests().list, 1, "fell back to list + watch");
}

#[tokio::test]
async fn list_failures_back_off_and_recover() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a"]).await;
    server.faults().fail_next(3, Failure::InternalError);
    let inf = informer(&pods);
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    assert_eq!(server.requests().list, 4, "three failed lists, then one that worked");
    assert_eq!(inf.indexer().len(), 1);
}

#[tokio::test]
async fn wait_for_cache_sync_gives_up_at_shutdown() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let inf = informer(&pods);
    let synced: &dyn HasSynced = &inf;
    let result =
        wait_for_cache_sync(&[synced], tokio::time::sleep(Duration::from_millis(50))).await;
    // The one error of every cache wait, naming what did not sync.
    assert_eq!(result, Err(CacheSyncError::Shutdown(vec!["pods in namespace default".into()])));
}

/// An informer of pods whose run ended before its first list was in (every list failed), and
/// its server, failing every request until told otherwise.
async fn stopped_before_its_sync() -> (ApiServer, Informer<Pod>) {
    let server = server().await;
    server.faults().fail_next(usize::MAX, Failure::InternalError);
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let inf = informer(&pods);
    let (stop, run) = start(&inf);
    stop.send(()).unwrap();
    run.await.unwrap();
    (server, inf)
}

/// An informer whose run ends before its first list is in never syncs: `wait_for_cache_sync`
/// fails at once naming it, as the factory's and the controllers' waits do, rather than
/// waiting for a shutdown that may never come.
#[tokio::test]
async fn wait_for_cache_sync_fails_when_the_run_stops_before_the_sync() {
    let (_server, inf) = stopped_before_its_sync().await;
    let informers: [&dyn HasSynced; 1] = [&inf];
    let wait = wait_for_cache_sync(&informers, std::future::pending());
    let result = tokio::time::timeout(Duration::from_secs(10), wait).await;
    let stopped = CacheSyncError::Stopped("pods in namespace default".into());
    assert_eq!(result.ok(), Some(Err(stopped)), "the wait ends, naming the stopped informer");
}

/// An informer run again after a run that ended before its sync is not held to that stop: a
/// wait begun once the new run has begun (a yield after the spawn, on this current-thread
/// runtime) ends when the new run syncs.
#[tokio::test]
async fn wait_for_cache_sync_after_a_run_again_waits_for_the_new_run() {
    let (server, inf) = stopped_before_its_sync().await;
    server.faults().fail_next(0, Failure::InternalError);
    let _again = start(&inf);
    tokio::task::yield_now().await;
    let informers: [&dyn HasSynced; 1] = [&inf];
    let wait = wait_for_cache_sync(&informers, std::future::pending());
    let result = tokio::time::timeout(Duration::from_secs(10), wait).await;
    assert_eq!(result.ok(), Some(Ok(())), "the new run synced");
}

#[tokio::test]
async fn managed_fields_are_dropped_unless_kept() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let with_fields: Pod =
        serde_json::from_value(ctrlkit_apiserver::fixtures::realistic_pod("default", 1, true))
            .unwrap();
    pods.create(&Default::default(), &with_fields).await.unwrap();
    assert!(
        pods.get("web-000001").await.unwrap().metadata.managed_fields.is_some(),
        "the server keeps them"
    );
    let lean = Informer::new(ListWatch::new(pods.clone()));
    let full = Informer::builder(ListWatch::new(pods.clone())).keep_managed_fields(true).build();
    let _lean = start(&lean);
    let _full = start(&full);
    assert!(wait_for_cache_sync(&[&lean, &full], std::future::pending()).await.is_ok());
    assert!(
        lean.indexer().get_by_key("default/web-000001").unwrap().metadata.managed_fields.is_none()
    );
    assert!(
        full.indexer().get_by_key("default/web-000001").unwrap().metadata.managed_fields.is_some()
    );
}

#[tokio::test]
async fn dynamic_objects_of_a_custom_resource_are_informed_too() {
    use ctrlkit_apiserver::{ApiServer, ResourceType};
    use kube_client::api::{DynamicObject, PostParams};
    let widget = ResourceType::new("example.com", "v1", "Widget", "widgets", true);
    let ar = widget.api_resource();
    let server = ApiServer::builder().resource(widget).start().await.unwrap();
    let widgets: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &ar);
    widgets
        .create(
            &PostParams::default(),
            &DynamicObject::new("w1", &ar).data(json!({"spec": {"size": 1}})),
        )
        .await
        .unwrap();
    let inf = Informer::new(ListWatch::new_with(widgets.clone(), &ar));
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    widgets
        .create(
            &PostParams::default(),
            &DynamicObject::new("w2", &ar).data(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap();
    eventually("w2 cached", || inf.indexer().get_by_key("default/w2").is_some()).await;
    assert_eq!(inf.indexer().get_by_key("default/w1").unwrap().data["spec"]["size"], 1);
}

#[tokio::test]
async fn watches_that_end_at_once_are_backed_off_not_hammered() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a"]).await;
    server.faults().set_watch_lifetime(Some(Duration::ZERO));
    let inf = informer(&pods);
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    tokio::time::sleep(Duration::from_millis(600)).await;
    let watches = server.requests().watch;
    // Backoff of 20 ms doubling to 100 ms allows about ten in 600 ms; a loop without it makes
    // hundreds.
    assert!((2..=20).contains(&watches), "{watches} watches in 600 ms");
    assert_eq!(server.requests().list, 1, "a short watch resumes; it does not relist");
    server.faults().set_watch_lifetime(None);
    create(&pods, &["b"]).await;
    eventually("b after watches recover", || inf.indexer().len() == 2).await;
}

#[tokio::test]
async fn a_run_that_is_dropped_leaves_the_informer_stopped_and_runnable_again() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a"]).await;
    let inf = informer(&pods);
    let (_stop, run) = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    assert!(inf.is_running());
    // A run cut off mid-flight (its task aborted) must not leave the informer "running":
    // that would make every later `run` return at once and its cache never change again.
    run.abort();
    let _ = run.await;
    assert!(!inf.is_running() && inf.has_stopped());
    let (_stop, _run) = start(&inf);
    eventually("running again", || inf.is_running()).await;
    create(&pods, &["b"]).await;
    eventually("the new run's watch", || inf.indexer().len() == 2).await;
}

/// A transform that panics on one object fails the list, watch or streaming list that
/// brought it; each is retried with backoff, so once the transform stops panicking the cache
/// holds the object, and the informer never stopped.
#[tokio::test]
async fn a_panicking_transform_fails_the_list_watch_or_streaming_list_and_is_retried() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["boom-list"]).await;
    for streaming in [false, true] {
        let explode = Arc::new(AtomicBool::new(true));
        let panics = Arc::new(AtomicUsize::new(0));
        let (e, p) = (explode.clone(), panics.clone());
        let inf = Informer::builder(ListWatch::new(pods.clone()))
            .backoff(fast_backoff())
            .streaming_list(streaming)
            .transform(move |pod: Pod| {
                let name = pod.metadata.name.clone().unwrap_or_default();
                if name.starts_with("boom") && e.load(Ordering::SeqCst) {
                    p.fetch_add(1, Ordering::SeqCst);
                    panic!("transform cannot take {name}");
                }
                pod
            })
            .build();
        let _running = start(&inf);
        // The first list (or streaming list) panics: retried, not synced, still running.
        eventually("two failed lists", || panics.load(Ordering::SeqCst) >= 2).await;
        assert!(inf.is_running() && !inf.has_synced(), "streaming: {streaming}");
        explode.store(false, Ordering::SeqCst);
        assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
        assert!(inf.indexer().get_by_key("default/boom-list").is_some());

        // A watched object that makes the transform panic: the watch resumes from before it
        // and gets it again.
        explode.store(true, Ordering::SeqCst);
        let before = panics.load(Ordering::SeqCst);
        let name = format!("boom-watch-{streaming}");
        create(&pods, &[&name]).await;
        eventually("two failed watches", || panics.load(Ordering::SeqCst) >= before + 2).await;
        assert!(inf.is_running());
        explode.store(false, Ordering::SeqCst);
        let key = format!("default/{name}");
        eventually("the object after the panics", || inf.indexer().get_by_key(&key).is_some())
            .await;
    }
}

#[tokio::test]
async fn a_removed_handler_hears_nothing_more() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let inf = informer(&pods);
    let (kept, removed) = (Recorder::default(), Recorder::default());
    inf.add_event_handler(kept.clone());
    let registration = inf.add_event_handler(removed.clone());
    let _running = start(&inf);
    create(&pods, &["a"]).await;
    eventually("both heard a", || {
        kept.saw(&Seen::Add("a".into())) && removed.saw(&Seen::Add("a".into()))
    })
    .await;
    assert!(inf.remove_event_handler(&registration));
    assert!(!inf.remove_event_handler(&registration), "removed once");
    assert_eq!(inf.handler_count(), 1);
    create(&pods, &["b"]).await;
    eventually("the kept handler heard b", || kept.saw(&Seen::Add("b".into()))).await;
    assert_eq!(removed.seen(), [Seen::Add("a".into())]);
}

/// "watch failed" says which watch: the informer's span names its kind, namespace and
/// selectors.
#[tokio::test]
async fn informer_logs_name_the_kind_namespace_and_selectors() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let inf = Informer::builder(ListWatch::new(pods.clone()).labels("app=web"))
        .backoff(fast_backoff())
        .build();
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    eventually("a watch", || server.requests().watch == 1).await;
    server.faults().send_malformed_line();
    eventually("the broken watch logged", || logs.text().contains("watch failed")).await;
    let line = logs.text().lines().find(|l| l.contains("watch failed")).unwrap().to_owned();
    for part in ["informer{", "kind=Pod", "namespace=default", "labels=app=web"] {
        assert!(line.contains(part), "{part:?} missing from {line:?}");
    }
}

/// Each add's name and whether it came with the initial list.
type InitialLog = Arc<std::sync::Mutex<Vec<(String, bool)>>>;

/// A handler recording each add's name and whether it came with the initial list.
fn initial_flags() -> (ctrlkit::cache::ResourceEventHandlerFuncs<Pod>, InitialLog) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let handler = ctrlkit::cache::ResourceEventHandlerFuncs::new().on_add_detailed(
        move |p: &Arc<Pod>, initial| {
            log.lock().unwrap().push((p.metadata.name.clone().unwrap_or_default(), initial));
        },
    );
    (handler, seen)
}

#[tokio::test]
async fn adds_say_whether_they_came_with_the_initial_list() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a", "b"]).await;
    let inf = informer(&pods);
    let (early, early_seen) = initial_flags();
    inf.add_event_handler(early);
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    create(&pods, &["c"]).await;
    eventually("c added", || early_seen.lock().unwrap().len() == 3).await;
    let mut first_three = early_seen.lock().unwrap().clone();
    first_three.sort();
    assert_eq!(first_three, [("a".into(), true), ("b".into(), true), ("c".into(), false)]);

    // A handler added later is given the cache's contents as its initial list.
    let (late, late_seen) = initial_flags();
    inf.add_event_handler(late);
    eventually("the late handler's adds", || late_seen.lock().unwrap().len() == 3).await;
    assert!(late_seen.lock().unwrap().iter().all(|(_, initial)| *initial));

    // An object found by a relist (after a 410) is not in the initial list.
    let lists_before = server.requests().list;
    server.faults().fail_next_watches(usize::MAX, Failure::InternalError);
    server.faults().close_watches();
    create(&pods, &["d"]).await;
    server.faults().compact();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.faults().fail_next_watches(0, Failure::InternalError);
    eventually("d added", || early_seen.lock().unwrap().len() == 4).await;
    assert!(server.requests().list > lists_before, "d came with a relist");
    assert_eq!(early_seen.lock().unwrap()[3], ("d".to_owned(), false));
}

/// Informer metrics hooks that panic, every one of them.
struct PanickingMetrics;

impl ctrlkit::cache::InformerMetrics for PanickingMetrics {
    fn list_request(&self, _: ctrlkit::cache::RequestResult) {
        panic!("list_request hook");
    }
    fn watch_request(&self, _: ctrlkit::cache::RequestResult) {
        panic!("watch_request hook");
    }
    fn watch_event(&self, _: ctrlkit::cache::WatchEventType) {
        panic!("watch_event hook");
    }
    fn relist(&self) {
        panic!("relist hook");
    }
    fn objects(&self, _: usize) {
        panic!("objects hook");
    }
    fn resource_version(&self, _: &str) {
        panic!("resource_version hook");
    }
}

impl ctrlkit::cache::InformerMetricsProvider for PanickingMetrics {
    fn new_informer_metrics(
        &self,
        _: &ctrlkit::cache::InformerLabels,
    ) -> Arc<dyn ctrlkit::cache::InformerMetrics> {
        Arc::new(PanickingMetrics)
    }
}

/// A metrics hook is user code: its panic costs the metric, never the informer, which used
/// to stop at the first list request it counted.
#[tokio::test]
async fn metrics_hooks_that_panic_leave_the_informer_following_the_server() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a"]).await;
    let inf = Informer::builder(ListWatch::new(pods.clone()))
        .backoff(fast_backoff())
        .metrics(Arc::new(PanickingMetrics))
        .build();
    let rec = Recorder::default();
    inf.add_event_handler(rec.clone());
    let _running = start(&inf);
    eventually("the informer synced", || inf.has_synced()).await;
    create(&pods, &["b"]).await;
    eventually("the add watched after the sync", || rec.seen().contains(&Seen::Add("b".into())))
        .await;
    assert!(inf.is_running());
    assert_eq!(inf.indexer().len(), 2);
}

/// A handler that blocks in its first add until released (the initial adds come in the
/// store's order, which is no order), noting whether it is in that call, and records every
/// add it hears.
struct Blocking {
    heard: Arc<std::sync::Mutex<Vec<String>>>,
    in_call: Arc<std::sync::atomic::AtomicBool>,
    entered: std::sync::Mutex<std::sync::mpsc::Sender<()>>,
    release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl ResourceEventHandler<Pod> for Blocking {
    fn on_add(&self, pod: &Arc<Pod>, _: bool) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let first = {
            let mut heard = self.heard.lock().unwrap();
            heard.push(name);
            heard.len() == 1
        };
        if first {
            self.in_call.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = self.entered.lock().unwrap().send(());
            let _ = self.release.lock().unwrap().recv_timeout(Duration::from_secs(20));
            self.in_call.store(false, std::sync::atomic::Ordering::SeqCst);
        }
    }
    fn on_update(&self, _: &Arc<Pod>, _: &Arc<Pod>) {}
    fn on_delete(&self, _: &ctrlkit::cache::Deleted<Pod>) {}
}

/// An informer whose handler is inside its first add, with the other add queued behind it;
/// the handler's record, in-call flag and release.
async fn handler_in_a_call(
    server: &ctrlkit_apiserver::ApiServer,
) -> (
    Informer<Pod>,
    ctrlkit::cache::HandlerRegistration,
    Arc<std::sync::Mutex<Vec<String>>>,
    Arc<std::sync::atomic::AtomicBool>,
    std::sync::mpsc::Sender<()>,
    (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>),
) {
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["one", "two"]).await;
    let informer = informer(&pods);
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    let (heard, in_call) = (Arc::default(), Arc::default());
    let registration = informer.add_event_handler(Blocking {
        heard: Arc::clone(&heard),
        in_call: Arc::clone(&in_call),
        entered: std::sync::Mutex::new(entered_tx),
        release: std::sync::Mutex::new(release_rx),
    });
    let running = start(&informer);
    tokio::task::spawn_blocking(move || entered.recv_timeout(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("the handler entered its call");
    (informer, registration, heard, in_call, release, running)
}

/// Shutting a handler down returns once its call in flight is done, and what was queued for
/// it is dropped: it is not called again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_a_handler_waits_for_its_call_in_flight_and_drops_what_is_queued() {
    let server = server().await;
    let (informer, registration, heard, in_call, release, _running) =
        handler_in_a_call(&server).await;
    let shutting = tokio::spawn({
        let (informer, in_call) = (informer.clone(), in_call.clone());
        async move {
            let result = informer.shut_down_event_handler(&registration, Duration::from_secs(10));
            let result = result.await;
            (result, in_call.load(std::sync::atomic::Ordering::SeqCst))
        }
    });
    eventually("the handler removed", || informer.handler_count() == 0).await;
    release.send(()).unwrap();
    let (result, in_call_at_return) = shutting.await.unwrap();
    assert_eq!(result, Ok(true));
    assert!(!in_call_at_return, "it returned while the handler was still in its call");
    assert_eq!(heard.lock().unwrap().len(), 1, "the queued add was dropped: {heard:?}");
    let nothing = registration_of_nothing();
    let unknown = informer.shut_down_event_handler(&nothing, Duration::ZERO).await;
    assert_eq!(unknown, Ok(false));
}

/// A registration no informer has.
fn registration_of_nothing() -> ctrlkit::cache::HandlerRegistration {
    let pods: Api<Pod> = Api::namespaced(
        kube_client::Client::try_from(kube_client::Config::new(
            "http://127.0.0.1:9".parse().unwrap(),
        ))
        .unwrap(),
        "default",
    );
    let other = informer(&pods);
    let registration = other.add_event_handler(ctrlkit::cache::ResourceEventHandlerFuncs::new());
    assert!(other.remove_event_handler(&registration));
    registration
}

/// A call still running at the timeout is an error naming the informer; the handler is
/// called no more after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_still_in_its_call_at_the_timeout_is_reported() {
    let server = server().await;
    let (informer, registration, heard, in_call, release, _running) =
        handler_in_a_call(&server).await;
    let result = informer.shut_down_event_handler(&registration, Duration::from_millis(100)).await;
    let err = result.expect_err("the call is still running");
    assert_eq!(err.timeout, Duration::from_millis(100));
    assert!(err.to_string().contains("pods in namespace default"), "{err}");
    assert!(in_call.load(std::sync::atomic::Ordering::SeqCst));
    // Waiting again, past the timeout, returns once the handler's task ended: no delivery
    // can come after that. Its first poll finds the handler while it is still in its call
    // (released after it, or the task could end first and the wait find nothing to wait for).
    let mut again =
        std::pin::pin!(informer.shut_down_event_handler(&registration, Duration::from_secs(10)));
    assert!(futures::poll!(&mut again).is_pending(), "the call is still running");
    release.send(()).unwrap();
    let again = again.await;
    assert_eq!(again, Ok(true), "the second wait waits for the task's end");
    assert!(!in_call.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(heard.lock().unwrap().len(), 1, "nothing after the shut-down: {heard:?}");
    let ended = informer.shut_down_event_handler(&registration, Duration::ZERO).await;
    assert_eq!(ended, Ok(false), "a handler whose task ended is not waited for");
}

/// Two callers shutting one handler down both wait for its call in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_callers_shutting_a_handler_down_both_wait_for_its_call_in_flight() {
    let server = server().await;
    let (informer, registration, heard, in_call, release, _running) =
        handler_in_a_call(&server).await;
    let mut first =
        Box::pin(informer.shut_down_event_handler(&registration, Duration::from_secs(10)));
    let mut second =
        Box::pin(informer.shut_down_event_handler(&registration, Duration::from_secs(10)));
    assert!(futures::poll!(&mut first).is_pending(), "the first caller waits");
    let polled = futures::poll!(&mut second);
    assert!(polled.is_pending(), "the second caller waits too, not {polled:?}");
    release.send(()).unwrap();
    let (first, second) = tokio::join!(first, second);
    assert_eq!((first, second), (Ok(true), Ok(true)));
    assert!(!in_call.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(heard.lock().unwrap().len(), 1, "the queued add was dropped: {heard:?}");
}

/// A handler removed with `remove_event_handler` can still be shut down and waited for:
/// the wait returns once its call in flight is done, and what was queued is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_handler_can_be_shut_down_and_waited_for() {
    let server = server().await;
    let (informer, registration, heard, in_call, release, _running) =
        handler_in_a_call(&server).await;
    assert!(informer.remove_event_handler(&registration));
    let mut shutting =
        Box::pin(informer.shut_down_event_handler(&registration, Duration::from_secs(10)));
    let polled = futures::poll!(&mut shutting);
    assert!(polled.is_pending(), "waits for the call in flight, not {polled:?}");
    release.send(()).unwrap();
    assert_eq!(shutting.await, Ok(true));
    assert!(!in_call.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(heard.lock().unwrap().len(), 1, "the queued add was dropped: {heard:?}");
}
