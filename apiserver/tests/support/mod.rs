//! The harness and the per-test [`Target`] of the protocol suite (`tests/apiserver`): every
//! case runs against the embedded API server; a case marked for both servers runs against a
//! real kube-apiserver too when `CTRLKIT_E2E_KUBECONFIG` names a kubeconfig (the repository's
//! `scripts/e2e.sh` starts one and sets it). Without it, the real-server cases are listed as
//! ignored, with a line that says why. ctrlkit's own suites (`tests/e2e`, `tests/controller`)
//! use these files too.
#![allow(dead_code)] // each test binary uses part of the support code

pub mod harness;
pub mod proxy;
pub mod requests;
pub mod target;

pub use harness::{Case, Needs};
pub use target::{KUBECTL_POD, Target};
