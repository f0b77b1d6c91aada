//! Waiting for caches: client-go's `WaitForCacheSync`, which here also fails once an informer
//! is released or its run ended before the sync, and the wait of controllers and factories,
//! which also says which informer was never started.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::informer::{HasSynced, InformerHandle, RunState};
use super::{Indexer, Informer, InformerObject};

/// Waits until every informer has synced, as client-go's `WaitForCacheSync` (which answers
/// `false` where this is an error); it wakes on the sync itself rather than polling. Fails
/// with [`CacheSyncError::Shutdown`], naming the informers that had not synced, when
/// `shutdown` completes first; with [`CacheSyncError::Released`] as soon as one of them
/// is released by its last [`InformerGuard`](super::InformerGuard), before the call or
/// during it (a released informer never syncs); and with [`CacheSyncError::Stopped`] as
/// soon as the run of one that has not synced has ended, as a controller's wait does.
///
/// An informer run again after its run ended counts as stopped until the new run has begun
/// (its first poll), so wait only once it has: on a current-thread runtime, spawning the run
/// is not enough, yield (`tokio::task::yield_now`) before the wait. A factory's informers are
/// never run again.
pub async fn wait_for_cache_sync(
    informers: &[&dyn HasSynced],
    shutdown: impl Future<Output = ()>,
) -> Result<(), CacheSyncError> {
    let each = informers.iter().map(|informer| {
        let synced = turns_true(Some(informer.synced_receiver()));
        let released = turns_true(informer.released_receiver());
        let stopped = turns_true(informer.stopped_receiver());
        async move {
            tokio::select! {
                biased;
                _ = released => Err(CacheSyncError::Released(informer.describe())),
                // The run may have synced just before it ended.
                _ = synced => Ok(()),
                _ = stopped => Err(CacheSyncError::Stopped(informer.describe())),
            }
        }
    });
    let all_synced = futures::future::try_join_all(each);
    tokio::select! {
        biased;
        synced = all_synced => synced.map(|_| ()),
        _ = shutdown => Err(CacheSyncError::Shutdown(
            informers.iter().filter(|i| !i.has_synced()).map(|i| i.describe()).collect(),
        )),
    }
}

/// Resolves once `receiver` sees `true`; never for no receiver, nor once its sender is gone
/// (an informer that is gone never syncs, stops or is released).
async fn turns_true(receiver: Option<watch::Receiver<bool>>) {
    if let Some(mut receiver) = receiver
        && receiver.wait_for(|value| *value).await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

impl<K: InformerObject> Informer<K> {
    /// The cache once it has synced, waiting for the sync up to `timeout`: for a reader that
    /// may run before it (a webhook's handler, served before the caches: answer the error
    /// with the `webhook` feature's `Denial::unavailable`, or `?` it into one, so that the
    /// webhook configuration's `failurePolicy` decides). Fails with
    /// [`CacheSyncError::NotSyncedWithin`] after `timeout`, or
    /// [`CacheSyncError::Stopped`] if the informer's run ended before its first list was in,
    /// or [`CacheSyncError::Released`] if its last guard was dropped (its store is empty).
    pub async fn synced_indexer(&self, timeout: Duration) -> Result<Indexer<K>, CacheSyncError> {
        let mut synced = HasSynced::synced_receiver(self);
        let mut state = self.state_receiver();
        let mut released = self.released_receiver();
        let wait = async {
            tokio::select! {
                biased;
                _ = released.wait_for(|r| *r) => None,
                held = synced.wait_for(|synced| *synced) => Some(held.is_ok()),
                // The run may have synced just before it ended.
                _ = state.wait_for(|s| *s == RunState::Stopped) => {
                    Some(HasSynced::has_synced(self))
                }
            }
        };
        let name = || self.list_watch().to_string();
        match tokio::time::timeout(timeout, wait).await {
            Ok(None) => Err(CacheSyncError::Released(name())),
            Ok(Some(true)) => Ok(self.indexer()),
            Ok(Some(false)) => Err(CacheSyncError::Stopped(name())),
            Err(_) => Err(CacheSyncError::NotSyncedWithin { informer: name(), timeout }),
        }
    }
}

/// Why caches did not sync: the one error of every wait for them (this module's
/// [`wait_for_cache_sync`], [`SharedInformerFactory::wait_for_cache_sync`](super::SharedInformerFactory::wait_for_cache_sync),
/// a controller's start, a manager's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CacheSyncError {
    /// Shut down before these informers (what each lists and watches) had their first list.
    #[error("shut down before these caches synced: {}", .0.join("; "))]
    Shutdown(Vec<String>),
    /// The run of the informer for this stopped before its first list was in.
    #[error("the informer for {0} stopped before its cache synced")]
    Stopped(String),
    /// The informer for this was released by its last
    /// [`InformerGuard`](super::InformerGuard): its store is empty; ask the factory again.
    #[error("the informer for {0} was released by its last user")]
    Released(String),
    /// The informer's cache had not synced within the time a reader gave it
    /// ([`Informer::synced_indexer`](super::Informer::synced_indexer)).
    #[error("the cache of {informer} has not synced within {timeout:?}")]
    NotSyncedWithin {
        /// What the informer lists and watches.
        informer: String,
        /// The time given.
        timeout: Duration,
    },
}

/// How long a wait goes on before it logs which informers it still waits for, and whether
/// they run at all (a factory nobody started is the usual cause).
const HINT_AFTER: Duration = Duration::from_secs(10);

/// Waits until every informer has synced, failing when one stops first or at `shutdown`.
pub(crate) async fn wait_for_informers(
    informers: &[Arc<dyn InformerHandle>],
    shutdown: impl Future<Output = ()>,
) -> Result<(), CacheSyncError> {
    let each = informers.iter().map(|informer| {
        let synced = turns_true(Some(informer.synced_receiver()));
        let released = turns_true(informer.released_receiver());
        let stopped = turns_true(informer.stopped_receiver());
        let name = informer.describe();
        async move {
            tokio::select! {
                biased;
                // Released while waited for: no one needs it synced any more.
                _ = released => Ok(()),
                _ = synced => Ok(()),
                // A stop seen now: the run ended before the first list was in.
                _ = stopped => Err(CacheSyncError::Stopped(name)),
            }
        }
    });
    let all = futures::future::try_join_all(each);
    let hint = async {
        tokio::time::sleep(HINT_AFTER).await;
        for informer in informers.iter().filter(|i| !*i.synced_receiver().borrow()) {
            match *informer.state_receiver().borrow() {
                RunState::NotStarted => tracing::warn!(
                    informer = %informer.describe(),
                    "still waiting for a cache to sync: its informer was never started \
                     (start the SharedInformerFactory it came from)"
                ),
                _ => {
                    tracing::info!(informer = %informer.describe(), "still waiting for a cache to sync")
                }
            }
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        biased;
        result = all => result.map(|_| ()),
        _ = shutdown => Err(CacheSyncError::Shutdown(
            informers
                .iter()
                .filter(|i| !*i.synced_receiver().borrow())
                .map(|i| i.describe())
                .collect(),
        )),
        _ = hint => unreachable!("the hint never completes"),
    }
}
