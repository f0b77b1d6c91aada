//! The manager's phases: servers before the caches, caches with the informers, the rest once
//! they synced; readiness asked per check (`/readyz/<check>`, `?exclude=`, `?verbose`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use ctrlkit::manager::Manager;
use ctrlkit::runnable::{Phase, ReadyCheck, Runnable, RunnableError, Stop};
use ctrlkit_apiserver::Failure;
use k8s_openapi::api::core::v1::Pod;
use kube_client::Api;

use super::common::*;
use super::metrics::pods_manager_while_lists_fail;
use crate::support::http::get;

/// A runnable of `phase` that is ready from its start until its stop.
struct Job {
    name: &'static str,
    phase: Phase,
    started: Arc<AtomicBool>,
}

impl Job {
    fn new(name: &'static str, phase: Phase) -> (Self, Arc<AtomicBool>) {
        let started = Arc::new(AtomicBool::new(false));
        (Self { name, phase, started: started.clone() }, started)
    }
}

#[async_trait]
impl Runnable for Job {
    fn name(&self) -> String {
        self.name.into()
    }
    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        self.started.store(true, Ordering::SeqCst);
        stop.await;
        self.started.store(false, Ordering::SeqCst);
        Ok(())
    }
    fn phase(&self) -> Phase {
        self.phase
    }
    fn ready_check(&self) -> Option<ReadyCheck> {
        let started = self.started.clone();
        Some(Arc::new(move || started.load(Ordering::SeqCst)))
    }
}

/// While every list fails, a server (and a cache runnable) runs and `/readyz/<its check>`
/// answers 200 though `caches-synced` fails; the runnables after the sync wait. The lists
/// back, the rest starts and `/readyz` is whole.
#[tokio::test]
async fn servers_run_and_answer_their_own_readiness_while_the_caches_cannot_sync() {
    let server = server().await;
    let (mut manager, address) = pods_manager_while_lists_fail(&server);
    let (webhooks, serving) = Job::new("webhooks", Phase::Server);
    let (warmer, warming) = Job::new("warmer", Phase::Cache);
    let (job, after_sync) = Job::new("job", Phase::AfterCacheSync);
    manager.add(job);
    manager.add(warmer);
    manager.add(webhooks);
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));

    eventually_async_within(Duration::from_secs(10), "the server's own check passes", || async {
        get(address, "/readyz/webhooks").await == Some((200, "ok".into()))
    })
    .await;
    eventually("the server and the cache runnable run", || {
        serving.load(Ordering::SeqCst) && warming.load(Ordering::SeqCst)
    })
    .await;
    let synced = get(address, "/readyz/caches-synced").await;
    assert_eq!(synced, Some((503, "[-]caches-synced failed\n".into())), "lists still fail");
    assert!(!after_sync.load(Ordering::SeqCst), "started before the caches synced");
    let (status, body) = get(address, "/readyz").await.expect("an answer");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("[-]caches-synced failed\n[-]job failed\n"), "{body}");
    assert!(body.contains("[+]webhooks ok\n"), "{body}");
    let serving_part = "/readyz?exclude=caches-synced&exclude=job&exclude=gone";
    let (status, body) = get(address, serving_part).await.expect("an answer");
    assert_eq!(status, 200, "the checks left are the servers': {body}");
    assert_eq!(get(address, "/readyz/nothing").await.map(|a| a.0), Some(404));

    server.faults().fail_next(0, Failure::InternalError);
    eventually_async_within(Duration::from_secs(10), "ready once the caches synced", || async {
        get(address, "/readyz").await == Some((200, "ok".into()))
    })
    .await;
    assert!(after_sync.load(Ordering::SeqCst));
    let (status, body) = get(address, "/readyz?verbose").await.expect("an answer");
    assert_eq!(status, 200);
    assert!(body.contains("[+]caches-synced ok\n") && body.ends_with("readyz check passed\n"));
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// A server that fails before the caches synced stops the manager, named, instead of the
/// manager waiting on caches for ever.
#[tokio::test]
async fn a_server_failing_before_the_caches_synced_stops_the_manager() {
    struct Unbindable;
    #[async_trait]
    impl Runnable for Unbindable {
        fn name(&self) -> String {
            "unbindable".into()
        }
        async fn start(&self, _: Stop) -> Result<(), RunnableError> {
            Err("address in use".into())
        }
        fn phase(&self) -> Phase {
            Phase::Server
        }
    }
    let server = server().await;
    server.faults().fail_next(usize::MAX, Failure::InternalError);
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let mut manager = Manager::new(server.client());
    let controller = manager.controller(pods).build();
    manager
        .add_controller(controller, ReconcileLog::default().reconciler::<Pod>())
        .expect("the only controller of its name");
    manager.add(Unbindable);
    let result =
        tokio::time::timeout(Duration::from_secs(10), manager.run_until(std::future::pending()))
            .await
            .expect("the manager stops on the failure");
    match result {
        Err(ctrlkit::manager::ManagerError::Runnable { runnable, source }) => {
            assert_eq!(
                (runnable.as_str(), source.to_string().as_str()),
                ("unbindable", "address in use")
            );
        }
        other => panic!("expected the server's failure, got {other:?}"),
    }
}

/// A server whose ready check passes once its gate opens, counting how often it was asked.
struct Gated {
    open: Arc<AtomicBool>,
    asked: Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait]
impl Runnable for Gated {
    fn name(&self) -> String {
        "gated".into()
    }
    async fn start(&self, stop: Stop) -> Result<(), RunnableError> {
        stop.await;
        Ok(())
    }
    fn phase(&self) -> Phase {
        Phase::Server
    }
    fn ready_check(&self) -> Option<ReadyCheck> {
        let (open, asked) = (self.open.clone(), self.asked.clone());
        Some(Arc::new(move || {
            asked.fetch_add(1, Ordering::SeqCst);
            open.load(Ordering::SeqCst)
        }))
    }
}

/// A manager of one pods controller and a [`Gated`] server; its gate and ask count.
fn manager_with_a_gated_server(
    client: kube_client::Client,
    timeout: Duration,
) -> (Manager, Arc<AtomicBool>, Arc<std::sync::atomic::AtomicUsize>) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut manager = Manager::builder(client).server_ready_timeout(timeout).build();
    let controller = manager.controller(pods).build();
    manager
        .add_controller(controller, ReconcileLog::default().reconciler::<Pod>())
        .expect("the only controller of its name");
    let (open, asked) = (Arc::new(AtomicBool::new(false)), Arc::default());
    manager.add(Gated { open: open.clone(), asked: Arc::clone(&asked) });
    (manager, open, asked)
}

/// The lists and watches (a watch-list is the informer's first list) the server answered.
fn lists(server: &ctrlkit_apiserver::ApiServer) -> u64 {
    let requests = server.requests();
    requests.list + requests.watch
}

/// The informers' first list comes only after the servers' ready checks passed (as
/// controller-runtime waits for its webhook servers before the caches).
#[tokio::test]
async fn the_first_list_waits_for_the_servers_ready_checks() {
    let server = server().await;
    let (manager, open, asked) =
        manager_with_a_gated_server(server.client(), Duration::from_secs(60));
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    eventually("the check asked thrice, or a list made", || {
        asked.load(Ordering::SeqCst) >= 3 || lists(&server) > 0
    })
    .await;
    assert_eq!(lists(&server), 0, "listed before the server's check passed");
    open.store(true, Ordering::SeqCst);
    eventually("listed once the server is ready", || lists(&server) > 0).await;
    stop.send(()).unwrap();
    // Stopped before or after the caches synced: only the order of the lists is asserted.
    let _ = run.await.unwrap();
}

/// A server never ready holds the caches back only for the manager's `server_ready_timeout`:
/// then they start and sync anyway.
#[tokio::test(start_paused = true)]
async fn a_server_never_ready_holds_the_caches_back_only_for_its_timeout() {
    let server = server().await;
    let (manager, _open, asked) =
        manager_with_a_gated_server(server.in_process_client(), Duration::from_secs(2));
    let (stop, stopped) = shutdown();
    let started = tokio::time::Instant::now();
    let run = tokio::spawn(manager.run_until(stopped));
    eventually("listed after the timeout", || lists(&server) > 0).await;
    assert!(started.elapsed() >= Duration::from_secs(2), "listed before the timeout");
    assert!(asked.load(Ordering::SeqCst) > 1, "the check was asked until the timeout");
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// A shutdown while the manager waits for a server that is never ready stops it at once,
/// cleanly, before any cache starts: not after `server_ready_timeout`.
#[tokio::test(start_paused = true)]
async fn a_shutdown_while_the_servers_come_up_stops_the_manager_at_once() {
    let server = server().await;
    let (manager, _open, asked) =
        manager_with_a_gated_server(server.in_process_client(), Duration::from_secs(600));
    let (stop, stopped) = shutdown();
    let started = tokio::time::Instant::now();
    let run = tokio::spawn(manager.run_until(stopped));
    eventually("the check asked", || asked.load(Ordering::SeqCst) > 0).await;
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
    assert!(started.elapsed() < Duration::from_secs(600), "stopped only at the timeout");
    assert_eq!(lists(&server), 0, "no cache started");
}

/// `?exclude=` and `?verbose` print an excluded check as kube-apiserver does
/// (`[+]name excluded: ok`), and a check whose name has a `/` is asked at its whole path.
#[tokio::test]
async fn readyz_prints_excluded_checks_and_answers_names_with_slashes() {
    let server = server().await;
    let (mut manager, address) = pods_manager_while_lists_fail(&server);
    let (tls, serving) = Job::new("webhooks/tls", Phase::Server);
    manager.add(tls);
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    eventually("the server runs", || serving.load(Ordering::SeqCst)).await;
    eventually_async_within(Duration::from_secs(10), "the endpoint serves", || async {
        get(address, "/healthz").await.is_some()
    })
    .await;
    let answer = get(address, "/readyz/webhooks/tls").await;
    assert_eq!(answer, Some((200, "ok".into())), "a name with a slash is askable");
    let answer = get(address, "/readyz/webhooks").await.map(|a| a.0);
    assert_eq!(answer, Some(404), "a prefix of a name is not a check");
    let verbose = "/readyz?exclude=caches-synced&verbose";
    let (status, body) = get(address, verbose).await.expect("an answer");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("[+]caches-synced excluded: ok\n"), "{body}");
    assert!(body.contains("[+]webhooks/tls ok\n"), "{body}");
    // Stopped once the caches started (a stop while the servers come up is a clean one):
    // the lists still fail, and the manager stops with the caches unsynced.
    eventually("a list tried", || lists(&server) > 0).await;
    stop.send(()).unwrap();
    assert!(run.await.unwrap().is_err());
}
