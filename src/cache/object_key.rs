//! [`ObjectKey`]: how the cache and the queue name an object, in client-go's
//! `namespace/name` form.

use std::fmt;
use std::str::FromStr;

use kube_client::Resource;

use super::handler::Deleted;

/// An object's namespace and name: `"namespace/name"`, or `"name"` when cluster-scoped.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl ObjectKey {
    /// The key of a namespaced object.
    pub fn namespaced(namespace: &str, name: &str) -> Self {
        Self { namespace: Some(namespace.to_owned()), name: name.to_owned() }
    }

    /// The key of a cluster-scoped object.
    pub fn cluster(name: &str) -> Self {
        Self { namespace: None, name: name.to_owned() }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Why a string is not an object key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid object key {0:?}: expected \"namespace/name\" or \"name\"")]
pub struct InvalidKey(pub String);

impl FromStr for ObjectKey {
    type Err = InvalidKey;

    /// Parses client-go's key form, as `cache.SplitMetaNamespaceKey` does.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            [name] if !name.is_empty() => Ok(Self::cluster(name)),
            [ns, name] if !name.is_empty() => {
                // client-go accepts "/name" as a cluster-scoped key.
                Ok(if ns.is_empty() { Self::cluster(name) } else { Self::namespaced(ns, name) })
            }
            _ => Err(InvalidKey(s.to_owned())),
        }
    }
}

/// Why an object has no key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("object has no name")]
pub struct NoName;

/// client-go's `MetaNamespaceKeyFunc`: the key of an object from its metadata.
pub fn meta_namespace_key_func<K: Resource>(object: &K) -> Result<ObjectKey, NoName> {
    let meta = object.meta();
    let name = meta.name.as_deref().filter(|n| !n.is_empty()).ok_or(NoName)?;
    Ok(match meta.namespace.as_deref().filter(|n| !n.is_empty()) {
        Some(ns) => ObjectKey::namespaced(ns, name),
        None => ObjectKey::cluster(name),
    })
}

/// client-go's `DeletionHandlingMetaNamespaceKeyFunc`: the key of a deleted object, which may
/// be a tombstone (`DeletedFinalStateUnknown`) carrying its key.
pub fn deletion_handling_meta_namespace_key_func<K: Resource>(
    deleted: &Deleted<K>,
) -> Result<ObjectKey, NoName> {
    match deleted {
        Deleted::Object(object) => meta_namespace_key_func(object.as_ref()),
        Deleted::Tombstone(tombstone) => Ok(tombstone.key.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_strings() {
        let k: ObjectKey = "default/web-0".parse().unwrap();
        assert_eq!(k, ObjectKey::namespaced("default", "web-0"));
        assert_eq!(k.to_string(), "default/web-0");
        let c: ObjectKey = "node-1".parse().unwrap();
        assert_eq!(c, ObjectKey::cluster("node-1"));
        assert_eq!(c.to_string(), "node-1");
        assert_eq!("/node-1".parse::<ObjectKey>().unwrap(), ObjectKey::cluster("node-1"));
        for bad in ["", "a/b/c", "ns/", "/"] {
            assert!(bad.parse::<ObjectKey>().is_err(), "{bad:?}");
        }
    }
}
