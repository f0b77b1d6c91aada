//! Which resource a request's path names: its group, version, resource, namespace, name,
//! subresource, and the CRD version view it asks through.

use std::sync::Arc;

use crate::conversion;
use crate::http::state::Shared;
use crate::model::status::{ApiError, ApiResult};
use crate::registry::Target;
use crate::registry::stages::Version;

/// A resolved resource path.
#[derive(Clone)]
pub(crate) struct Route {
    pub(crate) target: Target,
    pub(crate) status: bool,
    /// `/scale`.
    pub(crate) scale: bool,
    /// A CRD version other than the storage version (the target is the storage version's):
    /// the requested version's type, and how to convert.
    pub(crate) view: Option<Version>,
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
    let (resource, view) = match conversion::view_of(store, &rt) {
        Some(view) => (view.storage, Some(Version { requested: rt, converter: Arc::new(view) })),
        None => (resource, None),
    };
    let target =
        Target { resource, namespace: namespace.map(str::to_owned), name: name.map(str::to_owned) };
    Ok(Route { target, status, scale, view })
}
