//! The strategy of core/v1 Services (kube's `pkg/registry/core/service`): a service's name is a
//! DNS label (it becomes a DNS name in the cluster), and a delete answers with the service.

use crate::registry::{NameRule, Strategy};

/// The rules of Services, registered for core/v1 `services`.
pub(crate) struct ServiceStrategy;

impl Strategy for ServiceStrategy {
    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }
    fn returns_deleted_object(&self) -> bool {
        true
    }
}
