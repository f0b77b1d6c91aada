//! The informer against a server: paginated lists, resumed watches, 410 and relists with
//! tombstones, bookmarks, streaming lists and their fallback.

use std::time::Duration;

use ctrlkit::cache::{ObjectKey, WireFormat};
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube_client::Api;
use kube_client::api::{DeleteParams, PostParams};
use serde_json::json;

use super::common::*;

/// 25 pods in pages of 10: three list requests, the last two continuing the first (an
/// informer with streaming lists off, as one on a server without them lists).
async fn the_initial_list_is_paginated(t: &Target) {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    let names: Vec<String> = (0..25).map(|i| format!("p{i:02}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    create(&pods, &refs, json!({})).await;
    let synced =
        synced_informer::<Pod>(t, |b| b.streaming_list(false), |lw| lw.page_size(10)).await;
    assert_eq!(synced.informer.indexer().len(), 25);
    let lists = synced.log.lists();
    assert_eq!(lists.len(), 3, "{lists:#?}");
    assert!(lists.iter().all(|l| l.contains("limit=10")), "{lists:#?}");
    assert!(lists[1..].iter().all(|l| l.contains("continue=")), "{lists:#?}");
    assert!(!lists[0].contains("continue="), "{lists:#?}");
}
case!(Needs::Protocol, the_initial_list_is_paginated);

/// Waits until the informer's watch delivers a change: only then is a cut connection sure to
/// end a watch the server had started (a request still in flight is retried by the HTTP
/// client itself, unseen).
async fn watch_is_live(create_one: impl Future<Output = ()>, recorder: &Recorder) {
    create_one.await;
    eventually("the watch is live", || recorder.saw(&Seen::Add("live".into()))).await;
}

/// Cut off mid-watch while a pod is deleted and another created: the informer watches again
/// from the version it had and hears both as events, with no second list.
async fn a_cut_watch_resumes_from_its_version_without_a_relist(t: &Target) {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    create(&pods, &["a", "b"], json!({})).await;
    let Synced { informer, recorder, proxy, log, .. } =
        &synced_informer::<Pod>(t, |b| b, |lw| lw).await;
    watch_is_live(create(&pods, &["live"], json!({})), recorder).await;
    let synced_at = informer.last_sync_resource_version().expect("a version");
    let (lists, streaming) = (log.lists().len(), log.streaming_lists().len());

    proxy.close();
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    create(&pods, &["c"], json!({})).await;
    proxy.open();

    eventually("the delete and the add arrive", || {
        recorder.saw(&Seen::Delete("a".into())) && recorder.saw(&Seen::Add("c".into()))
    })
    .await;
    let relists = (log.lists().len(), log.streaming_lists().len());
    assert_eq!(relists, (lists, streaming), "no relist: {:#?}", log.all());
    let resumed = log.plain_watches();
    let resumed = resumed.last().expect("a resumed watch");
    assert!(resumed.contains(&format!("resourceVersion={synced_at}")), "{:#?}", log.all());
    let key = |name: &str| ObjectKey::namespaced(&t.ns, name);
    assert!(informer.indexer().get(&key("a")).is_none());
    assert!(informer.indexer().get(&key("c")).is_some());
    assert!(!recorder.seen().iter().any(|s| matches!(s, Seen::Tombstone(_))));
}
case!(Needs::Protocol, a_cut_watch_resumes_from_its_version_without_a_relist);

/// Cut off while a secret is deleted, then the history is compacted: the resumed watch gets
/// 410, the informer relists, and the delete it missed arrives as a tombstone. The relist is
/// a streaming list where the server has them; on 1.20 it tries one again (refused) before
/// it lists, as streaming is retried at every relist a 410 forces.
///
/// Secrets, because the servers under test serve them without a watch cache, so that
/// compacting etcd expires their old versions for watches.
async fn an_expired_version_relists_and_delivers_tombstones(t: &Target) {
    let secrets: Api<Secret> = Api::namespaced(t.client.clone(), &t.ns);
    let create_secret = |name: &'static str| {
        let secrets = secrets.clone();
        async move {
            let secret: Secret = serde_json::from_value(
                json!({"metadata": {"name": name}, "stringData": {"k": "v"}}),
            )
            .unwrap();
            secrets.create(&PostParams::default(), &secret).await.unwrap();
        }
    };
    create_secret("a").await;
    create_secret("b").await;
    let Synced { informer, recorder, proxy, log, .. } =
        &synced_informer::<Secret>(t, |b| b, |lw| lw).await;
    watch_is_live(create_secret("live"), recorder).await;
    let (lists, streaming) = (log.lists().len(), log.streaming_lists().len());

    proxy.close();
    secrets.delete("a", &DeleteParams::default()).await.unwrap();
    create_secret("c").await;
    t.compact().await;
    proxy.open();

    let tombstone = Seen::Tombstone(format!("{}/a", t.ns));
    eventually("a tombstone for the missed delete", || recorder.saw(&tombstone)).await;
    eventually("the missed add", || recorder.saw(&Seen::Add("c".into()))).await;
    let relisted =
        if t.version().at_least(27) { (lists, streaming + 1) } else { (lists + 1, streaming + 1) };
    assert_eq!(
        (log.lists().len(), log.streaming_lists().len()),
        relisted,
        "one relist on {}: {:#?}",
        t.version(),
        log.all()
    );
    assert!(!recorder.saw(&Seen::Delete("a".into())), "the delete was missed, not watched");
    assert_eq!(informer.indexer().len(), 3);
}
case!(Needs::Compaction, an_expired_version_relists_and_delivers_tombstones);

/// A change the informer does not watch (another label) still moves its version on, through
/// a bookmark, and a resumed watch starts there. The real server sends bookmarks about once
/// a minute; the case waits up to 90 s for one.
async fn bookmarks_move_the_resume_version_on(t: &Target) {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    create(&pods, &["web"], json!({"app": "web"})).await;
    let Synced { informer, recorder, proxy, log, .. } =
        &synced_informer::<Pod>(t, |b| b, |lw| lw.labels("app=web")).await;
    // The watch is open once synced from a streaming list, or once it follows the list.
    eventually("the watch is open", || {
        !log.streaming_lists().is_empty() && t.version().at_least(27)
            || !log.plain_watches().is_empty()
    })
    .await;
    let (lists, streaming) = (log.lists().len(), log.streaming_lists().len());
    let watches = log.plain_watches().len();

    let db = pods.create(&PostParams::default(), &pod("db", json!({"app": "db"}))).await.unwrap();
    let db_rv = rv_number(db.metadata.resource_version.as_deref().unwrap());
    eventually_within(Duration::from_secs(90), "a bookmark past the unwatched change", || {
        informer.last_sync_resource_version().is_some_and(|rv| rv_number(&rv) >= db_rv)
    })
    .await;
    assert_eq!(recorder.seen(), [Seen::Add("web".into())], "a bookmark is no event");

    let bookmarked = informer.last_sync_resource_version().unwrap();
    proxy.cut();
    eventually("a resumed watch", || log.plain_watches().len() == watches + 1).await;
    let resumed = log.plain_watches()[watches].clone();
    assert!(resumed.contains(&format!("resourceVersion={bookmarked}")), "{resumed}");
    let relists = (log.lists().len(), log.streaming_lists().len());
    assert_eq!(relists, (lists, streaming), "no relist: {:#?}", log.all());
}
case!(Needs::Protocol, bookmarks_move_the_resume_version_on);

/// An informer with its defaults syncs on any server: through a streaming list where the
/// server has them (1.36, and the embedded server), through list + watch where it refuses
/// them (1.20).
async fn streaming_lists_sync_or_fall_back_to_list_and_watch(t: &Target) {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    create(&pods, &["a", "b", "c"], json!({})).await;
    let Synced { informer, recorder, log, .. } = &synced_informer::<Pod>(t, |b| b, |lw| lw).await;
    assert_eq!(informer.indexer().len(), 3);
    let first = &log.all()[0];
    assert!(first.contains("sendInitialEvents=true"), "a streaming list is tried first: {first}");
    let lists = log.lists().len();
    if t.version().at_least(27) {
        assert_eq!(lists, 0, "no list request on {}: {:#?}", t.version(), log.all());
    } else {
        assert_eq!(lists, 1, "1.20 refuses streaming lists; one list instead: {:#?}", log.all());
    }
    create(&pods, &["d"], json!({})).await;
    eventually("a change after the sync", || recorder.saw(&Seen::Add("d".into()))).await;
}
case!(Needs::Protocol, streaming_lists_sync_or_fall_back_to_list_and_watch);

/// With protobuf on, an informer of a built-in kind asks for protobuf first and JSON second,
/// as client-go's generated clients do, and caches what an informer on JSON caches, field for
/// field: the objects of its sync and those its watch brings.
async fn a_protobuf_informer_caches_what_a_json_informer_caches(t: &Target) {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    create(&pods, &["a", "b"], json!({"app": "web"})).await;
    let protobuf =
        synced_informer::<Pod>(t, |b| b.wire_format(WireFormat::Protobuf), |lw| lw).await;
    let json = synced_informer::<Pod>(t, |b| b.wire_format(WireFormat::Json), |lw| lw).await;
    create(&pods, &["c"], json!({"app": "db"})).await;
    for synced in [&protobuf, &json] {
        eventually("c through the watch", || synced.recorder.saw(&Seen::Add("c".into()))).await;
    }
    let cached = |synced: &Synced<Pod>| {
        let mut pods: Vec<Pod> =
            synced.informer.indexer().list().iter().map(|p| (**p).clone()).collect();
        pods.sort_by_key(|p| p.metadata.name.clone());
        pods
    };
    let (from_protobuf, from_json) = (cached(&protobuf), cached(&json));
    assert_eq!(from_protobuf.len(), 3);
    assert_eq!(from_protobuf, from_json, "protobuf and JSON cache the same pods");
    let first_accept = |synced: &Synced<Pod>| synced.log.accepts()[0].1.clone();
    assert_eq!(
        first_accept(&protobuf),
        "application/vnd.kubernetes.protobuf,application/json",
        "protobuf first: {:#?}",
        protobuf.log.accepts()
    );
    assert!(!first_accept(&json).contains("protobuf"), "{:#?}", json.log.accepts());
    for (line, accept) in protobuf.log.accepts() {
        assert!(accept.starts_with("application/vnd.kubernetes.protobuf"), "{line}: {accept}");
    }
}
case!(Needs::Protocol, a_protobuf_informer_caches_what_a_json_informer_caches);
