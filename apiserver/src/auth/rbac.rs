//! RBAC's decision for a `SubjectAccessReview`, from the stored ClusterRoles, Roles and their
//! bindings, as kube-apiserver's RBAC authorizer decides it: a user or one of its groups
//! bound (by a ClusterRoleBinding anywhere, or a RoleBinding in the request's namespace) to a
//! role with a rule that covers the request. `system:masters` is allowed everything, as the
//! real server's superuser group.

use serde_json::Value;

use crate::model::json::strings;
use crate::storage::store::{Store, object_key};

/// What is asked: a non-resource URL, or a resource.
pub(crate) enum Asked<'a> {
    /// `nonResourceAttributes`.
    Path { path: &'a str, verb: &'a str },
    /// `resourceAttributes`.
    Resource {
        namespace: &'a str,
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        subresource: &'a str,
        name: &'a str,
    },
}

/// Whether `user` (with `groups`) may do what is `asked`, and the reason the real server
/// gives for an allow.
pub(crate) fn decide(
    store: &Store,
    user: &str,
    groups: &[String],
    asked: &Asked<'_>,
) -> (bool, String) {
    if groups.iter().any(|g| g == "system:masters") {
        return (true, String::new());
    }
    let objects = |plural: &str, namespace: Option<&str>| -> Vec<Value> {
        let Some(resource) = store.resource("rbac.authorization.k8s.io", "v1", plural) else {
            return Vec::new();
        };
        store.read(|txn| txn.list(resource, namespace)).iter().map(|o| o.value()).collect()
    };
    let namespace = match asked {
        Asked::Resource { namespace, .. } if !namespace.is_empty() => Some(*namespace),
        _ => None,
    };
    let mut bindings: Vec<(Value, &str)> = objects("clusterrolebindings", None)
        .into_iter()
        .map(|b| (b, "ClusterRoleBinding"))
        .collect();
    if let Some(ns) = namespace {
        bindings.extend(objects("rolebindings", Some(ns)).into_iter().map(|b| (b, "RoleBinding")));
    }
    for (binding, binding_kind) in &bindings {
        let Some(subject) = binding["subjects"].as_array().into_iter().flatten().find(|s| {
            let name = s["name"].as_str().unwrap_or_default();
            match s["kind"].as_str() {
                Some("User") => name == user,
                Some("Group") => groups.iter().any(|g| g == name),
                _ => false,
            }
        }) else {
            continue;
        };
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
        let role_name = binding["roleRef"]["name"].as_str().unwrap_or_default();
        let role = match (role_kind, namespace) {
            ("ClusterRole", _) => lookup(store, "clusterroles", None, role_name),
            ("Role", Some(ns)) if *binding_kind == "RoleBinding" => {
                lookup(store, "roles", Some(ns), role_name)
            }
            _ => None,
        };
        let Some(role) = role else { continue };
        if role["rules"].as_array().into_iter().flatten().any(|rule| covers(rule, asked)) {
            let binding_name = binding["metadata"]["name"].as_str().unwrap_or_default();
            let scope = match binding["metadata"]["namespace"].as_str() {
                Some(ns) => format!(" in namespace {ns:?}"),
                None => String::new(),
            };
            let reason = format!(
                "RBAC: allowed by {binding_kind} {binding_name:?} of {role_kind} {role_name:?} to {} {:?}{scope}",
                subject["kind"].as_str().unwrap_or_default(),
                subject["name"].as_str().unwrap_or_default(),
            );
            return (true, reason);
        }
    }
    (false, String::new())
}

fn lookup(store: &Store, plural: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
    let resource = store.resource("rbac.authorization.k8s.io", "v1", plural)?;
    store.read(|txn| txn.get(resource, &object_key(namespace, name))).map(|o| o.value())
}

/// Whether `rule` (a PolicyRule) covers `asked`.
fn covers(rule: &Value, asked: &Asked<'_>) -> bool {
    let any_or = |field: &str, value: &str| strings(rule, field).any(|v| v == "*" || v == value);
    match asked {
        Asked::Path { path, verb } => {
            any_or("verbs", verb)
                && strings(rule, "nonResourceURLs").any(|url| match url.strip_suffix('*') {
                    Some(prefix) => path.starts_with(prefix),
                    None => url == *path,
                })
        }
        Asked::Resource { verb, group, resource, subresource, name, .. } => {
            let full = match subresource.is_empty() {
                true => resource.to_string(),
                false => format!("{resource}/{subresource}"),
            };
            let names: Vec<&str> = strings(rule, "resourceNames").collect();
            any_or("verbs", verb)
                && any_or("apiGroups", group)
                && strings(rule, "resources").any(|r| {
                    r == "*"
                        || r == full
                        || (!subresource.is_empty() && r == format!("*/{subresource}"))
                })
                && (names.is_empty() || names.contains(name))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rules_cover_paths_by_prefix_and_resources_by_group_verb_and_name() {
        let metrics = json!({ "nonResourceURLs": ["/metrics"], "verbs": ["get"] });
        let path = |path, verb| Asked::Path { path, verb };
        assert!(covers(&metrics, &path("/metrics", "get")));
        assert!(!covers(&metrics, &path("/metrics", "post")));
        assert!(!covers(&metrics, &path("/metricsz", "get")));
        assert!(covers(
            &json!({ "nonResourceURLs": ["/healthz/*"], "verbs": ["*"] }),
            &path("/healthz/ping", "get")
        ));
        let pods = json!({ "apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"], "resourceNames": ["web"] });
        let resource = |verb, resource, subresource, name| Asked::Resource {
            namespace: "default",
            verb,
            group: "",
            resource,
            subresource,
            name,
        };
        assert!(covers(&pods, &resource("get", "pods", "", "web")));
        assert!(covers(&pods, &resource("get", "pods", "log", "web")));
        assert!(!covers(&pods, &resource("get", "pods", "status", "web")));
        assert!(!covers(&pods, &resource("get", "pods", "", "db")));
        assert!(!covers(&pods, &resource("delete", "pods", "", "web")));
    }
}
