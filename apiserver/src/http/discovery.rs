//! Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/{group}`,
//! `/apis/{group}/{version}`, enough for kubectl and kube-client's discovery.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::model::resources::ResourceType;

/// The Kubernetes version the server claims.
pub(crate) const MAJOR: &str = "1";
pub(crate) const MINOR: &str = "36";

pub(crate) fn version() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "gitVersion": format!("v{MAJOR}.{MINOR}.0+ctrlkit"),
        "gitCommit": "ctrlkit",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "n/a (ctrlkit embedded API server)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

pub(crate) fn core_versions(address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": address }],
    })
}

/// The groups other than core, each with its versions, in registration order.
fn groups(resources: &[Arc<ResourceType>]) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for r in resources.iter().filter(|r| !r.group.is_empty()) {
        match groups.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) => {
                if !versions.contains(&r.version) {
                    versions.push(r.version.clone());
                }
            }
            None => groups.push((r.group.clone(), vec![r.version.clone()])),
        }
    }
    groups
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({ "groupVersion": format!("{name}/{v}"), "version": v }))
        .collect();
    json!({
        "name": name,
        "versions": versions,
        "preferredVersion": versions[0],
    })
}

pub(crate) fn group_list(resources: &[Arc<ResourceType>]) -> Value {
    let groups: Vec<Value> = groups(resources).iter().map(|(g, v)| group_json(g, v)).collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

pub(crate) fn group(resources: &[Arc<ResourceType>], name: &str) -> Option<Value> {
    let (name, versions) = groups(resources).into_iter().find(|(g, _)| g == name)?;
    let mut g = group_json(&name, &versions);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

/// The `APIResourceList` of one group version, or `None` if nothing is served there.
pub(crate) fn resource_list(
    resources: &[Arc<ResourceType>],
    group: &str,
    version: &str,
) -> Option<Value> {
    let served: Vec<&Arc<ResourceType>> =
        resources.iter().filter(|r| r.group == group && r.version == version).collect();
    if served.is_empty() {
        return None;
    }
    let mut list = Vec::new();
    for r in served {
        list.push(json!({
            "name": r.plural,
            "singularName": r.singular(),
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            "shortNames": r.short_names,
        }));
        if r.status_subresource {
            list.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if r.scale_subresource {
            list.push(json!({
                "name": format!("{}/scale", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let group_version =
        if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": list,
    }))
}
