//! [`ControllerBuilder`]: the common case wired in one expression: an informer over an
//! `Api<K>`, a queue, the standard key-enqueuing handler, and the workers.

use std::future::Future;
use std::time::Duration;

use kube_client::Api;

use super::controller::{Controller, ControllerError, DroppedHook, ReconcileFailure};
use super::reconciler::Reconciler;
use crate::cache::{
    BackoffConfig, Informer, InformerObject, ListWatch, ObjectKey, ResourceEventHandlerFuncs,
    deletion_handling_meta_namespace_key_func, meta_namespace_key_func,
};
use crate::workqueue::{RateLimiter, WorkQueue};

/// The seed's handler funcs: every add, update and delete puts the object's key in `queue`.
pub fn enqueue_handler<K: InformerObject>(
    queue: WorkQueue<ObjectKey>,
) -> ResourceEventHandlerFuncs<K> {
    let (q1, q2, q3) = (queue.clone(), queue.clone(), queue);
    ResourceEventHandlerFuncs::new()
        .on_add(move |o: &std::sync::Arc<K>| {
            if let Ok(key) = meta_namespace_key_func(o.as_ref()) {
                q1.add(key);
            }
        })
        .on_update(move |_, new: &std::sync::Arc<K>| {
            if let Ok(key) = meta_namespace_key_func(new.as_ref()) {
                q2.add(key);
            }
        })
        .on_delete(move |deleted| {
            // Tombstones carry their key: client-go's DeletionHandlingMetaNamespaceKeyFunc.
            if let Ok(key) = deletion_handling_meta_namespace_key_func(deleted) {
                q3.add(key);
            }
        })
}

/// Builds a [`Controller`] over an `Api<K>`; see [`Controller::builder`].
pub struct ControllerBuilder<K> {
    list_watch: ListWatch<K>,
    workers: usize,
    max_retries: u32,
    resync: Option<Duration>,
    backoff: Option<BackoffConfig>,
    streaming_list: bool,
    transform: Option<Box<dyn Fn(K) -> K + Send + Sync>>,
    rate_limiter: Option<Box<dyn RateLimiter<ObjectKey>>>,
    name: String,
    on_dropped: Option<DroppedHook>,
}

impl<K: InformerObject> Controller<K> {
    /// A builder for the common case: `Controller::builder(api).workers(2).run(reconciler,
    /// shutdown)`.
    pub fn builder(api: Api<K>) -> ControllerBuilder<K> {
        ControllerBuilder {
            list_watch: ListWatch::new(api),
            workers: 1,
            max_retries: 5,
            resync: None,
            backoff: None,
            streaming_list: false,
            transform: None,
            rate_limiter: None,
            name: String::new(),
            on_dropped: None,
        }
    }
}

impl<K: InformerObject> ControllerBuilder<K> {
    /// Worker tasks (default 1).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Retries before a failing key is dropped (default 5).
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// Only objects matching a label selector.
    pub fn labels(mut self, selector: &str) -> Self {
        self.list_watch = self.list_watch.labels(selector);
        self
    }

    /// Only objects matching a field selector.
    pub fn fields(mut self, selector: &str) -> Self {
        self.list_watch = self.list_watch.fields(selector);
        self
    }

    /// List page size (default 500).
    pub fn page_size(mut self, page_size: u32) -> Self {
        self.list_watch = self.list_watch.page_size(page_size);
        self
    }

    /// Reconcile every cached object again every `period`.
    pub fn resync(mut self, period: Duration) -> Self {
        self.resync = Some(period);
        self
    }

    /// The informer's backoff after failures.
    pub fn backoff(mut self, backoff: BackoffConfig) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Build the cache from a streaming list where the server allows it.
    pub fn streaming_list(mut self, on: bool) -> Self {
        self.streaming_list = on;
        self
    }

    /// Transform objects before they are cached.
    pub fn transform(mut self, f: impl Fn(K) -> K + Send + Sync + 'static) -> Self {
        self.transform = Some(Box::new(f));
        self
    }

    /// The queue's rate limiter (default: client-go's default controller rate limiter).
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<ObjectKey> + 'static) -> Self {
        self.rate_limiter = Some(Box::new(limiter));
        self
    }

    /// The queue's name, for metrics.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Called for each key dropped after its last retry.
    pub fn on_dropped(
        mut self,
        hook: impl Fn(&ObjectKey, &ReconcileFailure) + Send + Sync + 'static,
    ) -> Self {
        self.on_dropped = Some(std::sync::Arc::new(hook));
        self
    }

    /// The controller, its informer wired to its queue; run it with [`Controller::run`].
    pub fn build(self) -> (Controller<K>, usize) {
        let mut informer = Informer::builder(self.list_watch).streaming_list(self.streaming_list);
        if let Some(period) = self.resync {
            informer = informer.resync(period);
        }
        if let Some(backoff) = self.backoff {
            informer = informer.backoff(backoff);
        }
        if let Some(transform) = self.transform {
            informer = informer.transform(transform);
        }
        let informer = informer.build();
        let mut queue = WorkQueue::builder().name(&self.name);
        if let Some(limiter) = self.rate_limiter {
            queue = queue.rate_limiter(limiter);
        }
        let queue = queue.build();
        informer.add_event_handler(enqueue_handler(queue.clone()));
        let mut controller =
            Controller::new(queue, informer.indexer(), informer).max_retries(self.max_retries);
        if let Some(hook) = self.on_dropped {
            controller = controller.on_dropped(move |key, failure| hook(key, failure));
        }
        (controller, self.workers)
    }

    /// Builds the controller and runs it until `shutdown` completes.
    pub async fn run<R>(
        self,
        reconciler: R,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ControllerError>
    where
        R: Reconciler<Object = K>,
    {
        let (controller, workers) = self.build();
        controller.run(reconciler, workers, shutdown).await
    }
}
