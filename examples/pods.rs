//! The pod controller of client-go's `examples/workqueue`, in Rust.
//!
//! It watches pods and prints `Sync/Add/Update for Pod NAME` while a pod exists and
//! `Pod NAMESPACE/NAME does not exist anymore` once it is gone, as client-go's does. It uses
//! your cluster when one is configured (KUBECONFIG, `~/.kube/config`, in-cluster); otherwise
//! it starts ctrlkit's embedded API server and plays a short demo on it.
//!
//! ```text
//! cargo run --example pods -- [--namespace NS | --all-namespaces] [--workers N] [--embedded]
//! ```
//! Ctrl-C or SIGTERM stops it cleanly (exit code 0).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ctrlkit::cache::{
    Informer, ListWatch, ObjectKey, ResourceEventHandlerFuncs,
    deletion_handling_meta_namespace_key_func, meta_namespace_key_func,
};
use ctrlkit::controller::{Action, Config, Controller, Reconciler};
use ctrlkit::manager::shutdown_signal;
use ctrlkit::workqueue::WorkQueue;
use k8s_openapi::api::core::v1::Pod;
use kube_client::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube_client::{Api, Client};

mod support;

struct Args {
    namespace: String,
    all_namespaces: bool,
    workers: usize,
    embedded: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args =
        Args { namespace: "default".into(), all_namespaces: false, workers: 1, embedded: false };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--namespace" | "-n" => {
                args.namespace = it.next().ok_or("--namespace needs a value")?
            }
            "--all-namespaces" | "-A" => args.all_namespaces = true,
            "--workers" => {
                let n = it.next().ok_or("--workers needs a value")?;
                args.workers = n.parse().map_err(|_| format!("--workers {n}: not a number"))?;
            }
            "--embedded" => args.embedded = true,
            "--help" | "-h" => {
                return Err(
                    "usage: pods [--namespace NS | --all-namespaces] [--workers N] [--embedded]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

/// `syncToStdout` of client-go's `examples/workqueue`.
struct PodPrinter;

#[async_trait]
impl Reconciler for PodPrinter {
    type Object = Pod;
    type Error = std::convert::Infallible;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        pod: Option<Arc<Pod>>,
    ) -> Result<Action, Self::Error> {
        match pod {
            Some(pod) => println!(
                "Sync/Add/Update for Pod {}",
                pod.metadata.name.as_deref().unwrap_or_default()
            ),
            None => println!("Pod {key} does not exist anymore"),
        }
        Ok(Action::done())
    }
}

/// A few pods created, one updated, one deleted, over a few seconds.
async fn demo(client: Client, namespace: &str) -> Result<(), kube_client::Error> {
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let step = Duration::from_millis(700);
    for name in ["web-0", "web-1", "db-0"] {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "labels": { "app": name.split('-').next() } },
            "spec": { "containers": [{ "name": "main", "image": "busybox:1.36" }] }
        }))
        .expect("a valid pod");
        pods.create(&PostParams::default(), &pod).await?;
        tokio::time::sleep(step).await;
    }
    let relabel = Patch::Merge(serde_json::json!({ "metadata": { "labels": { "version": "2" } } }));
    pods.patch("web-1", &PatchParams::default(), &relabel).await?;
    tokio::time::sleep(step).await;
    pods.delete("db-0", &DeleteParams::default()).await?;
    tokio::time::sleep(step).await;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let (args, _, client, server) = match support::start(parse_args(), |a| a.embedded).await {
        Ok(started) => started,
        Err(code) => return code,
    };

    let api: Api<Pod> = if args.all_namespaces {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), &args.namespace)
    };

    // client-go's wiring: a rate-limited queue, an informer whose handlers put keys in it,
    // and a controller over both.
    let queue: WorkQueue<ObjectKey> = WorkQueue::builder().name("pods").build();
    let informer = Informer::new(ListWatch::new(api));
    let (q_add, q_update, q_delete) = (queue.clone(), queue.clone(), queue.clone());
    informer.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .on_add(move |pod: &Arc<Pod>| {
                if let Ok(key) = meta_namespace_key_func(pod.as_ref()) {
                    q_add.add(key);
                }
            })
            .on_update(move |_old, new: &Arc<Pod>| {
                if let Ok(key) = meta_namespace_key_func(new.as_ref()) {
                    q_update.add(key);
                }
            })
            .on_delete(move |deleted| {
                // The informer may hand over a tombstone: this key function handles both.
                if let Ok(key) = deletion_handling_meta_namespace_key_func(deleted) {
                    q_delete.add(key);
                }
            }),
    );
    // client-go's NewController(queue, indexer, informer), and Run's threadiness.
    let config = Config::default().workers(args.workers);
    let controller = Controller::with_config(queue, informer, config);

    let shutdown = async {
        match &server {
            Some(_) => {
                let namespace =
                    if args.all_namespaces { "default" } else { args.namespace.as_str() };
                tokio::select! {
                    result = demo(client.clone(), namespace) => match result {
                        Ok(()) => println!("Demo finished; stopping (run against a cluster to keep watching)."),
                        Err(err) => eprintln!("demo failed: {err}"),
                    },
                    _ = shutdown_signal() => {}
                }
            }
            None => shutdown_signal().await,
        }
    };
    println!("Starting Pod controller");
    let result = controller.run(PodPrinter, shutdown).await;
    println!("Stopping Pod controller");
    if let Some(server) = server {
        server.shutdown().await;
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
