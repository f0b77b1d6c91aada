//! How an informer's reads travel: which encoding each request asks for, how an answer is
//! read by its `Content-Type`, and how a protobuf watch is cut into events.
//!
//! # Which request uses which format
//! - Lists, watches (streaming lists included) and gets of whole objects: with
//!   [`WireFormat::Protobuf`], `Accept: application/vnd.kubernetes.protobuf,application/json`
//!   for kinds that have a protobuf message (the built-in kinds), as client-go's generated
//!   clients send; `application/json` for the rest (custom resources), so they need no second
//!   request. With [`WireFormat::Json`], JSON for every kind.
//! - Metadata-only lists and watches: `PartialObjectMetadata(List)` in protobuf first for
//!   every kind (its message is the same whatever the kind), then in JSON.
//! - Table requests and every write (create, update, patch, server-side apply, delete): JSON.
//!
//! # Contract
//! - Every answer is decoded by its own `Content-Type`: a server that answers JSON to a
//!   request that preferred protobuf is read as JSON.
//! - Errors keep their HTTP code and `Status` whichever encoding they came in (see `send`).

mod decode;
mod format;
mod frames;
mod get;
mod send;

pub(crate) use decode::{
    DecodeError, Skip, frame_may_end, list_items, list_meta, unknown_field, watch_event,
};
pub(crate) use format::{Encoding, Read, accept_for};
pub use format::{WIRE_FORMAT_ENV, WireFormat};
pub(crate) use frames::{Body, Frame, ends_stream, read_frame};
pub(crate) use get::get_opt;
pub(crate) use send::{Answer, send};
