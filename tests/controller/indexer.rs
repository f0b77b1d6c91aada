//! Index queries on an informer's cache.

use ctrlkit::cache::{IndexError, Informer, ListWatch, NAMESPACE_INDEX, ObjectKey};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube_client::Api;
use kube_client::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::common::*;

fn app(p: &Pod) -> Vec<String> {
    p.metadata.labels.as_ref().and_then(|l| l.get("app")).cloned().into_iter().collect()
}

#[tokio::test]
async fn custom_and_namespace_indexes_answer_and_follow_changes() {
    let server = server().await;
    let ns: Api<Namespace> = Api::all(server.client());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
    )
    .await
    .unwrap();
    let default: Api<Pod> = Api::namespaced(server.client(), "default");
    let team: Api<Pod> = Api::namespaced(server.client(), "team");
    for (api, name, label) in [(&default, "a", "web"), (&default, "b", "db"), (&team, "c", "web")] {
        api.create(&PostParams::default(), &pod(name, json!({"app": label}))).await.unwrap();
    }
    let all: Api<Pod> = Api::all(server.client());
    let inf = Informer::new(ListWatch::new(all));
    let indexer = inf.indexer();
    indexer.add_index("by-app", app).unwrap();
    assert_eq!(indexer.add_index("by-app", app), Err(IndexError::Conflict("by-app".into())));
    let _running = start(&inf);
    eventually("three pods cached", || indexer.len() == 3).await;

    let mut web: Vec<String> =
        indexer.index_keys("by-app", "web").unwrap().iter().map(ObjectKey::to_string).collect();
    web.sort();
    assert_eq!(web, ["default/a", "team/c"]);
    assert_eq!(indexer.by_index("by-app", "db").unwrap()[0].metadata.name.as_deref(), Some("b"));
    assert_eq!(indexer.list_index_func_values("by-app").unwrap(), ["db", "web"]);
    assert_eq!(indexer.by_index(NAMESPACE_INDEX, "team").unwrap().len(), 1);
    assert_eq!(indexer.by_index("nope", "x").unwrap_err(), IndexError::NoSuchIndex("nope".into()));

    default
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
        )
        .await
        .unwrap();
    eventually("b moved to web", || indexer.index_keys("by-app", "web").unwrap().len() == 3).await;
    assert!(indexer.index_keys("by-app", "db").unwrap().is_empty());
    assert_eq!(indexer.list_index_func_values("by-app").unwrap(), ["web"]);
    assert!(indexer.get_by_key("team/c").is_some());
    assert!(indexer.get_by_key("not a key/x/y").is_none());
}

/// An index function that panics on one object (user code, as a handler or a transform is)
/// neither stops the informer nor leaves its cache behind: the object is cached and read by
/// key, left out of that index alone, and named in an error log; later events are cached and
/// indexed as before, the other indexes untouched.
#[tokio::test]
async fn an_index_function_that_panics_leaves_that_object_out_of_its_index_and_the_informer_running()
 {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    for (name, label) in [("a", "web"), ("boom", "web")] {
        pods.create(&PostParams::default(), &pod(name, json!({"app": label}))).await.unwrap();
    }
    let inf = Informer::new(ListWatch::new(pods.clone()));
    let indexer = inf.indexer();
    indexer
        .add_index("by-app", |p: &Pod| {
            assert_ne!(p.metadata.name.as_deref(), Some("boom"), "an index function that panics");
            app(p)
        })
        .unwrap();
    let _running = start(&inf);
    eventually("both pods cached", || indexer.len() == 2).await;
    assert!(indexer.get_by_key("default/boom").is_some(), "cached and read by key");
    let keys = |value| -> Vec<String> {
        let mut keys: Vec<String> =
            indexer.index_keys("by-app", value).unwrap().iter().map(ObjectKey::to_string).collect();
        keys.sort();
        keys
    };
    assert_eq!(keys("web"), ["default/a"], "left out of the index that panicked");
    assert_eq!(indexer.index_keys(NAMESPACE_INDEX, "default").unwrap().len(), 2);

    pods.create(&PostParams::default(), &pod("c", json!({"app": "web"}))).await.unwrap();
    let relabel = Patch::Merge(json!({"metadata": {"labels": {"tier": "1"}}}));
    pods.patch("boom", &PatchParams::default(), &relabel).await.unwrap();
    eventually("the informer goes on: c cached and indexed", || keys("web").len() == 2).await;
    assert_eq!(keys("web"), ["default/a", "default/c"]);
    let text = logs.text();
    assert!(
        text.contains("by-app") && text.contains("default/boom") && text.contains("panics"),
        "the panic is logged with the index and the object: {text}"
    );
}
