//! The strategy of every kind of `admissionregistration.k8s.io` without one of its own: the
//! admission policies and their bindings (validating and mutating; none is served by default,
//! and a user may register them with `ApiServerBuilder::resource`), and any other kind a user
//! registers in the group or a CRD defines there. As on the real server for the policies,
//! their writes pass no webhook.

use crate::registry::Strategy;

/// Writes pass no webhook; every other hook is the generic one.
pub(crate) struct PolicyStrategy;

impl Strategy for PolicyStrategy {
    fn admitted(&self) -> bool {
        false
    }
}
