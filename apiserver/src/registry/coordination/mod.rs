//! The strategies of `coordination.k8s.io` (kube's `pkg/registry/coordination/lease`): a
//! Lease's Table printer. It imports `model` and the registry's trait and printers.

pub(crate) mod lease;
