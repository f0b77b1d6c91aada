//! [`MetricsServer`]: one HTTP endpoint for Prometheus and the kubelet's probes.
//!
//! - `GET /metrics`: the [`Registry`] in the Prometheus text format.
//! - `GET /healthz`: `200 ok` while the process serves (a liveness probe).
//! - `GET /readyz`: `200 ok` once every readiness check passes, else `503` naming the checks
//!   that fail, one per line, in the style of kube-apiserver's `/readyz?verbose`
//!   (`[-]caches-synced failed`). Unlike kube-apiserver, which answers `500` for a failing
//!   check, the code is `503` (probes take any code from 400 as a failure). As in
//!   kube-apiserver, readiness can be asked per check: `GET /readyz/<check>` answers for
//!   that check alone (`404` for a check it does not have; a name may hold a `/`:
//!   `/readyz/webhooks/tls`), `GET /readyz?exclude=<check>` (repeatable) leaves checks out
//!   (listed as `[+]<check> excluded: ok`; one it does not have is named in a `warn:` line,
//!   not an error), and `?verbose` lists every check even when all pass. A webhook server's readiness probe points at its own check, so that its Service
//!   has ready endpoints while the caches sync.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Path, RawQuery};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::Registry;
#[cfg(feature = "secure-metrics")]
use super::SecureServing;
#[cfg(feature = "secure-metrics")]
use super::secure::Gate;

/// Without secure serving, nothing gates `/metrics`.
#[cfg(not(feature = "secure-metrics"))]
enum Gate {}

#[cfg(not(feature = "secure-metrics"))]
impl Gate {
    async fn admit(&self, _: &HeaderMap) -> Result<(), (StatusCode, String)> {
        match *self {}
    }
}

/// Readiness checks by name; the endpoint is ready when all pass. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Probes {
    checks: Arc<Mutex<BTreeMap<String, bool>>>,
    /// Checks asked at each request (a runnable's, as a webhook server's).
    asked: Arc<Mutex<BTreeMap<String, crate::runnable::ReadyCheck>>>,
}

impl std::fmt::Debug for Probes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probes").field("checks", &self.results()).finish()
    }
}

impl Probes {
    /// Sets whether the check `name` passes (adding it if new).
    pub fn set(&self, name: &str, passes: bool) {
        self.checks.lock().insert(name.to_owned(), passes);
    }

    /// Adds the check `name`, passing while `check` says so (asked at each request).
    pub fn add_check(&self, name: &str, check: crate::runnable::ReadyCheck) {
        self.asked.lock().insert(name.to_owned(), check);
    }

    /// Removes the check `name` if it is `check` (not one added since under the same name).
    pub fn remove_check(&self, name: &str, check: &crate::runnable::ReadyCheck) {
        let mut asked = self.asked.lock();
        if asked.get(name).is_some_and(|current| Arc::ptr_eq(current, check)) {
            asked.remove(name);
        }
    }

    /// Every check and whether it passes now. A check that panics (user code) fails, logged,
    /// rather than taking the probe's connection down with it.
    fn results(&self) -> BTreeMap<String, bool> {
        let mut results = self.checks.lock().clone();
        let asked = self.asked.lock().clone();
        results.extend(asked.into_iter().map(|(name, check)| {
            let passes = crate::panic::catch(|| check()).unwrap_or_else(|panic| {
                tracing::error!(check = %name, panic = %panic, "a ready check panicked; failing it");
                false
            });
            (name, passes)
        }));
        results
    }
}

/// `/metrics` (behind `gate`, if any), `/healthz`, `/readyz` and `/readyz/<check>`.
fn router(registry: Registry, probes: Probes, gate: Option<Arc<Gate>>) -> axum::Router {
    axum::Router::new()
        .route(
            "/metrics",
            get(move |headers: HeaderMap| {
                let (registry, gate) = (registry.clone(), gate.clone());
                async move {
                    if let Some(gate) = gate
                        && let Err((status, message)) = gate.admit(&headers).await
                    {
                        // A scrape refused over the review rate may come back in a second.
                        let retry = (status == StatusCode::TOO_MANY_REQUESTS)
                            .then_some([(header::RETRY_AFTER, "1")]);
                        return (status, retry, message).into_response();
                    }
                    let content_type = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
                    ([(header::CONTENT_TYPE, content_type)], registry.encode()).into_response()
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get({
                let probes = probes.clone();
                move |RawQuery(query): RawQuery| {
                    let probes = probes.clone();
                    async move { readyz(&probes, None, query.as_deref()) }
                }
            }),
        )
        .route(
            // A wildcard: a check's name may hold a `/` (`webhooks/tls`).
            "/readyz/{*check}",
            get(move |Path(check): Path<String>, RawQuery(query): RawQuery| {
                let probes = probes.clone();
                async move { readyz(&probes, Some(&check), query.as_deref()) }
            }),
        )
}

/// The answer of `/readyz` (every check but those `query` excludes) or `/readyz/<only>`.
fn readyz(probes: &Probes, only: Option<&str>, query: Option<&str>) -> axum::response::Response {
    let (mut verbose, mut excluded) = (false, Vec::new());
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*key {
            "verbose" => verbose = true,
            "exclude" => excluded.push(value.into_owned()),
            _ => {}
        }
    }
    let mut results = probes.results();
    if let Some(only) = only {
        let Some(passes) = results.remove(only) else {
            return (StatusCode::NOT_FOUND, format!("no readiness check named {only:?}\n"))
                .into_response();
        };
        return match passes {
            true => (StatusCode::OK, "ok".to_owned()).into_response(),
            false => {
                (StatusCode::SERVICE_UNAVAILABLE, format!("[-]{only} failed\n")).into_response()
            }
        };
    }
    let unknown: Vec<String> = excluded
        .iter()
        .filter(|name| !results.contains_key(*name))
        .map(|n| format!("{n:?}"))
        .collect();
    let excluded: Vec<String> =
        excluded.into_iter().filter(|name| results.remove(name).is_some()).collect();
    let ready = results.values().all(|passes| *passes);
    let mut report = report(&results, &excluded);
    if !unknown.is_empty() {
        report.push_str(&format!(
            "warn: some readiness checks cannot be excluded: no matches for {}\n",
            unknown.join(",")
        ));
    }
    match (ready, verbose) {
        (true, false) => (StatusCode::OK, "ok".to_owned()).into_response(),
        (true, true) => (StatusCode::OK, format!("{report}readyz check passed\n")).into_response(),
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, format!("{report}readyz check failed\n"))
            .into_response(),
    }
}

/// `[+]name ok` / `[-]name failed`, one line per check, and `[+]name excluded: ok` for
/// each excluded one (as kube-apiserver prints it), in the order of the names.
fn report(results: &BTreeMap<String, bool>, excluded: &[String]) -> String {
    let excluded = excluded.iter().map(|name| (name.as_str(), None));
    let checked = results.iter().map(|(name, passes)| (name.as_str(), Some(*passes)));
    let mut lines: Vec<(&str, Option<bool>)> = checked.chain(excluded).collect();
    lines.sort_by_key(|(name, _)| *name);
    lines.dedup_by_key(|(name, _)| *name);
    lines
        .into_iter()
        .map(|(name, passes)| match passes {
            Some(true) => format!("[+]{name} ok\n"),
            Some(false) => format!("[-]{name} failed\n"),
            None => format!("[+]{name} excluded: ok\n"),
        })
        .collect()
}

/// The endpoint, serving until [`shutdown`](Self::shutdown) or drop.
#[derive(Debug)]
pub(crate) struct MetricsServer {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr` (port 0 picks a free one) and serves `registry` and `probes` over HTTP.
    pub async fn start(
        addr: SocketAddr,
        registry: Registry,
        probes: Probes,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let router = router(registry, probes, None);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, router).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(err) = serve.await {
                tracing::error!(%err, "the metrics endpoint stopped");
            }
        });
        tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
        Ok(Self { stop: Some(stop), task: Some(task) })
    }

    /// Binds `addr` and serves `registry` and `probes` over HTTPS, each scrape of `/metrics`
    /// authenticated and authorized through `client`'s API server; see [`SecureServing`].
    /// A certificate that cannot be made or read is an error here.
    #[cfg(feature = "secure-metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "secure-metrics")))]
    pub async fn start_secure(
        addr: SocketAddr,
        registry: Registry,
        probes: Probes,
        client: kube_client::Client,
        serving: SecureServing,
    ) -> std::io::Result<Self> {
        let certificates = crate::tls::Certificates::default();
        let https = crate::tls::https::Https::bind(addr, &serving.certificates, &certificates)
            .await
            .map_err(|err| match err {
                crate::tls::ServingError::Bind { source, .. } => source,
                other => std::io::Error::other(other),
            })?;
        let addr = https.local_addr();
        let limits = serving.limits;
        let gate = Arc::new(super::secure::Gate::new(client, serving, &registry));
        let router = router(registry, probes, Some(gate));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let stopped = async {
                let _ = stopped.await;
            };
            https.serve(router, limits, stopped, std::future::pending()).await;
        });
        tracing::info!(%addr, "serving /metrics (authenticated), /healthz and /readyz over HTTPS");
        Ok(Self { stop: Some(stop), task: Some(task) })
    }

    /// Stops serving and waits for the server to end.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
