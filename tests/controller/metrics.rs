//! The metrics endpoint: controller-runtime's metric names, types and labels, scraped and
//! parsed as Prometheus would; `/healthz`; `/readyz` ready only once the caches synced.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ctrlkit::cache::ObjectKey;
use ctrlkit::controller::{Action, Config, Reconciler};
use ctrlkit::leaderelection::{LeaderElectionConfig, LeaseLock};
use ctrlkit::manager::Manager;
use ctrlkit::metrics::Registry;
use ctrlkit::workqueue::{ItemExponentialFailureRateLimiter, WorkQueue};
use ctrlkit_apiserver::Failure;
use k8s_openapi::api::core::v1::Pod;
use kube_client::Api;

use super::common::*;
use crate::support::Failed;
use crate::support::http::{free_address, get};

/// A text exposition: each metric's type, and each sample's value by `name{labels}`.
struct Exposition {
    types: HashMap<String, String>,
    samples: HashMap<String, f64>,
}

fn parse(text: &str) -> Exposition {
    let (mut types, mut samples) = (HashMap::new(), HashMap::new());
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
            types.insert(name.to_owned(), kind.to_owned());
        } else if !line.starts_with('#') && !line.is_empty() {
            let (series, value) = line.rsplit_once(' ').expect("a sample: series value");
            samples.insert(series.to_owned(), value.parse().expect("a numeric value"));
        }
    }
    Exposition { types, samples }
}

/// Succeeds on "ok", fails on "bad", panics on "boom", hangs on "slow".
struct Mixed;

#[async_trait]
impl Reconciler for Mixed {
    type Object = Pod;
    type Error = Failed;
    async fn reconcile(&self, key: &ObjectKey, _: Option<Arc<Pod>>) -> Result<Action, Failed> {
        match key.name.as_str() {
            "bad" => Err("bad pod".into()),
            "boom" => panic!("boom"),
            "slow" => std::future::pending().await,
            "later" => Ok(Action::requeue_after(Duration::from_secs(3600))),
            _ => Ok(Action::done()),
        }
    }
}

#[tokio::test]
async fn the_endpoint_serves_controller_runtimes_metrics_and_ctrlkits_own() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["ok", "bad", "boom", "slow", "later"]).await;
    let address = free_address();
    let mut election = LeaderElectionConfig::default();
    election.lease_duration = Duration::from_millis(1200);
    election.renew_deadline = Duration::from_millis(800);
    election.retry_period = Duration::from_millis(200);
    let lock = LeaseLock::new(server.client(), "default", "metrics-test", "me");
    let mut manager = Manager::builder(server.client())
        .metrics_address(address)
        .leader_election(lock, election)
        .graceful_shutdown_timeout(Duration::from_millis(200))
        .build();
    let limiter =
        ItemExponentialFailureRateLimiter::new(Duration::from_millis(5), Duration::from_millis(20));
    manager
        .controller(pods)
        .queue(WorkQueue::builder().rate_limiter(limiter))
        .config(
            Config::default()
                .workers(3)
                .max_retries(1)
                .reconcile_timeout(Duration::from_millis(100)),
        )
        .complete(Mixed)
        .expect("the only controller of its name");
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    let scrape =
        || async { parse(&get(address, "/metrics").await.map(|(_, b)| b).unwrap_or_default()) };
    let value = |e: &Exposition, series: &str| e.samples.get(series).copied();
    let mut exposition = scrape().await;
    for _ in 0..200 {
        let done = value(
            &exposition,
            r#"controller_runtime_terminal_reconcile_errors_total{controller="pods"}"#,
        )
        .is_some_and(|v| v >= 3.0)
            // The fairness gauges come with the queue's first refresh (every 500 ms).
            && value(
                &exposition,
                r#"ctrlkit_workqueue_fairness_groups{name="pods",controller="pods",level="0"}"#,
            )
            .is_some();
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        exposition = scrape().await;
    }
    let types = [
        ("workqueue_depth", "gauge"),
        ("workqueue_adds_total", "counter"),
        ("workqueue_queue_duration_seconds", "histogram"),
        ("workqueue_work_duration_seconds", "histogram"),
        ("workqueue_unfinished_work_seconds", "gauge"),
        ("workqueue_longest_running_processor_seconds", "gauge"),
        ("workqueue_retries_total", "counter"),
        ("ctrlkit_workqueue_fairness_groups", "gauge"),
        ("ctrlkit_workqueue_fairness_deepest", "gauge"),
        ("ctrlkit_workqueue_fairness_longest_wait_seconds", "gauge"),
        ("controller_runtime_reconcile_total", "counter"),
        ("controller_runtime_reconcile_errors_total", "counter"),
        ("controller_runtime_terminal_reconcile_errors_total", "counter"),
        ("controller_runtime_reconcile_panics_total", "counter"),
        ("controller_runtime_reconcile_timeouts_total", "counter"),
        ("controller_runtime_reconcile_time_seconds", "histogram"),
        ("controller_runtime_max_concurrent_reconciles", "gauge"),
        ("controller_runtime_active_workers", "gauge"),
        ("leader_election_master_status", "gauge"),
        ("ctrlkit_informer_watch_requests_total", "counter"),
        ("ctrlkit_informer_objects", "gauge"),
        ("ctrlkit_controller_worker_scaling_total", "counter"),
        ("rest_client_requests_total", "counter"),
        ("rest_client_request_duration_seconds", "histogram"),
        ("tokio_workers_count", "gauge"),
        ("tokio_alive_tasks", "gauge"),
        ("tokio_global_queue_depth", "gauge"),
        #[cfg(target_os = "linux")]
        ("process_cpu_seconds_total", "counter"),
        #[cfg(target_os = "linux")]
        ("process_resident_memory_bytes", "gauge"),
        #[cfg(target_os = "linux")]
        ("process_open_fds", "gauge"),
        #[cfg(target_os = "linux")]
        ("process_start_time_seconds", "gauge"),
    ];
    for (name, kind) in types {
        assert_eq!(exposition.types.get(name).map(String::as_str), Some(kind), "# TYPE of {name}");
    }
    let expect = |series: &str, check: &dyn Fn(f64) -> bool| {
        let got = value(&exposition, series);
        assert!(got.is_some_and(check), "{series} = {got:?}");
    };
    let c = r#"controller="pods""#;
    let q = r#"name="pods",controller="pods""#;
    expect(&format!(r#"controller_runtime_reconcile_total{{{c},result="success"}}"#), &|v| {
        v >= 1.0
    });
    expect(&format!(r#"controller_runtime_reconcile_total{{{c},result="requeue_after"}}"#), &|v| {
        v >= 1.0
    });
    expect(&format!(r#"controller_runtime_reconcile_total{{{c},result="error"}}"#), &|v| v >= 6.0);
    expect(&format!(r#"controller_runtime_reconcile_total{{{c},result="requeue"}}"#), &|v| {
        v == 0.0
    });
    expect(&format!("controller_runtime_reconcile_errors_total{{{c}}}"), &|v| v >= 6.0);
    expect(&format!("controller_runtime_reconcile_panics_total{{{c}}}"), &|v| v >= 2.0);
    expect(&format!("controller_runtime_reconcile_timeouts_total{{{c}}}"), &|v| v >= 2.0);
    expect(&format!("controller_runtime_terminal_reconcile_errors_total{{{c}}}"), &|v| v >= 3.0);
    expect(&format!("controller_runtime_max_concurrent_reconciles{{{c}}}"), &|v| v == 3.0);
    expect(&format!(r#"ctrlkit_controller_worker_scaling_total{{{c},reason="queue"}}"#), &|v| {
        v == 0.0
    });
    expect(&format!("controller_runtime_reconcile_time_seconds_count{{{c}}}"), &|v| v >= 8.0);
    // Every client the Manager holds is counted: the informer's watch and the Lease's create
    // (its lock was made from the bare client). A prebuilt client names no host.
    expect(r#"rest_client_requests_total{code="200",method="GET",host=""}"#, &|v| v >= 1.0);
    expect(r#"rest_client_requests_total{code="201",method="POST",host=""}"#, &|v| v >= 1.0);
    expect(r#"rest_client_request_duration_seconds_count{verb="GET",host=""}"#, &|v| v >= 1.0);
    expect(&format!("workqueue_adds_total{{{q}}}"), &|v| v >= 5.0);
    expect(&format!("workqueue_retries_total{{{q}}}"), &|v| v >= 3.0);
    // A controller's queue is fair by namespace: one level, one series, however many
    // namespaces.
    expect(&format!(r#"ctrlkit_workqueue_fairness_groups{{{q},level="0"}}"#), &|v| v >= 0.0);
    // Per priority: the pods of the initial list went in low.
    expect(&format!(r#"workqueue_depth{{{q},priority="-100"}}"#), &|v| v >= 0.0);
    let unlabelled = format!(r#"workqueue_depth{{{q},priority=""}}"#);
    assert_eq!(value(&exposition, &unlabelled), None, "no total beside the priorities");
    expect(&format!("workqueue_work_duration_seconds_count{{{q}}}"), &|v| v >= 8.0);
    expect(r#"leader_election_master_status{name="metrics-test"}"#, &|v| v == 1.0);
    let informer = r#"resource="pods",namespace="default",selector="""#;
    // Synced by a streaming list (the default): one watch request, no list.
    let lists = format!(r#"ctrlkit_informer_list_requests_total{{{informer},result="success"}}"#);
    assert_eq!(value(&exposition, &lists), None, "no list request");
    expect(
        &format!(r#"ctrlkit_informer_watch_requests_total{{{informer},result="success"}}"#),
        &|v| v >= 1.0,
    );
    expect(&format!("ctrlkit_informer_objects{{{informer}}}"), &|v| v == 5.0);
    expect(&format!("ctrlkit_informer_resource_version{{{informer}}}"), &|v| v > 0.0);
    assert_eq!(get(address, "/healthz").await, Some((200, "ok".into())));
    stop.send(()).unwrap();
    let _ = run.await.unwrap(); // the stuck reconcile makes the stop time out; that is another test
}

/// A builder from `Manager::controller` needs no wiring: a controller built from it and run by
/// hand, outside the manager, still reads the manager's informers (one watch of the kind for
/// it and a managed controller) and reports to the manager's registry, queue included.
#[tokio::test]
async fn a_builder_from_the_manager_shares_its_informers_and_reports_to_its_registry() {
    let server = server().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    create(&pods, &["ok"]).await;
    let mut manager = Manager::builder(server.client()).metrics(Registry::new()).build();
    let standalone = manager.controller(pods.clone()).name("standalone").build();
    manager
        .controller(pods)
        .name("managed")
        .complete(Mixed)
        .expect("the only controller of its name");
    let registry = manager.metrics().unwrap().clone();
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    let (stop_standalone, standalone_stopped) = shutdown();
    let by_hand = tokio::spawn(standalone.into_inner().run(Mixed, standalone_stopped));
    let reconciled = |name: &str| {
        let series = format!(
            r#"controller_runtime_reconcile_total{{controller="{name}",result="success"}}"#
        );
        parse(&registry.encode()).samples.get(&series).copied().unwrap_or(0.0) >= 1.0
    };
    eventually("both controllers reported a reconcile", || {
        reconciled("standalone") && reconciled("managed")
    })
    .await;
    let exposition = parse(&registry.encode());
    let adds = r#"workqueue_adds_total{name="standalone",controller="standalone"}"#;
    assert!(exposition.samples.get(adds).is_some_and(|v| *v >= 1.0), "{adds}");
    let watches = r#"ctrlkit_informer_watch_requests_total{resource="pods",namespace="default",selector="",result="success"}"#;
    assert_eq!(exposition.samples.get(watches), Some(&1.0), "one informer for both");
    stop_standalone.send(()).unwrap();
    by_hand.await.unwrap().unwrap();
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// A manager with a pod controller (its informer backing off for milliseconds) and its endpoint
/// on a free address, over `server` whose every request fails until a test lifts the fault.
pub(super) fn pods_manager_while_lists_fail(
    server: &ctrlkit_apiserver::ApiServer,
) -> (Manager, std::net::SocketAddr) {
    server.faults().fail_next(usize::MAX, Failure::InternalError);
    let address = free_address();
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let mut manager = Manager::builder(server.client()).metrics_address(address).build();
    let controller = manager.controller(pods).informer(|b| b.backoff(fast_backoff())).build();
    manager
        .add_controller(controller, ReconcileLog::default().reconciler::<Pod>())
        .expect("the only controller of its name");
    (manager, address)
}

/// `/readyz`'s first answer once the endpoint serves (it starts with the manager).
async fn first_readyz(address: std::net::SocketAddr) -> (u16, String) {
    for _ in 0..100 {
        if let Some(answer) = get(address, "/readyz").await {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the endpoint does not answer");
}

#[tokio::test]
async fn readyz_turns_ready_only_once_the_caches_synced() {
    let server = server().await;
    let (manager, address) = pods_manager_while_lists_fail(&server);
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    let (status, body) = first_readyz(address).await;
    assert_eq!(status, 503, "not ready while lists fail: {body}");
    assert!(body.contains("[-]caches-synced failed"), "{body}");
    assert_eq!(get(address, "/healthz").await, Some((200, "ok".into())), "alive all the same");
    server.faults().fail_next(0, Failure::InternalError);
    eventually_async_within(Duration::from_secs(10), "ready once the caches synced", || async {
        get(address, "/readyz").await == Some((200, "ok".into()))
    })
    .await;
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// A runnable whose ready check panics (user code).
struct PanickyProbe;

#[async_trait]
impl ctrlkit::runnable::Runnable for PanickyProbe {
    fn name(&self) -> String {
        "panicky probe".into()
    }
    async fn start(
        &self,
        stop: ctrlkit::runnable::Stop,
    ) -> Result<(), ctrlkit::runnable::RunnableError> {
        stop.await;
        Ok(())
    }
    fn ready_check(&self) -> Option<ctrlkit::runnable::ReadyCheck> {
        Some(Arc::new(|| panic!("a ready check that panics")))
    }
}

/// A ready check that panics is a failed check, named in `/readyz`'s 503 and logged, rather
/// than a connection the probe sees dropped; `/healthz` and the other checks answer as before.
#[tokio::test]
async fn a_ready_check_that_panics_fails_readyz_with_its_name() {
    let logs = CapturedLogs::default();
    let _capture = logs.capture();
    let server = server().await;
    let address = free_address();
    let mut manager = Manager::builder(server.client()).metrics_address(address).build();
    manager.add(PanickyProbe);
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    let (status, body) = first_readyz(address).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("[-]panicky probe failed"), "{body}");
    assert_eq!(get(address, "/healthz").await, Some((200, "ok".into())));
    assert!(logs.text().contains("a ready check that panics"), "logged: {}", logs.text());
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// Holds for a controller's own writes are exported per controller: their count, their time and
/// those that ran out, the counters at zero from the controller's start.
#[test]
fn read_your_writes_holds_are_counted_timed_and_their_timeouts_told_apart() {
    use ctrlkit::controller::ControllerMetricsProvider;
    let registry = Registry::new();
    let hooks = registry.new_controller_metrics("sets");
    let c = r#"controller="sets""#;
    let at_start = parse(&registry.encode());
    for name in ["holds", "hold_timeouts"] {
        let series = format!("ctrlkit_controller_read_your_writes_{name}_total{{{c}}}");
        assert_eq!(at_start.samples.get(&series).copied(), Some(0.0), "{series}");
    }
    hooks.held(Duration::from_millis(20), false);
    hooks.held(Duration::from_secs(5), true);
    let exposition = parse(&registry.encode());
    let types = [
        ("ctrlkit_controller_read_your_writes_holds_total", "counter"),
        ("ctrlkit_controller_read_your_writes_hold_seconds", "histogram"),
        ("ctrlkit_controller_read_your_writes_hold_timeouts_total", "counter"),
    ];
    for (name, kind) in types {
        assert_eq!(exposition.types.get(name).map(String::as_str), Some(kind), "# TYPE of {name}");
    }
    let value = |series: String| exposition.samples.get(&series).copied();
    assert_eq!(value(format!("ctrlkit_controller_read_your_writes_holds_total{{{c}}}")), Some(2.0));
    assert_eq!(
        value(format!("ctrlkit_controller_read_your_writes_hold_timeouts_total{{{c}}}")),
        Some(1.0)
    );
    assert_eq!(
        value(format!("ctrlkit_controller_read_your_writes_hold_seconds_sum{{{c}}}")),
        Some(5.02)
    );
}

/// The samples of `series` (a name, and labels if any) in an exposition, by their full series.
fn sample(exposition: &Exposition, series: &str) -> Option<f64> {
    exposition.samples.get(series).copied()
}

/// The process's metrics, as the Prometheus client libraries name them, and the runtime's,
/// read at the scrape: the start time in the past, memory and descriptors in use, as many
/// tokio workers as the runtime has, the tasks alive in it. Off Linux, no `process_*` at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn the_registry_exports_the_process_and_the_runtime_it_was_made_on() {
    let registry = Registry::new();
    let parked = tokio::spawn(std::future::pending::<()>());
    let text = registry.encode();
    let exposition = parse(&text);
    let runtime = tokio::runtime::Handle::current().metrics();
    assert_eq!(sample(&exposition, "tokio_workers_count"), Some(3.0), "{text}");
    assert_eq!(runtime.num_workers(), 3);
    let alive = sample(&exposition, "tokio_alive_tasks");
    assert!(alive.is_some_and(|n| n >= 1.0), "the parked task is alive: {alive:?}");
    let queued = sample(&exposition, "tokio_global_queue_depth");
    assert!(queued.is_some_and(|n| n >= 0.0), "{queued:?}");
    for name in ["tokio_workers_count", "tokio_alive_tasks", "tokio_global_queue_depth"] {
        assert_eq!(exposition.types.get(name).map(String::as_str), Some("gauge"), "{name}");
    }
    parked.abort();
    #[cfg(target_os = "linux")]
    {
        let types = [
            ("process_cpu_seconds_total", "counter"),
            ("process_resident_memory_bytes", "gauge"),
            ("process_virtual_memory_bytes", "gauge"),
            ("process_open_fds", "gauge"),
            ("process_max_fds", "gauge"),
            ("process_start_time_seconds", "gauge"),
        ];
        for (name, kind) in types {
            assert_eq!(exposition.types.get(name).map(String::as_str), Some(kind), "{name}");
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_secs_f64();
        let started = sample(&exposition, "process_start_time_seconds").expect("a start time");
        assert!(started <= now, "started at {started}, after now ({now})");
        assert!(started > now - 3600.0, "this test's process started within the hour: {started}");
        let rss = sample(&exposition, "process_resident_memory_bytes").expect("rss");
        let virt = sample(&exposition, "process_virtual_memory_bytes").expect("vsize");
        assert!(rss > 0.0 && virt >= rss, "rss {rss}, virtual {virt}");
        let fds = sample(&exposition, "process_open_fds").expect("open fds");
        let max = sample(&exposition, "process_max_fds").expect("max fds");
        assert!(fds > 0.0 && max >= fds, "{fds} open of {max}");
        // The CPU counter follows the process's work: spin until it moves (10 ms ticks).
        let cpu = |text: &str| sample(&parse(text), "process_cpu_seconds_total").expect("cpu");
        let before = cpu(&text);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while cpu(&registry.encode()) <= before {
            assert!(std::time::Instant::now() < deadline, "CPU time stayed at {before}");
            std::hint::black_box((0..100_000u64).sum::<u64>());
        }
    }
    #[cfg(not(target_os = "linux"))]
    assert!(!text.contains("process_"), "no process metrics off Linux: {text}");
}

/// A registry made outside any runtime exports the runtime of the scrape, and none when
/// scraped outside one too.
#[test]
fn a_registry_made_outside_a_runtime_reads_the_runtime_of_the_scrape_or_none() {
    let registry = Registry::new();
    let text = registry.encode();
    assert!(!text.contains("tokio_"), "no runtime, no tokio series: {text}");
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    let text = runtime.block_on(async { registry.encode() });
    assert_eq!(sample(&parse(&text), "tokio_workers_count"), Some(1.0), "{text}");
}

/// client-go's request metrics, from a request recorded through the hook a Manager's clients
/// report to: counted by code, method and host; timed by verb and host, in client-go's buckets.
#[test]
fn a_request_recorded_through_the_hook_shows_in_client_gos_rest_client_series() {
    use ctrlkit::rest_client::RequestMetrics;
    let registry = Registry::new();
    let host = "10.0.0.1:6443";
    registry.request(&http::Method::GET, host, "200", Duration::from_millis(30));
    registry.request(&http::Method::GET, host, "200", Duration::from_millis(3));
    registry.request(&http::Method::PUT, host, "<error>", Duration::from_secs(20));
    let text = registry.encode();
    let e = parse(&text);
    assert_eq!(e.types.get("rest_client_requests_total").map(String::as_str), Some("counter"));
    let histogram = e.types.get("rest_client_request_duration_seconds").map(String::as_str);
    assert_eq!(histogram, Some("histogram"));
    for help in [
        "# HELP rest_client_requests_total Number of HTTP requests, partitioned by status code, method, and host.\n",
        "# HELP rest_client_request_duration_seconds Request latency in seconds. Broken down by verb, and host.\n",
    ] {
        assert!(text.contains(help), "client-go's help text {help:?}: {text}");
    }
    let requests = |code: &str, method: &str| {
        sample(
            &e,
            &format!(
                r#"rest_client_requests_total{{code="{code}",method="{method}",host="{host}"}}"#
            ),
        )
    };
    assert_eq!(requests("200", "GET"), Some(2.0));
    assert_eq!(requests("<error>", "PUT"), Some(1.0));
    let bucket = |verb: &str, le: &str| {
        let series = format!(r#"{{verb="{verb}",host="{host}",le="{le}"}}"#);
        sample(&e, &format!("rest_client_request_duration_seconds_bucket{series}"))
    };
    assert_eq!(bucket("GET", "0.005"), Some(1.0), "{text}");
    assert_eq!(bucket("GET", "0.025"), Some(1.0));
    assert_eq!(bucket("GET", "0.1"), Some(2.0));
    assert_eq!(bucket("PUT", "15"), Some(0.0));
    assert_eq!(bucket("PUT", "30"), Some(1.0));
    let buckets: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(r#"rest_client_request_duration_seconds_bucket{verb="GET""#))
        .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next())
        .collect();
    let client_go =
        ["0.005", "0.025", "0.1", "0.25", "0.5", "1", "2", "4", "8", "15", "30", "60", "+Inf"];
    assert_eq!(buckets, client_go, "client-go's buckets");
}

/// A worker count changed through the controller's hooks is counted by reason, each reason's
/// series there at zero from the controller's start.
#[test]
fn worker_count_changes_are_counted_by_reason() {
    use ctrlkit::controller::{ControllerMetricsProvider, ScaleReason};
    let registry = Registry::new();
    let hooks = registry.new_controller_metrics("sets");
    let series = |reason: &str| {
        format!(r#"ctrlkit_controller_worker_scaling_total{{controller="sets",reason="{reason}"}}"#)
    };
    let reasons = ["manual", "queue", "cpu_bound", "throttled", "idle"];
    let at_start = parse(&registry.encode());
    for reason in reasons {
        assert_eq!(sample(&at_start, &series(reason)), Some(0.0), "{}", series(reason));
    }
    hooks.scaled(1, 4, ScaleReason::Manual);
    hooks.max_concurrent_reconciles(4);
    hooks.scaled(4, 8, ScaleReason::Queue);
    hooks.max_concurrent_reconciles(8);
    hooks.scaled(8, 7, ScaleReason::Throttled);
    hooks.max_concurrent_reconciles(7);
    let e = parse(&registry.encode());
    let kind = e.types.get("ctrlkit_controller_worker_scaling_total").map(String::as_str);
    assert_eq!(kind, Some("counter"));
    let counted: Vec<Option<f64>> = reasons.iter().map(|r| sample(&e, &series(r))).collect();
    assert_eq!(counted, [Some(1.0), Some(1.0), Some(0.0), Some(1.0), Some(0.0)], "{reasons:?}");
    let workers = r#"controller_runtime_max_concurrent_reconciles{controller="sets"}"#;
    assert_eq!(sample(&e, workers), Some(7.0), "the gauge follows the count");
}
