//! The strategy of `admissionregistration.k8s.io`'s admission policies and their bindings
//! (validating and mutating): none is served by default, and a user may register them
//! (`ApiServerBuilder::resource`); as on the real server, their writes pass no webhook.

use crate::registry::Strategy;

/// Writes pass no webhook; every other hook is the generic one.
pub(crate) struct PolicyStrategy;

impl Strategy for PolicyStrategy {
    fn admitted(&self) -> bool {
        false
    }
}
