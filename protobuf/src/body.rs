//! A body's envelope and a list body's parts, read without decoding the object: what a
//! reader needs to route a body, decode a list's items apart (in parallel, say), and name an
//! item it could not decode.

use crate::Error;
use crate::schema::MAGIC;
use crate::wire::{self, Payload};

/// An object's message with its `apiVersion` and `kind`: a body's `runtime.Unknown`, or an
/// item of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Envelope<'a> {
    /// The object's `apiVersion` (`v1`, `apps/v1`).
    pub api_version: &'a str,
    /// The object's `kind` (`Pod`, `PodList`).
    pub kind: &'a str,
    /// The object's message, without envelope.
    pub raw: &'a [u8],
}

/// The namespace and name of an object, read from its `metadata` alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ObjectName<'a> {
    /// `metadata.namespace` (empty for a cluster-scoped object).
    pub namespace: &'a str,
    /// `metadata.name`.
    pub name: &'a str,
}

fn malformed(at: &str, why: impl std::fmt::Display) -> Error {
    Error::malformed(at, why)
}

fn text<'a>(at: &str, payload: Option<Payload<'a>>) -> Result<&'a str, Error> {
    match payload {
        None => Ok(""),
        Some(Payload::Len(bytes)) => std::str::from_utf8(bytes).map_err(|e| malformed(at, e)),
        Some(_) => Err(malformed(at, "a string that is not length-delimited")),
    }
}

fn bytes<'a>(at: &str, payload: Option<Payload<'a>>) -> Result<&'a [u8], Error> {
    match payload {
        None => Ok(&[]),
        Some(Payload::Len(bytes)) => Ok(bytes),
        Some(_) => Err(malformed(at, "bytes that are not length-delimited")),
    }
}

/// The envelope of a protobuf body: `k8s\0`, then a `runtime.Unknown` whose `typeMeta`
/// names the object and whose `raw` holds its message.
///
/// [`Error::NotProtobuf`] without the magic number, [`Error::ContentEncoding`] when one is
/// set, [`Error::Malformed`] when the envelope does not decode. The kind is not checked:
/// see [`has_message`](crate::has_message).
pub fn envelope(body: &[u8]) -> Result<Envelope<'_>, Error> {
    const AT: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";
    let unknown = body.strip_prefix(MAGIC).ok_or(Error::NotProtobuf)?;
    let [type_meta, raw, encoding] =
        wire::last_fields(unknown, [1, 2, 3]).map_err(|e| malformed(AT, e))?;
    let encoding = text(AT, encoding)?;
    if !encoding.is_empty() {
        return Err(Error::ContentEncoding(encoding.to_owned()));
    }
    let type_meta = bytes(AT, type_meta)?;
    const TYPE_META: &str = "k8s.io.apimachinery.pkg.runtime.TypeMeta";
    let [api_version, kind] =
        wire::last_fields(type_meta, [1, 2]).map_err(|e| malformed(TYPE_META, e))?;
    Ok(Envelope {
        api_version: text(TYPE_META, api_version)?,
        kind: text(TYPE_META, kind)?,
        raw: bytes(AT, raw)?,
    })
}

impl<'a> Envelope<'a> {
    /// The object's namespace and name, from its `metadata` (field 1 of every Kubernetes
    /// object), without decoding the rest: to name an object that failed to decode.
    pub fn object_name(&self) -> Result<ObjectName<'a>, Error> {
        const AT: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta";
        let [metadata] = wire::last_fields(self.raw, [1]).map_err(|e| malformed(self.kind, e))?;
        let metadata = bytes(AT, metadata)?;
        let [name, namespace] =
            wire::last_fields(metadata, [1, 3]).map_err(|e| malformed(AT, e))?;
        Ok(ObjectName { namespace: text(AT, namespace)?, name: text(AT, name)? })
    }
}

/// A list body's parts: its `metadata` (a `ListMeta`) and its items, each decodable alone.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct List<'a> {
    /// The list's `apiVersion`.
    pub api_version: &'a str,
    /// The list's `kind` (`PodList`).
    pub kind: &'a str,
    /// The list's `metadata` message (`resourceVersion`, `continue`, …); see
    /// [`List::metadata`].
    pub metadata: &'a [u8],
    /// The items, in order, each with the list's `apiVersion` and the item kind (the list's
    /// without `List`).
    pub items: Vec<Envelope<'a>>,
}

/// The parts of a list body (`PodList`, `PartialObjectMetadataList`, any `…List` kind): field 1
/// its `ListMeta`, field 2 its items. The items are not decoded.
///
/// [`Error::UnknownKind`] when the envelope's kind does not end in `List` or names no message
/// here, and the errors of [`envelope`].
pub fn list(body: &[u8]) -> Result<List<'_>, Error> {
    let envelope = envelope(body)?;
    let unknown = || Error::UnknownKind {
        api_version: envelope.api_version.to_owned(),
        kind: envelope.kind.to_owned(),
    };
    let item_kind = envelope.kind.strip_suffix("List").ok_or_else(unknown)?;
    if crate::schema::message_for(envelope.api_version, envelope.kind).is_none() {
        return Err(unknown());
    }
    let (mut metadata, mut items, mut pos) = (&[][..], Vec::new(), 0);
    while pos < envelope.raw.len() {
        let (number, payload) =
            wire::field(envelope.raw, &mut pos).map_err(|e| malformed(envelope.kind, e))?;
        match (number, payload) {
            (1, Payload::Len(bytes)) => metadata = bytes,
            (2, Payload::Len(raw)) => {
                items.push(Envelope { api_version: envelope.api_version, kind: item_kind, raw })
            }
            (1 | 2, _) => {
                return Err(malformed(envelope.kind, "a field that is not length-delimited"));
            }
            _ => {}
        }
    }
    Ok(List { api_version: envelope.api_version, kind: envelope.kind, metadata, items })
}
