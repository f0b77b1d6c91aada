//! The strategy of Jobs: its Table, `Name, Completions, Duration, Age` and, wide,
//! `Containers, Images, Selector`.

use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::registry::Strategy;
use crate::registry::printers::{
    self, Column, age, human_duration, named, parse_time, row, text, unix_now,
};

/// The rules of Jobs, registered for `batch/v1` `jobs`.
pub(crate) struct JobStrategy;

impl Strategy for JobStrategy {
    fn columns(&self, _: &ResourceType) -> Vec<Column> {
        let mut columns = vec![text("Completions"), text("Duration"), text("Age")];
        columns.extend(printers::template_columns(true));
        named(columns)
    }
    fn cells(&self, _: &ResourceType, job: &Value, now: i64) -> Vec<Value> {
        let (spec, status) = (&job["spec"], &job["status"]);
        let succeeded = status["succeeded"].as_i64().unwrap_or(0);
        let completions = spec["completions"].as_i64().unwrap_or(1);
        let mut cells = vec![
            json!(format!("{succeeded}/{completions}")),
            json!(duration(status)),
            age(job, now),
        ];
        cells.extend(printers::template_cells(spec, true));
        row(job, cells)
    }
}

/// How long the job ran: from its start to its completion, or to now while it runs; empty
/// before it starts.
fn duration(status: &Value) -> String {
    let (Some(start), completion) =
        (status["startTime"].as_str(), status["completionTime"].as_str())
    else {
        return String::new();
    };
    let start = parse_time(start);
    let end = completion.map(parse_time).unwrap_or_else(|| Some(unix_now()));
    match (start, end) {
        (Some(start), Some(end)) => human_duration(end - start),
        _ => String::new(),
    }
}
