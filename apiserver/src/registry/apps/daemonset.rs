//! The strategy of DaemonSets: its Table, `Name, Desired, Current, Ready, Up-to-date,
//! Available, Node Selector, Age` and, wide, `Containers, Images, Selector`.

use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::registry::Strategy;
use crate::registry::printers::{self, Column, age, int, integer, map_string, named, row, text};

/// The rules of DaemonSets, registered for `apps/v1` `daemonsets`.
pub(crate) struct DaemonSetStrategy;

impl Strategy for DaemonSetStrategy {
    fn columns(&self, _: &ResourceType) -> Vec<Column> {
        let mut columns = vec![
            int("Desired"),
            int("Current"),
            int("Ready"),
            int("Up-to-date"),
            int("Available"),
            text("Node Selector"),
            text("Age"),
        ];
        columns.extend(printers::template_columns(true));
        named(columns)
    }
    fn cells(&self, _: &ResourceType, set: &Value, now: i64) -> Vec<Value> {
        let (spec, status) = (&set["spec"], &set["status"]);
        let node_selector = map_string(&spec["template"]["spec"]["nodeSelector"]);
        let mut cells = vec![
            integer(&status["desiredNumberScheduled"]),
            integer(&status["currentNumberScheduled"]),
            integer(&status["numberReady"]),
            integer(&status["updatedNumberScheduled"]),
            integer(&status["numberAvailable"]),
            json!(node_selector.unwrap_or_else(|| "<none>".to_owned())),
            age(set, now),
        ];
        cells.extend(printers::template_cells(spec, true));
        row(set, cells)
    }
}
