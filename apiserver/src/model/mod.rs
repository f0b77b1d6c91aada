//! Layer 0, the model: the resource table, API errors as `metav1.Status`, ids and times,
//! JSON helpers, object shapes and the vendored OpenAPI. It imports only itself and offers
//! these plain types and functions to every layer above; it knows nothing of storage or HTTP.

pub(crate) mod ids;
pub(crate) mod json;
pub(crate) mod resources;
pub(crate) mod shapes;
pub(crate) mod status;
pub(crate) mod typed_fields;
pub(crate) mod vendored;
