//! The in-process client (`ApiServer::in_process_client`): the same API as over loopback, on
//! tokio's paused clock, where time moves only when every task waits on a timer.

use std::time::Duration;

use ctrlkit_apiserver::ApiServer;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::Api;
use kube_client::api::{PostParams, WatchEvent, WatchParams};
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn requests_and_watches_in_process_keep_to_the_paused_clock() {
    let server = ApiServer::start().await.unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(server.in_process_client(), "default");
    let start = tokio::time::Instant::now();
    let cm = serde_json::from_value(json!({ "metadata": { "name": "a" } })).unwrap();
    let created = configmaps.create(&PostParams::default(), &cm).await.unwrap();
    let rv = created.metadata.resource_version.unwrap();
    // A request takes no time on the paused clock: nothing waited on a timer.
    assert_eq!(start.elapsed(), Duration::ZERO);
    let mut events = configmaps.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    let writer = configmaps.clone();
    tokio::spawn(async move {
        // Minutes of quiet first, within the watch's timeout (290 s) but past the bookmark
        // due 2 s before it: the paused clock skips them at once.
        tokio::time::sleep(Duration::from_secs(289)).await;
        let cm = serde_json::from_value(json!({ "metadata": { "name": "b" } })).unwrap();
        writer.create(&PostParams::default(), &cm).await.unwrap();
    });
    let event = loop {
        match events.try_next().await.unwrap().expect("an event") {
            WatchEvent::Bookmark(_) => continue,
            event => break event,
        }
    };
    let WatchEvent::Added(added) = event else { panic!("{event:?}") };
    assert_eq!(added.metadata.name.as_deref(), Some("b"));
    assert_eq!(start.elapsed(), Duration::from_secs(289));
}
