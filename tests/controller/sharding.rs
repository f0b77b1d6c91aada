//! Sharding on the embedded server: each replica's Lease, labelled with its ring, held while
//! it runs, released when it stops, left to expire when it is dropped; the shards' states read
//! back from the Leases; and the sharder labelling objects to ready shards, draining the ones
//! that leave a live shard and moving a dead shard's at once.

// One case here checks metrics, and runs only with them; without, its helpers go unused.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_imports))]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ctrlkit::cache::{Indexer, ObjectKey};
use ctrlkit::controller::{Action, Config, Controller, Reconciler};
use ctrlkit::leaderelection::{LeaderElectionConfig, LeaseLock};
use ctrlkit::manager::{Manager, ManagerError};
#[cfg(feature = "metrics")]
use ctrlkit::metrics::Registry;
use ctrlkit::sharding::{HashRing, Ring, ShardLease, Sharder, drain_label, ring_key, shard_label};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube_client::api::{ListParams, Patch, PatchParams, PostParams};
use kube_client::{Api, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::common::*;

pub(super) fn ring() -> Ring {
    let mut timing = LeaderElectionConfig::default();
    timing.lease_duration = Duration::from_millis(1200);
    timing.renew_deadline = Duration::from_millis(800);
    timing.retry_period = Duration::from_millis(200);
    Ring::new("sets").lease_config(timing)
}

/// Plays the shards' part in hand-offs: every object marked for draining has both labels
/// removed, and its name recorded.
fn release_drained(api: Api<ConfigMap>, released: Arc<Mutex<Vec<String>>>) -> JoinHandle<()> {
    let drain = drain_label("sets");
    tokio::spawn(async move {
        loop {
            let marked = api.list(&ListParams::default().labels(&drain)).await.unwrap();
            for cm in marked.items {
                let name = cm.name_any();
                let patch = json!({ "metadata": { "labels": {
                    shard_label("sets"): null, drain_label("sets"): null,
                } } });
                if api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.is_ok() {
                    released.lock().unwrap().push(name);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// Creates the ConfigMaps `set-0` to `set-<n - 1>`.
pub(super) async fn create_sets(api: &Api<ConfigMap>, n: usize) {
    for i in 0..n {
        let cm = serde_json::from_value(json!({ "metadata": { "name": format!("set-{i}") } }));
        api.create(&PostParams::default(), &cm.unwrap()).await.unwrap();
    }
}

/// Waits until every ConfigMap is labelled as the ring of `shards` says (and, with a
/// recorder, was last reconciled by that shard); returns the labels then.
async fn settled_on(
    api: &Api<ConfigMap>,
    shards: &[&str],
    recorder: Option<&Recorder>,
) -> BTreeMap<String, Option<String>> {
    let ring = HashRing::new(shards.iter().copied());
    for _ in 0..300 {
        let now = shards_of(api).await;
        let last = recorder.map(|r| r.last.lock().unwrap().clone());
        let done = now.iter().all(|(name, shard)| {
            let want = ring.shard_for(&ring_key("", "ConfigMap", Some("default"), name));
            let reconciled = last.as_ref().is_none_or(|last| {
                last.get(&format!("default/{name}")).map(String::as_str) == want
            });
            shard.as_deref() == want && reconciled
        });
        if done {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the objects never settled on {shards:?}");
}

/// The shard label of every ConfigMap, by name.
async fn shards_of(api: &Api<ConfigMap>) -> BTreeMap<String, Option<String>> {
    let all = api.list(&ListParams::default()).await.unwrap().items;
    all.iter().map(|cm| (cm.name_any(), cm.labels().get(&shard_label("sets")).cloned())).collect()
}

fn start_shard(client: kube_client::Client, ring: &Ring, id: &str) -> (ShardLease, JoinHandle<()>) {
    let shard = ShardLease::new(client, ring, id).unwrap();
    let running = shard.clone();
    let task = tokio::spawn(async move {
        let _ = running.run(std::future::pending()).await;
    });
    (shard, task)
}

#[cfg(feature = "metrics")]
#[tokio::test]
async fn the_sharder_labels_to_ready_shards_drains_live_ones_and_takes_from_dead_ones() {
    let server = server().await;
    let client = server.client();
    let ring = ring();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let total = 300;
    create_sets(&configmaps, total).await;
    let owner = configmaps.get("set-7").await.unwrap();
    let child = json!({ "metadata": {
        "name": "set-7-child",
        "ownerReferences": [owner.controller_owner_ref(&()).unwrap()],
    } });
    secrets.create(&PostParams::default(), &serde_json::from_value(child).unwrap()).await.unwrap();

    let (_a, _a_task) = start_shard(client.clone(), &ring, "shard-a");
    let registry = Registry::new();
    let sharder = Arc::new(
        Sharder::<ConfigMap>::new(client.clone(), ring.clone(), Some("default"))
            .owns::<Secret>()
            .metrics(Arc::new(registry.clone())),
    );
    let running = sharder.clone();
    let _sharder_task = tokio::spawn(async move { running.run(std::future::pending()).await });
    settled_on(&configmaps, &["shard-a"], None).await;
    // The child follows its owner, a pass after the owner settled (a pass labels an owned
    // object with its owner's label as the pass began).
    let child_shard = |want: Option<String>| {
        let secrets = secrets.clone();
        async move {
            let mut label = None;
            for _ in 0..100 {
                let child = secrets.get("set-7-child").await.unwrap();
                label = child.labels().get(&shard_label("sets")).cloned();
                if label == want {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            label
        }
    };
    let want = Some("shard-a".to_owned());
    assert_eq!(child_shard(want.clone()).await, want, "the child follows its owner");

    // Two more shards join: objects leave shard-a only through a drain.
    let released_log = Arc::new(Mutex::new(Vec::new()));
    let _releaser = release_drained(configmaps.clone(), released_log.clone());
    let (_b, _b_task) = start_shard(client.clone(), &ring, "shard-b");
    let (_c, c_task) = start_shard(client.clone(), &ring, "shard-c");
    let expected = HashRing::new(["shard-a", "shard-b", "shard-c"]);
    let want = |name: &str| {
        expected.shard_for(&ring_key("", "ConfigMap", Some("default"), name)).unwrap().to_owned()
    };
    let settled = settled_on(&configmaps, &["shard-a", "shard-b", "shard-c"], None).await;
    let moved: Vec<&String> =
        settled.iter().filter(|(_, s)| s.as_deref() != Some("shard-a")).map(|(n, _)| n).collect();
    assert!(settled.iter().all(|(name, shard)| shard.as_deref() == Some(want(name).as_str())));
    let fraction = moved.len() as f64 / total as f64;
    assert!((0.5..0.8).contains(&fraction), "1 -> 3 shards moved {fraction:.2} of the objects");
    let released = released_log.lock().unwrap().clone();
    for name in &moved {
        assert!(released.contains(name), "{name} left a live shard without a drain");
    }
    assert_eq!(released.len(), moved.len(), "only the objects that moved were drained");
    let want = settled["set-7"].clone();
    assert_eq!(child_shard(want.clone()).await, want, "the child follows its owner");
    // The ring as its metrics tell it.
    let metric = |text: &str, series: &str| -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
    };
    let per_shard = |text: &str| -> f64 {
        ["shard-a", "shard-b", "shard-c"]
            .iter()
            .filter_map(|s| {
                metric(text, &format!(r#"ctrlkit_sharding_objects{{ring="sets",shard="{s}"}}"#))
            })
            .sum()
    };
    // The gauges are set as a pass ends: the objects can settle in the middle of one.
    let mut text = registry.encode();
    for _ in 0..300 {
        if per_shard(&text) == total as f64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        text = registry.encode();
    }
    assert_eq!(metric(&text, r#"ctrlkit_sharding_members{ring="sets",state="ready"}"#), Some(3.0));
    assert_eq!(
        metric(&text, r#"ctrlkit_sharding_drains_total{ring="sets"}"#),
        Some(moved.len() as f64),
        "{text}"
    );
    assert_eq!(per_shard(&text), total as f64, "{text}");

    // shard-c dies without releasing its Lease: once it expires its objects move at once.
    c_task.abort();
    let on_c: Vec<String> = settled
        .iter()
        .filter(|(_, s)| s.as_deref() == Some("shard-c"))
        .map(|(n, _)| n.clone())
        .collect();
    assert!(!on_c.is_empty());
    // Only shard-c's objects move (consistent hashing): the rest stay where they were.
    settled_on(&configmaps, &["shard-a", "shard-b"], None).await;
    let now = shards_of(&configmaps).await;
    assert!(now.values().all(|s| s.as_deref() != Some("shard-c")), "{now:?}");
    let text = registry.encode();
    let stopped = r#"ctrlkit_sharding_assignments_total{ring="sets",reason="shard_stopped"}"#;
    assert_eq!(metric(&text, stopped), Some(on_c.len() as f64), "{text}");
    let released_after = released_log.lock().unwrap().len();
    assert_eq!(released_after, moved.len(), "a dead shard's objects move without a drain");
    // Its Lease is deleted once it has been dead a while.
    let leases: Api<Lease> = Api::namespaced(client, "default");
    for _ in 0..200 {
        if leases.get_opt("shard-c").await.unwrap().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the dead shard's Lease was never deleted");
}

/// Records which shards reconcile which keys, and any key reconciled by two at once.
#[derive(Default)]
pub(super) struct Recorder {
    in_flight: Mutex<HashMap<String, String>>,
    pub(super) overlaps: Mutex<Vec<String>>,
    /// The shard of each key's last reconcile.
    pub(super) last: Mutex<HashMap<String, String>>,
    /// The `data.n` each key's last reconcile read from its cached object.
    pub(super) seen: Mutex<HashMap<String, Option<String>>>,
    /// Keys whose reconciles take longer than the others', and how long.
    pub(super) slow: Mutex<HashMap<String, Duration>>,
    total: AtomicUsize,
}

/// Marks a key in flight on a shard; unmarks it when dropped (a reconcile that finishes, or
/// one dropped with a killed replica).
struct InFlight<'a>(&'a Recorder, String);

impl Recorder {
    /// The shard reconciling `key` now, if any.
    pub(super) fn in_flight_on(&self, key: &str) -> Option<String> {
        self.in_flight.lock().unwrap().get(key).cloned()
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.lock().unwrap().remove(&self.1);
    }
}

struct Sharded {
    shard: String,
    recorder: Arc<Recorder>,
}

#[async_trait]
impl Reconciler for Sharded {
    type Object = ConfigMap;
    type Error = std::convert::Infallible;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        object: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Self::Error> {
        let name = key.to_string();
        if let Some(other) =
            self.recorder.in_flight.lock().unwrap().insert(name.clone(), self.shard.clone())
        {
            self.recorder
                .overlaps
                .lock()
                .unwrap()
                .push(format!("{name}: {other} and {}", self.shard));
        }
        let _guard = InFlight(&self.recorder, name.clone());
        // A few API calls' worth of work: long enough that hand-offs meet reconciles.
        let slow = self.recorder.slow.lock().unwrap().get(&name).copied();
        tokio::time::sleep(slow.unwrap_or(Duration::from_millis(100))).await;
        let n = object.and_then(|o| o.data.as_ref()?.get("n").cloned());
        self.recorder.seen.lock().unwrap().insert(name.clone(), n);
        self.recorder.last.lock().unwrap().insert(name, self.shard.clone());
        self.recorder.total.fetch_add(1, Ordering::Relaxed);
        Ok(Action::done())
    }
}

/// One replica: its shard Lease and its sharded controller, each stoppable, and the
/// controller's cache.
pub(super) struct Replica {
    lease: JoinHandle<()>,
    lease_stop: oneshot::Sender<()>,
    controller: JoinHandle<()>,
    controller_stop: oneshot::Sender<()>,
    pub(super) cache: Indexer<ConfigMap>,
}

pub(super) fn replica(
    client: kube_client::Client,
    ring: &Ring,
    id: &str,
    recorder: &Arc<Recorder>,
) -> Replica {
    let shard = ShardLease::new(client.clone(), ring, id).unwrap();
    let (lease_stop, lease_stopped) = oneshot::channel::<()>();
    let lease = tokio::spawn(async move {
        let _ = shard
            .run(async {
                let _ = lease_stopped.await;
            })
            .await;
    });
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let config = Config::default().workers(4);
    let controller = Controller::builder(api).shard(ring, id).config(config).build();
    let cache = controller.indexer();
    let reconciler = Sharded { shard: id.to_owned(), recorder: recorder.clone() };
    let (controller_stop, controller_stopped) = oneshot::channel::<()>();
    let controller = tokio::spawn(async move {
        controller
            .run(reconciler, async {
                let _ = controller_stopped.await;
            })
            .await
            .unwrap();
    });
    Replica { lease, lease_stop, controller, controller_stop, cache }
}

impl Replica {
    /// A graceful stop: the controller finishes its reconciles, then the Lease is released.
    pub(super) async fn stop(self) {
        let _ = self.controller_stop.send(());
        self.controller.await.unwrap();
        let _ = self.lease_stop.send(());
        self.lease.await.unwrap();
    }

    /// Whether its Lease's run ended (lost: it missed its renew deadline).
    pub(super) fn lease_ended(&self) -> bool {
        self.lease.is_finished()
    }

    /// A kill: everything dropped at once, nothing released.
    pub(super) fn kill(self) {
        self.controller.abort();
        self.lease.abort();
    }
}

#[tokio::test]
async fn no_key_is_reconciled_by_two_replicas_while_membership_changes_under_churn() {
    let server = server().await;
    let client = server.client();
    let ring = ring();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let total = 120;
    create_sets(&configmaps, total).await;
    let recorder = Arc::new(Recorder::default());
    let sharder =
        Arc::new(Sharder::<ConfigMap>::new(client.clone(), ring.clone(), Some("default")));
    let running = sharder.clone();
    let _sharder = tokio::spawn(async move { running.run(std::future::pending()).await });
    let writer = churn(configmaps.clone(), total, 1);

    let a = replica(client.clone(), &ring, "shard-a", &recorder);
    settled_on(&configmaps, &["shard-a"], None).await;
    let b = replica(client.clone(), &ring, "shard-b", &recorder);
    let c = replica(client.clone(), &ring, "shard-c", &recorder);
    settled_on(&configmaps, &["shard-a", "shard-b", "shard-c"], None).await;
    b.stop().await;
    settled_on(&configmaps, &["shard-a", "shard-c"], None).await;
    c.kill();
    settled_on(&configmaps, &["shard-a"], None).await;
    writer.abort();

    // Settled: every object's last state was reconciled by its shard, none lost in the
    // hand-offs.
    let label = shard_label("sets");
    converged(&configmaps, &recorder, |cm| cm.labels().get(&label).cloned()).await;
    let overlaps = recorder.overlaps.lock().unwrap().clone();
    assert!(overlaps.is_empty(), "keys reconciled by two replicas at once: {overlaps:?}");
    assert!(recorder.total.load(Ordering::Relaxed) >= total);
    let d = replica(client.clone(), &ring, "shard-d", &recorder);
    settled_on(&configmaps, &["shard-a", "shard-d"], None).await;
    eventually("the new shard reconciles its objects", || {
        recorder.last.lock().unwrap().values().any(|s| s == "shard-d")
    })
    .await;
    a.stop().await;
    d.stop().await;
    assert!(recorder.overlaps.lock().unwrap().is_empty());
}

/// A writer churning the objects `set-0` to `set-<total - 1>`: every 2 ms it sets `data.n`
/// of one, picked at random from `seed` (splitmix64), to the count of writes so far.
pub(super) fn churn(api: Api<ConfigMap>, total: usize, seed: u64) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut state = seed;
        for n in 0u64.. {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let name = format!("set-{}", (z ^ (z >> 31)) % total as u64);
            let patch = Patch::Merge(json!({ "data": { "n": n.to_string() } }));
            let _ = api.patch(&name, &PatchParams::default(), &patch).await;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
}

/// The convergence check, once the writers stopped: waits until every object's last
/// reconcile read its final `data.n` and ran on the shard `owner` names for it (its share);
/// panics with the objects that never got there.
pub(super) async fn converged(
    api: &Api<ConfigMap>,
    recorder: &Recorder,
    owner: impl Fn(&ConfigMap) -> Option<String>,
) {
    let mut behind = Vec::new();
    for _ in 0..200 {
        let objects = api.list(&ListParams::default()).await.unwrap().items;
        let seen = recorder.seen.lock().unwrap().clone();
        let last = recorder.last.lock().unwrap().clone();
        behind = objects
            .iter()
            .filter_map(|cm| {
                let key = format!("default/{}", cm.name_any());
                let want = cm.data.as_ref().and_then(|d| d.get("n").cloned());
                let (shard, read) = (last.get(&key).cloned(), seen.get(&key).cloned());
                let ok = read == Some(want.clone()) && shard.is_some() && shard == owner(cm);
                (!ok).then(|| format!("{key}: n {want:?}, read {read:?} by {shard:?}"))
            })
            .collect();
        if behind.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not converged: {behind:?}");
}

/// One replica as an operator writes it: a Manager with leader election (for the sharder)
/// and sharding (for its controller).
fn sharded_manager(
    client: kube_client::Client,
    ring: &Ring,
    id: &str,
    recorder: &Arc<Recorder>,
) -> (oneshot::Sender<()>, JoinHandle<Result<(), ManagerError>>) {
    let lock = LeaseLock::new(client.clone(), "default", "sets-sharder", id);
    let mut manager = Manager::builder(client.clone())
        .leader_election(lock, *ring.lease())
        .sharding(ring.clone(), id)
        .build();
    manager.add(Sharder::<ConfigMap>::new(client.clone(), ring.clone(), Some("default")));
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    manager
        .controller(api)
        .config(Config::default().workers(4))
        .complete(Sharded { shard: id.to_owned(), recorder: recorder.clone() })
        .expect("the only controller of its name");
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(manager.run_until(async {
        let _ = stopped.await;
    }));
    (stop, run)
}

#[tokio::test]
async fn three_sharded_managers_share_the_objects_and_one_that_stops_hands_its_share_over() {
    let server = server().await;
    let client = server.client();
    // A retry period of 1 s, the bound a graceful stop's hand-over is held to below (and a
    // lease of 4 s: the renew deadline and a jittered retry period must end before it).
    let mut timing = *ring().lease();
    timing.lease_duration = Duration::from_secs(4);
    timing.renew_deadline = Duration::from_secs(2);
    timing.retry_period = Duration::from_secs(1);
    let ring = Ring::new("sets").lease_config(timing);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let total = 90;
    create_sets(&configmaps, total).await;
    let recorder = Arc::new(Recorder::default());
    let ids = ["shard-a", "shard-b", "shard-c"];
    let mut replicas: Vec<_> =
        ids.iter().map(|id| sharded_manager(client.clone(), &ring, id, &recorder)).collect();
    settled_on(&configmaps, &ids, Some(&recorder)).await;
    // Each replica reconciled its share: about a third each.
    let last = recorder.last.lock().unwrap().clone();
    for id in ids {
        let share = last.values().filter(|s| *s == id).count();
        assert!(share > total / 6 && share < total / 2, "{id} holds {share} of {total}");
    }
    // A graceful stop of a replica that does not lead (the sharder stays): its Lease is
    // released once its controller stopped, and its share is on the others within one retry
    // period.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let leader = leases.get("sets-sharder").await.unwrap().spec.unwrap().holder_identity;
    let leaving = ids.iter().position(|id| Some(*id) != leader.as_deref()).unwrap();
    let (stop, run) = replicas.remove(leaving);
    let _ = stop.send(());
    run.await.unwrap().expect("a clean stop");
    let released = Instant::now();
    let rest: Vec<&str> = ids.iter().copied().filter(|id| *id != ids[leaving]).collect();
    settled_on(&configmaps, &rest, None).await;
    let moved_in = released.elapsed();
    assert!(moved_in <= ring.lease().retry_period, "its share moved in {moved_in:?}");
    settled_on(&configmaps, &rest, Some(&recorder)).await;
    let overlaps = recorder.overlaps.lock().unwrap().clone();
    assert!(overlaps.is_empty(), "keys reconciled by two replicas at once: {overlaps:?}");
    for (stop, run) in replicas {
        let _ = stop.send(());
        run.await.unwrap().expect("a clean stop");
    }
}

/// Sharding metrics hooks that panic, every one of them.
struct PanickingMetrics;

impl ctrlkit::sharding::ShardingMetrics for PanickingMetrics {
    fn objects(&self, _: &str, _: &[(String, usize)]) {
        panic!("objects hook");
    }
    fn members(&self, _: &str, _: usize, _: usize, _: usize) {
        panic!("members hook");
    }
    fn assigned(&self, _: &str, _: ctrlkit::sharding::AssignReason) {
        panic!("assigned hook");
    }
    fn drained(&self, _: &str) {
        panic!("drained hook");
    }
}

/// A metrics hook is user code: its panic costs the metric, not the sharder, whose run it
/// used to end at the first object it labelled.
#[tokio::test]
async fn metrics_hooks_that_panic_leave_the_sharder_labelling() {
    let server = server().await;
    let client = server.client();
    let ring = ring();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    create_sets(&configmaps, 20).await;
    let (_a, _a_task) = start_shard(client.clone(), &ring, "shard-a");
    let sharder = Arc::new(
        Sharder::<ConfigMap>::new(client.clone(), ring.clone(), Some("default"))
            .metrics(Arc::new(PanickingMetrics)),
    );
    let running = sharder.clone();
    let _sharder_task = tokio::spawn(async move { running.run(std::future::pending()).await });
    settled_on(&configmaps, &["shard-a"], None).await;
}
