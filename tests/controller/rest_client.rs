//! The request layer on every client a Manager hands out: each request counted once by
//! method, host and code (`rest_client_requests_total`'s labels), 429s and 5xx seen as
//! pressure, retries counted per attempt when the Manager is built from a config.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlkit::cache::{HasSynced, ListWatch};
use ctrlkit::events::{EventType, NewEvent};
use ctrlkit::leaderelection::{LeaderElectionConfig, LeaseLock};
use ctrlkit::manager::Manager;
use ctrlkit::rest_client::RequestMetrics;
use ctrlkit::sharding::{Ring, shard_label};
use ctrlkit_apiserver::Failure;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube_client::api::{DeleteParams, ListParams, PostParams};
use kube_client::config::KubeConfigOptions;
use kube_client::{Api, Config, Resource};
use serde_json::json;

use super::common::*;
use crate::support::scripted::{Reply, Scripted};

/// A sink that keeps every request it is told of: `(method, host, code)`.
#[derive(Default)]
struct Requests(Mutex<Vec<(String, String, String)>>);

impl RequestMetrics for Requests {
    fn request(&self, method: &http::Method, host: &str, code: &str, _: Duration) {
        self.0.lock().unwrap().push((method.to_string(), host.to_owned(), code.to_owned()));
    }
}

impl Requests {
    fn all(&self) -> Vec<(String, String, String)> {
        self.0.lock().unwrap().clone()
    }

    /// The codes, in the order the answers came.
    fn codes(&self) -> Vec<String> {
        self.all().into_iter().map(|(_, _, code)| code).collect()
    }

    /// How many requests of each method.
    fn by_method(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for (method, _, _) in self.all() {
            *counts.entry(method).or_default() += 1;
        }
        counts
    }
}

/// How many requests of each method a log of `METHOD /path` lines holds.
fn by_method(lines: &[String]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in lines {
        let method = line.split(' ').next().unwrap_or_default().to_owned();
        *counts.entry(method).or_default() += 1;
    }
    counts
}

fn quick_election() -> LeaderElectionConfig {
    let mut config = LeaderElectionConfig::default();
    config.lease_duration = Duration::from_millis(1200);
    config.renew_deadline = Duration::from_millis(800);
    config.retry_period = Duration::from_millis(200);
    config
}

/// The server's kubeconfig, as a client config (over loopback TCP).
async fn config_of(server: &ctrlkit_apiserver::ApiServer) -> Config {
    Config::from_custom_kubeconfig(server.kubeconfig(), &KubeConfigOptions::default())
        .await
        .expect("the server's kubeconfig")
}

#[tokio::test]
async fn every_client_the_manager_hands_out_counts_each_request_once() {
    let server = server().await;
    // Every request of the clients made from `base` lands in `log`, as the server got it;
    // the test's own writes go through another client.
    let (base, log) = ctrlkit_apiserver::harness::in_process_recording_client(&server);
    let setup: Api<ConfigMap> = Api::namespaced(server.in_process_client(), "default");
    let sink = Arc::new(Requests::default());
    let lock = LeaseLock::new(base.clone(), "default", "election", "only");
    let ring = Ring::new("sets").lease_config(quick_election());
    let mut manager = Manager::builder(base.clone())
        .api_host("api.test:6443")
        .request_metrics(sink.clone())
        .leader_election(lock, quick_election())
        .sharding(ring, "only")
        .build();
    // A controller over the caller's client: the shard member reads objects with it.
    let reconciled = ReconcileLog::default();
    manager
        .controller(Api::<ConfigMap>::namespaced(base.clone(), "default"))
        .complete(reconciled.reconciler::<ConfigMap>())
        .expect("the only controller of its name");
    // A list-watch of the caller's client, given to the factory, and one of the manager's
    // client, which both the manager's and the factory's layers wrap: counted once.
    let secrets: Api<Secret> = Api::namespaced(base.clone(), "default");
    let _user = manager.factory().informer_for(ListWatch::new(secrets).labels("app=user"));
    let pods: Api<Pod> = Api::namespaced(manager.client().clone(), "default");
    let _nested = manager.factory().informer_for(pods);
    let configmaps: Api<ConfigMap> = Api::namespaced(manager.client().clone(), "default");
    let recorder = manager.event_recorder("rest-client-test");
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));

    // The manager's client.
    assert!(configmaps.get_opt("missing").await.expect("a 404 is an answer").is_none());
    // An event.
    let regarding = create_configmap(&server, "regarding").await;
    recorder.publish_for(&regarding, NewEvent::new(EventType::Normal, "Tested", "Test", "counted"));
    recorder.flush().await;
    // The sharded controller reads an object gone from its cache live.
    let labelled = serde_json::from_value(json!({
        "metadata": {"name": "owned", "labels": {shard_label("sets"): "only"}},
    }))
    .expect("a valid configmap");
    setup.create(&PostParams::default(), &labelled).await.expect("create");
    eventually("the controller reconciles it", || reconciled.count("default/owned") >= 1).await;
    setup.delete("owned", &DeleteParams::default()).await.expect("delete");
    eventually("the controller reconciles it gone", || reconciled.saw_absent("default/owned"))
        .await;

    let sent = |what: &str, check: &dyn Fn(&str) -> bool| {
        assert!(log.all().iter().any(|line| check(line)), "no {what} in {:#?}", log.all());
    };
    sent("election Lease get", &|l| l.contains("/leases/election") && l.starts_with("GET"));
    sent("shard Lease get", &|l| l.contains("/leases/only") && l.starts_with("GET"));
    sent("event", &|l| l.starts_with("POST") && l.contains("/events"));
    sent("user list-watch", &|l| l.contains("/secrets") && l.contains("labelSelector=app"));
    sent("controller watch", &|l| l.contains("/configmaps?") && l.contains("watch"));
    sent("nested watch", &|l| l.contains("/pods?") && l.contains("watch"));
    sent("live get", &|l| l.starts_with("GET") && l.ends_with("/configmaps/owned"));
    sent("manager get", &|l| l.starts_with("GET") && l.ends_with("/configmaps/missing"));
    // Requests may be in flight (a Lease renewal): counted once answered. One missing or
    // counted twice keeps the two apart.
    eventually("each request the server got counted once", || {
        sink.by_method() == by_method(&log.all())
    })
    .await;
    let all = sink.all();
    assert!(all.iter().all(|(_, host, _)| host == "api.test:6443"), "{all:?}");
    for code in ["200", "201", "404"] {
        assert!(all.iter().any(|(_, _, c)| c == code), "no {code} in {all:?}");
    }
    assert!(
        all.iter().all(|(_, _, c)| c.len() == 3 && c.parse::<u16>().is_ok()),
        "codes are statuses: {all:?}"
    );
    let _ = stop.send(());
    run.await.expect("the run").expect("a clean stop");
}

#[tokio::test]
async fn a_manager_built_from_a_config_counts_each_429_its_retries_pass() {
    let server = server().await;
    let port = server.addr().port();
    let sink = Arc::new(Requests::default());
    let manager = Manager::builder_from_config(config_of(&server).await)
        .expect("a client")
        .request_metrics(sink.clone())
        .build();
    let configmaps: Api<ConfigMap> = Api::namespaced(manager.client().clone(), "default");
    server.faults().fail_next(2, Failure::TooManyRequests { retry_after_seconds: 0 });
    configmaps.list(&ListParams::default()).await.expect("the third attempt answers");
    assert_eq!(sink.codes(), ["429", "429", "200"]);
    let host = format!("127.0.0.1:{port}");
    assert!(
        sink.all().iter().all(|(method, h, _)| method == "GET" && *h == host),
        "{:?}",
        sink.all()
    );
    assert_eq!(manager.client_pressure().throttled(), 2);

    // An informer over the manager's client, wrapped again by the factory: each attempt
    // still counts once.
    let informer = manager.factory().informer_for(configmaps);
    server.faults().fail_next(2, Failure::TooManyRequests { retry_after_seconds: 0 });
    let (stop, _run) = start(&informer);
    eventually("the informer synced", || informer.has_synced()).await;
    // Two refused attempts, then the streaming list (a watch) that synced it, answered
    // before its events came: none counted twice by the nested layers.
    assert_eq!(sink.codes()[3..], ["429", "429", "200"]);
    assert_eq!(manager.client_pressure().throttled(), 4);
    drop(stop);
}

#[tokio::test]
async fn a_prebuilt_retrying_client_hides_the_429s_it_retried() {
    let server = server().await;
    let sink = Arc::new(Requests::default());
    // `server.client()` has kube-client's default retries inside: the documented limit.
    let manager = Manager::builder(server.client()).request_metrics(sink.clone()).build();
    let configmaps: Api<ConfigMap> = Api::namespaced(manager.client().clone(), "default");
    server.faults().fail_next(2, Failure::TooManyRequests { retry_after_seconds: 0 });
    configmaps.list(&ListParams::default()).await.expect("the retries pass");
    assert_eq!(sink.codes(), ["200"]);
    assert_eq!(sink.all()[0].1, "", "a prebuilt client names no host unless told");
    assert_eq!(manager.client_pressure().throttled(), 0);
}

#[tokio::test]
async fn server_errors_html_answers_and_refused_connections_are_counted_by_code() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let addr = free_port().await;
    let _scripted = Scripted::start_on(addr, move |asked| {
        if asked.line.contains("/configmaps/broken") {
            return Reply::status(500, "InternalError", "broken");
        }
        // An HTML 503 from a proxy in front of the server, then the object.
        if counted.fetch_add(1, Ordering::SeqCst) == 0 {
            let body = "<html><body>503 Service Unavailable</body></html>".to_owned();
            return Reply::Body { status: 503, content_type: "text/html", body };
        }
        Reply::json(
            json!({"kind": "ConfigMap", "apiVersion": "v1",
                   "metadata": {"name": "flaky", "namespace": "default"}})
            .to_string(),
        )
    })
    .await;
    let url = format!("http://{addr}");
    let sink = Arc::new(Requests::default());
    let manager = Manager::builder_from_config(Config::new(url.parse().unwrap()))
        .expect("a client")
        .request_metrics(sink.clone())
        .build();
    let configmaps: Api<ConfigMap> = Api::namespaced(manager.client().clone(), "default");
    configmaps.get("broken").await.expect_err("a 500");
    let flaky = configmaps.get("flaky").await.expect("the retry after the 503");
    assert_eq!(flaky.meta().name.as_deref(), Some("flaky"));
    assert_eq!(sink.codes(), ["500", "503", "200"]);
    let host = addr.to_string();
    assert!(sink.all().iter().all(|(_, h, _)| *h == host), "the authority alone: {:?}", sink.all());
    assert_eq!(manager.client_pressure().throttled(), 2);

    // Nothing listens: no answer, so "<error>", which is not the server pushing back.
    let addr = free_port().await;
    let sink = Arc::new(Requests::default());
    let config = Config::new(format!("http://{addr}").parse().unwrap());
    let manager = Manager::builder_from_config(config)
        .expect("a client")
        .request_metrics(sink.clone())
        .build();
    let configmaps: Api<ConfigMap> = Api::namespaced(manager.client().clone(), "default");
    configmaps.get("any").await.expect_err("refused");
    assert_eq!(sink.all(), [("GET".to_owned(), addr.to_string(), "<error>".to_owned())]);
    assert_eq!(manager.client_pressure().throttled(), 0);
}

/// A loopback address nothing listens on (for now).
async fn free_port() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    listener.local_addr().expect("its address")
}
