//! Lists: the global resourceVersion, pagination with consistent snapshots, selectors,
//! resourceVersion semantics.

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube_client::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, VersionMatch};
use kube_client::{Api, ResourceExt};
use serde_json::json;

use super::common::*;

fn names(list: &kube_client::api::ObjectList<Pod>) -> Vec<String> {
    list.items.iter().map(|p| p.name_any()).collect()
}

async fn one_resource_version_sequence_is_shared_by_all_kinds(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &t.ns);
    let cms: Api<ConfigMap> = Api::namespaced(client, &t.ns);
    let p = pods.create(&PostParams::default(), &pod("p", json!({}))).await.unwrap();
    let c = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap(),
        )
        .await
        .unwrap();
    let c_rv: u64 = c.metadata.resource_version.unwrap().parse().unwrap();
    assert!(c_rv > rv(&p), "a later write of another kind has a later version");
    let list = pods.list(&ListParams::default()).await.unwrap();
    let list_rv: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert!(list_rv >= c_rv, "a list is at the store's revision, not its newest item's");
}
case!(Needs::Protocol, one_resource_version_sequence_is_shared_by_all_kinds);

async fn continued_pages_are_a_consistent_snapshot_under_concurrent_writes(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    create_pods(&pods, (0..10).map(|i| format!("p{i:02}"))).await;
    let first = pods.list(&ListParams::default().limit(4)).await.unwrap();
    assert_eq!(names(&first), ["p00", "p01", "p02", "p03"]);
    assert_eq!(first.metadata.remaining_item_count, Some(6));
    let snapshot_rv = first.metadata.resource_version.clone();

    // Writes between pages: delete one not yet seen, add one, relabel one.
    pods.delete("p05", &DeleteParams::default()).await.unwrap();
    create_pods(&pods, ["p04a".to_owned(), "p99".to_owned()]).await;
    pods.patch(
        "p06",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"late": "yes"}}})),
    )
    .await
    .unwrap();

    let mut seen = names(&first);
    let mut token = first.metadata.continue_.clone();
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = pods.list(&ListParams::default().limit(4).continue_token(&t)).await.unwrap();
        assert_eq!(
            page.metadata.resource_version, snapshot_rv,
            "every page is at the first page's version"
        );
        for p in &page.items {
            if p.name_any() == "p06" {
                assert!(!p.labels().contains_key("late"), "p06 as it was at the snapshot");
            }
        }
        seen.extend(names(&page));
        token = page.metadata.continue_.clone();
    }
    let expected: Vec<String> = (0..10).map(|i| format!("p{i:02}")).collect();
    assert_eq!(seen, expected);
    let now = pods.list(&ListParams::default()).await.unwrap();
    assert!(names(&now).contains(&"p99".to_owned()) && !names(&now).contains(&"p05".to_owned()));
}
case!(Needs::Protocol, continued_pages_are_a_consistent_snapshot_under_concurrent_writes);

/// After storage compaction a continue token of secrets (served without the watch cache)
/// gets 410. One of pods gets 410 on 1.20, which reads every page from etcd; 1.36 serves the
/// rest of the snapshot from the watch cache.
async fn continue_tokens_expire_at_compaction_unless_the_watch_cache_serves_them(t: &Target) {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    let secrets: Api<Secret> = Api::namespaced(t.client.clone(), &t.ns);
    create_pods(&pods, (0..5).map(|i| format!("p{i}"))).await;
    for i in 0..5 {
        secrets.create(&PostParams::default(), &secret(&format!("s{i}"))).await.unwrap();
    }
    let page = ListParams::default().limit(2);
    let first_pods = pods.list(&page).await.unwrap();
    let first_secrets = secrets.list(&page).await.unwrap();
    create_pods(&pods, ["later".to_owned()]).await;
    t.compact().await;

    let token = first_secrets.metadata.continue_.unwrap();
    let next = secrets.list(&page.clone().continue_token(&token)).await;
    assert_eq!(api_error(next), (410, "Expired".into()));
    let token = first_pods.metadata.continue_.unwrap();
    let next = pods.list(&page.clone().continue_token(&token)).await;
    if t.version().at_least(36) {
        let next = next.unwrap();
        assert_eq!(names(&next), ["p2", "p3"], "the snapshot's next page");
        assert_eq!(next.metadata.resource_version, first_pods.metadata.resource_version);
    } else {
        assert_eq!(api_error(next), (410, "Expired".into()), "on {}", t.version());
    }
}
case!(Needs::Compaction, continue_tokens_expire_at_compaction_unless_the_watch_cache_serves_them);

fn secret(name: &str) -> Secret {
    serde_json::from_value(json!({"metadata": {"name": name}, "stringData": {"k": "v"}})).unwrap()
}

async fn label_and_field_selectors_filter_lists(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &t.ns);
    for (name, labels) in [
        ("a", json!({"app": "web", "tier": "front"})),
        ("b", json!({"app": "web"})),
        ("c", json!({"app": "db"})),
    ] {
        pods.create(&PostParams::default(), &pod(name, labels)).await.unwrap();
    }
    pods.patch_status(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
    let cases = [
        ("app=web", vec!["a", "b"]),
        ("app==web,tier", vec!["a"]),
        ("app!=web", vec!["c"]),
        ("app in (db, cache)", vec!["c"]),
        ("app notin (web)", vec!["c"]),
        ("!tier", vec!["b", "c"]),
    ];
    for (selector, want) in cases {
        let got = names(&pods.list(&ListParams::default().labels(selector)).await.unwrap());
        assert_eq!(got, want, "{selector}");
    }
    let fields = [
        ("metadata.name=b", vec!["b"]),
        ("status.phase=Running", vec!["c"]),
        ("status.phase!=Running,metadata.name!=a", vec!["b"]),
    ];
    for (selector, want) in fields {
        let got = names(&pods.list(&ListParams::default().fields(selector)).await.unwrap());
        assert_eq!(got, want, "{selector}");
    }
    // Malformed selectors are 400s with the parser's message (the same on 1.20 and 1.36),
    // never an unfiltered list.
    let refused = [
        (
            "labelSelector=a%3D%3D%3Db",
            "unable to parse requirement: found '=', expected: identifier",
        ),
        ("labelSelector=app%20in%20web", "unable to parse requirement: found 'web' expected: '('"),
        ("labelSelector=%2Capp", "found ',', expected: !, identifier, or 'end of string'"),
        (
            "fieldSelector=metadata.name%3D%3D%3Db",
            "invalid field selector: unescaped character in value: 61",
        ),
        ("fieldSelector=spec.bogus%3D1", "field label not supported: spec.bogus"),
    ];
    for (query, message) in refused {
        let answer = t.raw_get(&format!("/api/v1/namespaces/{}/pods?{query}", t.ns)).await;
        let status: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!((answer.status, status["message"].as_str()), (400, Some(message)), "{query}");
    }
    let all: Api<Pod> = Api::all(client);
    let everywhere = all
        .list(&ListParams::default().fields(&format!("metadata.namespace={}", t.ns)))
        .await
        .unwrap();
    assert_eq!(everywhere.items.len(), 3);
    assert!(
        everywhere.items.iter().all(|p| p.metadata.namespace.as_deref() == Some(t.ns.as_str()))
    );
}
case!(Needs::Protocol, label_and_field_selectors_filter_lists);

async fn resource_version_semantics_of_lists(t: &Target) {
    let client = t.client.clone();
    let pods: Api<Pod> = Api::namespaced(client, &t.ns);
    let a = pods.create(&PostParams::default(), &pod("a", json!({}))).await.unwrap();
    create_pods(&pods, ["b".to_owned()]).await;
    let exact = ListParams::default().at(&rv(&a).to_string()).matching(VersionMatch::Exact);
    let then = pods.list(&exact).await.unwrap();
    assert_eq!(names(&then), ["a"], "Exact serves the past");
    // kube-client drops resourceVersion=0 when a limit is set, so ask without it. "Any
    // version" is served from the watch cache, which may not hold `b`'s write yet (a CI run
    // on 1.36.2 listed `a` alone): ask until it does. Never a page: no continue token.
    let mut served = 0;
    for _ in 0..50 {
        let path = format!("/api/v1/namespaces/{}/pods?resourceVersion=0&limit=1", t.ns);
        let any: serde_json::Value = serde_json::from_str(&t.raw_get(&path).await.body).unwrap();
        assert!(any["metadata"].get("continue").is_none(), "resourceVersion=0 is not paged");
        served = any["items"].as_array().unwrap().len();
        if served == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(served, 2, "resourceVersion=0 is served whole, limit or not");
    // kube-client retries 504s by default, so ask without retries.
    let future = t
        .raw_get(&format!(
            "/api/v1/namespaces/{}/pods?resourceVersion=999999999&resourceVersionMatch=NotOlderThan",
            t.ns
        ))
        .await;
    assert_eq!(future.status, 504);
    assert!(future.body.contains("Too large resource version"), "{}", future.body);
}
case!(Needs::Protocol, resource_version_semantics_of_lists);

/// After storage compaction an exact-version list of secrets gets 410; of pods, 410 on 1.20
/// and the past as it was on 1.36 (from the watch cache).
async fn exact_lists_expire_at_compaction_unless_the_watch_cache_serves_them(t: &Target) {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    let secrets: Api<Secret> = Api::namespaced(t.client.clone(), &t.ns);
    let a = pods.create(&PostParams::default(), &pod("a", json!({}))).await.unwrap();
    let s = secrets.create(&PostParams::default(), &secret("s")).await.unwrap();
    create_pods(&pods, ["b".to_owned()]).await;
    secrets.create(&PostParams::default(), &secret("t")).await.unwrap();
    t.compact().await;

    let at = |rv: &str| ListParams::default().at(rv).matching(VersionMatch::Exact);
    let s_rv = s.metadata.resource_version.unwrap();
    assert_eq!(api_error(secrets.list(&at(&s_rv)).await), (410, "Expired".into()));
    let then = pods.list(&at(&rv(&a).to_string())).await;
    if t.version().at_least(36) {
        assert_eq!(names(&then.unwrap()), ["a"], "the past, from the watch cache");
    } else {
        assert_eq!(api_error(then), (410, "Expired".into()), "on {}", t.version());
    }
}
case!(Needs::Compaction, exact_lists_expire_at_compaction_unless_the_watch_cache_serves_them);

/// FNV-1a 64, as shard selectors hash.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Server-side shard selectors (KEP-5866): from 1.36 (the suite starts 1.36 with
/// `ShardedListAndWatch` on), lists and watches hold the objects whose uid hashes into the
/// ranges, and a list echoes the selector; before, the parameter is ignored.
async fn shard_selectors_split_lists_and_watches_by_the_uids_hash(t: &Target) {
    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let mut lower = Vec::new();
    let mut all = Vec::new();
    for i in 0..16 {
        let cm =
            serde_json::from_value(json!({"metadata": {"name": format!("cm-{i:02}")}})).unwrap();
        let created = configmaps.create(&PostParams::default(), &cm).await.unwrap();
        if fnv1a64(created.uid().unwrap().as_bytes()) < 1 << 63 {
            lower.push(created.name_any());
        }
        all.push(created.name_any());
    }
    assert!(!lower.is_empty() && lower.len() < all.len(), "both halves hold some: {lower:?}");
    let half = "shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000')";
    let upper = "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')";
    let path = |selector: &str| {
        let q: String = selector
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        format!("/api/v1/namespaces/{}/configmaps?shardSelector={q}", t.ns)
    };
    let names = |body: &serde_json::Value| -> Vec<String> {
        let items = body["items"].as_array().unwrap();
        let mut names: Vec<String> =
            items.iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect();
        names.sort();
        names
    };
    let listed = t.raw_get(&path(half)).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let body: serde_json::Value = serde_json::from_str(&listed.body).unwrap();
    if !t.version().at_least(36) {
        assert_eq!(names(&body), all, "before 1.36 the parameter is ignored");
        assert!(body["metadata"].get("shardInfo").is_none());
        return;
    }
    assert_eq!(names(&body), lower);
    assert_eq!(
        body["metadata"]["shardInfo"]["selector"],
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
    );
    let both: serde_json::Value =
        serde_json::from_str(&t.raw_get(&path(&format!("{half} || {upper}"))).await.body).unwrap();
    assert_eq!(names(&both), all, "two ranges OR-ed cover all");

    // A watch from the list's version sees only the new objects of its range.
    let rv = body["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let watch = format!("{}&watch=1&resourceVersion={rv}&timeoutSeconds=2", path(half));
    let watching = t.raw_get(&watch);
    let mut expected = Vec::new();
    let writes = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        for i in 16..24 {
            let cm = serde_json::from_value(json!({"metadata": {"name": format!("cm-{i:02}")}}));
            let created = configmaps.create(&PostParams::default(), &cm.unwrap()).await.unwrap();
            if fnv1a64(created.uid().unwrap().as_bytes()) < 1 << 63 {
                expected.push(created.name_any());
            }
        }
    };
    let (watched, ()) = tokio::join!(watching, writes);
    let mut seen: Vec<String> = watched
        .body
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["type"] == "ADDED")
        .map(|e| e["object"]["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    seen.sort();
    assert_eq!(seen, expected, "the watch sends its range's new objects");

    // Selectors it cannot take: a 500 saying why, as the real server answers.
    let refused = t.raw_get(&path("shardRange(object.metadata.name,'0x0','0x8')")).await;
    assert_eq!(refused.status, 500, "{}", refused.body);
    let status: serde_json::Value = serde_json::from_str(&refused.body).unwrap();
    assert_eq!(
        status["message"],
        r#"invalid shard selector: unsupported field path "object.metadata.name"; supported: object.metadata.uid, object.metadata.namespace"#
    );
}
case!(Needs::Protocol, shard_selectors_split_lists_and_watches_by_the_uids_hash);
