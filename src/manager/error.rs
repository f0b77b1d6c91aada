//! Why a [`Manager`](super::Manager) stopped with an error, and what its graceful-shutdown
//! timeout made it abandon.

use std::time::Duration;

use crate::cache::CacheSyncError;
use crate::leaderelection::LeaderElectionError;
use crate::runnable::RunnableError;

/// What the graceful-shutdown timeout made the manager give up on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Abandoned {
    /// The runnable's name.
    pub runnable: String,
    /// What it was doing (a controller: the keys being reconciled).
    pub in_flight: Vec<String>,
}

impl std::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.in_flight.as_slice() {
            [] => write!(f, "{}", self.runnable),
            keys => write!(f, "{} (in flight: {})", self.runnable, keys.join(", ")),
        }
    }
}

/// Why a manager stopped with an error, or could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManagerError {
    /// A call on the manager or its handle failed, returned through `?` by a `main` that
    /// sets up its manager and runs it: an add refused
    /// ([`ControllerBuilder::complete`](crate::controller::ControllerBuilder::complete)'s
    /// error: a second controller of one name, say), or a removal's error. Its message is
    /// the [`HandleError`]'s own, which says which call failed.
    #[error(transparent)]
    Handle(#[from] HandleError),
    /// The informers' caches did not sync before the manager was stopped, or an informer
    /// stopped first.
    #[error("the manager's caches did not sync: {0}")]
    CacheSync(#[from] CacheSyncError),
    /// A runnable failed (or panicked); the manager stopped the others.
    #[error("{runnable} failed: {source}")]
    Runnable {
        /// Its name.
        runnable: String,
        /// Its error.
        #[source]
        source: RunnableError,
    },
    /// This replica lost the leader election (it could not renew its lease in time); its
    /// controllers were stopped. Exit and let the Deployment restart it, as
    /// controller-runtime's managers do.
    #[error("leader election lost: {0}")]
    LeaderElection(#[from] LeaderElectionError),
    /// This replica lost its shard Lease (it could not renew it in time), or its ring's lease
    /// timing is refused; its sharded controllers were stopped. Exit and let the Deployment
    /// restart it.
    #[error("shard lease: {0}")]
    ShardLease(LeaderElectionError),
    /// The metrics and probe endpoint could not start.
    #[error("serving metrics and probes on {address}: {source}")]
    Serve {
        /// The address asked for.
        address: std::net::SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Runnables still running when the graceful-shutdown timeout ran out were abandoned.
    #[error(
        "graceful shutdown timed out after {timeout:?}; abandoned: {}",
        abandoned.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    ShutdownTimeout {
        /// The timeout.
        timeout: Duration,
        /// What was abandoned.
        abandoned: Vec<Abandoned>,
    },
}

/// Why a runnable could not be added to a [`Manager`](super::Manager) (a controller, by
/// [`Manager::add_controller`](super::Manager::add_controller)) or added through a
/// [`ManagerHandle`](super::ManagerHandle), or could not be removed through one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandleError {
    /// A controller of this name is in the manager already: controller names are unique in
    /// a manager (as controller-runtime's are from v0.19), or two controllers' metrics,
    /// logs, events and Leases would mix. The name is freed when that controller is removed
    /// through a handle (or returns on its own). Name the second one
    /// ([`ControllerBuilder::name`](crate::controller::ControllerBuilder::name)), or, in
    /// tests, opt out with
    /// [`Config::skip_name_validation`](crate::controller::Config::skip_name_validation).
    #[error(
        "a controller named {name:?} is in the manager already: controller names must be \
         unique, so that their metrics, logs, events and Leases do not mix"
    )]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// The [`ManagedController`](super::ManagedController) was built by a builder of another
    /// manager: it reads that manager's informers, which this one does not start, so it
    /// would never sync here. Add it to the manager whose builder built it.
    #[error(
        "controller {controller:?} was built by another manager's builder: it reads that \
         manager's informers, which this manager does not run; add it to the manager that \
         built it"
    )]
    ForeignController {
        /// The controller's name.
        controller: String,
    },
    /// The controller has run already (by hand, through a clone of it): a controller runs
    /// once, so the manager could not start it. Build a new one.
    #[error("controller {controller:?} has run already (a controller runs once): build a new one")]
    AlreadyRun {
        /// The controller's name.
        controller: String,
    },
    /// The manager is stopping, or its run returned (or it was dropped): it adds nothing
    /// more, a removal begun since answers this (the manager stops every runnable itself;
    /// `runnable` is the id's when the manager let go of its name), and a runnable being
    /// removed was stopped (or aborted) with the rest.
    #[error("{runnable}: the manager is stopping or has stopped")]
    Stopped {
        /// The runnable's name.
        runnable: String,
    },
    /// No runnable of this id: never added through a handle of this manager (an id of
    /// another manager). A runnable gone already, removed or finished, is no error.
    #[error("no runnable {0} was ever added to this manager")]
    NotFound(super::id::RunnableId),
    /// The runnable being removed ended with an error (or panicked); it is out of the
    /// manager all the same, and the manager runs on.
    #[error("{runnable} failed as it stopped: {source}")]
    Runnable {
        /// Its name.
        runnable: String,
        /// Its error.
        #[source]
        source: RunnableError,
    },
    /// The runnable being removed did not stop within its graceful-stop timeout: it was
    /// aborted (what it was doing dropped at its next await) and is out of the manager.
    #[error("{abandoned} did not stop within {timeout:?}: abandoned")]
    StopTimeout {
        /// The timeout.
        timeout: Duration,
        /// What was abandoned.
        abandoned: Abandoned,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_error_through_question_mark_keeps_its_own_words() {
        let stopped = HandleError::Stopped { runnable: "web".to_owned() };
        let err = ManagerError::from(stopped);
        assert_eq!(err.to_string(), "web: the manager is stopping or has stopped");
        let duplicate = ManagerError::from(HandleError::DuplicateName { name: "a".to_owned() });
        assert!(
            duplicate.to_string().starts_with("a controller named \"a\" is in the manager already")
        );
    }
}
