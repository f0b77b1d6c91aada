//! A scripted HTTP server, for the answers no well-behaved API server gives: malformed JSON,
//! HTML, objects of another kind, unknown watch events, 401 and 403, streams that stall.
//! Each request is answered by the test's function, told which list or watch request this is.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use futures::StreamExt;
use kube_client::{Client, Config};

/// A request, as the script sees it.
#[derive(Debug, Clone)]
pub struct Asked {
    /// `GET /api/v1/namespaces/default/configmaps?limit=500`.
    pub line: String,
    /// A watch (`watch=1` or `watch=true`).
    pub watch: bool,
    /// Which list (or watch) request of the run this is, from 0.
    pub nth: usize,
    /// The `Accept` header (empty when none).
    pub accept: String,
}

impl Asked {
    /// Whether the request asked for protobuf first.
    pub fn protobuf(&self) -> bool {
        self.accept.starts_with("application/vnd.kubernetes.protobuf")
    }
}

/// An answer.
pub enum Reply {
    /// A whole body.
    Body { status: u16, content_type: &'static str, body: String },
    /// A watch stream: these lines, then the end of the stream or, with `stall`, nothing
    /// more and no end.
    Stream { lines: Vec<String>, stall: bool },
    /// A protobuf body with status 200 (`k8s\0` and its envelope).
    Protobuf(Vec<u8>),
    /// A protobuf watch stream: these frames (each with its 4-byte length), then nothing
    /// more and no end.
    Frames(Vec<Vec<u8>>),
}

impl Reply {
    /// A JSON body with status 200.
    pub fn json(body: impl Into<String>) -> Reply {
        Reply::Body { status: 200, content_type: "application/json", body: body.into() }
    }

    /// A `metav1.Status` failure.
    pub fn status(code: u16, reason: &str, message: &str) -> Reply {
        let body = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code,
        });
        Reply::Body { status: code, content_type: "application/json", body: body.to_string() }
    }

    /// Watch events, then the stream ends.
    pub fn events(lines: &[String]) -> Reply {
        Reply::Stream { lines: lines.to_vec(), stall: false }
    }
}

/// A ConfigMap list at `rv` holding `items` (JSON objects).
pub fn list(rv: u64, items: &[serde_json::Value]) -> String {
    serde_json::json!({
        "kind": "ConfigMapList", "apiVersion": "v1",
        "metadata": { "resourceVersion": rv.to_string() }, "items": items,
    })
    .to_string()
}

/// A ConfigMap in `default` at `rv`.
pub fn configmap(name: &str, rv: u64) -> serde_json::Value {
    serde_json::json!({
        "kind": "ConfigMap", "apiVersion": "v1",
        "metadata": { "name": name, "namespace": "default", "resourceVersion": rv.to_string() },
    })
}

/// One watch event line.
pub fn event(kind: &str, object: serde_json::Value) -> String {
    serde_json::json!({ "type": kind, "object": object }).to_string()
}

type Script = dyn Fn(&Asked) -> Reply + Send + Sync;

/// A running scripted server; dropping it stops it.
pub struct Scripted {
    addr: SocketAddr,
    asked: Arc<Mutex<Vec<Asked>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Scripted {
    /// Serves `script` on a free loopback port.
    pub async fn start(script: impl Fn(&Asked) -> Reply + Send + Sync + 'static) -> Scripted {
        Self::start_on("127.0.0.1:0".parse().unwrap(), script).await
    }

    /// Serves `script` on `addr` (a port chosen before, for a server that comes up late).
    pub async fn start_on(
        addr: SocketAddr,
        script: impl Fn(&Asked) -> Reply + Send + Sync + 'static,
    ) -> Scripted {
        let listener = tokio::net::TcpListener::bind(addr).await.expect("a free port");
        let addr = listener.local_addr().unwrap();
        let asked: Arc<Mutex<Vec<Asked>>> = Arc::default();
        let script: Arc<Script> = Arc::new(script);
        let (lists, watches) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let record = asked.clone();
        let app = axum::Router::new().fallback(move |request: Request| {
            let (script, record) = (script.clone(), record.clone());
            let (lists, watches) = (lists.clone(), watches.clone());
            async move {
                let uri = request.uri();
                let query = uri.query().unwrap_or_default();
                let watch = query.split('&').any(|p| p == "watch=1" || p == "watch=true");
                let counter = if watch { &watches } else { &lists };
                let accept = request.headers().get(http::header::ACCEPT);
                let asked = Asked {
                    line: format!("{} {}", request.method(), uri),
                    watch,
                    nth: counter.fetch_add(1, Ordering::SeqCst),
                    accept: accept.and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned(),
                };
                record.lock().unwrap().push(asked.clone());
                respond(script(&asked))
            }
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Scripted { addr, asked, task }
    }

    /// A client of this server.
    pub fn client(&self) -> Client {
        let config = Config::new(format!("http://{}", self.addr).parse().unwrap());
        Client::try_from(config).expect("a client")
    }

    /// The requests so far.
    pub fn asked(&self) -> Vec<Asked> {
        self.asked.lock().unwrap().clone()
    }

    /// How many list (`watch == false`) or watch requests came.
    pub fn count(&self, watch: bool) -> usize {
        self.asked.lock().unwrap().iter().filter(|a| a.watch == watch).count()
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn respond(reply: Reply) -> Response {
    match reply {
        Reply::Body { status, content_type, body } => Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(Body::from(body))
            .unwrap(),
        Reply::Protobuf(body) => Response::builder()
            .status(200)
            .header("content-type", "application/vnd.kubernetes.protobuf")
            .body(Body::from(body))
            .unwrap(),
        Reply::Frames(frames) => {
            let frames = futures::stream::iter(frames.into_iter().map(Ok::<_, std::io::Error>));
            Response::builder()
                .status(200)
                .header("content-type", "application/vnd.kubernetes.protobuf;stream=watch")
                .body(Body::from_stream(frames.chain(futures::stream::pending())))
                .unwrap()
        }
        Reply::Stream { lines, stall } => {
            let lines = futures::stream::iter(
                lines.into_iter().map(|l| Ok::<_, std::io::Error>(format!("{l}\n"))),
            );
            let body = if stall {
                Body::from_stream(lines.chain(futures::stream::pending()))
            } else {
                Body::from_stream(lines)
            };
            Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(body)
                .unwrap()
        }
    }
}
