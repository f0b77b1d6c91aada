//! The strategy of core/v1 ServiceAccounts (kube's `pkg/registry/core/serviceaccount`): a
//! delete answers with the service account. Its Table: `Name, Age` (1.20 had a `Secrets`
//! column, 1.36 has none).

use serde_json::Value;

use crate::model::resources::ResourceType;
use crate::registry::Strategy;
use crate::registry::printers::{Column, age, named, row, text};

/// The rules of ServiceAccounts, registered for core/v1 `serviceaccounts`.
pub(crate) struct ServiceAccountStrategy;

impl Strategy for ServiceAccountStrategy {
    fn returns_deleted_object(&self) -> bool {
        true
    }
    fn columns(&self, _: &ResourceType) -> Vec<Column> {
        named(vec![text("Age")])
    }
    fn cells(&self, _: &ResourceType, account: &Value, now: i64) -> Vec<Value> {
        row(account, vec![age(account, now)])
    }
}
