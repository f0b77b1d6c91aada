//! HTTPS serving, shared by the webhook server and the secure metrics endpoint: rustls
//! (ring, TLS 1.2 and 1.3, ALPN `http/1.1`) in front of an axum router on hyper's HTTP/1.1,
//! with certificates kept current beside the accept loop.
//!
//! Contract:
//! - A certificate is there before the first connection ([`Https::bind`] fails without one);
//!   a renewed or re-read one is served from the next handshake, no restart.
//! - [`ServingLimits`] hold: a TLS handshake within 10 s, a request's headers within 10 s
//!   and the whole request within 30 s, an answer written within 30 s, a kept-alive
//!   connection idle for 90 s at most, 1,024 connections at once (past them, the connection
//!   that has sent least for longest among those still sending a request is shed; with none,
//!   the newcomer waits in the listen backlog), and after an accept fails for want of
//!   descriptors, a pause (10 ms doubling to 1 s) during which certificates are still kept,
//!   rather than a loop that spins a core. Other accept errors are retried at once.
//! - Renewals, Secret reads and the caller's own periodic work run beside the accept loop,
//!   never in it; a failed renewal is logged and the served certificate stays.
//! - On stop: no new connections; each open one answers the request in flight and closes
//!   (an API server or a scraper keeps idle ones open), within 10 s. A connection closed
//!   gracefully (idle past its timeout) gets the write timeout to do so, then is dropped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hyper::body::{Body as _, Incoming};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower::Service;

use super::certs::{self, CertError, CertificateBundle, Certificates, Lifetimes};
use super::connections::{Admission, Connections};
use super::limits::{Activity, Marked, Phase, ServingLimits, Watched};
use super::rotation::{self, Kept};
use super::secret::SecretCertificates;

/// Why an HTTPS server (the webhook server, the secure metrics endpoint) could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    /// The address could not be bound.
    #[error("listening on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// No certificate could be made or read.
    #[error(transparent)]
    Certificate(#[from] CertError),
}

/// Where an HTTPS server's certificate comes from: a
/// webhook server's, or the secure metrics endpoint's.
#[derive(Debug, Clone)]
pub enum CertificateSource {
    /// A self-signed CA made at start and a serving certificate it signs for `hosts` (the
    /// webhook Service's DNS names, `name.namespace.svc`, or the host of a `clientConfig.url`),
    /// both renewed once less than a third of their lifetime is left.
    SelfSigned {
        /// DNS names or IP addresses.
        hosts: Vec<String>,
        /// Lifetimes and how often they are checked.
        lifetimes: Lifetimes,
    },
    /// PEM files (cert-manager's `tls.crt`, `tls.key` and `ca.crt` in a mounted Secret),
    /// read at start and again every `poll` (a change is served from the next connection).
    Files {
        /// The certificate chain.
        cert: PathBuf,
        /// Its private key.
        key: PathBuf,
        /// The CA bundle, if given.
        ca: Option<PathBuf>,
        /// How often the files are read again (default 10 s; 10 ms at least).
        poll: Duration,
    },
    /// A self-signed CA and serving certificate kept in a Secret, shared by every replica
    /// and renewed by whichever gets there first; see [`SecretCertificates`].
    Secret(Box<SecretCertificates>),
    /// A certificate given, served as is.
    Bundle(CertificateBundle),
}

impl CertificateSource {
    /// A self-signed certificate for `hosts`, with the default lifetimes.
    pub fn self_signed(hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self::SelfSigned {
            hosts: hosts.into_iter().map(Into::into).collect(),
            lifetimes: Lifetimes::default(),
        }
    }

    /// The files `tls.crt`, `tls.key` and `ca.crt` in `dir` (a mounted cert-manager Secret),
    /// read every 10 s.
    pub fn dir(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        Self::Files {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            ca: Some(dir.join("ca.crt")).filter(|ca| ca.exists()),
            poll: Duration::from_secs(10),
        }
    }
}

impl From<SecretCertificates> for CertificateSource {
    fn from(store: SecretCertificates) -> Self {
        Self::Secret(Box::new(store))
    }
}

/// A bound listener with its first certificate, ready to serve.
pub(crate) struct Https {
    listener: TcpListener,
    address: SocketAddr,
    acceptor: TlsAcceptor,
    keeper: CertificateKeeper,
    certificates: Certificates,
}

impl Https {
    /// Makes or reads the first certificate into `certificates` and binds `address`.
    pub(crate) async fn bind(
        address: SocketAddr,
        source: &CertificateSource,
        certificates: &Certificates,
    ) -> Result<Self, ServingError> {
        let keeper = CertificateKeeper::start(source, certificates).await?;
        let listener = TcpListener::bind(address)
            .await
            .map_err(|source| ServingError::Bind { address, source })?;
        let address =
            listener.local_addr().map_err(|source| ServingError::Bind { address, source })?;
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(CertError::from)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(certificates.clone()));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));
        Ok(Self { listener, address, acceptor, keeper, certificates: certificates.clone() })
    }

    /// The address bound (a port of 0 picked one).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Serves `router` within `limits` until `stop` completes, running `beside` (pending
    /// when it has nothing left to do) and the certificate keeper alongside.
    pub(crate) async fn serve(
        self,
        router: axum::Router,
        limits: ServingLimits,
        stop: impl Future<Output = ()>,
        beside: impl Future<Output = ()>,
    ) {
        let Self { listener, acceptor, mut keeper, certificates, .. } = self;
        let mut tasks = tokio::task::JoinSet::new();
        let connections = Connections::new(limits.max_connections);
        // Connections end gracefully on the stop: the request in flight is answered, then the
        // connection closes.
        let (closing, closed) = tokio::sync::watch::channel(false);
        let maintain = async {
            loop {
                keeper.tick().await;
                keeper.check(&certificates).await;
            }
        };
        let beside = async {
            beside.await;
            std::future::pending::<()>().await
        };
        tokio::pin!(stop, beside, maintain);
        let mut pause = AcceptPause::new(&limits);
        loop {
            let admission = connections.admission(Instant::now());
            let admit = pause.until.is_none() && matches!(admission, Admission::Now);
            tokio::select! {
                () = &mut stop => break,
                () = &mut beside => {}
                () = &mut maintain => {}
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                // At the cap with none to shed: until a connection closes, goes idle or passes
                // its grace.
                () = connections.room(), if !admit => {}
                () = sleep_until(pause.until.or(match admission {
                    Admission::Wait(until) => until,
                    Admission::Now => None,
                })), if !admit => pause.until = None,
                accepted = listener.accept(), if admit => {
                    let (stream, peer) = match accepted {
                        Ok(accepted) => accepted,
                        Err(err) => {
                            pause.failed(&err);
                            continue;
                        }
                    };
                    pause.succeeded();
                    let (place, activity) = connections.hold();
                    let id = place.id();
                    if connections.shed_one(Instant::now()) {
                        tracing::debug!(%peer, held = connections.len(), "at the connection cap: shed the connection that sent least for longest");
                    }
                    let (acceptor, router) = (acceptor.clone(), router.clone());
                    let closed = closed.clone();
                    let task = tasks.spawn(async move {
                        let _place = place;
                        let stream = Watched::network(stream, activity.clone());
                        let handshake = tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream));
                        let tls = match handshake.await {
                            Ok(Ok(tls)) => tls,
                            Ok(Err(err)) => {
                                tracing::debug!(%peer, %err, "a TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "a TLS handshake timed out");
                                return;
                            }
                        };
                        activity.handshaken();
                        serve_connection(tls, peer, router, limits, activity, closed).await;
                    });
                    connections.serving(id, task);
                }
            }
        }
        drop(listener);
        closing.send_replace(true);
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        tasks.abort_all();
    }
}

/// The pause after accepts that fail for want of descriptors: `accept_error_pause`,
/// doubling while they keep failing, up to `max_accept_error_pause`. The accept loop does not
/// sleep: it stops accepting until `until`, while the certificate keeper goes on.
struct AcceptPause {
    first: Duration,
    max: Duration,
    next: Duration,
    until: Option<Instant>,
}

impl AcceptPause {
    fn new(limits: &ServingLimits) -> Self {
        let first = limits.accept_error_pause.max(Duration::from_millis(1));
        let max = limits.max_accept_error_pause.max(first);
        Self { first, max, next: first, until: None }
    }

    fn failed(&mut self, err: &std::io::Error) {
        if !out_of_descriptors(err) {
            // A connection reset in the backlog, say: the next accept is another's.
            tracing::debug!(%err, "accepting a connection failed");
            return;
        }
        tracing::warn!(%err, pause = ?self.next, "accepting a connection failed: out of descriptors");
        self.until = Some(Instant::now() + self.next);
        self.next = (self.next * 2).min(self.max);
    }

    fn succeeded(&mut self) {
        self.next = self.first;
    }
}

/// Whether an accept failed because the process or the system is out of descriptors, buffers
/// or memory: the same error would come back at once.
fn out_of_descriptors(err: &std::io::Error) -> bool {
    err.kind() == std::io::ErrorKind::OutOfMemory
        || err.raw_os_error().is_some_and(|code| {
            [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM].contains(&code)
        })
}

/// Sleeps until `at`, or for ever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The most a request's line and headers may take: no client of a webhook or of metrics
/// sends more, and a buffer of this size bounds what a hostile one makes the server hold.
const MAX_HEADER_BYTES: usize = 64 << 10;

/// Serves HTTP/1.1 on one TLS connection until it ends, breaks a limit, or the server stops
/// (`closed`: the request in flight is answered, then the connection closes).
async fn serve_connection<S>(
    tls: S,
    peer: SocketAddr,
    router: axum::Router,
    limits: ServingLimits,
    activity: Activity,
    mut closed: tokio::sync::watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let marks = activity.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let (mut router, marks) = (router.clone(), marks.clone());
        marks.headers_read(request.body().is_end_stream());
        let request =
            request.map(|body| axum::body::Body::new(Marked::request(body, marks.clone())));
        async move {
            let response = router.call(request).await;
            response.map(|response| {
                marks.answered(response.body().is_end_stream());
                response.map(|body| axum::body::Body::new(Marked::answer(body, marks)))
            })
        }
    });
    // Headers of 64 KiB at most (hyper's default buffer takes about 400 KiB of them).
    let connection = hyper::server::conn::http1::Builder::new()
        .max_buf_size(MAX_HEADER_BYTES)
        .serve_connection(TokioIo::new(Watched::plain(tls, activity.clone())), service);
    tokio::pin!(connection);
    // Once a graceful shutdown began: until when the connection may take to close.
    let mut closing_by: Option<Instant> = None;
    let served = loop {
        let (phase, deadline) = activity.deadline(&limits);
        // Once closing, an idle connection's deadline has passed already: only the close's
        // own bound wakes it (else this loop would spin, pushing that bound back each turn).
        let due = deadline.filter(|_| closing_by.is_none() || phase != Phase::Idle);
        let wake = match (due, closing_by) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        tokio::select! {
            served = connection.as_mut() => break Some(served),
            () = async { let _ = closed.wait_for(|closed| *closed).await; }, if closing_by.is_none() => {
                connection.as_mut().graceful_shutdown();
                closing_by = Some(Instant::now() + limits.write_timeout);
            }
            () = activity.changed() => {}
            () = sleep_until(wake) => {
                if closing_by.is_some_and(|by| Instant::now() >= by) {
                    tracing::debug!(%peer, "a connection did not close within the write timeout of its graceful shutdown");
                    break None;
                }
                if activity.deadline(&limits) != (phase, deadline)
                    || deadline.is_none_or(|at| Instant::now() < at)
                {
                    continue; // it moved on meanwhile
                }
                match phase {
                    Phase::Idle if closing_by.is_none() => {
                        tracing::debug!(%peer, "closing a connection idle past the idle timeout");
                        connection.as_mut().graceful_shutdown();
                        closing_by = Some(Instant::now() + limits.write_timeout);
                    }
                    Phase::Headers | Phase::Handshake => {
                        tracing::debug!(%peer, "a client did not send its headers within the header timeout");
                        break None;
                    }
                    Phase::Body => {
                        tracing::debug!(%peer, "a client did not send its whole request within the read timeout");
                        break None;
                    }
                    Phase::Writing => {
                        tracing::debug!(%peer, "a client did not take its answer within the write timeout");
                        break None;
                    }
                    Phase::Idle | Phase::Handling => {}
                }
            }
        }
    };
    if let Some(Err(err)) = served {
        tracing::debug!(%peer, %err, "an HTTPS connection ended");
    }
}

/// Keeps the served certificate current: renews self-signed ones, reads files again.
struct CertificateKeeper {
    source: CertificateSource,
    /// The CA and certificate of self-signed sources (in memory or in a Secret).
    kept: Option<Kept>,
    interval: tokio::time::Interval,
}

impl CertificateKeeper {
    /// Makes or reads the first certificate; an error if there is none to serve.
    async fn start(
        source: &CertificateSource,
        certificates: &Certificates,
    ) -> Result<Self, CertError> {
        let (kept, every) = match source {
            CertificateSource::SelfSigned { hosts, lifetimes } => {
                let kept = rotation::first(hosts, lifetimes)?;
                certificates.set(kept.served.clone())?;
                (Some(kept), lifetimes.check_every)
            }
            CertificateSource::Files { cert, key, ca, poll } => {
                certificates.set(certs::read_files(cert, key, ca.as_deref())?)?;
                (None, *poll)
            }
            CertificateSource::Secret(store) => {
                (Some(store.load(certificates).await?), store.check_every())
            }
            CertificateSource::Bundle(bundle) => {
                certificates.set(bundle.clone())?;
                (None, Duration::from_secs(24 * 3600))
            }
        };
        // A zero period (a setting of 0) would panic in `interval`, and spin: 10 ms at least.
        let mut interval = tokio::time::interval(every.max(rotation::MIN_PERIOD));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.reset();
        Ok(Self { source: source.clone(), kept, interval })
    }

    async fn tick(&mut self) {
        self.interval.tick().await;
    }

    /// Renews or reads again what is due; a failure is logged and the certificate served
    /// stays.
    async fn check(&mut self, certificates: &Certificates) {
        if let Err(err) = self.renew(certificates).await {
            tracing::error!(%err, "the webhook certificate was not renewed; the one served stays");
        }
    }

    async fn renew(&mut self, certificates: &Certificates) -> Result<(), CertError> {
        let now = SystemTime::now();
        match &self.source {
            CertificateSource::SelfSigned { hosts, lifetimes } => {
                let kept = self.kept.as_mut().expect("a CA for self-signed certificates");
                if let Some(step) = rotation::next(kept, hosts, lifetimes, now)? {
                    certificates.set(step.served.clone())?;
                    tracing::info!(new_ca = step.ca.is_some(), "renewed the webhook certificates");
                    kept.apply(step);
                }
            }
            CertificateSource::Files { cert, key, ca, .. } => {
                let read = certs::read_files(cert, key, ca.as_deref())?;
                if certificates.bundle().as_ref() != Some(&read) {
                    certificates.set(read)?;
                    tracing::info!(cert = %cert.display(), "serving the webhook certificate read again");
                }
            }
            CertificateSource::Secret(store) => {
                let kept = self.kept.as_mut().expect("a CA for certificates in a Secret");
                store.check(kept, certificates).await?;
            }
            CertificateSource::Bundle(_) => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    use super::*;

    /// A client that sends one request, takes its answer, then neither reads nor lets the
    /// connection's close finish (its shutdown stays pending, as a peer that never acks).
    struct Stuck {
        request: &'static [u8],
    }

    impl AsyncRead for Stuck {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            if self.request.is_empty() {
                return Poll::Pending;
            }
            let n = self.request.len().min(buf.remaining());
            buf.put_slice(&self.request[..n]);
            self.request = &self.request[n..];
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Stuck {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Pending
        }
    }

    /// A connection closed for idling whose close never completes is dropped once the write
    /// timeout of that close has passed. Before, the idle deadline (passed already) fired
    /// again at every turn and pushed the close's bound back: the loop spun for ever.
    #[tokio::test(start_paused = true)]
    async fn a_connection_closed_for_idling_is_dropped_within_the_write_timeout() {
        let limits = ServingLimits::default();
        let activity = Activity::new(Arc::new(tokio::sync::Notify::new()));
        activity.handshaken();
        let router = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let (_open, closed) = tokio::sync::watch::channel(false);
        let client = Stuck { request: b"GET / HTTP/1.1\r\nhost: x\r\n\r\n" };
        let start = Instant::now();
        let serving =
            serve_connection(client, ([127, 0, 0, 1], 1).into(), router, limits, activity, closed);
        let bound = limits.idle_timeout + limits.write_timeout;
        tokio::time::timeout(bound + Duration::from_secs(1), serving)
            .await
            .expect("the connection ends within the idle and write timeouts");
        assert!(start.elapsed() >= bound, "dropped after {:?}, before its bound", start.elapsed());
    }
}
