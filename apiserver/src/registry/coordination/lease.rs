//! The strategy of Leases: its Table, `Name, Holder, Age`.

use serde_json::Value;

use crate::model::resources::ResourceType;
use crate::registry::Strategy;
use crate::registry::printers::{Column, age, named, or_none, row, text};

/// The rules of Leases, registered for `coordination.k8s.io/v1` `leases`.
pub(crate) struct LeaseStrategy;

impl Strategy for LeaseStrategy {
    fn columns(&self, _: &ResourceType) -> Vec<Column> {
        named(vec![text("Holder"), text("Age")])
    }
    fn cells(&self, _: &ResourceType, lease: &Value, now: i64) -> Vec<Value> {
        row(lease, vec![or_none(&lease["spec"]["holderIdentity"]), age(lease, now)])
    }
}
