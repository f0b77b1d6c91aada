//! Validating and mutating webhook configurations as the real server takes them: defaulted on
//! every write (`failurePolicy: Fail`, `matchPolicy: Equivalent`, empty selectors,
//! `timeoutSeconds: 10`, rule `scope: "*"`, and `reinvocationPolicy: Never` for mutating
//! ones), and refused with 422 listing every invalid field in kube-apiserver v1.36's words.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::model::status::{ApiError, ApiResult};
use crate::registry::Strategy;

/// Defaults `configuration` (of `kind`) in place, or refuses it.
pub(crate) fn default_and_validate(kind: &str, configuration: &mut Value) -> ApiResult<()> {
    let mutating = kind == "MutatingWebhookConfiguration";
    let mut problems = Vec::new();
    let mut names = HashSet::new();
    let hooks = configuration["webhooks"].as_array_mut().map(std::mem::take).unwrap_or_default();
    let mut defaulted = Vec::new();
    for (i, mut hook) in hooks.into_iter().enumerate() {
        let at = format!("webhooks[{i}]");
        default_hook(&mut hook, mutating);
        check_hook(&hook, &at, mutating, &mut names, &mut problems);
        defaulted.push(hook);
    }
    if !defaulted.is_empty() {
        configuration["webhooks"] = Value::Array(defaulted);
    }
    if problems.is_empty() {
        return Ok(());
    }
    let name = configuration["metadata"]["name"].as_str().unwrap_or_default();
    let listed = match problems.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let mut err = ApiError::invalid(kind, name, "");
    err.message = format!("{kind}.admissionregistration.k8s.io \"{name}\" is invalid: {listed}");
    // kubectl lists the causes, one per line.
    for problem in &problems {
        let (field, what) = problem.split_once(": ").unwrap_or(("", problem));
        let reason = match what.split(':').next().unwrap_or_default() {
            "Required value" => "FieldValueRequired",
            "Unsupported value" => "FieldValueNotSupported",
            "Duplicate value" => "FieldValueDuplicate",
            _ => "FieldValueInvalid",
        };
        err = err.with_cause(reason, what, field);
    }
    Err(err)
}

fn default_hook(hook: &mut Value, mutating: bool) {
    let Some(fields) = hook.as_object_mut() else { return };
    let mut set = |field: &str, value: Value| {
        fields.entry(field).or_insert(value);
    };
    set("failurePolicy", json!("Fail"));
    set("matchPolicy", json!("Equivalent"));
    set("namespaceSelector", json!({}));
    set("objectSelector", json!({}));
    set("timeoutSeconds", json!(10));
    if mutating {
        set("reinvocationPolicy", json!("Never"));
    }
    for rule in fields.get_mut("rules").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(rule) = rule.as_object_mut() {
            rule.entry("scope").or_insert(json!("*"));
        }
    }
}

/// `field: Unsupported value: "x": supported values: "a", "b"` unless `value` is one of them.
fn one_of(value: &Value, field: &str, allowed: &[&str], problems: &mut Vec<String>) {
    let Some(text) = value.as_str() else { return };
    if !allowed.contains(&text) {
        let supported: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
        problems.push(format!(
            "{field}: Unsupported value: {text:?}: supported values: {}",
            supported.join(", ")
        ));
    }
}

fn check_hook(
    hook: &Value,
    at: &str,
    mutating: bool,
    names: &mut HashSet<String>,
    problems: &mut Vec<String>,
) {
    let name = hook["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        problems.push(format!("{at}.name: Required value"));
    } else if name.split('.').filter(|s| !s.is_empty()).count() < 3 {
        problems.push(format!(
            "{at}.name: Invalid value: {name:?}: should be a domain with at least three segments separated by dots"
        ));
    } else if !names.insert(name.to_owned()) {
        problems.push(format!("{at}.name: Duplicate value: {name:?}"));
    }
    for (r, rule) in hook["rules"].as_array().into_iter().flatten().enumerate() {
        let operations = rule["operations"].as_array().into_iter().flatten();
        for (o, operation) in operations.enumerate() {
            let field = format!("{at}.rules[{r}].operations[{o}]");
            one_of(operation, &field, &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"], problems);
        }
        let field = format!("{at}.rules[{r}].scope");
        one_of(&rule["scope"], &field, &["*", "Cluster", "Namespaced"], problems);
    }
    one_of(&hook["failurePolicy"], &format!("{at}.failurePolicy"), &["Fail", "Ignore"], problems);
    one_of(&hook["matchPolicy"], &format!("{at}.matchPolicy"), &["Equivalent", "Exact"], problems);
    if mutating {
        let field = format!("{at}.reinvocationPolicy");
        one_of(&hook["reinvocationPolicy"], &field, &["IfNeeded", "Never"], problems);
    }
    match hook["sideEffects"].as_str() {
        None | Some("") => problems.push(format!(
            "{at}.sideEffects: Required value: must specify one of None, NoneOnDryRun"
        )),
        Some(_) => {
            let field = format!("{at}.sideEffects");
            one_of(&hook["sideEffects"], &field, &["None", "NoneOnDryRun"], problems);
        }
    }
    if let Some(timeout) = hook["timeoutSeconds"].as_i64()
        && !(1..=30).contains(&timeout)
    {
        problems.push(format!(
            "{at}.timeoutSeconds: Invalid value: {timeout}: the timeout value must be between 1 and 30 seconds"
        ));
    }
    let config = &hook["clientConfig"];
    match (config["url"].as_str(), config.get("service").filter(|s| !s.is_null())) {
        (Some(url), None) => {
            let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
            if scheme != "https" {
                problems.push(format!(
                    "{at}.clientConfig.url: Invalid value: {scheme:?}: 'https' is the only allowed URL scheme; desired format: https://host[/path]"
                ));
            }
        }
        (None, Some(_)) => {}
        _ => problems.push(format!(
            "{at}.clientConfig: Required value: exactly one of url or service is required"
        )),
    }
    let versions: Vec<&str> =
        crate::model::json::strings(hook, "admissionReviewVersions").collect();
    if versions.is_empty() {
        problems.push(format!(
            "{at}.admissionReviewVersions: Required value: must specify one of v1, v1beta1"
        ));
    } else if !versions.iter().any(|v| matches!(*v, "v1" | "v1beta1")) {
        problems.push(format!(
            "{at}.admissionReviewVersions: Invalid value: {}: must include at least one of v1, v1beta1",
            serde_json::to_string(&versions).unwrap_or_default()
        ));
    }
}

/// The registry's rules for webhook configurations: defaulted and validated on create and on
/// update, as kube-apiserver's strategies for them do; their writes pass no webhook, so that
/// a webhook cannot lock its own configuration in.
pub(crate) struct ConfigurationStrategy;

impl Strategy for ConfigurationStrategy {
    fn admitted(&self) -> bool {
        false
    }
    fn validate_create(&self, rt: &ResourceType, configuration: &mut Value) -> ApiResult<()> {
        default_and_validate(&rt.kind, configuration)
    }
    fn prepare_update(&self, rt: &ResourceType, configuration: &mut Value) -> ApiResult<()> {
        default_and_validate(&rt.kind, configuration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_written_and_every_problem_is_listed_in_the_real_servers_words() {
        let mut good = json!({ "metadata": { "name": "ok" }, "webhooks": [{
            "name": "a.example.com", "clientConfig": { "url": "https://127.0.0.1:1/x" },
            "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"] }],
        }]});
        default_and_validate("MutatingWebhookConfiguration", &mut good).unwrap();
        let hook = &good["webhooks"][0];
        assert_eq!(
            (&hook["failurePolicy"], &hook["matchPolicy"], &hook["timeoutSeconds"]),
            (&json!("Fail"), &json!("Equivalent"), &json!(10))
        );
        assert_eq!(
            (&hook["reinvocationPolicy"], &hook["rules"][0]["scope"]),
            (&json!("Never"), &json!("*"))
        );
        let mut bad = json!({ "metadata": { "name": "bad" }, "webhooks": [
            { "name": "a.example.com", "clientConfig": { "url": "http://127.0.0.1:1/x" } },
            { "name": "nodot", "clientConfig": {}, "sideEffects": "None",
              "admissionReviewVersions": ["v1"], "timeoutSeconds": 31, "failurePolicy": "Maybe" },
        ]});
        let err = default_and_validate("ValidatingWebhookConfiguration", &mut bad).unwrap_err();
        // The whole message, as both real servers word it, is the protocol suite's
        // (`admission::webhook_configurations_are_defaulted_or_refused_naming_each_field`).
        assert_eq!(err.code, 422);
        assert!(err.message.starts_with(
            "ValidatingWebhookConfiguration.admissionregistration.k8s.io \"bad\" is invalid: [webhooks[0].sideEffects: Required value"
        ));
        assert_eq!(err.causes.len(), 7);
        assert_eq!(err.causes[3]["field"], "webhooks[1].name");
        assert_eq!(err.causes[4]["reason"], "FieldValueNotSupported");
    }
}
