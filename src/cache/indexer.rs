//! [`Indexer`]: the informer's cache, a thread-safe store of objects by key, with named
//! indexes.
//!
//! One writer (the informer), many readers: a clone is a cheap handle on the same store.
//! Indexes stay current on every add, update and delete at the cost of the changed object's
//! own index values; no write scans the store.
//!
//! By default objects are kept decoded and every read shares them (`Arc<K>`). A compact store
//! ([`Indexer::compact`]) keeps each as its JSON, about a ninth of the memory, and decodes it
//! on every read: see [`stored`](super::stored) for the trade.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::ObjectKey;
use super::stored::{Codec, Stored};

/// An index function: the values under which an object is indexed.
type IndexFunc<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// The name of the built-in index of objects by namespace (client-go's
/// `cache.NamespaceIndex`).
pub const NAMESPACE_INDEX: &str = "namespace";

/// Why an index query failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// No index of that name was registered.
    #[error("index {0:?} does not exist")]
    NoSuchIndex(String),
    /// An index of that name exists already.
    #[error("index {0:?} already exists")]
    Conflict(String),
    /// A key string could not be parsed.
    #[error(transparent)]
    InvalidKey(#[from] super::object_key::InvalidKey),
}

struct State<K> {
    items: HashMap<ObjectKey, Stored<K>>,
    /// Set in a compact store: how objects are encoded.
    codec: Option<Codec<K>>,
    indexers: HashMap<String, IndexFunc<K>>,
    /// index name → index value → keys. Invariant: a key is under a value exactly when that
    /// index's function returns the value for the key's object.
    indices: HashMap<String, HashMap<String, HashSet<ObjectKey>>>,
}

/// The cache; see the module docs.
pub struct Indexer<K> {
    state: Arc<RwLock<State<K>>>,
}

impl<K> Clone for Indexer<K> {
    fn clone(&self) -> Self {
        Self { state: self.state.clone() }
    }
}

impl<K> std::fmt::Debug for Indexer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Indexer").field("len", &self.read().items.len()).finish()
    }
}

impl<K: kube_client::Resource + Send + Sync + 'static> Default for Indexer<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> Indexer<K> {
    fn read(&self) -> RwLockReadGuard<'_, State<K>> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State<K>> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The object under `key` (`"namespace/name"` or `"name"`), as client-go's `GetByKey`.
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        let key: ObjectKey = key.parse().ok()?;
        self.get(&key)
    }

    /// The object under `key` (in a compact store, decoded now).
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.peek(key)?.load()
    }

    /// Every object, in no particular order (in a compact store, each decoded now).
    pub fn list(&self) -> Vec<Arc<K>> {
        self.list_stored().iter().filter_map(Stored::load).collect()
    }

    /// Every key, in no particular order.
    pub fn list_keys(&self) -> Vec<ObjectKey> {
        self.read().items.keys().cloned().collect()
    }

    /// How many objects the cache holds.
    pub fn len(&self) -> usize {
        self.read().items.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether this store keeps objects as JSON and decodes them on read
    /// ([`Indexer::compact`]).
    pub fn is_compact(&self) -> bool {
        self.read().codec.is_some()
    }

    /// The objects indexed under `value` by index `name` (in a compact store, each decoded
    /// now).
    pub fn by_index(&self, name: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        let stored: Vec<Stored<K>> = {
            let state = self.read();
            let index =
                state.indices.get(name).ok_or_else(|| IndexError::NoSuchIndex(name.to_owned()))?;
            index
                .get(value)
                .map(|keys| keys.iter().filter_map(|k| state.items.get(k).cloned()).collect())
                .unwrap_or_default()
        };
        Ok(stored.iter().filter_map(Stored::load).collect())
    }

    /// The keys indexed under `value` by index `name`.
    pub fn index_keys(&self, name: &str, value: &str) -> Result<Vec<ObjectKey>, IndexError> {
        let state = self.read();
        let index =
            state.indices.get(name).ok_or_else(|| IndexError::NoSuchIndex(name.to_owned()))?;
        Ok(index.get(value).map(|keys| keys.iter().cloned().collect()).unwrap_or_default())
    }

    /// Every value index `name` holds objects under, sorted.
    pub fn list_index_func_values(&self, name: &str) -> Result<Vec<String>, IndexError> {
        let state = self.read();
        let index =
            state.indices.get(name).ok_or_else(|| IndexError::NoSuchIndex(name.to_owned()))?;
        let values: BTreeSet<&String> =
            index.iter().filter(|(_, k)| !k.is_empty()).map(|(v, _)| v).collect();
        Ok(values.into_iter().cloned().collect())
    }

    /// Adds an index named `name`, indexing the objects already cached. client-go refuses
    /// new indexers once an informer started; here they may come at any time.
    pub fn add_index(
        &self,
        name: &str,
        f: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) -> Result<(), IndexError> {
        let mut state = self.write();
        if state.indexers.contains_key(name) {
            return Err(IndexError::Conflict(name.to_owned()));
        }
        let f: IndexFunc<K> = Arc::new(f);
        let mut index: HashMap<String, HashSet<ObjectKey>> = HashMap::new();
        for (key, stored) in &state.items {
            let Some(object) = stored.load() else { continue };
            for value in f(&object) {
                index.entry(value).or_default().insert(key.clone());
            }
        }
        state.indexers.insert(name.to_owned(), f);
        state.indices.insert(name.to_owned(), index);
        Ok(())
    }

    /// Whether `self` and `other` are handles on the same store.
    pub fn same_store(&self, other: &Indexer<K>) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }

    /// The object under `key` as stored (not decoded).
    pub(crate) fn peek(&self, key: &ObjectKey) -> Option<Stored<K>> {
        self.read().items.get(key).cloned()
    }

    /// Every object as stored (not decoded).
    pub(crate) fn list_stored(&self) -> Vec<Stored<K>> {
        self.read().items.values().cloned().collect()
    }

    /// How this store encodes objects, if it is compact.
    pub(crate) fn codec(&self) -> Option<Codec<K>> {
        self.read().codec.clone()
    }

    /// Stores `object` under `key` (encoded, in a compact store); returns the object it
    /// replaced, decoded.
    pub(crate) fn upsert(&self, key: ObjectKey, object: Arc<K>) -> Option<Arc<K>>
    where
        K: kube_client::Resource,
    {
        let mut state = self.write();
        let old = match &state.codec {
            // Decoded: one lock, as before compact stores existed (the watch's hot path).
            None => state
                .items
                .insert(key.clone(), Stored::Shared(object.clone()))
                .and_then(|s| s.load()),
            // Compact: encoding, and decoding the old object for its index values, happen
            // outside the lock, so readers wait only for the swap. The informer is the only
            // writer of items: the old object cannot change in between.
            Some(codec) => {
                let codec = codec.clone();
                drop(state);
                let stored = codec.store(object.clone());
                let old = self.peek(&key).and_then(|s| s.load());
                state = self.write();
                state.items.insert(key.clone(), stored);
                old
            }
        };
        let state = &mut *state;
        update_indices(&state.indexers, &mut state.indices, &key, old.as_deref(), Some(&object));
        old
    }

    /// Removes `key`; returns the object it held, decoded.
    pub(crate) fn remove(&self, key: &ObjectKey) -> Option<Arc<K>> {
        let mut state = self.write();
        let old = match state.items.remove(key)? {
            Stored::Shared(old) => Some(old),
            // Decoded outside the lock, for its index values.
            compact => {
                drop(state);
                let old = compact.load();
                state = self.write();
                old
            }
        };
        let state = &mut *state;
        update_indices(&state.indexers, &mut state.indices, key, old.as_deref(), None);
        old
    }

    /// Replaces the whole content with `items` in one step; returns the entries whose keys
    /// `items` does not have.
    pub(crate) fn replace(
        &self,
        items: HashMap<ObjectKey, Stored<K>>,
    ) -> Vec<(ObjectKey, Stored<K>)> {
        // The indexes are built before the lock is taken (a compact store decodes each
        // object for them, one at a time), unless an index is added meanwhile.
        let indexers = self.read().indexers.clone();
        let mut indices = build_indices(&indexers, &items);
        let mut state = self.write();
        if !same_indexers(&indexers, &state.indexers) {
            indices = build_indices(&state.indexers, &items);
        }
        state.indices = indices;
        let old = std::mem::replace(&mut state.items, items);
        drop(state);
        let state = self.read();
        old.into_iter().filter(|(key, _)| !state.items.contains_key(key)).collect()
    }
}

impl<K: kube_client::Resource + Send + Sync + 'static> Indexer<K> {
    /// An empty cache with the namespace index.
    pub fn new() -> Self {
        Self::with_codec(None)
    }

    /// An empty compact cache with the namespace index: each object is kept as its JSON and
    /// decoded on every read (`get`, `list`, `by_index`, and for each handler it is delivered
    /// to), for about a ninth of the memory of decoded objects. Give it to
    /// [`InformerBuilder::indexer`](super::InformerBuilder::indexer).
    ///
    /// The README's performance section has the figures: a realistic pod takes 3.4 KB here
    /// instead of 29.7 KB, and each read costs a decode (tens of microseconds for a pod)
    /// instead of a reference count. Worth it when the cache is large and each reconcile reads
    /// a few objects; not when code lists the whole cache often.
    pub fn compact() -> Self
    where
        K: serde::Serialize + serde::de::DeserializeOwned,
    {
        Self::with_codec(Some(Codec::json()))
    }

    fn with_codec(codec: Option<Codec<K>>) -> Self {
        let indexer = Self {
            state: Arc::new(RwLock::new(State {
                items: HashMap::new(),
                codec,
                indexers: HashMap::new(),
                indices: HashMap::new(),
            })),
        };
        indexer
            .add_index(NAMESPACE_INDEX, |o: &K| o.meta().namespace.iter().cloned().collect())
            .expect("a new indexer has no indexes");
        indexer
    }
}

type Indices = HashMap<String, HashMap<String, HashSet<ObjectKey>>>;

/// The indexes of `items` under `indexers`.
fn build_indices<K>(
    indexers: &HashMap<String, IndexFunc<K>>,
    items: &HashMap<ObjectKey, Stored<K>>,
) -> Indices {
    let mut indices: Indices = indexers.keys().map(|n| (n.clone(), HashMap::new())).collect();
    if indexers.is_empty() {
        return indices;
    }
    for (key, stored) in items {
        let Some(object) = stored.load() else { continue };
        update_indices(indexers, &mut indices, key, None, Some(&object));
    }
    indices
}

/// Whether two sets of index functions are the same functions under the same names.
fn same_indexers<K>(a: &HashMap<String, IndexFunc<K>>, b: &HashMap<String, IndexFunc<K>>) -> bool {
    a.len() == b.len() && a.iter().all(|(name, f)| b.get(name).is_some_and(|g| Arc::ptr_eq(f, g)))
}

/// Moves `key` from `old`'s index values to `new`'s, touching only the values that differ.
fn update_indices<K>(
    indexers: &HashMap<String, IndexFunc<K>>,
    indices: &mut Indices,
    key: &ObjectKey,
    old: Option<&K>,
    new: Option<&K>,
) {
    for (name, f) in indexers {
        let before = old.map(|o| f(o)).unwrap_or_default();
        let after = new.map(|o| f(o)).unwrap_or_default();
        if before == after {
            continue;
        }
        let index = indices.entry(name.clone()).or_default();
        for value in before.iter().filter(|v| !after.contains(v)) {
            if let Some(keys) = index.get_mut(value) {
                keys.remove(key);
                if keys.is_empty() {
                    index.remove(value);
                }
            }
        }
        for value in after {
            index.entry(value).or_default().insert(key.clone());
        }
    }
}
