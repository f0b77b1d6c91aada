//! Watch events in protobuf: the real server's length-delimited frames.

use axum::body::Bytes;
use futures::{Stream, StreamExt};
use prost_reflect::DynamicMessage;
use prost_reflect::prost::Message as _;
use serde_json::Value;

use super::from_json::encode;
use super::schema::message_for;

/// The line that makes a protobuf watch's encoder panic (`Faults::panic_watches`).
pub(crate) const PANIC_LINE: &[u8] = b"\0ctrlkit: panic in the protobuf encoder\n";

/// A watch's JSON lines, as protobuf frames (one per line; partial lines wait for the rest).
pub(crate) fn watch_frames<S>(lines: S) -> impl Stream<Item = Result<Bytes, axum::Error>> + Send
where
    S: Stream<Item = Result<Bytes, axum::Error>> + Send,
{
    let mut pending = Vec::new();
    lines.map(move |chunk| {
        pending.extend_from_slice(&chunk?);
        let mut out = Vec::new();
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = &line[..end];
            if line == &PANIC_LINE[..PANIC_LINE.len() - 1] {
                panic!("a panic injected by Faults::panic_watches");
            }
            let frame = serde_json::from_slice::<Value>(line)
                .map_err(|e| e.to_string())
                .and_then(|event| watch_frame(&event));
            match frame {
                Ok(frame) => out.extend_from_slice(&frame),
                Err(why) => {
                    tracing::debug!(%why, "a watch line sent as protobuf as it is");
                    out.extend_from_slice(&length_prefixed(line));
                }
            }
        }
        Ok(Bytes::from(out))
    })
}

/// One watch event as the real server frames it in protobuf: a 4-byte big-endian length,
/// then a bare `meta.v1.WatchEvent` (the stream serializer adds no envelope) whose `object`
/// holds the object in its envelope.
pub(crate) fn watch_frame(event: &Value) -> Result<Vec<u8>, String> {
    let kind = event.get("type").and_then(Value::as_str).ok_or("a watch event without a type")?;
    let object = event.get("object").ok_or("a watch event without an object")?;
    let object = match encode(object) {
        Some(result) => result?,
        None => return Err(format!("no protobuf message for {object}")),
    };
    let descriptor = message_for("meta.k8s.io/v1", "WatchEvent").expect("WatchEvent is vendored");
    let raw_extension = descriptor
        .get_field_by_name("object")
        .and_then(|f| f.kind().as_message().cloned())
        .expect("WatchEvent.object is a RawExtension");
    let mut extension = DynamicMessage::new(raw_extension);
    extension.set_field_by_name("raw", prost_reflect::Value::Bytes(object.into()));
    let mut message = DynamicMessage::new(descriptor);
    message.set_field_by_name("type", prost_reflect::Value::String(kind.to_owned()));
    message.set_field_by_name("object", prost_reflect::Value::Message(extension));
    Ok(length_prefixed(&message.encode_to_vec()))
}

/// A frame: the 4-byte big-endian length, then the bytes.
fn length_prefixed(bytes: &[u8]) -> Vec<u8> {
    // Bodies are at most 3 MiB and objects are stored from bodies: far below 4 GiB.
    let length = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    let mut frame = length.to_be_bytes().to_vec();
    frame.extend_from_slice(bytes);
    frame
}
