//! `ConfigMapSet` `ctrlkit.example.com/v2`: `spec.size` where v1 says `spec.replicas`, and the
//! conversions both ways. v1 stays the stored version and the one the controller reads; the
//! conversion webhook (`--webhook-port`) converts between the two for whoever asks for the
//! other (`kubectl get configmapsets.v2.ctrlkit.example.com`).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ConfigMapSetStatus;

/// A set of ConfigMaps named `<set>-0`, `<set>-1`, ..., each holding `data`.
// Two `printcolumn(..)` are two columns, not one attribute twice.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ctrlkit.example.com",
    version = "v2",
    kind = "ConfigMapSet",
    namespaced,
    status = "ConfigMapSetStatus",
    shortname = "cms",
    printcolumn(name = "Size", type_ = "integer", json_path = ".spec.size"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.ready")
)]
pub(super) struct ConfigMapSetSpec {
    /// How many ConfigMaps the set keeps (1 when left out).
    #[schemars(range(min = 0))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) size: Option<i32>,
    /// What each ConfigMap holds.
    #[serde(default)]
    pub(super) data: BTreeMap<String, String>,
}

impl From<ConfigMapSet> for super::ConfigMapSet {
    fn from(set: ConfigMapSet) -> Self {
        let spec = super::ConfigMapSetSpec { replicas: set.spec.size, data: set.spec.data };
        Self { metadata: set.metadata, spec, status: set.status }
    }
}

impl From<super::ConfigMapSet> for ConfigMapSet {
    fn from(set: super::ConfigMapSet) -> Self {
        let spec = ConfigMapSetSpec { size: set.spec.replicas, data: set.spec.data };
        Self { metadata: set.metadata, spec, status: set.status }
    }
}
