//! [`apply_status`]: a server-side apply of the status alone through the `/status`
//! subresource, as the field manager that owns it.
//!
//! An apply body must name its `apiVersion` and `kind`; a kube-derive type's status struct
//! does not carry them, so by hand a status apply is a `json!` with both typed in, and a
//! typo is a 400 at run time. [`apply_status`] takes them from the type. The apply is forced:
//! a controller is the one writer of its status fields, so a field another manager (an old
//! version of the controller, `kubectl edit`) took is taken back, as controller-runtime's
//! status writers and kube-runtime's examples do.

use std::fmt::Debug;

use kube_client::api::{Patch, PatchParams};
use kube_client::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Applies `status` as the status of `object` (its name; the namespace is `api`'s) through
/// `/status`, as `field_manager`, forced; returns the object as stored. `apiVersion` and
/// `kind` come from `K`. Fields of the status that `status` leaves out and that
/// `field_manager` applied before are removed, as any apply removes them; to write one
/// field alone, serialize only that field.
///
/// Errors are the server's (a 404 once the object is gone, a 422 for a status its schema
/// refuses); an object without a name is refused before any request, by kube-client's
/// request validation.
///
/// ```no_run
/// # async fn demo(client: kube_client::Client, deployment: k8s_openapi::api::apps::v1::Deployment) -> Result<(), kube_client::Error> {
/// use ctrlkit::status::apply_status;
/// use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
/// use kube_client::Api;
///
/// let deployments: Api<Deployment> = Api::namespaced(client, "default");
/// let status = DeploymentStatus { observed_generation: deployment.metadata.generation, ..Default::default() };
/// apply_status(&deployments, &deployment, &status, "example.com/my-controller").await?;
/// # Ok(()) }
/// ```
pub async fn apply_status<K, S>(
    api: &Api<K>,
    object: &K,
    status: &S,
    field_manager: &str,
) -> Result<K, kube_client::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
    S: Serialize + ?Sized,
{
    let name = object.meta().name.as_deref().unwrap_or_default();
    let body = status_body::<K, S>(status)?;
    let params = PatchParams::apply(field_manager).force();
    api.patch_status(name, &params, &Patch::Apply(body)).await
}

/// The apply body: `apiVersion` and `kind` of `K`, and `status`.
pub(super) fn status_body<K, S>(status: &S) -> Result<serde_json::Value, kube_client::Error>
where
    K: Resource,
    K::DynamicType: Default,
    S: Serialize + ?Sized,
{
    let types = K::DynamicType::default();
    let status = serde_json::to_value(status).map_err(kube_client::Error::SerdeError)?;
    Ok(serde_json::json!({
        "apiVersion": K::api_version(&types),
        "kind": K::kind(&types),
        "status": status,
    }))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};

    use super::*;

    #[test]
    fn the_body_names_the_type_and_holds_the_status() {
        let status = DeploymentStatus { replicas: Some(3), ..Default::default() };
        let body = status_body::<Deployment, _>(&status).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "status": { "replicas": 3 },
            })
        );
    }
}
