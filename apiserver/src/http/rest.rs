//! The REST verbs on a resolved route: get, list, watch, create, update, patch, delete, with
//! content negotiation, field validation, dry runs, `/scale` and `/status`. A write's
//! admission and conversion are the registry's (see `registry::writes`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use crate::http::field_validation;
use crate::http::negotiate::{Answer, Encoding, Form, Reading, negotiate};
use crate::http::openapi;
use crate::http::options::Options;
use crate::http::route::Route;
use crate::http::state::Shared;
use crate::http::table;
use crate::http::watch::{self, Start, WatchRequest};
use crate::merge::apply::ApplyOptions;
use crate::merge::patch::PatchType;
use crate::model::resources::ResourceType;
use crate::model::status::{ApiError, ApiResult};
use crate::protobuf;
use crate::registry::scale::written_scale;
use crate::registry::writes::{ScaleChange, WriteOptions};
use crate::registry::{Registry, Target};
use crate::storage::shards::ShardSelector;
use crate::storage::store::StoredObject;

use crate::http::encoding::{deleted_status, object_response, value_response};
use crate::http::list::{list, parse_rv, selectors};

/// Serves a request on `route` with the registry's verbs.
pub(crate) async fn serve(
    shared: &Arc<Shared>,
    method: &Method,
    headers: &HeaderMap,
    route: Route,
    options: &Options,
    body: Bytes,
) -> ApiResult<Response> {
    let registry = &shared.registry;
    let Route { target, status, scale, view } = route;
    // Field validation reads the body at the version it was written at.
    let written_rt = view.as_ref().map(|v| v.requested.clone());
    let write = WriteOptions {
        dry_run: options.dry_run,
        field_manager: options.field_manager.clone(),
        version: view,
    };
    if scale {
        return serve_scale(registry, method, headers, &target, &body, &write).await;
    }
    let reading = match (method.as_str(), target.name.is_some()) {
        ("GET", false) if options.watch => Reading::Watch,
        ("GET" | "DELETE", false) => Reading::List,
        _ => Reading::Object,
    };
    let rt = registry.rt(&target);
    let answer = negotiated(headers, reading, &rt)?;
    let form = answer.form;
    let include = options.include_object;
    let (metadata, table) = match form {
        Form::Full => (None, None),
        Form::Metadata(version) | Form::MetadataList(version) => (Some(version), None),
        // Only reads are printed as tables; a write answers with the object.
        Form::Table(version) => (None, Some(version)),
    };
    // A kind answered rather than stored (a review) is answered before field validation.
    if method == Method::POST
        && let Some(answer) = registry.answer(&rt, &body)
    {
        return Ok(value_response(StatusCode::CREATED, &answer?));
    }
    // Field validation refuses a strict write before admission sees it; its warnings come
    // first.
    let mut warnings = validate_fields(
        shared,
        method,
        headers,
        written_rt.as_ref().unwrap_or(&rt),
        options,
        &body,
    )?;
    let policy = options.propagation_policy.as_deref();
    let answered = match (method.as_str(), target.name.is_some()) {
        ("GET", false) if options.watch => start_watch(shared, target, options, answer),
        ("GET", false) => list(shared, &target, options, metadata, table.map(|v| (v, include))),
        ("GET", true) => registry.get(&target).map(|o| match table {
            Some(version) => {
                let metadata = json!({ "resourceVersion": o.rv.to_string() });
                let table =
                    table::table(registry, &rt, version, metadata, &[o.value()], include, true);
                value_response(StatusCode::OK, &table)
            }
            None => object_response(StatusCode::OK, &o, metadata),
        }),
        ("POST", false) => registry.create(&target, &body, &write).await.map(|written| {
            warnings.extend(written.warnings);
            object_response(StatusCode::CREATED, &written.object, metadata)
        }),
        ("PUT", true) => registry.update(&target, &body, status, &write).await.map(|written| {
            warnings.extend(written.warnings);
            object_response(StatusCode::OK, &written.object, metadata)
        }),
        ("PATCH", true) if patch_type(headers)? == PatchType::Apply => {
            let manager = options.field_manager.as_deref();
            let apply = ApplyOptions::new(manager, options.force, options.dry_run)?;
            registry.apply(&target, &body, &apply, status, &write).await.map(|written| {
                warnings.extend(written.warnings);
                let (object, created) = written.object;
                let code = if created { StatusCode::CREATED } else { StatusCode::OK };
                value_response(code, &object)
            })
        }
        ("PATCH", true) => {
            let kind = patch_type(headers)?;
            registry.patch(&target, kind, &body, status, &write).await.map(|written| {
                warnings.extend(written.warnings);
                object_response(StatusCode::OK, &written.object, metadata)
            })
        }
        ("DELETE", true) => registry.delete(&target, &body, policy, &write).await.map(|written| {
            warnings.extend(written.warnings);
            let deletion = written.object;
            if deletion.removed && !registry.strategy(&rt).returns_deleted_object() {
                value_response(StatusCode::OK, &deleted_status(&rt, &deletion.object))
            } else {
                object_response(StatusCode::OK, &deletion.object, metadata)
            }
        }),
        ("DELETE", false) => {
            let (labels, fields) = selectors(shared, &target, options)?;
            let selected =
                |o: &StoredObject| labels.matches(&o.labels) && fields.matches(&o.fields);
            let deleted = registry.delete_collection(&target, &selected, &body, policy, &write);
            deleted.await.map(|written| {
                warnings.extend(written.warnings);
                deleted_list(shared, &rt, &written.object, metadata)
            })
        }
        _ => Err(ApiError::method_not_allowed()),
    };
    answered.map(|mut response| {
        add_warnings(&mut response, &warnings);
        // How the answer leaves the server (see `handler::handle`).
        response.extensions_mut().insert(answer.encoding);
        response
    })
}

/// The answer the client's `Accept` asks for about `rt` (protobuf only where the kind has a
/// message): the one decision of form and encoding, for every read and write of a resource.
pub(crate) fn negotiated(
    headers: &HeaderMap,
    reading: Reading,
    rt: &ResourceType,
) -> ApiResult<Answer> {
    let protobuf = protobuf::message_for(&rt.api_version(), &rt.kind).is_some();
    negotiate(headers, reading, &rt.kind, protobuf)
}

/// `Warning` headers for `warnings`.
fn add_warnings(response: &mut Response, warnings: &[String]) {
    for problem in warnings {
        if let Ok(value) = field_validation::warning(problem).parse() {
            response.headers_mut().append("warning", value);
        }
    }
}

/// Server-side field validation of a write's body (see the `field_validation` module): a
/// `Strict` write with unknown or duplicate fields is refused; a `Warn` one (the default)
/// answers with the problems, which become `Warning` headers.
fn validate_fields(
    shared: &Shared,
    method: &Method,
    headers: &HeaderMap,
    rt: &ResourceType,
    options: &Options,
    body: &Bytes,
) -> ApiResult<Vec<String>> {
    let (json, patch) = match method.as_str() {
        "POST" | "PUT" => (body.clone(), false),
        "PATCH" => match patch_type(headers)? {
            PatchType::Merge | PatchType::Strategic => (body.clone(), true),
            // YAML or JSON: read as the apply reads it.
            PatchType::Apply => match crate::merge::apply::parse_body(body) {
                Ok(value) => (Bytes::from(value.to_string()), false),
                Err(_) => return Ok(Vec::new()),
            },
            PatchType::Json => return Ok(Vec::new()),
        },
        _ => return Ok(Vec::new()),
    };
    let options_kind = match method.as_str() {
        "POST" => "CreateOptions",
        "PUT" => "UpdateOptions",
        _ => "PatchOptions",
    };
    let requested = options.field_validation.as_deref();
    let validation = field_validation::Validation::parse(requested, options_kind)?;
    if validation == field_validation::Validation::Ignore || json.is_empty() {
        return Ok(Vec::new());
    }
    let store = &shared.registry.store;
    let problems = openapi::with_kind_schema(store, &rt.group, &rt.version, &rt.kind, |s, k| {
        field_validation::problems(s, k, &json, patch)
    })
    .unwrap_or_default();
    if validation == field_validation::Validation::Strict && !problems.is_empty() {
        return Err(field_validation::strict_error(&rt.kind, &rt.version, &problems));
    }
    Ok(problems)
}

/// The patch type a PATCH's `Content-Type` names; 415 for any other.
pub(crate) fn patch_type(headers: &HeaderMap) -> ApiResult<PatchType> {
    let content_type =
        headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    PatchType::from_content_type(content_type).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type:?})"),
        )
    })
}

/// GET, PUT and PATCH of `/scale` (see the `scale` module).
async fn serve_scale(
    registry: &Registry,
    method: &Method,
    headers: &HeaderMap,
    target: &Target,
    body: &[u8],
    options: &WriteOptions,
) -> ApiResult<Response> {
    let change = match method.as_str() {
        "GET" => return Ok(value_response(StatusCode::OK, &registry.scale(target)?)),
        "PUT" => ScaleChange::Replace(written_scale(body)?),
        "PATCH" => ScaleChange::Patch(patch_type(headers)?, body),
        _ => return Err(ApiError::method_not_allowed()),
    };
    let written = registry.write_scale(target, change, options).await?;
    let mut response = value_response(StatusCode::OK, &written.object);
    add_warnings(&mut response, &written.warnings);
    Ok(response)
}

fn start_watch(
    shared: &Arc<Shared>,
    target: Target,
    options: &Options,
    answer: Answer,
) -> ApiResult<Response> {
    let (labels, fields) = selectors(shared, &target, options)?;
    let bookmarks = options.allow_watch_bookmarks;
    let rv = options.resource_version.as_ref();
    let start = if options.send_initial_events {
        watch::check_streaming_list(options.resource_version_match.as_deref())?;
        Start::Initial { end_bookmark: bookmarks }
    } else {
        match rv.map(String::as_str) {
            // Kubernetes 1.36 ends the initial events of a watch without a version with the
            // same marked bookmark as a streaming list's, to a client that allows bookmarks.
            None | Some("0") => Start::Initial { end_bookmark: bookmarks },
            Some(rv) => Start::After(parse_rv(rv)?),
        }
    };
    // An injected lifetime cuts every watch short, whatever the client asked for.
    let timeout = match (options.timeout, shared.faults.watch_lifetime()) {
        (Some(t), Some(l)) => Some(t.min(l)),
        (t, l) => t.or(l),
    };
    let shard = ShardSelector::parse(&options.shard_selector)?;
    let request = WatchRequest {
        include: options.include_object,
        resource: target.resource,
        namespace: target.namespace,
        labels,
        fields,
        shard,
        start,
        bookmarks,
        timeout,
        form: answer.form,
        protobuf: answer.encoding == Encoding::Protobuf,
    };
    Ok(watch::serve(shared.clone(), request))
}

/// The answer to a delete-collection: the objects deleted (or their metadata alone).
fn deleted_list(
    shared: &Shared,
    rt: &ResourceType,
    deleted: &[Arc<StoredObject>],
    metadata: Option<&str>,
) -> Response {
    let items: Vec<Value> = deleted
        .iter()
        .map(|object| match metadata {
            None => object.value(),
            Some(version) => {
                serde_json::from_slice(&object.json_as(Some(version))).unwrap_or(Value::Null)
            }
        })
        .collect();
    let (kind, api_version) = match metadata {
        None => (format!("{}List", rt.kind), rt.api_version()),
        Some(version) => ("PartialObjectMetadataList".to_owned(), format!("meta.k8s.io/{version}")),
    };
    let list = json!({
        "kind": kind,
        "apiVersion": api_version,
        "metadata": { "resourceVersion": shared.registry.store.current_rv().to_string() },
        "items": items,
    });
    value_response(StatusCode::OK, &list)
}
