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

use crate::Error;
use crate::schema::message_for;
use crate::wire::{self, Payload};

/// One watch event: a frame's `WatchEvent`, its object not decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Event<'a> {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub event_type: &'a str,
    /// The object's whole protobuf body (`k8s\0` + `runtime.Unknown`): read it with
    /// [`from_slice`](crate::from_slice) or [`envelope`](crate::envelope). An `ERROR`
    /// event's is a `Status`.
    pub object: &'a [u8],
}

impl<'a> Event<'a> {
    /// The event in a frame's bytes (after the length; see [`FrameReader`]).
    ///
    /// [`Error::Malformed`] when they are not a `WatchEvent`.
    pub fn parse(frame: &'a [u8]) -> Result<Self, Error> {
        const AT: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.WatchEvent";
        const RAW: &str = "k8s.io.apimachinery.pkg.runtime.RawExtension";
        let malformed = |at: &str, why| Error::malformed(at, why);
        let [event_type, object] =
            wire::last_fields(frame, [1, 2]).map_err(|e| malformed(AT, e))?;
        let event_type = match event_type {
            Some(Payload::Len(bytes)) => {
                std::str::from_utf8(bytes).map_err(|e| Error::malformed(AT, e))?
            }
            None => "",
            Some(_) => return Err(malformed(AT, "a type that is not a string")),
        };
        let object = match object {
            Some(Payload::Len(bytes)) => bytes,
            None => &[],
            Some(_) => return Err(malformed(AT, "an object that is not a message")),
        };
        let [raw] = wire::last_fields(object, [1]).map_err(|e| malformed(RAW, e))?;
        let object = match raw {
            Some(Payload::Len(bytes)) => bytes,
            None => &[],
            Some(_) => return Err(malformed(RAW, "raw bytes that are not length-delimited")),
        };
        Ok(Event { event_type, object })
    }
}

/// Splits a watch's bytes, as they arrive, into frames: a 4-byte big-endian length, then
/// that many bytes.
///
/// Feed it with [`extend`](Self::extend), take whole frames with
/// [`next_frame`](Self::next_frame), and call [`finish`](Self::finish) at the end of the
/// stream: bytes left over are a cut frame. A length over the maximum is an error (the
/// reader stays failed: the stream is out of step), never an allocation of that size.
#[derive(Debug)]
pub struct FrameReader {
    buffer: Vec<u8>,
    /// Where the next frame starts in `buffer`.
    start: usize,
    max_frame: usize,
    failed: Option<Error>,
}

impl FrameReader {
    /// A reader that refuses frames longer than `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        FrameReader { buffer: Vec::new(), start: 0, max_frame, failed: None }
    }

    /// Appends bytes read from the stream.
    pub fn extend(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            // Frames already taken are dropped before the buffer grows.
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole frame's bytes (without its length), `Ok(None)` until one has arrived
    /// whole; [`Error::FrameTooLong`] for a length over the maximum.
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, Error> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let rest = &self.buffer[self.start..];
        let Some(header) = rest.first_chunk::<4>() else {
            return Ok(None);
        };
        let length = u32::from_be_bytes(*header) as usize;
        if length > self.max_frame {
            let err = Error::FrameTooLong { length, max: self.max_frame };
            self.failed = Some(err.clone());
            return Err(err);
        }
        if rest.len() - 4 < length {
            return Ok(None);
        }
        let frame = self.start + 4..self.start + 4 + length;
        self.start = frame.end;
        Ok(Some(&self.buffer[frame]))
    }

    /// The end of the stream: [`Error::CutFrame`] when part of a frame is left over.
    pub fn finish(&self) -> Result<(), Error> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        match self.buffer.len() - self.start {
            0 => Ok(()),
            left => Err(Error::CutFrame { left }),
        }
    }
}

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
    fn frames_split_wherever_the_bytes_are_cut() {
        let object = from_json(
            &json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "a" } }),
        )
        .unwrap();
        let mut stream = super::event_frame("ADDED", &object);
        stream.extend(super::event_frame("DELETED", &object));
        for cut in 0..stream.len() {
            let mut reader = super::FrameReader::new(1 << 20);
            let mut types = Vec::new();
            for part in [&stream[..cut], &stream[cut..]] {
                reader.extend(part);
                while let Some(frame) = reader.next_frame().unwrap() {
                    let event = super::Event::parse(frame).unwrap();
                    assert_eq!(event.object, &object[..]);
                    types.push(event.event_type.to_owned());
                }
            }
            assert_eq!(types, ["ADDED", "DELETED"], "cut at {cut}");
            reader.finish().unwrap();
        }
    }

    #[test]
    fn over_long_and_cut_frames_are_errors() {
        let mut reader = super::FrameReader::new(8);
        reader.extend(&[0, 0, 0, 9, 1, 2]);
        assert_eq!(reader.next_frame(), Err(crate::Error::FrameTooLong { length: 9, max: 8 }));
        assert!(reader.next_frame().is_err(), "stays failed");
        let mut reader = super::FrameReader::new(8);
        reader.extend(&[0, 0, 0, 3, 1, 2]);
        assert_eq!(reader.next_frame(), Ok(None));
        assert_eq!(reader.finish(), Err(crate::Error::CutFrame { left: 6 }));
        let mut reader = super::FrameReader::new(8);
        reader.extend(&[0, 0]);
        assert_eq!(reader.finish(), Err(crate::Error::CutFrame { left: 2 }));
        assert!(super::Event::parse(&[0x0a, 0x05]).is_err());
    }

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
