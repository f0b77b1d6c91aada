//! Reading one's own writes for every kind written: a controller that creates a child with
//! `generateName` whenever its cache holds none, its parent updated again and again while
//! the children's informer is cut off (its connections through a proxy, cut and held for
//! less than the hold's timeout). With the guard, each parent's next reconcile waits for the
//! children's cache to hold the child it created: one child per parent. Without it, each
//! reconcile reads a cache without the child and creates another.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ctrlkit::cache::{Indexer, ListWatch, ObjectKey, SharedInformerFactory};
use ctrlkit::controller::{Action, Config, Controller, Reason, ReconcileContext, Reconciler};
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube_client::api::{ListParams, Patch, PatchParams, PostParams};
use kube_client::{Api, ResourceExt};
use serde_json::json;

use super::common::*;

/// Creates a child Secret (`generateName`, controlled by the parent) when the children's
/// cache holds none of the parent's.
struct OneChild {
    secrets: Api<Secret>,
    children: Indexer<Secret>,
    creates: Arc<AtomicUsize>,
    /// The reasons each reconcile saw, by parent.
    reasons: Arc<Mutex<BTreeMap<String, Vec<Reason>>>>,
}

#[async_trait]
impl Reconciler for OneChild {
    type Object = ConfigMap;
    type Error = kube_client::Error;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        parent: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Self::Error> {
        let context = ReconcileContext::current().expect("a reconcile has a context");
        let reasons = context.reasons().iter().cloned();
        self.reasons.lock().unwrap().entry(key.name.clone()).or_default().extend(reasons);
        let Some(parent) = parent else { return Ok(Action::done()) };
        let uid = parent.uid().unwrap_or_default();
        let has_child = self.children.list().iter().any(|child| {
            child.owner_references().iter().any(|r| r.uid == uid && r.controller == Some(true))
        });
        if has_child {
            return Ok(Action::done());
        }
        let child = serde_json::from_value(json!({
            "metadata": {
                "generateName": format!("{}-", parent.name_any()),
                "labels": {"role": "child"},
                "ownerReferences": [{
                    "apiVersion": "v1", "kind": "ConfigMap", "name": parent.name_any(),
                    "uid": uid, "controller": true,
                }],
            },
            "stringData": {"k": "v"},
        }))
        .expect("a valid secret");
        self.secrets.create(&PostParams::default(), &child).await?;
        self.creates.fetch_add(1, Ordering::SeqCst);
        Ok(Action::done())
    }
}

const PARENTS: usize = 3;
const UPDATES: usize = 3;

/// Runs the controller over `PARENTS` parents in namespace `ns`, the children's watch cut
/// while they are created and updated; returns the children per parent on the server.
async fn children_per_parent(t: &Target, ns: &str, guard: bool) -> BTreeMap<String, usize> {
    let parents: Api<ConfigMap> = Api::namespaced(t.client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(t.client.clone(), ns);
    // The children's informer has a client of its own, through the proxy.
    let (proxy, cut_off, _) = t.through_proxy().await;
    let children = ListWatch::new(Api::<Secret>::namespaced(cut_off, ns)).labels("role=child");
    let factory = SharedInformerFactory::builder(t.client.clone()).namespace(ns).build();
    let child_informer = factory.informer_with(children.clone(), |b| b.backoff(fast_backoff()));
    // One worker: a held key leaves it to the next, so every parent is held at once.
    let config = Config::default().workers(1); // the hold's timeout: 5 s by default
    let config = if guard { config } else { config.stale_cache_timeout(Duration::ZERO) };
    let primary = ListWatch::new(parents.clone()).labels("role=parent");
    let controller =
        Controller::builder(primary).factory(&factory).owns(children).config(config).build();
    let (stop_factory, factory_stopped) = shutdown();
    factory.start(factory_stopped);
    factory.wait_for_cache_sync(std::future::pending()).await.expect("the caches sync");
    let creates = Arc::new(AtomicUsize::new(0));
    let reasons = Arc::default();
    let reconciler = OneChild {
        secrets: Api::namespaced(ctrlkit::controller::recording_client(t.client.clone()), ns),
        children: child_informer.indexer(),
        creates: creates.clone(),
        reasons: Arc::clone(&reasons),
    };
    let (stop, running) = run_controller(&controller, reconciler);

    // The children's watch is cut, and its reconnections held.
    proxy.close();
    for i in 0..PARENTS {
        let parent = serde_json::from_value(json!({
            "metadata": {"name": format!("parent-{i}"), "labels": {"role": "parent"}},
        }))
        .expect("a valid configmap");
        parents.create(&PostParams::default(), &parent).await.unwrap();
    }
    eventually("a child created for each parent", || creates.load(Ordering::SeqCst) >= PARENTS)
        .await;
    for round in 0..UPDATES {
        for i in 0..PARENTS {
            let patch = Patch::Merge(json!({"data": {"round": round.to_string()}}));
            parents.patch(&format!("parent-{i}"), &PatchParams::default(), &patch).await.unwrap();
        }
    }
    match guard {
        // Each parent's next reconcile waits for its child in the cut-off cache.
        true => {
            eventually("each parent's next reconcile held", || {
                controller.stats().holds >= PARENTS as u64
            })
            .await
        }
        // Each parent reconciled again on a cache without its child.
        false => {
            eventually("a second child for each parent", || {
                creates.load(Ordering::SeqCst) >= 2 * PARENTS
            })
            .await
        }
    }
    proxy.open();

    // Settled: the children's cache holds every child on the server, and no key is queued.
    let settled = || async {
        let list = secrets.list(&ListParams::default().labels("role=child")).await.unwrap();
        let server: BTreeSet<_> = list.items.into_iter().map(|s| s.name_any()).collect();
        let cached: BTreeSet<_> =
            child_informer.indexer().list().iter().map(|s| s.name_any()).collect();
        server == cached
            && controller.queue().is_empty()
            && controller.in_flight().is_empty()
            && controller.held().is_empty()
    };
    eventually_async_within(
        Duration::from_secs(20),
        "the caches caught up, nothing queued",
        settled,
    )
    .await;
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    let _ = stop_factory.send(());
    let stats = controller.stats();
    if guard {
        assert_eq!(stats.stale_cache_timeouts, 0, "caught up within the hold's timeout: {stats:?}");
        let seen = reasons.lock().unwrap();
        let parent = seen.get("parent-0").expect("parent-0 reconciled");
        assert!(parent.contains(&Reason::Added { initial: false }), "{parent:?}");
        assert!(
            parent
                .iter()
                .any(|r| matches!(r, Reason::Updated(c) if !c.metadata && (c.spec || c.other))),
            "the updates' reasons name their data change: other on a real server (a ConfigMap \
             has no generation there), spec on the embedded one (it moves one): {parent:?}"
        );
    }
    let mut per_parent = BTreeMap::new();
    for child in secrets.list(&ListParams::default().labels("role=child")).await.unwrap() {
        let owner = child.owner_references().first().map(|r| r.name.clone()).unwrap_or_default();
        *per_parent.entry(owner).or_default() += 1;
    }
    per_parent
}

async fn a_reconcile_waits_for_the_children_it_created_with_generate_name(t: &Target) {
    let per_parent = children_per_parent(t, &t.ns, true).await;
    let expected: BTreeMap<String, usize> =
        (0..PARENTS).map(|i| (format!("parent-{i}"), 1)).collect();
    assert_eq!(per_parent, expected, "exactly one child per parent");
}
case!(Needs::Protocol, a_reconcile_waits_for_the_children_it_created_with_generate_name);

/// The same run with the guard off: the show's control.
async fn without_the_guard_a_stale_cache_makes_a_second_child(t: &Target) {
    let per_parent = children_per_parent(t, &t.ns, false).await;
    assert_eq!(per_parent.len(), PARENTS, "every parent has children: {per_parent:?}");
    assert!(
        per_parent.values().all(|n| *n > 1),
        "each parent reconciled on a cache without its child made another: {per_parent:?}"
    );
}
case!(Needs::Protocol, without_the_guard_a_stale_cache_makes_a_second_child);
