//! [`ServingLimits`]: what keeps a hostile or broken client from holding an HTTPS server
//! (the webhook server's, and secure metrics'), and the per-connection watch that enforces
//! them.
//!
//! A connection is in one of three phases: waiting for a request's headers (from the end of
//! the TLS handshake, and from the first byte of each next request), busy (from the complete
//! headers to the end of the answer) or idle (kept alive between requests). The first two
//! are bounded: headers by `header_timeout`, idleness by `idle_timeout`; a busy connection
//! is bounded by the handler's own work. hyper's own header-read timeout would also cut the
//! idle time between requests to the header timeout, so the watch here tells the phases apart.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The limits of an HTTPS server (the webhook server's, feature `webhook`, and the secure
/// metrics endpoint's, feature `secure-metrics`): Go's `http.Server` timeouts as Kubernetes components
/// set them, and a cap on connections. A client that breaks one is disconnected (and logged
/// at debug level); the server serves everyone else meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServingLimits {
    /// How long a client has to complete its TLS handshake (default 10 s).
    pub handshake_timeout: Duration,
    /// How long a client has to send a request's headers, from the end of the handshake or
    /// from the first byte of a next request on a kept-alive connection (default 10 s).
    pub header_timeout: Duration,
    /// How long a kept-alive connection may stay idle between requests (default 90 s).
    pub idle_timeout: Duration,
    /// How many connections are served at once (default 1,024); more wait in the listen
    /// backlog until one closes.
    pub max_connections: usize,
    /// How long the server waits after an accept fails (no descriptors left, say) before it
    /// accepts again (default 100 ms), instead of spinning on the error.
    pub accept_error_pause: Duration,
}

impl Default for ServingLimits {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            max_connections: 1024,
            accept_error_pause: Duration::from_millis(100),
        }
    }
}

/// Where a connection is between requests; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for a request's headers.
    Headers,
    /// Answering a request.
    Busy,
    /// Kept alive, waiting for a next request.
    Idle,
}

/// One connection's phase and since when, shared by its reads, its service and its watch.
#[derive(Clone)]
pub(crate) struct Activity {
    state: Arc<(Mutex<(Phase, Instant)>, Notify)>,
}

impl Activity {
    /// A connection just through its handshake: waiting for its first request's headers.
    pub(crate) fn new() -> Self {
        Self { state: Arc::new((Mutex::new((Phase::Headers, Instant::now())), Notify::new())) }
    }

    fn set(&self, phase: Phase) {
        *self.state.0.lock() = (phase, Instant::now());
        self.state.1.notify_one();
    }

    /// A request's headers are in: answering it.
    pub(crate) fn busy(&self) {
        self.set(Phase::Busy);
    }

    /// Its answer is out: idle until a next request.
    pub(crate) fn idle(&self) {
        self.set(Phase::Idle);
    }

    /// Bytes arrived: an idle connection starts a next request's headers.
    fn read_some(&self) {
        let mut state = self.state.0.lock();
        if state.0 == Phase::Idle {
            *state = (Phase::Headers, Instant::now());
            drop(state);
            self.state.1.notify_one();
        }
    }

    /// The phase now, and when it ends under `limits` (`None` while busy).
    pub(crate) fn deadline(&self, limits: &ServingLimits) -> (Phase, Option<Instant>) {
        let (phase, since) = *self.state.0.lock();
        let deadline = match phase {
            Phase::Headers => Some(since + limits.header_timeout),
            Phase::Idle => Some(since + limits.idle_timeout),
            Phase::Busy => None,
        };
        (phase, deadline)
    }

    /// Resolves at the next change of phase.
    pub(crate) async fn changed(&self) {
        self.state.1.notified().await;
    }
}

/// A connection's stream, telling its [`Activity`] when bytes arrive.
pub(crate) struct Watched<S> {
    inner: S,
    activity: Activity,
}

impl<S> Watched<S> {
    pub(crate) fn new(inner: S, activity: Activity) -> Self {
        Self { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read_some();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_waits_for_headers_then_answers_then_idles_until_bytes_come() {
        let limits = ServingLimits::default();
        let activity = Activity::new();
        let start = Instant::now();
        assert_eq!(
            activity.deadline(&limits),
            (Phase::Headers, Some(start + limits.header_timeout))
        );
        activity.busy();
        assert_eq!(activity.deadline(&limits), (Phase::Busy, None));
        tokio::time::advance(Duration::from_secs(5)).await;
        activity.idle();
        let idle = Instant::now();
        assert_eq!(activity.deadline(&limits), (Phase::Idle, Some(idle + limits.idle_timeout)));
        tokio::time::advance(Duration::from_secs(30)).await;
        activity.read_some();
        let (phase, deadline) = activity.deadline(&limits);
        assert_eq!(
            (phase, deadline),
            (Phase::Headers, Some(Instant::now() + limits.header_timeout))
        );
        // More bytes of the same headers do not move the deadline.
        tokio::time::advance(Duration::from_secs(3)).await;
        activity.read_some();
        assert_eq!(activity.deadline(&limits).1, deadline);
    }
}
