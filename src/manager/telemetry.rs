//! What the manager reports to: with the `metrics` feature, a [`Registry`] that its factory,
//! controllers, leader election and event recorders report to, and the `/metrics` `/healthz`
//! `/readyz` endpoint with its readiness checks; without it, nothing. Every
//! `cfg(feature = "metrics")` of the manager's wiring is in this file, so the rest reads the
//! same with and without the feature.
//!
//! [`Registry`]: crate::metrics::Registry

use std::sync::Arc;

use super::ManagerError;
use crate::cache::{InformerObject, SharedInformerFactoryBuilder};
use crate::controller::ControllerBuilder;
use crate::events::EventMetrics;
use crate::leaderelection::LeaderMetrics;
use crate::rest_client::RequestMetrics;

/// What is done when a runnable leaves its manager through a handle (a controller: its
/// labelled metric series go).
pub(super) type Forget = Box<dyn FnOnce() + Send>;

/// The registry, the endpoint's address and its readiness checks (all empty without the
/// `metrics` feature). Cheap to clone: clones share the checks.
#[derive(Debug, Clone, Default)]
pub(super) struct Telemetry {
    #[cfg(feature = "metrics")]
    registry: Option<crate::metrics::Registry>,
    #[cfg(feature = "metrics")]
    address: Option<std::net::SocketAddr>,
    #[cfg(feature = "metrics")]
    probes: crate::metrics::Probes,
    /// HTTPS, scrapes reviewed through the manager's client.
    #[cfg(feature = "secure-metrics")]
    secure: Option<crate::metrics::SecureServing>,
}

impl Telemetry {
    /// Records metrics in `registry`.
    #[cfg(feature = "metrics")]
    pub(super) fn set_registry(&mut self, registry: crate::metrics::Registry) {
        self.registry = Some(registry);
    }

    /// Serves the endpoint on `address`, with a new registry unless one was set.
    #[cfg(feature = "metrics")]
    pub(super) fn set_address(&mut self, address: std::net::SocketAddr) {
        self.address = Some(address);
        self.registry.get_or_insert_with(crate::metrics::Registry::new);
    }

    /// Serves the endpoint over HTTPS, scrapes of `/metrics` reviewed through the client
    /// given to [`serve`](Self::serve).
    #[cfg(feature = "secure-metrics")]
    pub(super) fn set_secure(&mut self, serving: crate::metrics::SecureServing) {
        self.secure = Some(serving);
    }

    /// The registry, if metrics are recorded.
    #[cfg(feature = "metrics")]
    pub(super) fn registry(&self) -> Option<&crate::metrics::Registry> {
        self.registry.as_ref()
    }

    /// The factory, reporting its informers' metrics to the registry.
    pub(super) fn factory(
        &self,
        factory: SharedInformerFactoryBuilder,
    ) -> SharedInformerFactoryBuilder {
        #[cfg(feature = "metrics")]
        if let Some(registry) = &self.registry {
            return factory.informer_metrics(Arc::new(registry.clone()));
        }
        factory
    }

    /// A controller builder reporting its controller and queue metrics to the registry.
    pub(super) fn controller<K: InformerObject>(
        &self,
        builder: ControllerBuilder<K>,
    ) -> ControllerBuilder<K> {
        #[cfg(feature = "metrics")]
        if let Some(registry) = &self.registry {
            return builder
                .metrics(Arc::new(registry.clone()))
                .default_queue_metrics(Arc::new(registry.clone()));
        }
        builder
    }

    /// Leader election's metrics, if recorded.
    pub(super) fn leader_metrics(&self) -> Option<Arc<dyn LeaderMetrics>> {
        #[cfg(feature = "metrics")]
        return self.registry.clone().map(|r| Arc::new(r) as _);
        #[cfg(not(feature = "metrics"))]
        None
    }

    /// Event recorders' metrics, if recorded.
    pub(super) fn event_metrics(&self) -> Option<Arc<dyn EventMetrics>> {
        #[cfg(feature = "metrics")]
        return self.registry.clone().map(|r| Arc::new(r) as _);
        #[cfg(not(feature = "metrics"))]
        None
    }

    /// The sink of the clients' requests (`rest_client_*`), if metrics are recorded.
    pub(super) fn request_metrics(&self) -> Option<Arc<dyn RequestMetrics>> {
        #[cfg(feature = "metrics")]
        return self.registry.clone().map(|r| Arc::new(r) as _);
        #[cfg(not(feature = "metrics"))]
        None
    }

    /// Sets a readiness check of `/readyz`.
    pub(super) fn set_probe(&self, _name: &str, _passes: bool) {
        #[cfg(feature = "metrics")]
        self.probes.set(_name, _passes);
    }

    /// Adds a runnable's readiness check to `/readyz`.
    pub(super) fn add_ready_check(&self, _name: &str, _check: crate::runnable::ReadyCheck) {
        #[cfg(feature = "metrics")]
        self.probes.add_check(_name, _check);
    }

    /// Takes a runnable's readiness check out of `/readyz` (if it is still the one of
    /// `name`).
    pub(super) fn remove_ready_check(&self, _name: &str, _check: &crate::runnable::ReadyCheck) {
        #[cfg(feature = "metrics")]
        self.probes.remove_check(_name, _check);
    }

    /// What removes the series of the controller `controller` (its queue named `queue`)
    /// from the registry, if metrics are recorded.
    pub(super) fn forget_controller(&self, _controller: &str, _queue: &str) -> Option<Forget> {
        #[cfg(feature = "metrics")]
        if let Some(registry) = &self.registry {
            let (registry, controller, queue) =
                (registry.clone(), _controller.to_owned(), _queue.to_owned());
            return Some(Box::new(move || registry.remove_controller(&controller, &queue)));
        }
        None
    }

    /// Starts the endpoint, if an address was set (scrapes reviewed through `client` when
    /// served securely).
    pub(super) async fn serve(
        &self,
        client: &kube_client::Client,
    ) -> Result<Endpoint, ManagerError> {
        let _ = client; // used by secure serving alone
        #[cfg(feature = "metrics")]
        if let (Some(address), Some(registry)) = (self.address, &self.registry) {
            let (registry, probes) = (registry.clone(), self.probes.clone());
            #[cfg(feature = "secure-metrics")]
            if let Some(serving) = &self.secure {
                let server = crate::metrics::MetricsServer::start_secure(
                    address,
                    registry,
                    probes,
                    client.clone(),
                    serving.clone(),
                )
                .await
                .map_err(|source| ManagerError::Serve { address, source })?;
                return Ok(Endpoint { server: Some(server) });
            }
            let server = crate::metrics::MetricsServer::start(address, registry, probes)
                .await
                .map_err(|source| ManagerError::Serve { address, source })?;
            return Ok(Endpoint { server: Some(server) });
        }
        Ok(Endpoint::default())
    }
}

/// The endpoint while the manager runs (none without an address, or without the feature).
#[derive(Debug, Default)]
pub(super) struct Endpoint {
    #[cfg(feature = "metrics")]
    server: Option<crate::metrics::MetricsServer>,
}

impl Endpoint {
    /// Stops serving.
    pub(super) async fn stop(self) {
        #[cfg(feature = "metrics")]
        if let Some(server) = self.server {
            server.shutdown().await;
        }
    }
}
