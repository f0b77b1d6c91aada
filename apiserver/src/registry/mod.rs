//! Layer 1, the registry: kube-apiserver's `pkg/registry`. It imports `model`, `storage`,
//! `merge` and itself, never admission, HTTP or the server, and offers [`Registry`] (the REST
//! verbs on the store), the `Strategy` trait and one strategy per kind with rules of its own
//! (`core`, `apiextensions`, `admissionregistration`), `/scale` and the garbage collector.
//!
//! REST semantics on top of the store, as kube-apiserver's generic registry applies them:
//! metadata on create, optimistic concurrency on update, generation, the status
//! subresource, finalizers on delete.

pub(crate) mod admissionregistration;
pub(crate) mod apiextensions;
pub(crate) mod core;
mod delete;
pub(crate) mod gc;
mod generic;
mod meta;
pub(crate) mod scale;
pub(crate) mod stages;
mod strategy;
pub(crate) mod writes;

pub(crate) use delete::{
    DeleteOptions, Deletion, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation, delete_in,
};
pub(crate) use generic::{Registry, Target};
pub(crate) use meta::{has_finalizers, parse_body};
pub(crate) use strategy::Strategy;
