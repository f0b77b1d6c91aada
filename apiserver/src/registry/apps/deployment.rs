//! The strategy of Deployments: its Table, `Name, Ready, Up-to-date, Available, Age` and, wide,
//! `Containers, Images, Selector`.

use serde_json::Value;

use crate::model::resources::ResourceType;
use crate::registry::Strategy;
use crate::registry::printers::{self, Column, age, integer, named, row, text};

/// The rules of Deployments, registered for `apps/v1` `deployments`.
pub(crate) struct DeploymentStrategy;

impl Strategy for DeploymentStrategy {
    fn columns(&self, _: &ResourceType) -> Vec<Column> {
        let mut columns = vec![text("Ready"), text("Up-to-date"), text("Available"), text("Age")];
        columns.extend(printers::template_columns(true));
        named(columns)
    }
    fn cells(&self, _: &ResourceType, deployment: &Value, now: i64) -> Vec<Value> {
        let status = &deployment["status"];
        let mut cells = vec![
            printers::ready_of_desired(deployment),
            integer(&status["updatedReplicas"]),
            integer(&status["availableReplicas"]),
            age(deployment, now),
        ];
        cells.extend(printers::template_cells(&deployment["spec"], true));
        row(deployment, cells)
    }
}
