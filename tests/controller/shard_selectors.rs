//! A ring of shard selectors (`Assignment::ShardSelectors`) on the embedded server: no
//! sharder and no labels; each replica lists and watches the hash ranges of the objects' uids
//! that the ring gives it, and takes a range only once its previous holders said on their
//! Leases that they gave it up.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ctrlkit::leaderelection::LeaderElectionConfig;
use ctrlkit::sharding::{Assignment, HashRing, Ring, fnv1a64, view_annotation};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::ListParams;
use kube_client::{Api, ResourceExt};

use super::common::*;
use super::sharding::{Recorder, Replica, churn, converged, create_sets, replica};

/// Leases of 3 s (renewed within 2 s, tried every 0.5 s): short, so that a kill is over
/// soon, and long enough for the suite's tests side by side on two cores.
fn selector_ring() -> Ring {
    let mut timing = LeaderElectionConfig::default();
    timing.lease_duration = Duration::from_secs(3);
    timing.renew_deadline = Duration::from_secs(2);
    timing.retry_period = Duration::from_millis(500);
    Ring::new("sets").lease_config(timing).assignment(Assignment::ShardSelectors)
}

/// The shard the ring of `members` gives an object: by FNV-1a 64 of its uid.
fn owner(members: &[&str], object: &ConfigMap) -> Option<String> {
    let place = fnv1a64(object.uid()?.as_bytes());
    HashRing::new(members.iter().copied()).shard_for_hash(place).map(str::to_owned)
}

/// Waits until each replica's cache holds exactly the objects the ring of `members` gives
/// it, and each object was last reconciled there; returns each member's share.
async fn settled(
    api: &Api<ConfigMap>,
    replicas: &[(&str, &Replica)],
    recorder: &Recorder,
) -> BTreeMap<String, usize> {
    let members: Vec<&str> = replicas.iter().map(|(id, _)| *id).collect();
    let mut last_seen = String::new();
    // Up to a minute: the suite runs its tests side by side on two cores.
    for _ in 0..1200 {
        let objects = api.list(&ListParams::default()).await.unwrap().items;
        let mut shares = BTreeMap::new();
        let mut right = true;
        for (id, replica) in replicas {
            assert!(!replica.lease_ended(), "{id} lost its Lease");
            let mut want: Vec<String> = objects
                .iter()
                .filter(|o| owner(&members, o).as_deref() == Some(*id))
                .map(|o| o.name_any())
                .collect();
            let mut cached: Vec<String> =
                replica.cache.list().iter().map(|o| o.name_any()).collect();
            want.sort();
            cached.sort();
            if want != cached {
                right = false;
                last_seen = format!("{id} caches {} objects, owns {}", cached.len(), want.len());
            }
            shares.insert(id.to_string(), want.len());
        }
        let last = recorder.last.lock().unwrap().clone();
        let reconciled_there = objects
            .iter()
            .all(|o| last.get(&format!("default/{}", o.name_any())) == owner(&members, o).as_ref());
        if right && reconciled_there {
            return shares;
        }
        if right {
            last_seen = "every cache is right, some object was last reconciled elsewhere".into();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never settled on {members:?}: {last_seen}");
}

#[tokio::test]
async fn replicas_split_the_objects_by_uid_ranges_and_hand_them_off_without_overlap() {
    let server = server().await;
    let client = server.client();
    let ring = selector_ring();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let total = 120;
    create_sets(&configmaps, total).await;
    let recorder = Arc::new(Recorder::default());
    let writer = churn(configmaps.clone(), total, 7);

    let a = replica(client.clone(), &ring, "shard-a", &recorder);
    let shares = settled(&configmaps, &[("shard-a", &a)], &recorder).await;
    assert_eq!(shares["shard-a"], total, "one replica caches every object");

    // Two join while shard-a reconciles, for a long time, an object the ring will give to
    // shard-b: shard-b takes its range only once shard-a has finished there.
    let objects = configmaps.list(&ListParams::default()).await.unwrap().items;
    let three = ["shard-a", "shard-b", "shard-c"];
    let handed = objects.iter().find(|o| owner(&three, o).as_deref() == Some("shard-b")).unwrap();
    let key = format!("default/{}", handed.name_any());
    recorder.slow.lock().unwrap().insert(key.clone(), Duration::from_secs(4));
    eventually("shard-a reconciling the slow object", || {
        recorder.in_flight_on(&key).as_deref() == Some("shard-a")
    })
    .await;
    // Each then caches and reconciles only its ranges, about a third.
    let b = replica(client.clone(), &ring, "shard-b", &recorder);
    let c = replica(client.clone(), &ring, "shard-c", &recorder);
    let shares =
        settled(&configmaps, &[("shard-a", &a), ("shard-b", &b), ("shard-c", &c)], &recorder).await;
    for (id, share) in &shares {
        assert!(*share > total / 6 && *share < total / 2, "{id} holds {share} of {total}");
    }
    let overlaps = recorder.overlaps.lock().unwrap().clone();
    assert!(overlaps.is_empty(), "keys reconciled by two replicas at once: {overlaps:?}");
    recorder.slow.lock().unwrap().clear();
    // Each says on its Lease which ring it serves.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let lease = leases.get("shard-b").await.unwrap();
    let view = lease.annotations().get(&view_annotation("configmaps")).cloned();
    assert_eq!(view.as_deref(), Some("shard-a,shard-b,shard-c"));

    // A graceful stop: its ranges go to the others at once (its Lease released).
    b.stop().await;
    settled(&configmaps, &[("shard-a", &a), ("shard-c", &c)], &recorder).await;
    // A kill: its ranges go once its Lease expires.
    c.kill();
    settled(&configmaps, &[("shard-a", &a)], &recorder).await;
    writer.abort();
    converged(&configmaps, &recorder, |cm| owner(&["shard-a"], cm)).await;
    let overlaps = recorder.overlaps.lock().unwrap().clone();
    assert!(overlaps.is_empty(), "keys reconciled by two replicas at once: {overlaps:?}");

    // One joins again, under churn; then the shares converge.
    let writer = churn(configmaps.clone(), total, 8);
    let d = replica(client.clone(), &ring, "shard-d", &recorder);
    settled(&configmaps, &[("shard-a", &a), ("shard-d", &d)], &recorder).await;
    writer.abort();
    converged(&configmaps, &recorder, |cm| owner(&["shard-a", "shard-d"], cm)).await;
    a.stop().await;
    d.stop().await;
    let overlaps = recorder.overlaps.lock().unwrap().clone();
    assert!(overlaps.is_empty(), "keys reconciled by two replicas at once: {overlaps:?}");
}

/// Sleeps in each reconcile far past any Lease; records when a reconcile starts and when one
/// is dropped unfinished.
struct Stuck {
    started: Arc<tokio::sync::Notify>,
    dropped: Arc<std::sync::Mutex<Option<tokio::time::Instant>>>,
}

struct DroppedAt(Arc<std::sync::Mutex<Option<tokio::time::Instant>>>);

impl Drop for DroppedAt {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = Some(tokio::time::Instant::now());
    }
}

#[async_trait::async_trait]
impl ctrlkit::controller::Reconciler for Stuck {
    type Object = ConfigMap;
    type Error = std::convert::Infallible;

    async fn reconcile(
        &self,
        _: &ctrlkit::cache::ObjectKey,
        _: Option<Arc<ConfigMap>>,
    ) -> Result<ctrlkit::controller::Action, Self::Error> {
        let _guard = DroppedAt(self.dropped.clone());
        self.started.notify_one();
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(ctrlkit::controller::Action::done())
    }
}

#[tokio::test]
async fn a_replica_that_loses_its_shard_lease_stops_its_reconciles_before_the_lease_can_expire() {
    let server = server().await;
    let proxy = ctrlkit_apiserver::harness::Proxy::start(server.addr()).await;
    let url = format!("http://{}", proxy.addr()).parse().unwrap();
    let client = kube_client::Client::try_from(kube_client::Config::new(url)).unwrap();
    let ring = selector_ring();
    let configmaps: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    create_sets(&configmaps, 1).await;
    let started = Arc::new(tokio::sync::Notify::new());
    let dropped = Arc::new(std::sync::Mutex::new(None));
    let mut manager = ctrlkit::manager::Manager::builder(client.clone())
        .sharding(ring.clone(), "shard-a")
        .build();
    manager
        .controller(Api::<ConfigMap>::namespaced(client, "default"))
        .complete(Stuck { started: started.clone(), dropped: dropped.clone() })
        .expect("the only controller of its name");
    let run = tokio::spawn(manager.run_until(std::future::pending()));
    tokio::time::timeout(Duration::from_secs(20), started.notified()).await.expect("a reconcile");

    // The replica is cut off from the server: its renewals fail, the last one came before
    // the cut, so its Lease can expire for others a lease duration after the cut at the
    // earliest. The reconcile must be gone before then.
    let cut = tokio::time::Instant::now();
    proxy.refuse();
    let ended =
        tokio::time::timeout(Duration::from_secs(10), run).await.expect("the manager stops");
    let err = ended.unwrap().expect_err("a lost Lease is a failure");
    assert!(matches!(err, ctrlkit::manager::ManagerError::ShardLease(_)), "{err}");
    let dropped_after = dropped.lock().unwrap().expect("the reconcile was dropped") - cut;
    assert!(
        dropped_after < ring.lease().lease_duration,
        "the reconcile ran {dropped_after:?} after the cut, past the lease duration"
    );
}

#[tokio::test]
async fn an_informer_with_a_fixed_shard_selector_caches_only_its_range() {
    let server = server().await;
    let configmaps: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    create_sets(&configmaps, 40).await;
    let low_half = ctrlkit::sharding::HashRanges::new([(0, 1 << 63)]);
    let selector = low_half.selector("object.metadata.uid").unwrap();
    let list_watch = ctrlkit::cache::ListWatch::new(configmaps.clone()).shards(&selector);
    assert_eq!(list_watch.shard_selector().as_deref(), Some(selector.as_str()));
    let informer = ctrlkit::cache::Informer::new(list_watch);
    let running = informer.clone();
    let _run = tokio::spawn(async move { running.run(std::future::pending()).await });
    let in_range = |cm: &ConfigMap| low_half.contains(fnv1a64(cm.uid().unwrap().as_bytes()));
    let want = |objects: &[ConfigMap]| {
        let mut names: Vec<String> =
            objects.iter().filter(|o| in_range(o)).map(|o| o.name_any()).collect();
        names.sort();
        names
    };
    let cached = || {
        let mut names: Vec<String> =
            informer.indexer().list().iter().map(|o| o.name_any()).collect();
        names.sort();
        names
    };
    let objects = configmaps.list(&ListParams::default()).await.unwrap().items;
    let expected = want(&objects);
    assert!(expected.len() > 5 && expected.len() < 35, "{} of 40 in the low half", expected.len());
    eventually("the list holds the low half", || cached() == expected).await;
    // Watched too: new objects land in the cache only if their uid falls in the range.
    for i in 40..60 {
        let cm = serde_json::from_value(
            serde_json::json!({ "metadata": { "name": format!("set-{i}") } }),
        );
        configmaps.create(&Default::default(), &cm.unwrap()).await.unwrap();
    }
    let objects = configmaps.list(&ListParams::default()).await.unwrap().items;
    let expected = want(&objects);
    eventually("the watch adds the low half's new objects", || cached() == expected).await;
}
