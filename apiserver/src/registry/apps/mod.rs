//! The strategies of `apps/v1` (kube's `pkg/registry/apps/<kind>`): each workload's Table
//! printer. They import `model` and the registry's trait and printers.

pub(crate) mod daemonset;
pub(crate) mod deployment;
pub(crate) mod replicaset;
pub(crate) mod statefulset;
