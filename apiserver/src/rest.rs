//! The REST verbs on a resolved route: get, list, watch, create, update, patch, delete, with
//! content negotiation, field validation, dry runs, `/scale`, `/status`, and the admission
//! webhooks a write goes through first.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::admission::{
    self,
    Operation::{self, Create, Delete, Update},
};
use super::apply::ApplyOptions;
use super::auth;
use super::fields;
use super::negotiate::{Form, Reading, negotiate};
use super::openapi;
use super::options::Options;
use super::patch::{self, PatchType};
use super::protobuf;
use super::registry::{Registry, Target};
use super::resources::ResourceType;
use super::route::Route;
use super::shapes::{self, Malformed};
use super::shards::ShardSelector;
use super::state::Shared;
use super::status::{ApiError, ApiResult};
use super::store::StoredObject;
use super::table;
use super::watch::{self, Start, WatchRequest};

use super::encoding::{deleted_status, object_response, value_response};
use super::list::{list, parse_rv, selectors};

pub(crate) fn serve(
    shared: &Arc<Shared>,
    method: &Method,
    headers: &HeaderMap,
    route: Route,
    options: &Options,
    body: Bytes,
) -> ApiResult<Response> {
    let registry = &shared.registry;
    let Route { target, status, scale, .. } = route;
    if scale {
        return serve_scale(registry, method, headers, &target, &body);
    }
    let reading = match (method.as_str(), target.name.is_some()) {
        ("GET", false) if options.watch => Reading::Watch,
        ("GET" | "DELETE", false) => Reading::List,
        _ => Reading::Object,
    };
    let rt = registry.rt(&target);
    let form = answer_form(headers, reading, &rt)?;
    let include = options.include_object;
    let (metadata, table) = match form {
        Form::Full => (None, None),
        Form::Metadata(version) | Form::MetadataList(version) => (Some(version), None),
        // Only reads are printed as tables; a write answers with the object.
        Form::Table(version) => (None, Some(version)),
    };
    if method == Method::POST && auth::is_review(&rt) {
        let review = auth::answer(&registry.store, &shared.users, &rt, &body)?;
        return Ok(value_response(StatusCode::CREATED, &review));
    }
    let warnings = validate_fields(shared, method, headers, &rt, options, &body)?;
    // `dryRun=All`: a write is worked out and answered, and stores nothing.
    let dry_run = options.dry_run;
    let answered = match (method.as_str(), target.name.is_some()) {
        ("GET", false) if options.watch => start_watch(shared, target, options, form),
        ("GET", false) => list(shared, &target, options, metadata, table.map(|v| (v, include))),
        ("GET", true) => registry.get(&target).map(|o| match table {
            Some(version) => {
                let rt = registry.rt(&target);
                let metadata = json!({ "resourceVersion": o.rv.to_string() });
                let table = table::table(&rt, version, metadata, &[o.value()], include, true);
                value_response(StatusCode::OK, &table)
            }
            None => object_response(StatusCode::OK, &o, metadata),
        }),
        ("POST", false) => registry
            .create(&target, &body, dry_run)
            .map(|o| object_response(StatusCode::CREATED, &o, metadata)),
        ("PUT", true) => registry
            .update(&target, &body, status, dry_run)
            .map(|o| object_response(StatusCode::OK, &o, metadata)),
        ("PATCH", true) if patch_type(headers)? == PatchType::Apply => {
            let apply = ApplyOptions::parse(options)?;
            let (object, created) = registry.server_side_apply(&target, &body, &apply, status)?;
            let code = if created { StatusCode::CREATED } else { StatusCode::OK };
            Ok(value_response(code, &object))
        }
        ("PATCH", true) => {
            let kind = patch_type(headers)?;
            registry
                .patch(&target, kind, &body, status, dry_run)
                .map(|o| object_response(StatusCode::OK, &o, metadata))
        }
        ("DELETE", true) => {
            let rt = registry.rt(&target);
            let policy = options.propagation_policy.as_deref();
            registry.delete(&target, &body, policy, dry_run).map(|deletion| {
                if deletion.removed && !rt.returns_deleted_object() {
                    value_response(StatusCode::OK, &deleted_status(&rt, &deletion.object))
                } else {
                    object_response(StatusCode::OK, &deletion.object, metadata)
                }
            })
        }
        ("DELETE", false) => delete_collection(shared, &target, options, &body, metadata),
        _ => Err(ApiError::method_not_allowed()),
    };
    answered.map(|mut response| {
        add_warnings(&mut response, &warnings);
        response
    })
}

/// [`serve`], with the write first sent to the admission webhooks that match it, when any is
/// configured (see the `admission` module): the write stores the object they admitted.
pub(crate) async fn serve_admitted(
    shared: &Arc<Shared>,
    method: &Method,
    headers: &HeaderMap,
    route: Route,
    options: &Options,
    body: Bytes,
) -> ApiResult<Response> {
    let registry = &shared.registry;
    let rt = registry.rt(&route.target);
    let named = route.target.name.is_some();
    // Reads, configurations and reviews pass no webhook; nothing does while none is
    // configured (the configurations are read only for a write).
    let writes = matches!(method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE");
    let webhooks = match writes && !rt.is_webhook_configuration() && !auth::is_review(&rt) {
        true => admission::configured(&registry.store),
        false => None,
    };
    let Some(webhooks) = webhooks else {
        return serve(shared, method, headers, route, options, body);
    };
    if route.scale && matches!(method.as_str(), "PUT" | "PATCH") {
        return scale_admitted(shared, &webhooks, method, headers, &route, options, &body).await;
    }
    if method == Method::DELETE && !named {
        let warnings = admit_collection_delete(shared, &webhooks, &route, &rt, options).await?;
        let mut response = serve(shared, method, headers, route, options, body)?;
        add_warnings(&mut response, &warnings);
        return Ok(response);
    }
    // A create, or a write of one object.
    let object_write =
        matches!((method.as_str(), named), ("POST", false) | ("PUT" | "PATCH" | "DELETE", true));
    if !object_write || route.scale {
        return serve(shared, method, headers, route, options, body);
    }
    // Field validation refuses a strict write before any webhook sees it; its warnings come
    // first. The admitted write is not validated again.
    let mut warnings = validate_fields(shared, method, headers, &rt, options, &body)?;
    let mut options = options.clone();
    options.field_validation = Some("Ignore".into());
    let body_dry_run = method == Method::DELETE
        && serde_json::from_slice::<Value>(&body)
            .is_ok_and(|b| b["dryRun"].as_array().is_some_and(|d| d.iter().any(|v| v == "All")));
    let dry_run = options.dry_run || body_dry_run;
    let target = &route.target;
    // A patch or apply is admitted again when another write came between; an update carries
    // its own resourceVersion (or none, and then it replaces whatever is there).
    let retries = if method == Method::PATCH { 5 } else { 1 };
    for attempt in 1..=retries {
        let old = match method.as_str() {
            "POST" => None,
            _ => match registry.get(target) {
                Ok(current) => Some(current.value()),
                Err(err) if err.code == StatusCode::NOT_FOUND && method == Method::PATCH => None,
                Err(err) => return Err(err),
            },
        };
        let (operation, candidate) = match method.as_str() {
            "POST" => (Create, Some(created(registry.create(target, &body, true)?.value()))),
            "PUT" => (Update, Some(registry.update(target, &body, route.status, true)?.value())),
            "PATCH" if patch_type(headers)? == PatchType::Apply => {
                let mut apply = ApplyOptions::parse(&options)?;
                apply.dry_run = true;
                let (object, new) =
                    registry.server_side_apply(target, &body, &apply, route.status)?;
                match new {
                    true => (Create, Some(created(object))),
                    false => (Update, Some(object)),
                }
            }
            "PATCH" => {
                let kind = patch_type(headers)?;
                (Update, Some(registry.patch(target, kind, &body, route.status, true)?.value()))
            }
            _ => (Delete, None),
        };
        let object = candidate.as_ref().or(old.as_ref());
        let name = target
            .name
            .clone()
            .or_else(|| object.and_then(|o| o["metadata"]["name"].as_str().map(str::to_owned)))
            .unwrap_or_default();
        let mut attributes = attributes_of(&route, &rt, operation, &name);
        if route.status {
            attributes.subresource = "status".into();
        }
        let review_options = options_of(operation, &options, dry_run);
        // A write made at another version of a CRD: its own attributes, for the webhooks
        // whose rules name that version.
        let at_view = route.view.as_ref().map(|(view, requested)| {
            let attributes = admission::Attributes {
                version: requested.version.clone(),
                kind: requested.kind.clone(),
                ..attributes.clone()
            };
            (view, attributes)
        });
        let requested =
            at_view.as_ref().map(|(view, attributes)| admission::Requested { attributes, view });
        let admitted = webhooks
            .admit(&attributes, requested, candidate, old.as_ref(), dry_run, review_options)
            .await?;
        warnings.extend(admitted.warnings);
        // The admitted object goes to the registry, as the real server's handler stores what
        // its admission chain returned (the request is not served again).
        let answered = match (operation, admitted.object) {
            (Create, Some(object)) => {
                let collection = Target { name: None, ..target.clone() };
                let body = serde_json::to_vec(&object).unwrap_or_default();
                let metadata = written_metadata(headers, &rt)?;
                registry
                    .create(&collection, &body, options.dry_run)
                    .map(|o| object_response(StatusCode::CREATED, &o, metadata))
            }
            (Update, Some(mut object)) => {
                // Written only over the object admitted.
                if let Some(old) = &old {
                    object["metadata"]["resourceVersion"] =
                        old["metadata"]["resourceVersion"].clone();
                }
                let body = serde_json::to_vec(&object).unwrap_or_default();
                let metadata = written_metadata(headers, &rt)?;
                registry
                    .update(target, &body, route.status, options.dry_run)
                    .map(|o| object_response(StatusCode::OK, &o, metadata))
            }
            // A delete: admitted as it is.
            _ => serve(shared, method, headers, route.clone(), &options, body.clone()),
        };
        match answered {
            Err(err) if err.code == StatusCode::CONFLICT && attempt < retries => continue,
            answered => {
                return answered.map(|mut response| {
                    add_warnings(&mut response, &warnings);
                    response
                });
            }
        }
    }
    unreachable!("the last attempt returns")
}

/// The form the client's `Accept` asks an answer about `rt` in (protobuf where the kind has a
/// message).
fn answer_form(headers: &HeaderMap, reading: Reading, rt: &ResourceType) -> ApiResult<Form> {
    let protobuf = protobuf::message_for(&rt.api_version(), &rt.kind).is_some();
    negotiate(headers, reading, &rt.kind, protobuf)
}

/// The `meta.k8s.io` version of `PartialObjectMetadata` a write's client asked to be answered
/// with (`Accept`), if it asked for metadata alone.
fn written_metadata(headers: &HeaderMap, rt: &ResourceType) -> ApiResult<Option<&'static str>> {
    Ok(match answer_form(headers, Reading::Object, rt)? {
        Form::Metadata(version) | Form::MetadataList(version) => Some(version),
        Form::Full | Form::Table(_) => None,
    })
}

/// The attributes of a write of `route` (`operation`) to the webhooks.
fn attributes_of(
    route: &Route,
    rt: &ResourceType,
    operation: Operation,
    name: &str,
) -> admission::Attributes {
    admission::Attributes {
        operation,
        group: rt.group.clone(),
        version: rt.version.clone(),
        kind: rt.kind.clone(),
        kind_group_version: None,
        resource: rt.plural.clone(),
        subresource: String::new(),
        namespaced: rt.namespaced,
        namespace: route.target.namespace.clone(),
        name: name.to_owned(),
    }
}

/// The `options` of an admission request.
fn options_of(operation: Operation, options: &Options, dry_run: bool) -> Value {
    let kind = operation.options_kind();
    let mut review = json!({ "kind": kind, "apiVersion": "meta.k8s.io/v1" });
    if let Some(manager) = &options.field_manager {
        review["fieldManager"] = json!(manager);
    }
    if dry_run {
        review["dryRun"] = json!(["All"]);
    }
    review
}

/// A `/scale` write, admitted as an `autoscaling/v1` `Scale` (as the real server admits it),
/// then written as a replace of the admitted Scale over the one admitted.
async fn scale_admitted(
    shared: &Arc<Shared>,
    webhooks: &admission::Webhooks<'_>,
    method: &Method,
    headers: &HeaderMap,
    route: &Route,
    options: &Options,
    body: &[u8],
) -> ApiResult<Response> {
    let registry = &shared.registry;
    let target = &route.target;
    let rt = registry.rt(target);
    let old = registry.scale(target)?;
    let new = match method.as_str() {
        "PUT" => written_scale(body)?,
        _ => patched_scale(&old, patch_type(headers)?, body)?,
    };
    let name = target.name.as_deref().unwrap_or_default();
    let mut attributes = attributes_of(route, &rt, Update, name);
    attributes.kind = "Scale".into();
    attributes.kind_group_version = Some(("autoscaling".into(), "v1".into()));
    attributes.subresource = "scale".into();
    let dry_run = options.dry_run;
    let review_options = options_of(Update, options, dry_run);
    let admitted =
        webhooks.admit(&attributes, None, Some(new), Some(&old), dry_run, review_options).await?;
    // An object with object metadata: the admission stage refuses a patch that leaves less.
    let mut scale = admitted.object.filter(Value::is_object).unwrap_or_else(|| json!({}));
    scale["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    // Checked as a written Scale is, then stored over the one admitted.
    let written = written_scale(&serde_json::to_vec(&scale).unwrap_or_default())?;
    let scale = registry.write_scale(target, |_| Ok(written))?;
    let mut response = value_response(StatusCode::OK, &scale);
    add_warnings(&mut response, &admitted.warnings);
    Ok(response)
}

/// Admits a delete-collection: a delete of each object it selects, every one before any is
/// deleted; their warnings.
async fn admit_collection_delete(
    shared: &Arc<Shared>,
    webhooks: &admission::Webhooks<'_>,
    route: &Route,
    rt: &ResourceType,
    options: &Options,
) -> ApiResult<Vec<String>> {
    let target = &route.target;
    let (labels, fields) = selectors(shared, target, options)?;
    let keep = |o: &StoredObject| labels.matches(&o.labels) && fields.matches(&o.fields);
    let store = &shared.registry.store;
    let page =
        store.list_page(target.resource, target.namespace.as_deref(), None, None, None, &keep)?;
    let dry_run = options.dry_run;
    let mut warnings = Vec::new();
    for object in &page.items {
        let mut one = route.clone();
        if rt.namespaced {
            one.target.namespace = Some(object.fields.namespace.clone());
        }
        let old = object.value();
        let attributes = attributes_of(&one, rt, Delete, &object.fields.name);
        let review_options = options_of(Delete, options, dry_run);
        let admitted =
            webhooks.admit(&attributes, None, None, Some(&old), dry_run, review_options).await?;
        warnings.extend(admitted.warnings);
    }
    Ok(warnings)
}

/// `Warning` headers for `warnings`.
fn add_warnings(response: &mut Response, warnings: &[String]) {
    for problem in warnings {
        if let Ok(value) = fields::warning(problem).parse() {
            response.headers_mut().append("warning", value);
        }
    }
}

/// A create's object as webhooks see it: without what the server sets as it stores it.
fn created(mut object: Value) -> Value {
    if let Some(meta) = object["metadata"].as_object_mut() {
        for field in ["uid", "creationTimestamp", "generation", "resourceVersion"] {
            meta.remove(field);
        }
    }
    object
}

/// Server-side field validation of a write's body (see the `fields` module): a `Strict` write
/// with unknown or duplicate fields is refused; a `Warn` one (the default) answers with the
/// problems, which become `Warning` headers.
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
            PatchType::Apply => match super::apply::parse_body(body) {
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
    let validation = fields::Validation::parse(requested, options_kind)?;
    if validation == fields::Validation::Ignore || json.is_empty() {
        return Ok(Vec::new());
    }
    let store = &shared.registry.store;
    let problems = openapi::with_kind_schema(store, &rt.group, &rt.version, &rt.kind, |s, k| {
        fields::problems(s, k, &json, patch)
    })
    .unwrap_or_default();
    if validation == fields::Validation::Strict && !problems.is_empty() {
        return Err(fields::strict_error(&rt.kind, &rt.version, &problems));
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
/// A `Scale` written whole: an object whose `metadata`, `spec` and `status` are objects.
fn written_scale(body: &[u8]) -> ApiResult<Value> {
    let scale: Value = shapes::from_slice(body).map_err(|e| match e {
        Malformed::TooDeep => shapes::too_deep_body("Scale", body),
        Malformed::Syntax(e) => ApiError::bad_request(format!("decoding the Scale: {e}")),
    })?;
    if !scale.is_object() {
        return Err(ApiError::bad_request("the body of the request must be a JSON object"));
    }
    match shapes::unmarshal_error(&scale, "Scale", "autoscaling/v1", true) {
        Some(error) => Err(shapes::cannot_be_handled("Scale", "autoscaling/v1", &error)),
        None => Ok(scale),
    }
}

/// `current` with `body`, a patch of type `kind`, applied: a `Scale` still.
fn patched_scale(current: &Value, kind: PatchType, body: &[u8]) -> ApiResult<Value> {
    let mut scale = current.clone();
    patch::apply(&mut scale, kind, body)?;
    if !scale.is_object() {
        return Err(shapes::unprocessable_patch());
    }
    match shapes::unmarshal_error(&scale, "Scale", "autoscaling/v1", true) {
        Some(error) => Err(shapes::invalid_patch(&scale, &error)),
        None => Ok(scale),
    }
}

fn serve_scale(
    registry: &Registry,
    method: &Method,
    headers: &HeaderMap,
    target: &Target,
    body: &[u8],
) -> ApiResult<Response> {
    let scale = match method.as_str() {
        "GET" => registry.scale(target)?,
        "PUT" => {
            let written = written_scale(body)?;
            registry.write_scale(target, |_| Ok(written))?
        }
        "PATCH" => {
            let kind = patch_type(headers)?;
            registry.write_scale(target, |current| patched_scale(current, kind, body))?
        }
        _ => return Err(ApiError::method_not_allowed()),
    };
    Ok(value_response(StatusCode::OK, &scale))
}

fn start_watch(
    shared: &Arc<Shared>,
    target: Target,
    options: &Options,
    form: Form,
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
        form,
    };
    Ok(watch::serve(shared.clone(), request))
}

fn delete_collection(
    shared: &Shared,
    target: &Target,
    options: &Options,
    body: &[u8],
    metadata: Option<&str>,
) -> ApiResult<Response> {
    let (labels, fields) = selectors(shared, target, options)?;
    let keep = |o: &StoredObject| labels.matches(&o.labels) && fields.matches(&o.fields);
    let page = shared.registry.store.list_page(
        target.resource,
        target.namespace.as_deref(),
        None,
        None,
        None,
        &keep,
    )?;
    let rt = shared.registry.rt(target);
    let mut deleted = Vec::new();
    for object in page.items {
        let one = Target {
            resource: target.resource,
            namespace: target
                .namespace
                .clone()
                .or_else(|| rt.namespaced.then(|| object.fields.namespace.clone())),
            name: Some(object.fields.name.clone()),
        };
        let policy = options.propagation_policy.as_deref();
        match shared.registry.delete(&one, body, policy, options.dry_run) {
            Ok(deletion) => deleted.push(match metadata {
                None => deletion.object.value(),
                Some(version) => serde_json::from_slice(&deletion.object.json_as(Some(version)))
                    .unwrap_or(Value::Null),
            }),
            Err(e) if e.code == StatusCode::NOT_FOUND => {}
            Err(e) => return Err(e),
        }
    }
    let (kind, api_version) = match metadata {
        None => (format!("{}List", rt.kind), rt.api_version()),
        Some(version) => ("PartialObjectMetadataList".to_owned(), format!("meta.k8s.io/{version}")),
    };
    let list = json!({
        "kind": kind,
        "apiVersion": api_version,
        "metadata": { "resourceVersion": shared.registry.store.current_rv().to_string() },
        "items": deleted,
    });
    Ok(value_response(StatusCode::OK, &list))
}
