//! Watch events in protobuf: the real server's length-delimited frames.

use axum::body::Bytes;
use ctrlkit_protobuf::watch::{event_frame, length_prefixed};
use futures::{Stream, StreamExt};
use serde_json::Value;

use super::transcode::encode;

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
    Ok(event_frame(kind, &object))
}
