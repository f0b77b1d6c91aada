//! [`ObjectKey`]: how the cache and the queue name an object, in client-go's
//! `namespace/name` form.

use std::fmt;
use std::str::FromStr;

use kube_client::Resource;

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

/// The key of an object, from its metadata: what the informer files it under. An object
/// without a name (one with only a `generateName`, before its create) gives an empty name;
/// [`meta_namespace_key_func`] refuses it instead.
impl<K: Resource> From<&K> for ObjectKey {
    fn from(object: &K) -> Self {
        let meta = object.meta();
        Self {
            namespace: meta.namespace.clone().filter(|ns| !ns.is_empty()),
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

/// kube-runtime's reference to an object, as a key (feature `kube-runtime`). By value: a
/// `From<&ObjectRef<K>>` would overlap `From<&K>` (kube-runtime may one day make `ObjectRef`
/// a `Resource`), so clone a borrowed one.
#[cfg(feature = "kube-runtime")]
#[cfg_attr(docsrs, doc(cfg(feature = "kube-runtime")))]
impl<K: kube_runtime::reflector::Lookup + ?Sized> From<kube_runtime::reflector::ObjectRef<K>>
    for ObjectKey
{
    fn from(object: kube_runtime::reflector::ObjectRef<K>) -> Self {
        Self { namespace: object.namespace, name: object.name }
    }
}

/// Why there is no object key: a string that is not one, or an object without a name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The string is not client-go's key form.
    #[error("invalid object key {0:?}: expected \"namespace/name\" or \"name\"")]
    Invalid(String),
    /// The object has no name (yet: a create with `generateName` names it).
    #[error("object has no name")]
    NoName,
}

impl FromStr for ObjectKey {
    type Err = KeyError;

    /// Parses client-go's key form, as `cache.SplitMetaNamespaceKey` does.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            [name] if !name.is_empty() => Ok(Self::cluster(name)),
            [ns, name] if !name.is_empty() => {
                // client-go accepts "/name" as a cluster-scoped key.
                Ok(if ns.is_empty() { Self::cluster(name) } else { Self::namespaced(ns, name) })
            }
            _ => Err(KeyError::Invalid(s.to_owned())),
        }
    }
}

/// client-go's `MetaNamespaceKeyFunc`: the key of an object from its metadata;
/// [`KeyError::NoName`] for an object without a name.
pub fn meta_namespace_key_func<K: Resource>(object: &K) -> Result<ObjectKey, KeyError> {
    let meta = object.meta();
    let name = meta.name.as_deref().filter(|n| !n.is_empty()).ok_or(KeyError::NoName)?;
    Ok(match meta.namespace.as_deref().filter(|n| !n.is_empty()) {
        Some(ns) => ObjectKey::namespaced(ns, name),
        None => ObjectKey::cluster(name),
    })
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

    #[test]
    fn an_object_gives_its_key_and_a_nameless_one_an_empty_name() {
        use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = Some("default".into());
        cm.metadata.name = Some("settings".into());
        assert_eq!(ObjectKey::from(&cm), ObjectKey::namespaced("default", "settings"));
        let mut ns = Namespace::default();
        ns.metadata.name = Some("team".into());
        ns.metadata.namespace = Some(String::new());
        assert_eq!(ObjectKey::from(&ns), ObjectKey::cluster("team"));
        let mut draft = ConfigMap::default();
        draft.metadata.generate_name = Some("settings-".into());
        assert_eq!(ObjectKey::from(&draft).name, "");
        assert_eq!(meta_namespace_key_func(&draft), Err(KeyError::NoName));
    }

    #[cfg(feature = "kube-runtime")]
    #[test]
    fn kube_runtime_references_convert_to_keys() {
        use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
        use kube_runtime::reflector::ObjectRef;
        let cm = ObjectRef::<ConfigMap>::new("settings").within("default");
        assert_eq!(ObjectKey::from(cm), ObjectKey::namespaced("default", "settings"));
        let ns = ObjectRef::<Namespace>::new("team");
        assert_eq!(ObjectKey::from(ns), ObjectKey::cluster("team"));
    }
}
