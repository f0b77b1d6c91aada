//! The strategy of StatefulSets: its Table, `Name, Ready, Age` and, wide, `Containers, Images`.

use serde_json::Value;

use crate::model::resources::ResourceType;
use crate::registry::Strategy;
use crate::registry::printers::{self, Column, age, named, row, text};

/// The rules of StatefulSets, registered for `apps/v1` `statefulsets`.
pub(crate) struct StatefulSetStrategy;

impl Strategy for StatefulSetStrategy {
    fn columns(&self, _: &ResourceType) -> Vec<Column> {
        let mut columns = vec![text("Ready"), text("Age")];
        columns.extend(printers::template_columns(false));
        named(columns)
    }
    fn cells(&self, _: &ResourceType, set: &Value, now: i64) -> Vec<Value> {
        let mut cells = vec![printers::ready_of_desired(set), age(set, now)];
        cells.extend(printers::template_cells(&set["spec"], false));
        row(set, cells)
    }
}
