//! Whether an update changed an object's metadata, told without serializing it: the fields a
//! controller acts on (labels, annotations, finalizers, ownerReferences, the deletion's
//! timestamp and grace period) compared as they are, or through a fingerprint of them that a
//! compact store computes once when it stores an object (its text is not decoded to compare).
//!
//! `resourceVersion`, `managedFields` and `generation` are left out: every write moves the
//! first two, and the generation says whether the spec changed. The name, namespace, uid and
//! creation timestamp do not change in an update.

use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Whether the compared metadata fields differ between `old` and `new`.
pub(crate) fn metadata_changed(old: &ObjectMeta, new: &ObjectMeta) -> bool {
    old.labels != new.labels
        || old.annotations != new.annotations
        || old.finalizers != new.finalizers
        || old.owner_references != new.owner_references
        || old.deletion_timestamp != new.deletion_timestamp
        || old.deletion_grace_period_seconds != new.deletion_grace_period_seconds
}

/// A hash of the fields [`metadata_changed`] compares: equal fields give equal fingerprints,
/// and different ones differ but for a 64-bit hash's collisions.
pub(crate) fn metadata_fingerprint(meta: &ObjectMeta) -> u64 {
    let mut hasher = DefaultHasher::new();
    meta.labels.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.finalizers.hash(&mut hasher);
    let references = meta.owner_references.as_deref().unwrap_or_default();
    references.len().hash(&mut hasher);
    for r in references {
        (&r.api_version, &r.kind, &r.name, &r.uid).hash(&mut hasher);
        (r.controller, r.block_owner_deletion).hash(&mut hasher);
    }
    // A Time has no Hash: its RFC 3339 text would allocate, so only whether it is set (it is
    // set once, when the deletion starts; the grace period is what moves after).
    meta.deletion_timestamp.is_some().hash(&mut hasher);
    meta.deletion_grace_period_seconds.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    fn meta() -> ObjectMeta {
        ObjectMeta {
            name: Some("a".into()),
            labels: Some([("app".to_owned(), "x".to_owned())].into()),
            resource_version: Some("1".into()),
            generation: Some(1),
            ..Default::default()
        }
    }

    #[test]
    fn each_compared_field_counts_and_the_volatile_ones_do_not() {
        let base = meta();
        let mut volatile = base.clone();
        volatile.resource_version = Some("2".into());
        volatile.generation = Some(2);
        volatile.managed_fields = Some(vec![Default::default()]);
        assert!(!metadata_changed(&base, &volatile));
        assert_eq!(metadata_fingerprint(&base), metadata_fingerprint(&volatile));
        let changes: [fn(&mut ObjectMeta); 6] = [
            |m| m.labels = None,
            |m| m.annotations = Some([("a".to_owned(), String::new())].into()),
            |m| m.finalizers = Some(vec!["f".into()]),
            |m| {
                m.owner_references =
                    Some(vec![OwnerReference { name: "o".into(), ..Default::default() }])
            },
            |m| m.deletion_timestamp = Some(Time(Default::default())),
            |m| m.deletion_grace_period_seconds = Some(30),
        ];
        for (i, change) in changes.into_iter().enumerate() {
            let mut changed = base.clone();
            change(&mut changed);
            assert!(metadata_changed(&base, &changed), "field {i}");
            assert_ne!(metadata_fingerprint(&base), metadata_fingerprint(&changed), "field {i}");
        }
    }
}
