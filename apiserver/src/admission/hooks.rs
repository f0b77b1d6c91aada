//! Which webhooks a request goes to: the stored configurations' webhooks, configurations in
//! name order and webhooks in their order, each matched as the real server matches it.
//!
//! - `rules`: an operation (`*` or the one), a group, a version (`*` or the one) and a
//!   resource: `res` or `res/sub`, where `*` stands for any resource and `*` after the slash
//!   for any subresource, the resource itself included (`pods/*` matches `pods` too; `pods`
//!   matches no subresource); `scope` `*`, `Cluster` or `Namespaced`.
//! - `namespaceSelector`: the labels of the object's namespace; of the namespace itself for a
//!   namespace; ignored for other cluster-scoped objects.
//! - `objectSelector`: the labels of the new object or of the old one (either matching will
//!   do).
//! - `matchPolicy`: a write at a CRD version other than the storage version goes, converted,
//!   to a webhook whose rules name the version it was made at; else, under `Equivalent`
//!   (the default), to one whose rules name the storage version, at that version, with
//!   `requestKind` saying the version the write was made at. (The real server would also
//!   find other equivalent versions; this one knows the storage version as the equivalent.)

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use serde_json::Value;

use crate::model::json::strings;
pub(crate) use crate::registry::stages::Operation;
use crate::storage::store::{Store, object_key};

/// One webhook of a stored configuration.
#[derive(Debug, Clone)]
pub(crate) struct Hook {
    /// `webhooks[].name`.
    pub(crate) name: String,
    /// `clientConfig.url`; `None` for a `service` reference (which this server cannot reach).
    pub(crate) url: Option<String>,
    /// `clientConfig.caBundle`, decoded: PEM certificates.
    pub(crate) ca_bundle: Option<Vec<u8>>,
    rules: Vec<Value>,
    namespace_selector: Value,
    object_selector: Value,
    /// `failurePolicy: Ignore`.
    pub(crate) ignore_failure: bool,
    /// `timeoutSeconds`.
    pub(crate) timeout: Duration,
    /// `reinvocationPolicy: IfNeeded`.
    pub(crate) reinvoke: bool,
    /// `matchPolicy: Equivalent` (the default): also called for a write at another version of
    /// a kind its rules name, at the version they name.
    pub(crate) equivalent: bool,
}

/// What a request is, for matching.
#[derive(Debug, Clone)]
pub(crate) struct Attributes {
    pub(crate) operation: Operation,
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) kind: String,
    /// The kind's group and version, where they are not the resource's (`/scale`'s
    /// `autoscaling/v1` `Scale`).
    pub(crate) kind_group_version: Option<(String, String)>,
    pub(crate) resource: String,
    pub(crate) subresource: String,
    pub(crate) namespaced: bool,
    pub(crate) namespace: Option<String>,
    pub(crate) name: String,
}

impl Attributes {
    /// `group/version` (or `version` for the core group).
    pub(crate) fn api_version(&self) -> String {
        match self.group.is_empty() {
            true => self.version.clone(),
            false => format!("{}/{}", self.group, self.version),
        }
    }
}

impl Hook {
    fn from_value(hook: &Value) -> Self {
        let ca_bundle = hook["clientConfig"]["caBundle"]
            .as_str()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
        Self {
            name: hook["name"].as_str().unwrap_or_default().to_owned(),
            url: hook["clientConfig"]["url"].as_str().map(str::to_owned),
            ca_bundle,
            rules: hook["rules"].as_array().cloned().unwrap_or_default(),
            namespace_selector: hook["namespaceSelector"].clone(),
            object_selector: hook["objectSelector"].clone(),
            ignore_failure: hook["failurePolicy"] == "Ignore",
            timeout: Duration::from_secs(hook["timeoutSeconds"].as_u64().unwrap_or(10)),
            reinvoke: hook["reinvocationPolicy"] == "IfNeeded",
            equivalent: hook["matchPolicy"] != "Exact",
        }
    }

    /// Whether a request with `attributes`, on `object` and `old`, goes to this webhook.
    pub(crate) fn matches(
        &self,
        store: &Store,
        attributes: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> bool {
        self.rules.iter().any(|rule| rule_matches(rule, attributes))
            && self.namespace_matches(store, attributes, object.or(old))
            && [object, old].into_iter().flatten().any(|o| selects(&self.object_selector, o))
    }

    fn namespace_matches(
        &self,
        store: &Store,
        attributes: &Attributes,
        object: Option<&Value>,
    ) -> bool {
        if attributes.resource == "namespaces" && attributes.group.is_empty() {
            return object.is_some_and(|o| selects(&self.namespace_selector, o));
        }
        let Some(namespace) = attributes.namespace.as_deref().filter(|_| attributes.namespaced)
        else {
            return true;
        };
        let Some(namespaces) = store.resource("", "v1", "namespaces") else { return true };
        let found = store.read(|txn| txn.get(namespaces, &object_key(None, namespace)));
        match found {
            Some(ns) => selects(&self.namespace_selector, &ns.value()),
            None => selects(&self.namespace_selector, &Value::Null),
        }
    }
}

fn rule_matches(rule: &Value, a: &Attributes) -> bool {
    let any_or = |field: &str, value: &str| strings(rule, field).any(|v| v == "*" || v == value);
    let resource = strings(rule, "resources").any(|entry| {
        let (res, sub) = entry.split_once('/').unwrap_or((entry, ""));
        (res == "*" || res == a.resource) && (sub == "*" || sub == a.subresource)
    });
    let scope = match rule["scope"].as_str().unwrap_or("*") {
        "Cluster" => !a.namespaced,
        "Namespaced" => a.namespaced,
        _ => true,
    };
    any_or("operations", a.operation.as_str())
        && any_or("apiGroups", &a.group)
        && any_or("apiVersions", &a.version)
        && resource
        && scope
}

/// Whether the `LabelSelector` `selector` selects `object` (no selector or `{}`: everything).
pub(crate) fn selects(selector: &Value, object: &Value) -> bool {
    let labels: BTreeMap<&str, &str> = object["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
        .collect();
    let equal = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k.as_str()).copied() == v.as_str());
    let expressions = selector["matchExpressions"].as_array().into_iter().flatten().all(|e| {
        let value = labels.get(e["key"].as_str().unwrap_or_default()).copied();
        let values: Vec<&str> = strings(e, "values").collect();
        match e["operator"].as_str().unwrap_or_default() {
            "In" => value.is_some_and(|v| values.contains(&v)),
            "NotIn" => value.is_none_or(|v| !values.contains(&v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    equal && expressions
}

/// The mutating and the validating webhooks, in the order the server calls them.
pub(crate) fn stored(store: &Store) -> (Vec<Hook>, Vec<Hook>) {
    let of = |plural: &str| -> Vec<Hook> {
        let Some(resource) = store.resource("admissionregistration.k8s.io", "v1", plural) else {
            return Vec::new();
        };
        let mut configurations = store.read(|txn| txn.list(resource, None));
        configurations.sort_by_key(|c| c.value()["metadata"]["name"].as_str().map(str::to_owned));
        configurations
            .iter()
            .flat_map(|c| c.value()["webhooks"].as_array().cloned().unwrap_or_default())
            .map(|hook| Hook::from_value(&hook))
            .collect()
    };
    (of("mutatingwebhookconfigurations"), of("validatingwebhookconfigurations"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attributes(resource: &str, subresource: &str) -> Attributes {
        Attributes {
            operation: Operation::Create,
            group: String::new(),
            version: "v1".into(),
            kind: "Pod".into(),
            kind_group_version: None,
            resource: resource.into(),
            subresource: subresource.into(),
            namespaced: true,
            namespace: Some("default".into()),
            name: "p".into(),
        }
    }

    #[test]
    fn rules_match_resources_and_subresources_as_the_real_server_does() {
        let rule = |resources: Value| json!({ "operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"], "resources": resources, "scope": "*" });
        let pods = attributes("pods", "");
        let status = attributes("pods", "status");
        assert!(rule_matches(&rule(json!(["pods"])), &pods));
        assert!(!rule_matches(&rule(json!(["pods"])), &status));
        assert!(rule_matches(&rule(json!(["pods/*"])), &status));
        assert!(rule_matches(&rule(json!(["pods/*"])), &pods));
        assert!(rule_matches(&rule(json!(["*"])), &pods));
        assert!(!rule_matches(&rule(json!(["*"])), &status));
        assert!(rule_matches(&rule(json!(["*/status"])), &status));
        let mut cluster = rule(json!(["*"]));
        cluster["scope"] = json!("Cluster");
        assert!(!rule_matches(&cluster, &pods));
        let mut update = rule(json!(["pods"]));
        update["operations"] = json!(["UPDATE"]);
        assert!(!rule_matches(&update, &pods));
    }

    #[test]
    fn label_selectors_select_by_labels_and_expressions() {
        let object = json!({ "metadata": { "labels": { "app": "web", "tier": "front" } } });
        assert!(selects(&json!({}), &object));
        assert!(selects(&Value::Null, &object));
        assert!(selects(&json!({ "matchLabels": { "app": "web" } }), &object));
        assert!(!selects(&json!({ "matchLabels": { "app": "db" } }), &object));
        let expression = |op: &str, values: Value| json!({ "matchExpressions": [{ "key": "tier", "operator": op, "values": values }] });
        assert!(selects(&expression("In", json!(["front", "back"])), &object));
        assert!(!selects(&expression("NotIn", json!(["front"])), &object));
        assert!(selects(&expression("Exists", json!([])), &object));
        assert!(!selects(&expression("DoesNotExist", json!([])), &object));
        assert!(selects(&expression("NotIn", json!(["x"])), &json!({})));
    }
}
