//! A client that records the requests it sends, so a case can tell a relist from a resumed
//! watch, or count a list's pages, as a user reading the server's audit log would.

use std::sync::{Arc, Mutex};

use kube_client::client::{Body, ClientBuilder};
use kube_client::{Client, Config};
use tower::util::MapRequestLayer;

/// The method and path-and-query of every request a [`recording_client`] sent, in order,
/// with its `Accept` header.
#[derive(Clone, Default)]
pub struct RequestLog(Arc<Mutex<Vec<(String, String)>>>);

impl RequestLog {
    /// Every request so far, as `GET /api/v1/...?...`.
    pub fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().iter().map(|(line, _)| line.clone()).collect()
    }

    /// Every request so far with its `Accept` header (empty when none).
    pub fn accepts(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap().clone()
    }

    /// The GETs of collections that are not watches: list requests, page by page.
    pub fn lists(&self) -> Vec<String> {
        self.all()
            .into_iter()
            .filter(|r| {
                r.starts_with("GET ") && !r.contains("watch=true") && !r.contains("watch=1")
            })
            .collect()
    }

    /// The watch requests, streaming lists included.
    pub fn watches(&self) -> Vec<String> {
        self.all()
            .into_iter()
            .filter(|r| r.contains("watch=true") || r.contains("watch=1"))
            .collect()
    }

    /// The streaming lists: watches with `sendInitialEvents=true`.
    pub fn streaming_lists(&self) -> Vec<String> {
        self.watches().into_iter().filter(|r| r.contains("sendInitialEvents=true")).collect()
    }

    /// The watches that are not streaming lists: those from a version.
    pub fn plain_watches(&self) -> Vec<String> {
        self.watches().into_iter().filter(|r| !r.contains("sendInitialEvents=true")).collect()
    }
}

impl RequestLog {
    /// Records `request`'s line and `Accept` header.
    fn record(&self, request: &http::Request<Body>) {
        let target = request.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let accept = request
            .headers()
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        self.0.lock().unwrap().push((format!("{} {target}", request.method()), accept));
    }

    /// A layer that records each request into this log.
    fn layer(
        &self,
    ) -> MapRequestLayer<impl Fn(http::Request<Body>) -> http::Request<Body> + Clone + use<>> {
        let log = self.clone();
        MapRequestLayer::new(move |request: http::Request<Body>| {
            log.record(&request);
            request
        })
    }
}

/// A client for `config` whose requests land in the returned log.
pub fn recording_client(config: Config) -> (Client, RequestLog) {
    let log = RequestLog::default();
    let client =
        ClientBuilder::try_from(config).expect("a client builder").with_layer(&log.layer()).build();
    (client, log)
}

/// [`ApiServer::in_process_client`](crate::ApiServer::in_process_client) whose requests land
/// in the returned log: for cases on a paused clock that read what was asked.
pub fn in_process_recording_client(server: &crate::ApiServer) -> (Client, RequestLog) {
    let log = RequestLog::default();
    let service = tower::Layer::layer(&log.layer(), server.router());
    (Client::new(service, "default"), log)
}
