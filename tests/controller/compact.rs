//! The compact store (`Indexer::compact`): an informer keeping its objects as JSON behaves
//! as one keeping them decoded, in what the store answers and what the handlers hear.

use std::sync::Arc;
use std::time::Duration;

use ctrlkit::cache::{
    Indexer, Informer, ListWatch, NAMESPACE_INDEX, ObjectKey, wait_for_cache_sync,
};
use ctrlkit_apiserver::Failure;
use k8s_openapi::api::core::v1::Pod;
use kube_client::Api;
use kube_client::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::common::*;

fn app(p: &Pod) -> Vec<String> {
    p.metadata.labels.as_ref().and_then(|l| l.get("app")).cloned().into_iter().collect()
}

fn sorted(mut seen: Vec<Seen>) -> Vec<Seen> {
    seen.sort_by_key(|s| format!("{s:?}"));
    seen
}

async fn relabel(pods: &Api<Pod>, name: &str, app: &str) {
    let patch = Patch::Merge(json!({"metadata": {"labels": {"app": app}}}));
    pods.patch(name, &PatchParams::default(), &patch).await.unwrap();
}

#[tokio::test]
async fn a_compact_store_answers_and_notifies_as_a_decoded_one() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a", "b", "c", "d", "e"]).await;
    // All decoded, the default (JSON with a hot set of 2), and compact (JSON alone).
    let stores = [Indexer::decoded(), Indexer::with_hot_objects(2), Indexer::compact()];
    let [plain, hot, compact] = stores.map(|indexer| {
        indexer.add_index("by-app", app).unwrap();
        Informer::builder(ListWatch::new(pods.clone()).page_size(2))
            .backoff(fast_backoff())
            .indexer(indexer)
            .build()
    });
    assert!(!plain.indexer().is_compact());
    assert!(hot.indexer().is_compact());
    assert!(compact.indexer().is_compact());
    let recorders = [Recorder::default(), Recorder::default(), Recorder::default()];
    plain.add_event_handler(recorders[0].clone());
    hot.add_event_handler(recorders[2].clone());
    compact.add_event_handler(recorders[1].clone());
    let _running = [start(&plain), start(&hot), start(&compact)];
    assert!(wait_for_cache_sync(&[&plain, &hot, &compact], std::future::pending()).await.is_ok());

    // Watch events: an update that moves an object between index values, a delete, an add.
    relabel(&pods, "b", "db").await;
    pods.delete("c", &DeleteParams::default()).await.unwrap();
    create(&pods, &["f"]).await;
    // A relist after changes missed while disconnected: a tombstone, an update, an add.
    server.faults().fail_next_watches(usize::MAX, Failure::InternalError);
    server.faults().close_watches();
    pods.delete("d", &DeleteParams::default()).await.unwrap();
    relabel(&pods, "e", "db").await;
    create(&pods, &["g"]).await;
    server.faults().compact();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.faults().fail_next_watches(0, Failure::InternalError);
    for recorder in &recorders {
        eventually("the relist's tombstone and add", || {
            recorder.saw(&Seen::Tombstone("default/d".into()))
                && recorder.saw(&Seen::Add("g".into()))
        })
        .await;
    }

    // What the handlers heard, each in the order it came (a relist's in no set order).
    assert_eq!(sorted(recorders[0].seen()), sorted(recorders[1].seen()));
    assert_eq!(sorted(recorders[0].seen()), sorted(recorders[2].seen()));
    assert!(recorders[1].saw(&Seen::Update("e".into(), false)));
    // What the stores answer; the default store answers as the others do.
    let (plain, hot, compact) = (plain.indexer(), hot.indexer(), compact.indexer());
    for key in hot.list_keys().iter().chain(&plain.list_keys()) {
        assert_eq!(plain.get(key), hot.get(key), "{key}");
    }
    for value in ["db", "web"] {
        let names = |indexer: &Indexer<Pod>| {
            let mut names: Vec<_> = indexer
                .by_index("by-app", value)
                .unwrap()
                .iter()
                .map(|p| p.metadata.name.clone())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(&plain), names(&hot), "{value}");
    }
    assert_eq!(hot.by_index(NAMESPACE_INDEX, "default").unwrap().len(), 5);
    let mut keys = compact.list_keys();
    keys.sort_by_key(ObjectKey::to_string);
    let names: Vec<&str> = keys.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "e", "f", "g"]);
    for key in &keys {
        assert_eq!(plain.get(key), compact.get(key), "{key}");
    }
    let by_app = |indexer: &Indexer<Pod>, value: &str| {
        let mut pods = indexer.by_index("by-app", value).unwrap();
        pods.sort_by_key(|p| p.metadata.name.clone());
        pods
    };
    assert_eq!(by_app(&compact, "db").len(), 2);
    assert_eq!(by_app(&plain, "db"), by_app(&compact, "db"));
    assert_eq!(by_app(&plain, "web"), by_app(&compact, "web"));
    assert_eq!(compact.by_index(NAMESPACE_INDEX, "default").unwrap().len(), 5);
    assert_eq!(compact.list().len(), 5);
    // A compact store's reads are decodes of their own: readers share no object.
    let key = ObjectKey::namespaced("default", "a");
    assert!(Arc::ptr_eq(&plain.get(&key).unwrap(), &plain.get(&key).unwrap()));
    assert!(!Arc::ptr_eq(&compact.get(&key).unwrap(), &compact.get(&key).unwrap()));
    // The default store's second read of an object shares what the first decoded.
    assert!(Arc::ptr_eq(&hot.get(&key).unwrap(), &hot.get(&key).unwrap()));
}

#[tokio::test]
async fn late_handlers_and_resyncs_of_a_compact_store_see_decoded_objects() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["a", "b"]).await;
    let informer = Informer::builder(ListWatch::new(pods.clone()))
        .indexer(Indexer::compact())
        .resync(Duration::from_millis(150))
        .build();
    let _running = start(&informer);
    assert!(wait_for_cache_sync(&[&informer], std::future::pending()).await.is_ok());
    let late = Recorder::default();
    informer.add_event_handler(late.clone());
    eventually("the cache's contents as adds, then two resyncs of each", || {
        late.count(|s| matches!(s, Seen::Add(_))) == 2
            && late.count(|s| matches!(s, Seen::Update(_, true))) >= 4
    })
    .await;
    // A resync hands one object as old and new, as with a decoded store.
    assert_eq!(late.count(|s| matches!(s, Seen::Update(_, false))), 0);
}
