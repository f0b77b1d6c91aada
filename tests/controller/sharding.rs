//! Shard membership on the embedded server: each replica's Lease, labelled with its ring,
//! held while it runs, released when it stops, left to expire when it is dropped; and the
//! shards' states read back from the Leases.

use std::time::Duration;

use ctrlkit::leaderelection::LeaderElectionConfig;
use ctrlkit::sharding::{Members, RING_LABEL, Ring, ShardLease, ShardState};
use k8s_openapi::api::coordination::v1::Lease;
use kube_client::Api;
use kube_client::api::ListParams;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::common::*;

fn ring() -> Ring {
    let mut timing = LeaderElectionConfig::default();
    timing.lease_duration = Duration::from_millis(1200);
    timing.renew_deadline = Duration::from_millis(800);
    timing.retry_period = Duration::from_millis(200);
    Ring::new("sets").lease_config(timing)
}

/// The ring's Leases as the server has them, observed into `members` now.
async fn observe(leases: &Api<Lease>, ring: &Ring, members: &mut Members) -> Vec<Lease> {
    let listed = leases.list(&ListParams::default().labels(&ring.lease_selector())).await.unwrap();
    for lease in &listed.items {
        members.observe(lease, Instant::now());
    }
    listed.items
}

#[tokio::test]
async fn each_replica_holds_a_labelled_lease_released_on_stop_and_left_to_expire_when_dropped() {
    let server = server().await;
    let ring = ring();
    let leases: Api<Lease> = Api::namespaced(server.client(), "default");
    let mut stops = Vec::new();
    let mut runs = Vec::new();
    let mut shards = Vec::new();
    for id in ["shard-a", "shard-b", "shard-c"] {
        let shard = ShardLease::new(server.client(), &ring, id).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let running = shard.clone();
        runs.push(tokio::spawn(async move {
            running
                .run(async {
                    let _ = stopped.await;
                })
                .await
        }));
        stops.push(stop);
        shards.push(shard);
    }
    eventually("three members", || shards.iter().all(ShardLease::is_member)).await;

    let mut members = Members::new(&ring);
    let listed = observe(&leases, &ring, &mut members).await;
    let mut holders: Vec<(String, String)> = listed
        .iter()
        .map(|l| {
            assert_eq!(l.metadata.labels.as_ref().unwrap()[RING_LABEL], "sets");
            let holder = l.spec.as_ref().and_then(|s| s.holder_identity.clone());
            (l.metadata.name.clone().unwrap(), holder.unwrap_or_default())
        })
        .collect();
    holders.sort();
    assert_eq!(
        holders,
        [("shard-a", "shard-a"), ("shard-b", "shard-b"), ("shard-c", "shard-c")]
            .map(|(n, h)| (n.to_owned(), h.to_owned()))
    );
    assert_eq!(members.ready(Instant::now()), ["shard-a", "shard-b", "shard-c"]);

    // A graceful stop releases the Lease: dead at once.
    let mut stops = stops.into_iter();
    let _ = stops.next().unwrap().send(());
    let mut runs = runs.into_iter();
    runs.next().unwrap().await.unwrap().expect("a graceful stop");
    assert!(!shards[0].is_member());
    observe(&leases, &ring, &mut members).await;
    assert_eq!(members.state("shard-a", Instant::now()), Some(ShardState::Dead));
    assert_eq!(members.ready(Instant::now()), ["shard-b", "shard-c"]);

    // A replica dropped without a release: its Lease stops changing and expires.
    runs.next().unwrap().abort();
    let dropped_at = Instant::now();
    loop {
        observe(&leases, &ring, &mut members).await;
        if members.state("shard-b", Instant::now()) == Some(ShardState::Expired) {
            break;
        }
        assert!(dropped_at.elapsed() < Duration::from_secs(10), "shard-b never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A lease duration after its last renewal, which came at most a retry period before the
    // drop.
    let earliest = ring.lease().lease_duration - ring.lease().retry_period;
    assert!(dropped_at.elapsed() >= earliest, "too soon: {:?}", dropped_at.elapsed());
    assert_eq!(members.ready(Instant::now()), ["shard-c"], "shard-c renews all along");
}
