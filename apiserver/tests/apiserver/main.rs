//! The API server protocol, checked through kube-client as controllers use it: one suite,
//! run by this crate's harness (`ctrlkit_apiserver::harness`) against the embedded server
//! and, when `CTRLKIT_E2E_KUBECONFIG` names one, a real kube-apiserver. Each module registers
//! its cases with `case!` beside them.

use std::process::ExitCode;

mod admission;
mod apply;
mod apply_custom_lists;
mod builtin;
mod common;
mod crd;
mod crud;
mod faults;
mod kubectl;
mod list;
mod metadata;
mod misshapen;
mod negotiation;
mod protobuf;
mod shapes;
mod tables;
mod typed_json;
mod wait;
mod watch;

fn main() -> ExitCode {
    ctrlkit_apiserver::harness::main_with(common::server)
}
