//! The strategy of core/v1 Pods (kube's `pkg/registry/core/pod`): no scheduler or kubelet runs
//! here, so a new pod is `Pending`, as on a bare kube-apiserver; a delete is graceful (the pod
//! is marked, which watchers see as MODIFIED, then removed) and answers with the pod; field
//! selectors may name `spec.nodeName` and `status.phase`.

use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::model::status::ApiResult;
use crate::registry::Strategy;

/// The rules of Pods, registered for core/v1 `pods`.
pub(crate) struct PodStrategy;

impl Strategy for PodStrategy {
    fn validate_create(&self, _: &ResourceType, pod: &mut Value) -> ApiResult<()> {
        pod["status"] = json!({ "phase": "Pending" });
        Ok(())
    }
    fn graceful_delete(&self) -> bool {
        true
    }
    fn returns_deleted_object(&self) -> bool {
        true
    }
    fn field_labels(&self) -> &'static [&'static str] {
        &["spec.nodeName", "status.phase"]
    }
}
