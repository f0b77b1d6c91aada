//! The strategies of `authentication.k8s.io` (kube's `pkg/registry/authentication`): imports
//! `auth` (the authenticator) and the registry's trait.

pub(crate) mod tokenreview;
