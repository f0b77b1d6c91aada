//! [`Reconciler`]: the user's business logic, and [`Action`]: what to do with a key after.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::cache::ObjectKey;
use crate::workqueue::Priority;

/// What the controller does with a key after a successful reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Action {
    requeue_after: Option<Duration>,
    priority: Option<Priority>,
}

impl Action {
    /// Nothing more: the key comes back only when its object changes.
    pub fn done() -> Self {
        Self { requeue_after: None, priority: None }
    }

    /// Reconcile the key again after `delay` (at once for a zero delay), even if nothing
    /// changes, at [`Priority::NORMAL`] unless [`with_priority`](Self::with_priority) says
    /// otherwise.
    pub fn requeue_after(delay: Duration) -> Self {
        Self { requeue_after: Some(delay), priority: None }
    }

    /// The priority the requeue asked for goes in at (controller-runtime's
    /// `Result.Priority`). Without a requeue it changes nothing.
    #[must_use]
    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// The requested delay, if any.
    pub fn requeue_delay(&self) -> Option<Duration> {
        self.requeue_after
    }

    /// The priority asked for the requeue, if any.
    pub fn priority(&self) -> Option<Priority> {
        self.priority
    }
}

/// Brings the world in line with one object: the `syncToStdout` of client-go's
/// `examples/workqueue`.
///
/// `reconcile` receives the key and the object as the cache holds it now, `None` when it no
/// longer exists. An error is retried with the queue's rate limiter up to the controller's
/// retry limit, at the priority the key had; a panic is caught and handled as an error.
#[async_trait]
pub trait Reconciler: Send + Sync + 'static {
    /// The kind reconciled.
    type Object: Send + Sync + 'static;
    /// What a failed reconcile returns: an error with its cause (`source()`), kept as it is
    /// for the `on_dropped` hook ([`ReconcileFailure::Error`](super::ReconcileFailure::Error))
    /// and logged with its whole source chain. `kube::Error`, `std::io::Error`, a
    /// `thiserror` enum, `Box<dyn Error + Send + Sync>` (through a newtype) all fit;
    /// `std::convert::Infallible` for a reconciler that cannot fail.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Reconciles the object under `key`.
    async fn reconcile(
        &self,
        key: &ObjectKey,
        object: Option<Arc<Self::Object>>,
    ) -> Result<Action, Self::Error>;

    /// Whether `error` is terminal: retrying cannot help (a spec only its author can fix), so
    /// the key is not retried, but forgotten, counted (`ControllerStats::terminal`, and
    /// `controller_runtime_terminal_reconcile_errors_total`), logged and given to the
    /// `on_dropped` hook as `ReconcileFailure::Terminal`; it comes back when its object
    /// changes (controller-runtime's `reconcile.TerminalError`). Default: no error is.
    fn is_terminal(&self, error: &Self::Error) -> bool {
        let _ = error;
        false
    }
}
