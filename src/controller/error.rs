//! Why a controller stopped ([`ControllerError`]) and why it gave up on a key
//! ([`ReconcileFailure`], what the `on_dropped` hook receives): the reconciler's error kept
//! whole, with its source chain.

use std::sync::Arc;
use std::time::Duration;

use crate::cache::{CacheSyncError, ObjectKey};

/// Why a controller stopped with an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControllerError {
    /// Its caches did not sync: shut down first (naming the informers that had not synced),
    /// or an informer's run ended before its first list.
    #[error("the controller's caches did not sync: {0}")]
    CacheSync(#[from] CacheSyncError),
    /// An informer the controller reads stopped while it ran (its owner shut it down, or its
    /// run ended), so its cache would no longer change.
    #[error("the informer for {informer} stopped; the controller's cache would no longer change")]
    InformerStopped {
        /// What the informer lists and watches.
        informer: String,
    },
    /// `run` was called on a controller that ran already (its queue is shut down).
    #[error("this controller has run already; build a new one to run again")]
    AlreadyRun,
    /// A shard of a ring of shard selectors gave ranges up, but reconciles there did not end
    /// within the ring's [hand-off timeout](crate::sharding::Ring::hand_off_timeout): the
    /// controller aborted its reconciles and stopped, so that its ranges can move (a
    /// [`Manager`](crate::manager::Manager) then releases the shard's Lease).
    #[error(
        "shard {shard} of ring {ring} gave ranges up, but the reconciles of {keys} there did \
         not end within {waited:?}: it fenced itself (its reconciles aborted) so that the \
         ranges can move"
    )]
    HandOffTimeout {
        /// The shard.
        shard: String,
        /// The ring.
        ring: String,
        /// How long it waited.
        waited: Duration,
        /// The keys whose reconciles held the hand-off up, comma-separated.
        keys: String,
    },
}

/// A reconciler's error as the controller keeps it: the error itself, its `source()` chain
/// intact (downcast it with `error.downcast_ref::<MyError>()`).
pub type SharedError = Arc<dyn std::error::Error + Send + Sync>;

/// Why a key was given up on, as the `on_dropped` hook receives it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ReconcileFailure {
    /// The reconciler returned this error.
    Error(SharedError),
    /// The reconciler panicked with this message.
    Panic(String),
    /// The reconcile ran longer than the controller's reconcile timeout.
    Timeout(Duration),
    /// The reconciler returned this error and called it terminal
    /// ([`Reconciler::is_terminal`](super::Reconciler::is_terminal)): it was not retried.
    Terminal(SharedError),
}

impl ReconcileFailure {
    /// The reconciler's error, for `Error` and `Terminal`.
    pub fn error(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match self {
            Self::Error(e) | Self::Terminal(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

impl std::fmt::Display for ReconcileFailure {
    /// The failure with the error's whole source chain: `outer: cause: root cause`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Error(e) => write!(f, "{}", Chain(e.as_ref())),
            Self::Panic(p) => write!(f, "reconcile panicked: {p}"),
            Self::Timeout(t) => write!(f, "reconcile timed out after {t:?}"),
            Self::Terminal(e) => write!(f, "terminal error: {}", Chain(e.as_ref())),
        }
    }
}

/// An error and each of its sources, joined by `: `, as anyhow's `{:#}` prints them.
struct Chain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// Called for each key given up on: after its last retry, or at once for a terminal error.
pub type DroppedHook = Arc<dyn Fn(&ObjectKey, &ReconcileFailure) + Send + Sync>;
