//! The `ConfigMapSet` CustomResourceDefinition: v1 (stored) and v2, converted by the
//! example's conversion webhook.
//!
//! - `--print-crd` prints it as a cluster deployment installs it
//!   (`examples/configmap_sets.crd.yaml`): the conversion webhook is the Service
//!   `configmap-sets-webhook` in `default`, port 443, in front of the replicas'
//!   `--webhook-port`.
//! - Run with `--webhook-port`, the example applies it with the conversion webhook at its own
//!   URL (`https://HOST:PORT/convert-configmapsets`), v1 stored unless `--storage-version v2`
//!   (a migration under way: the controller still reads v1, so every list of its informer
//!   is converted by this process's own webhook, which its Manager serves before the caches).
//! - Run without, it creates the CRD with v1 alone when the cluster lacks it: v2 cannot be
//!   served without the conversion webhook (a v2 read would fail).

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, ServiceReference, WebhookClientConfig,
    WebhookConversion,
};
use kube::CustomResourceExt;
use kube::core::crd::merge_crds;
use kube_client::api::{Patch, PatchParams, PostParams};
use kube_client::{Api, Client};

use super::{CRD_NAME, ConfigMapSet, FIELD_MANAGER, v2};

/// Where the API server sends the CRD's conversion reviews.
pub enum ConvertAt {
    /// The Service `configmap-sets-webhook` in `default` (a cluster deployment).
    Service,
    /// A URL (the example's own server).
    Url(String),
}

/// Both versions, `stored` (`v1` or `v2`) stored, converted by the webhook at `at`.
pub fn both_versions(at: ConvertAt, stored: &str) -> CustomResourceDefinition {
    let mut crd = merge_crds(vec![ConfigMapSet::crd(), v2::ConfigMapSet::crd()], stored)
        .expect("two single-version CRDs of one kind merge");
    let client_config = match at {
        ConvertAt::Service => WebhookClientConfig {
            service: Some(ServiceReference {
                name: "configmap-sets-webhook".into(),
                namespace: "default".into(),
                path: Some(super::CONVERT_PATH.into()),
                port: Some(443),
            }),
            ..WebhookClientConfig::default()
        },
        ConvertAt::Url(url) => WebhookClientConfig { url: Some(url), ..Default::default() },
    };
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            client_config: Some(client_config),
            conversion_review_versions: vec!["v1".into()],
        }),
    });
    crd
}

/// The CRD as YAML, as `examples/configmap_sets.crd.yaml` holds it.
pub fn yaml() -> Result<String, String> {
    let crd = both_versions(ConvertAt::Service, "v1");
    let yaml = serde_saphyr::to_string(&crd).map_err(|e| e.to_string())?;
    Ok(format!(
        "# The custom resource of examples/configmap_sets/, generated from its kube-derive types:\n\
         # cargo run --example configmap_sets -- --print-crd > examples/configmap_sets.crd.yaml\n\
         # v1 is stored; v2 is converted by the example's webhook, here the Service\n\
         # default/configmap-sets-webhook (port 443 to the replicas' --webhook-port).\n\
         {yaml}"
    ))
}

/// Makes the cluster serve the sets, and waits until the CRD is established: with
/// `convert_at`, both versions converted there, `stored` the storage version (applied
/// whatever the cluster has); without, v1 alone, created only if the cluster has no such CRD.
pub async fn ensure(
    client: &Client,
    convert_at: Option<String>,
    stored: &str,
) -> Result<(), String> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = CRD_NAME;
    match convert_at {
        Some(url) => {
            let crd = both_versions(ConvertAt::Url(url), stored);
            let params = PatchParams::apply(FIELD_MANAGER).force();
            crds.patch(name, &params, &Patch::Apply(&crd))
                .await
                .map_err(|e| format!("applying CRD {name}: {e}"))?;
            println!("Applied the CustomResourceDefinition {name} (v1 and v2, {stored} stored)");
        }
        None => {
            let missing =
                crds.get_opt(name).await.map_err(|e| format!("reading CRD {name}: {e}"))?.is_none();
            if missing {
                match crds.create(&PostParams::default(), &ConfigMapSet::crd()).await {
                    Ok(_) => println!("Applied the CustomResourceDefinition {name} (v1)"),
                    Err(kube_client::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(format!("creating CRD {name}: {e}")),
                }
            }
        }
    }
    for _ in 0..300 {
        let current = crds.get(name).await.map_err(|e| format!("reading CRD {name}: {e}"))?;
        let established = current
            .status
            .and_then(|s| s.conditions)
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"));
        if established {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("the CRD {name} was not established within 30 s"))
}
