//! The strategies of `admissionregistration.k8s.io`: the webhook configurations (defaulting
//! and validation, for both the validating and the mutating kind) and the group's, for the
//! admission policies and every other kind of the group.
//! None of their writes passes a webhook. They import `model` and the registry's trait.

pub(crate) mod policy;
pub(crate) mod webhook_configuration;
