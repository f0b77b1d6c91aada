//! The fan-out from one informer to its handlers: client-go's `sharedProcessor` and its
//! `processorListener`s.
//!
//! Each handler has its own task and its own unbounded buffer, so a slow handler delays only
//! itself, and its own panic boundary, so a panicking handler keeps receiving. The informer
//! changes its store and calls [`Listeners::distribute`] under the one lock that
//! [`Listeners::add`] also takes: a handler added late is given the store's contents as adds
//! and then every later change, none twice.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::mpsc;
use tracing::Instrument;

use super::handler::{HandlerRegistration, Notification, ResourceEventHandler};
use super::stored::Stored;
use crate::panic::catch;

/// A handler registered before the informer runs, with the notifications queued for it.
struct Pending<K> {
    id: u64,
    handler: Arc<dyn ResourceEventHandler<K>>,
    rx: mpsc::UnboundedReceiver<Notification<K>>,
}

/// The handlers of one informer.
pub(crate) struct Listeners<K> {
    /// Invariant: one sender per registered handler; its receiver is in `pending` until the
    /// informer first runs, in the handler's task after.
    active: Vec<(u64, mpsc::UnboundedSender<Notification<K>>)>,
    pending: Vec<Pending<K>>,
    runtime: Option<tokio::runtime::Handle>,
    /// The informer's span: handler tasks log inside it.
    span: tracing::Span,
}

/// The lock around an informer's [`Listeners`].
pub(crate) struct Processor<K> {
    listeners: Mutex<Listeners<K>>,
}

impl<K: Send + Sync + 'static> Processor<K> {
    pub(crate) fn new(span: tracing::Span) -> Self {
        Self {
            listeners: Mutex::new(Listeners {
                active: Vec::new(),
                pending: Vec::new(),
                runtime: None,
                span,
            }),
        }
    }

    /// The listeners, locked: hold this while changing the store.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Listeners<K>> {
        self.listeners.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: Send + Sync + 'static> Listeners<K> {
    /// Sends `notification` to every handler; handlers that were removed drop out.
    pub(crate) fn distribute(&mut self, notification: Notification<K>) {
        self.active.retain(|(_, tx)| tx.send(notification.clone()).is_ok());
    }

    /// Registers `handler`, first giving it `initial` as adds (in the initial list). Its task starts now if the
    /// informer runs (or ran), else when it first runs.
    pub(crate) fn add(
        &mut self,
        handler: Arc<dyn ResourceEventHandler<K>>,
        initial: impl IntoIterator<Item = Stored<K>>,
    ) -> HandlerRegistration {
        // Unique across informers, so removing a handler from the wrong one does nothing.
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        for object in initial {
            let _ = tx.send(Notification::Add(object, true));
        }
        match &self.runtime {
            Some(runtime) => {
                runtime.spawn(run_listener(handler, rx).instrument(self.span.clone()));
            }
            None => self.pending.push(Pending { id, handler, rx }),
        }
        self.active.push((id, tx));
        HandlerRegistration { id }
    }

    /// Removes a handler: it receives nothing more once the notifications already queued for
    /// it are delivered. Returns whether it was registered here.
    pub(crate) fn remove(&mut self, registration: &HandlerRegistration) -> bool {
        let before = self.active.len();
        self.active.retain(|(id, _)| *id != registration.id);
        self.pending.retain(|p| p.id != registration.id);
        self.active.len() != before
    }

    /// How many handlers are registered.
    pub(crate) fn len(&self) -> usize {
        self.active.len()
    }

    /// Starts the tasks of the handlers registered before the informer first ran.
    pub(crate) fn start(&mut self, runtime: tokio::runtime::Handle) {
        for Pending { handler, rx, .. } in self.pending.drain(..) {
            runtime.spawn(run_listener(handler, rx).instrument(self.span.clone()));
        }
        self.runtime = Some(runtime);
    }
}

/// Delivers notifications to one handler, catching its panics.
async fn run_listener<K: Send + Sync + 'static>(
    handler: Arc<dyn ResourceEventHandler<K>>,
    mut rx: mpsc::UnboundedReceiver<Notification<K>>,
) {
    while let Some(notification) = rx.recv().await {
        // A compact store's objects are decoded here, on the handler's task; one that does
        // not decode was logged by `load` and is skipped.
        let outcome = catch(|| match &notification {
            Notification::Add(o, initial) => {
                if let Some(o) = o.load() {
                    handler.on_add(&o, *initial)
                }
            }
            Notification::Update(old, new) => {
                let Some(new_object) = new.load() else { return };
                // A resync's update is one object twice: decoded once.
                let old = if old.same(new) { Some(new_object.clone()) } else { old.load() };
                if let Some(old) = old {
                    handler.on_update(&old, &new_object)
                }
            }
            Notification::Delete(d) => handler.on_delete(d),
        });
        if let Err(panic) = outcome {
            tracing::error!(%panic, "event handler panicked; it keeps receiving events");
        }
    }
}
