//! The one error of the crate: what failed, and in which message and field.

/// A body, frame or JSON object that could not be decoded or encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The body does not start with the 4 bytes `k8s\0` of Kubernetes' protobuf encoding.
    #[error("not a Kubernetes protobuf body: it does not start with the magic number k8s\\0")]
    NotProtobuf,
    /// The envelope names a kind with no message here: a custom resource, or a kind this
    /// crate does not vendor (empty names when the envelope or the JSON has none).
    #[error(
        "{kind:?} in version {api_version:?} has no protobuf message here (custom resources have none)"
    )]
    UnknownKind {
        /// The envelope's `apiVersion`.
        api_version: String,
        /// The envelope's `kind`.
        kind: String,
    },
    /// The envelope's `contentEncoding` is set (Kubernetes never sets it).
    #[error("the body has contentEncoding {0:?}, which is not supported")]
    ContentEncoding(String),
    /// Bytes that are not a message of the expected type: a truncated varint, a length past
    /// the end, a wrong wire type, invalid UTF-8, embedded JSON that does not parse.
    #[error("malformed protobuf in {at}: {why}")]
    Malformed {
        /// The message or field being read (`k8s.io.api.core.v1.PodSpec.containers`).
        at: String,
        /// What was wrong.
        why: String,
    },
    /// A JSON object that does not fit its message (a list where a string belongs).
    #[error("the JSON does not fit the message: {0}")]
    Json(String),
    /// An object nested deeper than `DecodeOptions::max_depth` (objects and arrays, counted
    /// as in its JSON, embedded JSON included).
    #[error("the object nests deeper than {max_depth} levels")]
    TooDeep {
        /// The limit it passed.
        max_depth: usize,
    },
    /// A field number the vendored message lacks, met with
    /// `DecodeOptions::deny_unknown_fields` on: the server is likely newer than the vendored
    /// protos, and its JSON would carry the field.
    #[error(
        "{message} has no field number {number} in the vendored protos (a newer server's field?)"
    )]
    UnknownField {
        /// The message's full name (`k8s.io.api.core.v1.PodSpec`).
        message: String,
        /// The field's number on the wire.
        number: u32,
    },
    /// A value that does not fit the type being decoded into (the type's own message).
    #[error("{0}")]
    Deserialize(String),
    /// A watch frame whose length is over the reader's maximum.
    #[error("a watch frame of {length} bytes, over the maximum of {max}")]
    FrameTooLong {
        /// The frame's length.
        length: usize,
        /// The reader's maximum.
        max: usize,
    },
    /// A watch stream that ended inside a frame.
    #[error("the watch stream ended inside a frame ({left} bytes left over)")]
    CutFrame {
        /// The bytes of the cut frame.
        left: usize,
    },
}

impl Error {
    pub(crate) fn malformed(at: impl Into<String>, why: impl std::fmt::Display) -> Self {
        Error::Malformed { at: at.into(), why: why.to_string() }
    }
}
