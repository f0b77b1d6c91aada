//! One suite, two servers: the harness and the per-test [`Target`] shared by the embedded
//! server's protocol suite (`apiserver/tests/apiserver`, whose files they are) and the
//! end-to-end suite (`tests/e2e`); `observe` also serves the informer and controller tests
//! (`tests/controller`).
//!
//! Every case runs against ctrlkit's embedded API server; a case marked for both servers
//! runs against a real kube-apiserver too when `CTRLKIT_E2E_KUBECONFIG` names a kubeconfig
//! (`scripts/e2e.sh` starts one and sets it). Without it, the real-server cases are listed
//! as ignored, with a line that says why.
#![allow(dead_code)] // each test binary uses part of the support code

pub mod chaos;
pub mod convergence;
// harness, proxy, requests and target are the embedded server crate's (its protocol suite
// runs on them).
#[path = "../../apiserver/tests/support/harness.rs"]
pub mod harness;
pub mod http;
pub mod observe;
#[path = "../../apiserver/tests/support/proxy.rs"]
pub mod proxy;
#[path = "../../apiserver/tests/support/requests.rs"]
pub mod requests;
pub mod scripted;
#[path = "../../apiserver/tests/support/target.rs"]
pub mod target;

#[allow(unused_imports)] // the harness binaries use them, tests/controller does not
pub use harness::{Case, Needs};
#[allow(unused_imports)]
pub use target::{KUBECTL_POD, Target};

/// A reconciler's error in the tests: a message, and the error it came from, if any (its
/// `source()`), so that the tests see what the controller keeps of a cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    pub message: String,
    pub cause: Option<Box<Failed>>,
}

impl Failed {
    /// `message`, caused by `cause`.
    pub fn caused_by(message: &str, cause: &str) -> Self {
        Self { message: message.to_owned(), cause: Some(Box::new(cause.into())) }
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_deref().map(|c| c as _)
    }
}

impl From<&str> for Failed {
    fn from(message: &str) -> Self {
        Self { message: message.to_owned(), cause: None }
    }
}

impl From<String> for Failed {
    fn from(message: String) -> Self {
        Self { message, cause: None }
    }
}
