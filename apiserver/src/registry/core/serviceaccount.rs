//! The strategy of core/v1 ServiceAccounts (kube's `pkg/registry/core/serviceaccount`): a
//! delete answers with the service account.

use crate::registry::Strategy;

/// The rules of ServiceAccounts, registered for core/v1 `serviceaccounts`.
pub(crate) struct ServiceAccountStrategy;

impl Strategy for ServiceAccountStrategy {
    fn returns_deleted_object(&self) -> bool {
        true
    }
}
