//! What the API server benchmarks share: the runtime and filling a server with pods.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ctrlkit_apiserver::{ApiServer, fixtures::realistic_pod};
use k8s_openapi::api::core::v1::Pod;
use kube_client::Api;
use kube_client::api::{Patch, PatchParams, PostParams};

/// A `/proc/self/status` figure in KiB: `VmHWM:` the peak RSS, `VmRSS:` the current one (0
/// where the file or the field is missing).
pub fn status_kib(field: &str) -> u64 {
    process_status_kib("self", field)
}

/// As [`status_kib`], of the process `pid` (`/proc/<pid>/status`; `self` for this one).
pub fn process_status_kib(pid: &str, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Two worker threads: the machine has two cores, and the peers are measured that way.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Creates `n` realistic pods in `namespace`, 16 requests in flight. Each is created, then
/// given its running status through `/status` (a server resets a new pod's status to
/// Pending), so the stored pods are the fixture's full size.
pub async fn create_pods(server: &ApiServer, namespace: &str, n: usize, managed_fields: bool) {
    create_pods_with(server.client(), namespace, 0..n, managed_fields).await;
}

/// As [`create_pods`], through any client (a real kube-apiserver's), for the pods numbered
/// `range`.
pub async fn create_pods_with(
    client: kube_client::Client,
    namespace: &str,
    range: std::ops::Range<usize>,
    managed_fields: bool,
) {
    let n = range.end;
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let next = Arc::new(AtomicUsize::new(range.start));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (pods, next, namespace) = (pods.clone(), next.clone(), namespace.to_owned());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return;
                    }
                    let value = realistic_pod(&namespace, i, managed_fields);
                    let pod: Pod = serde_json::from_value(value.clone()).unwrap();
                    let name = pod.metadata.name.clone().unwrap();
                    pods.create(&PostParams::default(), &pod).await.unwrap();
                    let status = Patch::Merge(serde_json::json!({ "status": value["status"] }));
                    pods.patch_status(&name, &PatchParams::default(), &status).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}
