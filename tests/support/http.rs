//! A plain HTTP/1.0 GET, to scrape `/metrics` and probe `/readyz` as Prometheus and the
//! kubelet would.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` on `address`: the status and the body, or `None` if nothing answers.
pub async fn get(address: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((status, body))
}

/// A free loopback port (bound, read, released) for a server a case starts, drawn at random
/// below the kernel's ephemeral range (32768–60999 by default): a port the kernel hands out
/// (`:0`) is one an outgoing connection of another case can take before the server binds it,
/// which once failed a case with "Address already in use". Falls back to `:0`.
pub fn free_address() -> SocketAddr {
    use std::hash::{BuildHasher, RandomState};
    let random = RandomState::new();
    for attempt in 0u32..1000 {
        let port = 20_000 + (random.hash_one(attempt) % 12_000) as u16;
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return listener.local_addr().expect("its address");
        }
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address")
}

/// `GET path` over HTTPS trusting only `ca_pem`, with `token` as bearer, through kube-client
/// (as a scraper that verifies the endpoint would): the status and body.
#[cfg(feature = "webhook")]
pub async fn get_https(
    address: SocketAddr,
    ca_pem: &str,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut config = kube_client::Config::new(format!("https://{address}").parse().unwrap());
    let der = CertificateDer::pem_slice_iter(ca_pem.as_bytes()).next().unwrap().unwrap();
    config.root_cert = Some(vec![der.to_vec()]);
    let client = kube_client::Client::try_from(config).unwrap();
    let mut request = http::Request::get(path);
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    match client.request_text(request.body(Vec::new()).unwrap()).await {
        Ok(text) => (200, text),
        Err(kube_client::Error::Api(status)) => (status.code, status.message),
        Err(err) => panic!("GET {path}: {err}"),
    }
}
