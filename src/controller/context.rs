//! [`ReconcileContext`]: what a reconcile knows about its own run, reachable from inside it
//! without a change to the [`Reconciler`](super::Reconciler) trait: why the key was queued
//! since its last reconcile ([`Reason`]s), and what it wrote through a
//! [`recording_client`](super::recording_client).
//!
//! The context is a task-local of the worker's task, set for the length of one reconcile:
//! [`ReconcileContext::current`] answers `None` outside a reconcile and in a task the
//! reconciler spawned (run what it spawns in [`ReconcileContext::scope`]). The reasons also go in the
//! reconcile's log span (`reasons`), so every line it logs says why it ran.
//!
//! Reasons are collected in a side table of the controller, keyed by the key, where its
//! sources enqueue (the primary kind's events, owned and watched objects, triggers) and where
//! its workers requeue (an `Action`'s requeue, an error's retry), and taken when the key's
//! reconcile starts: the queue itself keeps only the key, so a burst of events still costs
//! one reconcile, and that reconcile sees every distinct reason of the burst. The table is
//! bounded: at most [`MAX_REASONS`] distinct reasons per key (past them, a count of the
//! queuings left out, built and compared no more) and [`MAX_KEYS`] keys (past them, a new key's reasons are left out, and its
//! reconcile says so with [`ReconcileContext::reasons_left_out`]). A requeue's reason is
//! recorded when the requeue is asked for, so a change that comes before the requeue's delay
//! runs the key with both reasons. A controller wired by hand ([`Controller::new`]
//! (super::Controller::new)) knows only its requeues and retries: its handlers are the user's.
//!
//! Reasons are for logs and traces, not to branch on: a reconcile must bring the world in line
//! whatever woke it (a lost event, a restart, a resync all look like nothing at all here).
//!
//! The context is built to carry more: a controller over many clusters will put the cluster's
//! name and client in it, reached the same way.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;

use crate::cache::ObjectKey;
use crate::cache::metadata_changed::metadata_changed;

use super::own_writes::Tracker;
use super::recorded_write::Write;

/// The most distinct reasons kept for one key between two reconciles.
pub const MAX_REASONS: usize = 16;
/// The most keys whose reasons a controller keeps at once (keys queued and not yet reconciled).
pub const MAX_KEYS: usize = 65_536;
/// The most writes one reconcile records (past them a write is sent, not recorded, and its
/// key's next reconcile does not wait for it).
pub const MAX_WRITES: usize = 1024;

/// Which parts of an object an update changed, told from its metadata alone (no object is
/// serialized or decoded to tell it), as controller-runtime's predicates tell them:
///
/// - `spec`: `metadata.generation` moved (`GenerationChangedPredicate`). The server moves it
///   on a change of the spec of a kind that has one (Deployments, custom resources with a
///   status subresource); a kind without a generation (ConfigMaps, Secrets) never sets `spec`.
/// - `metadata`: labels, annotations, finalizers, ownerReferences, the deletion timestamp or
///   its grace period changed (not `resourceVersion`, `managedFields` or `generation`).
/// - `other`: the object changed (its resourceVersion moved) and neither of the two did:
///   its status, for a kind with a generation; any content for a kind without one (a
///   ConfigMap's `data`). A status change that comes with a spec or metadata change is not
///   told apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Changed {
    /// `metadata.generation` moved.
    pub spec: bool,
    /// The metadata a controller acts on changed (see the type's docs).
    pub metadata: bool,
    /// Something else changed, and neither of the above: the status, or the content of a kind
    /// without a generation.
    pub other: bool,
}

impl Changed {
    /// What changed, from the old and new generations and whether the metadata changed; for
    /// an update whose resourceVersion moved.
    pub(crate) fn from_parts(generation: (Option<i64>, Option<i64>), metadata: bool) -> Self {
        let spec = generation.0 != generation.1;
        Self { spec, metadata, other: !spec && !metadata }
    }

    /// What changed between two decoded objects.
    pub(crate) fn between<K: kube_client::Resource>(old: &K, new: &K) -> Self {
        let (old, new) = (old.meta(), new.meta());
        Self::from_parts((old.generation, new.generation), metadata_changed(old, new))
    }
}

impl fmt::Display for Changed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<&str> =
            [(self.spec, "spec"), (self.metadata, "metadata"), (self.other, "other")]
                .into_iter()
                .filter_map(|(changed, name)| changed.then_some(name))
                .collect();
        match parts.is_empty() {
            true => f.write_str("nothing"),
            false => f.write_str(&parts.join("+")),
        }
    }
}

/// How a related object (owned or watched) changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Event {
    /// It appeared (or was listed at start).
    Added,
    /// It changed.
    Updated,
    /// It went away.
    Deleted,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Added => "added",
            Self::Updated => "updated",
            Self::Deleted => "deleted",
        })
    }
}

/// Why a key was queued.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// The object appeared (`initial`: listed when the informer started).
    Added {
        /// Whether it came with the informer's first list.
        initial: bool,
    },
    /// The object changed.
    Updated(Changed),
    /// The object went away.
    Deleted,
    /// The informer's periodic resync replayed the object unchanged.
    Resync,
    /// An object the primary owns (`ownerReferences`, controller) changed.
    Owned {
        /// Its kind (shared by every reason of the source: no allocation per reason).
        kind: Arc<str>,
        /// Its key.
        key: ObjectKey,
        /// How it changed.
        event: Event,
    },
    /// A watched object changed and the mapper named this key.
    Watched {
        /// Its kind (shared, as [`Reason::Owned`]'s).
        kind: Arc<str>,
        /// Its key.
        key: ObjectKey,
        /// How it changed.
        event: Event,
    },
    /// An external trigger ([`ControllerBuilder::trigger`](super::ControllerBuilder::trigger)).
    Triggered,
    /// The last reconcile asked for a requeue ([`Action::requeue_after`](super::Action::requeue_after)).
    Requeue,
    /// The last reconcile failed (an error, a panic, a timeout) and is retried.
    ErrorRetry,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Added { initial: true } => f.write_str("added (initial list)"),
            Self::Added { initial: false } => f.write_str("added"),
            Self::Updated(changed) => write!(f, "updated ({changed})"),
            Self::Deleted => f.write_str("deleted"),
            Self::Resync => f.write_str("resync"),
            Self::Owned { kind, key, event } => write!(f, "owned {kind} {key} {event}"),
            Self::Watched { kind, key, event } => write!(f, "watched {kind} {key} {event}"),
            Self::Triggered => f.write_str("triggered"),
            Self::Requeue => f.write_str("requeue"),
            Self::ErrorRetry => f.write_str("error retry"),
        }
    }
}

/// The distinct reasons one key was queued for, and how many were left out past the bound.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeyReasons {
    pub(crate) reasons: Vec<Reason>,
    left_out: usize,
}

impl KeyReasons {
    fn add(&mut self, reason: Reason) {
        if self.reasons.contains(&reason) {
            return;
        }
        match self.reasons.len() < MAX_REASONS {
            true => self.reasons.push(reason),
            false => self.left_out += 1,
        }
    }
}

impl ReasonTable {
    /// Records the first reason of a key it holds none for, within the bounds.
    fn add_new(&mut self, key: &ObjectKey, reason: Reason) {
        if self.by_key.len() >= MAX_KEYS {
            // The overflow set is bounded by the same figure: past it, a reconcile with no
            // reasons is all that is lost.
            if self.overflowed.len() < MAX_KEYS {
                self.overflowed.insert(key.clone());
            }
            return;
        }
        self.by_key.entry(key.clone()).or_default().add(reason);
    }
}

/// The controller's side table of reasons, keyed by key: filled where keys are queued, taken
/// when a key's reconcile starts. Cloning shares it.
#[derive(Clone, Default)]
pub(crate) struct Reasons(Arc<Mutex<ReasonTable>>);

#[derive(Default)]
struct ReasonTable {
    /// At most [`MAX_KEYS`] entries, each of at most [`MAX_REASONS`] reasons.
    by_key: HashMap<ObjectKey, KeyReasons>,
    /// Keys queued while the table was full, whose reasons were not kept.
    overflowed: std::collections::HashSet<ObjectKey>,
}

impl Reasons {
    /// Records that `key` was queued for `reason`.
    pub(crate) fn add(&self, key: &ObjectKey, reason: Reason) {
        let mut table = self.0.lock();
        if let Some(entry) = table.by_key.get_mut(key) {
            entry.add(reason);
            return;
        }
        table.add_new(key, reason);
    }

    /// Records that `key` was queued for the reason `make` builds, which `same` recognizes:
    /// a reason the key already has is not built again (a burst of events of one related
    /// object allocates its reason once).
    pub(crate) fn add_with(
        &self,
        key: &ObjectKey,
        same: impl Fn(&Reason) -> bool,
        make: impl FnOnce() -> Reason,
    ) {
        let mut table = self.0.lock();
        if let Some(entry) = table.by_key.get_mut(key) {
            if !entry.reasons.iter().any(same) {
                match entry.reasons.len() < MAX_REASONS {
                    true => entry.add(make()),
                    // Past the bound nothing is built: a parent of many children pays
                    // nothing per event once its reasons are full.
                    false => entry.left_out += 1,
                }
            }
            return;
        }
        table.add_new(key, make());
    }

    /// `key`'s reasons since its last reconcile, taken.
    pub(crate) fn take(&self, key: &ObjectKey) -> KeyReasons {
        let mut table = self.0.lock();
        let mut reasons = table.by_key.remove(key).unwrap_or_default();
        if table.overflowed.remove(key) {
            reasons.left_out += 1;
        }
        reasons
    }

    /// Forgets `key`'s reasons (a key this controller will not reconcile: another shard's).
    pub(crate) fn forget(&self, key: &ObjectKey) {
        let mut table = self.0.lock();
        table.by_key.remove(key);
        table.overflowed.remove(key);
    }

    /// Forgets every key's reasons (the controller's run ended).
    pub(crate) fn clear(&self) {
        let mut table = self.0.lock();
        *table = ReasonTable::default();
    }

    /// How many keys it holds reasons for.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.lock().by_key.len()
    }
}

tokio::task_local! {
    /// The context of the reconcile running on this task.
    static CONTEXT: Arc<ReconcileContext>;
}

/// What a running reconcile knows about itself: why its key was queued since its last
/// reconcile ([`reasons`](Self::reasons), also in the reconcile's span as `reasons`), and what
/// it wrote through a [`recording_client`](super::recording_client) ([`writes`](Self::writes)),
/// which the key's next reconcile waits for the caches to hold.
///
/// Reached with [`ReconcileContext::current`] from inside
/// [`Reconciler::reconcile`](super::Reconciler::reconcile): a task-local of the worker, set
/// for the length of one reconcile. Reasons are collected where the controller's sources
/// enqueue and its workers requeue, deduplicated, at most [`MAX_REASONS`] per key and
/// [`MAX_KEYS`] keys; they are for logs and traces, not to branch on (a lost event or a
/// restart looks like no reason at all).
#[derive(Debug)]
pub struct ReconcileContext {
    controller: String,
    key: ObjectKey,
    reasons: KeyReasons,
    /// What the reconcile wrote through a recording client, in order, at most
    /// [`MAX_WRITES`].
    writes: Mutex<Vec<Write>>,
    /// Writes past [`MAX_WRITES`], not recorded.
    writes_left_out: AtomicU64,
    /// The highest primary version reported by hand ([`report_write`](super::report_write)).
    pub(crate) reported: AtomicU64,
    /// Where creates with `generateName` raise their owners' counts (none with the guard
    /// off).
    tracker: Option<Arc<Tracker>>,
}

impl ReconcileContext {
    pub(crate) fn new(
        controller: &str,
        key: ObjectKey,
        reasons: KeyReasons,
        tracker: Option<Arc<Tracker>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            controller: controller.to_owned(),
            key,
            reasons,
            writes: Mutex::new(Vec::new()),
            writes_left_out: AtomicU64::new(0),
            reported: AtomicU64::new(0),
            tracker,
        })
    }

    /// The context of the reconcile running on this task; `None` outside one (and in a task
    /// the reconciler spawned: run that in [`scope`](Self::scope)).
    pub fn current() -> Option<Arc<ReconcileContext>> {
        CONTEXT.try_with(Arc::clone).ok()
    }

    /// The controller's name.
    pub fn controller(&self) -> &str {
        &self.controller
    }

    /// The key being reconciled.
    pub fn key(&self) -> &ObjectKey {
        &self.key
    }

    /// Why the key was queued since its last reconcile: each distinct reason once, in the
    /// order they came, at most [`MAX_REASONS`]. Empty for a key whose queuing the controller
    /// did not see (a controller wired by hand, a requeue asked for by a reconcile that a
    /// change overtook).
    pub fn reasons(&self) -> &[Reason] {
        &self.reasons.reasons
    }

    /// How many times the key was queued for a reason not kept, past the bounds (a reason
    /// left out is not remembered, so one that came again is counted again).
    pub fn reasons_left_out(&self) -> usize {
        self.reasons.left_out
    }

    /// The reasons as one line, as the reconcile's span shows them.
    pub fn describe_reasons(&self) -> String {
        let mut line =
            self.reasons.reasons.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        if self.reasons.left_out > 0 {
            if !line.is_empty() {
                line.push_str(", ");
            }
            line.push_str(&format!("{} more", self.reasons.left_out));
        }
        line
    }

    /// What this reconcile wrote so far through a
    /// [`recording_client`](super::recording_client), in order.
    pub fn writes(&self) -> Vec<Write> {
        self.writes.lock().clone()
    }

    /// Records `write` before it is sent (a create with `generateName` raises its owner's
    /// count of expected creations first); returns it as recorded, to settle it by.
    pub(crate) fn record(&self, mut write: Write) -> Write {
        let mut writes = self.writes.lock();
        if writes.len() >= MAX_WRITES {
            self.writes_left_out.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return write;
        }
        if let Some(tracker) = &self.tracker {
            tracker.expect(&mut write);
        }
        writes.push(write.clone());
        write
    }

    /// How many writes were sent past [`MAX_WRITES`] and not recorded.
    pub fn writes_left_out(&self) -> u64 {
        self.writes_left_out.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Settles the write recorded as `expected` before it was sent: replaced by what the
    /// answer tells (`Some`; a create keeps the owner it was counted under), or withdrawn
    /// (`None`: the server refused it, and the counts it raised are lowered).
    pub(crate) fn settle(&self, expected: &Write, answer: Option<Write>) {
        let mut writes = self.writes.lock();
        let Some(at) = writes.iter().rposition(|w| w == expected) else { return };
        match answer {
            Some(mut write) => {
                // An answer without the deleted object's uid keeps the one recorded.
                if write.uid.is_none() {
                    write.uid.clone_from(&expected.uid);
                }
                if expected.generate_name.is_some() {
                    write.generate_name.clone_from(&expected.generate_name);
                    write.owner.clone_from(&expected.owner);
                    write.raised.clone_from(&expected.raised);
                }
                writes[at] = write;
            }
            None => {
                writes.remove(at);
                drop(writes);
                if let Some(tracker) = &self.tracker {
                    tracker.withdraw(expected);
                }
            }
        }
    }

    /// The writes, taken (at the reconcile's end).
    pub(crate) fn take_writes(&self) -> Vec<Write> {
        std::mem::take(&mut *self.writes.lock())
    }

    /// Runs `future` with `context` as its current context: for work a reconcile spawns on
    /// other tasks (parallel creates), so that its writes through a
    /// [`recording_client`](super::recording_client) are recorded for the reconcile, which
    /// must await them before it returns (what is written after its end is not waited for):
    /// `tokio::spawn(ReconcileContext::scope(context.clone(), create))`.
    pub async fn scope<F: Future>(context: Arc<Self>, future: F) -> F::Output {
        CONTEXT.scope(context, future).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_kept_once_each_bounded_per_key_and_taken_by_the_reconcile() {
        let reasons = Reasons::default();
        let key = ObjectKey::namespaced("ns", "a");
        reasons.add(&key, Reason::Added { initial: false });
        reasons.add(&key, Reason::Resync);
        reasons.add(&key, Reason::Resync);
        for i in 0..(MAX_REASONS + 3) {
            let owned = ObjectKey::namespaced("ns", &format!("child-{i}"));
            reasons
                .add(&key, Reason::Owned { kind: "Pod".into(), key: owned, event: Event::Added });
        }
        let taken = reasons.take(&key);
        assert_eq!(taken.reasons[..2], [Reason::Added { initial: false }, Reason::Resync]);
        assert_eq!(taken.reasons.len(), MAX_REASONS, "bounded");
        assert_eq!(taken.left_out, 5, "the 2 + 19 distinct reasons past the first 16");
        assert_eq!(
            reasons.take(&key),
            KeyReasons::default(),
            "taken: the next reconcile starts afresh"
        );
        assert_eq!(reasons.len(), 0);
    }

    #[test]
    fn a_reconcile_records_a_bounded_number_of_writes() {
        let context = ReconcileContext::new("c", ObjectKey::cluster("a"), Default::default(), None);
        let write = Write {
            verb: super::super::Verb::Delete,
            group: String::new(),
            resource: "configmaps".into(),
            key: ObjectKey::namespaced("ns", "c"),
            resource_version: None,
            generate_name: None,
            labels: None,
            owner: None,
            answered: false,
            raised: Vec::new(),
            uid: None,
        };
        for _ in 0..(MAX_WRITES + 3) {
            context.record(write.clone());
        }
        assert_eq!(context.writes().len(), MAX_WRITES);
        assert_eq!(context.writes_left_out(), 3);
    }

    #[test]
    fn a_related_objects_reason_is_not_built_once_the_keys_reasons_are_full() {
        let reasons = Reasons::default();
        let key = ObjectKey::namespaced("ns", "parent");
        let built = std::cell::Cell::new(0);
        for i in 0..(MAX_REASONS + 10) {
            let child = ObjectKey::namespaced("ns", &format!("child-{i}"));
            reasons.add_with(
                &key,
                |_| false,
                || {
                    built.set(built.get() + 1);
                    Reason::Owned { kind: "Pod".into(), key: child, event: Event::Added }
                },
            );
        }
        assert_eq!(built.get(), MAX_REASONS, "built only while kept");
        assert_eq!(reasons.take(&key).left_out, 10);
    }

    #[test]
    fn the_table_holds_a_bounded_number_of_keys_and_says_what_it_left_out() {
        let reasons = Reasons::default();
        for i in 0..MAX_KEYS {
            reasons.add(&ObjectKey::cluster(&i.to_string()), Reason::Requeue);
        }
        let late = ObjectKey::cluster("late");
        reasons.add(&late, Reason::Deleted);
        assert_eq!(reasons.len(), MAX_KEYS);
        let taken = reasons.take(&late);
        assert!(taken.reasons.is_empty());
        assert_eq!(taken.left_out, 1, "its reconcile says a reason was left out");
    }

    #[test]
    fn an_update_names_the_parts_it_changed() {
        use k8s_openapi::api::apps::v1::Deployment;
        use k8s_openapi::api::core::v1::ConfigMap;
        let deployment = |labels: &str, generation: i64, replicas: i64| -> Deployment {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "d", "labels": {"l": labels}, "generation": generation},
                "status": {"replicas": replicas},
            }))
            .unwrap()
        };
        let base = deployment("a", 1, 0);
        let spec = Changed::between(&base, &deployment("a", 2, 0));
        assert_eq!(spec, Changed { spec: true, metadata: false, other: false });
        let status = Changed::between(&base, &deployment("a", 1, 1));
        assert_eq!(status, Changed { spec: false, metadata: false, other: true });
        let meta = Changed::between(&base, &deployment("b", 1, 0));
        assert_eq!(meta, Changed { spec: false, metadata: true, other: false });
        assert_eq!(Reason::Updated(meta).to_string(), "updated (metadata)");
        // A kind without a generation: a change of its content is "other".
        let cm = |data: &str| -> ConfigMap {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "c"}, "data": {"k": data},
            }))
            .unwrap()
        };
        assert_eq!(
            Changed::between(&cm("x"), &cm("y")),
            Changed { spec: false, metadata: false, other: true }
        );
    }
}
