//! Watch events in protobuf: the real server's length-delimited frames.
//!
//! # Contract
//! A watch answered as `application/vnd.kubernetes.protobuf;stream=watch` is a sequence of
//! frames, each a 4-byte big-endian length and then that many bytes: a bare
//! `meta.v1.WatchEvent` (the stream serializer adds no `k8s\0` envelope) whose `type` is the
//! event type (`ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`) and whose `object.raw`
//! holds the object's whole protobuf body, envelope included (client-go's
//! `framer.NewLengthDelimitedFrameReader` and `versioning` decoder read them so).

use prost_reflect::DynamicMessage;
use prost_reflect::prost::Message as _;

use crate::schema::message_for;

/// One watch event as the real server frames it: the length, then a `WatchEvent` of type
/// `event_type` whose object is `object`, a whole protobuf body (`k8s\0` + `runtime.Unknown`).
pub fn event_frame(event_type: &str, object: &[u8]) -> Vec<u8> {
    let descriptor = message_for("meta.k8s.io/v1", "WatchEvent").expect("WatchEvent is vendored");
    let raw_extension = descriptor
        .get_field_by_name("object")
        .and_then(|f| f.kind().as_message().cloned())
        .expect("WatchEvent.object is a RawExtension");
    let mut extension = DynamicMessage::new(raw_extension);
    extension.set_field_by_name("raw", prost_reflect::Value::Bytes(object.to_vec().into()));
    let mut message = DynamicMessage::new(descriptor);
    message.set_field_by_name("type", prost_reflect::Value::String(event_type.to_owned()));
    message.set_field_by_name("object", prost_reflect::Value::Message(extension));
    length_prefixed(&message.encode_to_vec())
}

/// A frame: the 4-byte big-endian length of `bytes`, then `bytes`.
///
/// # Panics
/// When `bytes` is 4 GiB or longer, which no frame can hold (the API server's objects are
/// limited to a few MiB).
pub fn length_prefixed(bytes: &[u8]) -> Vec<u8> {
    let length = u32::try_from(bytes.len()).expect("a frame shorter than 4 GiB");
    let mut frame = Vec::with_capacity(bytes.len() + 4);
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(bytes);
    frame
}

#[cfg(test)]
mod tests {
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use prost::Message as _;
    use serde_json::json;

    use crate::transcode::{from_json, to_json};

    #[test]
    fn event_frames_hold_the_object_in_its_envelope() {
        let object = json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "a", "resourceVersion": "7" }
        });
        let frame = super::event_frame("ADDED", &from_json(&object).unwrap());
        let length = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(length, frame.len() - 4);
        let event = meta::WatchEvent::decode(&frame[4..]).unwrap();
        assert_eq!(event.r#type.as_deref(), Some("ADDED"));
        let raw = event.object.unwrap().raw.unwrap();
        assert_eq!(to_json(&raw).unwrap(), object);
    }
}
