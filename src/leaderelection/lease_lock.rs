//! [`LeaseLock`]: the leader election record kept in a `coordination.k8s.io/v1` Lease, read and
//! written as client-go's `resourcelock.LeaseLock` does, so that client-go and ctrlkit
//! candidates can share one Lease.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube_client::api::PostParams;
use kube_client::{Api, Client};
use parking_lot::Mutex;

/// client-go's `LeaderElectionRecord`: what a Lease's spec says about its holder.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct LeaderElectionRecord {
    /// The leader's identity; empty when nobody holds the lease (it was released).
    pub holder_identity: String,
    /// How long, in whole seconds, the holder claims the lease for after each renewal.
    pub lease_duration_seconds: i32,
    /// When the current holder acquired it.
    pub acquire_time: Option<MicroTime>,
    /// When the current holder last renewed it.
    pub renew_time: Option<MicroTime>,
    /// How many times the lease changed holder.
    pub leader_transitions: i32,
}

impl LeaderElectionRecord {
    fn from_spec(spec: &LeaseSpec) -> Self {
        Self {
            holder_identity: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or_default(),
            acquire_time: spec.acquire_time.clone(),
            renew_time: spec.renew_time.clone(),
            leader_transitions: spec.lease_transitions.unwrap_or_default(),
        }
    }

    /// As client-go writes it: every field set (an empty holder is written as `""`).
    fn to_spec(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder_identity.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.clone(),
            renew_time: self.renew_time.clone(),
            lease_transitions: Some(self.leader_transitions),
            // Fields client-go 1.20 does not know stay as they were.
            ..previous.cloned().unwrap_or_default()
        }
    }
}

/// A leader election lock in the Lease `namespace/name`, for the candidate `identity`.
///
/// Updates carry the resourceVersion of the Lease last read, so two candidates that read the
/// same version cannot both write: one gets 409 Conflict (optimistic concurrency).
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
    /// Labels the Lease is created with.
    labels: BTreeMap<String, String>,
    /// The Lease as last read or written: its resourceVersion guards the next update.
    lease: Mutex<Option<Lease>>,
}

impl std::fmt::Debug for LeaseLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseLock")
            .field("lease", &self.describe())
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl LeaseLock {
    /// The Lease `namespace/name`, for the candidate `identity` (unique among candidates:
    /// [`default_identity`](super::default_identity), or a pod's name).
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            api: Api::namespaced(crate::user_agent::with_default(client), namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            labels: BTreeMap::new(),
            lease: Mutex::new(None),
        }
    }

    /// The same lock, its requests counted in `layer` (a Manager's request layer).
    pub(crate) fn instrumented(mut self, layer: &crate::rest_client::RequestLayer) -> Self {
        let namespace = self.api.namespace().unwrap_or_default().to_owned();
        let client = crate::rest_client::instrument(self.api.into_client(), layer);
        self.api = Api::namespaced(client, &namespace);
        self
    }

    /// Creates the Lease with `labels` (a shard's Lease names its ring, so that the ring's
    /// members are one labelled list); an existing Lease's labels are left as they are.
    #[must_use]
    pub fn labels(mut self, labels: BTreeMap<String, String>) -> Self {
        self.labels = labels;
        self
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The Lease's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `namespace/name`.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.api.namespace().unwrap_or_default(), self.name)
    }

    fn store(&self, lease: Option<Lease>) {
        *self.lease.lock() = lease;
    }

    /// Reads the record; `None` when the Lease does not exist.
    pub(crate) async fn get(&self) -> kube_client::Result<Option<LeaderElectionRecord>> {
        let lease = crate::cache::get_opt(&self.api, &self.name, &()).await?;
        let record = lease
            .as_ref()
            .map(|l| LeaderElectionRecord::from_spec(&l.spec.clone().unwrap_or_default()));
        self.store(lease);
        Ok(record)
    }

    /// Creates the Lease with `record`.
    pub(crate) async fn create(&self, record: &LeaderElectionRecord) -> kube_client::Result<()> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(self.labels.clone()).filter(|l| !l.is_empty()),
                ..ObjectMeta::default()
            },
            spec: Some(record.to_spec(None)),
        };
        let created = self.api.create(&PostParams::default(), &lease).await?;
        self.store(Some(created));
        Ok(())
    }

    /// Writes `record` over the Lease last read, guarded by its resourceVersion.
    pub(crate) async fn update(&self, record: &LeaderElectionRecord) -> kube_client::Result<()> {
        let Some(mut lease) = self.lease.lock().clone() else {
            return Err(kube_client::Error::Service(
                "the lease was not read yet: get or create it first".into(),
            ));
        };
        lease.spec = Some(record.to_spec(lease.spec.as_ref()));
        let updated = self.api.replace(&self.name, &PostParams::default(), &lease).await?;
        self.store(Some(updated));
        Ok(())
    }
}
