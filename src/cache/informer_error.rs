//! How a list or watch failed: what the informer logs, or hands to the watch error handler,
//! before it backs off and retries.

use std::time::Duration;

use kube_client::core::Status;

/// A list or watch failure, as the informer logs it before it retries.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InformerError {
    /// A list request failed, or its answer could not be decoded.
    #[error("listing failed: {0}")]
    List(#[source] kube_client::Error),
    /// A watch request failed.
    #[error("starting a watch from resourceVersion {rv:?} failed: {source}")]
    Watch {
        /// Where the watch was to start.
        rv: String,
        /// The cause.
        #[source]
        source: kube_client::Error,
    },
    /// An open watch broke: a transport or decoding error.
    #[error("watch from resourceVersion {rv:?} broke: {source}")]
    Stream {
        /// The last resourceVersion seen.
        rv: String,
        /// The cause.
        #[source]
        source: kube_client::Error,
    },
    /// The server sent an `ERROR` event (other than 410 Expired, which relists): its
    /// `Status`, whole.
    #[error("the watch sent an error event: {}", describe_status(.0))]
    Event(Box<Status>),
    /// A watch ended within a second having delivered nothing: treated as a failure, as
    /// client-go's reflector does, so a server that drops watches at once is not hammered.
    #[error("watch from resourceVersion {0:?} closed within a second with no events")]
    ShortWatch(String),
    /// A watch was still open well after the time it asked the server to end it at
    /// (`timeoutSeconds` + 30 s): the server stopped sending without closing the stream.
    #[error(
        "watch from resourceVersion {rv:?} stalled: still open {waited:?} after it asked the server to end it"
    )]
    Stalled {
        /// The last resourceVersion seen.
        rv: String,
        /// How long past the requested end it waited.
        waited: Duration,
    },
    /// A list answer could not be decoded: not JSON (an HTML page from a proxy, say), or JSON
    /// of another shape or kind.
    #[error(
        "a list answer could not be decoded ({source}); it is not JSON of the expected kind, and begins: {excerpt:?}"
    )]
    Undecodable {
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
        /// The answer's first 120 characters.
        excerpt: String,
    },
    /// The user's transform panicked on an object.
    #[error("the informer's transform panicked on {key}: {panic}")]
    Transform {
        /// The object's key (or `<no name>`).
        key: String,
        /// The panic's message.
        panic: String,
    },
}

/// A `Status` in one line: code, reason and message.
pub(crate) fn describe_status(status: &Status) -> String {
    format!("{} {}: {}", status.code, status.reason, status.message)
}

/// A handler shut down with
/// [`Informer::shut_down_event_handler`](super::Informer::shut_down_event_handler) was still in
/// a call when the wait ran out; it receives nothing after that call. Call it again with the
/// same registration to wait on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a handler of the informer for {informer} was still in a call after {timeout:?}")]
#[non_exhaustive]
pub struct HandlerShutdownTimeout {
    /// What the informer lists and watches.
    pub informer: String,
    /// The time given.
    pub timeout: Duration,
}
