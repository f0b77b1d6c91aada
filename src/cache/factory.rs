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
//!   is called, never because a controller using them stopped.
//! - **Synced**: [`wait_for_cache_sync`](SharedInformerFactory::wait_for_cache_sync) waits for
//!   every started informer's first list and names those that did not make it.
//! - After `shutdown`, the factory starts nothing more (client-go's `Shutdown`).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::FutureExt;
use kube_client::Client;
use kube_client::api::{ApiResource, DynamicObject};
use kube_client::core::PartialObjectMeta;
use kube_client::core::discovery::Scope;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::informer::InformerHandle;
use super::list_watch::KindScope;
use super::metrics::InformerMetricsProvider;
use super::sync::{CacheSyncError, wait_for_informers};
use super::{Informer, InformerBuilder, InformerConfig, InformerObject, ListWatch};
use crate::workqueue::QueueMetricsProvider;

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
}

struct State {
    informers: HashMap<InformerKey, Entry>,
    /// Keys in the order informers were asked for, so starts and reports are stable.
    order: Vec<InformerKey>,
    started: bool,
    shut_down: bool,
    tasks: Vec<JoinHandle<()>>,
}

struct Inner {
    client: Client,
    namespace: Option<String>,
    config: InformerConfig,
    informer_metrics: Option<Arc<dyn InformerMetricsProvider>>,
    queue_metrics: Option<Arc<dyn QueueMetricsProvider>>,
    state: Mutex<State>,
    /// `true` once the factory stops its informers.
    stop: watch::Sender<bool>,
}

/// Shared informers and their lifetime (client-go's `SharedInformerFactory`, for any kind).
///
/// - **Shared**: asking twice for the same kind (the same Rust type), collection (namespace)
///   and selectors returns the same [`Informer`]: one cache, one list and one watch, however
///   many controllers and handlers use it. Page size and settings come from the first ask.
/// - **One owner**: only the factory runs its informers. [`start`](Self::start) runs every
///   informer asked for so far; informers asked for after `start` run at once (as
///   controller-runtime's cache does; client-go waits for another `Start`). They all stop
///   when the `shutdown` given to `start` completes or [`shutdown`](Self::shutdown) is called,
///   never because a controller using them stopped.
/// - **Synced**: [`wait_for_cache_sync`](Self::wait_for_cache_sync) waits for every started
///   informer's first list and names those that did not make it.
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
    queue_metrics: Option<Arc<dyn QueueMetricsProvider>>,
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

    /// The metrics of the work queues of controllers built on this factory (unless their
    /// queue builder has its own), so that a manager's registry reaches them.
    #[must_use]
    pub fn queue_metrics(mut self, provider: Arc<dyn QueueMetricsProvider>) -> Self {
        self.queue_metrics = Some(provider);
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
                queue_metrics: self.queue_metrics,
                state: Mutex::new(State {
                    informers: HashMap::new(),
                    order: Vec::new(),
                    started: false,
                    shut_down: false,
                    tasks: Vec::new(),
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
            queue_metrics: None,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The client the informers list and watch with.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The work-queue metrics controllers built on this factory use, if any.
    pub fn queue_metrics(&self) -> Option<Arc<dyn QueueMetricsProvider>> {
        self.inner.queue_metrics.clone()
    }

    /// The namespace typed lookups are limited to, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.inner.namespace.as_deref()
    }

    /// The shared informer of `K`: in the factory's namespace if `K` is namespaced and the
    /// factory has one, everywhere otherwise.
    pub fn informer<K>(&self) -> Informer<K>
    where
        K: InformerObject<DynamicType = ()>,
    {
        self.informer_for(ListWatch::for_client(
            self.inner.client.clone(),
            &(),
            self.namespace(),
            K::Scope::NAMESPACED,
        ))
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
    /// made with the factory's settings if it is new.
    pub fn informer_for<K: InformerObject>(
        &self,
        list_watch: impl Into<ListWatch<K>>,
    ) -> Informer<K> {
        self.informer_with(list_watch, |builder| builder)
    }

    /// As [`informer_for`](Self::informer_for), with `build` shaping the informer (a
    /// transform, an indexer, its own resync) if it is new: client-go's `InformerFor`. An
    /// informer asked for before keeps the shape it was made with.
    pub fn informer_with<K: InformerObject>(
        &self,
        list_watch: impl Into<ListWatch<K>>,
        build: impl FnOnce(InformerBuilder<K>) -> InformerBuilder<K>,
    ) -> Informer<K> {
        let list_watch = list_watch.into();
        let key = InformerKey::of(&list_watch);
        let mut state = self.state();
        if let Some(entry) = state.informers.get(&key) {
            return entry
                .typed
                .downcast_ref::<Informer<K>>()
                .expect("the key holds the object type")
                .clone();
        }
        let mut builder = Informer::builder(list_watch).config(self.inner.config.clone());
        if let Some(metrics) = &self.inner.informer_metrics {
            builder = builder.metrics(metrics.clone());
        }
        let informer = build(builder).build();
        tracing::debug!(informer = %informer.list_watch(), "new shared informer");
        let handle: Arc<dyn InformerHandle> = Arc::new(informer.clone());
        let mut entry = Entry { typed: Box::new(informer.clone()), handle, started: false };
        if state.started && !state.shut_down {
            self.spawn(&mut state.tasks, &mut entry);
        }
        state.order.push(key.clone());
        state.informers.insert(key, entry);
        informer
    }

    fn spawn(&self, tasks: &mut Vec<JoinHandle<()>>, entry: &mut Entry) {
        let mut stop = self.inner.stop.subscribe();
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        tasks.push(tokio::spawn(entry.handle.run_until(stopped.boxed())));
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
    /// keep what they held. The factory starts nothing afterwards.
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
