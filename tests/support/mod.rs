//! What ctrlkit's suites share beyond the embedded server's harness
//! (`ctrlkit_apiserver::harness`, on which the end-to-end suite `tests/e2e` runs every case
//! on the embedded server and, when `CTRLKIT_E2E_KUBECONFIG` names one, a real
//! kube-apiserver): replica processes under chaos, seeded convergence runs, HTTPS helpers,
//! scripted servers, and `observe`, which also serves the controller tests
//! (`tests/controller`).
#![allow(dead_code)] // each test binary uses part of the support code

pub mod chaos;
pub mod convergence;
pub mod http;
pub mod observe;
pub mod scripted;

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
