//! A removal of one runnable by its id: its graceful stop, its deadline and abort, and its
//! outcome belong to a task of their own, not to the remover's future, so that a remover
//! dropped midway (a timeout, a `select!`) leaves the removal whole. Every remover of the id
//! waits for the one outcome; the task logs it, awaited or not.

use std::sync::Arc;
use std::time::Duration;

use futures::future::AbortHandle;
use tokio::sync::{oneshot, watch};

use super::error::{Abandoned, HandleError};
use super::outcome::Outcome;
use crate::runnable::{Runnable, RunnableError};

/// How a removal ended, as every remover of the id hears it.
#[derive(Clone)]
pub(super) enum Removed {
    /// It stopped within its timeout.
    Stopped,
    /// It ended with this error (or panicked).
    Failed(Arc<RunnableError>),
    /// It was aborted past its timeout.
    TimedOut { timeout: Duration, abandoned: Abandoned },
    /// The manager aborted it (a lost Lease, its own timeout) or went away.
    WithManager,
}

/// A removal's outcome, `None` while it runs.
pub(super) type Done = watch::Receiver<Option<Removed>>;

/// A removal begun: the runnable told to stop, what its driver needs.
pub(super) struct Stopping {
    pub(super) name: String,
    pub(super) runnable: Arc<dyn Runnable>,
    pub(super) abort: AbortHandle,
    pub(super) outcome: oneshot::Receiver<Outcome>,
    pub(super) done: watch::Sender<Option<Removed>>,
    /// The manager's runtime: a removal asked from another one outlives it.
    pub(super) runtime: Option<tokio::runtime::Handle>,
}

impl Stopping {
    /// Drives the removal, bounded by `timeout`, on a task of its own.
    pub(super) fn spawn(self, timeout: Duration) {
        let Self { name, runnable, abort, outcome, done, runtime } = self;
        tracing::info!(runnable = %name, ?timeout, "removing a runnable");
        let removal = async move {
            let removed = drive(name, runnable, abort, outcome, timeout).await;
            done.send_replace(Some(removed));
        };
        match runtime {
            Some(runtime) => drop(runtime.spawn(removal)),
            None => drop(tokio::spawn(removal)),
        }
    }
}

/// Waits for the stop, aborts past `timeout`, and logs how it ended.
async fn drive(
    name: String,
    runnable: Arc<dyn Runnable>,
    abort: AbortHandle,
    mut outcome: oneshot::Receiver<Outcome>,
    timeout: Duration,
) -> Removed {
    let ended = match tokio::time::timeout(timeout, &mut outcome).await {
        Ok(ended) => ended,
        Err(_) => {
            // Aborted first: naming what it abandons calls user code, which may panic.
            abort.abort();
            let in_flight = crate::panic::catch(|| runnable.in_flight()).unwrap_or_else(|panic| {
                tracing::error!(runnable = %name, %panic, "in_flight panicked");
                Vec::new()
            });
            let abandoned = Abandoned { runnable: name, in_flight };
            drop(runnable);
            tracing::error!(
                runnable = %abandoned,
                ?timeout,
                "the runnable did not stop in time: aborted it"
            );
            // Aborted, it goes at its next await; its guard then takes it out.
            let _ = outcome.await;
            return Removed::TimedOut { timeout, abandoned };
        }
    };
    drop(runnable);
    match ended {
        Ok(Outcome::Returned(Ok(()))) => {
            tracing::info!(runnable = %name, "runnable removed");
            Removed::Stopped
        }
        Ok(Outcome::Returned(Err(source))) => {
            tracing::error!(runnable = %name, error = %source, "a removed runnable failed");
            Removed::Failed(Arc::new(source))
        }
        // Aborted by the manager (a lost Lease, its own timeout), or gone with it.
        Ok(Outcome::Aborted) | Err(_) => {
            tracing::warn!(runnable = %name, "a runnable being removed stopped with the manager");
            Removed::WithManager
        }
    }
}

/// Waits for the removal of `name` to end, and answers as its remover.
pub(super) async fn wait(name: String, mut done: Done) -> Result<(), HandleError> {
    // A driver gone without an outcome went with its runtime, as the manager did.
    let removed = done.wait_for(Option::is_some).await.ok().and_then(|done| done.clone());
    match removed.unwrap_or(Removed::WithManager) {
        Removed::Stopped => Ok(()),
        Removed::Failed(source) => {
            Err(HandleError::Runnable { runnable: name, source: Box::new(Shared(source)) })
        }
        Removed::TimedOut { timeout, abandoned } => {
            Err(HandleError::StopTimeout { timeout, abandoned })
        }
        Removed::WithManager => Err(HandleError::Stopped { runnable: name }),
    }
}

/// A runnable's error, handed to each of its removers.
#[derive(Debug)]
struct Shared(Arc<RunnableError>);

impl std::fmt::Display for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Shared {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}
