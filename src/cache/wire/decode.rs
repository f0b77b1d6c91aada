//! Decoding protobuf answers into the types the informer keeps, with `ctrlkit-protobuf`'s
//! deserializer: straight from the wire into `K`, as serde_json reads the same object's JSON.
//!
//! # Contract
//! - `managedFields` are skipped on the wire when the informer drops them (`strip`).
//! - An object nested deeper than `max_depth` is not decoded: it is named (its key, and its
//!   resourceVersion for a watch) so the informer can skip it and say which, as for JSON.
//! - An object holding a field the vendored messages lack (a newer server's) is not decoded
//!   either: dropping the field would cache less than the same object's JSON holds, and a
//!   controller writing back from its cache would wipe it. The error names the message and
//!   the field number, so the informer can switch to JSON and say why.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube_client::api::WatchEvent;
use kube_client::core::Status;
use serde::de::DeserializeOwned;

pub(crate) use ctrlkit_protobuf::Error as DecodeError;
use ctrlkit_protobuf::watch::Event;
use ctrlkit_protobuf::{DecodeOptions, Envelope};

use crate::cache::object::depth::{Named, TooDeep};

/// How cached objects are decoded: unknown fields refused (module docs).
fn options(strip: bool, max_depth: usize) -> DecodeOptions {
    lenient(strip, max_depth).deny_unknown_fields(true)
}

/// [`options`] with unknown fields skipped, for what is read for its metadata alone.
fn lenient(strip: bool, max_depth: usize) -> DecodeOptions {
    DecodeOptions::new().max_depth(max_depth).skip_managed_fields(strip)
}

/// What an object that did not decode is, when the informer goes on past it.
#[derive(Debug)]
pub(crate) enum Skip {
    /// Nested too deep: its skip, and whether the event was a delete.
    TooDeep(TooDeep, bool),
    /// A field the vendored messages lack: the error, naming the message and field number.
    UnknownField(String),
}

/// The text of an error for a field the vendored messages lack, naming the message and the
/// field number; `None` for any other error.
pub(crate) fn unknown_field(err: &DecodeError) -> Option<String> {
    matches!(err, DecodeError::UnknownField { .. }).then(|| err.to_string())
}

/// A protobuf object read live, `managedFields` kept, unknown fields refused (module docs).
pub(crate) fn object<K: DeserializeOwned>(body: &[u8]) -> Result<K, DecodeError> {
    ctrlkit_protobuf::from_slice(body, &options(false, crate::cache::DEFAULT_MAX_DEPTH))
}

/// A protobuf `Status` body (`k8s\0` and its envelope).
pub(crate) fn status(body: &[u8]) -> Result<Status, DecodeError> {
    ctrlkit_protobuf::from_slice(body, &DecodeOptions::new())
}

/// The `ListMeta` of a protobuf list body, its items skipped.
pub(crate) fn list_meta(body: &[u8]) -> Result<ListMeta, DecodeError> {
    ctrlkit_protobuf::list(body)?.metadata(&DecodeOptions::new())
}

/// The items of a protobuf list body; those nested deeper than `max_depth` named in the
/// second list.
pub(crate) fn list_items<K: DeserializeOwned>(
    body: &[u8],
    strip: bool,
    max_depth: usize,
) -> Result<(Vec<K>, Vec<TooDeep>), DecodeError> {
    let list = ctrlkit_protobuf::list(body)?;
    let options = options(strip, max_depth);
    let (mut items, mut skipped) = (Vec::with_capacity(list.items.len()), Vec::new());
    for item in &list.items {
        match item.decode::<K>(&options) {
            Ok(object) => items.push(object),
            Err(DecodeError::TooDeep { .. }) => skipped.push(too_deep(item, max_depth)),
            Err(err) => return Err(err),
        }
    }
    Ok((items, skipped))
}

/// The skip of an object too deep to decode, named by its metadata (read alone: the rest is
/// skipped on the wire, not decoded).
fn too_deep(object: &Envelope<'_>, max_depth: usize) -> TooDeep {
    let shallow = DecodeOptions::new().skip_managed_fields(true);
    object.decode::<Named>(&shallow).unwrap_or_default().too_deep(None, max_depth)
}

/// One frame of a protobuf watch as an event; `Err` of the inner result: an object the
/// informer goes on past (see [`Skip`]).
pub(crate) fn watch_event<K: DeserializeOwned>(
    frame: &[u8],
    strip: bool,
    max_depth: usize,
) -> kube_client::Result<Result<WatchEvent<K>, Skip>> {
    let undecodable = |what: String| {
        let excerpt: Vec<u8> = frame.iter().take(48).copied().collect();
        kube_client::Error::SerdeError(serde::de::Error::custom(format!(
            "{what}; the frame begins: {excerpt:?}"
        )))
    };
    let event = Event::parse(frame)
        .map_err(|e| undecodable(format!("a watch frame is not a WatchEvent ({e})")))?;
    let options = options(strip, max_depth);
    let object = |what: &'static str| {
        move |e: DecodeError| {
            undecodable(format!("the object of a {what} watch event does not decode ({e})"))
        }
    };
    let decoded = match event.event_type {
        "ADDED" | "MODIFIED" | "DELETED" => {
            match ctrlkit_protobuf::from_slice::<K>(event.object, &options) {
                Ok(o) => match event.event_type {
                    "ADDED" => WatchEvent::Added(o),
                    "MODIFIED" => WatchEvent::Modified(o),
                    _ => WatchEvent::Deleted(o),
                },
                Err(DecodeError::TooDeep { .. }) => {
                    let envelope =
                        ctrlkit_protobuf::envelope(event.object).map_err(object("object"))?;
                    let deleted = event.event_type == "DELETED";
                    return Ok(Err(Skip::TooDeep(too_deep(&envelope, max_depth), deleted)));
                }
                Err(e) => match unknown_field(&e) {
                    Some(what) => return Ok(Err(Skip::UnknownField(what))),
                    None => return Err(object("object")(e)),
                },
            }
        }
        // A bookmark's object is read for its version alone: fields it lacks lose nothing.
        "BOOKMARK" => WatchEvent::Bookmark(
            ctrlkit_protobuf::from_slice(event.object, &lenient(strip, max_depth))
                .map_err(object("BOOKMARK"))?,
        ),
        "ERROR" => WatchEvent::Error(Box::new(status(event.object).map_err(object("ERROR"))?)),
        other => return Err(undecodable(format!("a watch event of unknown type {other:?}"))),
    };
    Ok(Ok(decoded))
}

/// Whether a frame may end a streaming list's initial events: every frame but an object
/// event (`ADDED`, `MODIFIED`, `DELETED`), told from the event type at its start.
pub(crate) fn frame_may_end(frame: &[u8]) -> bool {
    const OBJECT_EVENTS: [&[u8]; 3] = [b"\x0a\x05ADDED", b"\x0a\x08MODIFIED", b"\x0a\x07DELETED"];
    !OBJECT_EVENTS.iter().any(|prefix| frame.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use ctrlkit_protobuf::transcode::from_json;
    use ctrlkit_protobuf::watch::event_frame;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{Value, json};

    use super::*;

    fn pod(name: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": "ns", "resourceVersion": "7",
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            },
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        })
    }

    fn without_managed_fields(mut pod: Value) -> Pod {
        pod["metadata"].as_object_mut().unwrap().remove("managedFields");
        serde_json::from_value(pod).unwrap()
    }

    /// A frame as `read_frame` hands it over: without its length.
    fn frame(event_type: &str, object: &Value) -> Vec<u8> {
        event_frame(event_type, &from_json(object).unwrap())[4..].to_vec()
    }

    #[test]
    fn a_watch_frame_decodes_to_its_event_with_managed_fields_left_out() {
        let event = watch_event::<Pod>(&frame("ADDED", &pod("a")), true, 512).unwrap().unwrap();
        let WatchEvent::Added(decoded) = event else { panic!("{event:?}") };
        assert_eq!(decoded, without_managed_fields(pod("a")));
        let kept = watch_event::<Pod>(&frame("MODIFIED", &pod("a")), false, 512).unwrap().unwrap();
        let WatchEvent::Modified(kept) = kept else { panic!("{kept:?}") };
        assert!(kept.metadata.managed_fields.is_some());
    }

    #[test]
    fn bookmark_and_error_frames_decode_and_may_end_the_initial_events() {
        let bookmark = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "resourceVersion": "9", "annotations": {"k8s.io/initial-events-end": "true"}}});
        let frame_bytes = frame("BOOKMARK", &bookmark);
        assert!(frame_may_end(&frame_bytes));
        let event = watch_event::<Pod>(&frame_bytes, true, 512).unwrap().unwrap();
        let WatchEvent::Bookmark(b) = event else { panic!("{event:?}") };
        assert_eq!(b.metadata.resource_version, "9");
        let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
            "message": "too old", "reason": "Expired", "code": 410});
        let event = watch_event::<Pod>(&frame("ERROR", &status), true, 512).unwrap().unwrap();
        let WatchEvent::Error(status) = event else { panic!("{event:?}") };
        assert_eq!((status.code, status.message.as_str()), (410, "too old"));
        assert!(!frame_may_end(&frame("ADDED", &pod("a"))));
        assert!(!frame_may_end(&frame("DELETED", &pod("a"))));
    }

    #[test]
    fn a_frame_that_is_no_watch_event_is_an_error_naming_it() {
        let mut cut = frame("ADDED", &pod("a"));
        cut.truncate(cut.len() / 2);
        let err = watch_event::<Pod>(&cut, true, 512).unwrap_err().to_string();
        assert!(err.contains("the frame begins"), "{err}");
    }

    #[test]
    fn a_list_body_gives_its_metadata_and_its_items() {
        let list = json!({"apiVersion": "v1", "kind": "PodList",
            "metadata": {"resourceVersion": "12", "continue": "next"},
            "items": [pod("a"), pod("b")]});
        let body = from_json(&list).unwrap();
        let meta = list_meta(&body).unwrap();
        assert_eq!(meta.resource_version.as_deref(), Some("12"));
        assert_eq!(meta.continue_.as_deref(), Some("next"));
        let (items, skipped) = list_items::<Pod>(&body, true, 512).unwrap();
        assert!(skipped.is_empty());
        assert_eq!(items, [without_managed_fields(pod("a")), without_managed_fields(pod("b"))]);
    }

    /// An object nested past the limit is skipped and named, with its version, in a list
    /// and in a watch (a delete says so).
    #[test]
    fn objects_too_deep_are_skipped_and_named() {
        let mut deep = pod("deep");
        let mut nested = json!("leaf");
        for _ in 0..20 {
            nested = json!({ "x": nested });
        }
        deep["metadata"]["annotations"] = json!({ "a": "b" });
        deep["metadata"]["managedFields"][0]["fieldsV1"] = nested;
        let list = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {},
            "items": [pod("a"), deep.clone()]});
        let body = from_json(&list).unwrap();
        let (items, skipped) = list_items::<Pod>(&body, false, 10).unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(skipped[0].object, "ns/deep");
        assert_eq!(skipped[0].resource_version.as_deref(), Some("7"));
        assert!(skipped[0].to_string().contains("more than the 10 levels"), "{}", skipped[0]);
        let Err(Skip::TooDeep(too_deep, deleted)) =
            watch_event::<Pod>(&frame("DELETED", &deep), false, 10).unwrap()
        else {
            panic!("a deep object decoded");
        };
        assert_eq!((too_deep.object.as_str(), deleted), ("ns/deep", true));
        // Skipping managedFields on the wire skips their depth too.
        assert!(watch_event::<Pod>(&frame("ADDED", &deep), true, 10).unwrap().is_ok());
    }

    #[test]
    fn a_protobuf_status_decodes() {
        let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
            "message": "pods \"x\" not found", "reason": "NotFound", "code": 404});
        let decoded = super::status(&from_json(&status).unwrap()).unwrap();
        assert_eq!((decoded.code, decoded.reason.as_str()), (404, "NotFound"));
    }
}
