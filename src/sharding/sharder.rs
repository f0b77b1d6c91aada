//! [`Sharder`]: assigns a ring's objects to its ready shards by labelling them, and moves them
//! when membership changes.
//!
//! It watches the ring's shard Leases ([`Members`]), and the metadata of the primary kind and
//! of the kinds it owns. After changes it makes one pass (passes a change brings about start
//! at least 250 ms apart, so that churn is gathered into passes rather than keeping a worker
//! thread busy; a pass yields to the runtime every 256 objects):
//! - a primary object's shard is the ring's choice for its [`ring_key`]; it is labelled
//!   [`shard_label`]` = <shard>` with a merge patch that carries the object's
//!   resourceVersion (a write raced by another is refused with 409, and the next pass sees the
//!   newer object);
//! - an object labelled to a live shard (ready) that should move is **drained** first: the
//!   sharder labels it [`drain_label`] and leaves it; the old shard finishes its reconcile,
//!   starts no other and removes both labels, and only then does the next pass label it to its
//!   new shard. An object labelled to an expired or dead shard (whose holder has stopped,
//!   fenced by its Lease) or to no shard moves at once;
//! - an owned object (controlled by an object of the primary kind) carries its controlling
//!   owner's label while the owner is labelled and not draining, so that a reconcile finds its
//!   children in its own shard's cache;
//! - Leases of shards dead long enough are deleted.
//!
//! Run by a [`Manager`](crate::manager::Manager) with leader election, it labels only while
//! it holds the leader Lease by its own clock, checked before each write: a sharder that
//! resumes from a freeze judges the shards by Leases it has not read for a while, and must
//! not move objects on that view.
//!
//! Namespaced kinds only (a cluster-scoped primary kind cannot be sharded yet). With no ready
//! shard nothing is labelled. One sharder runs per ring (a replica elected for
//! it); two would not corrupt anything (every write is conditional on the version read), but
//! would do the work twice.

use std::collections::{BTreeMap, HashMap};
use std::future::{Future, IntoFuture};
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::coordination::v1::Lease;
use kube_client::api::{Patch, PatchParams};
use kube_client::core::PartialObjectMeta;
use kube_client::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::membership::{Assignment, Members, Ring, ShardState};
use super::membership::{drain_label, shard_label};
use super::metrics::{AssignReason, ShardingMetrics};
use super::ring::{HashRing, ring_key};
use crate::cache::{
    Informer, InformerHandle, InformerObject, ListWatch, ResourceEventHandlerFuncs,
    wait_for_informers,
};
use crate::fence::Fence;
use crate::panic::observe;
use crate::runnable::{Runnable, RunnableError, Stop};

/// What a pass does with one object.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Move {
    /// Label it to this shard (removing any drain label).
    Assign(String),
    /// Ask its shard to give it up.
    Drain,
    /// Leave it as it is.
    Stay,
}

/// The move for an object labelled `current` (draining or not) whose shard should be
/// `desired`; `state` tells the current shard's state.
fn decide(
    current: Option<&str>,
    draining: bool,
    desired: Option<&str>,
    state: impl Fn(&str) -> Option<ShardState>,
) -> Move {
    let Some(desired) = desired else { return Move::Stay };
    match current {
        Some(current) if current == desired => Move::Stay,
        Some(current) if state(current) == Some(ShardState::Ready) => match draining {
            true => Move::Stay,
            false => Move::Drain,
        },
        _ => Move::Assign(desired.to_owned()),
    }
}

/// An owned kind, erased: its objects follow their controlling owner's label.
trait Owned: Send + Sync {
    fn informer(&self) -> Arc<dyn InformerHandle>;
    fn pass<'a>(
        &'a self,
        owners: &'a Owners,
        labels: &'a Labels,
        fence: &'a Fence,
    ) -> BoxFuture<'a, ()>;
}

/// The shortest time from the start of one pass to the start of the next one that a change
/// brought about (a shard's state changing with time starts one at once).
const PASS_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// Objects looked at between two yields to the runtime: a pass that patches nothing awaits
/// nothing, and thousands of objects would otherwise hold the worker thread.
const OBJECTS_PER_YIELD: usize = 256;

async fn yield_every(i: usize) {
    if i > 0 && i.is_multiple_of(OBJECTS_PER_YIELD) {
        tokio::task::yield_now().await;
    }
}

/// The primary objects' shards by namespace and name: `None` while one is draining or
/// unlabelled.
type Owners = HashMap<(String, String), Option<String>>;

/// The label keys of a ring.
struct Labels {
    shard: String,
    drain: String,
}

impl Labels {
    fn of<K: Resource>(&self, object: &K) -> (Option<String>, bool) {
        let labels = object.labels();
        (labels.get(&self.shard).cloned(), labels.contains_key(&self.drain))
    }
}

/// Metadata of one kind: its informer and the API to label it.
struct Kind<K: Resource<DynamicType = ()>> {
    informer: Informer<PartialObjectMeta<K>>,
    client: Client,
}

impl<K> Kind<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    PartialObjectMeta<K>:
        InformerObject<DynamicType = ()> + Resource<Scope = NamespaceResourceScope>,
{
    fn new(client: &Client, namespace: Option<&str>, notify: &Arc<Notify>) -> Self {
        let api: Api<PartialObjectMeta<K>> = match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let informer = Informer::new(ListWatch::new(api));
        wake_on_change(&informer, notify);
        Self { informer, client: client.clone() }
    }

    /// Patches the labels of `object` (guarded by its resourceVersion), unless a Lease of
    /// `fence` has lapsed; whether it went through.
    async fn label(
        &self,
        object: &PartialObjectMeta<K>,
        labels: serde_json::Value,
        fence: &Fence,
    ) -> bool {
        if let Some(lease) = fence.lapsed() {
            tracing::warn!(lease, "not labelling: this replica no longer holds its {lease}");
            return false;
        }
        let name = object.name_any();
        let api: Api<K> =
            Api::namespaced(self.client.clone(), &object.namespace().unwrap_or_default());
        let patch = json!({
            "metadata": { "resourceVersion": object.resource_version(), "labels": labels }
        });
        match api.patch_metadata(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => true,
            // Changed or gone since it was read: the next pass sees what it is now.
            Err(kube_client::Error::Api(s)) if s.code == 409 || s.code == 404 => false,
            Err(err) => {
                tracing::warn!(%err, object = %name, "labelling failed; retried at the next pass");
                false
            }
        }
    }
}

impl<K> Owned for Kind<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    PartialObjectMeta<K>:
        InformerObject<DynamicType = ()> + Resource<Scope = NamespaceResourceScope>,
{
    fn informer(&self) -> Arc<dyn InformerHandle> {
        Arc::new(self.informer.clone())
    }

    fn pass<'a>(
        &'a self,
        owners: &'a Owners,
        labels: &'a Labels,
        fence: &'a Fence,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            for (i, object) in self.informer.indexer().list().into_iter().enumerate() {
                yield_every(i).await;
                let Some(owner) =
                    object.owner_references().iter().find(|r| r.controller == Some(true))
                else {
                    continue;
                };
                let key = (object.namespace().unwrap_or_default(), owner.name.clone());
                // The owner's shard, while it is labelled and not draining.
                let Some(Some(shard)) = owners.get(&key) else { continue };
                let (current, _) = labels.of(object.as_ref());
                if current.as_deref() != Some(shard.as_str()) {
                    self.label(&object, json!({ &labels.shard: shard }), fence).await;
                }
            }
        })
    }
}

/// Wakes `notify` on every change `informer` sees.
pub(super) fn wake_on_change<K: InformerObject>(informer: &Informer<K>, notify: &Arc<Notify>) {
    let (a, u, d) = (notify.clone(), notify.clone(), notify.clone());
    informer.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .on_add(move |_| a.notify_one())
            .on_update(move |_, _| u.notify_one())
            .on_delete(move |_| d.notify_one()),
    );
}

/// The sharder of a ring over the primary kind `P` and the kinds it owns; see the module docs.
pub struct Sharder<P: Resource<DynamicType = ()>> {
    client: Client,
    ring: Ring,
    labels: Labels,
    namespace: Option<String>,
    notify: Arc<Notify>,
    leases: Informer<Lease>,
    primary: Kind<P>,
    owned: Vec<Box<dyn Owned>>,
    metrics: Option<Arc<dyn ShardingMetrics>>,
}

impl<P> Sharder<P>
where
    P: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    PartialObjectMeta<P>:
        InformerObject<DynamicType = ()> + Resource<Scope = NamespaceResourceScope>,
{
    /// The sharder of `ring` over the objects of `P` in `namespace` (`None`: all namespaces).
    pub fn new(client: Client, ring: Ring, namespace: Option<&str>) -> Self {
        let notify = Arc::new(Notify::new());
        let lease_api: Api<Lease> = Api::namespaced(client.clone(), ring.lease_namespace());
        let leases = Informer::new(ListWatch::new(lease_api).labels(&ring.lease_selector()));
        wake_on_change(&leases, &notify);
        let primary = Kind::new(&client, namespace, &notify);
        let labels = Labels { shard: shard_label(ring.name()), drain: drain_label(ring.name()) };
        Self {
            client,
            ring,
            labels,
            namespace: namespace.map(str::to_owned),
            notify,
            leases,
            primary,
            owned: Vec::new(),
            metrics: None,
        }
    }

    /// Reports the ring to `metrics` after each pass, and each assignment and drain.
    #[must_use]
    pub fn metrics(mut self, metrics: Arc<dyn ShardingMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Also labels the objects of `C` that an object of `P` controls, with their owner's shard.
    #[must_use]
    pub fn owns<C>(mut self) -> Self
    where
        C: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + 'static,
        PartialObjectMeta<C>:
            InformerObject<DynamicType = ()> + Resource<Scope = NamespaceResourceScope>,
    {
        let kind: Kind<C> = Kind::new(&self.client, self.namespace.as_deref(), &self.notify);
        self.owned.push(Box::new(kind));
        self
    }

    /// Runs until `shutdown` completes: its informers, and a pass after changes (passes that
    /// changes bring about start at least 250 ms apart) and when a shard's state changes with
    /// time. In a ring of [`Assignment::ShardSelectors`] it does nothing (there is nothing to
    /// label) and says so.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        self.run_fenced(shutdown, &Fence::default()).await;
    }

    /// As [`run`](Self::run), writing only while every Lease of `fence` is held.
    async fn run_fenced(&self, shutdown: impl Future<Output = ()>, fence: &Fence) {
        if self.ring.assignment_mode() == Assignment::ShardSelectors {
            tracing::warn!(
                ring = %self.ring.name(),
                "a ring of shard selectors has no sharder: this one labels nothing"
            );
            return shutdown.await;
        }
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut informers: Vec<Arc<dyn InformerHandle>> =
            vec![Arc::new(self.leases.clone()), Arc::new(self.primary.informer.clone())];
        informers.extend(self.owned.iter().map(|o| o.informer()));
        let runs: Vec<_> = informers
            .iter()
            .map(|informer| {
                let mut stopped = stopped.clone();
                let until = async move {
                    let _ = stopped.wait_for(|s| *s).await;
                };
                tokio::spawn(informer.run_until(until.boxed()))
            })
            .collect();
        tokio::pin!(shutdown);
        if wait_for_informers(&informers, &mut shutdown).await.is_ok() {
            let mut members = Members::new(&self.ring);
            loop {
                let started = Instant::now();
                self.pass(&mut members, started, fence).await;
                let later = members.next_change(started);
                tokio::select! {
                    _ = &mut shutdown => break,
                    _ = self.notify.notified() => {
                        // Under churn a change is always waiting: gather those of a short
                        // while into one pass rather than pass after pass at full speed,
                        // which would hold a worker thread (and the tasks queued behind it,
                        // a Lease renewal among them) for as long as the churn lasts.
                        tokio::select! {
                            _ = &mut shutdown => break,
                            _ = tokio::time::sleep_until(started + PASS_INTERVAL) => {}
                        }
                    }
                    _ = sleep_until(later) => {}
                }
            }
        }
        stop.send_replace(true);
        for run in runs {
            let _ = run.await;
        }
    }

    /// One pass; see the module docs.
    async fn pass(&self, members: &mut Members, now: Instant, fence: &Fence) {
        if let Some(lease) = fence.lapsed() {
            tracing::warn!(lease, "no pass: this replica no longer holds its {lease}");
            return;
        }
        let leases = self.leases.indexer().list();
        for lease in &leases {
            members.observe(lease, now);
        }
        for gone in members.to_delete(now) {
            let lease = leases.iter().find(|l| l.metadata.name.as_deref() == Some(gone.as_str()));
            match lease {
                Some(lease) => self.delete_lease(lease).await,
                None => members.forget(&gone),
            }
        }
        let ring = HashRing::new(members.ready(now));
        let state = |shard: &str| members.state(shard, now);
        let mut owners = Owners::new();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for (i, object) in self.primary.informer.indexer().list().into_iter().enumerate() {
            yield_every(i).await;
            let (namespace, name) = (object.namespace(), object.name_any());
            let key = ring_key(&P::group(&()), &P::kind(&()), namespace.as_deref(), &name);
            let (current, draining) = self.labels.of(object.as_ref());
            let settled = current.clone().filter(|_| !draining);
            owners.insert((namespace.unwrap_or_default(), name), settled);
            let desired = ring.shard_for(&key);
            let landed = self.place(&object, (current, draining), desired, state, fence).await;
            if let Some(shard) = landed {
                *counts.entry(shard).or_insert(0) += 1;
            }
        }
        self.report_ring(members, counts, now);
        for owned in &self.owned {
            owned.pass(&owners, &self.labels, fence).await;
        }
    }

    /// Carries out the move `decide` picks for `object` (labelled `current`, draining or
    /// not; its ring shard `desired`); returns the shard it is labelled to afterwards.
    async fn place(
        &self,
        object: &PartialObjectMeta<P>,
        (current, draining): (Option<String>, bool),
        desired: Option<&str>,
        state: impl Fn(&str) -> Option<ShardState>,
        fence: &Fence,
    ) -> Option<String> {
        match decide(current.as_deref(), draining, desired, state) {
            Move::Stay => current,
            Move::Drain => {
                let labels = json!({ &self.labels.drain: "true" });
                if self.primary.label(object, labels, fence).await {
                    self.report("drained", |m, ring| m.drained(ring));
                }
                current
            }
            Move::Assign(shard) => {
                let labels = json!({ &self.labels.shard: shard, &self.labels.drain: null });
                let reason = match current {
                    None => AssignReason::Unassigned,
                    Some(_) => AssignReason::ShardStopped,
                };
                if !self.primary.label(object, labels, fence).await {
                    return current;
                }
                self.report("assigned", |m, ring| m.assigned(ring, reason));
                Some(shard)
            }
        }
    }

    /// Calls `hook` (the metrics hook `name`) on the metrics, if any, with the ring's name.
    fn report(&self, name: &'static str, hook: impl FnOnce(&dyn ShardingMetrics, &str)) {
        if let Some(metrics) = &self.metrics {
            observe(name, || hook(metrics.as_ref(), self.ring.name()));
        }
    }

    /// The objects per shard and the members by state, after a pass.
    fn report_ring(&self, members: &Members, counts: BTreeMap<String, usize>, now: Instant) {
        let Some(metrics) = &self.metrics else { return };
        let counts: Vec<(String, usize)> = counts.into_iter().collect();
        observe("objects", || metrics.objects(self.ring.name(), &counts));
        let (mut ready, mut expired, mut dead) = (0, 0, 0);
        for shard in members.shards() {
            match members.state(shard, now) {
                Some(ShardState::Ready) => ready += 1,
                Some(ShardState::Expired) => expired += 1,
                Some(ShardState::Dead) => dead += 1,
                None => {}
            }
        }
        observe("members", || metrics.members(self.ring.name(), ready, expired, dead));
    }

    /// Deletes the Lease of a shard dead long enough, unless it changed since it was read.
    async fn delete_lease(&self, lease: &Lease) {
        super::membership::delete_dead_lease(&self.client, &self.ring, lease).await;
    }
}

/// The sharder as a [`Manager`](crate::manager::Manager)'s runnable: on the leader alone when
/// the manager elects one.
#[async_trait::async_trait]
impl<P> Runnable for Sharder<P>
where
    P: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    PartialObjectMeta<P>:
        InformerObject<DynamicType = ()> + Resource<Scope = NamespaceResourceScope>,
{
    fn name(&self) -> String {
        format!("sharder {}", self.ring.name())
    }

    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        let fence = stop.fence().clone();
        self.run_fenced(stop.into_future(), &fence).await;
        Ok(())
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_drain_live_shards_and_take_from_stopped_ones_at_once() {
        let state = |shard: &str| match shard {
            "ready" => Some(ShardState::Ready),
            "expired" => Some(ShardState::Expired),
            "dead" => Some(ShardState::Dead),
            _ => None,
        };
        let assign = |s: &str| Move::Assign(s.to_owned());
        assert_eq!(decide(None, false, Some("ready"), state), assign("ready"));
        assert_eq!(decide(Some("ready"), false, Some("ready"), state), Move::Stay);
        assert_eq!(decide(Some("ready"), false, Some("other"), state), Move::Drain);
        assert_eq!(decide(Some("ready"), true, Some("other"), state), Move::Stay, "draining");
        for stopped in ["expired", "dead", "unknown"] {
            assert_eq!(decide(Some(stopped), false, Some("ready"), state), assign("ready"));
            assert_eq!(decide(Some(stopped), true, Some("ready"), state), assign("ready"));
        }
        assert_eq!(decide(Some("dead"), false, None, state), Move::Stay, "no ready shard");
        assert_eq!(decide(None, false, None, state), Move::Stay);
    }
}
