//! The embedded API server's own surface under random requests: paths, queries, headers and
//! bodies drawn at random, sent as raw HTTP. Whatever comes in, it answers with a status below
//! 500 (a `metav1.Status` for the errors), never drops a connection without one, and stays up.

use std::time::Duration;

use ctrlkit_apiserver::ApiServer;
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, Clone)]
struct Request {
    method: &'static str,
    path: String,
    query: Vec<(&'static str, &'static str)>,
    content_type: &'static str,
    accept: &'static str,
    body: Vec<u8>,
}

/// A path: mostly one of the served resources (its group/version, its namespace when it has
/// one, a name, a subresource, each there or not), sometimes mixed up, sometimes anything.
fn path() -> impl Strategy<Value = String> {
    let served = prop::sample::select(vec![
        ("/api/v1", "pods", true),
        ("/api/v1", "configmaps", true),
        ("/api/v1", "secrets", true),
        ("/api/v1", "services", true),
        ("/api/v1", "serviceaccounts", true),
        ("/api/v1", "events", true),
        ("/api/v1", "namespaces", false),
        ("/apis/apps/v1", "deployments", true),
        ("/apis/apps/v1", "replicasets", true),
        ("/apis/apps/v1", "statefulsets", true),
        ("/apis/apps/v1", "daemonsets", true),
        ("/apis/batch/v1", "jobs", true),
        ("/apis/coordination.k8s.io/v1", "leases", true),
        ("/apis/events.k8s.io/v1", "events", true),
        ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", false),
    ]);
    let namespace = prop::sample::select(vec!["default", "default", "kube-system", "Bad_NS"]);
    let name = prop::option::of(prop::sample::select(vec!["web-0", "a", "Bad_Name", "-x"]));
    let sub = prop::option::of(prop::sample::select(vec!["status", "scale", "finalize", "x"]));
    let resource = (served, namespace, name, sub, any::<bool>()).prop_map(
        |((prefix, plural, namespaced), ns, name, sub, across)| {
            let mut path = prefix.to_owned();
            // A namespaced kind is also listed and watched across namespaces.
            if namespaced && !(across && name.is_none()) {
                path.push_str(&format!("/namespaces/{ns}"));
            }
            path.push_str(&format!("/{plural}"));
            if let Some(name) = name {
                path.push_str(&format!("/{name}"));
                if let Some(sub) = sub {
                    path.push_str(&format!("/{sub}"));
                }
            }
            path
        },
    );
    let mixed = (
        prop::sample::select(vec!["/api/v1", "/apis/apps/v1", "/api/v2", "/apis", "/api", ""]),
        prop::sample::select(vec!["pods", "deployments", "nothing", "namespaces/default"]),
    )
        .prop_map(|(prefix, rest)| format!("{prefix}/{rest}"));
    let anything = prop::collection::vec("[a-zA-Z0-9._~%-]{0,12}", 0..7)
        .prop_map(|segments| format!("/{}", segments.join("/")));
    prop_oneof![16 => resource, 2 => mixed, 1 => anything]
}

/// Query parameters, each with values that matter to it (valid, edge and wrong ones).
fn query() -> impl Strategy<Value = Vec<(&'static str, &'static str)>> {
    const RV: &[&str] = &["", "0", "1", "abc", "-1", "99999999999999999999999"];
    const BOOL: &[&str] = &["true", "false", "1", "yes", ""];
    let table: Vec<(&'static str, &'static [&'static str])> = vec![
        ("watch", BOOL),
        ("resourceVersion", RV),
        ("resourceVersionMatch", &["Exact", "NotOlderThan", "Bogus", ""]),
        ("limit", &["1", "0", "-1", "abc", "99999999999999999999999"]),
        (
            "continue",
            &["", "abc", "%ZZ", "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiJhXHUwMDAwIn0"],
        ),
        ("labelSelector", &["app=web", "app!=web,tier", "app in (a,b)", "in (", "=", "a==b"]),
        (
            "fieldSelector",
            &["metadata.name=web-0", "spec.nodeName", "status.phase!=Running", "x=y"],
        ),
        ("fieldManager", &["me", "", "other"]),
        ("force", BOOL),
        ("dryRun", &["All", "None", ""]),
        ("includeObject", &["None", "Metadata", "Object", "Bogus"]),
        ("sendInitialEvents", BOOL),
        ("allowWatchBookmarks", BOOL),
        ("propagationPolicy", &["Foreground", "Orphan", "Bogus"]),
        ("unknown", &["x"]),
    ];
    let pair = prop::sample::select(table)
        .prop_flat_map(|(key, values)| (Just(key), prop::sample::select(values.to_vec())));
    prop::collection::vec(pair, 0..5)
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    let objects = prop::sample::select(vec![
        r#"{"metadata":{"name":"web-0"}}"#,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}"#,
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"x"}]}}"#,
        r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a"},"spec":{"replicas":2,"selector":{"matchLabels":{"a":"b"}}}}"#,
        r#"[{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]"#,
        r#"[{"op":"remove","path":"/nothing"}]"#,
        r#"{"spec":{"replicas":-3}}"#,
        r#"{"metadata":{"managedFields":[{"manager":"x","fieldsV1":{"x":{},"f:a":"b"}}]}}"#,
        r#"{"kind":"DeleteOptions","preconditions":{"uid":"nope"}}"#,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n",
        "{", "null", "[]", "\"text\"", "", "k8s\u{0}\u{1}\u{2}",
    ])
    .prop_map(|s| s.as_bytes().to_vec());
    prop_oneof![4 => objects, 1 => prop::collection::vec(any::<u8>(), 0..64)]
}

fn request() -> impl Strategy<Value = Request> {
    let method = prop::sample::select(vec![
        "GET", "GET", "GET", "POST", "PUT", "PATCH", "PATCH", "DELETE", "OPTIONS",
    ]);
    let content_type = prop::sample::select(vec![
        "application/json",
        "application/merge-patch+json",
        "application/json-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
        "application/vnd.kubernetes.protobuf",
        "text/plain",
        "",
    ]);
    let accept = prop::sample::select(vec![
        "application/json",
        "application/json;as=Table;v=v1;g=meta.k8s.io",
        "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
        "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
        "application/yaml",
        "*/*",
        "",
    ]);
    (method, path(), query(), content_type, accept, body()).prop_map(
        |(method, path, query, content_type, accept, body)| Request {
            method,
            path,
            query,
            content_type,
            accept,
            body,
        },
    )
}

/// Sends `request` as HTTP/1.0 and returns the status, or why there was none. A watch that
/// streams until its timeout counts as answered once its status line came.
async fn send(server: &ApiServer, request: &Request) -> Result<u16, String> {
    let mut stream =
        tokio::net::TcpStream::connect(server.addr()).await.map_err(|e| e.to_string())?;
    let query: Vec<String> = request.query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let target = if query.is_empty() {
        request.path.clone()
    } else {
        format!("{}?{}", request.path, query.join("&"))
    };
    let mut head = format!("{} {target} HTTP/1.0\r\nHost: test\r\n", request.method);
    if !request.content_type.is_empty() {
        head.push_str(&format!("Content-Type: {}\r\n", request.content_type));
    }
    if !request.accept.is_empty() {
        head.push_str(&format!("Accept: {}\r\n", request.accept));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", request.body.len()));
    stream.write_all(head.as_bytes()).await.map_err(|e| e.to_string())?;
    stream.write_all(&request.body).await.map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await;
        match read {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => response.extend_from_slice(&buf[..n]),
            Ok(Err(e)) => return Err(format!("reading: {e}")),
            Err(_) => break, // a watch still streaming
        }
        if response.len() > 1 << 20 {
            break;
        }
    }
    let text = String::from_utf8_lossy(&response);
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    status.ok_or_else(|| {
        format!("no status line in {:?}", text.chars().take(200).collect::<String>())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]
    #[test]
    fn random_requests_get_an_answer_below_500_and_the_server_stays_up(
        requests in prop::collection::vec(request(), 1..6)
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let server = ApiServer::start().await.unwrap();
            for request in &requests {
                // Watches end within a second, so that a case never waits long.
                let mut request = request.clone();
                request.query.push(("timeoutSeconds", "1"));
                let status = send(&server, &request).await;
                prop_assert!(
                    status.as_ref().is_ok_and(|s| *s < 500),
                    "{request:?} got {status:?}"
                );
            }
            let health = Request {
                method: "GET",
                path: "/healthz".into(),
                query: Vec::new(),
                content_type: "",
                accept: "",
                body: Vec::new(),
            };
            prop_assert_eq!(send(&server, &health).await, Ok(200));
            Ok(())
        })?;
    }
}
