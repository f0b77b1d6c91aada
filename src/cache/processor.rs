//! The fan-out from one informer to its handlers: client-go's `sharedProcessor` and its
//! `processorListener`s.
//!
//! Each handler has its own task and its own unbounded buffer, so a slow handler delays only
//! itself, and its own panic boundary, so a panicking handler keeps receiving. The informer
//! changes its store and calls [`Listeners::distribute`] under the one lock that
//! [`Listeners::add`] also takes: a handler added late is given the store's contents as adds
//! and then every later change, none twice.
//!
//! A handler is removed two ways: [`Listeners::remove`] lets it hear what was already queued
//! for it; [`Listeners::shut_down`] drops that and says when its task has ended, so that its
//! remover can wait until no call of it is in flight (client-go's `ShutDownEventHandler`).
//! A removed handler stays known (in `stopping`) until its task ended, so that every caller
//! of `shut_down`, a second one, one after `remove`, or one waiting again after a timeout,
//! waits for the same end.
//!
//! A handler of the crate's own that only turns events into queue keys (a controller's,
//! without user predicates or mappers) may instead run inline, on the informer's task, as it
//! changes the store: it does not block, and a task of its own would cost a task wake-up per
//! event for nothing (see the README's watch throughput figures). It sees the same
//! notifications in the same order; a panic would still be caught and logged.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use super::handler::{HandlerRegistration, InlineHandler, Notification, ResourceEventHandler};
use super::object::stored::Stored;
use crate::panic::catch;

/// A handler registered before the informer runs, with the notifications queued for it.
struct Pending<K> {
    id: u64,
    handler: Arc<dyn ResourceEventHandler<K>>,
    rx: mpsc::UnboundedReceiver<Notification<K>>,
    listener: Arc<Listener>,
}

/// A handler's task, as its remover sees it: told to drop what is queued, and telling when
/// it has ended (no call of the handler in flight, none to come).
struct Listener {
    /// Set by a shut-down: the task delivers nothing more.
    shut_down: AtomicBool,
    /// `true` once the task has ended, however it ended.
    done: watch::Sender<bool>,
}

impl Listener {
    fn new() -> Arc<Self> {
        Arc::new(Self { shut_down: AtomicBool::new(false), done: watch::Sender::new(false) })
    }
}

/// Marks a listener's task ended when it returns, is dropped, or unwinds.
struct Ended(Arc<Listener>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.done.send_replace(true);
    }
}

/// The handlers of one informer.
pub(crate) struct Listeners<K> {
    /// Invariant: one sender per registered handler; its receiver is in `pending` until the
    /// informer first runs, in the handler's task after (whose [`Listener`] is beside it).
    active: Vec<(u64, mpsc::UnboundedSender<Notification<K>>, Arc<Listener>)>,
    /// Handlers removed whose task may not have ended yet; pruned as they end.
    stopping: Vec<(u64, Arc<Listener>)>,
    /// Handlers that run on the informer's task (see the module docs).
    inline: Vec<(u64, Arc<dyn InlineHandler<K>>)>,
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
                stopping: Vec::new(),
                inline: Vec::new(),
                pending: Vec::new(),
                runtime: None,
                span,
            }),
        }
    }

    /// The listeners, locked: hold this while changing the store.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Listeners<K>> {
        self.listeners.lock()
    }
}

impl<K: Send + Sync + 'static> Listeners<K> {
    /// Sends `notification` to every handler; handlers that were removed drop out.
    pub(crate) fn distribute(&mut self, notification: Notification<K>) {
        for (_, handler) in &self.inline {
            deliver_inline(handler.as_ref(), &notification);
        }
        self.active.retain(|(_, tx, _)| tx.send(notification.clone()).is_ok());
    }

    /// Registers `handler`, first giving it `initial` as adds (in the initial list). Its task starts now if the
    /// informer runs (or ran), else when it first runs.
    pub(crate) fn add(
        &mut self,
        handler: Arc<dyn ResourceEventHandler<K>>,
        initial: impl IntoIterator<Item = Stored<K>>,
    ) -> HandlerRegistration {
        let id = next_id();
        let (tx, rx) = mpsc::unbounded_channel();
        for object in initial {
            let _ = tx.send(Notification::Add(object, true));
        }
        let listener = Listener::new();
        match &self.runtime {
            Some(runtime) => {
                let run = run_listener(handler, rx, listener.clone());
                runtime.spawn(run.instrument(self.span.clone()));
            }
            None => self.pending.push(Pending { id, handler, rx, listener: listener.clone() }),
        }
        self.active.push((id, tx, listener));
        HandlerRegistration { id }
    }

    /// Registers `handler` to run inline, on the informer's task, first giving it `initial`
    /// as adds here and now. Only for handlers that neither block nor run user code (see the
    /// module docs).
    pub(crate) fn add_inline(
        &mut self,
        handler: Arc<dyn InlineHandler<K>>,
        initial: impl IntoIterator<Item = Stored<K>>,
    ) -> HandlerRegistration {
        let id = next_id();
        self.span.in_scope(|| {
            for object in initial {
                deliver_inline(handler.as_ref(), &Notification::Add(object, true));
            }
        });
        self.inline.push((id, handler));
        HandlerRegistration { id }
    }

    /// Removes a handler: it receives nothing more once the notifications already queued for
    /// it are delivered. Returns whether it was registered here.
    pub(crate) fn remove(&mut self, registration: &HandlerRegistration) -> bool {
        let before = self.len();
        if let Some(listener) = self.take_active(registration.id) {
            self.stopping.push((registration.id, listener));
        }
        self.inline.retain(|(id, _)| *id != registration.id);
        self.len() != before
    }

    /// Takes a handler out of `active`, its task too if it never started (marked ended: it
    /// has nothing in flight), and forgets the removed handlers whose task ended.
    fn take_active(&mut self, id: u64) -> Option<Arc<Listener>> {
        self.stopping.retain(|(_, listener)| !*listener.done.borrow());
        let at = self.active.iter().position(|(active, _, _)| *active == id)?;
        // The sender dropped here closes the channel: an idle task wakes and ends.
        let (_, _, listener) = self.active.remove(at);
        if let Some(at) = self.pending.iter().position(|p| p.id == id) {
            self.pending.remove(at);
            listener.done.send_replace(true);
        }
        Some(listener)
    }

    /// Removes a handler and drops what is queued for it (client-go's
    /// `ShutDownEventHandler`): the receiver it returns turns `true` once no call of the
    /// handler is in flight (at once for an inline handler, whose calls run under this lock,
    /// or one whose task never started). A handler already removed or shut down whose task
    /// has not ended is shut down (if it was only removed) and waited for the same way.
    /// `None` if it was not registered here or its task already ended.
    pub(crate) fn shut_down(
        &mut self,
        registration: &HandlerRegistration,
    ) -> Option<watch::Receiver<bool>> {
        let id = registration.id;
        let listener = match self.take_active(id) {
            Some(listener) => {
                self.stopping.push((id, listener.clone()));
                listener
            }
            None => match self.stopping.iter().find(|(stopping, _)| *stopping == id) {
                Some((_, listener)) => listener.clone(),
                None => {
                    let at = self.inline.iter().position(|(inline, _)| *inline == id)?;
                    self.inline.remove(at);
                    return Some(watch::Sender::new(true).subscribe());
                }
            },
        };
        listener.shut_down.store(true, Ordering::SeqCst);
        Some(listener.done.subscribe())
    }

    /// How many handlers are registered.
    pub(crate) fn len(&self) -> usize {
        self.active.len() + self.inline.len()
    }

    /// Starts the tasks of the handlers registered before the informer first ran.
    pub(crate) fn start(&mut self, runtime: tokio::runtime::Handle) {
        for Pending { handler, rx, listener, .. } in self.pending.drain(..) {
            runtime.spawn(run_listener(handler, rx, listener).instrument(self.span.clone()));
        }
        self.runtime = Some(runtime);
    }
}

/// A registration id, unique across informers, so removing a handler from the wrong one does
/// nothing.
fn next_id() -> u64 {
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Delivers notifications to one handler, on a task of its own, until its channel closes or
/// it is shut down.
async fn run_listener<K: Send + Sync + 'static>(
    handler: Arc<dyn ResourceEventHandler<K>>,
    mut rx: mpsc::UnboundedReceiver<Notification<K>>,
    listener: Arc<Listener>,
) {
    let _ended = Ended(listener.clone());
    while let Some(notification) = rx.recv().await {
        if listener.shut_down.load(Ordering::SeqCst) {
            break;
        }
        deliver(handler.as_ref(), &notification);
    }
}

/// Hands one notification to an inline handler: by keys if it can, else as [`deliver`] does.
fn deliver_inline<K: Send + Sync + 'static>(
    handler: &dyn InlineHandler<K>,
    notification: &Notification<K>,
) {
    if !handler.handle_keys(notification) {
        deliver(handler, notification);
    }
}

/// Calls `handler` for one notification, catching its panics. A compact store's objects are
/// decoded here; one that does not decode was logged by `load` and is skipped.
fn deliver<K: Send + Sync + 'static>(
    handler: &dyn ResourceEventHandler<K>,
    notification: &Notification<K>,
) {
    let outcome = catch(|| match notification {
        Notification::Add(o, initial) => {
            if let Some(o) = o.load() {
                handler.on_add(&o, *initial)
            }
        }
        Notification::Update(old, new) => {
            let Some(new_object) = new.load() else { return };
            // A resync's update is one object twice: decoded once. An old object is no longer
            // in the store: decoded, it does not join the hot set.
            let old = if old.same(new) { Some(new_object.clone()) } else { old.load_transient() };
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

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;

    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;
    use crate::cache::{Deleted, ResourceEventHandlerFuncs};

    fn cm(name: &str, rv: &str) -> Arc<ConfigMap> {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.resource_version = Some(rv.into());
        Arc::new(cm)
    }

    /// A user's handler run as an inline one reads objects.
    impl<K: Send + Sync + 'static> InlineHandler<K> for ResourceEventHandlerFuncs<K> {
        fn reads_objects(&self) -> bool {
            true
        }
        fn handle_keys(&self, _: &Notification<K>) -> bool {
            false
        }
    }

    /// A handler that writes down what it hears, and panics on an add of `boom`.
    fn recorder() -> (ResourceEventHandlerFuncs<ConfigMap>, Arc<Mutex<Vec<String>>>) {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let name = |o: &ConfigMap| o.metadata.name.clone().unwrap_or_default();
        let (a, u, d) = (heard.clone(), heard.clone(), heard.clone());
        let handler = ResourceEventHandlerFuncs::new()
            .on_add_detailed(move |o: &Arc<ConfigMap>, initial| {
                assert_ne!(name(o), "boom", "a handler that panics");
                a.lock().push(format!("add {} {initial}", name(o)));
            })
            .on_update(move |old: &Arc<ConfigMap>, new: &Arc<ConfigMap>| {
                let rv = |o: &ConfigMap| o.metadata.resource_version.clone().unwrap_or_default();
                u.lock().push(format!("update {} {}->{}", name(new), rv(old), rv(new)));
            })
            .on_delete(move |deleted: &Deleted<ConfigMap>| {
                d.lock().push(format!("delete {}", name(deleted.object())));
            });
        (handler, heard)
    }

    #[test]
    fn an_inline_handler_hears_the_store_then_every_change_in_order_on_the_callers_thread() {
        let processor = Processor::<ConfigMap>::new(tracing::Span::none());
        let mut listeners = processor.lock();
        let (handler, heard) = recorder();
        let initial = [Stored::Shared(cm("a", "1"))];
        let registration = listeners.add_inline(Arc::new(handler), initial);
        // No task and no runtime: everything is heard before each call returns.
        assert_eq!(*heard.lock(), ["add a true"]);
        listeners.distribute(Notification::add(cm("b", "2"), false));
        listeners.distribute(Notification::add(cm("boom", "3"), false));
        listeners.distribute(Notification::update(cm("a", "1"), cm("a", "4")));
        listeners.distribute(Notification::Delete(Deleted::Object(cm("b", "5"))));
        assert_eq!(
            *heard.lock(),
            ["add a true", "add b false", "update a 1->4", "delete b"],
            "the panic on boom is caught and the handler keeps hearing"
        );
        assert_eq!(listeners.len(), 1);
        assert!(listeners.remove(&registration));
        assert_eq!(listeners.len(), 0);
        listeners.distribute(Notification::add(cm("c", "6"), false));
        assert_eq!(heard.lock().len(), 4, "nothing after removal");
    }
}
