//! [`InformerGuard`]: one user's hold on a shared informer, and [`GuardedInformer`], an
//! informer handed out with its guard.
//!
//! A [`SharedInformerFactory`](super::SharedInformerFactory) counts the guards it handed out
//! for each informer, one per user that asked (a controller for each kind it reads, a handler
//! registration, a reader), never the clones of an [`Informer`] handle: a clone is a way to
//! reach the informer, not a reason to keep it listing. When the last guard of an informer is
//! dropped, and no one asked for it without a guard, the factory stops its list and watch and
//! empties its store (marked [stale](super::Indexer::is_stale)); the next ask starts a new one.

use std::ops::Deref;
use std::sync::Weak;

use super::Informer;

/// What takes a guard back: the factory that handed it out.
pub(crate) trait ReleaseInformer: Send + Sync {
    /// One user of the informer `entry` is gone.
    fn release(&self, entry: u64);
}

/// One user's hold on a shared informer: while any guard of it lives, the informer keeps
/// listing and watching (once its factory started). When the last is dropped, and no one
/// asked for the informer without a guard, the factory forgets the informer, stops its list
/// and watch and empties its store, marked [stale](super::Indexer::is_stale); the next ask
/// starts a new one.
///
/// Not `Clone`: each user asks the factory for its own, so that the factory counts users,
/// not copies. Hold it as long as the informer is read, beside the handler registration or
/// the [`Indexer`](super::Indexer) it serves.
#[must_use = "the informer stops when its last guard is dropped"]
pub struct InformerGuard {
    owner: Weak<dyn ReleaseInformer>,
    entry: u64,
    informer: String,
}

impl InformerGuard {
    pub(crate) fn new(owner: Weak<dyn ReleaseInformer>, entry: u64, informer: String) -> Self {
        Self { owner, entry, informer }
    }

    /// What the guarded informer lists and watches.
    pub fn informer(&self) -> &str {
        &self.informer
    }
}

impl std::fmt::Debug for InformerGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerGuard").field("informer", &self.informer).finish()
    }
}

impl Drop for InformerGuard {
    fn drop(&mut self) {
        // A factory already dropped has stopped everything it ran.
        if let Some(owner) = self.owner.upgrade() {
            owner.release(self.entry);
        }
    }
}

/// A shared informer and the guard that keeps it running for one user; it reads as the
/// [`Informer`] (it derefs to it). Dropping it drops the guard; clones of the informer taken
/// from it do not keep the informer running.
#[must_use = "the informer stops when its last guard is dropped"]
pub struct GuardedInformer<K> {
    informer: Informer<K>,
    guard: InformerGuard,
}

impl<K> GuardedInformer<K> {
    pub(crate) fn new(informer: Informer<K>, guard: InformerGuard) -> Self {
        Self { informer, guard }
    }

    /// The informer.
    pub fn informer(&self) -> &Informer<K> {
        &self.informer
    }

    /// The guard.
    pub fn guard(&self) -> &InformerGuard {
        &self.guard
    }

    /// The informer and its guard, to keep apart (the guard with whatever must keep the
    /// informer running).
    pub fn into_parts(self) -> (Informer<K>, InformerGuard) {
        (self.informer, self.guard)
    }
}

impl<K> Deref for GuardedInformer<K> {
    type Target = Informer<K>;

    fn deref(&self) -> &Informer<K> {
        &self.informer
    }
}

impl<K> std::fmt::Debug for GuardedInformer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedInformer").field("informer", &self.guard.informer).finish()
    }
}
