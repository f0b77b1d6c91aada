//! Waiting for caches: client-go's `WaitForCacheSync`, and the richer wait of controllers and
//! factories, which also notices an informer that stops or was never started and says which.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::informer::{HasSynced, InformerHandle, RunState};

/// Waits until every informer has synced (true) or `shutdown` completes first (false), as
/// client-go's `WaitForCacheSync`; it wakes on the sync itself rather than polling.
pub async fn wait_for_cache_sync(
    informers: &[&dyn HasSynced],
    shutdown: impl Future<Output = ()>,
) -> bool {
    let receivers: Vec<_> = informers.iter().map(|i| i.synced_receiver()).collect();
    let all_synced = async move {
        for mut rx in receivers {
            // An error means the informer is gone: it will never sync.
            if rx.wait_for(|synced| *synced).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        biased;
        _ = all_synced => true,
        _ = shutdown => false,
    }
}

/// Why informers did not sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SyncFailure {
    /// Shut down first; these had not synced.
    Shutdown(Vec<String>),
    /// This informer's run ended before it synced.
    Stopped(String),
}

/// How long a wait goes on before it logs which informers it still waits for, and whether
/// they run at all (a factory nobody started is the usual cause).
const HINT_AFTER: Duration = Duration::from_secs(10);

/// Waits until every informer has synced, failing when one stops first or at `shutdown`.
pub(crate) async fn wait_for_informers(
    informers: &[Arc<dyn InformerHandle>],
    shutdown: impl Future<Output = ()>,
) -> Result<(), SyncFailure> {
    let each = informers.iter().map(|informer| {
        let (mut synced, mut state) = (informer.synced_receiver(), informer.state_receiver());
        let name = informer.describe();
        async move {
            let stopped = async {
                // A stop seen now: the run ended before the first list was in.
                let _ = state.wait_for(|s| *s == RunState::Stopped).await;
            };
            let synced = async {
                // An error means the informer is gone: it will never sync.
                if synced.wait_for(|s| *s).await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                biased;
                _ = synced => Ok(()),
                _ = stopped => Err(SyncFailure::Stopped(name)),
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
        _ = shutdown => Err(SyncFailure::Shutdown(
            informers
                .iter()
                .filter(|i| !*i.synced_receiver().borrow())
                .map(|i| i.describe())
                .collect(),
        )),
        _ = hint => unreachable!("the hint never completes"),
    }
}
