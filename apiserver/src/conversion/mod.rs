//! Layer 2, CRD conversion. It imports `model`, `storage`, the registry's stages and the
//! `webhook` client, and offers the registry's [`Converter`] ([`View`]) to the layers above.
//!
//! The versions of a multi-version CustomResourceDefinition: every served version is a view
//! of the objects stored at the storage version, converted on the way in and out, as the
//! real server converts them.
//!
//! Contract:
//! - An object written at any served version is stored at the CRD's storage version (the one
//!   with `storage: true`) and read, listed and watched at every served version.
//! - `spec.conversion.strategy: None` (the default) changes `apiVersion` alone;
//!   `Webhook` sends a `ConversionReview` (`apiextensions.k8s.io/v1`) to
//!   `spec.conversion.webhook.clientConfig.url` over HTTPS, trusting its `caBundle` alone,
//!   and takes its `convertedObjects` (checked: as many, each at the desired version, each the
//!   same object: uid, name, namespace kept). A list is converted in one review.
//! - A failed conversion answers 500 `conversion webhook for group/version, Kind=Kind
//!   failed: …` (the webhook's `result.message`, or the call's failure: `Post
//!   "URL?timeout=30s": dial tcp …`), with no reason, as kube-apiserver v1.36.2 words it.
//! - A patch at a view version is applied to the object converted to that version and
//!   converted back; server-side apply at a version that is not the storage version is
//!   refused (400): this server applies at the storage version alone.
//!
//! [`View`] is the registry's [`Converter`]: the registry converts what is written (see
//! `registry::writes`), the HTTP layer what is answered (the `views` module).

use std::time::Duration;

use base64::Engine;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::model::status::{ApiError, ApiResult};
use crate::registry::stages::Converter;
use crate::storage::store::{Store, object_key};

/// The time a conversion webhook gets (the real server's default).
const TIMEOUT: Duration = Duration::from_secs(30);

/// A served version that is not the storage version: where its objects are stored, and the
/// CRD that says how to convert them.
#[derive(Debug, Clone)]
pub(crate) struct View {
    /// The storage version's resource.
    pub(crate) storage: usize,
    /// The CRD.
    crd: Value,
}

/// The view `rt` is, if it is a CRD's version other than its storage version.
pub(crate) fn view_of(store: &Store, rt: &ResourceType) -> Option<View> {
    if !rt.from_definition {
        return None;
    }
    let definitions = store.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")?;
    let name = format!("{}.{}", rt.plural, rt.group);
    let crd = store.read(|txn| txn.get(definitions, &object_key(None, &name)))?.value();
    let storage = crd["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))?["name"]
        .as_str()?
        .to_owned();
    if storage == rt.version {
        return None;
    }
    let id = store.resource(&rt.group, &storage, &rt.plural)?;
    Some(View { storage: id, crd })
}

impl View {
    /// A view of the CRD `crd` (its storage version's resource `storage`), for tests.
    #[cfg(test)]
    pub(crate) fn of(crd: Value, storage: usize) -> Self {
        Self { storage, crd }
    }

    /// `objects` converted to `desired` (`group/version`), in order; those already there are
    /// left as they are.
    pub(crate) async fn convert(
        &self,
        objects: Vec<Value>,
        desired: &str,
    ) -> ApiResult<Vec<Value>> {
        if objects.iter().all(|o| o["apiVersion"] == desired) {
            return Ok(objects);
        }
        let conversion = &self.crd["spec"]["conversion"];
        if conversion["strategy"] != "Webhook" {
            return Ok(objects
                .into_iter()
                .map(|mut o| {
                    o["apiVersion"] = json!(desired);
                    o
                })
                .collect());
        }
        let kind = self.crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
        let from = objects
            .iter()
            .find(|o| o["apiVersion"] != desired)
            .map_or("", |o| o["apiVersion"].as_str().unwrap_or_default())
            .to_owned();
        let failed = |why: String| {
            ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "",
                format!("conversion webhook for {from}, Kind={kind} failed: {why}"),
            )
        };
        let config = &conversion["webhook"]["clientConfig"];
        let Some(url) = config["url"].as_str() else {
            return Err(failed("a service reference cannot be reached from the embedded API server; use clientConfig.url".into()));
        };
        let ca = config["caBundle"]
            .as_str()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
        let uid = crate::model::ids::new_uid();
        let review = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": { "uid": uid, "desiredAPIVersion": desired, "objects": objects },
        });
        let text = crate::webhook::post(
            url,
            ca.as_deref(),
            TIMEOUT,
            serde_json::to_vec(&review).unwrap_or_default(),
        )
        .await
        .map_err(failed)?;
        let answer: Value =
            crate::model::shapes::from_slice(text.as_bytes()).map_err(|e| failed(e.to_string()))?;
        let response = &answer["response"];
        if response["uid"] != json!(uid) {
            return Err(failed(format!(
                "expected response.uid={uid:?}, got {:?}",
                response["uid"].as_str().unwrap_or_default()
            )));
        }
        if response["result"]["status"] != "Success" {
            let message = response["result"]["message"].as_str().unwrap_or_default();
            return Err(failed(message.to_owned()));
        }
        let converted = response["convertedObjects"].as_array().cloned().unwrap_or_default();
        if converted.len() != objects.len() {
            return Err(failed(format!(
                "returned {} objects, expected {}",
                converted.len(),
                objects.len()
            )));
        }
        for (before, after) in objects.iter().zip(&converted) {
            if after["apiVersion"] != desired {
                return Err(failed(format!(
                    "invalid apiVersion {} of a converted object, expected {desired:?}",
                    after["apiVersion"]
                )));
            }
            for field in ["uid", "name", "namespace"] {
                if before["metadata"][field] != after["metadata"][field] {
                    return Err(failed(format!("the converted object's metadata.{field} changed")));
                }
            }
        }
        Ok(converted)
    }
}

impl Converter for View {
    fn convert<'a>(
        &'a self,
        objects: Vec<Value>,
        api_version: &'a str,
    ) -> BoxFuture<'a, ApiResult<Vec<Value>>> {
        Box::pin(View::convert(self, objects, api_version))
    }
}
