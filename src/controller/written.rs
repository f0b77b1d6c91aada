//! [`Write`]: one write a reconcile made through a
//! [`recording_client`](super::recording_client), as its
//! [`ReconcileContext`](super::ReconcileContext) records it and the key's next reconcile
//! waits for it (the `writes` module).

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
    /// Whether it was a create with `generateName`.
    pub generate_name: bool,
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
}
