//! Small readings of JSON objects that several modules make.

use serde_json::Value;

/// The strings of the list `field` of `object` (none when it is missing or not a list; items
/// that are not strings skipped).
pub(crate) fn strings<'a>(object: &'a Value, field: &str) -> impl Iterator<Item = &'a str> {
    object[field].as_array().into_iter().flatten().filter_map(Value::as_str)
}
