//! What the kinds' Table printers are made of (kube's `TableConvertor`s and the printers of
//! `pkg/printers/internalversion`): a [`Column`], the default columns and cells every kind
//! without a printer of its own gets, and the helpers the strategies' printers share (ages,
//! a pod template's containers, selectors, a printer column's JSONPath).
//!
//! Each kind's columns and cells are its strategy's (`Strategy::columns` and `cells`), the
//! real server's, read off kube-apiserver 1.20 for every kind served here and off 1.36 where
//! the two differ. The defaults: the name, then a type's printer columns (a CRD's
//! `additionalPrinterColumns`: JSONPath, simple paths only), or `Created At` (a date) when it
//! has none; a CRD's kinds show `Age` instead (the custom resources' strategy). Ages are
//! written as the real server writes them (`HumanDuration`: `45s`, `3m20s`, `5h`, `12d`).
//! Descriptions are short, not the OpenAPI documentation the real server copies in. The
//! Table itself (rows, `includeObject`, a watch's one-row tables) is the HTTP layer's
//! (`http::table`).

use serde_json::{Value, json};

use crate::model::resources::ResourceType;

/// A column: its name, type, format and priority (0: always shown; 1: with `-o wide`).
pub(crate) struct Column {
    pub(crate) name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub(crate) kind: &'static str,
    /// `name` for the name column, else empty.
    pub(crate) format: &'static str,
    pub(crate) priority: u8,
    /// For a custom resource's printer column: where its value is.
    pub(crate) json_path: Option<String>,
}

/// A column of type `kind` shown at `priority`.
pub(crate) fn col(name: &str, kind: &'static str, priority: u8) -> Column {
    Column { name: name.to_owned(), kind, format: "", priority, json_path: None }
}

/// The `Name` column, shown at `priority`.
pub(crate) fn name_col(priority: u8) -> Column {
    Column { format: "name", ..col("Name", "string", priority) }
}

/// A text column, always shown.
pub(crate) fn text(name: &str) -> Column {
    col(name, "string", 0)
}

/// A text column shown with `-o wide`.
pub(crate) fn wide(name: &str) -> Column {
    col(name, "string", 1)
}

/// An integer column, always shown.
pub(crate) fn int(name: &str) -> Column {
    col(name, "integer", 0)
}

/// The `Name` column, then `rest`: most kinds' columns.
pub(crate) fn named(rest: Vec<Column>) -> Vec<Column> {
    let mut columns = vec![name_col(0)];
    columns.extend(rest);
    columns
}

/// The name's cell, then `rest`: most kinds' cells.
pub(crate) fn row(object: &Value, rest: Vec<Value>) -> Vec<Value> {
    let mut cells = vec![json!(object["metadata"]["name"].as_str().unwrap_or_default())];
    cells.extend(rest);
    cells
}

/// The age of the object at `now`, an `Age` cell.
pub(crate) fn age(object: &Value, now: i64) -> Value {
    json!(age_since(object["metadata"]["creationTimestamp"].as_str().unwrap_or_default(), now))
}

/// A text cell: the string at `value`, `<none>` when it is unset or empty.
pub(crate) fn or_none(value: &Value) -> Value {
    json!(value.as_str().filter(|s| !s.is_empty()).unwrap_or("<none>"))
}

/// An integer cell: the number at `value`, 0 when it is unset.
pub(crate) fn integer(value: &Value) -> Value {
    json!(value.as_i64().unwrap_or(0))
}

/// `ready/desired` of a workload: `status.readyReplicas` of `spec.replicas`.
pub(crate) fn ready_of_desired(object: &Value) -> Value {
    let ready = object["status"]["readyReplicas"].as_i64().unwrap_or(0);
    json!(format!("{ready}/{}", replicas(&object["spec"])))
}

/// The wide columns of a kind with a pod template: `Containers`, `Images` and, with
/// `selector`, `Selector`.
pub(crate) fn template_columns(selector: bool) -> Vec<Column> {
    let mut columns = vec![wide("Containers"), wide("Images")];
    if selector {
        columns.push(wide("Selector"));
    }
    columns
}

/// The cells of [`template_columns`]: the template's containers' names and images and, with
/// `with_selector`, the selector.
pub(crate) fn template_cells(spec: &Value, with_selector: bool) -> Vec<Value> {
    let mut cells = vec![json!(containers(spec, "name")), json!(containers(spec, "image"))];
    if with_selector {
        cells.push(json!(selector(spec)));
    }
    cells
}

/// The columns of a kind without a printer of its own: the name, then its printer columns or
/// `Created At`.
pub(crate) fn default_columns(rt: &ResourceType) -> Vec<Column> {
    if rt.printer_columns.is_empty() {
        return named(vec![col("Created At", "date", 0)]);
    }
    named(
        rt.printer_columns
            .iter()
            .map(|c| Column {
                name: c.name.clone(),
                kind: column_type(&c.kind),
                format: "",
                priority: u8::from(c.priority > 0),
                json_path: Some(c.json_path.clone()),
            })
            .collect(),
    )
}

/// The cells of a kind without a printer of its own: the name, then its printer columns'
/// values or the creation time.
pub(crate) fn default_cells(rt: &ResourceType, object: &Value) -> Vec<Value> {
    if rt.printer_columns.is_empty() {
        let created = object["metadata"]["creationTimestamp"].as_str().unwrap_or_default();
        return row(object, vec![json!(created)]);
    }
    row(object, rt.printer_columns.iter().map(|c| lookup(object, &c.json_path)).collect())
}

/// A printer column's type as the Table names it.
fn column_type(kind: &str) -> &'static str {
    match kind {
        "integer" => "integer",
        "number" => "number",
        "boolean" => "boolean",
        "date" => "date",
        _ => "string",
    }
}

/// The entries of a map (`data`), 0 if it is none.
pub(crate) fn count(map: &Value) -> usize {
    map.as_object().map_or(0, serde_json::Map::len)
}

/// The items of a list, 0 if it is none.
pub(crate) fn len(list: &Value) -> usize {
    list.as_array().map_or(0, Vec::len)
}

/// `spec.replicas`, 1 when unset (the API's default).
pub(crate) fn replicas(spec: &Value) -> i64 {
    spec["replicas"].as_i64().unwrap_or(1)
}

/// `k=v,k2=v2`, sorted by key; `None` for an empty map.
pub(crate) fn map_string(map: &Value) -> Option<String> {
    let map = map.as_object().filter(|m| !m.is_empty())?;
    let mut pairs: Vec<String> =
        map.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect();
    pairs.sort();
    Some(pairs.join(","))
}

/// `spec.selector` as a label selector's text.
fn selector(spec: &Value) -> String {
    crate::registry::scale::selector_string(&spec["selector"])
}

/// The pod template's containers' names or images, comma-separated.
fn containers(spec: &Value, field: &str) -> String {
    let template = &spec["template"]["spec"]["containers"];
    let values: Vec<&str> =
        template.as_array().into_iter().flatten().filter_map(|c| c[field].as_str()).collect();
    values.join(",")
}

/// The value at a printer column's JSONPath (`.spec.size`, `.status.conditions[0].type`),
/// or null.
fn lookup(object: &Value, path: &str) -> Value {
    let mut current = object;
    for part in path.trim_start_matches('.').split('.').filter(|p| !p.is_empty()) {
        let (field, index) = match part.split_once('[') {
            Some((field, rest)) => (field, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        current = &current[field];
        if let Some(i) = index {
            current = &current[i];
        }
    }
    current.clone()
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// An RFC 3339 UTC time (`2026-11-30T02:01:21Z`), as the server writes them, in seconds since
/// the epoch.
pub(crate) fn parse_time(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[10] != b'T' {
        return None;
    }
    let n = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (y, m, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (hh, mm, ss) = (n(11..13)?, n(14..16)?, n(17..19)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// The age of `timestamp` at `now`, as `translateTimestampSince` writes it.
pub(crate) fn age_since(timestamp: &str, now: i64) -> String {
    match parse_time(timestamp) {
        Some(at) => human_duration(now - at),
        None => "<unknown>".to_owned(),
    }
}

/// apimachinery's `duration.HumanDuration`, for whole seconds.
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let d = (hours / 24) % 365;
        return if d == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{d}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_written_as_human_duration_writes_them() {
        let cases = [
            (0, "0s"),
            (45, "45s"),
            (119, "119s"),
            (120, "2m"),
            (200, "3m20s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60 * 7, "3h7m"),
            (20 * 3600, "20h"),
            (3 * 86_400 + 5 * 3600, "3d5h"),
            (40 * 86_400, "40d"),
            (3 * 365 * 86_400 + 10 * 86_400, "3y10d"),
        ];
        for (seconds, text) in cases {
            assert_eq!(human_duration(seconds), text, "{seconds} s");
        }
    }

    #[test]
    fn times_parse_as_seconds_since_the_epoch() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_time("2026-11-30T02:01:21Z"), Some(1_796_004_081));
        assert_eq!(parse_time("not a time"), None);
    }
}
