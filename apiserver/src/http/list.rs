//! Lists: selectors, `resourceVersion` / `resourceVersionMatch`, `limit` and `continue`
//! tokens (a continued list is a snapshot at its first page's version), and the metadata-only
//! and table forms of a list; watches are in `watch.rs`.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::http::encoding::{json_response, value_response};
use crate::http::options::Options;
use crate::http::state::Shared;
use crate::http::table::{self, Include};
use crate::model::status::{ApiError, ApiResult};
use crate::registry::Target;
use crate::storage::selectors::{FieldSelector, LabelSelector};
use crate::storage::shards::{ShardSelector, selected};
use crate::storage::store::StoredObject;

/// The selectors of a list or watch.
pub(crate) fn selectors(
    shared: &Shared,
    target: &Target,
    options: &Options,
) -> ApiResult<(LabelSelector, FieldSelector)> {
    let registry = &shared.registry;
    let field_labels = registry.strategy(&registry.rt(target)).field_labels();
    let labels = LabelSelector::parse(&options.label_selector)?;
    let fields = FieldSelector::parse(&options.field_selector, field_labels)?;
    Ok((labels, fields))
}

pub(crate) fn parse_rv(rv: &str) -> ApiResult<u64> {
    rv.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "Invalid value: {rv:?}: resourceVersion must be a decimal integer"
        ))
    })
}

/// A continue token: base64 of the JSON the real server uses, `{"v", "rv", "start"}`.
pub(crate) fn encode_continue(rv: u64, last_key: &str) -> String {
    let token = json!({ "v": "meta.k8s.io/v1", "rv": rv, "start": format!("{last_key}\u{0}") });
    URL_SAFE_NO_PAD.encode(token.to_string())
}

pub(crate) fn decode_continue(token: &str) -> ApiResult<(u64, String)> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
    let raw = URL_SAFE_NO_PAD.decode(token.trim_end_matches('=')).map_err(|_| bad())?;
    let value: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = value["rv"].as_u64().ok_or_else(bad)?;
    let start = value["start"].as_str().ok_or_else(bad)?;
    Ok((rv, start.trim_end_matches('\u{0}').to_owned()))
}

pub(crate) fn list(
    shared: &Shared,
    target: &Target,
    options: &Options,
    metadata: Option<&str>,
    table: Option<(&str, Include)>,
) -> ApiResult<Response> {
    let store = &shared.registry.store;
    let rt = shared.registry.rt(target);
    let (labels, fields) = selectors(shared, target, options)?;
    let rv = options.resource_version.as_ref();
    let rv_match = options.resource_version_match.as_ref();
    let mut limit = options.limit;
    let (at, after) = match &options.continue_token {
        Some(token) => {
            if rv.is_some_and(|rv| rv != "0") {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            let (at, start) = decode_continue(token)?;
            (Some(at), Some(start))
        }
        None => {
            let current = store.current_rv();
            match (rv.map(String::as_str), rv_match.map(String::as_str)) {
                (None, Some(_)) => {
                    return Err(ApiError::bad_request(
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                (Some(rv), Some("Exact")) => {
                    let rv = parse_rv(rv)?;
                    if rv > current {
                        return Err(too_large(rv, current));
                    }
                    (Some(rv), None)
                }
                (Some(rv), None | Some("NotOlderThan")) => {
                    let n = parse_rv(rv)?;
                    if n > current {
                        return Err(too_large(n, current));
                    }
                    if n == 0 {
                        // Served from the watch cache: the real server ignores limit here.
                        limit = None;
                    }
                    (None, None)
                }
                (None, None) => (None, None),
                (_, Some(other)) => {
                    return Err(ApiError::bad_request(format!(
                        "unknown resourceVersionMatch {other:?}"
                    )));
                }
            }
        }
    };
    let shard = ShardSelector::parse(&options.shard_selector)?;
    let keep = |o: &StoredObject| {
        labels.matches(&o.labels) && fields.matches(&o.fields) && selected(shard.as_ref(), o)
    };
    let page = store
        .list_page(target.resource, target.namespace.as_deref(), at, after.as_deref(), limit, &keep)
        .map_err(|e| {
            if after.is_some() {
                ApiError::expired(format!(
                    "The provided continue parameter is too old to display a consistent list result. \
                     You can start a new list without the continue parameter. ({})",
                    e.message
                ))
            } else {
                e
            }
        })?;
    if let Some((version, include)) = table {
        let mut list_metadata = json!({ "resourceVersion": page.rv.to_string() });
        if let Some(shard) = &shard {
            list_metadata["shardInfo"] = json!({ "selector": shard.canonical() });
        }
        if let Some(last) = &page.continue_after {
            list_metadata["continue"] = json!(encode_continue(page.rv, last));
            if labels.is_empty() && fields.is_empty() {
                list_metadata["remainingItemCount"] = json!(page.remaining);
            }
        }
        let objects: Vec<Value> = page.items.iter().map(|o| o.value()).collect();
        let registry = &shared.registry;
        let table = table::table(registry, &rt, version, list_metadata, &objects, include, true);
        return Ok(value_response(StatusCode::OK, &table));
    }
    let items: Vec<Bytes> = page.items.iter().map(|o| o.json_as(metadata)).collect();
    let mut out = Vec::with_capacity(items.iter().map(|o| o.len() + 1).sum::<usize>() + 256);
    let (kind, api_version) = match metadata {
        None => (format!("{}List", rt.kind), rt.api_version()),
        Some(version) => ("PartialObjectMetadataList".to_owned(), format!("meta.k8s.io/{version}")),
    };
    out.extend_from_slice(
        format!(
            "{{\"kind\":\"{kind}\",\"apiVersion\":\"{api_version}\",\"metadata\":{{\"resourceVersion\":\"{}\"",
            page.rv
        )
        .as_bytes(),
    );
    if let Some(last) = &page.continue_after {
        out.extend_from_slice(
            format!(",\"continue\":\"{}\"", encode_continue(page.rv, last)).as_bytes(),
        );
        if labels.is_empty() && fields.is_empty() {
            out.extend_from_slice(format!(",\"remainingItemCount\":{}", page.remaining).as_bytes());
        }
    }
    if let Some(shard) = &shard {
        let info = json!({ "selector": shard.canonical() });
        out.extend_from_slice(format!(",\"shardInfo\":{info}").as_bytes());
    }
    out.extend_from_slice(b"},\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.extend_from_slice(b"]}");
    Ok(json_response(StatusCode::OK, out))
}

pub(crate) fn too_large(rv: u64, current: u64) -> ApiError {
    let mut e = ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        "Timeout",
        format!("Too large resource version: {rv}, current: {current}"),
    );
    e.retry_after = Some(1);
    e
}
