//! Kubernetes' protobuf encoding for the built-in kinds, for clients and for test servers:
//! the message descriptors of Kubernetes v1.36.2, the rules by which Go's `encoding/json`
//! writes each field, a deserializer that reads a body straight into k8s-openapi's (or any
//! serde) types as if it were that JSON ([`from_slice`]), a transcoder between a body and
//! the JSON ([`transcode`]), a body's envelope and a list's items ([`envelope`], [`list`]),
//! and the frames of a protobuf watch ([`watch`]).
//!
//! ```
//! # fn demo(body: &[u8]) -> Result<(), ctrlkit_protobuf::Error> {
//! use ctrlkit_protobuf::{DecodeOptions, from_slice};
//! use k8s_openapi::api::core::v1::Pod;
//!
//! let pod: Pod = from_slice(body, &DecodeOptions::default())?;
//! # Ok(()) }
//! ```
//!
//! # The encoding
//! A protobuf body (`application/vnd.kubernetes.protobuf`) is the 4 bytes `k8s\0` and a
//! `runtime.Unknown` message whose `typeMeta` names the object's `apiVersion` and `kind` and
//! whose `raw` holds the object's message. Custom resources have no messages: the real server
//! answers them in JSON whatever a client asks first.
//!
//! # Go's JSON rules
//! Protobuf alone cannot tell what JSON the real server answers for the same object, which is
//! what k8s-openapi's types (and a client's cache) are built from. `protos/go-json.txt`
//! records it from the Go types: a non-pointer field with `omitempty` is on the wire even when
//! empty but out of JSON when `""`, `0` or `false` (`metadata.namespace`), unless it is a
//! struct (a message: Go never omits one, so `targetPort: 0` and a zero `Time`'s `null`
//! stay), a field with `omitzero` is out of JSON when zero (a zero `creationTimestamp`), a
//! pointer field is
//! in JSON whenever it is on the wire (`spec.replicas: 0` stays), an inline field's message is
//! flattened into its parent (`Volume.volumeSource`), and a few JSON names differ (`$ref`).
//! Some messages have a JSON form of their own: see [`transcode`].
//!
//! # Versions
//! The messages are those of Kubernetes v1.36.2: a field a newer server adds is dropped when
//! its objects are read in protobuf (JSON keeps it), unless
//! [`DecodeOptions::deny_unknown_fields`] makes it an [`Error::UnknownField`] (so a caller
//! can read that object in JSON instead); and the kinds are those the vendored
//! packages hold: core, meta v1, apiextensions v1 and the `k8s.io/api` groups client-go
//! reads in protobuf, in the GA and beta versions k8s-openapi 0.29's latest feature has
//! (apps, batch, autoscaling v1 and v2, coordination, events, rbac, networking, policy,
//! storage, storagemigration, discovery, admissionregistration, authentication,
//! authorization, certificates, flowcontrol, node, scheduling, resource, and
//! apiserverinternal v1alpha1); [`has_message`] says which.
//!
//! # Regenerating the descriptors
//! `protos/` is vendored from a Kubernetes source tree by `scripts/vendor-protos.py` (see its
//! docs). The compiled descriptor set, `kubernetes.fds`, is committed, so users of the crate
//! build no `.proto` compiler; a test recompiles `protos/` with protox and fails when the two
//! differ. After vendoring, rewrite it with
//! `CTRLKIT_PROTOBUF_WRITE_FDS=1 cargo test -p ctrlkit-protobuf descriptor_set`.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod body;
mod decode;
mod error;
mod go;
mod schema;
pub mod transcode;
pub mod watch;
mod wire;

pub use body::{Envelope, List, ObjectName, envelope, list};
pub use decode::{DecodeOptions, from_slice, json_depth};
pub use error::Error;

/// The media type of Kubernetes' protobuf encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The media type of a watch in protobuf (length-delimited frames, see [`watch`]).
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// Whether objects of `kind` in `api_version` have a protobuf message here: `v1` (core, and
/// the `meta.k8s.io` kinds `Status`, `WatchEvent`, `DeleteOptions`, …), `meta.k8s.io/v1`,
/// `apiextensions.k8s.io/v1` and the vendored versions of the built-in groups (`apps/v1`,
/// `rbac.authorization.k8s.io/v1`, `networking.k8s.io/v1`, … see the crate docs). Custom
/// resources have none, nor kinds newer than Kubernetes v1.36.2.
pub fn has_message(api_version: &str, kind: &str) -> bool {
    schema::message_for(api_version, kind).is_some()
}

#[cfg(test)]
mod descriptor_set;
