//! [`SharedInformerFactory`]: one informer per kind, namespace and selector, shared by every
//! controller and handler that asks for it, and the one owner of their lifetime (client-go's
//! `informers.SharedInformerFactory`, for any kind).
//!
//! Contract:
//! - **Shared**: asking twice for the same kind (the same Rust type), collection (namespace)
//!   and selectors returns the same [`Informer`]: one cache, one list and one watch, however
//!   many controllers and handlers use it. Page size and settings come from the first ask.
//! - **One owner**: only the factory runs its informers. [`start`](SharedInformerFactory::start)
//!   runs every informer asked for so far; informers asked for after `start` run at once (as
//!   controller-runtime's cache does; client-go waits for another `Start`). They all stop when
//!   the `shutdown` given to `start` completes or [`shutdown`](SharedInformerFactory::shutdown)
//!   is called; their stores keep what they held.
//! - **Counted by their users**: the `guarded_*` asks
//!   ([`guarded_informer_for`](SharedInformerFactory::guarded_informer_for) and its kin)
//!   hand each user an [`InformerGuard`]. The factory counts guards, not clones of the
//!   [`Informer`] handle. When the last guard of an informer is dropped (a controller dropped
//!   with its run, a handler's owner gone), the factory forgets the informer, stops its list
//!   and watch (its task ends, its watch connection closes) and empties its store, which is
//!   then marked [stale](crate::cache::Indexer::is_stale): a reader that kept its
//!   [`Indexer`](crate::cache::Indexer) reads an empty store marked stale, never an
//!   old copy. Asked for again, the informer is made afresh and lists anew.
//! - **Guards are for long-lived users**: an informer whose guards all go lists afresh when
//!   asked for again, so a guard asked for per request costs a list each time; a short-lived
//!   reader holds a guard for its own life or reads a pinned informer.
//! - **Pinned**: an informer asked for without a guard ([`informer`](SharedInformerFactory::informer),
//!   [`informer_for`](SharedInformerFactory::informer_for) and their kin, as before guards
//!   existed) has a user that never leaves: it runs until the factory stops, whatever its
//!   guards do.
//! - **Synced**: [`wait_for_cache_sync`](SharedInformerFactory::wait_for_cache_sync) waits for
//!   every started informer's first list and names those that did not make it.
//! - After `shutdown`, the factory starts nothing more (client-go's `Shutdown`).
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Weak};

use futures::FutureExt;
use kube_client::Client;
use kube_client::api::{ApiResource, DynamicObject};
use kube_client::core::PartialObjectMeta;
use kube_client::core::discovery::Scope;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::guard::{GuardedInformer, InformerGuard, ReleaseInformer};
use super::informer::InformerHandle;
use super::list_watch::KindScope;
use super::metrics::InformerMetricsProvider;
use super::sync::{CacheSyncError, wait_for_informers};
use super::{Informer, InformerBuilder, InformerConfig, InformerObject, ListWatch};
use crate::rest_client::RequestLayer;

/// What identifies a shared informer: the Rust type of its objects (so a full and a
/// metadata-only informer of one kind are two), its collection's URL (kind and namespace),
/// and its selectors (a changing shard selector by its name).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct InformerKey {
    object: TypeId,
    url: String,
    labels: Option<String>,
    fields: Option<String>,
    shards: Option<String>,
}

impl InformerKey {
    fn of<K: InformerObject>(lw: &ListWatch<K>) -> Self {
        Self {
            object: TypeId::of::<K>(),
            url: lw.url().to_owned(),
            labels: lw.label_selector().map(str::to_owned),
            fields: lw.field_selector().map(str::to_owned),
            shards: lw.shard_selector_name().map(str::to_owned),
        }
    }
}

struct Entry {
    /// The `Informer<K>`, for typed lookups.
    typed: Box<dyn Any + Send + Sync>,
    handle: Arc<dyn InformerHandle>,
    started: bool,
    /// What its guards name it by: an informer made afresh after a release is another entry,
    /// which the old one's guards never count down.
    id: u64,
    /// Guards handed out and not dropped yet.
    guards: usize,
    /// Asked for without a guard: it runs until the factory stops.
    pinned: bool,
    /// `true` once its last user went: ends its run.
    released: watch::Sender<bool>,
}

impl Entry {
    /// Counts one more user of it.
    fn add_user(&mut self, guarded: bool) {
        match guarded {
            true => self.guards += 1,
            false => self.pinned = true,
        }
    }
}

struct State {
    informers: HashMap<InformerKey, Entry>,
    /// Keys in the order informers were asked for, so starts and reports are stable.
    order: Vec<InformerKey>,
    started: bool,
    shut_down: bool,
    tasks: Vec<JoinHandle<()>>,
    /// The next entry's id.
    next_id: u64,
}

struct Inner {
    client: Client,
    namespace: Option<String>,
    config: InformerConfig,
    informer_metrics: Option<Arc<dyn InformerMetricsProvider>>,
    /// Counts every informer's requests, when a Manager made the factory.
    request_layer: Option<RequestLayer>,
    state: Mutex<State>,
    /// `true` once the factory stops its informers.
    stop: watch::Sender<bool>,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }
}

impl ReleaseInformer for Inner {
    fn release(&self, id: u64) {
        let mut state = self.state();
        let Some(key) = state.informers.iter().find(|(_, e)| e.id == id).map(|(k, _)| k.clone())
        else {
            return;
        };
        let Some(entry) = state.informers.get_mut(&key) else { return };
        entry.guards = entry.guards.saturating_sub(1);
        if entry.guards > 0 || entry.pinned {
            return;
        }
        let Some(entry) = state.informers.remove(&key) else { return };
        state.order.retain(|k| *k != key);
        // Emptied before the lock goes: an informer made afresh for the key (on the same
        // store, if a builder hands one) fills it after. A run still going drops what it
        // learns from now on. The release takes no lock a handler's code may hold, so a
        // guard dropped by a handler, under its informer's processor lock, cannot deadlock
        // with it.
        let released = entry.handle.release_cache();
        entry.released.send_replace(true);
        drop(state);
        if released {
            entry.handle.report_released();
        }
        tracing::debug!(informer = %entry.handle.describe(), "last guard dropped: informer stopped");
    }
}

/// Shared informers and their lifetime (client-go's `SharedInformerFactory`, for any kind).
///
/// - **Shared**: asking twice for the same kind (the same Rust type), collection (namespace)
///   and selectors returns the same [`Informer`]: one cache, one list and one watch, however
///   many controllers and handlers use it. Page size and settings come from the first ask.
/// - **One owner**: only the factory runs its informers. [`start`](Self::start)
///   runs every informer asked for so far; informers asked for after `start` run at once (as
///   controller-runtime's cache does; client-go waits for another `Start`). They all stop when
///   the `shutdown` given to `start` completes or [`shutdown`](Self::shutdown)
///   is called; their stores keep what they held.
/// - **Counted by their users**: the `guarded_*` asks
///   ([`guarded_informer_for`](Self::guarded_informer_for) and its kin)
///   hand each user an [`InformerGuard`]. The factory counts guards, not clones of the
///   [`Informer`] handle. When the last guard of an informer is dropped (a controller dropped
///   with its run, a handler's owner gone), the factory forgets the informer, stops its list
///   and watch (its task ends, its watch connection closes) and empties its store, which is
///   then marked [stale](crate::cache::Indexer::is_stale): a reader that kept its
///   [`Indexer`](crate::cache::Indexer) reads an empty store marked stale, never an
///   old copy. Asked for again, the informer is made afresh and lists anew.
/// - **Guards are for long-lived users**: an informer whose guards all go lists afresh when
///   asked for again, so a guard asked for per request (a webhook call, a short read) costs a
///   list each time. A short-lived reader holds a guard for its own life (taken once, kept
///   beside what it serves) or reads a pinned informer.
/// - **Pinned**: an informer asked for without a guard ([`informer`](Self::informer),
///   [`informer_for`](Self::informer_for) and their kin, as before guards
///   existed) has a user that never leaves: it runs until the factory stops, whatever its
///   guards do.
/// - **Synced**: [`wait_for_cache_sync`](Self::wait_for_cache_sync) waits for
///   every started informer's first list and names those that did not make it.
/// - After `shutdown`, the factory starts nothing more (client-go's `Shutdown`).
///
/// ```no_run
/// # async fn demo(client: kube_client::Client) -> Result<(), ctrlkit::cache::CacheSyncError> {
/// use ctrlkit::cache::SharedInformerFactory;
/// use k8s_openapi::api::core::v1::{ConfigMap, Pod};
///
/// let factory = SharedInformerFactory::new(client);
/// let pods = factory.informer::<Pod>();
/// let configmaps = factory.metadata_informer::<ConfigMap>(); // metadata only
/// factory.start(async { let _ = tokio::signal::ctrl_c().await; });
/// factory.wait_for_cache_sync(std::future::pending()).await?;
/// println!("{} pods, {} configmaps", pods.indexer().len(), configmaps.indexer().len());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SharedInformerFactory {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SharedInformerFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("SharedInformerFactory")
            .field("namespace", &self.inner.namespace)
            .field("informers", &state.order.len())
            .field("started", &state.started)
            .field("shut_down", &state.shut_down)
            .finish()
    }
}

/// Builds a [`SharedInformerFactory`]; see [`SharedInformerFactory::builder`].
pub struct SharedInformerFactoryBuilder {
    client: Client,
    namespace: Option<String>,
    config: InformerConfig,
    informer_metrics: Option<Arc<dyn InformerMetricsProvider>>,
    request_layer: Option<RequestLayer>,
}

impl std::fmt::Debug for SharedInformerFactoryBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedInformerFactoryBuilder")
            .field("namespace", &self.namespace)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl SharedInformerFactoryBuilder {
    /// Limits the typed lookups ([`informer`](SharedInformerFactory::informer),
    /// [`metadata_informer`](SharedInformerFactory::metadata_informer),
    /// [`dynamic_informer`](SharedInformerFactory::dynamic_informer)) of namespaced kinds to
    /// one namespace (client-go's `WithNamespace`). Cluster-scoped kinds are unaffected.
    #[must_use]
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned()).filter(|ns| !ns.is_empty());
        self
    }

    /// The settings every informer of the factory starts from (resync, backoff, streaming
    /// lists, managedFields).
    #[must_use]
    pub fn informer_config(mut self, config: InformerConfig) -> Self {
        self.config = config;
        self
    }

    /// Reports every informer's requests, events and store size to `provider`.
    #[must_use]
    pub fn informer_metrics(mut self, provider: Arc<dyn InformerMetricsProvider>) -> Self {
        self.informer_metrics = Some(provider);
        self
    }

    /// Counts the requests of every informer in `layer`, those of the list-watches it is
    /// given included (a Manager's factory).
    #[must_use]
    pub(crate) fn request_layer(mut self, layer: RequestLayer) -> Self {
        self.request_layer = Some(layer);
        self
    }

    /// The factory.
    pub fn build(self) -> SharedInformerFactory {
        SharedInformerFactory {
            inner: Arc::new(Inner {
                client: self.client,
                namespace: self.namespace,
                config: self.config,
                informer_metrics: self.informer_metrics,
                request_layer: self.request_layer,
                state: Mutex::new(State {
                    informers: HashMap::new(),
                    order: Vec::new(),
                    started: false,
                    shut_down: false,
                    tasks: Vec::new(),
                    next_id: 0,
                }),
                stop: watch::channel(false).0,
            }),
        }
    }
}

impl SharedInformerFactory {
    /// A factory over all namespaces with default informer settings.
    pub fn new(client: Client) -> Self {
        Self::builder(client).build()
    }

    /// A builder for a namespace and the informers' settings.
    pub fn builder(client: Client) -> SharedInformerFactoryBuilder {
        SharedInformerFactoryBuilder {
            client,
            namespace: None,
            config: InformerConfig::default(),
            informer_metrics: None,
            request_layer: None,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state()
    }

    /// The layer counting the informers' requests, when a Manager made the factory.
    pub(crate) fn request_layer(&self) -> Option<&RequestLayer> {
        self.inner.request_layer.as_ref()
    }

    /// The client the informers list and watch with.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The namespace typed lookups are limited to, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.inner.namespace.as_deref()
    }

    /// The shared informer of `K`: in the factory's namespace if `K` is namespaced and the
    /// factory has one, everywhere otherwise. Pinned: it runs until the factory stops (see
    /// [`guarded_informer`](Self::guarded_informer) for one that stops with its users).
    pub fn informer<K>(&self) -> Informer<K>
    where
        K: InformerObject<DynamicType = ()>,
    {
        self.informer_for(self.typed_list_watch::<K>())
    }

    /// What [`informer`](Self::informer) lists and watches.
    fn typed_list_watch<K>(&self) -> ListWatch<K>
    where
        K: InformerObject<DynamicType = ()>,
    {
        let client = self.inner.client.clone();
        ListWatch::for_client(client, &(), self.namespace(), K::Scope::NAMESPACED)
    }

    /// The shared metadata-only informer of `K`: it caches `PartialObjectMeta<K>`, each
    /// object's metadata and nothing else (client-go's metadata informer).
    pub fn metadata_informer<K>(&self) -> Informer<PartialObjectMeta<K>>
    where
        PartialObjectMeta<K>: InformerObject<DynamicType = ()>,
    {
        self.informer::<PartialObjectMeta<K>>()
    }

    /// The shared informer of a kind known at run time, as `DynamicObject`s.
    pub fn dynamic_informer(
        &self,
        resource: &ApiResource,
        scope: Scope,
    ) -> Informer<DynamicObject> {
        let namespaced = Some(scope == Scope::Namespaced);
        self.informer_for(ListWatch::for_client(
            self.inner.client.clone(),
            resource,
            self.namespace(),
            namespaced,
        ))
    }

    /// The shared informer of whatever `list_watch` names (any namespace and selectors),
    /// made with the factory's settings if it is new. Pinned: it runs until the factory stops
    /// (see [`guarded_informer_for`](Self::guarded_informer_for)).
    pub fn informer_for<K: InformerObject>(
        &self,
        list_watch: impl Into<ListWatch<K>>,
    ) -> Informer<K> {
        self.informer_with(list_watch, |builder| builder)
    }

    /// As [`informer_for`](Self::informer_for), with `build` shaping the informer (a
    /// transform, an indexer, its own resync) if it is new: client-go's `InformerFor`. An
    /// informer asked for before keeps the shape it was made with. Pinned: it runs until the
    /// factory stops (see [`guarded_informer_with`](Self::guarded_informer_with)).
    pub fn informer_with<K: InformerObject>(
        &self,
        list_watch: impl Into<ListWatch<K>>,
        build: impl FnOnce(InformerBuilder<K>) -> InformerBuilder<K>,
    ) -> Informer<K> {
        self.ask(list_watch.into(), build, false).0
    }

    /// The shared informer of `K` (as [`informer`](Self::informer)) with a guard of its own:
    /// the informer runs while its guards live, and stops and empties its store when the last
    /// one is dropped, unless someone asked for it without a guard.
    pub fn guarded_informer<K>(&self) -> GuardedInformer<K>
    where
        K: InformerObject<DynamicType = ()>,
    {
        self.guarded_informer_for(self.typed_list_watch::<K>())
    }

    /// The shared informer of whatever `list_watch` names (as
    /// [`informer_for`](Self::informer_for)) with a guard of its own; see
    /// [`guarded_informer`](Self::guarded_informer).
    pub fn guarded_informer_for<K: InformerObject>(
        &self,
        list_watch: impl Into<ListWatch<K>>,
    ) -> GuardedInformer<K> {
        self.guarded_informer_with(list_watch, |builder| builder)
    }

    /// As [`informer_with`](Self::informer_with), with a guard of its own; see
    /// [`guarded_informer`](Self::guarded_informer). This is how a
    /// [`Controller`](crate::controller::Controller) takes each informer it reads: dropping
    /// the controller (and its run) releases them.
    pub fn guarded_informer_with<K: InformerObject>(
        &self,
        list_watch: impl Into<ListWatch<K>>,
        build: impl FnOnce(InformerBuilder<K>) -> InformerBuilder<K>,
    ) -> GuardedInformer<K> {
        let (informer, id) = self.ask(list_watch.into(), build, true);
        let owner: Weak<dyn ReleaseInformer> = Arc::downgrade(&self.inner) as Weak<Inner>;
        let guard = InformerGuard::new(owner, id, informer.list_watch().to_string());
        GuardedInformer::new(informer, guard)
    }

    /// The informer of `list_watch`, made if new, counted one more user (a guard's, or one
    /// that pins it); with its entry's id.
    fn ask<K: InformerObject>(
        &self,
        list_watch: ListWatch<K>,
        build: impl FnOnce(InformerBuilder<K>) -> InformerBuilder<K>,
        guarded: bool,
    ) -> (Informer<K>, u64) {
        let key = InformerKey::of(&list_watch);
        let mut state = self.state();
        if let Some(entry) = state.informers.get_mut(&key) {
            entry.add_user(guarded);
            let informer = entry.typed.downcast_ref::<Informer<K>>();
            return (informer.expect("the key holds the object type").clone(), entry.id);
        }
        // A list-watch the caller made carries the caller's client: counted here too.
        let list_watch = match &self.inner.request_layer {
            Some(layer) => list_watch.instrumented(layer),
            None => list_watch,
        };
        let mut builder = Informer::builder_with(list_watch, self.inner.config.clone());
        if let Some(metrics) = &self.inner.informer_metrics {
            builder = builder.metrics(metrics.clone());
        }
        let informer = build(builder).build();
        tracing::debug!(informer = %informer.list_watch(), "new shared informer");
        let id = state.next_id;
        state.next_id += 1;
        let mut entry = Entry {
            typed: Box::new(informer.clone()),
            handle: Arc::new(informer.clone()),
            started: false,
            id,
            guards: 0,
            pinned: false,
            released: watch::channel(false).0,
        };
        entry.add_user(guarded);
        if state.started && !state.shut_down {
            self.spawn(&mut state.tasks, &mut entry);
        }
        state.order.push(key.clone());
        state.informers.insert(key, entry);
        (informer, id)
    }

    /// Runs `entry`'s informer on a task until the factory stops or its last user goes (the
    /// release empties its store at once, and a released informer does not run).
    fn spawn(&self, tasks: &mut Vec<JoinHandle<()>>, entry: &mut Entry) {
        let mut stop = self.inner.stop.subscribe();
        let mut released = entry.released.subscribe();
        let handle = entry.handle.clone();
        let stopped = async move {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => {}
                _ = released.wait_for(|r| *r) => {}
            }
        };
        // Tasks of informers released meanwhile ended: forget them, or churn grows the list.
        tasks.retain(|task| !task.is_finished());
        tasks.push(tokio::spawn(async move { handle.run_until(stopped.boxed()).await }));
        entry.started = true;
    }

    /// Runs every informer asked for so far, and any asked for later, until `shutdown`
    /// completes or [`shutdown`](Self::shutdown) is called (client-go's `Start`). Returns at
    /// once; calling it again changes nothing but adds another `shutdown` to wait on. Does
    /// nothing after the factory shut down. Needs a tokio runtime.
    pub fn start(&self, shutdown: impl Future<Output = ()> + Send + 'static) {
        let mut state = self.state();
        if state.shut_down {
            tracing::warn!("the informer factory was shut down; it starts nothing more");
            return;
        }
        state.started = true;
        let State { informers, order, tasks, .. } = &mut *state;
        for key in order.iter() {
            let entry = informers.get_mut(key).expect("every ordered key has an entry");
            if !entry.started {
                self.spawn(tasks, entry);
            }
        }
        let stop = self.inner.stop.clone();
        let mut stopped = stop.subscribe();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown => { stop.send_replace(true); }
                _ = stopped.wait_for(|s| *s) => {}
            }
        });
    }

    /// Whether [`start`](Self::start) was called.
    pub fn is_started(&self) -> bool {
        self.state().started
    }

    /// Waits until every informer the factory started has its first list in its store
    /// (client-go's `WaitForCacheSync`). Fails, naming the informers, when `shutdown` completes
    /// first or an informer stops before its sync.
    pub async fn wait_for_cache_sync(
        &self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), CacheSyncError> {
        let handles = self.handles(|entry| entry.started);
        wait_for_informers(&handles, shutdown).await
    }

    /// Every informer asked for, erased, in the order asked.
    fn handles(&self, keep: impl Fn(&Entry) -> bool) -> Vec<Arc<dyn InformerHandle>> {
        let state = self.state();
        state
            .order
            .iter()
            .filter_map(|key| state.informers.get(key))
            .filter(|entry| keep(entry))
            .map(|entry| entry.handle.clone())
            .collect()
    }

    /// What every informer lists and watches, in the order asked for.
    pub fn informers(&self) -> Vec<String> {
        self.handles(|_| true).iter().map(|h| h.describe()).collect()
    }

    /// Stops every informer and waits for them to end (client-go's `Shutdown`). Their stores
    /// keep what they held (until their last guard is dropped). The factory starts nothing
    /// afterwards.
    pub async fn shutdown(&self) {
        let tasks = {
            let mut state = self.state();
            state.shut_down = true;
            std::mem::take(&mut state.tasks)
        };
        self.inner.stop.send_replace(true);
        for task in tasks {
            let _ = task.await;
        }
    }
}
