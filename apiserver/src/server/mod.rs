//! Layer 4, the composition root: it may import every layer below (it registers the kinds and
//! their strategies, builds the registry, the faults and the HTTP state) and offers the public
//! [`ApiServer`] and [`ApiServerBuilder`]; only `harness` and the crate root import it.
//!
//! [`ApiServer`]: binds loopback, serves the API over HTTP, and hands out clients,
//! kubeconfigs and fault handles.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::serve::ListenerExt;
use kube_client::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

use crate::faults::FaultState;
use crate::faults::WatchSignal;
use crate::faults::injection::Faults;
use crate::http::state::{Shared, Stats};
use crate::model::resources::{self, ResourceType};
use crate::registry::{Registry, Target};
use crate::storage::store::Store;

/// Why the server could not start or hand out a client.
#[derive(Debug, thiserror::Error)]
pub enum ApiServerError {
    /// The loopback port could not be bound.
    #[error("binding 127.0.0.1:{port}: {source}")]
    Bind {
        /// The port asked for (0: any).
        port: u16,
        /// The cause.
        source: std::io::Error,
    },
    /// The kubeconfig for the server could not be made or loaded.
    #[error("building a kubeconfig for the embedded API server: {0}")]
    Kubeconfig(String),
    /// kube-client refused the configuration.
    #[error("building a kube client for the embedded API server: {0}")]
    Client(#[from] kube_client::Error),
    /// Writing the kubeconfig file failed.
    #[error("writing the kubeconfig to {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Requests the server has answered, by verb (fault-injected failures included).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RequestCounts {
    /// `GET` of a collection without `watch`.
    pub list: u64,
    /// `GET` of a collection with `watch`.
    pub watch: u64,
    /// `GET` of one object.
    pub get: u64,
    /// `POST`.
    pub create: u64,
    /// `PUT`.
    pub update: u64,
    /// `PATCH`.
    pub patch: u64,
    /// `DELETE` of one object or of a collection.
    pub delete: u64,
}

/// Configures an [`ApiServer`] before it starts.
#[derive(Debug, Clone)]
pub struct ApiServerBuilder {
    resources: Vec<ResourceType>,
    port: u16,
    bookmark_interval: Duration,
    history_limit: usize,
    uncached: Vec<(String, String)>,
    garbage_collector: bool,
    users: crate::auth::Users,
}

impl Default for ApiServerBuilder {
    fn default() -> Self {
        Self {
            resources: resources::builtin(),
            port: 0,
            bookmark_interval: Duration::from_secs(60),
            history_limit: 100_000,
            uncached: Vec::new(),
            garbage_collector: false,
            users: crate::auth::Users::new(),
        }
    }
}

impl ApiServerBuilder {
    /// Serves one more resource type, such as a custom resource.
    pub fn resource(mut self, resource: ResourceType) -> Self {
        self.resources.retain(|r| {
            !(r.group == resource.group
                && r.version == resource.version
                && r.plural == resource.plural)
        });
        self.resources.push(resource);
        self
    }

    /// Serves no `group/version` `plural` (empty group for the core), to test a client against
    /// a server that lacks it: `without_resource("events.k8s.io", "v1", "events")`.
    pub fn without_resource(mut self, group: &str, version: &str, plural: &str) -> Self {
        self.resources
            .retain(|r| !(r.group == group && r.version == version && r.plural == plural));
        self
    }

    /// The loopback port to bind; 0 (the default) picks a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// How often watches with `allowWatchBookmarks` get a `BOOKMARK` (default 60 s, as the
    /// real server). Tests make it short.
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// How many changes the history keeps for watches and list continuations (default
    /// 100,000); older resourceVersions get 410 Expired.
    pub fn history_limit(mut self, changes: usize) -> Self {
        self.history_limit = changes;
        self
    }

    /// Serves `group` `plural` (empty group for the core) without the watch cache, as a real
    /// server started with `--watch-cache-sizes=secrets#0` serves secrets:
    /// [`Faults::compact_storage`] then expires its older resourceVersions (HTTP 410 for
    /// watches, continue tokens and exact-version lists), where a resource with the watch
    /// cache keeps answering from its window, as kube-apiserver 1.36 does.
    pub fn without_watch_cache(mut self, group: &str, plural: &str) -> Self {
        self.uncached.push((group.to_owned(), plural.to_owned()));
        self
    }

    /// Runs a garbage collector, as kube-controller-manager does: dependents whose owners
    /// (`ownerReferences`) are gone are deleted, and a delete's `propagationPolicy` is
    /// honoured: `Background` (the default) deletes the owner at once and its dependents after
    /// it, `Foreground` keeps the owner (with the `foregroundDeletion` finalizer) until the
    /// dependents that block it (`blockOwnerDeletion`) are gone, `Orphan` (the `orphan`
    /// finalizer) takes the owner out of its dependents' `ownerReferences` and leaves them.
    /// Without it (the default), as on a kube-apiserver without kube-controller-manager,
    /// nothing deletes dependents, and an owner deleted with `Foreground` or `Orphan` stays,
    /// marked for deletion, held by its finalizer.
    pub fn garbage_collector(mut self) -> Self {
        self.garbage_collector = true;
        self
    }

    /// A user whose bearer `token` a `TokenReview` authenticates as `name` in `groups` (with
    /// `system:authenticated` added), for components that delegate authentication to the
    /// API server. Its `SubjectAccessReview`s are decided by RBAC over the stored roles and
    /// bindings (`system:masters` may do anything). The server itself still serves every
    /// request, with a token or without.
    pub fn user(mut self, token: &str, name: &str, groups: &[&str]) -> Self {
        let user = crate::auth::User {
            name: name.to_owned(),
            uid: format!("{name}-uid"),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        };
        self.users.insert(token.to_owned(), user);
        self
    }

    /// Binds `127.0.0.1` and starts serving, with the `default` and `kube-system` namespaces.
    pub async fn start(self) -> Result<ApiServer, ApiServerError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .map_err(|source| ApiServerError::Bind { port: self.port, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ApiServerError::Bind { port: self.port, source })?;
        let (control, _) = broadcast::channel(64);
        let shared = Arc::new(Shared {
            registry: Arc::new(
                Registry::new(Store::new(self.resources, self.history_limit, self.uncached))
                    .with_admission(Arc::new(crate::admission::WebhookAdmission))
                    .with_kind_strategies(self.users),
            ),
            control,
            faults: Arc::new(FaultState::default()),
            stats: Stats::default(),
            bookmark_interval: self.bookmark_interval,
            address: addr.to_string(),
        });
        let ns = shared.registry.store.resource("", "v1", "namespaces").expect("built in");
        for name in ["default", "kube-system"] {
            let target = Target { resource: ns, namespace: None, name: None };
            let namespace = serde_json::json!({ "metadata": { "name": name } });
            shared
                .registry
                .store_create(&target, namespace, false)
                .map_err(|e| ApiServerError::Kubeconfig(e.message))?;
        }
        let collector =
            self.garbage_collector.then(|| crate::registry::gc::spawn(&shared.registry));
        let router = axum::Router::new()
            .fallback(crate::http::handler::handle)
            .layer(axum::middleware::from_fn_with_state(
                shared.clone(),
                crate::http::panics::catch_panic,
            ))
            .layer(axum::middleware::from_fn(crate::http::limits::body_limit))
            .layer(axum::middleware::from_fn_with_state(
                shared.faults.clone(),
                crate::faults::latency::latency,
            ))
            .with_state(shared.clone());
        let served = router.clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            // Watch events are small writes: without TCP_NODELAY, Nagle's algorithm and delayed
            // ACKs hold each back ~40 ms. Go's net package (so kube-apiserver) sets it too.
            let listener = listener.tap_io(|tcp| {
                if let Err(err) = tcp.set_nodelay(true) {
                    tracing::debug!(%err, "could not set TCP_NODELAY");
                }
            });
            let serve = axum::serve(listener, served).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(err) = serve.await {
                tracing::error!(%err, "embedded API server stopped");
            }
        });
        let kubeconfig = kubeconfig_yaml(addr);
        let config = kube_client::Config::from_custom_kubeconfig(
            Kubeconfig::from_yaml(&kubeconfig)
                .map_err(|e| ApiServerError::Kubeconfig(e.to_string()))?,
            &KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| ApiServerError::Kubeconfig(e.to_string()))?;
        let client = kube_client::Client::try_from(config)?;
        tracing::debug!(%addr, "embedded API server listening");
        Ok(ApiServer {
            addr,
            shared,
            router,
            client,
            kubeconfig,
            stop: Some(stop),
            task: Some(task),
            collector,
        })
    }
}

fn kubeconfig_yaml(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: ctrlkit
  cluster:
    server: http://{addr}
contexts:
- name: ctrlkit
  context:
    cluster: ctrlkit
    user: ctrlkit
    namespace: default
current-context: ctrlkit
users:
- name: ctrlkit
  user: {{}}
"
    )
}

/// An in-process Kubernetes API server on loopback; see the [module docs](super).
///
/// Dropping it stops it; [`shutdown`](Self::shutdown) also waits for it to stop.
pub struct ApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// What answers every request, over loopback or in process.
    router: axum::Router,
    client: kube_client::Client,
    kubeconfig: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    /// The garbage collector's task, if it runs.
    collector: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl ApiServer {
    /// Starts a server with the built-in resource types on a free loopback port.
    pub async fn start() -> Result<Self, ApiServerError> {
        Self::builder().start().await
    }

    /// A builder for custom resources, a fixed port, bookmark period and history size.
    pub fn builder() -> ApiServerBuilder {
        ApiServerBuilder::default()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kube client for this server (default namespace `default`).
    pub fn client(&self) -> kube_client::Client {
        self.client.clone()
    }

    /// A kube client whose requests reach the server without a socket: each is handed to
    /// the server's router in this process (default namespace `default`).
    ///
    /// For tests on tokio's paused clock (`#[tokio::test(start_paused = true)]`): over
    /// loopback the clock jumps ahead whenever every task waits on the network, so a request
    /// in flight can take a Lease's whole duration; in process a request is answered before
    /// the runtime is idle, and time moves only when every task waits on a timer. Such a
    /// client has no timeouts of its own and no TLS, and it reaches a server that
    /// [`shutdown`](Self::shutdown) stopped as long as the client lives (the router is
    /// shared), though watches end at the stop.
    pub fn in_process_client(&self) -> kube_client::Client {
        kube_client::Client::new(self.router.clone(), "default")
    }

    /// The router every request goes through, for in-process clients.
    #[cfg_attr(not(feature = "harness"), allow(dead_code))]
    pub(crate) fn router(&self) -> axum::Router {
        self.router.clone()
    }

    /// A kubeconfig for this server, usable with `Config::from_custom_kubeconfig`.
    pub fn kubeconfig(&self) -> Kubeconfig {
        Kubeconfig::from_yaml(&self.kubeconfig).expect("the server's own kubeconfig parses")
    }

    /// Writes the kubeconfig to `path`, for kubectl (`kubectl --kubeconfig PATH`) or a
    /// controller run as a process.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<(), ApiServerError> {
        let path = path.as_ref();
        std::fs::write(path, &self.kubeconfig)
            .map_err(|source| ApiServerError::Write { path: path.display().to_string(), source })
    }

    /// Fault injection for this server.
    pub fn faults(&self) -> Faults {
        Faults {
            state: self.shared.faults.clone(),
            control: self.shared.control.clone(),
            registry: self.shared.registry.clone(),
        }
    }

    /// Requests answered so far, by verb.
    pub fn requests(&self) -> RequestCounts {
        let s = &self.shared.stats;
        let get = |c: &AtomicU64| c.load(Ordering::SeqCst);
        RequestCounts {
            list: get(&s.list),
            watch: get(&s.watch),
            get: get(&s.get),
            create: get(&s.create),
            update: get(&s.update),
            patch: get(&s.patch),
            delete: get(&s.delete),
        }
    }

    /// The watches open now, over every resource: a gauge that falls as watches end or their
    /// clients go away (kube-apiserver's `apiserver_longrunning_requests{verb="WATCH"}`),
    /// where [`requests`](Self::requests)`().watch` counts every watch ever asked.
    pub fn open_watches(&self) -> u64 {
        self.shared.stats.open_watches.all().values().sum()
    }

    /// The watches of `resource` open now, the resource named as kubectl names it: its plural
    /// for the core group (`configmaps`), `plural.group` otherwise
    /// (`configmapsets.ctrlkit.example.com`). Streaming lists count: they are watches.
    pub fn open_watches_of(&self, resource: &str) -> u64 {
        self.shared.stats.open_watches.of(resource)
    }

    /// Every resource with a watch open now, and how many (see
    /// [`open_watches_of`](Self::open_watches_of)).
    pub fn open_watches_by_resource(&self) -> std::collections::BTreeMap<String, u64> {
        self.shared.stats.open_watches.all()
    }

    /// Requests whose handler panicked: each answered with a 500 (see
    /// [`Faults::panic_next`](crate::Faults::panic_next)), logged, and counted here.
    pub fn handler_panics(&self) -> u64 {
        self.shared.stats.panics.load(Ordering::SeqCst)
    }

    /// The newest resourceVersion of the store.
    pub fn resource_version(&self) -> u64 {
        self.shared.registry.store.current_rv()
    }

    /// Objects stored, over all types.
    pub fn object_count(&self) -> usize {
        self.shared.registry.store.len()
    }

    /// Stops serving: ends open watches, closes connections, and waits for the server task.
    pub async fn shutdown(mut self) {
        self.stop_serving();
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }

    fn stop_serving(&mut self) {
        if let Some(collector) = self.collector.take() {
            collector.abort();
        }
        self.shared.signal(WatchSignal::Close);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop_serving();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
