//! Requests at a CRD version other than the storage version (see the `conversion` module):
//! served by the storage version's handlers, with bodies converted on the way in and
//! answers (objects, lists, tables, watch events) on the way out.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use serde_json::{Value, json};

use super::conversion::View;
use super::encoding::MAX_BODY;
use super::negotiate::{Form, Reading, negotiate};
use super::options::Options;
use super::patch::{self, PatchType};
use super::resources::ResourceType;
use super::rest::serve_admitted;
use super::route::Route;
use super::shapes::Malformed;
use super::state::Shared;
use super::status::{ApiError, ApiResult};
use super::table::{self, Include};

/// Serves `route` (its target already the storage version's) for the version `requested`,
/// converting as `view` says.
pub(crate) async fn serve_view(
    shared: &Arc<Shared>,
    method: &Method,
    headers: &HeaderMap,
    route: Route,
    (view, requested): (View, Arc<ResourceType>),
    options: &Options,
    body: Bytes,
) -> ApiResult<Response> {
    let wanted = requested.api_version();
    let stored = view.storage_api_version.clone();
    // Admission matches the webhooks' rules against the version asked for.
    let mut route = route;
    route.view = Some((view.clone(), requested.clone()));
    let named = route.target.name.is_some();
    let watch = options.watch;
    let out = Out { view: &view, wanted: &wanted, requested: &requested };
    let mut json_headers = headers.clone();
    json_headers.insert(header::CONTENT_TYPE, "application/json".parse().expect("a header"));
    let apply = method == Method::PATCH
        && super::rest::patch_type(headers).is_ok_and(|kind| kind == PatchType::Apply);
    match (method.as_str(), named) {
        ("GET", _) => {
            let reading = match (named, watch) {
                (false, true) => Reading::Watch,
                (false, false) => Reading::List,
                (true, _) => Reading::Object,
            };
            // A table (or a watch of tables) is made of the converted objects, with the
            // requested version's columns.
            let table = match negotiate(headers, reading, &requested.kind, false)? {
                Form::Table(version) => Some((version, options.include_object)),
                _ => None,
            };
            let mut inner = headers.clone();
            if table.is_some() {
                inner.insert(header::ACCEPT, "application/json".parse().expect("a header"));
            }
            let response = serve_admitted(shared, method, &inner, route, options, body).await?;
            match reading {
                Reading::Watch => Ok(out.watch(response, table)),
                _ => out.answer(response, table).await,
            }
        }
        ("PATCH", true) if apply => Err(ApiError::bad_request(format!(
            "server-side apply at {wanted}: the embedded API server applies at the storage version {stored} alone"
        ))),
        ("PATCH", true) => {
            let kind = super::rest::patch_type(headers)?;
            if kind == PatchType::Strategic {
                return Err(patch::strategic_refused());
            }
            for attempt in 1..=5 {
                let current = shared.registry.get(&route.target)?;
                let version = json!(current.rv.to_string());
                let mut object = view.convert_one(current.value(), &wanted).await?;
                patch::apply(&mut object, kind, &body)?;
                // A patch that sets the resourceVersion is a precondition of its own: kept,
                // and a conflict with it is the client's, not retried.
                let precondition = object["metadata"]["resourceVersion"] != version;
                let mut back = view.convert_one(object.clone(), &stored).await?;
                back["metadata"]["resourceVersion"] = match precondition {
                    true => object["metadata"]["resourceVersion"].clone(),
                    false => version,
                };
                let body = Bytes::from(serde_json::to_vec(&back).unwrap_or_default());
                let put = serve_admitted(
                    shared,
                    &Method::PUT,
                    &json_headers,
                    route.clone(),
                    options,
                    body,
                )
                .await;
                match put {
                    Err(err)
                        if err.code == StatusCode::CONFLICT && !precondition && attempt < 5 =>
                    {
                        continue;
                    }
                    put => return out.answer(put?, None).await,
                }
            }
            unreachable!("the last attempt returns")
        }
        ("POST" | "PUT", _) => {
            let object: Value = crate::shapes::from_slice(&body).map_err(|e| match e {
                Malformed::TooDeep => crate::shapes::too_deep_body(&requested.kind, &body),
                Malformed::Syntax(e) => ApiError::bad_request(format!(
                    "the body of the request was in an unknown format: {e}"
                )),
            })?;
            let object = match object["apiVersion"] == json!(wanted) {
                true => view.convert_one(object, &stored).await?,
                false => object,
            };
            let body = Bytes::from(serde_json::to_vec(&object).unwrap_or_default());
            let response =
                serve_admitted(shared, method, &json_headers, route, options, body).await?;
            out.answer(response, None).await
        }
        _ => {
            let response = serve_admitted(shared, method, headers, route, options, body).await?;
            out.answer(response, None).await
        }
    }
}

/// Answers converted to the requested version.
struct Out<'a> {
    view: &'a View,
    wanted: &'a str,
    requested: &'a ResourceType,
}

impl Out<'_> {
    /// `response` with its object or list converted, or made into a table.
    async fn answer(
        &self,
        response: Response,
        table: Option<(&'static str, Include)>,
    ) -> ApiResult<Response> {
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, MAX_BODY * 64)
            .await
            .map_err(|e| ApiError::bad_request(format!("reading an answer: {e}")))?;
        let Ok(mut value) = crate::shapes::from_slice::<Value>(&bytes) else {
            return Ok(Response::from_parts(parts, Body::from(bytes)));
        };
        let kind = &self.requested.kind;
        let list_kind = format!("{kind}List");
        if value["kind"] == json!(kind) {
            value = self.view.convert_one(value, self.wanted).await?;
            if let Some((version, include)) = table {
                let metadata = json!({ "resourceVersion": value["metadata"]["resourceVersion"] });
                value = table::table(self.requested, version, metadata, &[value], include, true);
            }
        } else if value["kind"] == json!(list_kind) {
            let items = value["items"].as_array().cloned().unwrap_or_default();
            let items = self.view.convert(items, self.wanted).await?;
            if let Some((version, include)) = table {
                let metadata = value["metadata"].clone();
                value = table::table(self.requested, version, metadata, &items, include, true);
            } else {
                value["items"] = Value::Array(items);
                value["apiVersion"] = json!(self.wanted);
            }
        }
        let mut response = Response::from_parts(parts, Body::from(value.to_string()));
        response.headers_mut().remove(header::CONTENT_LENGTH);
        Ok(response)
    }

    /// A watch whose events' objects are converted as they come (a failed conversion ends
    /// the watch with an `ERROR` event, as the real server ends it), or made tables; a
    /// bookmark, which holds a resourceVersion alone, only has its `apiVersion` changed (no
    /// webhook could convert it).
    fn watch(&self, response: Response, table: Option<(&'static str, Include)>) -> Response {
        let (parts, body) = response.into_parts();
        let (view, wanted) = (self.view.clone(), self.wanted.to_owned());
        let requested = Arc::new(self.requested.clone());
        // As the real server: only the first table of a watch defines the columns.
        let columns_sent = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let lines = lines(body.into_data_stream());
        let converted = lines.then(move |line| {
            let (view, wanted, requested) = (view.clone(), wanted.clone(), requested.clone());
            let columns_sent = columns_sent.clone();
            async move {
                let Ok(mut event) = crate::shapes::from_slice::<Value>(&line) else {
                    return Ok::<_, std::io::Error>(line);
                };
                let ours = event["object"]["kind"] == json!(requested.kind);
                if ours && event["type"] == "BOOKMARK" {
                    event["object"]["apiVersion"] = json!(wanted);
                } else if ours {
                    match view.convert_one(event["object"].take(), &wanted).await {
                        Ok(object) => event["object"] = object,
                        Err(err) => event = json!({ "type": "ERROR", "object": err.to_status() }),
                    }
                    if let (Some((version, include)), true) = (table, event["type"] != "ERROR") {
                        let object = event["object"].take();
                        let metadata =
                            json!({ "resourceVersion": object["metadata"]["resourceVersion"] });
                        let first = !columns_sent.swap(true, std::sync::atomic::Ordering::SeqCst);
                        event["object"] =
                            table::table(&requested, version, metadata, &[object], include, first);
                    }
                }
                let mut out = serde_json::to_vec(&event).unwrap_or_default();
                out.push(b'\n');
                Ok(Bytes::from(out))
            }
        });
        let mut response = Response::from_parts(parts, Body::from_stream(converted));
        response.headers_mut().remove(header::CONTENT_LENGTH);
        response
    }
}

/// The newline-ended lines of a body, each with its newline dropped.
fn lines(
    body: impl futures::Stream<Item = Result<Bytes, axum::Error>> + Send + 'static,
) -> impl futures::Stream<Item = Bytes> + Send + 'static {
    futures::stream::unfold(
        (Box::pin(body), Vec::<u8>::new()),
        |(mut body, mut buffer)| async move {
            loop {
                if let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).take(end).collect();
                    return Some((Bytes::from(line), (body, buffer)));
                }
                match body.next().await {
                    Some(Ok(chunk)) => buffer.extend_from_slice(&chunk),
                    _ if !buffer.is_empty() => {
                        let rest = std::mem::take(&mut buffer);
                        return Some((Bytes::from(rest), (body, buffer)));
                    }
                    _ => return None,
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_watch_converts_objects_but_passes_bookmarks_with_the_requested_version() {
        // A conversion webhook nobody answers: any object sent to it fails.
        let crd = json!({ "spec": { "names": { "kind": "Doodad" }, "conversion": {
            "strategy": "Webhook",
            "webhook": { "clientConfig": { "url": "https://127.0.0.1:1/convert" } },
        } } });
        let view = View::of(crd, 0, "example.com/v1");
        let requested = ResourceType::new("example.com", "v2", "Doodad", "doodads", true);
        let out = Out { view: &view, wanted: "example.com/v2", requested: &requested };
        let events = [
            json!({ "type": "BOOKMARK", "object": { "kind": "Doodad", "apiVersion": "example.com/v1",
                "metadata": { "resourceVersion": "7" } } }),
            json!({ "type": "ADDED", "object": { "kind": "Doodad", "apiVersion": "example.com/v1",
                "metadata": { "name": "d", "resourceVersion": "8" } } }),
        ];
        let body: String = events.iter().map(|e| format!("{e}\n")).collect();
        let watched = out.watch(Response::new(Body::from(body)), None);
        let bytes = axum::body::to_bytes(watched.into_body(), 1 << 20).await.unwrap();
        let lines: Vec<Value> = bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(lines[0]["type"], "BOOKMARK");
        assert_eq!(lines[0]["object"]["apiVersion"], "example.com/v2", "no webhook asked");
        assert_eq!(lines[1]["type"], "ERROR", "the object was sent to the webhook: {}", lines[1]);
        let message = lines[1]["object"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("conversion webhook for example.com/v1, Kind=Doodad failed: Post"),
            "{message}"
        );
    }
}
