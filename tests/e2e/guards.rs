//! Informers counted by their users, on the server's side: when the last guard of a shared
//! informer is dropped its watch closes (the server counts one watch fewer open), and asked
//! for again the informer lists afresh.
//!
//! The server's count of open watches: the embedded server's gauge, a real server's
//! `apiserver_longrunning_requests` (`apiserver_longrunning_gauge` before 1.23) for verb
//! `WATCH`, over the case's own kind, which nothing else watches.

use std::time::Duration;

use ctrlkit::cache::{ListWatch, SharedInformerFactory};
use ctrlkit_apiserver::harness::{Needs, RequestLog, Target, recording_client};
use ctrlkit_apiserver::{ResourceType, case};
use kube_client::Api;
use kube_client::api::{ApiResource, PostParams};
use kube_client::core::DynamicObject;
use serde_json::json;

use super::common::*;

/// The kind this case alone lists and watches (served by the suite's embedded servers).
pub fn tracker() -> ResourceType {
    ResourceType::new("guards.example.com", "v1", "Tracker", "trackers", true)
}

/// The watches of `ar` the server has open now.
async fn open_watches(t: &Target, ar: &ApiResource) -> u64 {
    if !t.is_real() {
        return t.embedded().open_watches_of(&format!("{}.{}", ar.plural, ar.group));
    }
    let request = http::Request::get("/metrics").body(Vec::new()).expect("a request");
    let text = t.client.request_text(request).await.expect("the server's metrics");
    let ours = [
        "verb=\"WATCH\"".to_owned(),
        format!("group=\"{}\"", ar.group),
        format!("resource=\"{}\"", ar.plural),
    ];
    for name in ["apiserver_longrunning_requests{", "apiserver_longrunning_gauge{"] {
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(name)).collect();
        if lines.is_empty() {
            continue;
        }
        return lines
            .iter()
            .filter(|l| ours.iter().all(|label| l.contains(label.as_str())))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64;
    }
    panic!("the server exports no gauge of long-running requests");
}

async fn tracked(api: &Api<DynamicObject>, ar: &ApiResource, name: &str) {
    let object = serde_json::from_value(json!({
        "apiVersion": ar.api_version, "kind": ar.kind, "metadata": { "name": name }
    }))
    .expect("a valid tracker");
    api.create(&PostParams::default(), &object).await.expect("a tracker");
}

async fn the_last_guard_dropped_closes_the_watch_and_a_new_ask_lists_afresh(t: &Target) {
    let ar = t.custom_resource(&tracker()).await;
    let (client, log) = recording_client(t.config());
    let trackers: Api<DynamicObject> = Api::namespaced_with(client.clone(), &t.ns, &ar);
    tracked(&trackers, &ar, "a").await;
    let factory = SharedInformerFactory::builder(client).namespace(&t.ns).build();
    factory.start(std::future::pending());
    let guarded = || factory.guarded_informer_for(ListWatch::new_with(trackers.clone(), &ar));
    let (first, second) = (guarded(), guarded());
    factory.wait_for_cache_sync(std::future::pending()).await.expect("the cache syncs");
    assert_eq!(first.indexer().len(), 1);
    eventually_async_within(
        Duration::from_secs(20),
        "the server counts the watch open",
        || async { open_watches(t, &ar).await == 1 },
    )
    .await;
    let indexer = first.indexer();
    drop(first);
    assert!(second.is_running(), "one user is left");
    drop(second);
    eventually_async_within(
        Duration::from_secs(20),
        "the server counts the watch closed",
        || async { open_watches(t, &ar).await == 0 },
    )
    .await;
    assert!(indexer.is_empty() && indexer.is_stale());
    // A change a live watch would bring: the released informer asks nothing for it.
    let asked = log.all().len();
    tracked(&trackers, &ar, "b").await;
    let syncs = |log: &RequestLog| match t.version().at_least(27) {
        true => log.streaming_lists().len(),
        false => log.lists().iter().filter(|l| l.contains("/trackers?")).count(),
    };
    let synced_before = syncs(&log);
    eventually_async_within(Duration::from_secs(20), "b is stored", || async {
        trackers.get_opt("b").await.is_ok_and(|b| b.is_some())
    })
    .await;
    let since: Vec<String> = log.all()[asked..].to_vec();
    assert!(
        since.iter().all(|r| !(r.starts_with("GET ") && r.contains("/trackers?"))),
        "no list or watch of the released informer: {since:#?}"
    );

    let again = guarded();
    factory.wait_for_cache_sync(std::future::pending()).await.expect("the cache syncs again");
    assert_eq!(again.indexer().len(), 2, "listed afresh, b included");
    assert!(!again.indexer().same_store(&indexer));
    assert_eq!(syncs(&log), synced_before + 1, "one new sync: {:#?}", &log.all()[asked..]);
    eventually_async_within(Duration::from_secs(20), "the new watch is open", || async {
        open_watches(t, &ar).await == 1
    })
    .await;
    factory.shutdown().await;
}
case!(Needs::Protocol, the_last_guard_dropped_closes_the_watch_and_a_new_ask_lists_afresh);
