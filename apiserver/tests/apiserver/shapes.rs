//! Bodies whose shape the server must take or refuse exactly as kube-apiserver v1.36.2 does
//! (each answer read off it): objects nested deeper than serde_json's default 128 levels (Go's
//! decoder takes 10,000), and a `spec` or `metadata` that is not an object, in a workload, a
//! ConfigMap and a workload's `Scale`. None of them may take the server down.

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, RawResponse, Target};
use http::Method;
use serde_json::json;

/// `{"a":{"a":…"leaf"…}}`, `levels` objects deep.
fn nested(levels: usize) -> String {
    format!("{}\"leaf\"{}", "{\"a\":".repeat(levels), "}".repeat(levels))
}

/// The deepest nesting of objects and arrays in `text` (no string in it holds a brace).
fn depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for byte in text.bytes() {
        match byte {
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// `(code, reason, message)` of an error answer.
fn refusal(answer: &RawResponse) -> (u16, String, String) {
    let status: serde_json::Value = serde_json::from_str(&answer.body)
        .unwrap_or_else(|e| panic!("a Status ({e}): {}", answer.body));
    (
        answer.status,
        status["reason"].as_str().unwrap_or_default().to_owned(),
        status["message"].as_str().unwrap_or_default().to_owned(),
    )
}

/// The levels of the deepest object written: near the embedded server's limit.
const LEVELS: usize = 500;

const JSON: (&str, &str) = ("Content-Type", "application/json");
const JSON_PATCH: (&str, &str) = ("Content-Type", "application/json-patch+json");
const MERGE_PATCH: (&str, &str) = ("Content-Type", "application/merge-patch+json");

async fn deep_objects_are_kept_and_ones_past_the_decoders_limit_refused(t: &Target) {
    // kube-apiserver 1.20 does not answer a JSON patch of 100 levels within its 34 s request
    // timeout (a 504, read off v1.20.2): objects that deep are for later servers.
    if !t.version().at_least(21) {
        return;
    }
    t.custom_resource(&crate::common::widget()).await;
    let widgets = format!("/apis/example.com/v1/namespaces/{}/widgets", t.ns);
    let create = |name: &str, spec: String| {
        format!(
            r#"{{"apiVersion":"example.com/v1","kind":"Widget","metadata":{{"name":"{name}"}},"spec":{spec}}}"#
        )
        .into_bytes()
    };
    let created = t.raw_request(Method::POST, &widgets, &[JSON], create("deep", "{}".into())).await;
    assert_eq!(created.status, 201, "{}", created.body);
    // Two JSON patches of 100 levels each: every request is shallow, the object they leave
    // is 200 levels deep.
    let deep = format!("{widgets}/deep");
    let add = |path: String, levels: usize| {
        format!(r#"[{{"op":"add","path":"{path}","value":{}}}]"#, nested(levels)).into_bytes()
    };
    let inner = format!("/spec/x{}", "/a".repeat(99));
    for path in ["/spec/x".to_owned(), inner.clone()] {
        let patched = t.raw_request(Method::PATCH, &deep, &[JSON_PATCH], add(path, 100)).await;
        assert_eq!(patched.status, 200, "{}", &patched.body[..patched.body.len().min(300)]);
    }
    let read = t.raw_get(&deep).await;
    assert_eq!(read.status, 200, "{}", &read.body[..read.body.len().min(300)]);
    assert!(depth(&read.body) > 200, "the object read back is {} deep", depth(&read.body));
    let listed = t.raw_get(&widgets).await;
    assert_eq!(listed.status, 200);
    assert!(depth(&listed.body) > 200);
    // What was read back is written back whole.
    let replaced = t.raw_request(Method::PUT, &deep, &[JSON], read.bytes.clone()).await;
    assert_eq!(replaced.status, 200, "{}", &replaced.body[..replaced.body.len().min(300)]);

    // 500 levels (near the embedded server's limit, 512: see its `shapes` module), read,
    // listed, written back and watched.
    let deepest = format!("{widgets}/deepest");
    let created =
        t.raw_request(Method::POST, &widgets, &[JSON], create("deepest", nested(LEVELS))).await;
    assert_eq!(created.status, 201, "{}", &created.body[..created.body.len().min(300)]);
    let read = t.raw_get(&deepest).await;
    assert!(depth(&read.body) > LEVELS, "read back: {}", &read.body[..read.body.len().min(300)]);
    // (The real server's `managedFields` of a create nest deeper than the object.)
    assert!(depth(&t.raw_get(&widgets).await.body) > LEVELS + 2, "listed: in `items`");
    let replaced = t.raw_request(Method::PUT, &deepest, &[JSON], read.bytes.clone()).await;
    assert_eq!(replaced.status, 200, "{}", &replaced.body[..replaced.body.len().min(300)]);
    let watched = t.raw_get(&format!("{widgets}?watch=true&timeoutSeconds=1")).await;
    assert_eq!(watched.status, 200);
    assert!(depth(&watched.body) > LEVELS + 1, "watched: in an event");

    // Past Go's 10,000 levels: a body is a 400, a patch that would store one a 422.
    let too_deep =
        t.raw_request(Method::POST, &widgets, &[JSON], create("too-deep", nested(10_001))).await;
    let (code, reason, message) = refusal(&too_deep);
    assert_eq!((code, reason.as_str()), (400, "BadRequest"), "{message}");
    assert!(
        message.starts_with("the object provided is unrecognized (must be of type Widget): ")
            && message.contains("exceeded max depth"),
        "{message}"
    );
    let deeper =
        t.raw_request(Method::PATCH, &deep, &[JSON_PATCH], add(format!("{inner}/a"), 9950)).await;
    assert_eq!(
        refusal(&deeper),
        (
            422,
            "Invalid".into(),
            "the server rejected our request due to an error in our request".into()
        )
    );
    assert_eq!(t.raw_get(&deep).await.status, 200, "the server serves on");
}
case!(Needs::Protocol, deep_objects_are_kept_and_ones_past_the_decoders_limit_refused);

async fn a_spec_or_metadata_that_is_not_an_object_is_refused_in_objects_and_scales(t: &Target) {
    let deployments = format!("/apis/apps/v1/namespaces/{}/deployments", t.ns);
    let body = |value: serde_json::Value| serde_json::to_vec(&value).unwrap();
    // kube-apiserver 1.20 decodes with json-iterator, whose words differ after the prefix.
    let words = t.version().at_least(21);
    let cannot = |kind: &str, field: &str, go_type: &str| match words {
        true => format!(
            "json: cannot unmarshal string into Go struct field {kind}.{field} of type {go_type}"
        ),
        false => String::new(),
    };
    let handled = |kind: &str, field: &str, go_type: &str| {
        format!(
            "{kind} in version \"v1\" cannot be handled as a {kind}: {}",
            cannot(kind, field, go_type)
        )
    };
    // The error and, from 1.21, its exact words.
    let refused = |answer: &RawResponse, expected: (u16, &str, String)| {
        let (code, reason, message) = refusal(answer);
        assert_eq!((code, reason.as_str()), (expected.0, expected.1), "{message}");
        match words {
            true => assert_eq!(message, expected.2),
            false => assert!(message.starts_with(&expected.2), "{message}"),
        }
    };
    let created = t
        .raw_request(
            Method::POST,
            &deployments,
            &[JSON],
            body(json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "bad" }, "spec": "x" })),
        )
        .await;
    refused(&created, (400, "BadRequest", handled("Deployment", "spec", "v1.DeploymentSpec")));
    let configmaps = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let created = t
        .raw_request(
            Method::POST,
            &configmaps,
            &[JSON],
            body(json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": "x" })),
        )
        .await;
    refused(&created, (400, "BadRequest", handled("ConfigMap", "metadata", "v1.ObjectMeta")));

    let web = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "web" },
        "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "web" } },
            "template": { "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "nginx" }] } } },
    });
    let created = t.raw_request(Method::POST, &deployments, &[JSON], body(web)).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let scale = format!("{deployments}/web/scale");
    let put = t
        .raw_request(
            Method::PUT,
            &scale,
            &[JSON],
            body(json!({ "apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": { "name": "web" }, "spec": "x" })),
        )
        .await;
    refused(&put, (400, "BadRequest", handled("Scale", "spec", "v1.ScaleSpec")));
    // A patch whose result does not decode: a 422 quoting the patched object.
    let invalid_patch = |answer: &RawResponse, kind: &str, go_type: &str| {
        let (code, reason, message) = refusal(answer);
        assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
        assert!(message.starts_with(" \"\" is invalid: patch: Invalid value: \"{"), "{message}");
        if words {
            assert!(
                message.ends_with(&format!("\": {}", cannot(kind, "spec", go_type))),
                "{message}"
            );
        }
    };
    let merged =
        t.raw_request(Method::PATCH, &scale, &[MERGE_PATCH], body(json!({ "spec": "x" }))).await;
    invalid_patch(&merged, "Scale", "v1.ScaleSpec");
    let replaced = t
        .raw_request(
            Method::PATCH,
            &format!("{deployments}/web"),
            &[JSON_PATCH],
            body(json!([{ "op": "replace", "path": "/spec", "value": "x" }])),
        )
        .await;
    invalid_patch(&replaced, "Deployment", "v1.DeploymentSpec");
    let read = t.raw_get(&scale).await;
    assert_eq!(read.status, 200);
    let read: serde_json::Value = serde_json::from_str(&read.body).unwrap();
    assert_eq!(read["spec"]["replicas"], 1, "nothing was scaled");
}
case!(Needs::Protocol, a_spec_or_metadata_that_is_not_an_object_is_refused_in_objects_and_scales);
