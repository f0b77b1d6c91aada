//! Bad input from the server, each ending in a clear, logged error and recovery: never a
//! crash, never a silently wrong cache. The answers come from a scripted server
//! (`support::scripted`), since no well-behaved API server gives them.

// One case here checks metrics, and runs only with them; without, its helpers go unused.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_imports))]

use std::time::Duration;

use ctrlkit::cache::{HasSynced, Informer, InformerError, ListWatch, wait_for_cache_sync};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::{Api, Client};
use serde_json::json;

use super::common::*;
use crate::support::scripted::{Asked, Reply, Scripted, configmap, event, list};

/// How long an informer waits for a streaming list's initial-events-end bookmark before it
/// lists instead (its docs' figure).
const INITIAL_EVENTS_END_WAIT: Duration = Duration::from_secs(60);

/// An informer on the list + watch path (streaming lists off): the scripts answer lists and
/// watches. The streaming-list cases build their own.
fn informer(client: Client) -> Informer<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    Informer::builder(ListWatch::new(api)).backoff(fast_backoff()).streaming_list(false).build()
}

/// The names in the informer's store, sorted.
fn names(informer: &Informer<ConfigMap>) -> Vec<String> {
    let mut names: Vec<String> =
        informer.indexer().list().iter().filter_map(|cm| cm.metadata.name.clone()).collect();
    names.sort();
    names
}

/// A watch that sends nothing and stays open, for cases about the list alone.
fn quiet_watch() -> Reply {
    Reply::Stream { lines: Vec::new(), stall: true }
}

#[tokio::test]
async fn malformed_json_in_a_list_page_is_a_logged_failure_and_the_list_is_retried() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = Scripted::start(|asked| match (asked.watch, asked.nth) {
        (false, 0) => Reply::json(r#"{"kind":"ConfigMapList","items":[{"metadata":{"name":"#),
        (false, _) => Reply::json(list(10, &[configmap("a", 5)])),
        (true, _) => quiet_watch(),
    })
    .await;
    let inf = informer(server.client());
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    assert_eq!(names(&inf), ["a"]);
    assert_eq!(server.count(false), 2, "the broken page, then one that decodes");
    let text = logs.text();
    assert!(text.contains("list failed") && text.contains("EOF while parsing"), "{text}");
}

/// A line that is not JSON, and an event of a type no server sends.
#[tokio::test]
async fn a_watch_line_that_cannot_be_read_fails_the_watch_which_resumes_without_a_relist() {
    let unknown = event("TELEPORTED", configmap("z", 11));
    for (line, said) in
        [("{this is not json".to_owned(), "not JSON"), (unknown, "unknown type \"TELEPORTED\"")]
    {
        let logs = CapturedLogs::default();
        let _capture = logs.capture();
        let server = Scripted::start(move |asked| match (asked.watch, asked.nth) {
            (false, _) => Reply::json(list(10, &[configmap("a", 5)])),
            (true, 0) => Reply::events(std::slice::from_ref(&line)),
            (true, 1) => Reply::events(&[event("ADDED", configmap("b", 11))]),
            (true, _) => quiet_watch(),
        })
        .await;
        let inf = informer(server.client());
        let _running = start(&inf);
        eventually("b arrives on the second watch, and no z", || names(&inf) == ["a", "b"]).await;
        assert_eq!(server.count(false), 1, "no relist");
        let second = &server.asked().into_iter().filter(|a| a.watch).nth(1).unwrap().line;
        assert!(second.contains("resourceVersion=10"), "resumed from the list's version: {second}");
        let text = logs.text();
        assert!(text.contains("watch failed") && text.contains(said), "{said}: {text}");
    }
}

#[tokio::test]
async fn an_object_of_another_kind_is_refused_not_cached() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let pod = json!({ "kind": "Pod", "apiVersion": "v1", "metadata": { "name": "p", "namespace": "default", "resourceVersion": "6" } });
    let server = Scripted::start(move |asked| match (asked.watch, asked.nth) {
        (false, 0) => Reply::json(list(10, &[configmap("a", 5), pod.clone()])),
        (false, _) => Reply::json(list(10, &[configmap("a", 5)])),
        (true, 0) => Reply::events(&[event("ADDED", pod.clone())]),
        (true, 1) => Reply::events(&[event("ADDED", configmap("b", 11))]),
        (true, _) => quiet_watch(),
    })
    .await;
    let inf = informer(server.client());
    let _running = start(&inf);
    eventually("a, then b; never the pod", || names(&inf) == ["a", "b"]).await;
    let text = logs.text();
    assert!(text.contains("list failed") && text.contains("Pod"), "{text}");
    assert!(text.contains("watch failed"), "{text}");
}

#[tokio::test]
async fn objects_without_a_name_are_skipped_with_a_warning() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let nameless = json!({ "kind": "ConfigMap", "apiVersion": "v1", "metadata": { "namespace": "default", "resourceVersion": "6" } });
    let server = Scripted::start(move |asked| match (asked.watch, asked.nth) {
        (false, _) => Reply::json(list(10, &[configmap("a", 5), nameless.clone()])),
        (true, 0) => {
            Reply::events(&[event("ADDED", nameless.clone()), event("ADDED", configmap("b", 11))])
        }
        (true, _) => quiet_watch(),
    })
    .await;
    let inf = informer(server.client());
    let _running = start(&inf);
    eventually("a and b", || names(&inf) == ["a", "b"]).await;
    assert_eq!(inf.indexer().len(), 2);
    let text = logs.text();
    assert!(text.contains("without a name"), "{text}");
}

#[tokio::test]
async fn a_ten_megabyte_object_is_listed_and_watched() {
    let big = |name: &str, rv: u64| {
        let mut cm = configmap(name, rv);
        cm["data"] = json!({ "blob": "x".repeat(10 << 20) });
        cm
    };
    let (listed, watched) = (big("big", 5), big("bigger", 11));
    let server = Scripted::start(move |asked| match (asked.watch, asked.nth) {
        (false, _) => Reply::json(list(10, std::slice::from_ref(&listed))),
        (true, 0) => Reply::events(&[event("ADDED", watched.clone())]),
        (true, _) => quiet_watch(),
    })
    .await;
    let inf = informer(server.client());
    let _running = start(&inf);
    eventually("both", || names(&inf) == ["big", "bigger"]).await;
    let stored = inf.indexer().get_by_key("default/bigger").unwrap();
    assert_eq!(stored.data.as_ref().unwrap()["blob"].len(), 10 << 20);
}

#[tokio::test]
async fn an_error_event_other_than_410_relists() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = Scripted::start(|asked| match (asked.watch, asked.nth) {
        (false, 0) => Reply::json(list(10, &[configmap("a", 5)])),
        (false, _) => Reply::json(list(12, &[configmap("b", 12)])),
        (true, 0) => {
            let status = json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500, "reason": "InternalError", "message": "etcd is sad" });
            Reply::events(&[event("ERROR", status)])
        }
        (true, _) => quiet_watch(),
    })
    .await;
    let inf = informer(server.client());
    let _running = start(&inf);
    eventually("the relist's content", || names(&inf) == ["b"]).await;
    assert_eq!(server.count(false), 2);
    let text = logs.text();
    assert!(text.contains("etcd is sad") && text.contains("500"), "{text}");
}

#[tokio::test]
async fn unauthorized_and_forbidden_are_retried_with_backoff_not_in_a_hot_loop() {
    for (code, reason) in [(401, "Unauthorized"), (403, "Forbidden")] {
        let logs = CapturedLogs::default();
        let _capture = logs.capture();
        let server = Scripted::start(move |asked| match asked.watch {
            false => Reply::status(
                code,
                reason,
                "configmaps is forbidden: User \"system:anonymous\" cannot list resource \"configmaps\" in the namespace \"default\"",
            ),
            true => quiet_watch(),
        })
        .await;
        let inf = informer(server.client());
        let _running = start(&inf);
        tokio::time::sleep(Duration::from_secs(1)).await;
        // 20 ms doubling to 100 ms allows about a dozen in a second; a loop, thousands.
        let lists = server.count(false);
        assert!((2..=20).contains(&lists), "{code}: {lists} lists in a second");
        assert!(!inf.has_synced());
        let text = logs.text();
        assert!(
            text.contains("list failed")
                && text.contains(&code.to_string())
                && text.contains("configmaps"),
            "the log names the verb, the code and the resource: {text}"
        );
    }
}

#[tokio::test]
async fn a_server_down_at_start_is_listed_once_it_comes_up() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let addr = crate::support::http::free_address();
    let client = {
        let config = kube_client::Config::new(format!("http://{addr}").parse().unwrap());
        Client::try_from(config).unwrap()
    };
    let inf = informer(client);
    let _running = start(&inf);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!inf.has_synced());
    let server = Scripted::start_on(addr, |asked| match asked.watch {
        false => Reply::json(list(10, &[configmap("a", 5)])),
        true => quiet_watch(),
    })
    .await;
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    assert_eq!(names(&inf), ["a"]);
    assert_eq!(server.count(false), 1);
    assert!(logs.text().contains("list failed"), "{}", logs.text());
}

#[tokio::test]
async fn an_html_answer_is_a_clear_list_error() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = Scripted::start(|asked| match (asked.watch, asked.nth) {
        (false, 0) => Reply::Body {
            status: 200,
            content_type: "text/html",
            body: "<html><body><h1>Welcome to nginx!</h1></body></html>".into(),
        },
        (false, _) => Reply::json(list(10, &[configmap("a", 5)])),
        (true, _) => quiet_watch(),
    })
    .await;
    let inf = informer(server.client());
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    let text = logs.text();
    assert!(text.contains("not JSON") && text.contains("Welcome to nginx"), "{text}");
}

/// On a paused clock: the server keeps the stream open and sends nothing after its timeout.
#[tokio::test(start_paused = true)]
async fn a_stalled_watch_is_abandoned_after_its_timeout_and_resumed() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = Scripted::start(|asked| match (asked.watch, asked.nth) {
        (false, _) => Reply::json(list(10, &[configmap("a", 5)])),
        (true, 0) => Reply::Stream { lines: vec![event("ADDED", configmap("b", 11))], stall: true },
        (true, 1) => Reply::events(&[event("ADDED", configmap("c", 12))]),
        (true, _) => quiet_watch(),
    })
    .await;
    let inf = informer(server.client());
    let _running = start(&inf);
    let started = tokio::time::Instant::now();
    eventually_within(Duration::from_secs(3600), "c, from the second watch", || {
        names(&inf) == ["a", "b", "c"]
    })
    .await;
    let waited = started.elapsed();
    // The watch asked the server to end it within 5 to 10 minutes; 30 s later it is given up.
    assert!(waited >= Duration::from_secs(300) && waited <= Duration::from_secs(700), "{waited:?}");
    let second = &server.asked().into_iter().filter(|a| a.watch).nth(1).unwrap().line;
    assert!(second.contains("resourceVersion=11"), "resumed after b: {second}");
    assert!(logs.text().contains("stalled"), "{}", logs.text());
}

/// A streaming-list request, as the informer sends it.
fn streaming(asked: &Asked) -> bool {
    asked.watch && asked.line.contains("sendInitialEvents=true")
}

/// A watch that sends a 410 `ERROR` event and ends.
fn expired() -> Reply {
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": "Expired", "code": 410, "message": "too old resource version"});
    Reply::events(&[event("ERROR", status)])
}

/// An informer with its defaults: streaming lists on.
fn default_informer(client: Client) -> Informer<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    Informer::builder(ListWatch::new(api)).backoff(fast_backoff()).build()
}

/// How many of `asked` are streaming lists, lists and plain watches.
fn requests(server: &Scripted) -> (usize, usize, usize) {
    let asked = server.asked();
    let streaming_lists = asked.iter().filter(|a| streaming(a)).count();
    let lists = asked.iter().filter(|a| !a.watch).count();
    (streaming_lists, lists, asked.len() - streaming_lists - lists)
}

/// A server that accepts `sendInitialEvents`, sends the initial events and ends the stream
/// without the initial-events-end bookmark (as some aggregated API servers do): the informer
/// warns once, lists instead and syncs; a 410 later makes it try streaming again, which fails
/// the same way, and it lists again, without a second warning.
#[tokio::test]
async fn a_server_that_accepts_streaming_lists_but_never_bookmarks_is_listed_instead() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let plain_watches = std::sync::atomic::AtomicUsize::new(0);
    let server = Scripted::start(move |asked| {
        if streaming(asked) {
            return Reply::events(&[event("ADDED", configmap("a", 5))]);
        }
        if !asked.watch {
            return Reply::json(list(10, &[configmap("a", 5), configmap("b", 6)]));
        }
        match plain_watches.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => expired(),
            _ => quiet_watch(),
        }
    })
    .await;
    let inf = default_informer(server.client());
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    assert_eq!(names(&inf), ["a", "b"], "synced from the list, not the cut stream");
    eventually("the 410, a second streaming list, a second list and a quiet watch", || {
        requests(&server) == (2, 2, 2)
    })
    .await;
    let text = logs.text();
    let warnings = text.matches("does not support streaming lists").count();
    assert_eq!(warnings, 1, "one warning for the informer: {text}");
    assert!(text.contains("without the initial-events-end bookmark"), "{text}");
    assert!(text.contains("/api/v1/namespaces/default/configmaps"), "names the resource: {text}");
}

/// On a paused clock: a streaming list that stays open and silent after its initial events,
/// without the bookmark, counts as unsupported after a minute; the informer lists.
#[tokio::test(start_paused = true)]
async fn a_streaming_list_that_stalls_before_its_bookmark_falls_back_to_a_list_after_a_minute() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = Scripted::start(|asked| {
        if streaming(asked) {
            Reply::Stream { lines: vec![event("ADDED", configmap("a", 5))], stall: true }
        } else if asked.watch {
            quiet_watch()
        } else {
            Reply::json(list(10, &[configmap("a", 5), configmap("b", 6)]))
        }
    })
    .await;
    let inf = default_informer(server.client());
    let _running = start(&inf);
    let started = tokio::time::Instant::now();
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    let waited = started.elapsed();
    assert!(
        waited >= INITIAL_EVENTS_END_WAIT
            && waited < INITIAL_EVENTS_END_WAIT + Duration::from_secs(5),
        "{waited:?}"
    );
    assert_eq!(names(&inf), ["a", "b"]);
    assert_eq!(requests(&server).0, 1, "streaming is not tried again without a 410");
    assert!(logs.text().contains("no initial-events-end bookmark"), "{}", logs.text());
}

/// A server that refuses streaming lists (422, as Kubernetes 1.20 answers) is listed, and
/// only a 410 brings another try.
#[tokio::test]
async fn a_refused_streaming_list_is_listed_and_tried_again_only_after_a_410() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let plain_watches = std::sync::atomic::AtomicUsize::new(0);
    let server = Scripted::start(move |asked| {
        if streaming(asked) {
            return Reply::status(422, "Invalid", "resourceVersionMatch is forbidden for watch");
        }
        if !asked.watch {
            return Reply::json(list(10, &[configmap("a", 5)]));
        }
        // The first watch closes at once (a resume, not a relist), the second gets 410.
        match plain_watches.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => Reply::events(&[event("ADDED", configmap("b", 11))]),
            1 => expired(),
            _ => quiet_watch(),
        }
    })
    .await;
    let inf = default_informer(server.client());
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    eventually("resume, 410, one more streaming try, a list and a quiet watch", || {
        requests(&server) == (2, 2, 3)
    })
    .await;
    let asked = server.asked();
    let order: Vec<&str> = asked
        .iter()
        .map(|a| {
            if streaming(a) {
                "stream"
            } else if a.watch {
                "watch"
            } else {
                "list"
            }
        })
        .collect();
    assert_eq!(order, ["stream", "list", "watch", "watch", "stream", "list", "watch"]);
    assert_eq!(logs.text().matches("does not support streaming lists").count(), 1);
}

/// An `ERROR` event reaches the watch error handler with its `Status` whole; the informer
/// goes on (relisting: an error event leaves no version to resume from), and a handler that
/// panics does not stop it.
#[tokio::test]
async fn an_error_event_reaches_the_watch_error_handler_with_its_status() {
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
        "reason": "InternalError", "message": "etcd is unreachable",
    });
    let error = event("ERROR", status);
    let server = Scripted::start(move |asked| match (asked.watch, asked.nth) {
        (false, 0) => Reply::json(list(10, &[configmap("a", 5)])),
        (false, _) => Reply::json(list(12, &[configmap("a", 5), configmap("b", 11)])),
        (true, 0) => Reply::events(std::slice::from_ref(&error)),
        (true, _) => quiet_watch(),
    })
    .await;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let record = seen.clone();
    let inf = Informer::builder(ListWatch::new(api))
        .backoff(fast_backoff())
        .streaming_list(false)
        .watch_error_handler(move |err| {
            record.lock().unwrap().push(match err {
                InformerError::Event(status) => {
                    (status.code, status.reason.clone(), status.message.clone())
                }
                other => (0, String::new(), other.to_string()),
            });
            panic!("a handler that panics");
        })
        .build();
    let _running = start(&inf);
    eventually("the relist after the error event", || names(&inf) == ["a", "b"]).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, [(500, "InternalError".to_owned(), "etcd is unreachable".to_owned())]);
}

/// A server whose every watch answers 410 is listed again after client-go's backoff (800 ms,
/// doubling), not in a loop. On the real clock: the defect is a loop that never waits.
#[tokio::test]
async fn a_watch_that_always_expires_is_relisted_after_a_backoff() {
    let server = Scripted::start(|asked| match asked.watch {
        false => Reply::json(list(10, &[configmap("a", 5)])),
        true => expired(),
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let inf = Informer::builder(ListWatch::new(api)).streaming_list(false).build();
    let _running = start(&inf);
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Lists at 0, then after 0.8–1.6 s, then 1.6–3.2 s more: three at most in 3 s.
    let lists = server.count(false);
    assert!((2..=3).contains(&lists), "{lists} lists in 3 s");
}
