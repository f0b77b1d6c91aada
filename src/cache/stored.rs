//! How the store keeps an object: decoded and shared (the default), or, in a compact store
//! ([`Indexer::compact`](super::Indexer::compact)), as its JSON text, decoded again on every
//! read.
//!
//! A decoded k8s-openapi object takes about nine times the bytes of its JSON (a pod's
//! optional sub-objects are inline and mostly empty; see `benches/pod_bytes.rs`), so a compact
//! store holds a tenth of the memory and pays a decode on every read. The same [`Stored`] value
//! travels from the list to the store and to the handlers' queues, so a large list never
//! holds its objects decoded all at once: each is decoded when a reader or a handler asks.
//!
//! An object is stored compactly only if its kind's JSON reads back: the first object a
//! compact store encodes is decoded again, and if that fails the store keeps every object
//! decoded, with a warning. An object whose text later fails to decode (a type whose
//! `Serialize` and `Deserialize` disagree only for some values) is logged as an error and
//! read as absent.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use kube_client::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// One object as the store holds it; cloning shares it.
pub(crate) enum Stored<K> {
    /// Decoded, shared with every reader.
    Shared(Arc<K>),
    /// JSON text, decoded on each read.
    Compact(Arc<Compact<K>>),
}

impl<K> Clone for Stored<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Shared(o) => Self::Shared(o.clone()),
            Self::Compact(c) => Self::Compact(c.clone()),
        }
    }
}

impl<K> std::fmt::Debug for Stored<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Shared(_) => f.write_str("Shared"),
            Self::Compact(c) => write!(f, "Compact({} bytes)", c.json.len()),
        }
    }
}

/// An object's JSON, with what the informer needs of it without decoding.
pub(crate) struct Compact<K> {
    json: Box<[u8]>,
    /// Compared by a relist to tell changed objects from unchanged ones.
    resource_version: Option<Box<str>>,
    decode: fn(&[u8]) -> serde_json::Result<K>,
}

impl<K> Stored<K> {
    /// The object, decoded if compact; `None` (logged) if its text does not decode.
    pub(crate) fn load(&self) -> Option<Arc<K>> {
        match self {
            Self::Shared(o) => Some(o.clone()),
            Self::Compact(c) => match (c.decode)(&c.json) {
                Ok(object) => Some(Arc::new(object)),
                Err(err) => {
                    tracing::error!(
                        error = %err,
                        "a compact store's object did not decode from its own JSON; read as absent"
                    );
                    None
                }
            },
        }
    }

    /// Whether `self` and `other` are the same stored object (not merely equal ones).
    pub(crate) fn same(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Shared(a), Self::Shared(b)) => Arc::ptr_eq(a, b),
            (Self::Compact(a), Self::Compact(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl<K: Resource> Stored<K> {
    /// The object's `metadata.resourceVersion`.
    pub(crate) fn resource_version(&self) -> Option<&str> {
        match self {
            Self::Shared(o) => o.meta().resource_version.as_deref(),
            Self::Compact(c) => c.resource_version.as_deref(),
        }
    }
}

/// Whether a compact store has checked that its kind's JSON reads back.
const UNCHECKED: u8 = 0;
const READS_BACK: u8 = 1;
const DOES_NOT_READ_BACK: u8 = 2;

/// How a compact store turns objects into [`Stored::Compact`]; shared by the store and the
/// decoding threads of a list.
pub(crate) struct Codec<K> {
    encode: fn(&K) -> serde_json::Result<Vec<u8>>,
    decode: fn(&[u8]) -> serde_json::Result<K>,
    checked: Arc<AtomicU8>,
}

impl<K> Clone for Codec<K> {
    fn clone(&self) -> Self {
        Self { encode: self.encode, decode: self.decode, checked: self.checked.clone() }
    }
}

impl<K: Serialize + DeserializeOwned> Codec<K> {
    /// serde_json both ways.
    pub(crate) fn json() -> Self {
        Self {
            encode: |o| serde_json::to_vec(o),
            decode: |b| serde_json::from_slice(b),
            checked: Arc::new(AtomicU8::new(UNCHECKED)),
        }
    }
}

impl<K: Resource> Codec<K> {
    /// `object` as the store keeps it: compact unless its kind's JSON does not read back (or
    /// this object does not encode), then shared.
    pub(crate) fn store(&self, object: Arc<K>) -> Stored<K> {
        if self.checked.load(Ordering::Relaxed) == DOES_NOT_READ_BACK {
            return Stored::Shared(object);
        }
        let json = match (self.encode)(&object) {
            Ok(json) => json,
            Err(err) => {
                tracing::warn!(error = %err, "an object did not encode to JSON; stored decoded");
                return Stored::Shared(object);
            }
        };
        if self.checked.load(Ordering::Relaxed) == UNCHECKED {
            let outcome = match (self.decode)(&json) {
                Ok(_) => READS_BACK,
                Err(err) => {
                    tracing::warn!(
                        error = %err,
                        "this kind's JSON does not read back; the compact store keeps objects decoded"
                    );
                    DOES_NOT_READ_BACK
                }
            };
            self.checked.store(outcome, Ordering::Relaxed);
            if outcome == DOES_NOT_READ_BACK {
                return Stored::Shared(object);
            }
        }
        Stored::Compact(Arc::new(Compact {
            json: json.into_boxed_slice(),
            resource_version: object.meta().resource_version.as_deref().map(Box::from),
            decode: self.decode,
        }))
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web-1", "namespace": "default", "resourceVersion": "42",
                "labels": {"app": "web"},
            },
            "spec": {"containers": [{"name": "main", "image": "nginx:1.27", "args": ["-g"]}]},
            "status": {"phase": "Running"},
        }))
        .unwrap()
    }

    #[test]
    fn a_compact_object_reads_back_equal_and_keeps_its_version_outside_the_text() {
        let codec = Codec::<Pod>::json();
        let stored = codec.store(Arc::new(pod()));
        let Stored::Compact(compact) = &stored else { panic!("stored decoded: {stored:?}") };
        assert_eq!(compact.json.len(), serde_json::to_vec(&pod()).unwrap().len());
        assert_eq!(stored.resource_version(), pod().metadata.resource_version.as_deref());
        let first = stored.load().unwrap();
        assert_eq!(*first, pod());
        // Every read is its own decode.
        assert!(!Arc::ptr_eq(&first, &stored.load().unwrap()));
        assert!(stored.same(&stored.clone()));
        assert!(!stored.same(&codec.store(Arc::new(pod()))));
    }

    #[test]
    fn a_kind_whose_json_does_not_read_back_is_kept_decoded() {
        let codec =
            Codec::<Pod> { decode: |_| serde_json::from_str("{\"metadata\": 5}"), ..Codec::json() };
        for _ in 0..2 {
            let object = Arc::new(pod());
            let stored = codec.store(object.clone());
            assert!(matches!(&stored, Stored::Shared(o) if Arc::ptr_eq(o, &object)));
        }
    }

    #[test]
    fn an_object_that_does_not_decode_later_reads_as_absent() {
        // Checked on the first object, then text that no longer decodes.
        let codec = Codec::<Pod>::json();
        codec.store(Arc::new(pod()));
        let broken = Codec::<Pod> { decode: |b| serde_json::from_slice(&b[1..]), ..codec };
        let stored = broken.store(Arc::new(pod()));
        assert!(matches!(stored, Stored::Compact(_)));
        assert!(stored.load().is_none());
    }
}
