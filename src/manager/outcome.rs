//! [`Outcome`]: how a runnable's task ended, as the table tells it to its remover.

use crate::runnable::RunnableError;

/// How a runnable's task ended.
pub(super) enum Outcome {
    /// `start` returned (a panic is an error).
    Returned(Result<(), RunnableError>),
    /// Its task was aborted (a lost Lease, a timeout) before `start` returned.
    Aborted,
}
