//! Routing: maps a request's method and path to discovery, a REST verb, or a watch.
//!
//! Paths: `/api/v1/...` for the core group, `/apis/{group}/{version}/...` otherwise; then
//! `{plural}[/{name}[/status]]` (cluster-scoped objects, and lists or watches across all
//! namespaces) or `namespaces/{ns}/{plural}[/{name}[/status]]`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::Value;

use crate::http::discovery;
use crate::http::negotiate::{self, Encoding};
use crate::http::openapi;
use crate::http::options::Options;
use crate::http::panics;
use crate::http::state::Shared;
use crate::http::views;
use crate::model::resources::ResourceType;
use crate::model::status::ApiError;

use crate::http::encoding::{
    error_response, json_response, protobuf_body, protobuf_response, too_large_body,
    unsupported_body, value_response,
};

use crate::http::route::{Route, route};
/// The entry point for every request.
/// (Injected latency is a layer before it: `faults/latency.rs`.)
pub(crate) async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let query: HashMap<String, String> =
        Query::try_from_uri(&parts.uri).map(|Query(q)| q).unwrap_or_default();
    let options = Options::parse(&query);
    let segments: Vec<&str> = parts.uri.path().split('/').filter(|s| !s.is_empty()).collect();
    if let Some(response) = discovery_response(&shared, &parts.method, &segments) {
        return response;
    }
    let Some((group, version, rest)) = split_group_version(&segments) else {
        return error_response(&ApiError::no_route());
    };
    // The body limit is a layer (`limits::body_limit`): reading past it fails here.
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(e) if e.to_string().contains("length limit") => {
            return error_response(&too_large_body());
        }
        Err(e) => {
            return error_response(&ApiError::bad_request(format!(
                "reading the request body: {e}"
            )));
        }
    };
    let body = match protobuf_body(&parts.method, &parts.headers, body) {
        Ok(body) => body,
        Err(err) => return error_response(&err),
    };
    if let Some(err) = unsupported_body(&parts.headers, &body) {
        return error_response(&err);
    }
    let mut watch = false;
    let result = match route(&shared, group, version, rest) {
        Ok(route) => {
            count(&shared, &parts.method, &route, &options);
            watch = parts.method == Method::GET && route.target.name.is_none() && options.watch;
            let (method, headers) = (&parts.method, &parts.headers);
            if shared.faults.take_panic() {
                panic!("a panic injected by Faults::panic_next");
            }
            match shared.faults.take_failure(watch) {
                Some(err) => Err(err),
                None => views::serve_view(&shared, method, headers, route, &options, body).await,
            }
        }
        Err(e) => Err(e),
    };
    let response = result.unwrap_or_else(|err| error_response(&err));
    // A resource's answer carries the encoding its `Accept` negotiated (`rest::negotiated`);
    // an error (a `Status`) and an answer that negotiated nothing (`/scale`) take the
    // clauses without a form.
    let encoding = match response.extensions().get::<Encoding>() {
        Some(encoding) if response.status().is_success() => *encoding,
        _ => negotiate::status_encoding(&parts.headers),
    };
    if encoding == Encoding::Protobuf {
        let response = protobuf_response(response, watch).await;
        // The frames are encoded as hyper polls them: a panic there is caught here.
        return match watch {
            true => panics::guard_protobuf_watch(shared, response),
            false => response,
        };
    }
    response
}

fn discovery_response(shared: &Shared, method: &Method, segments: &[&str]) -> Option<Response> {
    if method != Method::GET {
        return None;
    }
    let store = &shared.registry.store;
    let served = store.served_types();
    let resources: Vec<Arc<ResourceType>> = served.into_iter().map(|(_, rt)| rt).collect();
    let resources = resources.as_slice();
    let not_found = || error_response(&ApiError::no_route());
    let found =
        |v: Option<Value>| v.map(|v| value_response(StatusCode::OK, &v)).unwrap_or_else(not_found);
    Some(match segments {
        ["version"] => value_response(StatusCode::OK, &discovery::version()),
        ["healthz"] | ["readyz"] | ["livez"] => Response::new(Body::from("ok")),
        ["api"] => value_response(StatusCode::OK, &discovery::core_versions(&shared.address)),
        ["api", version] => found(discovery::resource_list(resources, "", version)),
        ["apis"] => value_response(StatusCode::OK, &discovery::group_list(resources)),
        ["apis", group] => found(discovery::group(resources, group)),
        ["apis", group, version] => found(discovery::resource_list(resources, group, version)),
        ["openapi", "v2"] => json_response(StatusCode::OK, openapi::v2_document(store)),
        ["openapi", "v3"] => value_response(StatusCode::OK, &openapi::v3_index(store)),
        ["openapi", "v3", path @ ..] => match openapi::v3_document(store, &path.join("/")) {
            Some(document) => json_response(StatusCode::OK, document),
            None => not_found(),
        },
        ["openapi", ..] => not_found(),
        _ => return None,
    })
}

fn split_group_version<'a>(segments: &'a [&'a str]) -> Option<(&'a str, &'a str, &'a [&'a str])> {
    match segments {
        ["api", version, rest @ ..] if !rest.is_empty() => Some(("", version, rest)),
        ["apis", group, version, rest @ ..] if !rest.is_empty() => Some((group, version, rest)),
        _ => None,
    }
}

fn count(shared: &Shared, method: &Method, route: &Route, options: &Options) {
    let s = &shared.stats;
    let counter: &AtomicU64 = match (method.as_str(), route.target.name.is_some()) {
        ("GET", false) if options.watch => &s.watch,
        ("GET", false) => &s.list,
        ("GET", true) => &s.get,
        ("POST", _) => &s.create,
        ("PUT", _) => &s.update,
        ("PATCH", _) => &s.patch,
        ("DELETE", _) => &s.delete,
        _ => return,
    };
    counter.fetch_add(1, Ordering::SeqCst);
}
