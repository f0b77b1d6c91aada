//! [`ControllerBuilder`]: a controller over a primary kind, the secondary kinds it owns or
//! watches, external triggers and predicates, wired to shared informers.
//!
//! One path configures each part, and takes the lower layers whole: what to list and watch is
//! a [`ListWatch`] (or an `Api`); the primary informer's settings are a function of its
//! [`InformerBuilder`]; the queue is a [`WorkQueueBuilder`]; informers come from a
//! [`SharedInformerFactory`]; how the controller runs (workers, retries, timeouts, the
//! dropped-key hook, leader election) is a [`Config`], taken whole. Every setting is made
//! here: the [`Controller`] it builds only runs and reports.

use std::sync::Arc;

use futures::stream::{BoxStream, Stream, StreamExt};
use kube_client::ResourceExt;

use super::config::{Config, namespace_fairness, namespace_label};
use super::context::Reasons;
use super::controller::{Controller, Informers, Parts, Source};
use super::metrics::ControllerMetricsProvider;
use super::predicate::Predicate;
use super::shard::ShardMember;
use super::source::{EnqueueHandler, MapFn, Mapper, OwnerKind};
use crate::cache::{
    InformerBuilder, InformerGuard, InformerObject, ListWatch, ObjectKey, SharedInformerFactory,
};
use crate::rest_client::RequestLayer;
use crate::sharding::range_member::RangeMember;
use crate::sharding::{Assignment, Ring, drain_label};
use crate::workqueue::{QueueMetricsProvider, WorkQueue, WorkQueueBuilder};

type ShapeInformer<K> = Box<dyn FnOnce(InformerBuilder<K>) -> InformerBuilder<K> + Send>;

/// Registers one secondary source on the factory's informer, once the queue exists; with the
/// controller's guard on that informer.
type AddSource = Box<dyn FnOnce(&Wiring) -> (Source, InformerGuard) + Send>;

/// What a secondary source is wired with when the controller is built.
struct Wiring {
    factory: SharedInformerFactory,
    queue: WorkQueue<ObjectKey>,
    owner: OwnerKind,
    prioritize: bool,
    shard: Option<Arc<ShardMember>>,
    reasons: Reasons,
}

/// Builds a [`Controller`]; see [`Controller::builder`].
///
/// `M` is where the controller goes once built: nowhere (`()`, the default: [`build`]
/// returns it, to [`run`](Controller::run) it yourself), or a manager, for builders that
/// [`Manager::controller`](crate::manager::Manager::controller) hands out, which end in
/// [`complete`](ControllerBuilder::complete) with the reconciler (or in a `build` that
/// returns a [`ManagedController`](crate::manager::ManagedController), the one built
/// controller the manager's `add_controller` takes).
///
/// [`build`]: ControllerBuilder::build
pub struct ControllerBuilder<K, M = ()> {
    target: M,
    spec: Spec<K>,
}

/// Everything a builder holds but its target.
struct Spec<K> {
    primary: ListWatch<K>,
    name: Option<String>,
    factory: Option<SharedInformerFactory>,
    informer: Option<ShapeInformer<K>>,
    queue: Option<WorkQueueBuilder<ObjectKey>>,
    predicate: Option<Predicate<K>>,
    sources: Vec<AddSource>,
    triggers: Vec<BoxStream<'static, ObjectKey>>,
    prioritize: bool,
    config: Config,
    metrics: Option<Arc<dyn ControllerMetricsProvider>>,
    /// The queue's metrics unless its builder has its own: a manager's registry, set by the
    /// manager that binds the builder.
    queue_metrics: Option<Arc<dyn QueueMetricsProvider>>,
    shard: Option<(Ring, String)>,
}

impl<K, M> std::fmt::Debug for ControllerBuilder<K, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerBuilder")
            .field("primary", &self.spec.primary)
            .field("name", &self.spec.name)
            .field("shared_factory", &self.spec.factory.is_some())
            .field("secondary_sources", &self.spec.sources.len())
            .field("triggers", &self.spec.triggers.len())
            .field("prioritize", &self.spec.prioritize)
            .field("config", &self.spec.config)
            .field("metrics", &self.spec.metrics.is_some())
            .field("shard", &self.spec.shard)
            .finish_non_exhaustive()
    }
}

impl<K: InformerObject> Controller<K> {
    /// A controller of the objects `primary` lists and watches (an `Api<K>`, or a
    /// [`ListWatch`] with selectors): `Controller::builder(api).owns(pods).build()`.
    pub fn builder(primary: impl Into<ListWatch<K>>) -> ControllerBuilder<K> {
        ControllerBuilder {
            target: (),
            spec: Spec {
                primary: primary.into(),
                name: None,
                factory: None,
                informer: None,
                queue: None,
                predicate: None,
                sources: Vec::new(),
                triggers: Vec::new(),
                prioritize: true,
                config: Config::default(),
                metrics: None,
                queue_metrics: None,
                shard: None,
            },
        }
    }
}

impl<K: InformerObject> ControllerBuilder<K> {
    /// The controller, its handlers registered on the informers; run it with
    /// [`Controller::run`]. A manager does not take it: build with the builder the manager
    /// hands out ([`Manager::controller`](crate::manager::Manager::controller)) for that.
    pub fn build(self) -> Controller<K> {
        self.build_controller()
    }

    /// Takes informers from `factory`, shared with every other user of it; the factory's
    /// owner starts them, and stops them when it stops or when their last user (this
    /// controller among them: it holds an [`InformerGuard`] on each) is dropped. Without it,
    /// the controller makes a factory of its own and runs it for as long as it runs.
    ///
    /// Only a builder of its own ([`Controller::builder`]) takes a factory: one a manager
    /// hands out reads the manager's, the informers the manager starts, and no other.
    #[must_use]
    pub fn factory(mut self, factory: &SharedInformerFactory) -> Self {
        self.spec.factory = Some(factory.clone());
        self
    }
}

/// A user's mapper, returning any collection of keys, as the handlers call it.
fn map_fn<S, I>(mapper: impl Fn(&S) -> I + Send + Sync + 'static) -> MapFn<S>
where
    I: IntoIterator<Item = ObjectKey>,
{
    std::sync::Arc::new(move |o: &S| mapper(o).into_iter().collect())
}

impl<K: InformerObject, M> ControllerBuilder<K, M> {
    /// The same builder sending its controller to `target` instead, and the target it had
    /// (a manager binds its builders this way).
    pub(crate) fn retarget<T>(self, target: T) -> (M, ControllerBuilder<K, T>) {
        (self.target, ControllerBuilder { target, spec: self.spec })
    }

    /// Names the controller, for its logs and its queue (default: the primary kind's
    /// plural, as `configmapsets`).
    #[must_use]
    pub fn name(mut self, name: &str) -> Self {
        self.spec.name = Some(name.to_owned());
        self
    }

    /// How the controller runs: workers, retries, timeouts, the dropped-key hook, leader
    /// election (default: [`Config::default()`]). Taken whole; a second call replaces the
    /// first.
    #[must_use]
    pub fn config(mut self, config: Config) -> Self {
        self.spec.config = config;
        self
    }

    /// Makes the controller shard `shard` of `ring` (see [`crate::sharding`]). In a ring of
    /// [`Assignment::Labels`] its primary and owned informers hold only the objects the
    /// ring's sharder labelled to this shard, it gives up the objects the sharder drains
    /// (after any reconcile of theirs here has finished), and an object that moved to
    /// another shard is not mistaken for a deleted one; events that mark an object for
    /// draining pass whatever the predicates say. In a ring of
    /// [`Assignment::ShardSelectors`] its primary informer lists and watches the hash ranges
    /// the ring gives this shard, which it takes and gives up as the ring changes, fenced by
    /// the shards' Leases; owned informers are not split. Either way the shard's Lease is
    /// held elsewhere ([`ShardLease`](crate::sharding::ShardLease), or
    /// [`ManagerBuilder::sharding`](crate::manager::ManagerBuilder::sharding)).
    #[must_use]
    pub fn shard(mut self, ring: &Ring, shard: &str) -> Self {
        self.spec.shard = Some((ring.clone(), shard.to_owned()));
        self
    }

    /// Undoes [`shard`](Self::shard): the controller sees every object (a sharded
    /// [`Manager`](crate::manager::Manager)'s builders are sharded; this one then runs on the
    /// leader alone, if the manager elects one).
    #[must_use]
    pub fn unsharded(mut self) -> Self {
        self.spec.shard = None;
        self
    }

    /// Reports reconciles, errors, panics, timeouts, dropped keys and workers to `provider`
    /// (a [`Manager`](crate::manager::Manager) with metrics sets its registry on the builders
    /// [`Manager::controller`](crate::manager::Manager::controller) hands out).
    #[must_use]
    pub fn metrics(mut self, provider: Arc<dyn ControllerMetricsProvider>) -> Self {
        self.spec.metrics = Some(provider);
        self
    }

    /// Reports the queue to `provider` unless [`queue`](Self::queue) was given a builder
    /// with metrics of its own (a manager with metrics binds its builders so).
    #[cfg(feature = "metrics")]
    #[must_use]
    pub(crate) fn default_queue_metrics(mut self, provider: Arc<dyn QueueMetricsProvider>) -> Self {
        self.spec.queue_metrics = Some(provider);
        self
    }

    /// Shapes the primary informer (a transform, an indexer with indexes, a resync, a
    /// backoff) when the factory makes it; an informer the factory already had keeps its
    /// shape.
    #[must_use]
    pub fn informer(
        mut self,
        shape: impl FnOnce(InformerBuilder<K>) -> InformerBuilder<K> + Send + 'static,
    ) -> Self {
        self.spec.informer = Some(Box::new(shape));
        self
    }

    /// The queue (its rate limiter, its metrics, its fairness). Default: client-go's default
    /// controller rate limiter, no metrics (a manager's registry, for builders a manager
    /// hands out), named after the controller, fair by namespace unless
    /// [`Config::fair_queue`] says otherwise.
    #[must_use]
    pub fn queue(mut self, queue: WorkQueueBuilder<ObjectKey>) -> Self {
        self.spec.queue = Some(queue);
        self
    }

    /// Whether keys of unchanged objects (the initial list, resyncs) go in at
    /// [`Priority::LOW`](crate::workqueue::Priority::LOW), behind real changes (default: yes,
    /// as controller-runtime's default priority queue). With `false` every key goes in at
    /// `NORMAL` and the queue is plain FIFO. Either way the queue's aging bounds the wait of
    /// low-priority keys, and a reconciler can still requeue at a priority of its choice.
    #[must_use]
    pub fn use_priority_queue(mut self, prioritize: bool) -> Self {
        self.spec.prioritize = prioritize;
        self
    }

    /// Enqueues a primary object's event only if `predicate` passes it. Several calls combine
    /// with `and`.
    #[must_use]
    pub fn predicate(mut self, predicate: Predicate<K>) -> Self {
        self.spec.predicate = Some(match self.spec.predicate.take() {
            Some(previous) => previous.and(predicate),
            None => predicate,
        });
        self
    }

    /// Reconciles an owner when an object it controls changes or goes: objects of `owned`
    /// whose `ownerReferences` name a controller (`controller: true`) of the primary kind
    /// enqueue that owner's key (controller-runtime's `Owns`).
    ///
    /// The owned objects are cached by the factory's informer for `owned`, so a reconciler
    /// reads them from there, not from the server: hand it
    /// `factory.guarded_informer_for(owned.clone())` (the same informer, whichever asks
    /// first; its guard keeps it running for the reconciler, and dropped with it lets the
    /// informer stop once the controller is gone too), and add an index by owner to find an
    /// owner's objects without a scan, as `examples/configmap_sets/` does. The controller
    /// holds a guard on every informer it reads; dropping it (and its run) drops them.
    #[must_use]
    pub fn owns<S: InformerObject>(self, owned: impl Into<ListWatch<S>>) -> Self {
        self.add_source(owned.into(), None, None)
    }

    /// As [`owns`](Self::owns), enqueuing only the events of owned objects that pass
    /// `predicate`.
    #[must_use]
    pub fn owns_with<S: InformerObject>(
        self,
        owned: impl Into<ListWatch<S>>,
        predicate: Predicate<S>,
    ) -> Self {
        self.add_source(owned.into(), Some(predicate), None)
    }

    /// Reconciles the keys `mapper` returns for each changed object of `watched` (for an
    /// update, the keys of the old and the new object, each once): controller-runtime's
    /// `Watches` with `EnqueueRequestsFromMapFunc`, kube-runtime's `watches`.
    #[must_use]
    pub fn watches<S, I>(
        self,
        watched: impl Into<ListWatch<S>>,
        mapper: impl Fn(&S) -> I + Send + Sync + 'static,
    ) -> Self
    where
        S: InformerObject,
        I: IntoIterator<Item = ObjectKey>,
    {
        self.add_source(watched.into(), None, Some(map_fn(mapper)))
    }

    /// As [`watches`](Self::watches), mapping only the events that pass `predicate`.
    #[must_use]
    pub fn watches_with<S, I>(
        self,
        watched: impl Into<ListWatch<S>>,
        predicate: Predicate<S>,
        mapper: impl Fn(&S) -> I + Send + Sync + 'static,
    ) -> Self
    where
        S: InformerObject,
        I: IntoIterator<Item = ObjectKey>,
    {
        self.add_source(watched.into(), Some(predicate), Some(map_fn(mapper)))
    }

    /// Reconciles every key `trigger` yields, from the start of `run` until the stream ends
    /// (a webhook, a timer, a message queue: kube-runtime's `reconcile_on`). A channel's
    /// receiver is a stream: `futures::channel::mpsc::unbounded()`.
    #[must_use]
    pub fn trigger(mut self, trigger: impl Stream<Item = ObjectKey> + Send + 'static) -> Self {
        self.spec.triggers.push(trigger.boxed());
        self
    }

    fn add_source<S: InformerObject>(
        mut self,
        list_watch: ListWatch<S>,
        predicate: Option<Predicate<S>>,
        map: Option<MapFn<S>>,
    ) -> Self {
        self.spec.sources.push(Box::new(move |wiring: &Wiring| {
            // Owned objects carry their owner's shard label; watched ones carry none.
            let list_watch = match (&wiring.shard, &map) {
                (Some(shard), None) if shard.is_labelled() => {
                    let selector = shard.and_selector(list_watch.label_selector());
                    list_watch.labels(&selector)
                }
                _ => list_watch,
            };
            let (informer, guard) = wiring.factory.guarded_informer_for(list_watch).into_parts();
            let mapper = match map {
                Some(map) => Mapper::Map(map),
                None => Mapper::Owner(wiring.owner.clone()),
            };
            let (queue, prioritize, reasons) =
                (wiring.queue.clone(), wiring.prioritize, wiring.reasons.clone());
            let kind = Arc::from(""); // the informer's, set at registration
            let handler = EnqueueHandler { queue, predicate, mapper, prioritize, reasons, kind };
            (Source::register(&informer, handler), guard)
        }));
        self
    }

    /// The name the controller claims in a manager, read before it is built (a refused
    /// duplicate builds nothing); `None` where [`Config::skip_name_validation`] opts out.
    pub(crate) fn unique_name(&self) -> Option<String> {
        let spec = &self.spec;
        let name =
            || spec.name.clone().unwrap_or_else(|| spec.primary.api_resource().plural.clone());
        (!spec.config.skip_name_validation).then(name)
    }

    /// The controller, its handlers registered on the informers, whatever the target: each
    /// target's `build` (a manager's wraps it) and `complete` end here.
    pub(crate) fn build_controller(mut self) -> Controller<K> {
        let resource = self.spec.primary.api_resource().clone();
        let name = self.spec.name.unwrap_or_else(|| resource.plural.clone());
        let (factory, informers) = match self.spec.factory {
            Some(factory) => (factory, Informers::Shared),
            None => {
                let factory = SharedInformerFactory::new(self.spec.primary.client().clone());
                (factory.clone(), Informers::OwnFactory(factory))
            }
        };
        // The primary's client (which the shard member reads Leases and objects with) is
        // counted by its Manager's request layer, as the factory counts the informers'.
        let layer = factory.request_layer();
        if let Some(layer) = layer {
            self.spec.primary = self.spec.primary.instrumented(layer);
        }
        let pressure = layer.map(RequestLayer::pressure);
        let shard = self.spec.shard.take().map(|(ring, id)| {
            let client = self.spec.primary.client().clone();
            let member = ShardMember::new(&ring, &id, client.clone(), resource.clone());
            if ring.assignment_mode() == Assignment::ShardSelectors {
                let url = self.spec.primary.url();
                let ranges = RangeMember::new(&ring, &id, &name, client, &factory, url);
                let (selector, current) = ranges.selector();
                self.spec.primary = self.spec.primary.clone().shards_from(selector, current);
                return Arc::new(member.with_ranges(Arc::new(ranges)));
            }
            let selector = member.and_selector(self.spec.primary.label_selector());
            self.spec.primary = self.spec.primary.clone().labels(&selector);
            // A drain mark must reach the worker, whatever the user's predicates filter.
            let drain = drain_label(ring.name());
            let marked = Predicate::on_update(move |old: &K, new: &K| {
                new.labels().contains_key(&drain) && !old.labels().contains_key(&drain)
            });
            self.spec.predicate = self.spec.predicate.take().map(|p| p.or(marked));
            Arc::new(member)
        });
        let owner = OwnerKind {
            group: resource.group.clone(),
            kind: resource.kind.clone(),
            namespaced: self.spec.primary.namespaced(),
        };
        let mut queue = self.spec.queue.unwrap_or_else(WorkQueue::builder);
        if !queue.has_name() {
            queue = queue.name(&name);
        }
        if let Some(metrics) = self.spec.queue_metrics.filter(|_| !queue.has_metrics()) {
            queue = queue.metrics(metrics);
        }
        if self.spec.config.fair_queue {
            queue = queue.fairness_by_default(namespace_fairness, namespace_label);
        }
        let queue = queue.build();
        let shape = self.spec.informer.unwrap_or_else(|| Box::new(|b| b));
        let (informer, guard) =
            factory.guarded_informer_with(self.spec.primary, shape).into_parts();
        let mut guards = vec![guard];
        if let Some(ranges) = shard.as_ref().and_then(|s| s.ranges()) {
            ranges.watch_deletes(&informer);
            ranges.queue_taken(informer.indexer(), queue.clone());
        }
        let reasons = Reasons::default();
        let primary = EnqueueHandler {
            queue: queue.clone(),
            predicate: self.spec.predicate,
            mapper: Mapper::Own,
            prioritize: self.spec.prioritize,
            reasons: reasons.clone(),
            kind: Arc::from(""),
        };
        let mut sources = vec![Source::register(&informer, primary)];
        let wiring = Wiring {
            factory: factory.clone(),
            queue: queue.clone(),
            owner,
            prioritize: self.spec.prioritize,
            shard: shard.clone(),
            reasons: reasons.clone(),
        };
        for add in self.spec.sources {
            let (source, guard) = add(&wiring);
            sources.push(source);
            guards.push(guard);
        }
        let secondary = sources[1..].iter().map(|s| s.informer.clone()).collect();
        let mut controller = Controller::from_parts(Parts {
            name,
            queue,
            informer,
            secondary,
            informers,
            sources,
            triggers: self.spec.triggers,
            config: self.spec.config,
            shard,
            guards,
            reasons,
            pressure,
        });
        controller.metrics = self.spec.metrics.map(|p| p.new_controller_metrics(&controller.name));
        controller
    }
}
