//! A controller's part in a ring of [`Assignment::ShardSelectors`](super::Assignment): which
//! hash ranges it reconciles, and the fenced hand-off of ranges between replicas.
//!
//! An object's place on the ring is [`fnv1a64`] of its uid (the API server's hash for
//! `shardRange(object.metadata.uid, …)`). The ring is the [`HashRing`] of the shards whose
//! Leases are ready; this shard's target is its [`HashRing::hash_ranges`] there. It
//! reconciles only the ranges it holds now (its *active* set, which the primary informer's
//! shard selector follows), and says on its Lease which ring it serves: the annotation
//! [`view_annotation`]`(<controller>)` = the ring's members. What it may reconcile is always
//! inside its ranges of the ring its Lease names. Each step, after any change of the Leases:
//!
//! 1. **give up** the active ranges outside the target: no new reconcile starts there (the
//!    check before each reconcile reads the active set), the informer lists again under the
//!    smaller selector, and the step waits until no reconcile of an object there is in flight,
//!    for the ring's [hand-off timeout](super::Ring::hand_off_timeout) at most: past it the
//!    shard fences itself (its run ends with the keys that held it up, and the controller
//!    aborts its reconciles and stops), so that a hung reconcile cannot keep the ranges
//!    from moving;
//! 2. **acknowledge**: once nothing outside the target is active, write the ring on the Lease;
//! 3. **take** the target's ranges not active yet, but only those no other live shard's
//!    Lease still claims, read fresh from the server (a quorum list, after its own write, so
//!    of two shards claiming one range at least one sees the other). A shard whose Lease
//!    expired or was released claims nothing: fenced by its Lease, it has stopped. Ranges
//!    still claimed are tried again each retry period and on every Lease change.
//!
//! So no object is reconciled by two replicas at once: a range is active on a shard only
//! while no other live shard's acknowledged ring gives it to that other shard. An object
//! whose place is unknown (a key deleted before it was ever cached here) is reconciled when
//! the server no longer has it, and such a reconcile holds up every give-up until it ends.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use kube_client::api::{ListParams, Patch, PatchParams};
use kube_client::{Api, Client, Resource, ResourceExt};
use parking_lot::{Mutex, MutexGuard};
use serde_json::json;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::membership::{Members, Ring, ShardState, delete_dead_lease, view_annotation};
use super::ranges::HashRanges;
use super::ring::{HashRing, fnv1a64};
use super::sharder::wake_on_change;
use crate::cache::list_watch::shard_selector_param;
use crate::cache::{
    Deleted, HasSynced, Indexer, Informer, InformerGuard, InformerObject, ListWatch, ObjectKey,
    ResourceEventHandlerFuncs, SharedInformerFactory, meta_namespace_key_func,
};
use crate::workqueue::WorkQueue;

/// The field the ring's shard selectors hash.
pub(crate) const UID_FIELD: &str = "object.metadata.uid";

/// An object's place on a ring of shard selectors: FNV-1a 64 of its uid.
pub(crate) fn place_of<K: Resource>(object: &K) -> Option<u64> {
    object.meta().uid.as_deref().map(|uid| fnv1a64(uid.as_bytes()))
}

/// Queues the cached objects in ranges just taken.
type OnTake = Box<dyn Fn(&HashRanges) + Send + Sync>;

/// One controller's shard of a ring of shard selectors; see the module docs.
pub(crate) struct RangeMember {
    ring: Ring,
    shard: String,
    controller: String,
    annotation: String,
    client: Client,
    leases: Informer<Lease>,
    /// Its hold on the Lease informer: dropped with the controller.
    _leases_guard: InformerGuard,
    changed: Arc<Notify>,
    /// The ranges reconciled now. Changed only with `in_flight` locked, so that a reconcile
    /// is admitted under the set that is current when it starts.
    active: watch::Sender<HashRanges>,
    /// The shard selector of `active`, which the primary informer follows.
    selector: watch::Sender<Option<String>>,
    /// Reconciles in flight, by key, with their object's place (`None`: unknown).
    in_flight: Mutex<HashMap<ObjectKey, Option<u64>>>,
    finished: Notify,
    /// The places of objects deleted from the cache, until their key is next handled.
    deleted: Arc<Mutex<HashMap<ObjectKey, u64>>>,
    /// Called with each set of ranges taken, to queue the cached objects there.
    on_take: Mutex<Vec<OnTake>>,
    /// The primary kind's collection, to ask the server whether it knows shard selectors.
    primary_url: String,
}

impl std::fmt::Debug for RangeMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeMember")
            .field("ring", &self.ring.name())
            .field("shard", &self.shard)
            .finish_non_exhaustive()
    }
}

/// A give-up whose reconciles did not end within the hand-off timeout: the keys that held it
/// up, and how long it waited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HandOffStalled {
    pub(crate) keys: Vec<ObjectKey>,
    pub(crate) waited: std::time::Duration,
}

/// What the check before a reconcile decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Reconcile; report [`RangeMember::done`] after.
    Admitted,
    /// Not this shard's now: forget the key.
    NotOurs,
    /// The cache lags the server: look again shortly.
    Later,
    /// The server could not be asked: try again later.
    Retry,
}

impl RangeMember {
    /// Shard `shard` of `ring` for the controller `controller`, whose primary objects are
    /// listed at `primary_url`; its Lease informer comes from `factory`.
    pub(crate) fn new(
        ring: &Ring,
        shard: &str,
        controller: &str,
        client: Client,
        factory: &SharedInformerFactory,
        primary_url: &str,
    ) -> Self {
        let api: Api<Lease> = Api::namespaced(client.clone(), ring.lease_namespace());
        let selected = ListWatch::new(api).labels(&ring.lease_selector());
        let (leases, leases_guard) = factory.guarded_informer_for(selected).into_parts();
        let changed = Arc::new(Notify::new());
        wake_on_change(&leases, &changed);
        Self {
            ring: ring.clone(),
            shard: shard.to_owned(),
            controller: controller.to_owned(),
            annotation: view_annotation(controller),
            client,
            leases,
            _leases_guard: leases_guard,
            changed,
            active: watch::Sender::new(HashRanges::empty()),
            selector: watch::Sender::new(None),
            in_flight: Mutex::new(HashMap::new()),
            finished: Notify::new(),
            deleted: Arc::new(Mutex::new(HashMap::new())),
            on_take: Mutex::new(Vec::new()),
            primary_url: primary_url.to_owned(),
        }
    }

    /// What the primary informer's list and watch select: this shard's active ranges.
    pub(crate) fn selector(&self) -> (String, watch::Receiver<Option<String>>) {
        let name = format!(
            "the ranges of shard {} of ring {} for {}",
            self.shard,
            self.ring.name(),
            self.controller
        );
        (name, self.selector.subscribe())
    }

    /// Remembers the place of each object deleted from `informer`'s cache, so that its key
    /// is told apart: deleted here, or moved out of this shard's ranges.
    pub(crate) fn watch_deletes<K: InformerObject>(&self, informer: &Informer<K>) {
        let deleted = self.deleted.clone();
        informer.add_event_handler(ResourceEventHandlerFuncs::new().on_delete(
            move |d: &Deleted<K>| {
                let object = d.object();
                if let (Ok(key), Some(place)) =
                    (meta_namespace_key_func(object.as_ref()), place_of(object.as_ref()))
                {
                    lock(&deleted).insert(key, place);
                }
            },
        ));
    }

    /// Queues the objects of `indexer` in each set of ranges this shard takes. An object
    /// still cached from before (its range given up and taken back before the informer
    /// listed again) would otherwise wait for its next change: a change that came while the
    /// range was given up was skipped here.
    pub(crate) fn queue_taken<K: InformerObject>(
        &self,
        indexer: Indexer<K>,
        queue: WorkQueue<ObjectKey>,
    ) {
        lock(&self.on_take).push(Box::new(move |taken: &HashRanges| {
            for object in indexer.list() {
                if place_of(object.as_ref()).is_some_and(|p| taken.contains(p))
                    && let Ok(key) = meta_namespace_key_func(object.as_ref())
                {
                    queue.add(key);
                }
            }
        }));
    }

    /// The check before reconciling `key`, whose cached object is `cached`; see the module
    /// docs. An object not cached is looked up on the server (`live`).
    pub(crate) async fn admit<K: Resource>(
        &self,
        key: &ObjectKey,
        cached: Option<&K>,
        live: impl Future<Output = kube_client::Result<Option<Option<u64>>>>,
    ) -> Admission {
        let place = match cached {
            Some(object) => place_of(object),
            None => {
                let deleted = lock(&self.deleted).remove(key);
                if deleted.is_some_and(|p| !self.active.borrow().contains(p)) {
                    return Admission::NotOurs;
                }
                match live.await {
                    // Gone from the server: a delete, reconciled as one.
                    Ok(None) => deleted,
                    Ok(Some(Some(place))) if self.active.borrow().contains(place) => {
                        return Admission::Later;
                    }
                    Ok(Some(_)) => return Admission::NotOurs,
                    Err(err) => {
                        tracing::warn!(%err, %key, "reading an object gone from the cache failed");
                        return Admission::Retry;
                    }
                }
            }
        };
        let mut in_flight = lock(&self.in_flight);
        if place.is_some_and(|p| !self.active.borrow().contains(p)) {
            return Admission::NotOurs;
        }
        in_flight.insert(key.clone(), place);
        Admission::Admitted
    }

    /// The reconcile of `key` admitted before has ended.
    pub(crate) fn done(&self, key: &ObjectKey) {
        if lock(&self.in_flight).remove(key).is_some() {
            self.finished.notify_waiters();
        }
    }

    /// Sets the active ranges (and the informer's selector).
    fn set_active(&self, active: HashRanges) {
        let in_flight = lock(&self.in_flight);
        tracing::info!(
            shard = %self.shard,
            ring = %self.ring.name(),
            share = format!("{:.1}%", active.fraction() * 100.0),
            ranges = active.ranges().len(),
            "shard ranges changed"
        );
        self.selector.send_replace(active.selector(UID_FIELD));
        self.active.send_replace(active);
        drop(in_flight);
    }

    /// The keys in flight outside the active ranges.
    fn outside_active(&self) -> Vec<ObjectKey> {
        let in_flight = lock(&self.in_flight);
        let active = self.active.borrow();
        let mut keys: Vec<ObjectKey> = in_flight
            .iter()
            .filter(|(_, p)| !p.is_some_and(|p| active.contains(p)))
            .map(|(key, _)| key.clone())
            .collect();
        keys.sort();
        keys
    }

    /// Waits until no reconcile outside the active ranges is in flight.
    async fn drained(&self) {
        loop {
            let finished = self.finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            {
                let in_flight = lock(&self.in_flight);
                let active = self.active.borrow();
                if in_flight.values().all(|p| p.is_some_and(|p| active.contains(p))) {
                    return;
                }
            }
            finished.await;
        }
    }

    /// The shard's id.
    pub(crate) fn shard(&self) -> &str {
        &self.shard
    }

    /// The ring's name.
    pub(crate) fn ring(&self) -> &str {
        self.ring.name()
    }

    /// Runs the steps (see the module docs) until `stop` completes, or until a give-up
    /// stalls past the hand-off timeout.
    pub(crate) async fn run(&self, stop: impl Future<Output = ()>) -> Result<(), HandOffStalled> {
        tokio::pin!(stop);
        let mut synced = self.leases.synced_receiver();
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = synced.wait_for(|s| *s) => {}
        }
        self.check_server_support().await;
        let mut members = Members::new(&self.ring);
        loop {
            let now = Instant::now();
            for lease in self.leases.indexer().list() {
                members.observe(&lease, now);
            }
            let pending = self.step(&mut members, now).await?;
            // A step that had nothing to do awaited nothing: let the runtime run the rest.
            tokio::task::yield_now().await;
            // The step may have waited long (for reconciles to end): time is read anew.
            let now = Instant::now();
            let retry = pending.then(|| now + self.ring.lease().retry_period);
            let later = [members.next_change(now), retry].into_iter().flatten().min();
            tokio::select! {
                _ = &mut stop => return Ok(()),
                _ = self.changed.notified() => {}
                _ = async { match later { Some(at) => tokio::time::sleep_until(at).await, None => std::future::pending().await } } => {}
            }
        }
    }

    /// One step, from the Leases observed at `now`; returns whether something is left to do
    /// (a range still claimed, a write that failed).
    ///
    /// The Leases listed after the give-up are observed at the instant they were read: the
    /// give-up may wait as long as a reconcile runs, and a Lease read after that wait but
    /// recorded as seen before it would age by the wait, so that a live shard (this one
    /// too) would look expired at the next step, and its ranges be taken while it
    /// reconciles them.
    async fn step(&self, members: &mut Members, now: Instant) -> Result<bool, HandOffStalled> {
        let leases = self.leases.indexer().list();
        for gone in members.to_delete(now) {
            match leases.iter().find(|l| l.metadata.name.as_deref() == Some(gone.as_str())) {
                Some(lease) => delete_dead_lease(&self.client, &self.ring, lease).await,
                None => members.forget(&gone),
            }
        }
        let ready = members.ready(now);
        let target = match ready.contains(&self.shard) {
            true => HashRing::new(ready.clone()).hash_ranges(&self.shard),
            false => HashRanges::empty(),
        };
        // 1. Give up what is no longer ours, and wait for its reconciles.
        let active = self.active.borrow().clone();
        if !active.is_subset(&target) {
            self.set_active(active.intersection(&target));
            let waited = self.ring.hand_off();
            if tokio::time::timeout(waited, self.drained()).await.is_err() {
                let keys = self.outside_active();
                tracing::error!(
                    shard = %self.shard,
                    ring = %self.ring.name(),
                    ?waited,
                    keys = %keys.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
                    "reconciles in ranges given up did not end: fencing this shard"
                );
                return Err(HandOffStalled { keys, waited });
            }
        }
        if target.is_empty() {
            return Ok(false);
        }
        // 2. Say which ring this shard serves.
        let view = ready.join(",");
        let own = leases.iter().find(|l| l.metadata.name.as_deref() == Some(self.shard.as_str()));
        if own.and_then(|l| l.annotations().get(&self.annotation)) != Some(&view)
            && let Err(err) = self.acknowledge(&view).await
        {
            tracing::warn!(%err, shard = %self.shard, "writing the ring on the shard's Lease failed; retrying");
            return Ok(true);
        }
        // 3. Take what no other live shard claims.
        let gain = target.difference(&self.active.borrow());
        if gain.is_empty() {
            return Ok(false);
        }
        let api: Api<Lease> = Api::namespaced(self.client.clone(), self.ring.lease_namespace());
        let fresh = match api.list(&ListParams::default().labels(&self.ring.lease_selector())).await
        {
            Ok(list) => list.items,
            Err(err) => {
                tracing::warn!(%err, "listing the ring's Leases failed; retrying");
                return Ok(true);
            }
        };
        let now = Instant::now();
        let mut claimed = HashRanges::empty();
        for lease in &fresh {
            members.observe(lease, now);
            let name = lease.name_any();
            if name == self.shard {
                if lease.annotations().get(&self.annotation) != Some(&view) {
                    return Ok(true); // our own acknowledgement is not there (yet)
                }
                continue;
            }
            if matches!(members.state(&name, now), Some(ShardState::Expired | ShardState::Dead)) {
                continue;
            }
            if let Some(view) = lease.annotations().get(&self.annotation) {
                let theirs = HashRing::new(view.split(',').filter(|s| !s.is_empty()));
                claimed = claimed.union(&theirs.hash_ranges(&name));
            }
        }
        let allowed = gain.difference(&claimed);
        if !allowed.is_empty() {
            let active = self.active.borrow().union(&allowed);
            self.set_active(active);
            for queue_taken in lock(&self.on_take).iter() {
                queue_taken(&allowed);
            }
        }
        Ok(allowed != gain)
    }

    /// Writes `view` on this shard's Lease.
    async fn acknowledge(&self, view: &str) -> kube_client::Result<()> {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), self.ring.lease_namespace());
        let patch = json!({ "metadata": { "annotations": { &self.annotation: view } } });
        api.patch(&self.shard, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }

    /// Warns once if the server ignores shard selectors (before 1.36, or with
    /// `ShardedListAndWatch` off): it then sends every object to every shard, which caches
    /// them all; reconciles stay split by the ring.
    async fn check_server_support(&self) {
        let selector = HashRanges::all().selector(UID_FIELD).unwrap_or_default();
        let uri = format!("{}?limit=1&{}", self.primary_url, shard_selector_param(&selector));
        let Ok(request) = http::Request::get(uri).body(Vec::new()) else { return };
        match self.client.request_text(request).await {
            Ok(text) => {
                let list: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                if list["metadata"]["shardInfo"].is_null() {
                    tracing::warn!(
                        ring = %self.ring.name(),
                        "the API server ignores shard selectors (it is older than 1.36, or \
                         ShardedListAndWatch is off): every shard caches every object, and \
                         reconciles only its own"
                    );
                }
            }
            Err(err) => tracing::warn!(%err, "asking the server about shard selectors failed"),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use k8s_openapi::jiff::Timestamp;
    use kube_client::api::PostParams;

    use super::*;
    use crate::sharding::{Assignment, RING_LABEL};

    /// Writes the Lease of shard `name` as its holder would: held (or released, with an
    /// empty `holder`), renewed at second `renewed`, saying it serves the ring `view`.
    async fn write_lease(api: &Api<Lease>, name: &str, holder: &str, renewed: i64, view: &str) {
        let lease = json!({
            "metadata": {
                "name": name,
                "labels": { RING_LABEL: "sets" },
                "annotations": { view_annotation("configmaps"): view },
            },
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": 15,
                "renewTime": MicroTime(Timestamp::from_second(renewed).unwrap()),
            },
        });
        match api.get_opt(name).await.unwrap() {
            None => {
                let lease = serde_json::from_value(lease).unwrap();
                api.create(&PostParams::default(), &lease).await.unwrap();
            }
            Some(_) => {
                let patch = Patch::Merge(&lease);
                api.patch(name, &PatchParams::default(), &patch).await.unwrap();
            }
        }
    }

    /// When the Lease `name` says it was renewed, in seconds, if `lease` is it.
    fn renewed_at(lease: &Lease, name: &str) -> Option<i64> {
        let spec = lease.spec.as_ref().filter(|_| lease.metadata.name.as_deref() == Some(name))?;
        spec.renew_time.as_ref().map(|t| t.0.as_second())
    }

    /// One turn of `run`'s loop: the cached Leases observed now, then a step.
    async fn turn(member: &RangeMember, members: &mut Members) {
        let now = Instant::now();
        for lease in member.leases.indexer().list() {
            members.observe(&lease, now);
        }
        member.step(members, now).await.expect("no hand-off stalls");
    }

    /// Waits until the Lease informer holds `check`.
    async fn cached(member: &RangeMember, check: impl Fn(&[Arc<Lease>]) -> bool) {
        while !check(&member.leases.indexer().list()) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_that_waited_past_a_lease_duration_leaves_a_live_shard_its_ranges() {
        let server = ctrlkit_apiserver::ApiServer::start().await.unwrap();
        let client = server.in_process_client();
        let ring = Ring::new("sets").assignment(Assignment::ShardSelectors);
        let factory = SharedInformerFactory::builder(client.clone()).build();
        let url = "/api/v1/namespaces/default/configmaps";
        let member =
            Arc::new(RangeMember::new(&ring, "a", "configmaps", client.clone(), &factory, url));
        factory.start(std::future::pending());
        let leases: Api<Lease> = Api::namespaced(client, "default");
        // a (this member's Lease, renewed here as its ShardLease would) and b, which serves
        // the ring [a, b].
        let mut second = 0;
        write_lease(&leases, "a", "a", second, "").await;
        write_lease(&leases, "b", "b", second, "a,b").await;
        cached(&member, |l| l.len() == 2).await;
        let mut members = Members::new(&ring);
        turn(&member, &mut members).await;
        let a_of_ab = HashRing::new(["a", "b"]).hash_ranges("a");
        assert_eq!(*member.active.borrow(), a_of_ab);

        // a reconciles an object in a range that c will hold in the ring [a, c].
        let (a_of_ac, c_of_ac) = (
            HashRing::new(["a", "c"]).hash_ranges("a"),
            HashRing::new(["a", "c"]).hash_ranges("c"),
        );
        let uid = (0..)
            .map(|i| format!("uid-{i}"))
            .find(|u| {
                let place = fnv1a64(u.as_bytes());
                a_of_ab.contains(place) && c_of_ac.contains(place)
            })
            .unwrap();
        let object = ConfigMap {
            metadata: ObjectMeta { uid: Some(uid), ..ObjectMeta::default() },
            ..ConfigMap::default()
        };
        let key = ObjectKey::namespaced("default", "slow");
        let admitted = member.admit(&key, Some(&object), async { Ok(None) }).await;
        assert_eq!(admitted, Admission::Admitted);
        // A rolling update: b leaves, c joins (serving [a, c]); a sees both at once.
        write_lease(&leases, "b", "", second, "a,b").await;
        write_lease(&leases, "c", "c", second, "a,c").await;
        cached(&member, |l| {
            l.len() == 3
                && l.iter().any(|l| l.spec.as_ref().unwrap().holder_identity.as_deref() == Some(""))
        })
        .await;
        // The step gives c that range and waits 40 s (more than two lease durations) for
        // the reconcile there; a and c renew meanwhile.
        let stepping = {
            let member = member.clone();
            tokio::spawn(async move {
                turn(&member, &mut members).await;
                members
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        for _ in 0..20 {
            second += 2;
            write_lease(&leases, "a", "a", second, "a,c").await;
            write_lease(&leases, "c", "c", second, "a,c").await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        member.done(&key);
        let mut members = stepping.await.unwrap();
        assert_eq!(*member.active.borrow(), a_of_ac, "a took what b held");
        // a renews (as its ShardLease does, on its own), c not yet: it renewed a second ago.
        second += 1;
        write_lease(&leases, "a", "a", second, "a,c").await;
        cached(&member, |l| l.iter().any(|l| renewed_at(l, "a") == Some(second))).await;
        turn(&member, &mut members).await;
        let taken = member.active.borrow().intersection(&c_of_ac);
        assert!(
            taken.is_empty(),
            "a took {:.1}% of the ring from c, a live shard",
            taken.fraction() * 100.0
        );
        assert_eq!(members.ready(Instant::now()), ["a", "c"]);
    }
}
