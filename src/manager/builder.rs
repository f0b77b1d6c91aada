//! [`ManagerBuilder`]: a [`Manager`]'s namespace, informer settings, graceful-shutdown
//! timeout, leader election, metrics and request counting, set before it is built.

use std::sync::Arc;
use std::time::Duration;

use kube_client::Client;

use super::Manager;
use super::telemetry::Telemetry;
use crate::cache::{InformerConfig, SharedInformerFactory};
use crate::leaderelection::{LeaderElectionConfig, LeaderElector, LeaseLock};
use crate::rest_client::{self, RequestLayer, RequestMetrics};
use crate::sharding::{Ring, ShardLease};

/// Builds a [`Manager`]; see [`Manager::builder`].
pub struct ManagerBuilder {
    client: Client,
    namespace: Option<String>,
    informer_config: InformerConfig,
    graceful_shutdown_timeout: Duration,
    server_ready_timeout: Duration,
    election: Option<(LeaseLock, LeaderElectionConfig)>,
    sharding: Option<(Ring, String)>,
    telemetry: Telemetry,
    /// The client was built from a config without retries: kube-client's retries go
    /// outside the request count.
    retry_outside: bool,
    /// The API server's `host:port`, for the request metrics' `host` label.
    api_host: String,
    request_metrics: Option<Arc<dyn RequestMetrics>>,
}

impl std::fmt::Debug for ManagerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerBuilder")
            .field("namespace", &self.namespace)
            .field("informer_config", &self.informer_config)
            .field("graceful_shutdown_timeout", &self.graceful_shutdown_timeout)
            .field("api_host", &self.api_host)
            .finish_non_exhaustive()
    }
}

impl ManagerBuilder {
    /// A builder with the defaults: all namespaces, default informer settings, a 30 s
    /// graceful-shutdown timeout, no leader election, no metrics.
    pub(super) fn new(client: Client) -> Self {
        Self {
            client,
            namespace: None,
            informer_config: InformerConfig::default(),
            graceful_shutdown_timeout: Duration::from_secs(30),
            server_ready_timeout: Duration::from_secs(30),
            election: None,
            sharding: None,
            telemetry: Telemetry::default(),
            retry_outside: false,
            api_host: String::new(),
            request_metrics: None,
        }
    }

    /// The API server's `host:port`, the `host` label of the requests counted (see
    /// [`rest_client`](crate::rest_client)): a prebuilt client does not say which server it
    /// talks to, so without this it is `""`.
    /// [`Manager::builder_from_config`] takes it from the config.
    #[must_use]
    pub fn api_host(mut self, host: &str) -> Self {
        self.api_host = host.to_owned();
        self
    }

    /// Tells `sink` of each request the manager's clients send (see
    /// [`rest_client`](crate::rest_client)): besides the metrics registry, if there is one.
    #[must_use]
    pub fn request_metrics(mut self, sink: Arc<dyn RequestMetrics>) -> Self {
        self.request_metrics = Some(sink);
        self
    }

    /// Limits the factory's typed informers of namespaced kinds to `namespace` (see
    /// [`SharedInformerFactoryBuilder::namespace`](crate::cache::SharedInformerFactoryBuilder::namespace)).
    #[must_use]
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned());
        self
    }

    /// The settings of every informer the manager's factory makes.
    #[must_use]
    pub fn informer_config(mut self, config: InformerConfig) -> Self {
        self.informer_config = config;
        self
    }

    /// How long a stop waits for runnables to finish before abandoning them (default 30 s,
    /// as controller-runtime's `GracefulShutdownTimeout`).
    #[must_use]
    pub fn graceful_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.graceful_shutdown_timeout = timeout;
        self
    }

    /// How long [`run`](Manager::run) waits for the servers ([`Phase::Server`] runnables) to
    /// pass their [ready checks](crate::runnable::Runnable::ready_check) before it starts the
    /// caches (default 30 s; controller-runtime waits for its webhook servers to have
    /// started too). At the timeout it logs which did not pass and starts the caches anyway.
    ///
    /// [`Phase::Server`]: crate::runnable::Phase::Server
    #[must_use]
    pub fn server_ready_timeout(mut self, timeout: Duration) -> Self {
        self.server_ready_timeout = timeout;
        self
    }

    /// Runs the runnables that need a leader (controllers, unless they say otherwise) only
    /// while this replica leads the election on `lock`; the informers run all along, so a new
    /// leader starts at once from warm caches. Losing the lease stops the manager with
    /// [`ManagerError::LeaderElection`](super::ManagerError::LeaderElection); a graceful stop releases the lease after the
    /// runnables have stopped, so a successor takes over at once.
    #[must_use]
    pub fn leader_election(mut self, lock: LeaseLock, config: LeaderElectionConfig) -> Self {
        self.election = Some((lock, config));
        self
    }

    /// Makes this replica shard `shard` of `ring` (see [`crate::sharding`]): the manager
    /// holds the shard's Lease while it runs (released at a graceful stop, after its
    /// controllers stopped), the builders of [`Manager::controller`] are sharded (unless
    /// [`unsharded`](crate::controller::ControllerBuilder::unsharded)), and sharded controllers
    /// run once the Lease is held, on every member, leader or not. Losing the Lease stops the
    /// manager with [`ManagerError::ShardLease`](super::ManagerError::ShardLease). Add the
    /// ring's [`Sharder`](crate::sharding::Sharder) as a runnable: with leader election it
    /// runs on the leader alone. `shard` is unique in the ring and a valid object name (a pod
    /// name).
    #[must_use]
    pub fn sharding(mut self, ring: Ring, shard: &str) -> Self {
        self.sharding = Some((ring, shard.to_owned()));
        self
    }

    /// Records metrics in `registry` (work queues, informers, controllers, leader election,
    /// event recorders made by [`Manager::event_recorder`]). Implied by
    /// [`metrics_address`](Self::metrics_address), with a new registry.
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    #[must_use]
    pub fn metrics(mut self, registry: crate::metrics::Registry) -> Self {
        self.telemetry.set_registry(registry);
        self
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` on `address` while the manager runs
    /// (`/readyz`: the caches synced, the election campaigning or leading, and each
    /// runnable's own check; `/readyz/<check>` asks one check alone, `?exclude=<check>`
    /// leaves one out, as in kube-apiserver, but a failing check answers `503` where
    /// kube-apiserver answers `500`).
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    #[must_use]
    pub fn metrics_address(mut self, address: std::net::SocketAddr) -> Self {
        self.telemetry.set_address(address);
        self
    }

    /// Serves the metrics endpoint of [`metrics_address`](Self::metrics_address) over HTTPS,
    /// each scrape of `/metrics` let in only for a bearer token that the API server
    /// authenticates (`TokenReview`) and authorizes for `get /metrics`
    /// (`SubjectAccessReview`), as controller-runtime's `secureServing`; `/healthz` and
    /// `/readyz` stay open for the kubelet. See [`SecureServing`](crate::metrics::SecureServing).
    #[cfg(feature = "secure-metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "secure-metrics")))]
    #[must_use]
    pub fn metrics_secure_serving(mut self, serving: crate::metrics::SecureServing) -> Self {
        self.telemetry.set_secure(serving);
        self
    }

    /// The manager. A leader election configuration that breaks the rules of
    /// [`LeaderElectionConfig::validate`] makes [`run`](Manager::run) fail at once with
    /// [`ManagerError::LeaderElection`](super::ManagerError::LeaderElection).
    pub fn build(self) -> Manager {
        let sinks = self.request_metrics.into_iter().chain(self.telemetry.request_metrics());
        let requests = RequestLayer::new(&self.api_host, sinks.collect());
        let client = if self.retry_outside {
            rest_client::instrument_with_retry(self.client, &requests)
        } else {
            rest_client::instrument(self.client, &requests)
        };
        let mut factory = SharedInformerFactory::builder(client.clone())
            .informer_config(self.informer_config)
            .request_layer(requests.clone());
        if let Some(namespace) = &self.namespace {
            factory = factory.namespace(namespace);
        }
        let factory = self.telemetry.factory(factory).build();
        let leader_metrics = self.telemetry.leader_metrics();
        let elector = self
            .election
            .map(|(lock, config)| {
                let lock = lock.instrumented(&requests);
                LeaderElector::with_metrics(lock, config, leader_metrics)
            })
            .transpose();
        let shard = self
            .sharding
            .as_ref()
            .map(|(ring, id)| ShardLease::new(client.clone(), ring, id))
            .transpose();
        let mut manager = Manager::from_parts(
            client,
            factory,
            self.graceful_shutdown_timeout,
            elector,
            self.telemetry,
        );
        manager.shard = shard;
        manager.server_ready_timeout = self.server_ready_timeout;
        manager.sharding = self.sharding;
        manager.requests = requests;
        manager
    }
}

impl Manager {
    /// A manager over all namespaces with default settings. Its request counts see only the
    /// final answers of a client that retries on its own, as [`builder`](Self::builder) says.
    pub fn new(client: Client) -> Self {
        Self::builder(client).build()
    }

    /// A builder for a namespace, informer settings and the graceful-shutdown timeout.
    ///
    /// The manager counts its clients' requests (see [`rest_client`](crate::rest_client))
    /// around `client`: a client built with kube-client's `default_retry` (the default)
    /// retries 429, 503 and 504 inside, so the counts see only each request's final answer
    /// and throttling that a retry got past goes unseen. Prefer
    /// [`builder_from_config`](Self::builder_from_config), or build `client` with
    /// `default_retry = false`.
    pub fn builder(client: Client) -> ManagerBuilder {
        ManagerBuilder::new(client)
    }

    /// A builder whose client is made from `config`, with kube-client's retries of 429, 503
    /// and 504 (`RetryPolicy::server_retry`, honouring `Retry-After`) outside the request
    /// count, so that each attempt is counted, 429s included (see
    /// [`rest_client`](crate::rest_client)); the requests' `host` label is the authority of
    /// `config.cluster_url`. `config.default_retry` is turned off, as the retries are the
    /// manager's. A retry goes through the client's authentication again (a token that
    /// expired meanwhile is refreshed) and has a tracing span of its own.
    ///
    /// # Errors
    /// What `Client::try_from(config)` fails with (a TLS or authentication setting that
    /// cannot be used). Needs a tokio runtime.
    pub fn builder_from_config(
        mut config: kube_client::Config,
    ) -> Result<ManagerBuilder, kube_client::Error> {
        let host = rest_client::host_of(&config.cluster_url);
        config.default_retry = false;
        let mut builder = ManagerBuilder::new(Client::try_from(config)?).api_host(&host);
        builder.retry_outside = true;
        Ok(builder)
    }
}
