//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): creating one starts serving its kind
//! at every served version, as the real server's CRD controllers do, so that a controller (or
//! `kubectl apply -f crd.yaml`) can install its own custom resources on the embedded server.
//!
//! - Create validates what serving needs (group, names, scope, versions; the name must be
//!   `<plural>.<group>`), 422 otherwise; then serves the kind, and writes the CRD's status as
//!   the real server does a moment later: `NamesAccepted` and `Established` conditions,
//!   `acceptedNames`, `storedVersions`.
//! - Create and update refuse list-type declarations kube-apiserver refuses
//!   ([`crd_list_types`](crate::registry::apiextensions::crd_list_types)).
//! - An update re-reads the versions and subresources.
//! - Delete removes every object of the kind (watchers see them `DELETED`) and stops serving
//!   it. (The real server holds the CRD `Terminating` while its instances go.)

use std::sync::Arc;

use serde_json::{Value, json};

use crate::model::ids::now;
use crate::model::resources::{PrinterColumn, ResourceType};
use crate::model::status::{ApiError, ApiResult};
use crate::registry::Strategy;
use crate::registry::apiextensions::crd_list_types::list_type_errors;
use crate::registry::apiextensions::custom_resource::Schemas;
use crate::storage::store::{Store, object_key};

/// The types a CRD serves, one per served version; or why it cannot serve them.
fn served_types(crd: &Value) -> Result<Vec<ResourceType>, String> {
    let spec = &crd["spec"];
    let text = |v: &Value, field: &str| -> Result<String, String> {
        v.as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("{field}: Required value"))
    };
    let group = text(&spec["group"], "spec.group")?;
    let plural = text(&spec["names"]["plural"], "spec.names.plural")?;
    let kind = text(&spec["names"]["kind"], "spec.names.kind")?;
    let namespaced = match spec["scope"].as_str() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => {
            return Err(format!(
                "spec.scope: Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""
            ));
        }
    };
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    if name != format!("{plural}.{group}") {
        return Err(format!(
            "metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
        ));
    }
    let short_names: Vec<&str> = spec["names"]["shortNames"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let versions = spec["versions"].as_array().filter(|v| !v.is_empty());
    let versions = versions.ok_or("spec.versions: Invalid value: null: must have exactly one version marked as storage version")?;
    let mut types = Vec::new();
    for version in versions {
        let name = text(&version["name"], "spec.versions[].name")?;
        if version["served"].as_bool() != Some(true) {
            continue;
        }
        let mut rt = ResourceType::new(&group, &name, &kind, &plural, namespaced)
            .with_short_names(&short_names);
        rt.from_definition = true;
        rt.printer_columns = version["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| PrinterColumn {
                name: c["name"].as_str().unwrap_or_default().to_owned(),
                kind: c["type"].as_str().unwrap_or("string").to_owned(),
                json_path: c["jsonPath"].as_str().unwrap_or_default().to_owned(),
                priority: c["priority"].as_i64().unwrap_or(0) as i32,
            })
            .collect();
        if version["subresources"]["status"].is_object() {
            rt = rt.with_status();
        }
        types.push(rt);
    }
    Ok(types)
}

/// Refuses a CRD that could not be served, or whose list types kube-apiserver refuses.
pub(crate) fn validate(crd: &Value) -> ApiResult<()> {
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    let invalid = |cause: &str| {
        ApiError::invalid("CustomResourceDefinition.apiextensions.k8s.io", name, cause)
    };
    served_types(crd).map_err(|cause| invalid(&cause))?;
    // Several errors read as Go's aggregate of them does: `[a, b]`.
    match list_type_errors(crd).as_slice() {
        [] => Ok(()),
        [one] => Err(invalid(one)),
        many => Err(invalid(&format!("[{}]", many.join(", ")))),
    }
}

/// Serves what `crd` defines and records that in its status.
pub(crate) fn serve(store: &Store, definitions: usize, crd: &Value) {
    let Ok(types) = served_types(crd) else { return };
    let spec = &crd["spec"];
    for rt in types {
        tracing::debug!(group = %rt.group, version = %rt.version, kind = %rt.kind, "serving a custom resource");
        store.register(rt);
    }
    // Every version objects have been stored at, the current storage version last, as the
    // real server keeps them (until a migration removes one by hand).
    let mut storage: Vec<Value> =
        crd["status"]["storedVersions"].as_array().cloned().unwrap_or_default();
    for version in spec["versions"].as_array().into_iter().flatten() {
        if version["storage"].as_bool() == Some(true) && !storage.contains(&version["name"]) {
            storage.push(version["name"].clone());
        }
    }
    let plural = spec["names"]["plural"].clone();
    let kind = spec["names"]["kind"].as_str().unwrap_or_default();
    let status = json!({
        "conditions": [
            {
                "type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                "message": "no conflicts found", "lastTransitionTime": now(),
            },
            {
                "type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted", "lastTransitionTime": now(),
            },
        ],
        "acceptedNames": {
            "plural": plural,
            "singular": spec["names"]["singular"].as_str().map_or_else(|| kind.to_lowercase(), str::to_owned),
            "kind": kind,
            "listKind": spec["names"]["listKind"].as_str().map_or_else(|| format!("{kind}List"), str::to_owned),
            "shortNames": spec["names"]["shortNames"].clone(),
        },
        "storedVersions": storage,
    });
    let name = crd["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    store.write(|txn| {
        let key = object_key(None, &name);
        let Some(current) = txn.get(definitions, &key) else { return };
        let mut value = current.value();
        // Conditions keep their first transition time: only a change of names rewrites them.
        if value["status"]["acceptedNames"] == status["acceptedNames"]
            && value["status"]["storedVersions"] == status["storedVersions"]
        {
            return;
        }
        value["status"] = status;
        txn.put(definitions, &key, value);
    });
}

/// Stops serving what a deleted `crd` defined, deleting its objects first.
pub(crate) fn unserve(store: &Store, crd: &Value) {
    let spec = &crd["spec"];
    let (group, plural) = (
        spec["group"].as_str().unwrap_or_default(),
        spec["names"]["plural"].as_str().unwrap_or_default(),
    );
    let ids: Vec<usize> = store
        .served_types()
        .into_iter()
        .filter(|(_, rt)| rt.group == group && rt.plural == plural)
        .map(|(id, _)| id)
        .collect();
    let namespaced: Vec<bool> = ids.iter().map(|&id| store.resource_type(id).namespaced).collect();
    store.write(|txn| {
        for (&id, &namespaced) in ids.iter().zip(&namespaced) {
            for object in txn.list(id, None) {
                let namespace = namespaced.then_some(object.fields.namespace.as_str());
                let key = object_key(namespace, &object.fields.name);
                txn.remove(id, &key, object.value());
            }
        }
    });
    for id in ids {
        store.unregister(id);
    }
}

/// The registry's rules for CRDs: validated on create and on every update but of `/status`;
/// served once stored (their schemas kept in `schemas`, for the custom resources' strategy),
/// unserved once removed.
pub(crate) struct DefinitionStrategy {
    pub(crate) schemas: Arc<Schemas>,
}

impl Strategy for DefinitionStrategy {
    fn validate_create(&self, _: &ResourceType, crd: &mut Value) -> ApiResult<()> {
        validate(crd)
    }
    fn validate_update(&self, _: &str, _: &Value, crd: &Value, status: bool) -> ApiResult<()> {
        if status { Ok(()) } else { validate(crd) }
    }
    fn stored(&self, store: &Store, definitions: usize, crd: &Value) {
        self.schemas.define(crd);
        serve(store, definitions, crd);
    }
    fn removed(&self, store: &Store, crd: &Value) {
        self.schemas.forget(crd);
        unserve(store, crd);
    }
}
