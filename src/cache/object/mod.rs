//! How the cache represents one object, from the bytes the server sent to what a reader gets:
//!
//! - [`strip`]: `metadata.managedFields` removed from the JSON text before it is decoded;
//! - [`depth`]: objects nested past the informer's `max_depth` skipped, and deeper decodes
//!   up to it;
//! - [`prepare`]: each object's way from the server to the store (managedFields, the user's
//!   [`Transform`], the encoding of a store that keeps JSON);
//! - [`stored`]: the value a store and the handlers' queues hold, JSON text or decoded;
//! - [`hot_set`]: which JSON-kept objects stay decoded, at most [`DEFAULT_HOT_OBJECTS`].
//!
//! The rest of the cache (reflector, informer, indexer, processor) handles objects only
//! through these.

pub(crate) mod depth;
pub(crate) mod hot_set;
pub(crate) mod prepare;
pub(crate) mod stored;
pub(crate) mod strip;

pub use depth::DEFAULT_MAX_DEPTH;
pub use hot_set::DEFAULT_HOT_OBJECTS;
pub use prepare::Transform;
