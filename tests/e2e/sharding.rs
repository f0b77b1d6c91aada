//! A ring of server-side shard selectors (`Assignment::ShardSelectors`): three replicas in
//! this process, each its own client, Lease and controller. Where the server serves shard
//! selectors (1.36 with `ShardedListAndWatch`, as `scripts/kube-apiserver.sh` starts it, and
//! the embedded server) each replica caches only its ranges; where it ignores them (1.20)
//! every replica caches every object. Either way each object is reconciled by its shard
//! alone, and a replica that stops hands its ranges over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ctrlkit::cache::{Indexer, ObjectKey};
use ctrlkit::controller::{Action, Config, Controller, Reconciler};
use ctrlkit::leaderelection::LeaderElectionConfig;
use ctrlkit::sharding::{Assignment, HashRanges, HashRing, Ring, ShardLease, fnv1a64};
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::{ListParams, PostParams};
use kube_client::{Api, Client, ResourceExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Who reconciles what: the shard of each key's last reconcile, and any key two shards
/// reconciled at once.
#[derive(Default)]
struct Recorder {
    in_flight: Mutex<HashMap<String, String>>,
    last: Mutex<HashMap<String, String>>,
    overlaps: Mutex<Vec<String>>,
}

struct Recording {
    shard: String,
    recorder: Arc<Recorder>,
}

#[async_trait]
impl Reconciler for Recording {
    type Object = ConfigMap;
    type Error = std::convert::Infallible;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        _: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Self::Error> {
        let name = key.to_string();
        let other =
            self.recorder.in_flight.lock().unwrap().insert(name.clone(), self.shard.clone());
        if let Some(other) = other {
            self.recorder
                .overlaps
                .lock()
                .unwrap()
                .push(format!("{name}: {other} and {}", self.shard));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.recorder.in_flight.lock().unwrap().remove(&name);
        self.recorder.last.lock().unwrap().insert(name, self.shard.clone());
        Ok(Action::done())
    }
}

struct Replica {
    id: String,
    cache: Indexer<ConfigMap>,
    stop: oneshot::Sender<()>,
    run: JoinHandle<()>,
}

fn replica(client: Client, ring: &Ring, ns: &str, id: &str, recorder: &Arc<Recorder>) -> Replica {
    let lease = ShardLease::new(client.clone(), ring, id).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, ns);
    let controller =
        Controller::builder(api).shard(ring, id).config(Config::default().workers(2)).build();
    let cache = controller.indexer();
    let reconciler = Recording { shard: id.to_owned(), recorder: recorder.clone() };
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(async move {
        let (controller_stop, controller_stopped) = oneshot::channel::<()>();
        let controller = tokio::spawn(controller.run(reconciler, async {
            let _ = controller_stopped.await;
        }));
        // The Lease is released only after the controller stopped, as a Manager does.
        let _ = lease
            .run(async {
                let _ = stopped.await;
                let _ = controller_stop.send(());
                let _ = controller.await;
            })
            .await;
    });
    Replica { id: id.to_owned(), cache, stop, run }
}

/// Whether the server filters by `shardSelector` (it echoes the selector in the list's
/// `metadata.shardInfo`); older servers ignore the parameter.
async fn serves_shard_selectors(t: &Target) -> bool {
    let selector = HashRanges::all().selector("object.metadata.uid").unwrap();
    let encoded: String = form_urlencoded::byte_serialize(selector.as_bytes()).collect();
    let path = format!("/api/v1/namespaces/{}/configmaps?limit=1&shardSelector={encoded}", t.ns);
    let listed: serde_json::Value = serde_json::from_slice(&t.raw_get(&path).await.bytes).unwrap();
    !listed["metadata"]["shardInfo"].is_null()
}

/// Waits until each object was last reconciled by the shard the ring of `replicas` gives it
/// and each cache holds its share (or, where the server ignores selectors, every object).
async fn settled(api: &Api<ConfigMap>, replicas: &[&Replica], recorder: &Recorder, split: bool) {
    let ring = HashRing::new(replicas.iter().map(|r| r.id.clone()));
    let owner = |cm: &ConfigMap| {
        let place = fnv1a64(cm.uid().unwrap_or_default().as_bytes());
        ring.shard_for_hash(place).map(str::to_owned)
    };
    let mut why = String::new();
    for _ in 0..600 {
        let objects = api.list(&ListParams::default()).await.unwrap().items;
        let last = recorder.last.lock().unwrap().clone();
        let reconciled = objects.iter().all(|cm| {
            last.get(&format!("{}/{}", cm.namespace().unwrap(), cm.name_any()))
                == owner(cm).as_ref()
        });
        let caches = replicas.iter().all(|r| {
            let mut want: Vec<String> = objects
                .iter()
                .filter(|cm| !split || owner(cm).as_deref() == Some(r.id.as_str()))
                .map(|cm| cm.name_any())
                .collect();
            let mut cached: Vec<String> = r.cache.list().iter().map(|cm| cm.name_any()).collect();
            want.sort();
            cached.sort();
            why = format!("{} caches {} objects of {} wanted", r.id, cached.len(), want.len());
            want == cached
        });
        if reconciled && caches {
            return;
        }
        if caches {
            why = "some object was last reconciled by another shard".into();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("never settled: {why}");
}

async fn a_shard_selector_ring_splits_reconciles_by_uid_and_caches_where_the_server_can(
    t: &Target,
) {
    let split = serves_shard_selectors(t).await;
    if t.is_real() && t.version().at_least(36) {
        assert!(split, "scripts/kube-apiserver.sh starts 1.36 with ShardedListAndWatch on");
    }
    let mut timing = LeaderElectionConfig::default();
    timing.lease_duration = Duration::from_secs(4);
    timing.renew_deadline = Duration::from_secs(3);
    timing.retry_period = Duration::from_millis(500);
    let ring = Ring::new("configmaps")
        .namespace(&t.ns)
        .lease_config(timing)
        .assignment(Assignment::ShardSelectors);
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    for i in 0..60 {
        let cm = serde_json::from_value(
            serde_json::json!({ "metadata": { "name": format!("cm-{i}") } }),
        );
        api.create(&PostParams::default(), &cm.unwrap()).await.unwrap();
    }
    let recorder = Arc::new(Recorder::default());
    let client = || Client::try_from(t.config()).unwrap();
    let a = replica(client(), &ring, &t.ns, "shard-a", &recorder);
    let b = replica(client(), &ring, &t.ns, "shard-b", &recorder);
    let c = replica(client(), &ring, &t.ns, "shard-c", &recorder);
    settled(&api, &[&a, &b, &c], &recorder, split).await;
    // A graceful stop: its ranges go to the other two, which reconcile its objects.
    let _ = b.stop.send(());
    b.run.await.unwrap();
    settled(&api, &[&a, &c], &recorder, split).await;
    let overlaps = recorder.overlaps.lock().unwrap().clone();
    assert!(overlaps.is_empty(), "keys reconciled by two replicas at once: {overlaps:?}");
    for replica in [a, c] {
        let _ = replica.stop.send(());
        replica.run.await.unwrap();
    }
}
case!(
    Needs::Protocol,
    a_shard_selector_ring_splits_reconciles_by_uid_and_caches_where_the_server_can
);
