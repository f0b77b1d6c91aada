//! [`Write`]: one write a reconcile made through a
//! [`recording_client`](super::recording_client), as its
//! [`ReconcileContext`](super::ReconcileContext) records it and the key's next reconcile
//! waits for it (the `own_writes` module).

use std::collections::BTreeMap;

use crate::cache::ObjectKey;

/// What a write did, as a [`Write`] records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verb {
    /// `POST`: a create.
    Create,
    /// `PUT`: an update (or a replace of a subresource).
    Update,
    /// `PATCH`, apply included.
    Patch,
    /// `DELETE` of one object.
    Delete,
}

/// One write a reconcile made through a [`recording_client`](super::recording_client), with
/// what the server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Write {
    /// What it did.
    pub verb: Verb,
    /// The API group of the resource written (empty for the core group).
    pub group: String,
    /// The resource, plural as in its URL (`configmaps`).
    pub resource: String,
    /// The object written (the name the server gave, for `generateName`).
    pub key: ObjectKey,
    /// The resourceVersion the server answered with; `None` for a delete that removed the
    /// object, and for a write whose answer never came.
    pub resource_version: Option<u64>,
    /// The `generateName` prefix of a create that gave no name of its own (the server named
    /// the object); `None` for every other write.
    pub generate_name: Option<String>,
    /// The written object's labels, as the answer gave them (a create's request, while its
    /// answer has not come); `None` where neither told them (a delete answered with a
    /// `Status`). A cache whose label selector these do not satisfy is not waited on.
    pub labels: Option<BTreeMap<String, String>>,
    /// The created object's controlling owner (`ownerReferences` with `controller: true`),
    /// in the object's namespace.
    pub owner: Option<ObjectKey>,
    /// Whether the server's answer was read. A write is recorded before it is sent, from its
    /// request, as client-go raises an expectation before a create; the answer settles it
    /// (or withdraws it: an answer that the write was refused). One whose answer was lost (the
    /// reconcile ended first, the connection dropped, a server error that may follow a
    /// commit) stays recorded unanswered: for a `generateName` create its `key` holds the
    /// prefix as its name.
    pub answered: bool,
    /// For a create with `generateName`: the ids of the caches in which it raised its owner's
    /// count of expected creations (the `expectations` module).
    pub(crate) raised: Vec<usize>,
    /// For a delete: the uid of the object it deleted (from its preconditions, its answer,
    /// or the cache when it was recorded). A cache that holds the name with another uid holds
    /// an object made again after the delete: the delete is caught up there.
    pub(crate) uid: Option<String>,
}
