//! Where a controller's keys come from: handlers on informers that turn each event that passes
//! the predicate into keys of the primary kind, and put them in the queue.
//!
//! - the primary kind: the object's own key ([`enqueue_handler`], the handler of client-go's
//!   `examples/workqueue`);
//! - owned objects (`owns`): the key of the owner their `ownerReferences` name as controller
//!   (`controller: true`), of the primary's group and kind, in the owned object's namespace
//!   (or none, for a cluster-scoped primary); an update that moves an object from one owner
//!   to another enqueues both, as controller-runtime's `EnqueueRequestForOwner` does;
//! - watched objects (`watches`): whatever keys the user's mapper returns, for the old and the
//!   new object of an update.
//!
//! An event puts each of its keys in the queue once, however many sides of an update or
//! entries of a mapper's answer name it: a second add could reach a worker already busy with
//! the first and cost a second reconcile for one change.
//!
//! Keys go in at the priority of [`event_priority`]: low for the initial list and for
//! unchanged resyncs, normal for real changes, unless the controller was built with
//! [`use_priority_queue(false)`](super::ControllerBuilder::use_priority_queue).
//!
//! A mapper or predicate that panics is logged with the object's key; a predicate's panic
//! counts as passed.

use std::collections::HashSet;
use std::sync::Arc;

use kube_client::Resource;

use super::context::{Changed, Event, Reason, Reasons};
use super::predicate::{Change, Predicate};
use crate::cache::{
    Deleted, InformerObject, InlineHandler, Notification, ObjectKey, ResourceEventHandler,
    ResourceEventHandlerFuncs, deletion_handling_meta_namespace_key_func, meta_namespace_key_func,
};
use crate::panic::catch;
use crate::workqueue::{Priority, WorkQueue};

/// The handler funcs of client-go's `examples/workqueue`: every add, update and delete puts
/// the object's key in `queue`.
///
/// Adds of the initial list and updates that did not change the object's resourceVersion
/// (resyncs) are added at [`Priority::LOW`], everything else at [`Priority::NORMAL`], as
/// controller-runtime's `handler.WithLowPriorityWhenUnchanged` does.
pub fn enqueue_handler<K: InformerObject>(
    queue: WorkQueue<ObjectKey>,
) -> ResourceEventHandlerFuncs<K> {
    let (q1, q2, q3) = (queue.clone(), queue.clone(), queue);
    ResourceEventHandlerFuncs::new()
        .on_add_detailed(move |o: &Arc<K>, initial| {
            if let Ok(key) = meta_namespace_key_func(o.as_ref()) {
                q1.add_with_priority(key, event_priority(&Change::Add(o.as_ref()), initial));
            }
        })
        .on_update(move |old: &Arc<K>, new: &Arc<K>| {
            if let Ok(key) = meta_namespace_key_func(new.as_ref()) {
                q2.add_with_priority(
                    key,
                    event_priority(&Change::Update { old: old.as_ref(), new: new.as_ref() }, false),
                );
            }
        })
        .on_delete(move |deleted| {
            // Tombstones carry their key: client-go's DeletionHandlingMetaNamespaceKeyFunc.
            if let Ok(key) = deletion_handling_meta_namespace_key_func(deleted) {
                q3.add(key);
            }
        })
}

/// The priority controller-runtime gives an event's keys (`handler.WithLowPriorityWhenUnchanged`):
/// [`Priority::LOW`] for an add of the initial list (`is_in_initial_list`) and for an update
/// whose resourceVersion did not change (a resync, or a relist that found the object as it
/// was), [`Priority::NORMAL`] for every other event. So after a restart, or at a resync, the
/// objects that really changed are reconciled first.
pub(crate) fn event_priority<K: InformerObject>(
    event: &Change<'_, K>,
    is_in_initial_list: bool,
) -> Priority {
    let unchanged = match event {
        Change::Add(_) => is_in_initial_list,
        Change::Update { old, new } => {
            std::ptr::eq(*old, *new) || old.meta().resource_version == new.meta().resource_version
        }
        Change::Delete(_) => false,
    };
    if unchanged { Priority::LOW } else { Priority::NORMAL }
}

/// The primary kind, as owner references name it.
#[derive(Debug, Clone)]
pub(crate) struct OwnerKind {
    pub(crate) group: String,
    pub(crate) kind: String,
    /// `Some(false)` for a cluster-scoped primary, whose keys have no namespace.
    pub(crate) namespaced: Option<bool>,
}

/// A user's mapper from a secondary object to primary keys.
pub(crate) type MapFn<S> = Arc<dyn Fn(&S) -> Vec<ObjectKey> + Send + Sync>;

/// How an event's object becomes keys.
pub(crate) enum Mapper<S> {
    /// The object's own key (the primary kind).
    Own,
    /// The key of its controlling owner of this kind.
    Owner(OwnerKind),
    /// The user's function.
    Map(MapFn<S>),
}

/// Enqueues the keys of every event that passes the predicate.
pub(crate) struct EnqueueHandler<S> {
    pub(crate) queue: WorkQueue<ObjectKey>,
    pub(crate) predicate: Option<Predicate<S>>,
    pub(crate) mapper: Mapper<S>,
    /// Whether unchanged objects' keys go in at low priority (see [`event_priority`]).
    pub(crate) prioritize: bool,
    /// Where the controller keeps why each key was queued.
    pub(crate) reasons: Reasons,
    /// The kind of the informer's objects, as reasons name them (set at registration).
    pub(crate) kind: Arc<str>,
}

impl<S: InformerObject> EnqueueHandler<S> {
    /// Whether events go through a user's predicate or mapper, which may be slow or block:
    /// such a handler needs a task of its own.
    pub(crate) fn runs_user_code(&self) -> bool {
        self.predicate.is_some() || matches!(self.mapper, Mapper::Map(_))
    }

    fn passes(&self, event: &Change<'_, S>, object: &S) -> bool {
        let Some(predicate) = &self.predicate else { return true };
        catch(|| predicate.evaluate(event)).unwrap_or_else(|panic| {
            tracing::error!(object = %describe(object), %panic, "a predicate panicked; the event passes");
            true
        })
    }

    /// The keys of an event's object, each once.
    fn keys(&self, object: &S) -> Vec<ObjectKey> {
        distinct(self.mapped(object))
    }

    /// The keys the mapper gives `object`, as it gives them (a user's function may repeat one).
    fn mapped(&self, object: &S) -> Vec<ObjectKey> {
        match &self.mapper {
            Mapper::Own => meta_namespace_key_func(object).into_iter().collect(),
            Mapper::Owner(owner) => owner_keys(object, owner),
            Mapper::Map(f) => catch(|| f(object)).unwrap_or_else(|panic| {
                tracing::error!(object = %describe(object), %panic, "a watch mapper panicked; no keys from this event");
                Vec::new()
            }),
        }
    }

    /// The keys of an update: the new object's, and the old object's where it may have pointed
    /// elsewhere, each once. Two adds of one key would let a worker take the first before the
    /// second comes, and reconcile twice for one change; controller-runtime's handlers
    /// collect an event's requests in a set for the same reason.
    fn update_keys(&self, old: &S, new: &S) -> Vec<ObjectKey> {
        let mut keys = self.mapped(new);
        if !matches!(self.mapper, Mapper::Own) && !std::ptr::eq(old, new) {
            keys.extend(self.mapped(old));
        }
        distinct(keys)
    }

    fn enqueue(
        &self,
        keys: impl IntoIterator<Item = ObjectKey>,
        event: &Change<'_, S>,
        initial: bool,
    ) {
        let priority =
            if self.prioritize { event_priority(event, initial) } else { Priority::NORMAL };
        for key in keys {
            self.add_reason(&key, event, initial);
            self.queue.add_with_priority(key, priority);
        }
    }

    /// Records why `key` is queued. A related object's reason names it (a kind and a key to
    /// allocate): it is built only if the key does not have it yet.
    fn add_reason(&self, key: &ObjectKey, event: &Change<'_, S>, initial: bool) {
        let (object, how) = match event {
            Change::Add(o) => (*o, Event::Added),
            Change::Update { new, .. } => (*new, Event::Updated),
            Change::Delete(o) => (*o, Event::Deleted),
        };
        let owned = match self.mapper {
            Mapper::Own => return self.reasons.add(key, self.reason(event, initial)),
            Mapper::Owner(_) => true,
            Mapper::Map(_) => false,
        };
        let meta = object.meta();
        let names_it = |kind: &str, related: &ObjectKey, event: &Event| {
            *kind == *self.kind
                && *event == how
                && related.name == meta.name.as_deref().unwrap_or_default()
                && related.namespace.as_deref() == meta.namespace.as_deref()
        };
        let same = |reason: &Reason| match reason {
            Reason::Owned { kind, key, event } if owned => names_it(kind, key, event),
            Reason::Watched { kind, key, event } if !owned => names_it(kind, key, event),
            _ => false,
        };
        self.reasons.add_with(key, same, || self.reason(event, initial));
    }

    /// Why an event queues a key: the primary's own change, or that of a related object.
    fn reason(&self, event: &Change<'_, S>, initial: bool) -> Reason {
        let (object, how) = match event {
            Change::Add(o) => (*o, Event::Added),
            Change::Update { new, .. } => (*new, Event::Updated),
            Change::Delete(o) => (*o, Event::Deleted),
        };
        let related = || {
            (
                self.kind.clone(),
                meta_namespace_key_func(object).unwrap_or_else(|_| ObjectKey::cluster("")),
            )
        };
        match (&self.mapper, event) {
            (Mapper::Own, Change::Add(_)) => Reason::Added { initial },
            (Mapper::Own, Change::Update { old, new }) => own_update(*old, *new),
            (Mapper::Own, Change::Delete(_)) => Reason::Deleted,
            (Mapper::Owner(_), _) => {
                let (kind, key) = related();
                Reason::Owned { kind, key, event: how }
            }
            (Mapper::Map(_), _) => {
                let (kind, key) = related();
                Reason::Watched { kind, key, event: how }
            }
        }
    }

    /// Whether each event's key is the object's own, with nothing else to look at: then its
    /// keys and versions suffice, and a store of JSON decodes nothing for it.
    fn keys_only(&self) -> bool {
        self.predicate.is_none() && matches!(self.mapper, Mapper::Own)
    }
}

impl<S: InformerObject> InlineHandler<S> for EnqueueHandler<S> {
    fn reads_objects(&self) -> bool {
        !self.keys_only()
    }

    /// The same keys at the same priorities as the object path (see [`event_priority`]).
    fn handle_keys(&self, notification: &Notification<S>) -> bool {
        if !self.keys_only() {
            return false;
        }
        let (key, unchanged) = match notification {
            Notification::Add(object, initial) => (object.key(), *initial),
            Notification::Update(old, new) => {
                (new.key(), old.same(new) || old.resource_version() == new.resource_version())
            }
            Notification::Delete(deleted) => {
                (deletion_handling_meta_namespace_key_func(deleted).ok(), false)
            }
        };
        let priority = if self.prioritize && unchanged { Priority::LOW } else { Priority::NORMAL };
        if let Some(key) = key {
            let reason = match notification {
                Notification::Add(_, initial) => Reason::Added { initial: *initial },
                Notification::Update(_, _) if unchanged => Reason::Resync,
                // Told from what the store keeps beside each object's text: no decode.
                Notification::Update(old, new) => Reason::Updated(Changed::from_parts(
                    (old.generation(), new.generation()),
                    old.metadata_changed(new),
                )),
                Notification::Delete(_) => Reason::Deleted,
            };
            self.reasons.add(&key, reason);
            self.queue.add_with_priority(key, priority);
        }
        true
    }
}

impl<S: InformerObject> ResourceEventHandler<S> for EnqueueHandler<S> {
    fn on_add(&self, object: &Arc<S>, is_in_initial_list: bool) {
        let event = Change::Add(object.as_ref());
        if self.passes(&event, object) {
            self.enqueue(self.keys(object), &event, is_in_initial_list);
        }
    }

    fn on_update(&self, old: &Arc<S>, new: &Arc<S>) {
        let event = Change::Update { old: old.as_ref(), new: new.as_ref() };
        if !self.passes(&event, new) {
            return;
        }
        self.enqueue(self.update_keys(old, new), &event, false);
    }

    fn on_delete(&self, deleted: &Deleted<S>) {
        let object = deleted.object();
        let event = Change::Delete(object.as_ref());
        if !self.passes(&event, object) {
            return;
        }
        match self.mapper {
            // A tombstone carries its key: client-go's DeletionHandlingMetaNamespaceKeyFunc.
            Mapper::Own => {
                self.enqueue(deletion_handling_meta_namespace_key_func(deleted).ok(), &event, false)
            }
            _ => self.enqueue(self.keys(object), &event, false),
        }
    }
}

/// The reason of an update of the primary object: a resync when nothing changed (the same
/// object, or the same version), else the parts that changed.
fn own_update<S: InformerObject>(old: &S, new: &S) -> Reason {
    if std::ptr::eq(old, new) || old.meta().resource_version == new.meta().resource_version {
        return Reason::Resync;
    }
    Reason::Updated(Changed::between(old, new))
}

/// The keys of `object`'s controlling owners of kind `owner` (there is at most one in a valid
/// object; all are taken).
fn owner_keys<S: Resource>(object: &S, owner: &OwnerKind) -> Vec<ObjectKey> {
    let meta = object.meta();
    let Some(references) = &meta.owner_references else { return Vec::new() };
    references
        .iter()
        .filter(|r| r.controller == Some(true) && r.kind == owner.kind)
        .filter(|r| group_of(&r.api_version) == owner.group)
        .filter_map(|r| match (owner.namespaced, meta.namespace.as_deref()) {
            (Some(false), _) | (None, None) => Some(ObjectKey::cluster(&r.name)),
            (_, Some(ns)) => Some(ObjectKey::namespaced(ns, &r.name)),
            // A cluster-scoped object cannot have a namespaced owner.
            (Some(true), None) => None,
        })
        .collect()
}

/// `keys` without repeats, in the order each first came.
fn distinct(keys: Vec<ObjectKey>) -> Vec<ObjectKey> {
    if keys.len() < 2 {
        return keys;
    }
    // The set borrows the keys (no clone of each, as a set of owned keys would need); it is
    // done with before they move into the result.
    let mut seen = HashSet::with_capacity(keys.len());
    let first: Vec<bool> = keys.iter().map(|key| seen.insert(key)).collect();
    drop(seen);
    keys.into_iter().zip(first).filter_map(|(key, first)| first.then_some(key)).collect()
}

/// The group of an `apiVersion`: `apps` of `apps/v1`, empty for the core `v1`.
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

fn describe<S: Resource>(object: &S) -> String {
    meta_namespace_key_func(object).map_or_else(|_| "<no name>".to_owned(), |k| k.to_string())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;

    fn owned(ns: Option<&str>, refs: serde_json::Value) -> ConfigMap {
        serde_json::from_value(json!({"metadata": {
            "name": "cm", "namespace": ns, "ownerReferences": refs,
        }}))
        .unwrap()
    }

    fn reference(api_version: &str, kind: &str, name: &str, controller: bool) -> serde_json::Value {
        json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": "u", "controller": controller})
    }

    fn handler(mapper: Mapper<ConfigMap>) -> EnqueueHandler<ConfigMap> {
        let queue = WorkQueue::builder().build();
        let (reasons, kind) = (Reasons::default(), Arc::from("ConfigMap"));
        EnqueueHandler { queue, predicate: None, mapper, prioritize: true, reasons, kind }
    }

    #[test]
    fn an_update_names_each_key_once_however_many_sides_point_to_it() {
        // Two adds of one key let a worker take the first before the second comes: two
        // reconciles for one change (seen in e2e on a real server).
        let sets = OwnerKind {
            group: "ctrlkit.example.com".into(),
            kind: "ConfigMapSet".into(),
            namespaced: Some(true),
        };
        let refs = |names: &[&str]| {
            let refs = names
                .iter()
                .map(|n| reference("ctrlkit.example.com/v1", "ConfigMapSet", n, true))
                .collect();
            owned(Some("ns"), serde_json::Value::Array(refs))
        };
        let owners = handler(Mapper::Owner(sets));
        assert_eq!(
            owners.update_keys(&refs(&["a"]), &refs(&["a"])),
            [ObjectKey::namespaced("ns", "a")],
            "an owned object changed under the same owner"
        );
        assert_eq!(
            owners.update_keys(&refs(&["a"]), &refs(&["b"])),
            [ObjectKey::namespaced("ns", "b"), ObjectKey::namespaced("ns", "a")],
            "moved from one owner to another: both, the new one first"
        );
        let mapper: MapFn<ConfigMap> =
            Arc::new(|_| vec![ObjectKey::namespaced("ns", "x"), ObjectKey::namespaced("ns", "x")]);
        assert_eq!(
            handler(Mapper::Map(mapper)).update_keys(&refs(&[]), &refs(&[])),
            [ObjectKey::namespaced("ns", "x")],
            "a mapper's repeats, on either side"
        );
        let (x, y) = (ObjectKey::namespaced("ns", "x"), ObjectKey::namespaced("ns", "y"));
        let repeats = [x.clone(), y.clone(), x.clone(), y.clone()];
        let mapper: MapFn<ConfigMap> = Arc::new(move |_| repeats.to_vec());
        assert_eq!(
            handler(Mapper::Map(mapper)).keys(&refs(&[])),
            [x, y],
            "an added object's keys: each once, in the order the mapper first gave it"
        );
    }

    #[test]
    fn only_controlling_owners_of_the_primary_group_and_kind_count() {
        let sets = OwnerKind {
            group: "ctrlkit.example.com".into(),
            kind: "ConfigMapSet".into(),
            namespaced: Some(true),
        };
        let cm = owned(
            Some("ns"),
            json!([
                reference("ctrlkit.example.com/v1", "ConfigMapSet", "mine", true),
                reference("ctrlkit.example.com/v1", "ConfigMapSet", "not-controller", false),
                reference("other.example.com/v1", "ConfigMapSet", "other-group", true),
                reference("ctrlkit.example.com/v1", "Other", "other-kind", true),
                reference("ctrlkit.example.com/v2", "ConfigMapSet", "any-version", true),
            ]),
        );
        assert_eq!(
            owner_keys(&cm, &sets),
            [ObjectKey::namespaced("ns", "mine"), ObjectKey::namespaced("ns", "any-version")]
        );
        let core = OwnerKind { group: String::new(), kind: "Pod".into(), namespaced: Some(true) };
        let by_pod = owned(Some("ns"), json!([reference("v1", "Pod", "p", true)]));
        assert_eq!(owner_keys(&by_pod, &core), [ObjectKey::namespaced("ns", "p")]);
        let cluster = OwnerKind { namespaced: Some(false), ..sets };
        assert_eq!(
            owner_keys(&cm, &cluster)[0],
            ObjectKey::cluster("mine"),
            "a cluster-scoped owner's key has no namespace"
        );
    }
}

#[cfg(test)]
mod cost_tests {
    use std::borrow::Cow;
    use std::cell::Cell;

    use k8s_openapi::NamespaceResourceScope;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::*;
    use crate::cache::{Codec, Stored};

    thread_local! {
        /// How often a [`Probe`] was serialized or deserialized on this thread.
        static CODED: Cell<usize> = const { Cell::new(0) };
    }

    #[derive(Clone, Debug, Default, Serialize, Deserialize)]
    struct Inner {
        metadata: ObjectMeta,
        spec: String,
    }

    /// An object that counts its serializations and decodes.
    #[derive(Clone, Debug, Default)]
    struct Probe(Inner);

    impl Serialize for Probe {
        fn serialize<Z: Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
            CODED.with(|c| c.set(c.get() + 1));
            self.0.serialize(s)
        }
    }

    impl<'de> Deserialize<'de> for Probe {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            CODED.with(|c| c.set(c.get() + 1));
            Inner::deserialize(d).map(Probe)
        }
    }

    impl Resource for Probe {
        type DynamicType = ();
        type Scope = NamespaceResourceScope;
        fn kind(_: &()) -> Cow<'_, str> {
            "Probe".into()
        }
        fn group(_: &()) -> Cow<'_, str> {
            "".into()
        }
        fn version(_: &()) -> Cow<'_, str> {
            "v1".into()
        }
        fn plural(_: &()) -> Cow<'_, str> {
            "probes".into()
        }
        fn meta(&self) -> &ObjectMeta {
            &self.0.metadata
        }
        fn meta_mut(&mut self) -> &mut ObjectMeta {
            &mut self.0.metadata
        }
    }

    fn probe(rv: &str, generation: i64, label: &str) -> Arc<Probe> {
        Arc::new(Probe(Inner {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                generation: Some(generation),
                labels: Some([("l".to_owned(), label.to_owned())].into()),
                ..Default::default()
            },
            spec: "x".repeat(generation as usize),
        }))
    }

    fn handler(reasons: &Reasons) -> EnqueueHandler<Probe> {
        EnqueueHandler {
            queue: WorkQueue::new(),
            predicate: None,
            mapper: Mapper::Own,
            prioritize: true,
            reasons: reasons.clone(),
            kind: "Probe".into(),
        }
    }

    fn updated(reasons: &Reasons) -> Vec<Reason> {
        reasons.take(&ObjectKey::namespaced("ns", "p")).reasons
    }

    #[tokio::test]
    async fn an_update_of_the_primary_is_told_without_serializing_or_decoding_it() {
        let reasons = Reasons::default();
        let handler = handler(&reasons);
        let (old, spec, labels) = (probe("1", 1, "a"), probe("2", 2, "a"), probe("3", 1, "b"));
        CODED.with(|c| c.set(0));
        handler.on_update(&old, &spec);
        handler.on_update(&old, &labels);
        assert_eq!(CODED.with(Cell::get), 0, "the decoded path serialized an object");
        assert_eq!(
            updated(&reasons),
            [
                Reason::Updated(Changed { spec: true, metadata: false, other: false }),
                Reason::Updated(Changed { spec: false, metadata: true, other: false }),
            ]
        );

        // A compact store's objects, kept as their JSON (none hot): nothing is decoded.
        let codec = Codec::<Probe>::json(0);
        let (old, spec, labels) =
            (codec.store(old, false), codec.store(spec, false), codec.store(labels, false));
        assert!(matches!(old, Stored::Compact(_)));
        CODED.with(|c| c.set(0));
        assert!(handler.handle_keys(&Notification::Update(old.clone(), spec)));
        assert!(handler.handle_keys(&Notification::Update(old, labels)));
        assert_eq!(CODED.with(Cell::get), 0, "the compact path decoded an object");
        assert_eq!(
            updated(&reasons),
            [
                Reason::Updated(Changed { spec: true, metadata: false, other: false }),
                Reason::Updated(Changed { spec: false, metadata: true, other: false }),
            ]
        );
    }
}
