//! Helpers shared by the protocol tests.

use std::time::Duration;

use ctrlkit::testing::ApiServer;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube_client::api::{PostParams, WatchEvent};
use kube_client::{Api, Client};
use serde_json::json;

/// A pod named `name` with labels and one container.
pub fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": { "containers": [{ "name": "main", "image": "busybox:1.36", "env": [{ "name": "A", "value": "1" }] }] }
    }))
    .expect("a valid pod")
}

pub async fn server() -> (ApiServer, Client) {
    let server = ApiServer::start().await.expect("the server starts");
    let client = server.client();
    (server, client)
}

pub async fn create_pods(pods: &Api<Pod>, names: impl IntoIterator<Item = String>) {
    for name in names {
        pods.create(&PostParams::default(), &pod(&name, json!({}))).await.expect("create");
    }
}

/// The API error of a failed call: (code, reason).
pub fn api_error<T: std::fmt::Debug>(result: kube_client::Result<T>) -> (u16, String) {
    match result {
        Err(kube_client::Error::Api(status)) => (status.code, status.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The next watch event, failing the test after 10 s.
pub async fn next<K, S>(stream: &mut S) -> Option<kube_client::Result<WatchEvent<K>>>
where
    S: Stream<Item = kube_client::Result<WatchEvent<K>>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("a watch event within 10 s")
}

/// Names and event types of a watch event, for comparisons.
pub fn describe(event: &WatchEvent<Pod>) -> (String, String) {
    match event {
        WatchEvent::Added(p) => ("ADDED".into(), p.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Modified(p) => ("MODIFIED".into(), p.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Deleted(p) => ("DELETED".into(), p.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Bookmark(b) => ("BOOKMARK".into(), b.metadata.resource_version.clone()),
        WatchEvent::Error(e) => ("ERROR".into(), format!("{} {}", e.code, e.reason)),
    }
}

pub fn rv(pod: &Pod) -> u64 {
    pod.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("a resourceVersion")
}

/// A response read off the wire by [`raw_get`].
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// A plain HTTP/1.1 GET of `path` with no client library in between (kube-client retries
/// some statuses and drops some parameters; this shows what the server sent).
pub async fn raw_get(server: &ApiServer, path: &str) -> RawResponse {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", server.addr());
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':').map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned())))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_owned() };
    RawResponse { status, headers, body }
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    out
}
