//! Which encoding an informer's reads ask for, and the `Accept` header that asks for it.

use std::str::FromStr;

/// The media type of Kubernetes' protobuf encoding.
pub(crate) const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// The encoding an informer's lists, watches and gets ask the API server for.
///
/// Writes are JSON whatever this says: server-side apply and patches have no protobuf body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireFormat {
    /// JSON for every request.
    Json,
    /// The default: protobuf first and JSON second, as client-go's generated clients ask, for the kinds
    /// that have a protobuf message in `ctrlkit-protobuf` (the built-in kinds of Kubernetes
    /// v1.36.2's API groups and `apiextensions.k8s.io`: `ctrlkit_protobuf::has_message`) and
    /// for metadata-only reads of any kind; JSON alone for the rest (custom resources,
    /// aggregated APIs), so they cost no extra round trip. Each answer
    /// is decoded by its `Content-Type`, so a server that answers JSON anyway is read as
    /// JSON.
    ///
    /// The messages are Kubernetes v1.36.2's. An informer that meets a field they lack (a
    /// newer server's; fields Kubernetes removed that older servers still write, such as
    /// v1.20's `metadata.clusterName`, are skipped, as k8s-openapi's types lack them too)
    /// caches nothing of that list page or event: it switches to JSON for the
    /// rest of its life and relists, with one warning naming the message and field number,
    /// counted by `InformerMetrics::wire_format_fallback`. So its cache never lacks a field
    /// the same object's JSON holds, and a controller writing back from it wipes none.
    Protobuf,
}

/// The environment variable that sets the default [`WireFormat`] of the process's informers:
/// `json` or `protobuf`, as client-go's `KUBE_FEATURE_*` variables set its feature gates'
/// defaults. An informer whose format is set in code keeps it.
pub const WIRE_FORMAT_ENV: &str = "CTRLKIT_WIRE_FORMAT";

/// Protobuf, as client-go's generated clients read built-in kinds, unless
/// [`WIRE_FORMAT_ENV`] names another format (`json`; a value that names none is logged and
/// ignored).
impl Default for WireFormat {
    fn default() -> Self {
        let Ok(text) = std::env::var(WIRE_FORMAT_ENV) else { return Self::Protobuf };
        text.parse().unwrap_or_else(|err| {
            tracing::warn!(%err, variable = WIRE_FORMAT_ENV, "ignored");
            Self::Protobuf
        })
    }
}

impl FromStr for WireFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "json" => Ok(Self::Json),
            "protobuf" => Ok(Self::Protobuf),
            other => Err(format!("{other:?} is not a wire format (json or protobuf)")),
        }
    }
}

/// What a read asks for: whole objects or metadata alone, one or a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read {
    /// A list of whole objects, a watch of them, or one of them.
    Objects,
    /// A list of `PartialObjectMetadata`.
    MetadataList,
    /// A watch of `PartialObjectMetadata`, or one.
    Metadata,
}

/// The `Accept` a read of `kind` in `api_version` sends in `format` (see the module docs of
/// `wire`): protobuf first where the format asks for it and the answer can be protobuf (whole
/// objects of a kind with a message; metadata of any kind); `None` to leave the request's own
/// JSON `Accept`.
pub(crate) fn accept_for(
    api_version: &str,
    kind: &str,
    read: Read,
    format: WireFormat,
) -> Option<&'static str> {
    let protobuf = format == WireFormat::Protobuf
        && (read != Read::Objects || ctrlkit_protobuf::has_message(api_version, kind));
    protobuf.then(|| protobuf_accept(read))
}

/// The `Accept` header of a read in protobuf, with JSON second. Metadata-only reads name `PartialObjectMetadata`, whose message every
/// kind shares, as client-go's metadata client does.
fn protobuf_accept(read: Read) -> &'static str {
    match read {
        Read::Objects => "application/vnd.kubernetes.protobuf,application/json",
        Read::MetadataList => concat!(
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
        ),
        Read::Metadata => concat!(
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
        ),
    }
}

/// How an answer is encoded, by its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// JSON (or anything that is not protobuf: read as JSON, as kube-client does).
    Json,
    /// Protobuf: one `k8s\0`-prefixed object, or length-delimited frames for a watch.
    Protobuf,
}

impl Encoding {
    /// The encoding a `Content-Type` value names (its parameters ignored).
    pub(crate) fn of(content_type: Option<&str>) -> Self {
        let media = content_type.and_then(|t| t.split(';').next()).map(str::trim);
        match media {
            Some(m) if m.eq_ignore_ascii_case(PROTOBUF) => Self::Protobuf,
            _ => Self::Json,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_name_their_encoding() {
        assert_eq!(Encoding::of(Some("application/vnd.kubernetes.protobuf")), Encoding::Protobuf);
        let watch = "application/vnd.kubernetes.protobuf;stream=watch";
        assert_eq!(Encoding::of(Some(watch)), Encoding::Protobuf);
        assert_eq!(Encoding::of(Some("application/json")), Encoding::Json);
        assert_eq!(Encoding::of(Some("text/plain; charset=utf-8")), Encoding::Json);
        assert_eq!(Encoding::of(None), Encoding::Json);
    }

    #[test]
    fn protobuf_is_the_default_unless_the_environment_says_otherwise() {
        // The variable is read, never set, by this crate's tests; CI sets it for whole runs.
        match std::env::var(WIRE_FORMAT_ENV) {
            Err(_) => assert_eq!(WireFormat::default(), WireFormat::Protobuf),
            Ok(text) => assert_eq!(Ok(WireFormat::default()), text.parse()),
        }
    }

    #[test]
    fn wire_formats_parse_from_their_names_and_refuse_others() {
        assert_eq!("Protobuf".parse(), Ok(WireFormat::Protobuf));
        assert_eq!(" json".parse(), Ok(WireFormat::Json));
        assert!("yaml".parse::<WireFormat>().unwrap_err().contains("yaml"));
    }
}
