//! Layer 0, merge: the patch engines, JSON merge and strategic merge patch, and server-side
//! apply with its managed fields, list types and key ordering. It imports only `model` and
//! itself, and offers pure functions on JSON values to the registry above.

pub(crate) mod apply;
pub(crate) mod apply_keys;
pub(crate) mod apply_order;
pub(crate) mod list_types;
pub(crate) mod patch;
