//! [`ControllerStats`]: counts of what a controller's workers did, shared by its clones.

use std::sync::atomic::AtomicU64;

/// Counts of what the workers did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ControllerStats {
    /// Reconciles that returned `Ok`.
    pub succeeded: u64,
    /// Reconciles that returned `Err`.
    pub failed: u64,
    /// Reconciles that panicked (caught), and processings of a key that panicked outside the
    /// reconcile (a rate limiter's code, say; caught, the key retried). A metrics hook's panic
    /// is not counted here: it costs only its observation.
    pub panicked: u64,
    /// Keys given up on after the last retry.
    pub dropped: u64,
    /// Reconciles that returned an error the reconciler called terminal (not retried).
    pub terminal: u64,
    /// Reconciles still running when the shutdown grace period ran out (or when the run was
    /// dropped), abandoned.
    pub abandoned: u64,
    /// Reconciles that started on caches without the writes their key's last reconcile
    /// made, after their key was parked for
    /// [`Config::stale_cache_timeout`](super::Config::stale_cache_timeout).
    pub stale_cache_timeouts: u64,
    /// Reconciles held until the controller's caches caught up with the writes the key's last
    /// reconcile made (those that timed out among them): one per set of writes, however often
    /// the key came back to a worker while parked.
    pub holds: u64,
    /// Keys not reconciled because a Lease the controller runs under (under a
    /// [`Manager`](crate::manager::Manager): the leader's, or the shard's) had lapsed by this
    /// replica's own clock when the reconcile was about to start; each was queued again.
    pub fenced: u64,
    /// Reconciles that ended after a Lease the controller runs under had lapsed by this
    /// replica's clock: the process was frozen or starved while they ran, and another
    /// replica may have reconciled the key meanwhile (each is logged as an error).
    pub outlived_lease: u64,
}

/// The counters behind [`ControllerStats`], shared by a controller's clones.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) succeeded: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) panicked: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) terminal: AtomicU64,
    pub(crate) abandoned: AtomicU64,
    pub(crate) stale_cache_timeouts: AtomicU64,
    pub(crate) holds: AtomicU64,
    pub(crate) fenced: AtomicU64,
    pub(crate) outlived_lease: AtomicU64,
}
