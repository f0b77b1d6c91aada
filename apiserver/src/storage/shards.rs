//! Server-side shard selectors (KEP-5866, alpha in Kubernetes 1.36 behind
//! `ShardedListAndWatch`), as kube-apiserver 1.36.2 serves them with the gate on:
//! `?shardSelector=shardRange(object.metadata.uid,'0x…','0x…')`, several OR-ed with `||`.
//!
//! - An object is selected when the FNV-1a 64 hash of the field's string is in one of the
//!   ranges, `[start, end)`. The fields are `object.metadata.uid` and
//!   `object.metadata.namespace`.
//! - Bounds are single-quoted `0x` and 16 hex digits; an end may be `0x10000000000000000`
//!   (2^64, the whole space).
//! - Lists and watches are filtered; a list's `metadata.shardInfo.selector` echoes the
//!   selector as the real server writes it back (`shardRange(<field>, '<start>', '<end>')`,
//!   joined by ` || `).
//! - A selector it cannot take is a 500 whose message starts `invalid shard selector: `,
//!   with the real server's words for an unknown function, an unknown field, a bound without
//!   `0x`, a bound of the wrong length (with its padded form suggested) and an empty range.

use crate::model::status::{ApiError, ApiResult};
use crate::storage::store::StoredObject;

/// The field a range hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Uid,
    Namespace,
}

impl Field {
    fn path(self) -> &'static str {
        match self {
            Self::Uid => "object.metadata.uid",
            Self::Namespace => "object.metadata.namespace",
        }
    }
}

/// One `shardRange`: `[start, end)` of FNV-1a 64 of `field`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    field: Field,
    start: u128,
    end: u128,
    /// The bounds as written, for the echo.
    text: (String, String),
}

/// A parsed `shardSelector`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardSelector {
    ranges: Vec<Range>,
}

fn invalid(why: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "",
        format!("invalid shard selector: {why}"),
    )
}

/// FNV-1a, 64 bits.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A bound: `0x` and 16 hex digits, or 2^64 as an end.
fn bound(text: &str, name: &str, end: bool) -> ApiResult<u128> {
    let digits = text
        .strip_prefix("0x")
        .ok_or_else(|| invalid(format!("{name} must have '0x' prefix, got {text:?}")))?;
    if end && digits == "10000000000000000" {
        return Ok(1 << 64);
    }
    let hex = digits.len() == 16 && digits.chars().all(|c| c.is_ascii_hexdigit());
    if !hex {
        let padded = format!("0x{digits:0>16}");
        return Err(invalid(format!(
            "{name} must be a 0x-prefixed 16-digit hex value, got {text:?} (did you mean {padded:?}?)"
        )));
    }
    u128::from_str_radix(digits, 16).map_err(invalid)
}

/// A single-quoted string literal.
fn quoted(arg: &str) -> ApiResult<&str> {
    arg.strip_prefix('\'')
        .and_then(|a| a.strip_suffix('\''))
        .ok_or_else(|| invalid(format!("expected a single-quoted string, got {arg:?}")))
}

impl ShardSelector {
    /// Parses `selector`; `None` for an empty one (no filter).
    pub(crate) fn parse(selector: &str) -> ApiResult<Option<Self>> {
        if selector.trim().is_empty() {
            return Ok(None);
        }
        let ranges =
            selector.split("||").map(|term| Self::range(term.trim())).collect::<ApiResult<_>>()?;
        Ok(Some(Self { ranges }))
    }

    fn range(term: &str) -> ApiResult<Range> {
        let (function, rest) = term.split_once('(').unwrap_or((term, ""));
        let function = function.trim();
        if function != "shardRange" || term.contains("&&") {
            let shown = if term.contains("&&") { "_&&_" } else { function };
            return Err(invalid(format!(
                "unsupported function {shown:?}; only shardRange() and || are allowed"
            )));
        }
        let args = rest
            .trim_end()
            .strip_suffix(')')
            .ok_or_else(|| invalid(format!("expected ')' closing {term:?}")))?;
        let args: Vec<&str> = args.split(',').map(str::trim).collect();
        let [path, start, end] = args.as_slice() else {
            return Err(invalid(format!(
                "shardRange takes a field and two bounds, got {} arguments",
                args.len()
            )));
        };
        let field = match *path {
            "object.metadata.uid" => Field::Uid,
            "object.metadata.namespace" => Field::Namespace,
            other => {
                return Err(invalid(format!(
                    "unsupported field path {other:?}; supported: object.metadata.uid, object.metadata.namespace"
                )));
            }
        };
        let (start_text, end_text) = (quoted(start)?, quoted(end)?);
        let (from, to) = (bound(start_text, "hexStart", false)?, bound(end_text, "hexEnd", true)?);
        if from >= to {
            return Err(invalid(format!(
                "shard range start {start_text} must be less than end {end_text}"
            )));
        }
        Ok(Range {
            field,
            start: from,
            end: to,
            text: (start_text.to_owned(), end_text.to_owned()),
        })
    }

    /// Whether `object` is in one of the ranges.
    pub(crate) fn matches(&self, object: &StoredObject) -> bool {
        self.ranges.iter().any(|range| {
            let value = match range.field {
                Field::Uid => &object.fields.uid,
                Field::Namespace => &object.fields.namespace,
            };
            let hash = u128::from(fnv1a64(value.as_bytes()));
            range.start <= hash && hash < range.end
        })
    }

    /// The selector as the real server echoes it in `metadata.shardInfo.selector`.
    pub(crate) fn canonical(&self) -> String {
        let ranges: Vec<String> = self
            .ranges
            .iter()
            .map(|r| format!("shardRange({}, '{}', '{}')", r.field.path(), r.text.0, r.text.1))
            .collect();
        ranges.join(" || ")
    }
}

/// Whether `object` passes `selector` (no selector: all pass).
pub(crate) fn selected(selector: Option<&ShardSelector>, object: &StoredObject) -> bool {
    selector.is_none_or(|s| s.matches(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(selector: &str) -> String {
        ShardSelector::parse(selector).unwrap_err().message
    }

    #[test]
    fn selectors_parse_echo_and_refuse_as_the_real_server_does() {
        let two = "shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000') ||shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')";
        let parsed = ShardSelector::parse(two).unwrap().unwrap();
        assert_eq!(
            parsed.canonical(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')"
        );
        assert_eq!(ShardSelector::parse("  ").unwrap(), None);
        // The real server's messages (kube-apiserver 1.36.2, ShardedListAndWatch on).
        for (selector, said) in [
            (
                "bogus(x)",
                r#"invalid shard selector: unsupported function "bogus"; only shardRange() and || are allowed"#,
            ),
            (
                "shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000')&&x",
                r#"invalid shard selector: unsupported function "_&&_"; only shardRange() and || are allowed"#,
            ),
            (
                "shardRange(object.metadata.name,'0x0','0x8')",
                r#"invalid shard selector: unsupported field path "object.metadata.name"; supported: object.metadata.uid, object.metadata.namespace"#,
            ),
            (
                "shardRange(object.metadata.uid,'zz','0x8')",
                r#"invalid shard selector: hexStart must have '0x' prefix, got "zz""#,
            ),
            (
                "shardRange(object.metadata.uid,'0x8','0x0')",
                r#"invalid shard selector: hexStart must be a 0x-prefixed 16-digit hex value, got "0x8" (did you mean "0x0000000000000008"?)"#,
            ),
            (
                "shardRange(object.metadata.uid,'0x8000000000000000','0x0000000000000000')",
                "invalid shard selector: shard range start 0x8000000000000000 must be less than end 0x0000000000000000",
            ),
        ] {
            assert_eq!(message(selector), said, "{selector}");
        }
    }
}
