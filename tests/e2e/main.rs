//! End to end: ctrlkit's informer, controller and the pod example against an API server,
//! through kube-client and as a process. Every case runs on the embedded server and, when
//! one is configured (`scripts/e2e.sh`), on a real kube-apiserver with etcd.

use std::process::ExitCode;

#[cfg(feature = "webhook")]
mod admission;
mod chaos;
mod common;
mod controller;
mod convergence;
#[cfg(feature = "metrics")]
mod events;
mod example;
mod factory;
mod fairness;
mod finalizer;
mod guards;
mod handle;
mod informer;
mod leaderelection;
mod read_your_writes;
#[cfg(feature = "secure-metrics")]
mod secure_metrics;
#[cfg(feature = "webhook")]
mod serving;
mod sharding;
mod sources;
#[path = "../support/mod.rs"]
mod support;
mod user_agent;
mod webhooks;

fn main() -> ExitCode {
    // Run again by the chaos harness as one of its replicas.
    if let Ok(spec) = std::env::var(support::chaos::REPLICA_ENV) {
        return support::chaos::replica_main(&spec);
    }
    // Run again as a webhook server with few descriptors.
    #[cfg(feature = "webhook")]
    if std::env::var_os(serving::HELPER_ENV).is_some() {
        return serving::helper_main();
    }
    ctrlkit_apiserver::harness::main_with(common::server)
}
