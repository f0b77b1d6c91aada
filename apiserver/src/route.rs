//! Which resource a request's path names: its group, version, resource, namespace, name,
//! subresource, and the CRD version view it asks through.

use std::sync::Arc;

use super::conversion::{self, View};
use super::registry::Target;
use super::resources::ResourceType;
use super::state::Shared;
use super::status::{ApiError, ApiResult};

/// A resolved resource path.
#[derive(Clone)]
pub(crate) struct Route {
    pub(crate) target: Target,
    pub(crate) status: bool,
    /// `/scale`.
    pub(crate) scale: bool,
    /// A CRD version other than the storage version (the target is the storage version's):
    /// how to convert, and the requested version's type.
    pub(crate) view: Option<(View, Arc<ResourceType>)>,
}

pub(crate) fn route(
    shared: &Shared,
    group: &str,
    version: &str,
    rest: &[&str],
) -> ApiResult<Route> {
    let store = &shared.registry.store;
    let lookup =
        |plural: &str| store.resource(group, version, plural).ok_or_else(ApiError::no_route);
    let (namespace, plural, name, sub) = match rest {
        ["namespaces", ns, plural, tail @ ..] if *plural != "status" && *plural != "finalize" => {
            (Some(*ns), *plural, tail.first().copied(), tail.get(1).copied())
        }
        [plural, tail @ ..] => (None, *plural, tail.first().copied(), tail.get(1).copied()),
        [] => return Err(ApiError::bad_request("no resource in path")),
    };
    let resource = lookup(plural)?;
    let rt = store.resource_type(resource);
    if namespace.is_some() && !rt.namespaced {
        return Err(ApiError::no_route());
    }
    if namespace.is_none() && rt.namespaced && name.is_some() {
        return Err(ApiError::no_route());
    }
    let (status, scale) = match sub {
        None => (false, false),
        Some("status") if rt.status_subresource => (true, false),
        Some("scale") if rt.scale_subresource => (false, true),
        Some(_) => {
            return Err(ApiError::no_route());
        }
    };
    let view = conversion::view_of(store, &rt).map(|view| (view, rt.clone()));
    let resource = view.as_ref().map_or(resource, |(view, _)| view.storage);
    let target =
        Target { resource, namespace: namespace.map(str::to_owned), name: name.map(str::to_owned) };
    Ok(Route { target, status, scale, view })
}
