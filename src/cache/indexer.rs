//! [`Indexer`]: the informer's cache, a thread-safe store of objects by key, with named
//! indexes.
//!
//! One writer (the informer), many readers: a clone is a cheap handle on the same store.
//! Indexes stay current on every add, update and delete at the cost of the changed object's
//! own index values; no write scans the store.
//!
//! By default ([`Indexer::new`]) each object is kept as its JSON, about a ninth of the memory
//! of a decoded one, and the objects read or written most recently (a hot set of
//! [`DEFAULT_HOT_OBJECTS`](super::DEFAULT_HOT_OBJECTS)) decoded beside it: a read of a hot
//! object shares it (`Arc<K>`), a read of another decodes it and makes it hot. A store of
//! [`Indexer::decoded`] keeps every object decoded and every read shares it, for controllers
//! that read the whole cache on every reconcile; a compact one ([`Indexer::compact`]) keeps no
//! hot set. See [`stored`](super::object::stored) and `hot_set` for the trade.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::ObjectKey;
use super::object::stored::{Codec, Stored};
use crate::panic::catch;

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
    InvalidKey(#[from] super::object_key::KeyError),
}

struct State<K> {
    items: HashMap<ObjectKey, Stored<K>>,
    indexers: HashMap<String, IndexFunc<K>>,
    /// index name → index value → keys. Invariant: a key is under a value exactly when that
    /// index's function returns the value for the key's object.
    indices: HashMap<String, HashMap<String, HashSet<ObjectKey>>>,
    /// Set when the informer that filled the store was released: `items` and `indices` are
    /// empty, and stay so until a list fills the store again.
    stale: bool,
}

/// The cache; see the module docs.
pub struct Indexer<K> {
    state: Arc<RwLock<State<K>>>,
    /// Set in a store of JSON: how objects are encoded. Fixed when the store is made (clones
    /// share its hot set), so it is read without the lock.
    codec: Option<Codec<K>>,
}

impl<K> Clone for Indexer<K> {
    fn clone(&self) -> Self {
        Self { state: self.state.clone(), codec: self.codec.clone() }
    }
}

impl<K> std::fmt::Debug for Indexer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Indexer").field("len", &self.read().items.len()).finish()
    }
}

impl<K> Default for Indexer<K>
where
    K: kube_client::Resource
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K> Indexer<K> {
    fn read(&self) -> RwLockReadGuard<'_, State<K>> {
        self.state.read()
    }

    fn write(&self) -> RwLockWriteGuard<'_, State<K>> {
        self.state.write()
    }

    /// The object under `key` (`"namespace/name"` or `"name"`), as client-go's `GetByKey`.
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        let key: ObjectKey = key.parse().ok()?;
        self.get(&key)
    }

    /// The object under `key` (decoded now unless the store keeps it decoded).
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.peek(key)?.load()
    }

    /// Every object, in no particular order (those not kept decoded, decoded now).
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

    /// Whether this store keeps objects as JSON and decodes them on read (every store but one
    /// of [`Indexer::decoded`]).
    pub fn is_compact(&self) -> bool {
        self.codec.is_some()
    }

    /// The objects indexed under `value` by index `name` (those not kept decoded, decoded
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
    /// new indexers once an informer started; here they may come at any time. A function that
    /// panics on an object leaves that object out of this index, with an error log naming
    /// both (client-go's informer panics on an index function's error).
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
            for value in index_values(name, &f, key, &mut Lazy::new(Some(stored))) {
                index.entry(value).or_default().insert(key.clone());
            }
        }
        state.indexers.insert(name.to_owned(), f);
        state.indices.insert(name.to_owned(), index);
        Ok(())
    }

    /// Whether the informer that kept this store current was released by its last user (see
    /// [`SharedInformerFactory`](super::SharedInformerFactory)): the store is then empty and
    /// stays so, whatever the server holds. A reader that kept the indexer past its informer's
    /// last [`InformerGuard`](super::InformerGuard) reads an empty store marked stale, never
    /// a copy that silently ages; it asks the factory again for a live one.
    pub fn is_stale(&self) -> bool {
        self.read().stale
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
        self.codec.clone()
    }

    /// Stores `object` under `key` (encoded and hot, in a store of JSON); returns what it
    /// replaced, as stored.
    pub(crate) fn upsert(&self, key: ObjectKey, object: Arc<K>) -> Option<Stored<K>>
    where
        K: kube_client::Resource,
    {
        // Encoding happens before the lock is taken, so readers wait only for the swap.
        let stored = match &self.codec {
            Some(codec) => codec.store(object, true),
            None => Stored::Shared(object),
        };
        let mut state = self.write();
        let state = &mut *state;
        let old = state.items.insert(key.clone(), stored.clone());
        update_indices(&state.indexers, &mut state.indices, &key, old.as_ref(), Some(&stored));
        old
    }

    /// Removes `key`; returns what it held, as stored.
    pub(crate) fn remove(&self, key: &ObjectKey) -> Option<Stored<K>> {
        let mut state = self.write();
        let state = &mut *state;
        let old = state.items.remove(key)?;
        update_indices(&state.indexers, &mut state.indices, key, Some(&old), None);
        Some(old)
    }

    /// Empties the store, its indexes' entries too (their functions stay), and marks it
    /// stale: its informer was released and nothing keeps it current any more.
    pub(crate) fn release(&self) {
        let mut state = self.write();
        let items = std::mem::take(&mut state.items);
        for index in state.indices.values_mut() {
            *index = HashMap::new();
        }
        state.stale = true;
        // The objects are freed after the lock, so readers wait only for the swap.
        drop(state);
        drop(items);
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
        state.stale = false;
        let old = std::mem::replace(&mut state.items, items);
        drop(state);
        let state = self.read();
        old.into_iter().filter(|(key, _)| !state.items.contains_key(key)).collect()
    }
}

impl<K: kube_client::Resource + Send + Sync + 'static> Indexer<K> {
    /// An empty cache with the namespace index, as the informers' default: each object kept
    /// as its JSON, the [`DEFAULT_HOT_OBJECTS`](super::DEFAULT_HOT_OBJECTS) read or written
    /// most recently decoded as well (see the module docs). A read of a hot object is a
    /// reference count; of another, a decode (tens of microseconds for a pod), after which it
    /// is hot. 10,000 realistic pods take about a fifth of the memory of [`Indexer::decoded`]
    /// (`docs/benchmarks/informer.md`).
    pub fn new() -> Self
    where
        K: serde::Serialize + serde::de::DeserializeOwned,
    {
        Self::with_hot_objects(super::DEFAULT_HOT_OBJECTS)
    }

    /// As [`Indexer::new`], with at most `n` objects kept decoded (0: none, as
    /// [`Indexer::compact`]).
    pub fn with_hot_objects(n: usize) -> Self
    where
        K: serde::Serialize + serde::de::DeserializeOwned,
    {
        Self::with_codec(Some(Codec::json(n)))
    }

    /// An empty cache with the namespace index that keeps every object decoded: every read
    /// shares it (`Arc<K>`), none decodes. For controllers that read the whole cache on every
    /// reconcile; it holds about five times the memory of [`Indexer::new`]'s. Give it to
    /// [`InformerBuilder::indexer`](super::InformerBuilder::indexer).
    pub fn decoded() -> Self {
        Self::with_codec(None)
    }

    /// An empty compact cache with the namespace index: each object is kept as its JSON and
    /// decoded on every read (`get`, `list`, `by_index`, and for each handler it is delivered
    /// to), with no hot set: the least memory, a decode on every read. Give it to
    /// [`InformerBuilder::indexer`](super::InformerBuilder::indexer).
    pub fn compact() -> Self
    where
        K: serde::Serialize + serde::de::DeserializeOwned,
    {
        Self::with_hot_objects(0)
    }

    fn with_codec(codec: Option<Codec<K>>) -> Self {
        let indexer = Self {
            state: Arc::new(RwLock::new(State {
                items: HashMap::new(),
                indexers: HashMap::new(),
                indices: HashMap::new(),
                stale: false,
            })),
            codec,
        };
        indexer
            // Its values are read off each object's key (see `index_values`), which leaves an
            // empty namespace out; this function, for the same values, does too.
            .add_index(NAMESPACE_INDEX, |o: &K| {
                o.meta().namespace.iter().filter(|ns| !ns.is_empty()).cloned().collect()
            })
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
        update_indices(indexers, &mut indices, key, None, Some(stored));
    }
    indices
}

/// Whether two sets of index functions are the same functions under the same names.
fn same_indexers<K>(a: &HashMap<String, IndexFunc<K>>, b: &HashMap<String, IndexFunc<K>>) -> bool {
    a.len() == b.len() && a.iter().all(|(name, f)| b.get(name).is_some_and(|g| Arc::ptr_eq(f, g)))
}

/// An object as stored, decoded (without making it hot) the first time an index needs it.
struct Lazy<'a, K> {
    stored: Option<&'a Stored<K>>,
    decoded: Option<Option<Arc<K>>>,
}

impl<'a, K> Lazy<'a, K> {
    fn new(stored: Option<&'a Stored<K>>) -> Self {
        Self { stored, decoded: None }
    }

    fn get(&mut self) -> Option<Arc<K>> {
        let stored = self.stored?;
        self.decoded.get_or_insert_with(|| stored.load_transient()).clone()
    }
}

/// The values index `name` (function `f`) holds the object under `key` at: the built-in
/// namespace index reads them off the key, so a store of JSON decodes nothing for it; any
/// other index calls its function on the object. A function that panics (user code) leaves
/// the object out of its index, with an error log, rather than the informer's task unwound
/// halfway through a write.
fn index_values<K>(
    name: &str,
    f: &IndexFunc<K>,
    key: &ObjectKey,
    object: &mut Lazy<'_, K>,
) -> Vec<String> {
    if object.stored.is_none() {
        return Vec::new();
    }
    if name == NAMESPACE_INDEX {
        return key.namespace.iter().cloned().collect();
    }
    let Some(object) = object.get() else { return Vec::new() };
    catch(|| f(&object)).unwrap_or_else(|panic| {
        tracing::error!(
            index = name,
            object = %key,
            panic,
            "an index function panics; the object is left out of that index"
        );
        Vec::new()
    })
}

/// Moves `key` from `old`'s index values to `new`'s, touching only the values that differ.
fn update_indices<K>(
    indexers: &HashMap<String, IndexFunc<K>>,
    indices: &mut Indices,
    key: &ObjectKey,
    old: Option<&Stored<K>>,
    new: Option<&Stored<K>>,
) {
    let (mut old, mut new) = (Lazy::new(old), Lazy::new(new));
    for (name, f) in indexers {
        let before = index_values(name, f, key, &mut old);
        let after = index_values(name, f, key, &mut new);
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
