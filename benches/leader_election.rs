//! Failover times of leader election with client-go's defaults (lease 15 s, renew deadline
//! 10 s, retry period 2 s, jittered up to 4.4 s).
//!
//! `cargo bench --bench leader_election --features testing [-- ROUNDS]`
//!
//! Three candidates campaign on one Lease. Each round, the leader either dies (its task
//! aborted: no release, as a killed process) or stops gracefully (it releases the lease), and
//! the time until another candidate leads is measured; then the stopped candidate is replaced
//! by a fresh one. Against the embedded API server, or a real one when
//! `CTRLKIT_E2E_KUBECONFIG` names its kubeconfig (`scripts/kube-apiserver.sh env`). Prints the
//! median, the minimum and the maximum of each; the README records them.

use std::time::{Duration, Instant};

use ctrlkit::leaderelection::{LeaderElectionConfig, LeaderElector, LeaseLock};
use ctrlkit_apiserver::ApiServer;
use kube_client::Client;
use kube_client::config::{KubeConfigOptions, Kubeconfig};

#[allow(dead_code)] // this bench fills no server with pods
#[path = "../apiserver/benches/support/mod.rs"]
mod support;
use support::runtime;

struct Candidate {
    elector: LeaderElector,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    run: tokio::task::JoinHandle<()>,
}

fn candidate(client: &Client, namespace: &str, identity: &str) -> Candidate {
    let lock = LeaseLock::new(client.clone(), namespace, "bench-election", identity);
    let elector = LeaderElector::new(lock, LeaderElectionConfig::default()).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = {
        let elector = elector.clone();
        tokio::spawn(async move {
            let _ = elector
                .run(async {
                    let _ = stopped.await;
                })
                .await;
        })
    };
    Candidate { elector, stop: Some(stop), run }
}

async fn leader_among(candidates: &[Candidate], except: usize) -> usize {
    loop {
        if let Some(i) =
            (0..candidates.len()).find(|&i| i != except && candidates[i].elector.is_leader())
        {
            return i;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn summary(name: &str, samples: &mut [Duration]) {
    samples.sort();
    let median = samples[samples.len() / 2];
    println!(
        "{name}: median {:.2} s, min {:.2} s, max {:.2} s over {} rounds",
        median.as_secs_f64(),
        samples[0].as_secs_f64(),
        samples[samples.len() - 1].as_secs_f64(),
        samples.len()
    );
}

fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(5);
    let rt = runtime();
    rt.block_on(async {
        let (client, _server, where_) = match std::env::var_os("CTRLKIT_E2E_KUBECONFIG") {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path).unwrap();
                let config = kube_client::Config::from_custom_kubeconfig(
                    kubeconfig,
                    &KubeConfigOptions::default(),
                )
                .await
                .unwrap();
                (Client::try_from(config).unwrap(), None, "a real kube-apiserver")
            }
            None => {
                let server = ApiServer::start().await.unwrap();
                (server.client(), Some(server), "the embedded API server")
            }
        };
        let namespace = "default";
        let leases: kube_client::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube_client::Api::namespaced(client.clone(), namespace);
        let _ = leases.delete("bench-election", &Default::default()).await;
        println!(
            "leader election failover on {where_}, client-go's defaults, {rounds} rounds each"
        );
        let mut next_id = 0;
        let mut fresh = |client: &Client| {
            next_id += 1;
            candidate(client, namespace, &format!("candidate-{next_id}"))
        };
        let mut candidates: Vec<Candidate> = (0..3).map(|_| fresh(&client)).collect();
        let (mut killed, mut graceful) = (Vec::new(), Vec::new());
        for round in 0..2 * rounds {
            let leader = leader_among(&candidates, usize::MAX).await;
            // Let the leadership settle into renewals, as a leader of some standing.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let kill = round % 2 == 0;
            let started = Instant::now();
            if kill {
                candidates[leader].run.abort();
            } else if let Some(stop) = candidates[leader].stop.take() {
                let _ = stop.send(());
            }
            let next = leader_among(&candidates, leader).await;
            let took = started.elapsed();
            eprintln!(
                "round {round}: {} -> {next} in {took:?}",
                if kill { "killed" } else { "stopped" }
            );
            if kill {
                killed.push(took)
            } else {
                graceful.push(took)
            }
            candidates[leader] = fresh(&client);
        }
        summary("killed leader -> next leader", &mut killed);
        summary("gracefully stopped leader -> next leader", &mut graceful);
        for c in candidates {
            c.run.abort();
        }
    });
}
