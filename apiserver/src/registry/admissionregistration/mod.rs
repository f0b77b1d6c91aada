//! The strategy of `admissionregistration.k8s.io`'s webhook configurations (defaulting and
//! validation). It imports `model` and the registry's trait, and offers the strategy the
//! server registers for both the validating and the mutating kinds.

pub(crate) mod webhook_configuration;
