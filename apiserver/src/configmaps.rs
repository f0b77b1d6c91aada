//! The strategy of core/v1 ConfigMaps: `data` is a `map[string]string` and `binaryData` a
//! `map[string][]byte` in Go, so a write that makes either anything but an object is refused
//! as kube-apiserver's decoder refuses it (see the `typed_fields` module).

use super::registry::Strategy;
use super::resources::ResourceType;
use super::typed_fields::TypedField;

/// The rules of ConfigMaps, registered for core/v1 `configmaps` by the server.
pub(crate) struct ConfigMapStrategy;

impl Strategy for ConfigMapStrategy {
    fn typed_fields(&self, _: &ResourceType) -> Vec<TypedField> {
        vec![
            TypedField::map("ConfigMap", "data", "map[string]string"),
            TypedField::map("ConfigMap", "binaryData", "map[string][]uint8"),
        ]
    }
}
