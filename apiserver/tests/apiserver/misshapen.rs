//! Writes whose `metadata`, `metadata.labels`, `metadata.annotations`, `metadata.finalizers`,
//! `metadata.ownerReferences`, `spec`, `status` or `data` is of the wrong JSON type, by every
//! write verb (create, update, merge, JSON and strategic-merge patch, apply), to a
//! Deployment, a ConfigMap, a Secret and a custom resource with a structural schema: one
//! table, each cell's code and reason read off kube-apiserver v1.36.2 and v1.20.2 (the same
//! on both), and its message where the server words it.
//!
//! Where v1.20.2 words it otherwise: its decoder (json-iterator) words a create's or
//! update's 400 and a patch's 422 after their common prefix in its own way
//! (`v1.ConfigMap.Data: ObjectMeta: v1.ObjectMeta.Labels: ReadMapCB: expect { or n, but
//! found 1, …`), and its apply error names no object (`failed to create typed patch object:
//! .metadata.labels: expected map, got &{1}`).

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, RawResponse, Target};
use http::Method;
use serde_json::{Value, json};

const GROUP: &str = "shapes.example.com";

/// A CRD whose `spec` and `status` are objects, with a status subresource.
fn gadget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("gadgets.{GROUP}") },
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": { "plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList" },
            "versions": [{
                "name": "v1", "served": true, "storage": true, "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": { "type": "object", "properties": {
                    "spec": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                    "status": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                } } },
            }],
        },
    })
}

/// A kind of the table: its API version, collection, an object's other fields, and its own
/// fields written wrongly (besides `metadata` and its maps and lists, written in every kind).
struct Kind {
    kind: &'static str,
    api_version: &'static str,
    collection: String,
    body: Value,
    fields: &'static [&'static str],
}

const METADATA: [&str; 4] = ["labels", "annotations", "finalizers", "ownerReferences"];

/// `object` with `field` set to `value`.
fn with(object: &Value, field: &str, value: &Value) -> Value {
    let mut object = object.clone();
    match METADATA.contains(&field) {
        true => object["metadata"][field] = value.clone(),
        false => object[field] = value.clone(),
    }
    object
}

/// The wrong values of `field`, by name: lists get an object, the rest a list; `metadata`
/// also null.
fn wrong_values(field: &str) -> Vec<(&'static str, Value)> {
    let mut values = vec![("string", json!("x")), ("number", json!(1))];
    match field {
        "finalizers" | "ownerReferences" => values.push(("object", json!({ "a": "b" }))),
        _ => values.push(("array", json!([1]))),
    }
    if field == "metadata" {
        values.push(("null", Value::Null));
    }
    values
}

/// Go's `%v` of a decoded JSON value.
fn go_print(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            format!("[{}]", items.iter().map(go_print).collect::<Vec<_>>().join(" "))
        }
        Value::Object(map) => {
            let entries: Vec<String> =
                map.iter().map(|(k, v)| format!("{k}:{}", go_print(v))).collect();
            format!("map[{}]", entries.join(" "))
        }
        other => other.to_string(),
    }
}

/// What a cell's answer must say.
enum Words {
    /// Nothing beyond code and reason (a success).
    None,
    /// Exactly this.
    Exact(String),
    /// This, from v1.21 (json-iterator's words on v1.20 after `prefix`).
    Decoder { prefix: String, error: String },
    /// A patch's 422: quoting the patched object, then the decoder's error (from v1.21).
    Patched(String),
    /// This on v1.36 and the embedded server, `v1_20` on v1.20.
    Versioned { current: String, v1_20: String },
}

struct Cell {
    code: u16,
    reason: &'static str,
    words: Words,
}

fn cell(code: u16, reason: &'static str, words: Words) -> Cell {
    Cell { code, reason, words }
}

/// What kube-apiserver answers `verb` writing `value` (named `shape`) into `field` of `kind`.
fn expected(kind: &Kind, field: &str, shape: &str, value: &Value, verb: &str, name: &str) -> Cell {
    let custom = kind.kind == "Gadget";
    let undeterminable = || {
        Words::Exact(format!(
            "the name of the object ({name} based on URL) was undeterminable: name must be provided"
        ))
    };
    if custom && verb == "strategic" {
        return cell(415, "UnsupportedMediaType", Words::None);
    }
    if shape == "null" {
        return match verb {
            "create" => {
                let qualified = match kind.api_version.split_once('/') {
                    Some((group, _)) => format!("{}.{group}", kind.kind),
                    None => kind.kind.to_owned(),
                };
                let why = "metadata.name: Required value: name or generateName is required";
                cell(422, "Invalid", Words::Exact(format!("{qualified} \"\" is invalid: {why}")))
            }
            "apply" => cell(200, "", Words::None),
            _ => cell(400, "BadRequest", undeterminable()),
        };
    }
    let go_type = match field {
        "metadata" => "struct",
        "finalizers" | "ownerReferences" => "slice",
        "spec" | "status" if !custom => "struct",
        _ => "map",
    };
    if verb == "apply" {
        let path =
            if METADATA.contains(&field) { format!("metadata.{field}") } else { field.into() };
        let expected = if go_type == "slice" { "list" } else { "map" };
        let object = if field == "metadata" { "/".to_owned() } else { format!("/{name}") };
        let (group, version) = kind.api_version.split_once('/').unwrap_or(("", kind.api_version));
        let tail = format!(".{path}: expected {expected}, got &{{{}}}", go_print(value));
        return cell(
            500,
            "",
            Words::Versioned {
                current: format!(
                    "failed to create typed patch object ({object}; {group}/{version}, Kind={}): {tail}",
                    kind.kind
                ),
                v1_20: format!("failed to create typed patch object: {tail}"),
            },
        );
    }
    if custom && field == "status" {
        // The main resource drops a status it may not write.
        return cell(if verb == "create" { 201 } else { 200 }, "", Words::None);
    }
    if custom && field == "spec" {
        let json_type = match value {
            Value::String(_) => "string",
            Value::Number(_) => "integer",
            _ => "array",
        };
        let object = if verb == "create" { "c".to_owned() } else { name.to_owned() };
        return cell(
            422,
            "Invalid",
            Words::Exact(format!(
                "Gadget.{GROUP} \"{object}\" is invalid: spec: Invalid value: \"{json_type}\": \
                 spec in body must be of type object: \"{json_type}\""
            )),
        );
    }
    if verb == "strategic" {
        let patch = go_print(&with(&json!({}), field, value));
        let restore = match go_type {
            "struct" => "struct from:",
            "slice" => "slice from",
            _ => "map from",
        };
        let kind_of = match value {
            Value::String(_) => "string",
            Value::Number(_) => "int64",
            Value::Array(_) => "slice",
            _ => "map",
        };
        let message = format!(
            " \"\" is invalid: patch: Invalid value: {}: cannot restore {restore} {kind_of}",
            json!(patch)
        );
        return cell(422, "Invalid", Words::Exact(message));
    }
    let json_type = match value {
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Array(_) => "array",
        _ => "object",
    };
    let version = kind.api_version.rsplit('/').next().unwrap_or_default();
    let go_field = match (field, custom) {
        ("metadata", true) => "Go value of type v1.ObjectMeta".to_owned(),
        ("metadata", false) => {
            format!("Go struct field {}.metadata of type v1.ObjectMeta", kind.kind)
        }
        (f, true) if METADATA.contains(&f) => {
            format!("Go struct field ObjectMeta.{f} of type {}", meta_type(f))
        }
        (f, false) if METADATA.contains(&f) => {
            format!("Go struct field ObjectMeta.metadata.{f} of type {}", meta_type(f))
        }
        ("data", _) if kind.kind == "Secret" => {
            "Go struct field Secret.data of type map[string][]uint8".into()
        }
        ("data", _) => format!("Go struct field {}.data of type map[string]string", kind.kind),
        (f, _) => {
            let suffix = if f == "spec" { "Spec" } else { "Status" };
            format!("Go struct field {}.{f} of type {version}.{}{suffix}", kind.kind, kind.kind)
        }
    };
    let error = format!("json: cannot unmarshal {json_type} into {go_field}");
    match verb {
        "create" | "update" => {
            let prefix =
                format!("{0} in version \"{version}\" cannot be handled as a {0}: ", kind.kind);
            cell(400, "BadRequest", Words::Decoder { prefix, error })
        }
        _ => cell(422, "Invalid", Words::Patched(error)),
    }
}

fn meta_type(field: &str) -> &'static str {
    match field {
        "labels" | "annotations" => "map[string]string",
        "finalizers" => "[]string",
        _ => "[]v1.OwnerReference",
    }
}

/// Checks one answer against its cell; `what` names the cell.
fn check(answer: &RawResponse, cell: &Cell, current: bool, what: &str) {
    let status: Value = serde_json::from_str(&answer.body).unwrap_or_default();
    let is_status = status["kind"] == "Status";
    let reason = if is_status { status["reason"].as_str().unwrap_or_default() } else { "" };
    let message = status["message"].as_str().unwrap_or_default();
    assert_eq!((answer.status, reason), (cell.code, cell.reason), "{what}: {}", answer.body);
    match &cell.words {
        Words::None => {}
        Words::Exact(words) => assert_eq!(message, words, "{what}"),
        Words::Decoder { prefix, error } if current => {
            assert_eq!(message, format!("{prefix}{error}"), "{what}")
        }
        Words::Decoder { prefix, .. } => assert!(message.starts_with(prefix), "{what}: {message}"),
        Words::Patched(error) => {
            assert!(
                message.starts_with(" \"\" is invalid: patch: Invalid value: \"{"),
                "{what}: {message}"
            );
            if current {
                assert!(message.ends_with(&format!("\": {error}")), "{what}: {message}");
            }
        }
        Words::Versioned { current: words, .. } if current => assert_eq!(message, words, "{what}"),
        Words::Versioned { v1_20, .. } => assert_eq!(message, v1_20, "{what}"),
    }
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

async fn misshapen_fields_are_answered_as_kube_apiserver_answers_every_write_verb(t: &Target) {
    let crd = serde_json::to_vec(&gadget_crd()).unwrap();
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let created = t.raw_request(Method::POST, crds, &[JSON], crd).await;
    assert!(matches!(created.status, 201 | 409), "{}", created.body);
    let gadgets = format!("/apis/{GROUP}/v1/namespaces/{}/gadgets", t.ns);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while t.raw_get(&gadgets).await.status != 200 {
        assert!(tokio::time::Instant::now() < deadline, "the Gadget CRD was not served");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let web = json!({ "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "web" } },
        "template": { "metadata": { "labels": { "app": "web" } },
            "spec": { "containers": [{ "name": "web", "image": "nginx" }] } } } });
    let kinds = [
        Kind {
            kind: "Deployment",
            api_version: "apps/v1",
            collection: format!("/apis/apps/v1/namespaces/{}/deployments", t.ns),
            body: web,
            fields: &["spec", "status"],
        },
        Kind {
            kind: "ConfigMap",
            api_version: "v1",
            collection: format!("/api/v1/namespaces/{}/configmaps", t.ns),
            body: json!({ "data": { "a": "b" } }),
            fields: &["data"],
        },
        Kind {
            kind: "Secret",
            api_version: "v1",
            collection: format!("/api/v1/namespaces/{}/secrets", t.ns),
            body: json!({ "data": { "a": "Yg==" } }),
            fields: &["data"],
        },
        Kind {
            kind: "Gadget",
            api_version: "shapes.example.com/v1",
            collection: gadgets,
            body: json!({ "spec": { "a": 1 } }),
            fields: &["spec", "status"],
        },
    ];
    let current = t.version().at_least(21);
    let mut cells = 0;
    for kind in &kinds {
        let name = "base";
        let mut base = kind.body.clone();
        base["apiVersion"] = json!(kind.api_version);
        base["kind"] = json!(kind.kind);
        base["metadata"] = json!({ "name": name });
        let created = t
            .raw_request(
                Method::POST,
                &kind.collection,
                &[JSON],
                serde_json::to_vec(&base).unwrap(),
            )
            .await;
        assert_eq!(created.status, 201, "{}", created.body);
        let object = format!("{}/{name}", kind.collection);
        let metadata = ["metadata"].iter().chain(&METADATA);
        for field in metadata.chain(kind.fields) {
            for (shape, value) in wrong_values(field) {
                let live: Value = serde_json::from_str(&t.raw_get(&object).await.body).unwrap();
                let mut create = with(&base, field, &value);
                if *field != "metadata" {
                    create["metadata"]["name"] = json!("c");
                }
                let patch = with(&json!({}), field, &value);
                let pointer = match METADATA.contains(field) {
                    true => format!("/metadata/{field}"),
                    false => format!("/{field}"),
                };
                let json_patch = json!([{ "op": "add", "path": pointer, "value": value }]);
                let applied = with(
                    &json!({ "apiVersion": kind.api_version, "kind": kind.kind, "metadata": { "name": name } }),
                    field,
                    &value,
                );
                let writes: [(&str, Method, String, &str, Value); 6] = [
                    ("create", Method::POST, kind.collection.clone(), "application/json", create),
                    (
                        "update",
                        Method::PUT,
                        object.clone(),
                        "application/json",
                        with(&live, field, &value),
                    ),
                    (
                        "merge",
                        Method::PATCH,
                        object.clone(),
                        "application/merge-patch+json",
                        patch.clone(),
                    ),
                    (
                        "json",
                        Method::PATCH,
                        object.clone(),
                        "application/json-patch+json",
                        json_patch,
                    ),
                    (
                        "strategic",
                        Method::PATCH,
                        object.clone(),
                        "application/strategic-merge-patch+json",
                        patch,
                    ),
                    (
                        "apply",
                        Method::PATCH,
                        format!("{object}?fieldManager=shapes"),
                        "application/apply-patch+yaml",
                        applied,
                    ),
                ];
                for (verb, method, path, content_type, body) in writes {
                    let headers = [("Content-Type", content_type)];
                    let answer = t
                        .raw_request(method, &path, &headers, serde_json::to_vec(&body).unwrap())
                        .await;
                    let cell = expected(kind, field, shape, &value, verb, name);
                    let what = format!("{} {field} as a {shape}, {verb}", kind.kind);
                    check(&answer, &cell, current, &what);
                    cells += 1;
                    if answer.status == 201 {
                        let made = format!("{}/c", kind.collection);
                        let deleted = t.raw_request(Method::DELETE, &made, &[], Vec::new()).await;
                        assert_eq!(deleted.status, 200, "{}", deleted.body);
                    }
                }
            }
        }
        let read = t.raw_get(&object).await;
        assert_eq!(read.status, 200, "the server serves on: {}", read.body);
    }
    assert_eq!(cells, 492, "every cell of the table was written");
}
case!(Needs::Protocol, misshapen_fields_are_answered_as_kube_apiserver_answers_every_write_verb);

/// A `spec` or `status` written into a kind that has neither (a ConfigMap): no wrongly shaped
/// struct but an unknown field, as kube-apiserver v1.36.2 answers it: written with a
/// `Warning` under the default `fieldValidation`, refused under `Strict` (a create's 400).
/// The real server drops the field where the embedded one keeps a built-in kind's unknown
/// fields, so the stored copy is not asserted. v1.20.2 has no field validation: it warns
/// nothing and ignores `fieldValidation`.
async fn spec_of_a_kind_without_one_is_an_unknown_field(t: &Target) {
    let validated = t.version().at_least(25);
    let configmaps = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let warning = |answer: &RawResponse| {
        answer
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("warning"))
            .map(|(_, v)| v.clone())
    };
    let base = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "plain" },
        "data": { "a": "b" } });
    let created = t.raw_request(Method::POST, &configmaps, &[JSON], base.to_string().into()).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let object = format!("{configmaps}/plain");
    for field in ["spec", "status"] {
        let unknown = format!("unknown field \"{field}\"");
        let mut body = base.clone();
        body["metadata"]["name"] = json!(format!("with-{field}"));
        body[field] = json!("x");
        let answer =
            t.raw_request(Method::POST, &configmaps, &[JSON], body.to_string().into()).await;
        assert_eq!(answer.status, 201, "create with {field}: {}", answer.body);
        let expected = validated.then(|| format!("299 - {}", json!(unknown)));
        assert_eq!(warning(&answer), expected, "create with {field}");

        body["metadata"]["name"] = json!(format!("strict-{field}"));
        let strict = format!("{configmaps}?fieldValidation=Strict");
        let answer = t.raw_request(Method::POST, &strict, &[JSON], body.to_string().into()).await;
        let status: Value = serde_json::from_str(&answer.body).unwrap();
        match validated {
            true => {
                assert_eq!((answer.status, &status["reason"]), (400, &json!("BadRequest")));
                let words = format!(
                    "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: {unknown}"
                );
                assert_eq!(status["message"], json!(words), "strict create with {field}");
            }
            false => assert_eq!(answer.status, 201, "strict create with {field}: {}", answer.body),
        }

        let merge = [("Content-Type", "application/merge-patch+json")];
        let patch = json!({ field: "x" }).to_string();
        let answer = t.raw_request(Method::PATCH, &object, &merge, patch.into()).await;
        assert_eq!(answer.status, 200, "merge of {field}: {}", answer.body);
        let stored: Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(stored["data"], json!({ "a": "b" }), "merge of {field}");
        let expected = validated.then(|| format!("299 - {}", json!(unknown)));
        assert_eq!(warning(&answer), expected, "merge of {field}");
    }
}
case!(Needs::Protocol, spec_of_a_kind_without_one_is_an_unknown_field);
