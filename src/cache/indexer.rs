//! [`Indexer`]: the informer's cache, a thread-safe store of `Arc<K>` by key, with named
//! indexes.
//!
//! One writer (the informer), many readers: a clone is a cheap handle on the same store.
//! Indexes stay current on every add, update and delete at the cost of the changed object's
//! own index values; no write scans the store.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::ObjectKey;

/// An index function: the values under which an object is indexed.
pub type IndexFunc<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

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
    items: HashMap<ObjectKey, Arc<K>>,
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

    /// The object under `key`.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.read().items.get(key).cloned()
    }

    /// Every object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.read().items.values().cloned().collect()
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

    /// The objects indexed under `value` by index `name`.
    pub fn by_index(&self, name: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        let state = self.read();
        let index =
            state.indices.get(name).ok_or_else(|| IndexError::NoSuchIndex(name.to_owned()))?;
        Ok(index
            .get(value)
            .map(|keys| keys.iter().filter_map(|k| state.items.get(k).cloned()).collect())
            .unwrap_or_default())
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
        for (key, object) in &state.items {
            for value in f(object) {
                index.entry(value).or_default().insert(key.clone());
            }
        }
        state.indexers.insert(name.to_owned(), f);
        state.indices.insert(name.to_owned(), index);
        Ok(())
    }

    /// Stores `object` under `key`; returns the object it replaced.
    pub(crate) fn upsert(&self, key: ObjectKey, object: Arc<K>) -> Option<Arc<K>> {
        let mut state = self.write();
        let old = state.items.insert(key.clone(), object.clone());
        let state = &mut *state;
        update_indices(&state.indexers, &mut state.indices, &key, old.as_deref(), Some(&object));
        old
    }

    /// Removes `key`; returns the object it held.
    pub(crate) fn remove(&self, key: &ObjectKey) -> Option<Arc<K>> {
        let mut state = self.write();
        let old = state.items.remove(key)?;
        let state = &mut *state;
        update_indices(&state.indexers, &mut state.indices, key, Some(&old), None);
        Some(old)
    }

    /// Replaces the whole content with `items` in one step; returns the previous content.
    pub(crate) fn replace(&self, items: HashMap<ObjectKey, Arc<K>>) -> HashMap<ObjectKey, Arc<K>> {
        let mut state = self.write();
        let mut indices: HashMap<String, HashMap<String, HashSet<ObjectKey>>> =
            state.indexers.keys().map(|n| (n.clone(), HashMap::new())).collect();
        for (key, object) in &items {
            update_indices(&state.indexers, &mut indices, key, None, Some(object));
        }
        state.indices = indices;
        std::mem::replace(&mut state.items, items)
    }

    /// Whether `self` and `other` are handles on the same store.
    pub fn same_store(&self, other: &Indexer<K>) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }
}

impl<K: kube_client::Resource + Send + Sync + 'static> Indexer<K> {
    /// An empty cache with the namespace index.
    pub fn new() -> Self {
        let indexer = Self {
            state: Arc::new(RwLock::new(State {
                items: HashMap::new(),
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

/// Moves `key` from `old`'s index values to `new`'s, touching only the values that differ.
fn update_indices<K>(
    indexers: &HashMap<String, IndexFunc<K>>,
    indices: &mut HashMap<String, HashMap<String, HashSet<ObjectKey>>>,
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
