//! HTTPS serving, shared by the webhook server and the secure metrics endpoint: rustls
//! (ring, TLS 1.2 and 1.3, ALPN `http/1.1`) in front of an axum router on hyper's HTTP/1.1,
//! with certificates kept current beside the accept loop.
//!
//! Contract:
//! - A certificate is there before the first connection ([`Https::bind`] fails without one);
//!   a renewed or re-read one is served from the next handshake, no restart.
//! - [`ServingLimits`] hold: a TLS handshake within 10 s, a request's headers within 10 s,
//!   a kept-alive connection idle for 90 s at most, 1,024 connections at once (more wait in
//!   the listen backlog), and a pause of 100 ms after an accept fails (no descriptors left)
//!   rather than a loop that spins a core.
//! - Renewals, Secret reads and the caller's own periodic work run beside the accept loop,
//!   never in it; a failed renewal is logged and the served certificate stays.
//! - On stop: no new connections; each open one answers the request in flight and closes
//!   (an API server or a scraper keeps idle ones open), within 10 s.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower::Service;

use super::certs::{self, CertError, CertificateBundle, Certificates, Lifetimes};
use super::limits::{Activity, Phase, ServingLimits, Watched};
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
        let mut connections = tokio::task::JoinSet::new();
        // A connection is accepted only with a permit, held until it closes.
        let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
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
        loop {
            tokio::select! {
                () = &mut stop => break,
                () = &mut beside => {}
                () = &mut maintain => {}
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = accept(&listener, &permits) => {
                    let (stream, peer, permit) = match accepted {
                        Ok(accepted) => accepted,
                        Err(err) => {
                            // Out of descriptors, say: the error would come back at once.
                            tracing::warn!(%err, pause = ?limits.accept_error_pause, "accepting a connection failed");
                            tokio::time::sleep(limits.accept_error_pause).await;
                            continue;
                        }
                    };
                    let (acceptor, router) = (acceptor.clone(), router.clone());
                    let closed = closed.clone();
                    connections.spawn(async move {
                        let _permit = permit;
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
                        serve_connection(tls, peer, router, limits, closed).await;
                    });
                }
            }
        }
        drop(listener);
        closing.send_replace(true);
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        connections.abort_all();
    }
}

/// The most a request's line and headers may take: no client of a webhook or of metrics
/// sends more, and a buffer of this size bounds what a hostile one makes the server hold.
const MAX_HEADER_BYTES: usize = 64 << 10;

/// Accepts a connection once a permit is free.
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
) -> std::io::Result<(tokio::net::TcpStream, SocketAddr, tokio::sync::OwnedSemaphorePermit)> {
    let permit = permits.clone().acquire_owned().await.expect("the semaphore is never closed");
    let (stream, peer) = listener.accept().await?;
    Ok((stream, peer, permit))
}

/// Serves HTTP/1.1 on one TLS connection until it ends, breaks a limit, or the server stops
/// (`closed`: the request in flight is answered, then the connection closes).
async fn serve_connection(
    tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    peer: SocketAddr,
    router: axum::Router,
    limits: ServingLimits,
    mut closed: tokio::sync::watch::Receiver<bool>,
) {
    let activity = Activity::new();
    let marks = activity.clone();
    let service = hyper::service::service_fn(move |request| {
        let (mut router, marks) = (router.clone(), marks.clone());
        marks.busy();
        async move {
            let response = router.call(request.map(axum::body::Body::new)).await;
            marks.idle();
            response
        }
    });
    // Headers of 64 KiB at most (hyper's default buffer takes about 400 KiB of them).
    let connection = hyper::server::conn::http1::Builder::new()
        .max_buf_size(MAX_HEADER_BYTES)
        .serve_connection(TokioIo::new(Watched::new(tls, activity.clone())), service);
    tokio::pin!(connection);
    let served = loop {
        let (phase, deadline) = activity.deadline(&limits);
        tokio::select! {
            served = connection.as_mut() => break served,
            () = async { let _ = closed.wait_for(|closed| *closed).await; } => {
                connection.as_mut().graceful_shutdown();
                break connection.await;
            }
            () = activity.changed() => {}
            () = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                if activity.deadline(&limits) != (phase, deadline) {
                    continue; // it moved on meanwhile
                }
                if phase == Phase::Idle {
                    tracing::debug!(%peer, "closing a connection idle past the idle timeout");
                    connection.as_mut().graceful_shutdown();
                    break connection.await;
                }
                tracing::debug!(%peer, "a client did not send its headers within the header timeout");
                return;
            }
        }
    };
    if let Err(err) = served {
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
