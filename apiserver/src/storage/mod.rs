//! Layer 0, storage: the versioned object store with its change history (etcd's role), label
//! and field selectors, and list sharding. It imports only `model` and itself, and offers
//! objects, transactions, resourceVersions and change streams to the registry and HTTP above.

pub(crate) mod selectors;
pub(crate) mod shards;
pub(crate) mod store;
