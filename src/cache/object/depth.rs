//! How deep the objects an informer caches may nest.
//!
//! kube-apiserver's JSON decoder (Go's `encoding/json`) takes values nested up to 10,000
//! levels, and anyone who may write a watched object with `x-kubernetes-preserve-unknown-fields`
//! can write one that deep. But `serde_json::Value` clones, compares, serializes and drops
//! itself recursively: a user's `clone`, `==`, serialization or drop of such an object
//! overflows a tokio worker's 2 MiB stack, which aborts the process (no `catch_unwind` stops
//! a stack overflow). So the informer caches objects nested up to a limit,
//! `InformerConfig::max_depth`, by default [`DEFAULT_MAX_DEPTH`]: the embedded API server's own
//! limit (`ctrlkit-apiserver`'s `shapes::MAX_DEPTH`), which a test here shows a debug build
//! clones, compares, serializes and drops on a 2 MiB worker stack.
//!
//! The informer decodes as usual, and a page or an event that meets serde_json's default
//! limit (128) is decoded again object by object: with the recursion limit off and the stack
//! grown as the decoder needs (`serde_stacker`), up to the limit. An object deeper than that
//! is skipped: named in an error log, counted (`InformerMetrics::object_skipped`), and the
//! informer syncs the others. A skipped object the cache holds an older copy of keeps that
//! copy, on a watch event and on a relist alike: the cache never reports it deleted for its
//! depth (see the `reflector` module). A store that keeps objects as JSON decodes them back
//! the same way ([`from_own_str`]), so an object cached is never read as absent for its depth.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

/// The deepest nesting an informer caches unless configured otherwise: the embedded API
/// server's own limit, within which a debug build's 2 MiB worker stack clones, compares,
/// serializes and drops an object (see the module docs).
pub const DEFAULT_MAX_DEPTH: usize = 512;

/// serde_json's own recursion limit: shallower objects are decoded without being measured,
/// so no limit lower than this is kept.
pub(crate) const SERDE_DEPTH: usize = 128;

/// Whether a decoding failed on serde_json's recursion limit.
pub(crate) fn is_too_deep(err: &serde_json::Error) -> bool {
    err.to_string().starts_with("recursion limit exceeded")
}

/// The deepest nesting of arrays and objects in JSON `text` (strings skipped), counted as
/// the protobuf decoder counts embedded JSON.
pub(crate) fn depth(text: &[u8]) -> usize {
    ctrlkit_protobuf::json_depth(text)
}

/// Decodes `text` whatever its depth, the stack grown as the decoder recurses.
fn from_str_unbounded<T: DeserializeOwned>(text: &str) -> serde_json::Result<T> {
    let mut json = serde_json::Deserializer::from_str(text);
    json.disable_recursion_limit();
    let value = T::deserialize(serde_stacker::Deserializer::new(&mut json))?;
    json.end()?;
    Ok(value)
}

/// Decodes `text`, an object this crate encoded from one it decoded (so no deeper than
/// the informer's limit): at serde_json's usual speed, and again without its recursion limit if the
/// object is deeper than 128 levels, so that a store never reads an object it cached as absent.
pub(crate) fn from_own_str<T: DeserializeOwned>(text: &str) -> serde_json::Result<T> {
    match serde_json::from_str(text) {
        Err(err) if is_too_deep(&err) => from_str_unbounded(text),
        decoded => decoded,
    }
}

/// An object skipped for its depth: its `namespace/name`, version, depth (where known: a
/// protobuf decoder stops at the limit) and the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TooDeep {
    pub(crate) object: String,
    pub(crate) resource_version: Option<String>,
    pub(crate) depth: Option<usize>,
    pub(crate) limit: usize,
}

impl std::fmt::Display for TooDeep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.depth {
            Some(depth) => write!(
                f,
                "{} is nested {depth} levels deep, more than the {} the informer caches (max_depth)",
                self.object, self.limit
            ),
            None => write!(
                f,
                "{} is nested more than the {} levels deep the informer caches (max_depth)",
                self.object, self.limit
            ),
        }
    }
}

/// Only an object's name, namespace and version: the rest is skipped, without recursion.
#[derive(Deserialize, Default)]
pub(crate) struct Named {
    #[serde(default)]
    metadata: NamedMeta,
}

impl Named {
    /// The skip of this object, nested `depth` levels deep (where known), past `limit`.
    pub(crate) fn too_deep(self, depth: Option<usize>, limit: usize) -> TooDeep {
        let meta = self.metadata;
        let name = meta.name.unwrap_or_else(|| "<unnamed>".to_owned());
        let object = match meta.namespace.filter(|ns| !ns.is_empty()) {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name,
        };
        TooDeep { object, resource_version: meta.resource_version, depth, limit }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct NamedMeta {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
}

/// Decodes one object nested up to `max_depth` levels (at least [`SERDE_DEPTH`]); a deeper
/// one is named instead.
pub(crate) fn object<T: DeserializeOwned>(
    text: &str,
    max_depth: usize,
) -> serde_json::Result<Result<T, TooDeep>> {
    let depth = depth(text.as_bytes());
    let limit = max_depth.max(SERDE_DEPTH);
    if depth <= limit {
        return from_str_unbounded(text).map(Ok);
    }
    let named: Named = serde_json::from_str(text).unwrap_or_default();
    Ok(Err(named.too_deep(Some(depth), limit)))
}

/// A list page's items, each as its raw text (borrowed, skipped over without recursion).
#[derive(Deserialize)]
pub(crate) struct RawItems<'a> {
    #[serde(borrow, default, deserialize_with = "raw_items")]
    pub(crate) items: Vec<&'a serde_json::value::RawValue>,
}

fn raw_items<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<&'de serde_json::value::RawValue>, D::Error> {
    Option::<Vec<&'de serde_json::value::RawValue>>::deserialize(deserializer)
        .map(Option::unwrap_or_default)
}

/// A watch event's type and its object's raw text.
#[derive(Deserialize)]
pub(crate) struct RawEvent<'a> {
    #[serde(rename = "type")]
    pub(crate) event_type: String,
    #[serde(borrow)]
    pub(crate) object: &'a serde_json::value::RawValue,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!(
            r#"{{"metadata":{{"name":"x","namespace":"ns","resourceVersion":"7"}},"v":{}0{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        )
    }

    #[test]
    fn depth_counts_arrays_and_objects_but_not_brackets_in_strings() {
        assert_eq!(depth(br#"{"a":[1,{"b":"}}]]{{"}]}"#), 3);
        assert_eq!(depth(br#"{"a":"\"{"}"#), 1);
        assert_eq!(depth(b"0"), 0);
        assert_eq!(depth(nested(300).as_bytes()), 301);
    }

    #[test]
    fn objects_decode_up_to_the_api_servers_depth_and_deeper_ones_are_named() {
        let shallow: serde_json::Value = object(&nested(300), 512).unwrap().unwrap();
        assert_eq!(shallow["metadata"]["name"], "x");
        assert!(
            serde_json::from_str::<serde_json::Value>(&nested(300)).is_err_and(|e| is_too_deep(&e))
        );
        let deep = object::<serde_json::Value>(&nested(512), 512).unwrap().unwrap_err();
        assert_eq!(
            deep,
            TooDeep {
                object: "ns/x".into(),
                resource_version: Some("7".into()),
                depth: Some(513),
                limit: 512,
            }
        );
        assert!(deep.to_string().contains("more than the 512"), "{deep}");
        // No limit below serde_json's own: shallower objects are never measured.
        assert!(object::<serde_json::Value>(&nested(127), 10).unwrap().is_ok());
        let list = format!(r#"{{"items":[{},{}]}}"#, nested(10), nested(DEFAULT_MAX_DEPTH));
        let raw: RawItems<'_> = serde_json::from_str(&list).unwrap();
        assert_eq!(raw.items.len(), 2);
    }
}
