//! Kubernetes' protobuf encoding, for the built-in kinds: what kubectl's generator commands
//! (`kubectl create namespace`, `create configmap`, …) and client-go clients configured for
//! protobuf send.
//!
//! The encoding itself (the vendored messages of Kubernetes v1.36.2, Go's JSON rules, the
//! transcoder between a body and its JSON, the watch frames) is the `ctrlkit-protobuf` crate,
//! which clients share; see its docs. This module adapts it to the server, which works in
//! JSON throughout: a protobuf request body is decoded to JSON first, and an answer is
//! re-encoded from its JSON last.
//!
//! Custom resources have no messages: a protobuf body for one is 400 (as kube-apiserver 1.20
//! answers; 1.36.2 closes the connection unanswered), and a client that accepts nothing but
//! protobuf for one gets 406.
//!
//! Known differences from the real server: messages are those of Kubernetes v1.36.2, so a
//! field added later is dropped from a protobuf body (a JSON body keeps it); a `Quantity` is kept as
//! written, not canonicalized (`"0.5"` stays, the real server answers `"500m"`), as the
//! server does for JSON bodies.

mod frames;
mod transcode;

pub(crate) use ctrlkit_protobuf::{MEDIA_TYPE, WATCH_MEDIA_TYPE};
pub(crate) use frames::{PANIC_LINE, watch_frame, watch_frames};
pub(crate) use transcode::{DecodeError, decode, encode, message_for, typed_json};
