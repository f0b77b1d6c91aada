//! The strategies of core/v1 kinds with rules of their own (kube's `pkg/registry/core/<kind>`).
//! Each file implements `Strategy` for one kind (`returns_object` for the few whose one rule is
//! a delete's answer); it imports `model`, `storage` and the registry's trait, and
//! `registry::kinds` registers it.

pub(crate) mod configmap;
pub(crate) mod event;
pub(crate) mod namespace;
pub(crate) mod pod;
pub(crate) mod returns_object;
pub(crate) mod secret;
pub(crate) mod service;
pub(crate) mod serviceaccount;
