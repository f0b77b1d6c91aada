//! OpenAPI documents, as kubectl reads them to validate (`kubectl apply|create -f` with its
//! default `--validate=strict`), to compute patches (`apply`, `diff`) and to explain
//! (`kubectl explain`):
//!
//! - `/openapi/v3`: the index of group versions, each with its document's URL and hash;
//! - `/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`: Kubernetes 1.36.2's published
//!   document of each built-in group version this server serves (vendored in `openapi/` by
//!   `scripts/vendor-openapi.py`), and for each group version of a CustomResourceDefinition,
//!   while it is served, a document made from its `openAPIV3Schema` (kind, list kind and the
//!   metadata types they refer to), as the real server's CRD controller publishes it;
//! - `/openapi/v2`: the v2 document, built-in paths and definitions with each served CRD
//!   version's definition added, in JSON (the real server also answers the protobuf form,
//!   which kubectl 1.32 no longer asks for where v3 is served).
//!
//! A document's hash (in the index's `serverRelativeURL`) is a hash of its text, so a client's
//! cache of a CRD's document is refreshed when the CRD changes.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::OnceLock;

use axum::body::Bytes;
use serde_json::{Map, Value, json};

use crate::model::vendored::{BUILT_IN, is_kind, parsed};
use crate::storage::store::Store;

const V2: &str = include_str!("../../openapi/v2.json");

fn hash(text: &str) -> String {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    format!("{:016X}", hasher.finish())
}

/// One served version of a CRD: what its documents need.
struct CrdVersion {
    group: String,
    version: String,
    kind: String,
    list_kind: String,
    plural: String,
    namespaced: bool,
    schema: Value,
}

/// The served versions of every CustomResourceDefinition stored.
fn crd_versions(store: &Store) -> Vec<CrdVersion> {
    let Some(definitions) =
        store.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    else {
        return Vec::new();
    };
    let crds = store.read(|txn| txn.list(definitions, None));
    let mut out = Vec::new();
    for crd in crds {
        let crd = crd.value();
        let spec = &crd["spec"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        for version in spec["versions"].as_array().into_iter().flatten() {
            if version["served"] != true {
                continue;
            }
            let kind = text(&spec["names"]["kind"]);
            let list_kind = spec["names"]["listKind"]
                .as_str()
                .map_or_else(|| format!("{kind}List"), str::to_owned);
            out.push(CrdVersion {
                group: text(&spec["group"]),
                version: text(&version["name"]),
                kind,
                list_kind,
                plural: text(&spec["names"]["plural"]),
                namespaced: spec["scope"] == "Namespaced",
                schema: version["schema"]["openAPIV3Schema"].clone(),
            });
        }
    }
    out
}

/// `example.com` → `com.example`, as the real server names a CRD's definitions.
fn reversed(group: &str) -> String {
    group.split('.').rev().collect::<Vec<_>>().join(".")
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

/// A CRD version's kind and list kind as OpenAPI schemas; `reference` makes a `$ref` to a
/// definition by name (`#/components/schemas/...` or `#/definitions/...`).
fn crd_schemas(crd: &CrdVersion, reference: &dyn Fn(&str) -> String) -> [(String, Value); 2] {
    let gvk = |kind: &str| json!([{ "group": crd.group, "version": crd.version, "kind": kind }]);
    let name = format!("{}.{}.{}", reversed(&crd.group), crd.version, crd.kind);
    let mut kind = match &crd.schema {
        Value::Object(schema) => schema.clone(),
        _ => Map::new(),
    };
    kind.entry("type").or_insert(json!("object"));
    let properties = kind.entry("properties").or_insert_with(|| json!({}));
    if let Some(properties) = properties.as_object_mut() {
        properties.insert(
            "apiVersion".into(),
            json!({ "type": "string", "description": "APIVersion defines the versioned schema of this representation of an object." }),
        );
        properties.insert(
            "kind".into(),
            json!({ "type": "string", "description": "Kind is a string value representing the REST resource this object represents." }),
        );
        properties.insert(
            "metadata".into(),
            json!({ "allOf": [{ "$ref": reference(OBJECT_META) }], "default": {} }),
        );
    }
    kind.insert("x-kubernetes-group-version-kind".into(), gvk(&crd.kind));
    let list = json!({
        "description": format!("{} is a list of {}", crd.list_kind, crd.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": { "type": "string" },
            "kind": { "type": "string" },
            "items": { "type": "array", "items": { "allOf": [{ "$ref": reference(&name) }] } },
            "metadata": { "allOf": [{ "$ref": reference(LIST_META) }], "default": {} },
        },
        "x-kubernetes-group-version-kind": gvk(&crd.list_kind),
    });
    let list_name = format!("{}.{}.{}", reversed(&crd.group), crd.version, crd.list_kind);
    [(name, Value::Object(kind)), (list_name, list)]
}

/// The definitions `value` refers to, and theirs, from `pool` (a document's schemas).
fn closure(value: &Value, pool: &Map<String, Value>, out: &mut Map<String, Value>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if key == "$ref"
                    && let Some(name) = child.as_str().and_then(|r| r.rsplit('/').next())
                    && !out.contains_key(name)
                    && let Some(definition) = pool.get(name)
                {
                    out.insert(name.to_owned(), definition.clone());
                    closure(definition, pool, out);
                } else {
                    closure(child, pool, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| closure(i, pool, out)),
        _ => {}
    }
}

/// The paths of one CRD version's collection and objects, with their operations' kinds, so
/// that clients find the kind's operations (and their parameters) as on the real server.
fn crd_paths(crd: &CrdVersion) -> Map<String, Value> {
    let base = if crd.namespaced {
        format!("/apis/{}/{}/namespaces/{{namespace}}/{}", crd.group, crd.version, crd.plural)
    } else {
        format!("/apis/{}/{}/{}", crd.group, crd.version, crd.plural)
    };
    let gvk = json!({ "group": crd.group, "version": crd.version, "kind": crd.kind });
    // Writes take `fieldValidation` and `dryRun`: kubectl reads them off here to decide to
    // have the server validate fields (`fieldValidation=Strict`) instead of doing it itself.
    let query = |name: &str| json!({ "name": name, "in": "query", "schema": { "type": "string" }, "uniqueItems": true });
    let operation = |id: &str, writes: bool| {
        let mut op = json!({
            "operationId": id,
            "x-kubernetes-action": id,
            "x-kubernetes-group-version-kind": gvk,
            "responses": { "200": { "description": "OK" } },
        });
        if writes {
            op["parameters"] =
                json!([query("dryRun"), query("fieldManager"), query("fieldValidation")]);
        }
        op
    };
    let mut paths = Map::new();
    let collection = json!({ "get": operation("list", false), "post": operation("post", true) });
    paths.insert(base.clone(), collection);
    paths.insert(
        format!("{base}/{{name}}"),
        json!({
            "get": operation("get", false), "put": operation("put", true),
            "patch": operation("patch", true), "delete": operation("delete", false),
        }),
    );
    paths
}

/// The v3 document of a CRD group version: its kinds' schemas and the metadata types.
fn crd_document(crds: &[&CrdVersion]) -> Value {
    let reference = |name: &str| format!("#/components/schemas/{name}");
    let mut schemas = Map::new();
    let mut paths = Map::new();
    for crd in crds {
        for (name, schema) in crd_schemas(crd, &reference) {
            schemas.insert(name, schema);
        }
        paths.extend(crd_paths(crd));
    }
    let core = parsed("api/v1").and_then(|d| d["components"]["schemas"].as_object());
    if let Some(core) = core {
        let mut metadata = Map::new();
        closure(&Value::Object(schemas.clone()), core, &mut metadata);
        schemas.extend(metadata);
    }
    json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes CRD Swagger", "version": "v0.1.0" },
        "paths": paths,
        "components": { "schemas": schemas },
    })
}

/// The group version paths served, with each document's text: built-in ones vendored, CRDs'
/// made now.
fn documents(store: &Store) -> Vec<(String, Bytes)> {
    let mut out: Vec<(String, Bytes)> = BUILT_IN
        .iter()
        .map(|(path, text)| ((*path).to_owned(), Bytes::from_static(text.as_bytes())))
        .collect();
    let crds = crd_versions(store);
    let mut group_versions: Vec<(&str, &str)> =
        crds.iter().map(|c| (c.group.as_str(), c.version.as_str())).collect();
    group_versions.sort_unstable();
    group_versions.dedup();
    for (group, version) in group_versions {
        let of: Vec<&CrdVersion> =
            crds.iter().filter(|c| c.group == group && c.version == version).collect();
        let text = crd_document(&of).to_string();
        out.push((format!("apis/{group}/{version}"), Bytes::from(text)));
    }
    out
}

/// Runs `f` on the v3 schemas of `group`/`version` and the schema of `kind` among them, if
/// one is published (built-in, or a served CRD version's).
pub(crate) fn with_kind_schema<R>(
    store: &Store,
    group: &str,
    version: &str,
    kind: &str,
    f: impl FnOnce(&Map<String, Value>, &Value) -> R,
) -> Option<R> {
    let path =
        if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") };
    let on = |document: &Value| {
        let schemas = document["components"]["schemas"].as_object()?;
        let schema = schemas.values().find(|s| is_kind(s, group, version, kind))?;
        Some(f(schemas, schema))
    };
    match parsed(&path) {
        Some(document) => on(document),
        None => on(&crd_group_document(store, group, version)?),
    }
}

/// The v3 document of the CRDs served at `group`/`version`, if any are.
fn crd_group_document(store: &Store, group: &str, version: &str) -> Option<Value> {
    let crds = crd_versions(store);
    let of: Vec<&CrdVersion> =
        crds.iter().filter(|c| c.group == group && c.version == version).collect();
    (!of.is_empty()).then(|| crd_document(&of))
}

/// `/openapi/v3`: every group version's document URL, with its hash.
pub(crate) fn v3_index(store: &Store) -> Value {
    let paths: Map<String, Value> = documents(store)
        .into_iter()
        .map(|(path, text)| {
            let url = format!("/openapi/v3/{path}?hash={}", hash(&String::from_utf8_lossy(&text)));
            (path, json!({ "serverRelativeURL": url }))
        })
        .collect();
    json!({ "paths": paths })
}

/// `/openapi/v3/<group version path>`, if one is served.
pub(crate) fn v3_document(store: &Store, path: &str) -> Option<Bytes> {
    if let Some((_, text)) = BUILT_IN.iter().find(|(p, _)| *p == path) {
        return Some(Bytes::from_static(text.as_bytes()));
    }
    let ["apis", group, version] = path.split('/').collect::<Vec<_>>()[..] else { return None };
    crd_group_document(store, group, version).map(|document| Bytes::from(document.to_string()))
}

/// `/openapi/v2`: the vendored document with each served CRD version's definitions and
/// paths added.
pub(crate) fn v2_document(store: &Store) -> Bytes {
    let crds = crd_versions(store);
    if crds.is_empty() {
        return Bytes::from_static(V2.as_bytes());
    }
    static PARSED: OnceLock<Value> = OnceLock::new();
    let mut document =
        PARSED.get_or_init(|| serde_json::from_str(V2).expect("the vendored v2 document")).clone();
    let reference = |name: &str| format!("#/definitions/{name}");
    for crd in &crds {
        for (name, schema) in crd_schemas(crd, &reference) {
            document["definitions"][name] = schema;
        }
        if let Some(paths) = document["paths"].as_object_mut() {
            paths.extend(crd_paths(crd));
        }
    }
    Bytes::from(document.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_vendored_document_parses_and_names_its_kinds() {
        for (path, _) in BUILT_IN {
            let document = parsed(path).unwrap();
            let schemas = document["components"]["schemas"].as_object().unwrap();
            assert!(
                schemas.values().any(|s| s.get("x-kubernetes-group-version-kind").is_some()),
                "{path}"
            );
        }
        let pod = &parsed("api/v1").unwrap()["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
        assert!(pod["properties"]["spec"].is_object());
        let v2: Value = serde_json::from_str(V2).unwrap();
        assert!(v2["definitions"]["io.k8s.api.apps.v1.Deployment"].is_object());
    }

    #[test]
    fn a_crd_document_holds_its_kind_its_list_and_the_metadata_they_refer_to() {
        let crd = CrdVersion {
            group: "example.com".into(),
            version: "v1".into(),
            kind: "Widget".into(),
            list_kind: "WidgetList".into(),
            plural: "widgets".into(),
            namespaced: true,
            schema: json!({"type": "object", "properties": {"spec": {"type": "object",
                "properties": {"size": {"type": "integer"}}}}}),
        };
        let document = crd_document(&[&crd]);
        let schemas = &document["components"]["schemas"];
        let widget = &schemas["com.example.v1.Widget"];
        assert_eq!(widget["properties"]["spec"]["properties"]["size"]["type"], "integer");
        assert_eq!(
            widget["x-kubernetes-group-version-kind"],
            json!([{"group": "example.com", "version": "v1", "kind": "Widget"}])
        );
        assert!(schemas["com.example.v1.WidgetList"].is_object());
        assert!(schemas[OBJECT_META].is_object() && schemas[LIST_META].is_object());
        assert!(
            schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry"].is_object(),
            "what ObjectMeta refers to comes too"
        );
        assert!(
            document["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets"].is_object()
        );
    }
}
