//! How the store keeps an object: as its JSON text (the default store, and a compact one), with
//! a decoded copy while the object is in the store's hot set (the default store's: see the
//! `hot_set` module); or decoded and shared (a store of
//! [`Indexer::decoded`](crate::cache::Indexer::decoded)).
//!
//! A decoded k8s-openapi object takes about nine times the bytes of its JSON (a pod's
//! optional sub-objects are inline and mostly empty; see `benches/pod_bytes.rs`), so a store of
//! JSON holds a tenth of the memory and pays a decode on a read of an object that is not hot.
//! The same [`Stored`] value travels from the list to the store and to the handlers' queues,
//! so a large list never holds its objects decoded all at once: each is decoded when a reader
//! or a handler asks.
//!
//! An object is stored compactly only if its kind's JSON reads back: the first object a
//! compact store encodes is decoded again, and if that fails the store keeps every object
//! decoded, with a warning. An object whose text later fails to decode (a type whose
//! `Serialize` and `Deserialize` disagree only for some values) is logged as an error and
//! read as absent.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use kube_client::Resource;
use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::hot_set::{Entry, HotSet};
use crate::cache::ObjectKey;
use crate::cache::metadata_changed::{metadata_changed, metadata_fingerprint};

/// One object as the store holds it; cloning shares it.
pub(crate) enum Stored<K> {
    /// Decoded, shared with every reader.
    Shared(Arc<K>),
    /// JSON text, decoded on a read unless hot.
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
    /// serde_json's own output, so a decode need not check its UTF-8 again.
    json: Box<str>,
    /// The object's key, so that handlers that need only keys decode nothing.
    key: ObjectKey,
    /// Compared by a relist to tell changed objects from unchanged ones.
    resource_version: Option<Box<str>>,
    /// `metadata.generation`, and a fingerprint of the metadata an update's handlers compare
    /// (see the `metadata_changed` module): what changed is told without a decode.
    generation: Option<i64>,
    metadata: u64,
    decode: fn(&str) -> serde_json::Result<K>,
    /// The store's hot set, if it keeps one.
    hot: Option<Arc<HotSet<Compact<K>>>>,
    /// The object decoded, while it is hot.
    decoded: Mutex<Option<Arc<K>>>,
    /// Read since the hot set last passed it.
    referenced: AtomicBool,
}

impl<K> Entry for Compact<K> {
    fn pass(&self, last: bool) -> bool {
        if self.referenced.swap(false, Ordering::Relaxed) && !last {
            return false;
        }
        // Dropped outside this object's lock, so its readers do not wait for the frees.
        let evicted = self.decoded.lock().take();
        drop(evicted);
        true
    }
}

impl<K> Compact<K> {
    /// Makes `object` this one's decoded copy, in the hot set.
    fn make_hot(self: &Arc<Self>, object: &Arc<K>) {
        if let Some(hot) = &self.hot {
            *self.decoded.lock() = Some(object.clone());
            hot.admit(self);
        }
    }

    /// Whether its decoded copy is kept now (for tests).
    #[cfg(test)]
    pub(crate) fn is_hot(&self) -> bool {
        self.decoded.lock().is_some()
    }
}

impl<K> Stored<K> {
    /// The object: shared if decoded or hot, else decoded now (and made hot, in a store with
    /// a hot set); `None` (logged) if its text does not decode.
    pub(crate) fn load(&self) -> Option<Arc<K>> {
        match self {
            Self::Shared(o) => Some(o.clone()),
            Self::Compact(c) => {
                if let Some(object) = c.decoded.lock().clone() {
                    c.referenced.store(true, Ordering::Relaxed);
                    return Some(object);
                }
                let object = Arc::new(Self::decode(c)?);
                c.make_hot(&object);
                Some(object)
            }
        }
    }

    /// The object as [`load`](Self::load) gives it, without making it hot: for reads made
    /// on the store's own behalf (index values, an object being replaced), not a user's.
    pub(crate) fn load_transient(&self) -> Option<Arc<K>> {
        match self {
            Self::Shared(o) => Some(o.clone()),
            Self::Compact(c) => match c.decoded.lock().clone() {
                Some(object) => Some(object),
                None => Self::decode(c).map(Arc::new),
            },
        }
    }

    /// A compact object's text decoded; `None` (logged) if it does not decode.
    fn decode(c: &Compact<K>) -> Option<K> {
        match (c.decode)(&c.json) {
            Ok(object) => Some(object),
            Err(err) => {
                tracing::error!(
                    error = %err,
                    "a compact store's object did not decode from its own JSON; read as absent"
                );
                None
            }
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
    /// The object's key, without decoding it; `None` for an object without a name.
    pub(crate) fn key(&self) -> Option<ObjectKey> {
        match self {
            Self::Shared(o) => crate::cache::meta_namespace_key_func(o.as_ref()).ok(),
            Self::Compact(c) => Some(c.key.clone()),
        }
    }

    /// The object's `metadata.resourceVersion`.
    pub(crate) fn resource_version(&self) -> Option<&str> {
        match self {
            Self::Shared(o) => o.meta().resource_version.as_deref(),
            Self::Compact(c) => c.resource_version.as_deref(),
        }
    }

    /// The object's `metadata.generation`, without decoding it.
    pub(crate) fn generation(&self) -> Option<i64> {
        match self {
            Self::Shared(o) => o.meta().generation,
            Self::Compact(c) => c.generation,
        }
    }

    /// Whether the metadata a controller acts on differs between `self` and `other` (see the
    /// `metadata_changed` module), without decoding either.
    pub(crate) fn metadata_changed(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Shared(a), Self::Shared(b)) => metadata_changed(a.meta(), b.meta()),
            _ => self.metadata_fingerprint() != other.metadata_fingerprint(),
        }
    }

    fn metadata_fingerprint(&self) -> u64 {
        match self {
            Self::Shared(o) => metadata_fingerprint(o.meta()),
            Self::Compact(c) => c.metadata,
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
    encode: fn(&K) -> serde_json::Result<String>,
    decode: fn(&str) -> serde_json::Result<K>,
    checked: Arc<AtomicU8>,
    hot: Option<Arc<HotSet<Compact<K>>>>,
}

impl<K> Clone for Codec<K> {
    fn clone(&self) -> Self {
        Self {
            encode: self.encode,
            decode: self.decode,
            checked: self.checked.clone(),
            hot: self.hot.clone(),
        }
    }
}

impl<K: Serialize + DeserializeOwned> Codec<K> {
    /// serde_json both ways (a decode as deep as the informer's), with a hot set of `hot`
    /// objects (none: 0).
    pub(crate) fn json(hot: usize) -> Self {
        Self {
            encode: |o| serde_json::to_string(o),
            decode: |text| super::depth::from_own_str(text),
            checked: Arc::new(AtomicU8::new(UNCHECKED)),
            hot: (hot > 0).then(|| Arc::new(HotSet::new(hot))),
        }
    }
}

impl<K: Resource> Codec<K> {
    /// `object` as the store keeps it: compact unless its kind's JSON does not read back (or
    /// this object does not encode), then shared. With `hot` (an object just written by a
    /// watch event), it joins the hot set, if the store keeps one.
    pub(crate) fn store(&self, object: Arc<K>, hot: bool) -> Stored<K> {
        if self.checked.load(Ordering::Relaxed) == DOES_NOT_READ_BACK {
            return Stored::Shared(object);
        }
        // An object without a name is never stored (the informer drops it first).
        let Ok(key) = crate::cache::meta_namespace_key_func(object.as_ref()) else {
            return Stored::Shared(object);
        };
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
        let compact = Arc::new(Compact {
            json: json.into_boxed_str(),
            key,
            resource_version: object.meta().resource_version.as_deref().map(Box::from),
            generation: object.meta().generation,
            metadata: metadata_fingerprint(object.meta()),
            decode: self.decode,
            hot: self.hot.clone(),
            decoded: Mutex::new(None),
            referenced: AtomicBool::new(false),
        });
        if hot {
            compact.make_hot(&object);
        }
        Stored::Compact(compact)
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
        let codec = Codec::<Pod>::json(0);
        let stored = codec.store(Arc::new(pod()), false);
        let Stored::Compact(compact) = &stored else { panic!("stored decoded: {stored:?}") };
        assert_eq!(compact.json.len(), serde_json::to_vec(&pod()).unwrap().len());
        assert_eq!(stored.resource_version(), pod().metadata.resource_version.as_deref());
        let first = stored.load().unwrap();
        assert_eq!(*first, pod());
        // Every read is its own decode.
        assert!(!Arc::ptr_eq(&first, &stored.load().unwrap()));
        assert!(stored.same(&stored.clone()));
        assert!(!stored.same(&codec.store(Arc::new(pod()), false)));
    }

    #[test]
    fn a_kind_whose_json_does_not_read_back_is_kept_decoded() {
        let codec = Codec::<Pod> {
            decode: |_| serde_json::from_str("{\"metadata\": 5}"),
            ..Codec::json(0)
        };
        for _ in 0..2 {
            let object = Arc::new(pod());
            let stored = codec.store(object.clone(), false);
            assert!(matches!(&stored, Stored::Shared(o) if Arc::ptr_eq(o, &object)));
        }
    }

    #[test]
    fn an_object_that_does_not_decode_later_reads_as_absent() {
        // Checked on the first object, then text that no longer decodes.
        let codec = Codec::<Pod>::json(0);
        codec.store(Arc::new(pod()), false);
        let broken = Codec::<Pod> { decode: |text| serde_json::from_str(&text[1..]), ..codec };
        let stored = broken.store(Arc::new(pod()), false);
        assert!(matches!(stored, Stored::Compact(_)));
        assert!(stored.load().is_none());
    }

    fn named(name: &str) -> Arc<Pod> {
        let mut pod = pod();
        pod.metadata.name = Some(name.into());
        Arc::new(pod)
    }

    fn is_hot(stored: &Stored<Pod>) -> bool {
        matches!(stored, Stored::Compact(c) if c.is_hot())
    }

    #[test]
    fn a_read_decodes_a_cold_object_once_and_later_reads_share_it() {
        let codec = Codec::<Pod>::json(2);
        let stored = codec.store(named("a"), false);
        assert!(!is_hot(&stored), "a listed object is not hot");
        let first = stored.load().unwrap();
        assert!(is_hot(&stored));
        assert!(Arc::ptr_eq(&first, &stored.load().unwrap()));
        assert_eq!(*first, *named("a"));
    }

    #[test]
    fn an_object_a_watch_wrote_is_hot_at_once() {
        let codec = Codec::<Pod>::json(1);
        let object = named("a");
        let stored = codec.store(object.clone(), true);
        assert!(Arc::ptr_eq(&object, &stored.load().unwrap()));
    }

    #[test]
    fn the_hot_set_holds_at_most_its_capacity_sparing_an_object_read_again() {
        let codec = Codec::<Pod>::json(2);
        let [a, b, c] = ["a", "b", "c"].map(|name| codec.store(named(name), false));
        a.load();
        b.load();
        a.load();
        c.load();
        assert!(is_hot(&a), "read again since it was made hot: spared");
        assert!(!is_hot(&b), "the oldest not read again goes");
        assert!(is_hot(&c));
        assert_eq!(codec.hot.as_ref().unwrap().len(), 2);
        // b read again is decoded anew, and the oldest unread one goes now.
        let again = b.load().unwrap();
        assert!(is_hot(&b));
        assert_eq!([&a, &b, &c].iter().filter(|s| is_hot(s)).count(), 2);
        assert_eq!(*again, *named("b"));
    }

    #[test]
    fn an_object_gone_from_the_store_leaves_the_hot_set_without_counting() {
        let codec = Codec::<Pod>::json(1);
        let a = codec.store(named("a"), true);
        drop(a);
        let b = codec.store(named("b"), true);
        assert!(is_hot(&b), "the dropped object's entry gave way");
        assert_eq!(codec.hot.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn a_transient_read_does_not_make_an_object_hot() {
        let codec = Codec::<Pod>::json(2);
        let stored = codec.store(named("a"), false);
        assert_eq!(*stored.load_transient().unwrap(), *named("a"));
        assert!(!is_hot(&stored));
        assert_eq!(stored.key(), Some(ObjectKey::namespaced("default", "a")), "the key, undecoded");
    }
}
