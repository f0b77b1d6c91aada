//! The strategy of core/v1 Services (kube's `pkg/registry/core/service`): a service's name is a
//! DNS label (it becomes a DNS name in the cluster), and a delete answers with the service.
//! Its Table: `Name, Type, Cluster-IP, External-IP, Port(s), Age` and, wide, `Selector`.

use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::registry::printers::{Column, age, map_string, named, or_none, row, text, wide};
use crate::registry::{NameRule, Strategy};

/// The rules of Services, registered for core/v1 `services`.
pub(crate) struct ServiceStrategy;

impl Strategy for ServiceStrategy {
    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }
    fn returns_deleted_object(&self) -> bool {
        true
    }
    fn columns(&self, _: &ResourceType) -> Vec<Column> {
        named(vec![
            text("Type"),
            text("Cluster-IP"),
            text("External-IP"),
            text("Port(s)"),
            text("Age"),
            wide("Selector"),
        ])
    }
    fn cells(&self, _: &ResourceType, service: &Value, now: i64) -> Vec<Value> {
        let spec = &service["spec"];
        row(
            service,
            vec![
                json!(spec["type"].as_str().unwrap_or("ClusterIP")),
                or_none(&spec["clusterIP"]),
                json!(external_ips(service)),
                json!(ports(&spec["ports"])),
                age(service, now),
                json!(map_string(&spec["selector"]).unwrap_or_else(|| "<none>".to_owned())),
            ],
        )
    }
}

/// `port/protocol` or `port:nodePort/protocol` of each port, comma-separated.
fn ports(ports: &Value) -> String {
    let list: Vec<String> = ports
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let protocol = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64() {
                Some(node) => format!("{}:{node}/{protocol}", p["port"]),
                None => format!("{}/{protocol}", p["port"]),
            }
        })
        .collect();
    if list.is_empty() { "<none>".to_owned() } else { list.join(",") }
}

/// The external IPs and the load balancer's ingress; `<pending>` for a load balancer without
/// one yet.
fn external_ips(service: &Value) -> String {
    let mut ips: Vec<String> = service["spec"]["externalIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip.as_str().map(str::to_owned))
        .collect();
    for ingress in service["status"]["loadBalancer"]["ingress"].as_array().into_iter().flatten() {
        if let Some(ip) = ingress["ip"].as_str().or(ingress["hostname"].as_str()) {
            ips.push(ip.to_owned());
        }
    }
    match (service["spec"]["type"].as_str(), ips.is_empty()) {
        (Some("LoadBalancer"), true) => "<pending>".to_owned(),
        (_, true) => "<none>".to_owned(),
        _ => ips.join(","),
    }
}
