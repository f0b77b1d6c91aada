//! [`Predicate`]s: what an event must satisfy before its key is enqueued
//! (controller-runtime's `predicate` package), on the primary kind and on each secondary one.
//!
//! A predicate sees the event: an add, an update with the old and the new object, or a
//! delete with the last known object. The built-in ones look at updates only and let adds
//! and deletes through, as controller-runtime's do: a controller still reconciles every
//! object once at start and hears of every delete. A resync is an update whose old and new
//! objects are the same, so `generation_changed`, `labels_changed`, `annotations_changed` and
//! `resource_version_changed` all filter resyncs out.
//!
//! A predicate that panics counts as passed (the panic is logged): an extra reconcile is
//! harmless, a lost one is not.

use std::sync::Arc;

use kube_client::Resource;

/// One change, as a predicate sees it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Change<'a, K> {
    /// An object appeared (or was listed at start).
    Add(&'a K),
    /// An object changed; on resync, `old` and `new` are the same object.
    Update {
        /// Before.
        old: &'a K,
        /// After.
        new: &'a K,
    },
    /// An object went away; this is its last known state.
    Delete(&'a K),
}

type Filter<K> = Arc<dyn Fn(&Change<'_, K>) -> bool + Send + Sync>;

/// A filter on events; combine with [`and`](Self::and), [`or`](Self::or) and `!`.
///
/// ```
/// use ctrlkit::controller::Predicate;
/// use k8s_openapi::api::apps::v1::Deployment;
///
/// // Spec changes, or a change of the `tier` label.
/// let p: Predicate<Deployment> = Predicate::generation_changed().or(Predicate::on_update(
///     |old: &Deployment, new: &Deployment| {
///         let tier = |d: &Deployment| d.metadata.labels.as_ref().and_then(|l| l.get("tier")).cloned();
///         tier(old) != tier(new)
///     },
/// ));
/// ```
pub struct Predicate<K> {
    filter: Filter<K>,
}

impl<K> Clone for Predicate<K> {
    fn clone(&self) -> Self {
        Self { filter: self.filter.clone() }
    }
}

impl<K> std::fmt::Debug for Predicate<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Predicate").finish_non_exhaustive()
    }
}

impl<K: 'static> Predicate<K> {
    /// A predicate from any function of the event.
    pub fn new(f: impl Fn(&Change<'_, K>) -> bool + Send + Sync + 'static) -> Self {
        Self { filter: Arc::new(f) }
    }

    /// A predicate on updates (`f(old, new)`); adds and deletes pass.
    pub fn on_update(f: impl Fn(&K, &K) -> bool + Send + Sync + 'static) -> Self {
        Self::new(move |event| match event {
            Change::Update { old, new } => f(old, new),
            _ => true,
        })
    }

    /// Whether `event` passes.
    pub fn evaluate(&self, event: &Change<'_, K>) -> bool {
        (self.filter)(event)
    }

    /// Passes what both pass.
    #[must_use]
    pub fn and(self, other: Predicate<K>) -> Self {
        Self::new(move |event| self.evaluate(event) && other.evaluate(event))
    }

    /// Passes what either passes.
    #[must_use]
    pub fn or(self, other: Predicate<K>) -> Self {
        Self::new(move |event| self.evaluate(event) || other.evaluate(event))
    }
}

/// `!predicate` passes what `predicate` does not: adds and deletes too, as controller-runtime's
/// `Not` does, so `!Predicate::labels_changed()` drops adds. To negate a test on updates alone,
/// write it with [`Predicate::on_update`].
impl<K: 'static> std::ops::Not for Predicate<K> {
    type Output = Predicate<K>;

    fn not(self) -> Self::Output {
        Predicate::new(move |event| !self.evaluate(event))
    }
}

impl<K: Resource + 'static> Predicate<K> {
    /// Updates that change `metadata.generation`: spec changes, for kinds whose server counts
    /// generations (custom resources, Deployments; not ConfigMaps, nor Pods before Kubernetes
    /// 1.33, whose updates this filters out entirely). controller-runtime's
    /// `GenerationChangedPredicate`.
    pub fn generation_changed() -> Self {
        Self::on_update(|old: &K, new: &K| old.meta().generation != new.meta().generation)
    }

    /// Updates that change `metadata.labels` (`LabelChangedPredicate`).
    pub fn labels_changed() -> Self {
        Self::on_update(|old: &K, new: &K| old.meta().labels != new.meta().labels)
    }

    /// Updates that change `metadata.annotations` (`AnnotationChangedPredicate`).
    pub fn annotations_changed() -> Self {
        Self::on_update(|old: &K, new: &K| old.meta().annotations != new.meta().annotations)
    }

    /// Updates that change `metadata.resourceVersion`: every real change, no resync
    /// (`ResourceVersionChangedPredicate`).
    pub fn resource_version_changed() -> Self {
        Self::on_update(|old: &K, new: &K| {
            old.meta().resource_version != new.meta().resource_version
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;

    fn cm(generation: i64, rv: &str, labels: serde_json::Value) -> ConfigMap {
        serde_json::from_value(json!({"metadata": {
            "name": "cm", "generation": generation, "resourceVersion": rv, "labels": labels,
        }}))
        .unwrap()
    }

    #[test]
    fn built_in_predicates_judge_updates_and_pass_adds_and_deletes() {
        let a = cm(1, "10", json!({"app": "web"}));
        let relabelled = cm(1, "11", json!({"app": "db"}));
        let respecced = cm(2, "12", json!({"app": "web"}));
        let update = |old, new| Change::Update { old, new };
        let generation = Predicate::<ConfigMap>::generation_changed();
        assert!(!generation.evaluate(&update(&a, &relabelled)));
        assert!(generation.evaluate(&update(&a, &respecced)));
        assert!(!generation.evaluate(&update(&a, &a)), "a resync");
        assert!(generation.evaluate(&Change::Add(&a)) && generation.evaluate(&Change::Delete(&a)));
        let labels = Predicate::<ConfigMap>::labels_changed();
        assert!(labels.evaluate(&update(&a, &relabelled)));
        assert!(!labels.evaluate(&update(&a, &respecced)));
        let rv = Predicate::<ConfigMap>::resource_version_changed();
        assert!(rv.evaluate(&update(&a, &relabelled)) && !rv.evaluate(&update(&a, &a)));
    }

    #[test]
    fn predicates_combine() {
        let a = cm(1, "10", json!({"app": "web"}));
        let relabelled = cm(1, "11", json!({"app": "db"}));
        let update = Change::Update { old: &a, new: &relabelled };
        let generation = Predicate::<ConfigMap>::generation_changed();
        let labels = Predicate::<ConfigMap>::labels_changed();
        assert!(generation.clone().or(labels.clone()).evaluate(&update));
        assert!(!generation.clone().and(labels.clone()).evaluate(&update));
        assert!((!generation.clone()).evaluate(&update));
        assert!(!(!generation).evaluate(&Change::Add(&a)), "! flips adds too");
        let named = Predicate::<ConfigMap>::new(|e| matches!(e, Change::Delete(_)));
        assert!(named.evaluate(&Change::Delete(&a)) && !named.evaluate(&Change::Add(&a)));
    }
}
