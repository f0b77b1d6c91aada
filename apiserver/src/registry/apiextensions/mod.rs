//! The strategies of `apiextensions.k8s.io`: CustomResourceDefinitions (with their list-type
//! checks) and the kinds they define. They import `model`, `storage` and the registry's trait,
//! and offer the strategies and CRD schemas that `registry::kinds` registers.

pub(crate) mod crd;
pub(crate) mod crd_list_types;
pub(crate) mod custom_resource;
