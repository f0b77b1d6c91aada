//! The strategies of `batch/v1` (kube's `pkg/registry/batch/<kind>`): a Job's Table printer.
//! It imports `model` and the registry's trait and printers.

pub(crate) mod job;
