//! The strategies of core/v1 kinds with rules of their own (kube's `pkg/registry/core/<kind>`).
//! Each file implements `Strategy` for one kind; it imports `model` and the registry's trait,
//! and the server registers it (`server/mod.rs`).

pub(crate) mod configmap;
pub(crate) mod secret;
