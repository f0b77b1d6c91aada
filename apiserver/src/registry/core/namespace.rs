//! The strategy of core/v1 Namespaces (kube's `pkg/registry/core/namespace`): a namespace's
//! name is a DNS label; a new one is `Active`; a delete answers with the namespace and, as no
//! namespace controller runs here, removes every object in it in the same write. Its Table:
//! `Name, Status, Age`.

use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::model::status::ApiResult;
use crate::registry::printers::{Column, age, named, row, text};
use crate::registry::{NameRule, Strategy};
use crate::storage::store::{Store, StoredObject, Txn, object_key};

/// The rules of Namespaces, registered for core/v1 `namespaces`.
pub(crate) struct NamespaceStrategy;

impl Strategy for NamespaceStrategy {
    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }
    fn validate_create(&self, _: &ResourceType, namespace: &mut Value) -> ApiResult<()> {
        namespace["status"] = json!({ "phase": "Active" });
        Ok(())
    }
    fn removing(&self, txn: &mut Txn<'_>, store: &Store, namespace: &StoredObject) {
        delete_contents(txn, store, &namespace.fields.name);
    }
    fn returns_deleted_object(&self) -> bool {
        true
    }
    fn columns(&self, _: &ResourceType) -> Vec<Column> {
        named(vec![text("Status"), text("Age")])
    }
    fn cells(&self, _: &ResourceType, namespace: &Value, now: i64) -> Vec<Value> {
        let phase = namespace["status"]["phase"].as_str().unwrap_or("Active");
        row(namespace, vec![json!(phase), age(namespace, now)])
    }
}

/// Removes every namespaced object in namespace `ns`.
fn delete_contents(txn: &mut Txn<'_>, store: &Store, ns: &str) {
    for (id, rt) in store.served_types() {
        if !rt.namespaced {
            continue;
        }
        for object in txn.list(id, Some(ns)) {
            let key = object_key(Some(ns), &object.fields.name);
            txn.remove(id, &key, object.value());
        }
    }
}
