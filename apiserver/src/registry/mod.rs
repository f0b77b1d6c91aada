//! Layer 1, the registry: kube-apiserver's `pkg/registry`. It imports `model`, `storage`,
//! `merge`, `auth` and itself, never admission, HTTP or the server, and offers [`Registry`]
//! (the REST verbs on the store), the `Strategy` trait and one strategy per kind with rules of
//! its own, in a folder per API group (`core`, `apps`, `batch`, `coordination`,
//! `apiextensions`, `admissionregistration`, `authentication`, `authorization`) and
//! registered by `kinds`, the Table printers' parts (`printers`), `/scale` and the garbage
//! collector. Every rule that depends on the kind is a hook of its strategy (or of its
//! group's): the generic registry does not ask which kind it holds (`scripts/check-kind-rules.py`
//! flags the common ways to, ARCHITECTURE.md says which it misses).
//!
//! REST semantics on top of the store, as kube-apiserver's generic registry applies them:
//! metadata on create, optimistic concurrency on update, generation, the status
//! subresource, finalizers on delete.

pub(crate) mod admissionregistration;
pub(crate) mod apiextensions;
pub(crate) mod apps;
pub(crate) mod authentication;
pub(crate) mod authorization;
pub(crate) mod batch;
pub(crate) mod coordination;
pub(crate) mod core;
mod delete;
pub(crate) mod gc;
mod generic;
mod kinds;
mod meta;
pub(crate) mod printers;
pub(crate) mod scale;
pub(crate) mod stages;
mod strategy;
pub(crate) mod writes;

pub(crate) use delete::{
    DeleteOptions, Deletion, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation,
};
pub(crate) use generic::{Registry, Target};
pub(crate) use meta::{has_finalizers, parse_body};
pub(crate) use strategy::{NameRule, Strategy};
