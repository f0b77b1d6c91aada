//! Creates with `generateName` expected per owner, as ReplicaSet's `ControllerExpectations`
//! count them: such a create names no object before the server answers, so its owner's
//! count of expected creations is raised before the request is sent, and lowered when a cache
//! sees a new child of that owner (or when the server refused the create). A create whose
//! answer was lost (the reconcile ended first, the connection dropped, a 504 after the commit)
//! keeps its owner's count raised until the child shows up in the cache, or until the hold's
//! timeout lets it go.
//!
//! The owner is the created object's controlling `ownerReference` (in its namespace). A
//! create without one is counted per `generateName` prefix in its namespace: a new object
//! made with that prefix is its child. Counts are kept per cache (each of the controller's
//! caches that lists and watches the created object sees the child on its own) and observed
//! by a handler on each cache, which decodes an added object only while some count is raised.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::recorded_write::{Verb, Write};
use crate::cache::{InformerObject, InlineHandler, Notification, ObjectKey, ResourceEventHandler};

/// Whose children a create with `generateName` is counted under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Owner {
    /// The object's controlling owner, in the object's namespace.
    Controller(ObjectKey),
    /// No controlling owner: the `generateName` prefix (as the key's name) in the namespace.
    Prefix(ObjectKey),
}

impl Owner {
    /// The owner a recorded create with `generateName` counts under; `None` for any other
    /// write.
    pub(crate) fn of_write(write: &Write) -> Option<Self> {
        let prefix = write.generate_name.as_deref().filter(|_| write.verb == Verb::Create)?;
        Some(match &write.owner {
            Some(owner) => Self::Controller(owner.clone()),
            None => Self::Prefix(key_in(write.key.namespace.as_deref(), prefix)),
        })
    }

    /// The owner an object made with `generateName` counts under; `None` for one made with a
    /// name of its own.
    fn of_object(meta: &ObjectMeta) -> Option<Self> {
        let prefix = meta.generate_name.as_deref()?;
        let namespace = meta.namespace.as_deref();
        let controller =
            meta.owner_references.iter().flatten().find(|r| r.controller == Some(true));
        Some(match controller {
            Some(owner) => Self::Controller(key_in(namespace, &owner.name)),
            None => Self::Prefix(key_in(namespace, prefix)),
        })
    }
}

fn key_in(namespace: Option<&str>, name: &str) -> ObjectKey {
    match namespace {
        Some(ns) => ObjectKey::namespaced(ns, name),
        None => ObjectKey::cluster(name),
    }
}

/// A controller's expected creations: a count per cache (its view's id) and owner. Cloning
/// shares it.
#[derive(Clone)]
pub(crate) struct Expectations(Arc<Inner>);

struct Inner {
    counts: Mutex<HashMap<(usize, Owner), usize>>,
    /// The sum of the counts: the caches' handlers look at nothing while it is zero.
    outstanding: AtomicUsize,
    /// Moved at every lowering, for the holds that wait on a count.
    lowered: watch::Sender<u64>,
}

impl Default for Expectations {
    fn default() -> Self {
        Self(Arc::new(Inner {
            counts: Mutex::default(),
            outstanding: AtomicUsize::new(0),
            lowered: watch::channel(0).0,
        }))
    }
}

impl Expectations {
    /// One more creation of `owner`'s child expected in the cache `view`.
    pub(crate) fn raise(&self, view: usize, owner: &Owner) {
        let mut counts = self.lock();
        *counts.entry((view, owner.clone())).or_default() += 1;
        self.0.outstanding.fetch_add(1, Ordering::Relaxed);
    }

    /// One creation of `owner`'s child fewer expected in `view` (it was seen, refused, or let
    /// go of at a hold's end); nothing if none is.
    pub(crate) fn lower(&self, view: usize, owner: &Owner) {
        let mut counts = self.lock();
        let entry = (view, owner.clone());
        let Some(count) = counts.get_mut(&entry) else { return };
        *count -= 1;
        if *count == 0 {
            counts.remove(&entry);
        }
        self.0.outstanding.fetch_sub(1, Ordering::Relaxed);
        drop(counts);
        self.0.lowered.send_modify(|n| *n += 1);
    }

    /// Whether `view` has seen every child of `owner` expected there.
    pub(crate) fn met(&self, view: usize, owner: &Owner) -> bool {
        !self.lock().contains_key(&(view, owner.clone()))
    }

    /// Resolves once [`met`](Self::met).
    pub(crate) fn until_met(&self, view: usize, owner: Owner) -> BoxFuture<'static, ()> {
        let this = self.clone();
        let mut lowered = self.0.lowered.subscribe();
        async move {
            // Subscribed before the check: a lowering after it wakes the wait.
            while !this.met(view, &owner) {
                if lowered.changed().await.is_err() {
                    return;
                }
            }
        }
        .boxed()
    }

    /// `object`, added to the cache `view`: a new child of the owner it names, if one is
    /// expected there.
    pub(crate) fn observe(&self, view: usize, meta: &ObjectMeta) {
        if let Some(owner) = Owner::of_object(meta) {
            self.lower(view, &owner);
        }
    }

    /// Whether any creation is expected anywhere.
    fn any(&self) -> bool {
        self.0.outstanding.load(Ordering::Relaxed) > 0
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, HashMap<(usize, Owner), usize>> {
        self.0.counts.lock()
    }
}

/// The handler on one cache that lowers the counts as it sees new children: inline on the
/// informer's task, it looks at an added object only while a count is raised (a compact
/// store decodes it then).
pub(crate) struct Observer {
    pub(crate) expectations: Expectations,
    /// The id of the cache's view.
    pub(crate) view: usize,
}

impl<K: InformerObject> ResourceEventHandler<K> for Observer {
    fn on_add(&self, object: &Arc<K>, _: bool) {
        self.expectations.observe(self.view, object.meta());
    }
    fn on_update(&self, _: &Arc<K>, _: &Arc<K>) {}
    fn on_delete(&self, _: &crate::cache::Deleted<K>) {}
}

impl<K: InformerObject> InlineHandler<K> for Observer {
    fn reads_objects(&self) -> bool {
        false
    }
    fn handle_keys(&self, notification: &Notification<K>) -> bool {
        match notification {
            // Delivered (decoded, from a compact store) only while a creation is expected.
            Notification::Add(..) => !self.expectations.any(),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(name: &str, owner: Option<&str>) -> ObjectMeta {
        let references = owner.map(|owner| {
            vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                name: owner.into(),
                controller: Some(true),
                ..Default::default()
            }]
        });
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            generate_name: Some("child-".into()),
            owner_references: references,
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_count_per_owner_and_cache_is_met_by_that_owners_new_children_in_that_cache() {
        let expectations = Expectations::default();
        let (a, b) = (
            Owner::Controller(ObjectKey::namespaced("ns", "a")),
            Owner::Controller(ObjectKey::namespaced("ns", "b")),
        );
        expectations.raise(1, &a);
        expectations.raise(1, &a);
        expectations.raise(1, &b);
        expectations.raise(2, &a);
        let mut a_in_1 = expectations.until_met(1, a.clone());
        let mut b_in_1 = expectations.until_met(1, b.clone());
        expectations.observe(1, &child("child-x", Some("b")));
        assert!((&mut b_in_1).now_or_never().is_some(), "b's one child seen");
        assert!((&mut a_in_1).now_or_never().is_none(), "b's child does not release a");
        expectations.observe(1, &child("child-y", Some("a")));
        assert!((&mut a_in_1).now_or_never().is_none(), "one of a's two children");
        expectations.observe(2, &child("child-z", Some("a")));
        assert!((&mut a_in_1).now_or_never().is_none(), "seen by another cache");
        expectations.observe(1, &child("child-z", Some("a")));
        assert!(a_in_1.now_or_never().is_some(), "both of a's children in cache 1");
        assert!(!expectations.any());
        // Without a controlling owner: counted by prefix.
        let prefix = Owner::Prefix(ObjectKey::namespaced("ns", "child-"));
        expectations.raise(1, &prefix);
        let mut by_prefix = expectations.until_met(1, prefix);
        expectations.observe(1, &ObjectMeta { generate_name: None, ..child("named", None) });
        assert!((&mut by_prefix).now_or_never().is_none(), "an object with a name of its own");
        expectations.observe(1, &child("child-q", None));
        assert!(by_prefix.now_or_never().is_some());
    }
}
