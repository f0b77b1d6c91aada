//! Reading a watch: one JSON event per line, or one protobuf event per length-delimited
//! frame (see the `wire` module), each decoded into a [`WatchEvent`].
//!
//! kube-client's `request_events` does this too, but it drops a line whose JSON ends early
//! (meant for a line cut by the end of the stream, it also drops a cut line in the middle,
//! and the event is lost while later ones move the resourceVersion on), and it turns a line of
//! an unknown event type into an empty `Status` error. Here every line that cannot be read is
//! an error saying what it was (not JSON, an unknown type, an object that does not decode as
//! the kind watched) with the line's beginning, so the informer logs it and resumes from
//! before it; a line cut off by the end of the stream (no newline) ends the stream, which the
//! informer resumes from before it too. Frames are read the same way: a frame cut off by the
//! end of the stream ends it, one that does not decode is an error saying what it was.

use futures::io::AsyncBufReadExt;
use futures::{Stream, stream};
use kube_client::api::WatchEvent;
use kube_client::core::Status;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::object::depth::TooDeep;
use super::object::strip::strip_managed_fields;
use super::wire::{self, Body, Encoding, Frame, ends_stream};

/// What reading one line of a watch gave.
#[derive(Debug)]
pub(crate) enum Line {
    /// A line, appended to the buffer, newline included.
    Read,
    /// The stream ended (at a line's end or inside one, or the connection closed).
    End,
    /// The connection failed.
    Failed(std::io::Error),
}

/// Appends the next line that is not blank to `into`, newline included; on anything but
/// [`Line::Read`], `into` is left as it was.
pub(crate) async fn read_line(body: &mut Body, into: &mut Vec<u8>) -> Line {
    let start = into.len();
    loop {
        into.truncate(start);
        match body.read_until(b'\n', into).await {
            Ok(0) => return Line::End,
            Ok(_) if into.last() != Some(&b'\n') => {
                tracing::debug!(bytes = into.len() - start, "a watch stream ended inside an event");
                into.truncate(start);
                return Line::End;
            }
            Ok(_) if into[start..].trim_ascii().is_empty() => continue,
            Ok(_) => return Line::Read,
            // The server or a proxy closed the connection mid-stream: the watch ends and is
            // resumed, as when the server ends it.
            Err(e) if ends_stream(&e) => {
                into.truncate(start);
                return Line::End;
            }
            Err(e) => {
                into.truncate(start);
                return Line::Failed(e);
            }
        }
    }
}

/// The events of a watch's body, read as `encoding` says; with `strip`, each object's
/// `metadata.managedFields` are left out (cut from a JSON line's text before it is decoded,
/// see the `strip` module; skipped on the wire in protobuf), so they are never built.
pub(crate) fn events<K: DeserializeOwned + Send>(
    body: Body,
    encoding: Encoding,
    strip: bool,
    max_depth: usize,
) -> impl Stream<Item = kube_client::Result<WatchEvent<K>>> + Send {
    stream::unfold((body, Vec::new(), false), move |(mut body, mut buffer, failed)| async move {
        if failed {
            return None;
        }
        buffer.clear();
        let read = match encoding {
            Encoding::Json => read_line(&mut body, &mut buffer).await,
            Encoding::Protobuf => wire::read_frame(&mut body, &mut buffer).await.into(),
        };
        match read {
            Line::Read => {
                let event = match encoding {
                    Encoding::Json => decode_line(&buffer, strip, max_depth),
                    Encoding::Protobuf => {
                        wire::watch_event(&buffer, strip, max_depth).map(|e| e.unwrap_or_else(skip))
                    }
                };
                Some((event, (body, buffer, false)))
            }
            Line::End => None,
            Line::Failed(e) => Some((Err(kube_client::Error::ReadEvents(e)), (body, buffer, true))),
        }
    })
}

impl From<Frame> for Line {
    fn from(frame: Frame) -> Self {
        match frame {
            Frame::Read => Line::Read,
            Frame::End => Line::End,
            Frame::Failed(e) => Line::Failed(e),
        }
    }
}

/// One line as an event (see [`events`]); an object nested deeper than `max_depth` stands
/// as a bookmark annotated [`SKIPPED`].
pub(crate) fn decode_line<K: DeserializeOwned>(
    line: &[u8],
    strip: bool,
    max_depth: usize,
) -> kube_client::Result<WatchEvent<K>> {
    let line = line.trim_ascii();
    let stripped = match strip {
        true => std::str::from_utf8(line).ok().and_then(strip_managed_fields),
        false => None,
    };
    decode(stripped.as_ref().map_or(line, |s| s.as_bytes()), max_depth)
}

/// The known event types.
const TYPES: [&str; 5] = ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"];

#[derive(Deserialize)]
struct Head {
    #[serde(rename = "type")]
    event_type: Option<String>,
    kind: Option<String>,
}

/// The annotation of the bookmark that stands for an event whose object was skipped for its
/// depth (its value: what was skipped and why), so that the watch moves past it and the
/// informer reports it.
pub(crate) const SKIPPED: &str = "ctrlkit.dev/skipped";

/// The annotation of the bookmark that stands for an event whose protobuf object holds a
/// field the vendored messages lack (its value: the message and field number): the informer
/// applies nothing of it, reads JSON from then on, and relists.
pub(crate) const UNKNOWN_FIELD: &str = "ctrlkit.dev/unknown-field";

/// The annotation beside [`SKIPPED`] naming the object's key (`namespace/name`), so that the
/// informer can say whether it keeps an older copy.
pub(crate) const SKIPPED_OBJECT: &str = "ctrlkit.dev/skipped-object";

/// The annotation beside [`SKIPPED`] on the skip of a DELETED event: the object is gone, so
/// the informer removes a copy it holds rather than keep it.
pub(crate) const SKIPPED_DELETED: &str = "ctrlkit.dev/skipped-deleted";

/// One line as an event, or an error that says what the line was.
fn decode<K: DeserializeOwned>(
    line: &[u8],
    max_depth: usize,
) -> kube_client::Result<WatchEvent<K>> {
    let err = match serde_json::from_slice::<WatchEvent<K>>(line) {
        Ok(event) => return Ok(event),
        Err(err) if super::object::depth::is_too_deep(&err) => match deep_event(line, max_depth) {
            Some(event) => return event,
            None => err,
        },
        Err(err) => err,
    };
    let head = serde_json::from_slice::<Head>(line);
    let what = match &head {
        Err(_) => format!("a watch stream line is not JSON ({err})"),
        // A bare Status instead of an event: the server's error, as kube-client reads it.
        Ok(Head { event_type: None, kind: Some(kind) }) if kind == "Status" => {
            if let Ok(status) = serde_json::from_slice::<Status>(line) {
                return Err(kube_client::Error::Api(status.boxed()));
            }
            format!("a watch stream line is a Status that does not decode ({err})")
        }
        Ok(Head { event_type: None, .. }) => format!("a watch event without a type ({err})"),
        Ok(Head { event_type: Some(t), .. }) if !TYPES.contains(&t.as_str()) => {
            format!("a watch event of unknown type {t:?}")
        }
        Ok(Head { event_type: Some(t), .. }) => {
            format!("the object of a {t} watch event does not decode ({err})")
        }
    };
    let excerpt: String = String::from_utf8_lossy(line).chars().take(120).collect();
    Err(kube_client::Error::SerdeError(serde::de::Error::custom(format!(
        "{what}; the line begins: {excerpt:?}"
    ))))
}

/// An event whose object is nested deeper than serde_json's default limit, decoded up to
/// `max_depth` levels; deeper, a bookmark at its version annotated [`SKIPPED`] and
/// [`SKIPPED_OBJECT`] (and [`SKIPPED_DELETED`] for a delete). `None` if the line is not an
/// event at all.
fn deep_event<K: DeserializeOwned>(
    line: &[u8],
    max_depth: usize,
) -> Option<kube_client::Result<WatchEvent<K>>> {
    let text = std::str::from_utf8(line).ok()?;
    let raw: super::object::depth::RawEvent<'_> = serde_json::from_str(text).ok()?;
    let decoded = match super::object::depth::object::<K>(raw.object.get(), max_depth) {
        Ok(decoded) => decoded,
        Err(err) => return Some(Err(kube_client::Error::SerdeError(err))),
    };
    Some(Ok(match (raw.event_type.as_str(), decoded) {
        ("ADDED", Ok(object)) => WatchEvent::Added(object),
        ("MODIFIED", Ok(object)) => WatchEvent::Modified(object),
        ("DELETED", Ok(object)) => WatchEvent::Deleted(object),
        (_, Ok(_)) => return None,
        (kind, Err(too_deep)) => skipped_event(&too_deep, kind == "DELETED"),
    }))
}

/// The bookmark that stands for an event whose object was too deep to decode (see
/// [`SKIPPED`]).
fn skipped_event<K>(too_deep: &TooDeep, deleted: bool) -> WatchEvent<K> {
    let mut annotations: std::collections::BTreeMap<_, _> = [
        (SKIPPED.to_owned(), too_deep.to_string()),
        (SKIPPED_OBJECT.to_owned(), too_deep.object.clone()),
    ]
    .into();
    if deleted {
        annotations.insert(SKIPPED_DELETED.to_owned(), "true".to_owned());
    }
    let resource_version = too_deep.resource_version.clone().unwrap_or_default();
    marker_bookmark(resource_version, annotations)
}

/// The bookmark that stands for a protobuf event the informer does not decode (see
/// [`wire::Skip`]).
pub(crate) fn skip<K>(skip: wire::Skip) -> WatchEvent<K> {
    match skip {
        wire::Skip::TooDeep(too_deep, deleted) => skipped_event(&too_deep, deleted),
        // At no version: the watch does not move past it.
        wire::Skip::UnknownField(what) => {
            marker_bookmark(String::new(), [(UNKNOWN_FIELD.to_owned(), what)].into())
        }
    }
}

fn marker_bookmark<K>(
    resource_version: String,
    annotations: std::collections::BTreeMap<String, String>,
) -> WatchEvent<K> {
    WatchEvent::Bookmark(kube_client::core::watch::Bookmark {
        types: Default::default(),
        metadata: kube_client::core::watch::BookmarkMeta { resource_version, annotations },
    })
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    async fn read(body: &'static str) -> Vec<Result<String, String>> {
        let body: Body = Box::pin(futures::io::Cursor::new(body.as_bytes()));
        events::<ConfigMap>(body, Encoding::Json, true, crate::cache::DEFAULT_MAX_DEPTH)
            .map(|e| match e {
                Ok(WatchEvent::Added(cm)) => Ok(format!("ADDED {}", cm.metadata.name.unwrap())),
                Ok(other) => Ok(format!("{other:?}").chars().take(12).collect()),
                Err(e) => Err(e.to_string()),
            })
            .collect()
            .await
    }

    const A: &str = r#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}}"#;

    #[tokio::test]
    async fn events_are_read_line_by_line_and_blank_lines_skipped() {
        let body = Box::leak(format!("{A}\n\n{A}\n").into_boxed_str());
        assert_eq!(read(body).await, [Ok("ADDED a".into()), Ok("ADDED a".into())]);
    }

    #[tokio::test]
    async fn a_line_cut_by_the_end_of_the_stream_ends_it_quietly() {
        let body = Box::leak(format!("{A}\n{}", &A[..30]).into_boxed_str());
        assert_eq!(read(body).await, [Ok("ADDED a".into())]);
    }

    #[tokio::test]
    async fn a_cut_line_inside_the_stream_is_an_error_not_dropped() {
        let body = Box::leak(format!("{}\n{A}\n", &A[..30]).into_boxed_str());
        let events = read(body).await;
        let err = events[0].as_ref().unwrap_err();
        assert!(err.contains("not JSON") && err.contains("the line begins"), "{err}");
    }

    #[tokio::test]
    async fn unknown_types_and_objects_of_another_kind_say_what_they_were() {
        let unknown = r#"{"type":"TELEPORTED","object":{}}"#;
        let pod =
            r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"}}}"#;
        let body = Box::leak(format!("{unknown}\n{pod}\n").into_boxed_str());
        let events = read(body).await;
        let (first, second) = (events[0].as_ref().unwrap_err(), events[1].as_ref().unwrap_err());
        assert!(first.contains("unknown type \"TELEPORTED\""), "{first}");
        assert!(
            second.contains("ADDED watch event does not decode") && second.contains("Pod"),
            "{second}"
        );
    }

    #[tokio::test]
    async fn a_bare_status_is_the_servers_error() {
        let status = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no","reason":"Forbidden","code":403}"#;
        let body = Box::leak(format!("{status}\n").into_boxed_str());
        let events = read(body).await;
        assert!(events[0].as_ref().unwrap_err().contains("no"), "{events:?}");
    }
}
