//! Requests at a CRD version other than the storage version (see the `conversion` module):
//! served by the storage version's handlers, whose registry converts what is written (see
//! `registry::writes`); the answers (objects, lists, tables, watch events) are converted
//! here on the way out, as the real server's codec converts them.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, header};
use axum::response::Response;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::http::encoding::MAX_BODY;
use crate::http::negotiate::{Form, Reading};
use crate::http::options::Options;
use crate::http::rest::{negotiated, serve};
use crate::http::route::Route;
use crate::http::state::Shared;
use crate::http::table::{self, Include};
use crate::model::resources::ResourceType;
use crate::model::status::{ApiError, ApiResult};
use crate::registry::Registry;
use crate::registry::stages::Version;

/// Serves `route`, made at the version `route.view` names (its target the storage
/// version's): the registry converts what is written; the answer is converted here.
pub(crate) async fn serve_view(
    shared: &Arc<Shared>,
    method: &Method,
    headers: &HeaderMap,
    route: Route,
    options: &Options,
    body: Bytes,
) -> ApiResult<Response> {
    let Some(version) = route.view.clone() else {
        return serve(shared, method, headers, route, options, body).await;
    };
    let out = Out { version: &version, wanted: &version.requested.api_version() };
    let reading = match (route.target.name.is_some(), options.watch) {
        (false, true) => Reading::Watch,
        (false, false) => Reading::List,
        (true, _) => Reading::Object,
    };
    // A read asked for as a table (or a watch of tables) is made of the converted objects,
    // with the requested version's columns: the objects are asked for as JSON. (A write's
    // answer is never a table.)
    let table = match method == Method::GET {
        true => match negotiated(headers, reading, &version.requested)?.form {
            Form::Table(form) => Some(Tables {
                version: form,
                include: options.include_object,
                registry: shared.registry.clone(),
            }),
            _ => None,
        },
        false => None,
    };
    let mut inner = headers.clone();
    if table.is_some() {
        inner.insert(header::ACCEPT, "application/json".parse().expect("a header"));
    }
    let response = serve(shared, method, &inner, route, options, body).await?;
    match (method == Method::GET, reading) {
        (true, Reading::Watch) => Ok(out.watch(response, table)),
        _ => out.answer(response, table).await,
    }
}

/// A read answered as Tables: their `meta.k8s.io` version, what each row carries, and the
/// registry whose strategies print them.
#[derive(Clone)]
struct Tables {
    version: &'static str,
    include: Include,
    registry: Arc<Registry>,
}

impl Tables {
    /// The Table of `objects` of `rt`, with `metadata`.
    fn of(&self, rt: &ResourceType, metadata: Value, objects: &[Value], columns: bool) -> Value {
        table::table(&self.registry, rt, self.version, metadata, objects, self.include, columns)
    }
}

/// Answers converted to the requested version.
struct Out<'a> {
    version: &'a Version,
    wanted: &'a str,
}

impl Out<'_> {
    /// `response` with its object or list converted, or made into a table.
    async fn answer(&self, response: Response, table: Option<Tables>) -> ApiResult<Response> {
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, MAX_BODY * 64)
            .await
            .map_err(|e| ApiError::bad_request(format!("reading an answer: {e}")))?;
        let Ok(mut value) = crate::model::shapes::from_slice::<Value>(&bytes) else {
            return Ok(Response::from_parts(parts, Body::from(bytes)));
        };
        let requested = &*self.version.requested;
        let converter = &*self.version.converter;
        let kind = &requested.kind;
        let list_kind = format!("{kind}List");
        if value["kind"] == json!(kind) {
            value = converter.convert_one(value, self.wanted).await?;
            if let Some(tables) = table {
                let metadata = json!({ "resourceVersion": value["metadata"]["resourceVersion"] });
                value = tables.of(requested, metadata, &[value], true);
            }
        } else if value["kind"] == json!(list_kind) {
            let items = value["items"].as_array().cloned().unwrap_or_default();
            let items = converter.convert(items, self.wanted).await?;
            if let Some(tables) = table {
                let metadata = value["metadata"].clone();
                value = tables.of(requested, metadata, &items, true);
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
    fn watch(&self, response: Response, table: Option<Tables>) -> Response {
        let (parts, body) = response.into_parts();
        let (converter, wanted) = (self.version.converter.clone(), self.wanted.to_owned());
        let requested = self.version.requested.clone();
        // As the real server: only the first table of a watch defines the columns.
        let columns_sent = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let lines = lines(body.into_data_stream());
        let converted = lines.then(move |line| {
            let (converter, wanted, requested, table) =
                (converter.clone(), wanted.clone(), requested.clone(), table.clone());
            let columns_sent = columns_sent.clone();
            async move {
                let Ok(mut event) = crate::model::shapes::from_slice::<Value>(&line) else {
                    return Ok::<_, std::io::Error>(line);
                };
                let ours = event["object"]["kind"] == json!(requested.kind);
                if ours && event["type"] == "BOOKMARK" {
                    event["object"]["apiVersion"] = json!(wanted);
                } else if ours {
                    match converter.convert_one(event["object"].take(), &wanted).await {
                        Ok(object) => event["object"] = object,
                        Err(err) => event = json!({ "type": "ERROR", "object": err.to_status() }),
                    }
                    if let (Some(tables), true) = (table, event["type"] != "ERROR") {
                        let object = event["object"].take();
                        let metadata =
                            json!({ "resourceVersion": object["metadata"]["resourceVersion"] });
                        let first = !columns_sent.swap(true, std::sync::atomic::Ordering::SeqCst);
                        event["object"] = tables.of(&requested, metadata, &[object], first);
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
    use crate::model::resources::ResourceType;

    #[tokio::test]
    async fn a_watch_converts_objects_but_passes_bookmarks_with_the_requested_version() {
        // A conversion webhook nobody answers: any object sent to it fails.
        let crd = json!({ "spec": { "names": { "kind": "Doodad" }, "conversion": {
            "strategy": "Webhook",
            "webhook": { "clientConfig": { "url": "https://127.0.0.1:1/convert" } },
        } } });
        let view = crate::conversion::View::of(crd, 0);
        let requested = ResourceType::new("example.com", "v2", "Doodad", "doodads", true);
        let version = Version { requested: Arc::new(requested), converter: Arc::new(view) };
        let out = Out { version: &version, wanted: "example.com/v2" };
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
