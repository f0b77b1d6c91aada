//! Objects nested deep: cached up to the informer's depth limit (`max_depth`, 512 by
//! default), deeper ones skipped and named, a cached object made too deep kept as it last
//! was (on a watch event and on a relist), and an object at the limit cloned, compared,
//! serialized and dropped on a tokio worker's 2 MiB stack. The answers come from a scripted
//! server (`support::scripted`).

// Cases here check metrics, and run only with them; without, some helpers go unused.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_imports))]

use std::time::Duration;

use ctrlkit::cache::{DEFAULT_MAX_DEPTH, Informer, ListWatch, ObjectKey, wait_for_cache_sync};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::Api;
use kube_client::api::DynamicObject;
use serde_json::json;

use super::common::*;
use crate::support::scripted::{Asked, Reply, Scripted, configmap, event};

/// A watch that sends nothing and stays open.
fn quiet_watch() -> Reply {
    Reply::Stream { lines: Vec::new(), stall: true }
}

/// A ConfigMap `name` at `rv` carrying a field nested `depth` levels deep, as JSON text
/// (built as text: a value that deep would take the test's own stack to build and print).
fn deep_configmap(name: &str, rv: u64, depth: usize) -> String {
    format!(
        r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"default","resourceVersion":"{rv}"}},"deep":{}0{}}}"#,
        r#"{"a":"#.repeat(depth),
        "}".repeat(depth)
    )
}

/// A server listing `items` (JSON texts) at version 10, then watching `lines` and stalling.
async fn deep_server(items: &[String], lines: Vec<String>) -> Scripted {
    let page = format!(
        r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"10"}},"items":[{}]}}"#,
        items.join(",")
    );
    Scripted::start(move |asked| match (asked.watch, asked.nth) {
        (false, _) => Reply::json(page.clone()),
        (true, 0) => Reply::Stream { lines: lines.clone(), stall: true },
        (true, _) => quiet_watch(),
    })
    .await
}

/// An ADDED event of `object`, given as JSON text.
fn added(object: String) -> String {
    format!(r#"{{"type":"ADDED","object":{object}}}"#)
}

/// A paginated informer of `server`'s ConfigMaps as dynamic objects (whose `deep` field a
/// typed ConfigMap would drop).
fn deep_informer(
    server: &Scripted,
) -> ctrlkit::cache::InformerBuilder<kube_client::api::DynamicObject> {
    use kube_client::api::{ApiResource, DynamicObject};
    let resource = ApiResource::erase::<ConfigMap>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &resource);
    Informer::builder(ListWatch::new_with(api, &resource))
        .backoff(fast_backoff())
        .streaming_list(false)
}

/// How many levels deep `object`'s `deep` field nests.
fn depth_of(object: &kube_client::api::DynamicObject) -> usize {
    let mut depth = 0;
    let mut value = &object.data["deep"];
    while let Some(inner) = value.get("a") {
        depth += 1;
        value = inner;
    }
    depth
}

/// Objects up to the informer's depth limit (512 by default; serde_json's own stops at 128)
/// are cached; one deeper is skipped, named in the log, and the informer syncs the others,
/// on the list and on the watch.
#[cfg(feature = "metrics")]
#[tokio::test]
async fn objects_up_to_the_depth_limit_are_cached_and_a_deeper_one_skipped_and_named() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let items = [
        deep_configmap("a", 5, 200),
        configmap("b", 6).to_string(),
        deep_configmap("c", 7, DEFAULT_MAX_DEPTH),
    ];
    let lines = vec![
        added(deep_configmap("d", 11, 300)),
        added(deep_configmap("e", 12, DEFAULT_MAX_DEPTH)),
        event("ADDED", configmap("f", 13)),
    ];
    let server = deep_server(&items, lines).await;
    let registry = ctrlkit::metrics::Registry::new();
    let inf = deep_informer(&server).metrics(std::sync::Arc::new(registry.clone())).build();
    let _running = start(&inf);
    let synced = tokio::time::timeout(
        Duration::from_secs(10),
        wait_for_cache_sync(&[&inf], std::future::pending()),
    )
    .await;
    assert!(synced.is_ok_and(|s| s.is_ok()), "the informer syncs: {}", logs.text());
    eventually("the watch's objects are cached", || inf.indexer().list().len() == 4).await;
    let mut cached: Vec<String> =
        inf.indexer().list().iter().filter_map(|o| o.metadata.name.clone()).collect();
    cached.sort();
    assert_eq!(cached, ["a", "b", "d", "f"]);
    let a = inf.indexer().get(&ctrlkit::cache::ObjectKey::namespaced("default", "a")).unwrap();
    assert_eq!(depth_of(&a), 200, "the deep object whole");
    let text = logs.text();
    for name in ["default/c", "default/e"] {
        assert!(text.contains(name) && text.contains("more than the 512"), "{name} named: {text}");
    }
    let counted = "ctrlkit_informer_objects_skipped_total{resource=\"configmaps\",namespace=\"default\",selector=\"\"} 2";
    assert!(registry.encode().contains(counted), "{}", registry.encode());
}

/// A deep object listed after a shallow one is kept as JSON by the default store, which read
/// shallow objects back; a read of it decodes as deep as it was cached, rather than stopping at
/// serde_json's 128 levels and reading it as absent. The same for one a watch event writes and
/// the hot set later lets go.
#[tokio::test]
async fn a_deep_object_in_the_default_store_reads_back_whole() {
    use ctrlkit::cache::{Indexer, ObjectKey};
    let items = [configmap("b", 5).to_string(), deep_configmap("a", 6, 200)];
    let lines = vec![added(deep_configmap("d", 11, 300)), event("ADDED", configmap("e", 12))];
    let server = deep_server(&items, lines).await;
    // A hot set of one object: "e", written last, pushes "d" out of it.
    let inf = deep_informer(&server).indexer(Indexer::with_hot_objects(1)).build();
    let _running = start(&inf);
    let synced = tokio::time::timeout(
        Duration::from_secs(10),
        wait_for_cache_sync(&[&inf], std::future::pending()),
    )
    .await;
    assert!(synced.is_ok_and(|s| s.is_ok()), "the informer syncs");
    eventually("the watch's objects are cached", || inf.indexer().len() == 4).await;
    assert!(inf.indexer().is_compact(), "shallow objects read back: the store keeps JSON");
    for (name, deep) in [("a", 200), ("d", 300)] {
        let object = inf.indexer().get(&ObjectKey::namespaced("default", name));
        let object = object.unwrap_or_else(|| panic!("{name} read as absent"));
        assert_eq!(depth_of(&object), deep, "{name} whole");
    }
    assert_eq!(inf.indexer().list().len(), 4, "every object listed");
}

/// A list page at version `rv` of `items` (JSON texts).
fn page(rv: u64, items: &[String]) -> String {
    format!(
        r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[{}]}}"#,
        items.join(",")
    )
}

/// The line of a watch event of `kind` whose object is the JSON text `object`.
fn line(kind: &str, object: &str) -> String {
    format!(r#"{{"type":"{kind}","object":{object}}}"#)
}

/// The bookmark that ends a streaming list's initial events, at `rv`.
fn initial_events_end(rv: u64) -> String {
    event(
        "BOOKMARK",
        json!({ "kind": "ConfigMap", "apiVersion": "v1", "metadata": {
            "resourceVersion": rv.to_string(),
            "annotations": { "k8s.io/initial-events-end": "true" },
        } }),
    )
}

/// A 410 as a watch event.
fn expired_event() -> String {
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": "Expired", "code": 410, "message": "too old resource version"});
    event("ERROR", status)
}

/// Runs `informer` (its server sends `a` at version 5, 10 levels deep, then `a` too deep,
/// then `b`) until it tells `b`, and checks what a skip of `a` must leave: `a` cached as it
/// last was, handlers told neither an update nor a delete of it, an error naming it and
/// saying its copy is kept, and one object skipped counted.
#[cfg(feature = "metrics")]
async fn a_keeps_its_last_copy(
    informer: ctrlkit::cache::InformerBuilder<DynamicObject>,
    logs: &CapturedLogs,
) {
    let registry = ctrlkit::metrics::Registry::new();
    let inf = informer.metrics(std::sync::Arc::new(registry.clone())).build();
    let recorder = Recorder::default();
    inf.add_event_handler(recorder.clone());
    let _running = start(&inf);
    eventually("b is told", || recorder.saw(&Seen::Add("b".into()))).await;
    let a = inf.indexer().get(&ObjectKey::namespaced("default", "a"));
    let a = a.expect("a is still cached");
    assert_eq!(a.metadata.resource_version.as_deref(), Some("5"), "a's last copy");
    assert_eq!(depth_of(&a), 10);
    assert_eq!(recorder.seen(), [Seen::Add("a".into()), Seen::Add("b".into())], "nothing of a");
    let text = logs.text();
    let kept = "the cache keeps its last copy, at resourceVersion 5";
    assert!(text.contains("default/a") && text.contains(kept), "{text}");
    let counted = "ctrlkit_informer_objects_skipped_total{resource=\"configmaps\",namespace=\"default\",selector=\"\"} 1";
    assert!(registry.encode().contains(counted), "{}", registry.encode());
}

/// A watch event that makes a cached object too deep changes nothing in the cache: the
/// object keeps its last copy, handlers are told neither an update nor a delete, and the
/// error log names it and says the copy is kept; the skip is counted.
#[cfg(feature = "metrics")]
#[tokio::test]
async fn an_update_that_makes_a_cached_object_too_deep_keeps_its_last_copy() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let lines = vec![
        line("MODIFIED", &deep_configmap("a", 11, DEFAULT_MAX_DEPTH)),
        event("ADDED", configmap("b", 12)),
    ];
    let server = deep_server(&[deep_configmap("a", 5, 10)], lines).await;
    a_keeps_its_last_copy(deep_informer(&server), &logs).await;
}

/// A relist (after a 410) that finds a cached object too deep keeps the cache's copy rather
/// than reporting it deleted: handlers get no tombstone for it, the log says it is kept.
#[cfg(feature = "metrics")]
#[tokio::test]
async fn a_relist_that_finds_a_cached_object_too_deep_keeps_its_last_copy() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let first = page(10, &[deep_configmap("a", 5, 10)]);
    let second =
        page(13, &[deep_configmap("a", 11, DEFAULT_MAX_DEPTH), configmap("b", 12).to_string()]);
    let server = Scripted::start(move |asked: &Asked| match (asked.watch, asked.nth) {
        (false, 0) => Reply::json(first.clone()),
        (false, _) => Reply::json(second.clone()),
        (true, 0) => Reply::events(&[expired_event()]),
        (true, _) => quiet_watch(),
    })
    .await;
    a_keeps_its_last_copy(deep_informer(&server), &logs).await;
    assert_eq!(server.count(false), 2, "listed twice");
}

/// The same on a streaming list: the relist's initial events skip the too-deep object, and
/// the cache keeps its copy through the replace.
#[cfg(feature = "metrics")]
#[tokio::test]
async fn a_streaming_relist_that_finds_a_cached_object_too_deep_keeps_its_last_copy() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let streams = std::sync::atomic::AtomicUsize::new(0);
    let first =
        vec![line("ADDED", &deep_configmap("a", 5, 10)), initial_events_end(10), expired_event()];
    let second = vec![
        line("ADDED", &deep_configmap("a", 11, DEFAULT_MAX_DEPTH)),
        event("ADDED", configmap("b", 12)),
        initial_events_end(13),
    ];
    let server = Scripted::start(move |asked: &Asked| {
        assert!(asked.watch, "streaming lists only");
        match streams.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => Reply::events(&first),
            _ => Reply::Stream { lines: second.clone(), stall: true },
        }
    })
    .await;
    a_keeps_its_last_copy(deep_informer(&server).streaming_list(true), &logs).await;
}

/// A delete of a cached object whose final state is too deep is not lost: the cache drops
/// the object and handlers are told of its delete with the last copy the cache held (as
/// client-go delivers the last known state), and a warning says the final state was too
/// deep. Before, the event was skipped, the object stayed cached until the next relist and
/// the controller never saw the delete.
#[tokio::test]
async fn a_delete_whose_final_state_is_too_deep_removes_the_cached_copy_and_is_told() {
    use ctrlkit::cache::{Deleted, ResourceEventHandlerFuncs};
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let lines = vec![
        line("MODIFIED", &deep_configmap("a", 11, DEFAULT_MAX_DEPTH)),
        line("DELETED", &deep_configmap("a", 12, DEFAULT_MAX_DEPTH)),
        event("ADDED", configmap("b", 13)),
    ];
    let server = deep_server(&[deep_configmap("a", 5, 10)], lines).await;
    let inf = deep_informer(&server).build();
    let recorder = Recorder::default();
    inf.add_event_handler(recorder.clone());
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let told_to = told.clone();
    inf.add_event_handler(ResourceEventHandlerFuncs::new().on_delete(
        move |d: &Deleted<DynamicObject>| {
            if let Deleted::Object(o) = d {
                told_to.lock().unwrap().push(o.metadata.resource_version.clone());
            }
        },
    ));
    let _running = start(&inf);
    eventually("b is told", || recorder.saw(&Seen::Add("b".into()))).await;
    assert_eq!(
        recorder.seen(),
        [Seen::Add("a".into()), Seen::Delete("a".into()), Seen::Add("b".into())],
        "a's delete is told"
    );
    assert_eq!(*told.lock().unwrap(), [Some("5".to_owned())], "with a's last copy");
    let a = inf.indexer().get(&ObjectKey::namespaced("default", "a"));
    assert!(a.is_none(), "a is no longer cached");
    let text = logs.text();
    assert!(text.contains("default/a") && text.contains("final state was too deep"), "{text}");
}

/// An object at the default limit, as the informer caches it, is cloned, compared,
/// serialized and dropped on a tokio worker's 2 MiB stack (the limit's premise; in a debug
/// build, where frames are largest, as `cargo test` builds it).
#[test]
fn an_object_at_the_depth_limit_survives_clone_eq_serialize_and_drop_on_a_worker_stack() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_stack_size(2 << 20)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        // The root object and `DEFAULT_MAX_DEPTH - 1` levels under `deep`: at the limit.
        let items = [deep_configmap("a", 5, DEFAULT_MAX_DEPTH - 1)];
        let server = deep_server(&items, Vec::new()).await;
        let inf = deep_informer(&server).build();
        let _running = start(&inf);
        eventually("a is cached", || inf.indexer().len() == 1).await;
        let cached = inf.indexer().get(&ObjectKey::namespaced("default", "a")).expect("cached");
        assert_eq!(depth_of(&cached), DEFAULT_MAX_DEPTH - 1);
        let on_worker = tokio::spawn(async move {
            let copy = (*cached).clone();
            assert!(copy == *cached, "a copy equals the cached object");
            let text = serde_json::to_string(&copy).expect("serializes");
            drop(copy);
            text
        });
        let text = on_worker.await.expect("the worker survives");
        assert_eq!(text.matches('{').count(), DEFAULT_MAX_DEPTH + 1, "whole (with metadata)");
    });
}
