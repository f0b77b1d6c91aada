//! Serving safely over HTTPS (the webhook server's, shared by secure metrics): reviews of
//! several mebibytes are answered, one past 7 MiB is one 413 `Status`, one nested past 128
//! levels a 400; a client that stalls in the TLS handshake, in its headers, trickles its
//! body, does not read its answer, or idles on a kept-alive connection is cut off after the
//! server's timeouts; and slow clients at the connection cap are shed for a review.
//!
//! The timeout cases run on tokio's paused clock: the server's own timers decide, and the
//! clock jumps to them while the stalled client waits. The slow clients' cases run on the
//! real clock (1,100 real sockets; their trickle a byte a second), their waits bounded.

use std::sync::Arc;
use std::time::Duration;

use ctrlkit::tls::ServingLimits;
use ctrlkit::webhook::{
    AdmissionHandler, AdmissionRequest, AdmissionResponse, MAX_REVIEW_BYTES, WebhookServer,
};
use kube_client::core::DynamicObject;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::common::eventually_within;
use super::webhook::{Small, admission, client, post, run_until};

/// A webhook server validating at `/validate`, serving until the returned `Notify` is told.
async fn serving() -> (WebhookServer, std::net::SocketAddr, Arc<tokio::sync::Notify>) {
    let server = WebhookServer::builder()
        .address("127.0.0.1:0".parse().unwrap())
        .validator("/validate", Small)
        .build();
    let stop = Arc::new(tokio::sync::Notify::new());
    let (running, until) = (server.clone(), stop.clone());
    tokio::spawn(async move { run_until(running, &until).await });
    let address = server.serving().await;
    (server, address, stop)
}

/// A TLS client configuration trusting `ca_pem` alone.
fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(der.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    Arc::new(config)
}

/// A TLS connection to `address` trusting `ca_pem`, its handshake done.
async fn tls(
    address: std::net::SocketAddr,
    ca_pem: &str,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let config = client_config(ca_pem);
    let connector = tokio_rustls::TlsConnector::from(config);
    let tcp = TcpStream::connect(address).await.unwrap();
    connector.connect(ServerName::try_from("127.0.0.1").unwrap(), tcp).await.unwrap()
}

/// How long, on the paused clock, until the server closes `stream` (a read returns its end
/// or an error); `None` if it is still open after `limit`.
async fn closed_after(
    stream: &mut (impl AsyncReadExt + Unpin),
    limit: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    let outcome = tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    outcome.ok().map(|()| start.elapsed())
}

#[tokio::test]
async fn a_review_of_three_mebibytes_is_answered() {
    let (server, address, stop) = serving().await;
    let https = client(address, &server.certificate().unwrap().ca_pem);
    // An update's review carries the object and the old one: two of 1.5 MiB each.
    let big = "x".repeat(3 << 19);
    let object = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "x", "namespace": "default" },
        "data": { "a": big },
    });
    let mut review = admission("UPDATE", object.clone());
    review["request"]["oldObject"] = object;
    let answered = post(&https, "/validate", &review).await;
    let answer = answered.expect("a review within the webhook's 7 MiB is answered");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    stop.notify_one();
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stalls_in_the_tls_handshake_is_cut_off_after_10_s() {
    let (_server, address, stop) = serving().await;
    let mut stalled = TcpStream::connect(address).await.unwrap();
    let closed = closed_after(&mut stalled, Duration::from_secs(60)).await;
    let closed = closed.expect("the server closes a connection that never shakes hands");
    assert!(closed >= Duration::from_secs(10) && closed < Duration::from_secs(11), "{closed:?}");
    stop.notify_one();
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stalls_in_its_headers_is_cut_off_after_10_s() {
    let (server, address, stop) = serving().await;
    let ca = server.certificate().unwrap().ca_pem;
    let mut stalled = tls(address, &ca).await;
    stalled.write_all(b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.unwrap();
    stalled.flush().await.unwrap();
    let closed = closed_after(&mut stalled, Duration::from_secs(60)).await;
    let closed = closed.expect("the server closes a connection whose headers never end");
    assert!(closed >= Duration::from_secs(10) && closed < Duration::from_secs(11), "{closed:?}");
    // A connection that sends nothing after its handshake is cut off the same.
    let mut silent = tls(address, &ca).await;
    let closed = closed_after(&mut silent, Duration::from_secs(60)).await;
    assert!(closed.is_some_and(|c| c < Duration::from_secs(11)), "{closed:?}");
    stop.notify_one();
}

#[tokio::test(start_paused = true)]
async fn a_kept_alive_connection_is_closed_after_90_s_idle_and_not_before() {
    let (server, address, stop) = serving().await;
    let ca = server.certificate().unwrap().ca_pem;
    let mut kept = tls(address, &ca).await;
    let body =
        serde_json::to_vec(&admission("CREATE", json!({"metadata": {"name": "x"}}))).unwrap();
    let request = format!(
        "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    kept.write_all(request.as_bytes()).await.unwrap();
    kept.write_all(&body).await.unwrap();
    kept.flush().await.unwrap();
    // The answer (one read is enough for its few hundred bytes).
    let mut buf = [0u8; 4096];
    let n = kept.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // Idle: still open after 80 s (a header timeout does not apply between requests), closed
    // by 91 s.
    assert_eq!(closed_after(&mut kept, Duration::from_secs(80)).await, None, "closed too soon");
    let closed = closed_after(&mut kept, Duration::from_secs(60)).await;
    assert!(closed.is_some_and(|c| c <= Duration::from_secs(11)), "{closed:?} after 80 s");
    stop.notify_one();
}

#[tokio::test(start_paused = true)]
async fn a_connection_past_the_cap_sheds_one_stalled_in_its_handshake() {
    let mut limits = ServingLimits::default();
    limits.max_connections = 2;
    let (server, address, stop) = serving_with(limits).await;
    let ca = server.certificate().unwrap().ca_pem;
    // Two clients that never shake hands hold both connections...
    let _stalled =
        [TcpStream::connect(address).await.unwrap(), TcpStream::connect(address).await.unwrap()];
    // ...and a third sheds one of them once they are past their grace (1 s), not at the
    // handshake timeout (10 s).
    let start = Instant::now();
    let _third = tls(address, &ca).await;
    let waited = start.elapsed();
    assert!(waited >= Duration::from_secs(1) && waited < Duration::from_secs(2), "{waited:?}");
    stop.notify_one();
}

/// A webhook server with `limits`, validating at `/validate`, answering any request with a
/// denial of `BIG_ANSWER` bytes at `/big` and allowing anything at `/any`.
async fn serving_with(
    limits: ServingLimits,
) -> (WebhookServer, std::net::SocketAddr, Arc<tokio::sync::Notify>) {
    let server = WebhookServer::builder()
        .address("127.0.0.1:0".parse().unwrap())
        .validator("/validate", Small)
        .handler("/big", Big)
        .handler("/any", Any)
        .limits(limits)
        .build();
    let stop = Arc::new(tokio::sync::Notify::new());
    let (running, until) = (server.clone(), stop.clone());
    tokio::spawn(async move { run_until(running, &until).await });
    let address = server.serving().await;
    (server, address, stop)
}

/// The size of `Big`'s answers: the 7 MiB a review may take.
const BIG_ANSWER: usize = 7 << 20;

/// Denies every request with a message of `BIG_ANSWER` bytes.
struct Big;

#[async_trait::async_trait]
impl AdmissionHandler for Big {
    async fn handle(&self, request: AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        AdmissionResponse::from(&request).deny("x".repeat(BIG_ANSWER))
    }
}

/// Allows every request.
struct Any;

#[async_trait::async_trait]
impl AdmissionHandler for Any {
    async fn handle(&self, request: AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        AdmissionResponse::from(&request)
    }
}

/// A TLS connection to `address` from `local` trusting `ca_pem`, receiving into a buffer of
/// `receive` bytes if given; `None` if the server closed it before the handshake ended.
async fn tls_from(
    local: std::net::IpAddr,
    address: std::net::SocketAddr,
    ca_pem: &str,
    receive: Option<u32>,
) -> Option<tokio_rustls::client::TlsStream<TcpStream>> {
    let config = client_config(ca_pem);
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::new(local, 0)).unwrap();
    if let Some(bytes) = receive {
        socket.set_recv_buffer_size(bytes).unwrap();
    }
    let tcp = socket.connect(address).await.ok()?;
    let connector = tokio_rustls::TlsConnector::from(config);
    connector.connect(ServerName::try_from("127.0.0.1").unwrap(), tcp).await.ok()
}

/// The head of a `POST path` of `length` bytes.
fn head(path: &str, length: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )
}

/// Slow clients: their connections, how many sent their headers, and how many connections
/// the server cut.
#[derive(Default)]
struct Slow {
    sent_headers: std::sync::atomic::AtomicUsize,
    cut: std::sync::atomic::AtomicUsize,
}

/// `count` clients from 127.0.0.2 to 127.0.0.9, each sending a review's headers and then
/// trickling its body a byte a second; cut, each connects again up to `reconnects` times.
/// Every loop is bounded: a client ends after 120 bytes of body, and once `stop` is set.
fn trickle(
    count: usize,
    reconnects: usize,
    address: std::net::SocketAddr,
    ca: &str,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> (Arc<Slow>, tokio::task::JoinSet<()>) {
    use std::sync::atomic::Ordering;
    let slow = Arc::new(Slow::default());
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..count {
        let local = std::net::IpAddr::from([127, 0, 0, 2 + (i % 8) as u8]);
        let (ca, slow, stop) = (ca.to_owned(), slow.clone(), stop.clone());
        clients.spawn(async move {
            for _ in 0..=reconnects {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let Some(mut tls) = tls_from(local, address, &ca, None).await else {
                    slow.cut.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if tls.write_all(head("/validate", 4096).as_bytes()).await.is_err() {
                    slow.cut.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                slow.sent_headers.fetch_add(1, Ordering::Relaxed);
                let mut cut = false;
                for _ in 0..120 {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if tls.write_all(b" ").await.is_err() || tls.flush().await.is_err() {
                        cut = true;
                        break;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                if !cut {
                    return;
                }
                slow.cut.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    (slow, clients)
}

/// 1,100 slow clients against a cap of 1,024, reconnecting `reconnects` times once cut: a
/// review from another address is answered within 10 s.
async fn a_review_gets_through_slow_clients(reconnects: usize) {
    use std::sync::atomic::Ordering;
    let (server, address, stop_server) = serving_with(ServingLimits::default()).await;
    let ca = server.certificate().unwrap().ca_pem;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (slow, mut clients) = trickle(1_100, reconnects, address, &ca, &stop);
    eventually_within(Duration::from_secs(120), "1,024 slow clients hold the server", || {
        slow.sent_headers.load(Ordering::Relaxed) >= 1_024
    })
    .await;
    let https = client(address, &ca);
    let review = admission("CREATE", json!({"metadata": {"name": "x"}}));
    let answered =
        tokio::time::timeout(Duration::from_secs(10), post(&https, "/validate", &review));
    let answered = answered.await;
    // A client learns it was cut only at its next write (a byte a second), and stops counting
    // once told to stop: wait for it before the stop.
    let shed = eventually_within(Duration::from_secs(10), "slow clients were shed", || {
        slow.cut.load(Ordering::Relaxed) > 0
    });
    if answered.is_ok() {
        shed.await;
    }
    stop.store(true, Ordering::Relaxed);
    let answer = answered
        .expect("a review is answered within 10 s while slow clients hold the connections")
        .expect("answered");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    while clients.join_next().await.is_some() {}
    stop_server.notify_one();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_holding_every_connection_do_not_keep_a_review_out() {
    a_review_gets_through_slow_clients(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_reconnecting_as_fast_as_they_are_cut_do_not_keep_a_review_out() {
    a_review_gets_through_slow_clients(50).await;
}

#[tokio::test(start_paused = true)]
async fn a_client_that_trickles_its_body_is_cut_at_the_read_timeout() {
    let (server, address, stop) = serving_with(ServingLimits::default()).await;
    let ca = server.certificate().unwrap().ca_pem;
    let tls = tls(address, &ca).await;
    let (mut reader, mut writer) = tokio::io::split(tls);
    writer.write_all(head("/validate", 4096).as_bytes()).await.unwrap();
    // A byte every 3 s, for 150 s at most.
    let trickling = tokio::spawn(async move {
        for _ in 0..50 {
            if writer.write_all(b" ").await.is_err() || writer.flush().await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
    });
    let closed = closed_after(&mut reader, Duration::from_secs(60)).await;
    let closed = closed.expect("the server cuts a request whose body trickles");
    assert!(closed >= Duration::from_secs(30) && closed < Duration::from_secs(31), "{closed:?}");
    trickling.abort();
    stop.notify_one();
}

#[tokio::test(start_paused = true)]
async fn a_client_that_never_reads_a_7_mib_answer_is_cut_at_the_write_timeout() {
    let (server, address, stop) = serving_with(ServingLimits::default()).await;
    let ca = server.certificate().unwrap().ca_pem;
    let local = std::net::IpAddr::from([127, 0, 0, 1]);
    // A small receive buffer: the answer cannot all wait in the kernel's buffers.
    let mut tls = tls_from(local, address, &ca, Some(4096)).await.expect("connected");
    let body =
        serde_json::to_vec(&admission("CREATE", json!({"metadata": {"name": "x"}}))).unwrap();
    tls.write_all(head("/big", body.len()).as_bytes()).await.unwrap();
    tls.write_all(&body).await.unwrap();
    tls.flush().await.unwrap();
    // Not reading for longer than the write timeout (30 s)...
    tokio::time::sleep(Duration::from_secs(31)).await;
    // ...then reading: what the server wrote before it cut the connection, not the answer.
    let mut received = 0;
    let mut buf = vec![0u8; 1 << 16];
    let read_all = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received += n,
            }
            if received > BIG_ANSWER {
                return;
            }
        }
    });
    let _ = read_all.await;
    assert!(received < BIG_ANSWER, "the whole answer ({received} bytes) waited for the client");
    stop.notify_one();
}

#[tokio::test]
async fn a_body_past_7_mib_is_one_413_status_whatever_its_size() {
    let (server, address, stop) = serving_with(ServingLimits::default()).await;
    let https = client(address, &server.certificate().unwrap().ca_pem);
    for size in [MAX_REVIEW_BYTES + 1, MAX_REVIEW_BYTES + 2, 2 * MAX_REVIEW_BYTES] {
        let request = http::Request::post("/validate")
            .header("Content-Type", "application/json")
            .body(vec![b' '; size])
            .unwrap();
        let refused = https.request_text(request).await.expect_err("refused");
        let kube_client::Error::Api(status) = refused else {
            panic!("{size} bytes: not a Status: {refused:?}");
        };
        assert_eq!(status.code, 413, "{size} bytes: {status:?}");
        assert_eq!(status.reason, "RequestEntityTooLarge", "{size} bytes: {status:?}");
        assert_eq!(status.message, "request entity is too large; limit is 7340032 bytes");
    }
    stop.notify_one();
}

#[tokio::test]
async fn a_body_past_7_mib_is_refused_without_reading_the_rest() {
    let (server, address, stop) = serving_with(ServingLimits::default()).await;
    let ca = server.certificate().unwrap().ca_pem;
    let mut tls = tls(address, &ca).await;
    // It says 1 GiB, and sends 1 MiB more than the limit: the answer comes without the rest.
    tls.write_all(head("/validate", 1 << 30).as_bytes()).await.unwrap();
    let chunk = vec![b' '; 1 << 20];
    for _ in 0..8 {
        if tls.write_all(&chunk).await.is_err() {
            break; // refused already
        }
    }
    let _ = tls.flush().await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        let mut buf = [0u8; 4096];
        loop {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
            if answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.ends_with(b"}") {
                return;
            }
        }
    });
    let _ = read.await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer:?}");
    assert!(answer.contains("RequestEntityTooLarge"), "{answer:?}");
    stop.notify_one();
}

/// An object nested `depth` levels deep.
fn nested(depth: usize) -> serde_json::Value {
    let mut value = json!("bottom");
    for _ in 0..depth {
        value = json!({ "a": value });
    }
    value
}

#[tokio::test]
async fn a_review_nested_past_128_levels_is_a_400_and_one_within_is_answered() {
    let (server, address, stop) = serving_with(ServingLimits::default()).await;
    let https = client(address, &server.certificate().unwrap().ca_pem);
    let object = |depth| {
        json!({
            "apiVersion": "example.com/v1", "kind": "Deep",
            "metadata": { "name": "x", "namespace": "default" },
            "spec": nested(depth),
        })
    };
    let mut review = admission("CREATE", object(100));
    review["request"]["kind"] = json!({ "group": "example.com", "version": "v1", "kind": "Deep" });
    let answer = post(&https, "/any", &review).await.expect("100 levels are answered");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    review["request"]["object"] = object(1_000);
    let refused = post(&https, "/any", &review).await.expect_err("1,000 levels are refused");
    let kube_client::Error::Api(status) = refused else { panic!("not a Status: {refused:?}") };
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"), "{status:?}");
    assert!(status.message.contains("recursion limit exceeded"), "{status:?}");
    stop.notify_one();
}
