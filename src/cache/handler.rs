//! Event handlers: what an informer tells the code that registered with it.

use std::sync::Arc;

use kube_client::Resource;

use super::object::stored::Stored;
use super::object_key::{KeyError, ObjectKey, meta_namespace_key_func};

/// client-go's `DeletedFinalStateUnknown`: an object deleted while the watch was down, so its
/// final state is unknown. It carries the last state the cache held.
#[derive(Debug, Clone)]
pub struct DeletedFinalStateUnknown<K> {
    /// The object's key.
    pub key: ObjectKey,
    /// The last state the cache saw.
    pub object: Arc<K>,
}

/// What `on_delete` receives: the deleted object as the watch reported it, or a tombstone
/// for a delete that was missed and found by a relist.
#[derive(Debug, Clone)]
pub enum Deleted<K> {
    /// The object, as the watch's `DELETED` event carried it.
    Object(Arc<K>),
    /// A delete missed while disconnected.
    Tombstone(DeletedFinalStateUnknown<K>),
}

impl<K> Deleted<K> {
    /// The object: the deleted one, or the tombstone's last known state.
    pub fn object(&self) -> &Arc<K> {
        match self {
            Deleted::Object(o) => o,
            Deleted::Tombstone(t) => &t.object,
        }
    }
}

/// Receives an informer's notifications: client-go's `ResourceEventHandler`.
///
/// Each handler runs on its own task with its own unbounded buffer, so a slow handler delays
/// only itself. A panic inside a handler is caught and logged; the handler keeps receiving.
pub trait ResourceEventHandler<K>: Send + Sync + 'static {
    /// An object appeared. `is_in_initial_list` is true for the objects of the informer's
    /// first list and, for a handler added later, for the objects the cache held then
    /// (client-go's `OnAdd(obj, isInInitialList)`); false for objects created later or found
    /// by a relist.
    fn on_add(&self, object: &Arc<K>, is_in_initial_list: bool);
    /// An object changed; on resync, `old` and `new` are the same object.
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>);
    /// An object went away.
    fn on_delete(&self, deleted: &Deleted<K>);
}

type AddFn<K> = Box<dyn Fn(&Arc<K>, bool) + Send + Sync>;
type UpdateFn<K> = Box<dyn Fn(&Arc<K>, &Arc<K>) + Send + Sync>;
type DeleteFn<K> = Box<dyn Fn(&Deleted<K>) + Send + Sync>;

/// A handler made of closures, any of them optional: client-go's
/// `ResourceEventHandlerFuncs` (and, with [`on_add_detailed`](Self::on_add_detailed), its
/// `ResourceEventHandlerDetailedFuncs`).
pub struct ResourceEventHandlerFuncs<K> {
    add: Option<AddFn<K>>,
    update: Option<UpdateFn<K>>,
    delete: Option<DeleteFn<K>>,
}

impl<K> Default for ResourceEventHandlerFuncs<K> {
    fn default() -> Self {
        Self { add: None, update: None, delete: None }
    }
}

impl<K> std::fmt::Debug for ResourceEventHandlerFuncs<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceEventHandlerFuncs")
            .field("add", &self.add.is_some())
            .field("update", &self.update.is_some())
            .field("delete", &self.delete.is_some())
            .finish()
    }
}

impl<K> ResourceEventHandlerFuncs<K> {
    /// No closures yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `AddFunc`.
    pub fn on_add(self, f: impl Fn(&Arc<K>) + Send + Sync + 'static) -> Self {
        self.on_add_detailed(move |object, _| f(object))
    }

    /// `AddFunc` of `ResourceEventHandlerDetailedFuncs`: also told whether the object came
    /// with the initial list (see [`ResourceEventHandler::on_add`]). Replaces `on_add`'s.
    pub fn on_add_detailed(mut self, f: impl Fn(&Arc<K>, bool) + Send + Sync + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }

    /// `UpdateFunc`.
    pub fn on_update(mut self, f: impl Fn(&Arc<K>, &Arc<K>) + Send + Sync + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }

    /// `DeleteFunc`.
    pub fn on_delete(mut self, f: impl Fn(&Deleted<K>) + Send + Sync + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<K: Send + Sync + 'static> ResourceEventHandler<K> for ResourceEventHandlerFuncs<K> {
    fn on_add(&self, object: &Arc<K>, is_in_initial_list: bool) {
        if let Some(f) = &self.add {
            f(object, is_in_initial_list)
        }
    }
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        if let Some(f) = &self.update {
            f(old, new)
        }
    }
    fn on_delete(&self, deleted: &Deleted<K>) {
        if let Some(f) = &self.delete {
            f(deleted)
        }
    }
}

/// What [`Informer::add_event_handler`](super::Informer::add_event_handler) returns: the
/// handle to remove the handler with (client-go's `ResourceEventHandlerRegistration`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct HandlerRegistration {
    pub(crate) id: u64,
}

/// One of the crate's own handlers, which neither blocks nor runs user code, so it may run
/// on the informer's task (see `processor`).
pub(crate) trait InlineHandler<K>: ResourceEventHandler<K> {
    /// Whether it reads the objects of the events, which a store of JSON would decode on the
    /// informer's task; not if it needs only their keys and versions.
    fn reads_objects(&self) -> bool;

    /// Handles `notification` from its keys and versions alone, without decoding anything,
    /// if it can (then true); else it is delivered the objects.
    fn handle_keys(&self, notification: &Notification<K>) -> bool;
}

/// One notification for one handler. Adds and updates carry the objects as stored: a compact
/// store's are decoded by each handler's task, just before its handler runs.
#[derive(Debug)]
pub(crate) enum Notification<K> {
    /// The object, and whether it came with the initial list.
    Add(Stored<K>, bool),
    Update(Stored<K>, Stored<K>),
    Delete(Deleted<K>),
}

impl<K> Notification<K> {
    /// An add of a decoded object.
    pub(crate) fn add(object: Arc<K>, initial: bool) -> Self {
        Self::Add(Stored::Shared(object), initial)
    }

    /// An update between decoded objects.
    #[cfg(test)]
    pub(crate) fn update(old: Arc<K>, new: Arc<K>) -> Self {
        Self::Update(Stored::Shared(old), Stored::Shared(new))
    }
}

impl<K> Clone for Notification<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Add(o, initial) => Self::Add(o.clone(), *initial),
            Self::Update(a, b) => Self::Update(a.clone(), b.clone()),
            Self::Delete(d) => Self::Delete(match d {
                Deleted::Object(o) => Deleted::Object(o.clone()),
                Deleted::Tombstone(t) => Deleted::Tombstone(DeletedFinalStateUnknown {
                    key: t.key.clone(),
                    object: t.object.clone(),
                }),
            }),
        }
    }
}

/// client-go's `DeletionHandlingMetaNamespaceKeyFunc`: the key of a deleted object, which may
/// be a tombstone (`DeletedFinalStateUnknown`) carrying its key.
pub fn deletion_handling_meta_namespace_key_func<K: Resource>(
    deleted: &Deleted<K>,
) -> Result<ObjectKey, KeyError> {
    match deleted {
        Deleted::Object(object) => meta_namespace_key_func(object.as_ref()),
        Deleted::Tombstone(tombstone) => Ok(tombstone.key.clone()),
    }
}
