//! [`Controller`]: the seed article's `Run`, `runWorker`, `processNextItem` and `handleErr`.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::FutureExt;
use tokio::sync::watch;

use super::reconciler::Reconciler;
use crate::cache::{
    Indexer, Informer, InformerObject, ObjectKey, panic_message, wait_for_cache_sync,
};
use crate::workqueue::WorkQueue;

/// Why a controller stopped without running.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControllerError {
    /// Shut down before the informer's first list reached the cache.
    #[error(
        "timed out waiting for caches to sync: shut down before the informer's first list completed"
    )]
    CacheSync,
}

/// Why a key was given up on, as the `on_dropped` hook receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReconcileFailure {
    /// The reconciler returned this error (as text).
    Error(String),
    /// The reconciler panicked with this message.
    Panic(String),
}

impl std::fmt::Display for ReconcileFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Error(e) => write!(f, "{e}"),
            Self::Panic(p) => write!(f, "reconcile panicked: {p}"),
        }
    }
}

/// Called for each key dropped after its last retry.
pub type DroppedHook = Arc<dyn Fn(&ObjectKey, &ReconcileFailure) + Send + Sync>;

/// Counts of what the workers did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ControllerStats {
    /// Reconciles that returned `Ok`.
    pub succeeded: u64,
    /// Reconciles that returned `Err`.
    pub failed: u64,
    /// Reconciles that panicked (caught).
    pub panicked: u64,
    /// Keys given up on after the last retry.
    pub dropped: u64,
}

#[derive(Default)]
struct Counters {
    succeeded: AtomicU64,
    failed: AtomicU64,
    panicked: AtomicU64,
    dropped: AtomicU64,
}

/// Runs workers that take keys from a queue and reconcile them; see the [module docs](super).
pub struct Controller<K> {
    queue: WorkQueue<ObjectKey>,
    indexer: Indexer<K>,
    informer: Informer<K>,
    max_retries: u32,
    on_dropped: Option<DroppedHook>,
    counters: Arc<Counters>,
}

impl<K> Clone for Controller<K> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            indexer: self.indexer.clone(),
            informer: self.informer.clone(),
            max_retries: self.max_retries,
            on_dropped: self.on_dropped.clone(),
            counters: self.counters.clone(),
        }
    }
}

impl<K> std::fmt::Debug for Controller<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller").field("max_retries", &self.max_retries).finish_non_exhaustive()
    }
}

impl<K: InformerObject> Controller<K> {
    /// The seed's `NewController(queue, indexer, informer)`: the caller wired the informer's
    /// handlers to put keys in `queue`.
    pub fn new(queue: WorkQueue<ObjectKey>, indexer: Indexer<K>, informer: Informer<K>) -> Self {
        Self {
            queue,
            indexer,
            informer,
            max_retries: 5,
            on_dropped: None,
            counters: Arc::default(),
        }
    }

    /// How many times a failing key is retried before it is dropped (default 5, as the seed).
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// Called for each key dropped after its last retry, besides the error log.
    pub fn on_dropped(
        mut self,
        hook: impl Fn(&ObjectKey, &ReconcileFailure) + Send + Sync + 'static,
    ) -> Self {
        self.on_dropped = Some(Arc::new(hook));
        self
    }

    /// What the workers did so far.
    pub fn stats(&self) -> ControllerStats {
        let c = &self.counters;
        ControllerStats {
            succeeded: c.succeeded.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            panicked: c.panicked.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
        }
    }

    /// The seed's `Run`: starts the informer (unless it runs already), waits for its cache to
    /// sync, runs `workers` workers until `shutdown` completes, then stops taking keys, lets
    /// the reconciles in flight finish, and shuts the queue down.
    pub async fn run<R>(
        &self,
        reconciler: R,
        workers: usize,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ControllerError>
    where
        R: Reconciler<Object = K>,
    {
        let (stop_tx, stop_rx) = watch::channel(false);
        let stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        tracing::info!("starting controller");
        let informer_task = (!self.informer.is_running()).then(|| {
            let informer = self.informer.clone();
            let rx = stop_rx.clone();
            tokio::spawn(async move { informer.run(stopped(rx)).await })
        });
        tokio::pin!(shutdown);
        let informers: [&dyn crate::cache::HasSynced; 1] = [&self.informer];
        let synced = tokio::select! {
            synced = wait_for_cache_sync(&informers, stopped(stop_rx.clone())) => synced,
            _ = &mut shutdown => false,
        };
        if !synced {
            let _ = stop_tx.send(true);
            self.queue.shut_down();
            tracing::error!("timed out waiting for caches to sync");
            return Err(ControllerError::CacheSync);
        }
        let reconciler = Arc::new(reconciler);
        let handles: Vec<_> = (0..workers.max(1))
            .map(|_| {
                let (this, reconciler, rx) = (self.clone(), reconciler.clone(), stop_rx.clone());
                tokio::spawn(async move { this.run_worker(reconciler, rx).await })
            })
            .collect();
        shutdown.await;
        tracing::info!("stopping controller");
        let _ = stop_tx.send(true);
        for handle in handles {
            let _ = handle.await;
        }
        self.queue.shut_down();
        if let Some(task) = informer_task {
            let _ = task.await;
        }
        Ok(())
    }

    /// The seed's `runWorker`: process keys until shut down.
    async fn run_worker<R: Reconciler<Object = K>>(
        &self,
        reconciler: Arc<R>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let key = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                key = self.queue.get() => match key {
                    Some(key) => key,
                    None => return,
                },
            };
            self.process_item(reconciler.as_ref(), key).await;
        }
    }

    /// The seed's `processNextItem` after `Get`: reconcile, handle the outcome, `Done`.
    async fn process_item<R: Reconciler<Object = K>>(&self, reconciler: &R, key: ObjectKey) {
        let object = self.indexer.get(&key);
        let outcome = AssertUnwindSafe(reconciler.reconcile(&key, object)).catch_unwind().await;
        match outcome {
            Ok(Ok(action)) => {
                self.counters.succeeded.fetch_add(1, Ordering::Relaxed);
                self.queue.forget(&key);
                if let Some(delay) = action.requeue_delay() {
                    self.queue.add_after(key.clone(), delay);
                }
            }
            Ok(Err(err)) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                self.handle_err(&key, ReconcileFailure::Error(err.to_string()));
            }
            Err(panic) => {
                self.counters.panicked.fetch_add(1, Ordering::Relaxed);
                let message = panic_message(&panic);
                tracing::error!(%key, panic = %message, "reconcile panicked");
                self.handle_err(&key, ReconcileFailure::Panic(message));
            }
        }
        self.queue.done(&key);
    }

    /// The seed's `handleErr`: retry with the rate limiter up to `max_retries`, then drop.
    fn handle_err(&self, key: &ObjectKey, failure: ReconcileFailure) {
        let attempt = self.queue.num_requeues(key);
        if attempt < self.max_retries {
            tracing::info!(%key, attempt, error = %failure, "error syncing; will retry");
            self.queue.add_rate_limited(key.clone());
            return;
        }
        self.queue.forget(key);
        self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        tracing::error!(%key, error = %failure, "dropping key out of the queue after {} retries", self.max_retries);
        if let Some(hook) = &self.on_dropped {
            hook(key, &failure);
        }
    }
}
