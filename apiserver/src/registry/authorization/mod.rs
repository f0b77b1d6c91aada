//! The strategies of `authorization.k8s.io` (kube's `pkg/registry/authorization`): imports
//! `auth` (the RBAC authorizer) and the registry's trait.

pub(crate) mod subjectaccessreview;
