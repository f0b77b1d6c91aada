//! [`ServingLimits`]: what keeps a hostile or broken client from holding an HTTPS server
//! (the webhook server's, and secure metrics'), and the per-connection watch that enforces
//! them.
//!
//! A connection is in one phase at a time, each bounded but the handler's own work:
//! - its TLS handshake (`handshake_timeout`);
//! - a request's headers (`header_timeout`, from the end of the handshake or from the first
//!   byte of a next request), then its body: the whole request within `read_timeout` of its
//!   first byte (Go's `ReadTimeout`);
//! - handling: the whole request is in, the handler works (unbounded here: the API server's
//!   own webhook timeout bounds the call);
//! - writing the answer, until its last byte is flushed (`write_timeout`);
//! - idle, kept alive between requests (`idle_timeout`).
//!
//! hyper's own header-read timeout would also cut the idle time between requests to the
//! header timeout, so the watch here tells the phases apart. At the connection cap, the
//! connections still sending a request (or idle) that have sent least for longest are shed
//! first (see `connections.rs`); never one whose whole request has arrived. "Least for
//! longest" is bytes per second over the connection's whole life: an old keep-alive
//! connection that sat idle may be shed before a fresh one that is still sending its request.
//! That is the intended trade: an idle connection is cheap for its client to reopen, while a
//! request cut halfway is a failed call.
//!
//! Once an idle connection's graceful shutdown began (its idle timeout passed, or the server
//! stops), it has `write_timeout` to close, and is dropped after that.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
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
    /// How long a client has to send a whole request, headers and body, from its first byte
    /// (Go's `ReadTimeout`; default 30 s, the most an API server waits for a webhook).
    pub read_timeout: Duration,
    /// How long the server has to write an answer, from the handler's answer to its last
    /// byte flushed (Go's `WriteTimeout`; default 30 s): a client that does not read is cut.
    /// It also bounds the wait for a connection to close after a graceful shutdown.
    pub write_timeout: Duration,
    /// How long a kept-alive connection may stay idle between requests (default 90 s).
    pub idle_timeout: Duration,
    /// How many connections are served at once (default 1,024). A connection past the cap
    /// sheds the one that has sent least for longest among those still sending a request
    /// (or idle); while every connection has sent a whole request, more wait in the listen
    /// backlog until one closes.
    pub max_connections: usize,
    /// How long the server waits after an accept fails because the process or the system is
    /// out of descriptors (or buffers) before it accepts again (default 10 ms), doubling
    /// while it keeps failing, up to `max_accept_error_pause`. Other accept errors (a client
    /// that reset its connection in the backlog) are retried at once.
    pub accept_error_pause: Duration,
    /// The longest pause after accepts that keep failing (default 1 s).
    pub max_accept_error_pause: Duration,
}

impl Default for ServingLimits {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(90),
            max_connections: 1024,
            accept_error_pause: Duration::from_millis(10),
            max_accept_error_pause: Duration::from_secs(1),
        }
    }
}

/// Where a connection is; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// In its TLS handshake.
    Handshake,
    /// Waiting for a request's headers.
    Headers,
    /// Reading a request's body.
    Body,
    /// The whole request is in: the handler works.
    Handling,
    /// Writing the answer.
    Writing,
    /// Kept alive, waiting for a next request.
    Idle,
}

impl Phase {
    /// Whether a connection in this phase may be shed at the cap: none whose whole request
    /// has arrived.
    pub(crate) fn sheddable(self) -> bool {
        !matches!(self, Phase::Handling | Phase::Writing)
    }
}

/// A connection's phase and since when.
#[derive(Debug, Clone, Copy)]
struct State {
    phase: Phase,
    since: Instant,
    /// The first byte of the request being read (its read deadline counts from it).
    request: Instant,
    /// Whether the answer's last frame was handed to hyper (the next flush ends it).
    answer_sent: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Notify,
    accepted: Instant,
    /// Bytes received so far, TLS records included.
    received: AtomicU64,
    /// Told when the connection may be shed now (idle): the accept loop may wait on it.
    sheddable: Arc<Notify>,
}

/// One connection's phase and since when, shared by its reads and writes, its service, its
/// watch and the server's list of connections.
#[derive(Clone)]
pub(crate) struct Activity {
    shared: Arc<Shared>,
}

impl Activity {
    /// A connection just accepted: in its handshake. `sheddable` is told when it goes idle.
    pub(crate) fn new(sheddable: Arc<Notify>) -> Self {
        let now = Instant::now();
        let state = State { phase: Phase::Handshake, since: now, request: now, answer_sent: false };
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                changed: Notify::new(),
                accepted: now,
                received: AtomicU64::new(0),
                sheddable,
            }),
        }
    }

    fn set(&self, phase: Phase) {
        let now = Instant::now();
        {
            let mut state = self.shared.state.lock();
            if phase == Phase::Headers {
                state.request = now;
            }
            state.phase = phase;
            state.since = now;
            state.answer_sent = false;
        }
        self.shared.changed.notify_one();
        if phase == Phase::Idle {
            self.shared.sheddable.notify_one();
        }
    }

    /// Its handshake is done: waiting for its first request's headers.
    pub(crate) fn handshaken(&self) {
        self.set(Phase::Headers);
    }

    /// A request's headers are in: its body is read next (handled at once without one).
    pub(crate) fn headers_read(&self, no_body: bool) {
        self.set(if no_body { Phase::Handling } else { Phase::Body });
    }

    /// Its request's body is in whole.
    fn body_read(&self) {
        let mut state = self.shared.state.lock();
        if state.phase == Phase::Body {
            (state.phase, state.since) = (Phase::Handling, Instant::now());
            drop(state);
            self.shared.changed.notify_one();
        }
    }

    /// The handler answered: writing (an answer without a body is sent whole at once).
    pub(crate) fn answered(&self, no_body: bool) {
        self.set(Phase::Writing);
        if no_body {
            self.answer_sent();
        }
    }

    /// The answer's last frame went to hyper: the next flush that completes ends it.
    fn answer_sent(&self) {
        let mut state = self.shared.state.lock();
        if state.phase == Phase::Writing {
            state.answer_sent = true;
        }
    }

    /// A flush completed: an answer whose last frame was sent is out, the connection idles.
    fn flushed(&self) {
        let written = {
            let state = self.shared.state.lock();
            state.phase == Phase::Writing && state.answer_sent
        };
        if written {
            self.set(Phase::Idle);
        }
    }

    /// Bytes arrived: an idle connection starts a next request's headers.
    fn read_some(&self) {
        let mut state = self.shared.state.lock();
        if state.phase == Phase::Idle {
            let now = Instant::now();
            (state.phase, state.since, state.request) = (Phase::Headers, now, now);
            drop(state);
            self.shared.changed.notify_one();
        }
    }

    /// `n` bytes arrived from the network (TLS records included).
    pub(crate) fn received(&self, n: usize) {
        self.shared.received.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// The phase now.
    pub(crate) fn phase(&self) -> Phase {
        self.shared.state.lock().phase
    }

    /// When it was accepted, and the bytes it has sent since.
    pub(crate) fn sent(&self) -> (Instant, u64) {
        (self.shared.accepted, self.shared.received.load(Ordering::Relaxed))
    }

    /// The phase now, and when it ends under `limits` (`None` while the handler works).
    pub(crate) fn deadline(&self, limits: &ServingLimits) -> (Phase, Option<Instant>) {
        let state = *self.shared.state.lock();
        let deadline = match state.phase {
            Phase::Handshake => Some(state.since + limits.handshake_timeout),
            Phase::Headers => {
                Some((state.since + limits.header_timeout).min(state.request + limits.read_timeout))
            }
            Phase::Body => Some(state.request + limits.read_timeout),
            Phase::Handling => None,
            Phase::Writing => Some(state.since + limits.write_timeout),
            Phase::Idle => Some(state.since + limits.idle_timeout),
        };
        (state.phase, deadline)
    }

    /// Resolves at the next change of phase.
    pub(crate) async fn changed(&self) {
        self.shared.changed.notified().await;
    }
}

/// A request or response body that tells its connection's [`Activity`] when its last frame
/// is taken: the request read whole, or the answer handed to hyper whole.
pub(crate) struct Marked<B> {
    inner: B,
    activity: Activity,
    /// Whether it is the answer (else the request).
    answer: bool,
    ended: bool,
}

impl<B> Marked<B> {
    /// The body of a request.
    pub(crate) fn request(inner: B, activity: Activity) -> Self {
        Self { inner, activity, answer: false, ended: false }
    }

    /// The body of an answer.
    pub(crate) fn answer(inner: B, activity: Activity) -> Self {
        Self { inner, activity, answer: true, ended: false }
    }

    fn end(&mut self) {
        if !self.ended {
            self.ended = true;
            match self.answer {
                true => self.activity.answer_sent(),
                false => self.activity.body_read(),
            }
        }
    }
}

impl<B: Body + Unpin> Body for Marked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.end(),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.end(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's stream, telling its [`Activity`] what passes: under TLS, the bytes that
/// arrive (to rank connections at the cap); above it, a next request's first byte and the
/// flushes that complete an answer.
pub(crate) struct Watched<S> {
    inner: S,
    activity: Activity,
    /// Whether it is the TCP stream under TLS (else the plaintext above it).
    network: bool,
}

impl<S> Watched<S> {
    /// The TCP stream of a connection: counts the bytes that arrive.
    pub(crate) fn network(inner: S, activity: Activity) -> Self {
        Self { inner, activity, network: true }
    }

    /// The plaintext of a connection: tells its phases.
    pub(crate) fn plain(inner: S, activity: Activity) -> Self {
        Self { inner, activity, network: false }
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
        let read = buf.filled().len() - before;
        if matches!(polled, Poll::Ready(Ok(()))) && read > 0 {
            match self.network {
                true => self.activity.received(read),
                false => self.activity.read_some(),
            }
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
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        if !self.network && matches!(polled, Poll::Ready(Ok(()))) {
            self.activity.flushed();
        }
        polled
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
    async fn a_connection_reads_a_request_then_answers_then_idles_until_bytes_come() {
        let limits = ServingLimits::default();
        let activity = Activity::new(Arc::new(Notify::new()));
        let start = Instant::now();
        let handshake = (Phase::Handshake, Some(start + limits.handshake_timeout));
        assert_eq!(activity.deadline(&limits), handshake);
        activity.handshaken();
        let headers = (Phase::Headers, Some(start + limits.header_timeout));
        assert_eq!(activity.deadline(&limits), headers);
        tokio::time::advance(Duration::from_secs(5)).await;
        // The body must be in within the read timeout of the request's first byte.
        activity.headers_read(false);
        assert_eq!(activity.deadline(&limits), (Phase::Body, Some(start + limits.read_timeout)));
        activity.body_read();
        assert_eq!(activity.deadline(&limits), (Phase::Handling, None));
        tokio::time::advance(Duration::from_secs(60)).await;
        activity.answered(false);
        let answered = Instant::now();
        let writing = (Phase::Writing, Some(answered + limits.write_timeout));
        assert_eq!(activity.deadline(&limits), writing);
        activity.flushed();
        assert_eq!(activity.deadline(&limits), writing, "a flush before the last frame");
        activity.answer_sent();
        activity.flushed();
        let idle = (Phase::Idle, Some(answered + limits.idle_timeout));
        assert_eq!(activity.deadline(&limits), idle);
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

    #[tokio::test(start_paused = true)]
    async fn headers_sent_slowly_are_cut_at_the_read_timeout_of_the_whole_request() {
        let limits =
            ServingLimits { read_timeout: Duration::from_secs(4), ..ServingLimits::default() };
        let activity = Activity::new(Arc::new(Notify::new()));
        activity.handshaken();
        let start = Instant::now();
        assert_eq!(activity.deadline(&limits), (Phase::Headers, Some(start + limits.read_timeout)));
    }
}
