//! An informer reading protobuf from a server newer than its messages: an object holding a
//! field number the vendored v1.36.2 messages lack is never cached without it; the informer
//! switches to JSON, relists, says so once and counts it. Lists, watches and streaming lists
//! alike. The newer server is scripted (`support::scripted`): it answers protobuf to a
//! request that asks for it first, and JSON otherwise.

// One check here reads metrics, and runs only with them.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_imports))]

use std::sync::Arc;

use ctrlkit::cache::{Informer, ListWatch, WireFormat, wait_for_cache_sync};
use ctrlkit_protobuf::transcode::from_json;
use ctrlkit_protobuf::watch::event_frame;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::Api;
use serde_json::{Value, json};

use super::common::*;
use crate::support::scripted::{Reply, Scripted, event, list};

/// A ConfigMap in `default` at `rv`, its data saying which encoding it was read from.
fn configmap(name: &str, rv: u64, from: &str) -> Value {
    json!({
        "kind": "ConfigMap", "apiVersion": "v1",
        "metadata": { "name": name, "namespace": "default", "resourceVersion": rv.to_string() },
        "data": { "read": from },
    })
}

fn varint(mut n: u64, into: &mut Vec<u8>) {
    while n >= 0x80 {
        into.push((n as u8) | 0x80);
        n >>= 7;
    }
    into.push(n as u8);
}

/// A length-delimited field.
fn field(number: u64, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    varint(number << 3 | 2, &mut out);
    varint(bytes.len() as u64, &mut out);
    out.extend_from_slice(bytes);
    out
}

/// `k8s\0` and a `runtime.Unknown` holding `raw` as `kind`.
fn envelope(kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut type_meta = field(1, b"v1");
    type_meta.extend(field(2, kind.as_bytes()));
    let mut body = b"k8s\0".to_vec();
    body.extend(field(1, &type_meta));
    body.extend(field(2, raw));
    body
}

/// A ConfigMap's message, with field 99 (which no vendored message has) when `newer`.
fn message(object: &Value, newer: bool) -> Vec<u8> {
    let body = from_json(object).unwrap();
    let mut raw = ctrlkit_protobuf::envelope(&body).unwrap().raw.to_vec();
    if newer {
        varint(99 << 3, &mut raw);
        varint(1, &mut raw);
    }
    raw
}

/// A protobuf ConfigMapList at `rv`; each item with field 99 when its flag says.
fn protobuf_list(rv: u64, items: &[(Value, bool)]) -> Vec<u8> {
    let mut raw = field(1, &field(2, rv.to_string().as_bytes()));
    for (item, newer) in items {
        raw.extend(field(2, &message(item, *newer)));
    }
    envelope("ConfigMapList", &raw)
}

/// A protobuf watch frame of `object`, with field 99 when `newer`.
fn frame(event_type: &str, object: &Value, newer: bool) -> Vec<u8> {
    event_frame(event_type, &envelope("ConfigMap", &message(object, newer)))
}

fn informer(server: &Scripted, streaming: bool) -> ctrlkit::cache::InformerBuilder<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    Informer::builder(ListWatch::new(api))
        .backoff(fast_backoff())
        .streaming_list(streaming)
        .wire_format(WireFormat::Protobuf)
}

/// Each cached ConfigMap as `name:encoding it was read from`, sorted.
fn cached(informer: &Informer<ConfigMap>) -> Vec<String> {
    let mut cached: Vec<String> = informer
        .indexer()
        .list()
        .iter()
        .map(|cm| {
            let read = cm.data.as_ref().and_then(|d| d.get("read")).cloned().unwrap_or_default();
            format!("{}:{read}", cm.metadata.name.clone().unwrap_or_default())
        })
        .collect();
    cached.sort();
    cached
}

/// Every request's encoding, in order: `list protobuf`, `watch json`.
fn asked(server: &Scripted) -> Vec<String> {
    let asked = server.asked();
    asked
        .iter()
        .map(|a| {
            let verb = if a.watch { "watch" } else { "list" };
            format!("{verb} {}", if a.protobuf() { "protobuf" } else { "json" })
        })
        .collect()
}

/// The warning, once, naming the message and the field number.
fn assert_warned_once(logs: &CapturedLogs) {
    let text = logs.text();
    let warning = "k8s.io.api.core.v1.ConfigMap has no field number 99";
    assert_eq!(text.matches(warning).count(), 1, "{text}");
    assert!(text.contains("reading JSON from now on"), "{text}");
}

/// A list page holding an object with a field the messages lack: nothing of the page is
/// cached; the informer lists again in JSON and goes on in JSON.
#[tokio::test]
async fn a_protobuf_list_with_an_unknown_field_is_listed_again_in_json() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = Scripted::start(|asked| match (asked.watch, asked.protobuf()) {
        (false, true) => Reply::Protobuf(protobuf_list(
            10,
            &[(configmap("a", 5, "protobuf"), false), (configmap("b", 6, "protobuf"), true)],
        )),
        (false, false) => {
            Reply::json(list(10, &[configmap("a", 5, "json"), configmap("b", 6, "json")]))
        }
        (true, _) => Reply::Stream { lines: Vec::new(), stall: true },
    })
    .await;
    let builder = informer(&server, false);
    #[cfg(feature = "metrics")]
    let registry = ctrlkit::metrics::Registry::new();
    #[cfg(feature = "metrics")]
    let builder = builder.metrics(Arc::new(registry.clone()));
    let inf = builder.build();
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    assert_eq!(cached(&inf), ["a:json", "b:json"]);
    eventually("the watch", || server.count(true) == 1).await;
    assert_eq!(asked(&server), ["list protobuf", "list json", "watch json"]);
    assert_warned_once(&logs);
    #[cfg(feature = "metrics")]
    {
        let counted = "ctrlkit_informer_wire_format_fallbacks_total{resource=\"configmaps\",namespace=\"default\",selector=\"\"} 1";
        assert!(registry.encode().contains(counted), "{}", registry.encode());
    }
}

/// A watch event whose object has a field the messages lack is not applied: the informer
/// relists in JSON, which brings the object whole, and watches in JSON from there.
#[tokio::test]
async fn a_protobuf_watch_event_with_an_unknown_field_makes_the_informer_relist_in_json() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = Scripted::start(|asked| match (asked.watch, asked.protobuf()) {
        (false, true) => {
            Reply::Protobuf(protobuf_list(10, &[(configmap("a", 5, "protobuf"), false)]))
        }
        (true, true) => Reply::Frames(vec![frame("ADDED", &configmap("b", 11, "protobuf"), true)]),
        (false, false) => {
            Reply::json(list(11, &[configmap("a", 5, "json"), configmap("b", 11, "json")]))
        }
        (true, false) => Reply::Stream { lines: Vec::new(), stall: true },
    })
    .await;
    let inf = informer(&server, false).build();
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    eventually("b, read in JSON", || cached(&inf).contains(&"b:json".to_owned())).await;
    assert_eq!(cached(&inf), ["a:json", "b:json"], "nothing of protobuf's b was cached");
    eventually("the JSON watch", || server.count(true) == 2).await;
    let expected = ["list protobuf", "watch protobuf", "list json", "watch json"];
    assert_eq!(asked(&server), expected);
    assert_warned_once(&logs);
}

/// A streaming list's initial event with a field the messages lack: the informer streams the
/// list again, in JSON, and syncs from it.
#[tokio::test]
async fn a_protobuf_streaming_list_with_an_unknown_field_streams_again_in_json() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let end = json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {
        "resourceVersion": "12", "annotations": {"k8s.io/initial-events-end": "true"}}});
    let json_events =
        vec![event("ADDED", configmap("a", 12, "json")), event("BOOKMARK", end.clone())];
    let server = Scripted::start(move |asked| match (asked.watch, asked.protobuf()) {
        (true, true) => Reply::Frames(vec![
            frame("ADDED", &configmap("a", 12, "protobuf"), true),
            event_frame("BOOKMARK", &from_json(&end).unwrap()),
        ]),
        (true, false) => Reply::Stream { lines: json_events.clone(), stall: true },
        (false, _) => Reply::status(500, "InternalError", "no list expected"),
    })
    .await;
    let inf = informer(&server, true).build();
    let _running = start(&inf);
    assert!(wait_for_cache_sync(&[&inf], std::future::pending()).await.is_ok());
    assert_eq!(cached(&inf), ["a:json"]);
    assert_eq!(asked(&server), ["watch protobuf", "watch json"]);
    assert_warned_once(&logs);
}
