//! A streaming list's initial events, decoded in batches on blocking threads while the next
//! bytes are read, as a paginated list's pages are.
//!
//! Lines are JSON events; a protobuf watch's frames (see the `wire` module) go the same way,
//! each kept with its length, and "a line" below means either.
//!
//! The informer's task only reads lines: it appends each to the open batch, and sends the
//! batch to a blocking thread once it holds [`BATCH_LINES`] lines or [`BATCH_BYTES`] bytes,
//! or at once after a line that may end the initial events (a bookmark, an error, or a line
//! not in the form servers write). There each line has its `managedFields` cut out of the
//! text (unless kept), is decoded, and its object prepared into the form the store keeps (see
//! [`Prepare`]): the same work a page's objects get, off the task that reads the stream.
//!
//! Batches are handed back in the order their lines came, each line's outcome in order, and
//! decoding stops at a batch's first line that fails, so the reflector sees exactly the
//! sequence of events it would have seen decoding them one by one. Nothing is applied before
//! the initial-events-end bookmark, so holding lines in a batch delays nothing a reader could
//! observe; and since a line that may be that bookmark closes its batch, the bookmark is
//! always the last line of its batch, and the reflector takes the stream back right after it.

use std::collections::VecDeque;

use kube_client::api::WatchEvent;
use kube_client::core::Status;
use kube_client::core::watch::BookmarkMeta;
use tokio::task::JoinHandle;

use super::informer_error::InformerError;
use super::object::prepare::Prepare;
use super::object::stored::Stored;
use super::watch_stream::{Line, decode_line, read_line, skip};
use super::wire::{self, Body, Encoding};
use super::{InformerObject, ObjectKey, meta_namespace_key_func};

/// A batch is decoded once it holds this many lines (a list page's default size)…
pub(crate) const BATCH_LINES: usize = 500;
/// …or this many bytes, whichever comes first.
pub(crate) const BATCH_BYTES: usize = 4 << 20;
/// Batches decoding at once; more wait for the oldest to be applied, which bounds the text
/// and objects held beside the store being built.
const IN_FLIGHT: usize = 2;

/// One initial event, decoded and prepared.
pub(crate) enum Initial<K> {
    /// An object added (or modified), as the store keeps it.
    Upsert(ObjectKey, Stored<K>),
    /// An object deleted.
    Delete(ObjectKey),
    /// A bookmark's metadata.
    Bookmark(BookmarkMeta),
    /// An `ERROR` event.
    Error(Box<Status>),
    /// A line that did not decode; its batch ends here.
    Undecodable(kube_client::Error),
    /// An object the transform panicked on; its batch ends here.
    Rejected(InformerError),
}

/// The lines of a streaming list not yet decoded, and the batches being decoded, oldest
/// first.
pub(crate) struct Batches<K> {
    prepare: Prepare<K>,
    encoding: Encoding,
    /// The open batch: its lines, one after the other, newlines included (frames, each after
    /// its 4-byte length).
    text: Vec<u8>,
    /// Where the last whole line read ends in `text`.
    whole: usize,
    lines: usize,
    decoding: VecDeque<JoinHandle<Vec<Initial<K>>>>,
    /// The newest batch sent ends with a line that may end the initial events.
    may_end: bool,
}

impl<K: InformerObject> Batches<K> {
    pub(crate) fn new(prepare: Prepare<K>, encoding: Encoding) -> Self {
        Self {
            prepare,
            encoding,
            text: Vec::new(),
            whole: 0,
            lines: 0,
            decoding: VecDeque::new(),
            may_end: false,
        }
    }

    /// Reads the next line of `body` into the open batch, and sends the batch to be decoded
    /// when it is full or the line may end the initial events.
    pub(crate) async fn read(&mut self, body: &mut Body) -> Line {
        // A line read cut short (its future dropped) is read on from where it stopped; a frame
        // read cut short cannot be (the stream is out of step, and the informer drops it), so
        // its bytes are dropped from the batch.
        if self.encoding == Encoding::Protobuf {
            self.text.truncate(self.whole);
        }
        let start = self.text.len();
        let line = match self.encoding {
            Encoding::Json => read_line(body, &mut self.text).await,
            Encoding::Protobuf => {
                self.text.extend_from_slice(&[0; 4]);
                let frame = wire::read_frame(body, &mut self.text).await;
                let length = u32::try_from(self.text.len() - start - 4).unwrap_or(u32::MAX);
                self.text[start..start + 4].copy_from_slice(&length.to_be_bytes());
                frame.into()
            }
        };
        if !matches!(line, Line::Read) {
            self.text.truncate(start);
        }
        if let Line::Read = line {
            self.whole = self.text.len();
            self.lines += 1;
            let may_end = match self.encoding {
                Encoding::Json => may_end(&self.text[start..]),
                Encoding::Protobuf => wire::frame_may_end(&self.text[start + 4..]),
            };
            if may_end || self.lines >= BATCH_LINES || self.text.len() >= BATCH_BYTES {
                self.dispatch();
                self.may_end = may_end;
            }
        }
        line
    }

    /// Sends the open batch, if it holds a line, to a blocking thread. Bytes after its last
    /// whole line are dropped: a read cut short (its future dropped when the wait for the
    /// stream timed out) may have left part of a line behind.
    pub(crate) fn dispatch(&mut self) {
        self.text.truncate(self.whole);
        if self.lines == 0 {
            return;
        }
        let text = std::mem::take(&mut self.text);
        self.whole = 0;
        self.lines = 0;
        let (prepare, encoding) = (self.prepare.clone(), self.encoding);
        self.decoding
            .push_back(tokio::task::spawn_blocking(move || decode(&text, encoding, &prepare)));
    }

    /// Whether every line read has been sent to be decoded and nothing is being decoded.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.lines == 0 && self.decoding.is_empty()
    }

    /// The oldest batch's events once decoded, while one is to be waited for: when more than
    /// [`IN_FLIGHT`] are decoding, when the newest may end the initial events, or (`ended`:
    /// the stream ended) while any is. `None` when there is none to wait for now.
    pub(crate) async fn decoded(&mut self, ended: bool) -> Option<Vec<Initial<K>>> {
        if self.decoding.is_empty() {
            self.may_end = false;
            return None;
        }
        if !(ended || self.may_end || self.decoding.len() > IN_FLIGHT) {
            return None;
        }
        let oldest = self.decoding.pop_front().expect("one is decoding");
        Some(match oldest.await {
            Ok(events) => events,
            // A panic while decoding (not the transform's, which is caught): the list fails
            // and is retried, as when a page's decoding thread panics.
            Err(join) => vec![Initial::Undecodable(kube_client::Error::SerdeError(
                serde::de::Error::custom(format!("decoding a streaming list failed: {join}")),
            ))],
        })
    }
}

impl<K> Drop for Batches<K> {
    fn drop(&mut self) {
        // A list given up (failed, expired, the informer stopped) wastes no more threads.
        for task in &self.decoding {
            task.abort();
        }
    }
}

/// Whether a line may be the initial-events-end bookmark (or an error, which ends the stream):
/// every line but an object event in the form servers write (`{"type":"ADDED",…`), which
/// decides without reading the object.
fn may_end(line: &[u8]) -> bool {
    const OBJECT_EVENTS: [&[u8]; 3] =
        [br#"{"type":"ADDED","#, br#"{"type":"MODIFIED","#, br#"{"type":"DELETED","#];
    let line = line.trim_ascii_start();
    !OBJECT_EVENTS.iter().any(|prefix| line.starts_with(prefix))
}

/// A batch's lines: split at newlines (JSON), or by their lengths (protobuf frames).
fn lines(text: &[u8], encoding: Encoding) -> Box<dyn Iterator<Item = &[u8]> + '_> {
    match encoding {
        Encoding::Json => Box::new(text.split_inclusive(|&b| b == b'\n')),
        Encoding::Protobuf => {
            let mut rest = text;
            Box::new(std::iter::from_fn(move || {
                let (length, after) = rest.split_first_chunk::<4>()?;
                let length = (u32::from_be_bytes(*length) as usize).min(after.len());
                let (frame, next) = after.split_at(length);
                rest = next;
                Some(frame)
            }))
        }
    }
}

/// Decodes and prepares a batch's lines, in order, up to the first that fails.
fn decode<K: InformerObject>(
    text: &[u8],
    encoding: Encoding,
    prepare: &Prepare<K>,
) -> Vec<Initial<K>> {
    let strip = !prepare.keep_managed_fields;
    let mut events = Vec::new();
    for line in lines(text, encoding) {
        let decoded = match encoding {
            Encoding::Json => decode_line::<K>(line, strip, prepare.max_depth),
            Encoding::Protobuf => wire::watch_event::<K>(line, strip, prepare.max_depth)
                .map(|e| e.unwrap_or_else(skip)),
        };
        let event = match decoded {
            Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => match prepare.store(o) {
                Ok(Some((key, stored))) => Initial::Upsert(key, stored),
                Ok(None) => continue,
                Err(err) => Initial::Rejected(err),
            },
            Ok(WatchEvent::Deleted(o)) => match meta_namespace_key_func(&o) {
                Ok(key) => Initial::Delete(key),
                Err(_) => continue,
            },
            Ok(WatchEvent::Bookmark(b)) => Initial::Bookmark(b.metadata),
            Ok(WatchEvent::Error(status)) => Initial::Error(status),
            Err(err) => Initial::Undecodable(err),
        };
        let last = matches!(event, Initial::Undecodable(_) | Initial::Rejected(_));
        events.push(event);
        if last {
            break;
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn prepare() -> Prepare<ConfigMap> {
        Prepare {
            keep_managed_fields: false,
            transform: None,
            codec: None,
            max_depth: crate::cache::DEFAULT_MAX_DEPTH,
        }
    }

    fn added(name: &str) -> String {
        format!(
            r#"{{"type":"ADDED","object":{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"1","managedFields":[{{"manager":"m"}}]}}}}}}"#
        )
    }

    const END: &str = r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;

    fn body(lines: &[String]) -> Body {
        let text = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
        Box::pin(futures::io::Cursor::new(text.into_bytes()))
    }

    async fn read_all(batches: &mut Batches<ConfigMap>, body: &mut Body) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let line = batches.read(body).await;
            while let Some(events) = batches.decoded(!matches!(line, Line::Read)).await {
                for event in events {
                    seen.push(match event {
                        Initial::Upsert(key, stored) => {
                            let object = stored.load().unwrap();
                            assert_eq!(object.metadata.managed_fields, None);
                            format!("upsert {key}")
                        }
                        Initial::Delete(key) => format!("delete {key}"),
                        Initial::Bookmark(b) => format!("bookmark {}", b.resource_version),
                        Initial::Error(status) => format!("error {}", status.code),
                        Initial::Undecodable(_) => "undecodable".into(),
                        Initial::Rejected(_) => "rejected".into(),
                    });
                }
            }
            if !matches!(line, Line::Read) {
                batches.dispatch();
                if batches.is_empty() {
                    return seen;
                }
            }
        }
    }

    /// The same events as a protobuf watch's frames.
    fn frames(lines: &[String]) -> Body {
        let mut bytes = Vec::new();
        for line in lines {
            let event: serde_json::Value = serde_json::from_str(line).unwrap();
            let object = ctrlkit_protobuf::transcode::from_json(&event["object"]).unwrap();
            let event_type = event["type"].as_str().unwrap();
            bytes.extend(ctrlkit_protobuf::watch::event_frame(event_type, &object));
        }
        Box::pin(futures::io::Cursor::new(bytes))
    }

    #[tokio::test]
    async fn events_come_back_in_order_across_batches_with_the_end_bookmark_last_of_its_own() {
        let mut lines: Vec<String> =
            (0..BATCH_LINES * 3 + 7).map(|i| added(&format!("c{i}"))).collect();
        lines.push(END.into());
        let mut want: Vec<String> =
            (0..BATCH_LINES * 3 + 7).map(|i| format!("upsert ns/c{i}")).collect();
        want.push("bookmark 9".into());
        for (encoding, mut body) in
            [(Encoding::Json, body(&lines)), (Encoding::Protobuf, frames(&lines))]
        {
            let mut batches = Batches::new(prepare(), encoding);
            let seen = read_all(&mut batches, &mut body).await;
            assert_eq!(seen, want, "{encoding:?}");
        }
    }

    #[tokio::test]
    async fn a_frame_that_may_end_the_events_sends_its_batch_and_a_cut_one_is_dropped() {
        let mut body = frames(&[added("a"), END.into(), added("b")]);
        let mut batches = Batches::new(prepare(), Encoding::Protobuf);
        assert!(matches!(batches.read(&mut body).await, Line::Read));
        // What a frame read whose future was dropped leaves behind: a length and part of it.
        batches.text.extend_from_slice(&[0, 0, 0, 9, 0x0a]);
        assert!(matches!(batches.read(&mut body).await, Line::Read));
        assert_eq!(batches.decoding.len(), 1, "the bookmark closes the batch");
        let events = batches.decoded(true).await.unwrap();
        assert!(
            matches!(&events[..], [Initial::Upsert(..), Initial::Bookmark(b)] if b.resource_version == "9")
        );
    }

    #[tokio::test]
    async fn a_line_that_may_end_the_events_sends_its_batch_at_once() {
        let mut body = body(&[added("a"), END.into(), added("b")]);
        let mut batches = Batches::new(prepare(), Encoding::Json);
        assert!(matches!(batches.read(&mut body).await, Line::Read));
        assert_eq!(batches.decoding.len(), 0, "an object event waits for more lines");
        assert!(matches!(batches.read(&mut body).await, Line::Read));
        assert_eq!(batches.decoding.len(), 1, "the bookmark closes the batch");
        assert_eq!(batches.lines, 0);
        let events = batches.decoded(true).await.unwrap();
        assert!(matches!(events.last(), Some(Initial::Bookmark(b)) if b.resource_version == "9"));
    }

    #[tokio::test]
    async fn a_read_cut_short_leaves_no_part_of_a_line_in_the_batch() {
        let mut body = body(&[added("a")]);
        let mut batches = Batches::new(prepare(), Encoding::Json);
        assert!(matches!(batches.read(&mut body).await, Line::Read));
        // What a read whose future was dropped mid-line leaves behind.
        batches.text.extend_from_slice(br#"{"type":"ADDED","object":{"kind""#);
        batches.dispatch();
        let events = batches.decoded(true).await.unwrap();
        assert!(matches!(&events[..], [Initial::Upsert(..)]), "no undecodable part of a line");
    }

    #[test]
    fn a_batch_stops_at_its_first_line_that_does_not_decode() {
        let text = format!("{}\n{{not json\n{}\n", added("a"), added("b"));
        let events = decode(text.as_bytes(), Encoding::Json, &prepare());
        assert!(matches!(&events[..], [Initial::Upsert(..), Initial::Undecodable(_)]));
    }
}
