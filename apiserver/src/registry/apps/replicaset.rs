//! The strategy of ReplicaSets: its Table, `Name, Desired, Current, Ready, Age` and, wide,
//! `Containers, Images, Selector`.

use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::registry::Strategy;
use crate::registry::printers::{self, Column, age, int, integer, named, replicas, row, text};

/// The rules of ReplicaSets, registered for `apps/v1` `replicasets`.
pub(crate) struct ReplicaSetStrategy;

impl Strategy for ReplicaSetStrategy {
    fn columns(&self, _: &ResourceType) -> Vec<Column> {
        let mut columns = vec![int("Desired"), int("Current"), int("Ready"), text("Age")];
        columns.extend(printers::template_columns(true));
        named(columns)
    }
    fn cells(&self, _: &ResourceType, set: &Value, now: i64) -> Vec<Value> {
        let status = &set["status"];
        let mut cells = vec![
            json!(replicas(&set["spec"])),
            integer(&status["replicas"]),
            integer(&status["readyReplicas"]),
            age(set, now),
        ];
        cells.extend(printers::template_cells(&set["spec"], true));
        row(set, cells)
    }
}
