//! The examples as processes against the server, driven by kubectl: the pod example
//! (`cargo run --example pods`) prints the lines of client-go's `examples/workqueue` as pods change; the operator example
//! (`cargo run --example configmap_sets`) keeps its ConfigMaps as kubectl creates, edits,
//! deletes and scales. Both exit 0 on SIGTERM.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlkit::sharding::{HashRing, ring_key};
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{KUBECTL_POD, Needs, Target};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::{ApiResource, DynamicObject};
use kube_client::{Api, ResourceExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::common::*;

/// An example's binary, beside this test's, built with every feature (the operator's
/// `--metrics-addr` needs `metrics`). `cargo test` builds the examples, but with whatever
/// features the last build of each had (a `cargo run --example configmap_sets` leaves one
/// without), so the first call builds them again as the cases need them.
fn example_binary(name: &str) -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        // Run by cargo (`cargo test`): the same cargo, a fresh build of both examples.
        let Some(cargo) = std::env::var_os("CARGO") else { return };
        let status = std::process::Command::new(cargo)
            .args(["build", "--quiet", "--all-features", "--example", "pods"])
            .args(["--example", "configmap_sets"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the examples failed");
    });
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let binary =
        profile_dir.join("examples").join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.exists(),
        "{} is missing: build it with `cargo build --all-features --example {name}` \
         (cargo test builds it too)",
        binary.display()
    );
    binary
}

/// Runs kubectl on the case's server and namespace (with a discovery cache of the case's
/// own: a webhook case changes the versions a CRD serves); its success and output.
pub(crate) async fn kubectl_output(
    t: &Target,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String) {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(t.kubeconfig()).args(["-n", &t.ns]);
    cmd.arg("--cache-dir").arg(t.dir().join("kubectl-cache")).args(args);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl runs");
    if let Some(input) = stdin {
        use tokio::io::AsyncWriteExt;
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).await.unwrap();
    }
    let out = child.wait_with_output().await.unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Runs kubectl and checks that it succeeds; its output.
pub(crate) async fn kubectl(t: &Target, args: &[&str], stdin: Option<&str>) -> String {
    let (ok, text) = kubectl_output(t, args, stdin).await;
    assert!(ok, "kubectl {args:?} failed: {text}");
    text
}

/// An example running against the case's server, its stdout collected line by line.
pub(crate) struct Example {
    child: Child,
    /// Whether a launcher runs the example (as its one child).
    launched: bool,
    lines: Arc<Mutex<Vec<String>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Example {
    pub(crate) fn start(t: &Target, name: &str, args: &[&str]) -> Example {
        Example::start_in(t, name, args, &[], &[])
    }

    /// As [`start`](Self::start), run by `launcher` (`unshare --pid ...`, say: the example
    /// is appended to its arguments) with `env` set too.
    pub(crate) fn start_in(
        t: &Target,
        name: &str,
        args: &[&str],
        launcher: &[&str],
        env: &[(&str, &str)],
    ) -> Example {
        let binary = example_binary(name);
        let mut command = match launcher.split_first() {
            Some((program, rest)) => {
                let mut command = Command::new(program);
                command.args(rest).arg(&binary);
                command
            }
            None => Command::new(&binary),
        };
        let mut child = command
            .args(args)
            .envs(env.iter().copied())
            .env("KUBECONFIG", t.kubeconfig())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("the example starts");
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let reader = {
            let lines = lines.clone();
            let stdout = child.stdout.take().unwrap();
            tokio::spawn(async move {
                let mut stdout = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = stdout.next_line().await {
                    lines.lock().unwrap().push(line);
                }
            })
        };
        Example { child, launched: !launcher.is_empty(), lines, reader }
    }

    /// The process signals go to: the example, even under a launcher (`unshare --fork`
    /// ignores SIGTERM while it waits for its child).
    fn pid(&self) -> String {
        let pid = self.child.id().expect("still running");
        if !self.launched {
            return pid.to_string();
        }
        let children = format!("/proc/{pid}/task/{pid}/children");
        let text = std::fs::read_to_string(&children).unwrap_or_default();
        text.split_whitespace()
            .next()
            .unwrap_or_else(|| panic!("{children} names no child"))
            .to_owned()
    }

    /// Whether it leads now, as its last leadership line says.
    pub(crate) fn leads(&self) -> bool {
        let lines = self.lines();
        let became = lines.iter().rposition(|l| l == "Became the leader");
        let stopped = lines.iter().rposition(|l| l == "Stopped leading");
        became.is_some_and(|b| stopped.is_none_or(|s| s < b))
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn printed(&self, line: &str) -> usize {
        self.lines.lock().unwrap().iter().filter(|l| *l == line).count()
    }

    /// Kills the process as a node failure would (SIGKILL): no shutdown, no lease released.
    async fn kill(mut self) {
        let pid = self.pid();
        let status = std::process::Command::new("kill").args(["-KILL", &pid]).status().unwrap();
        assert!(status.success());
        let _ = self.child.wait().await;
    }

    /// Sends SIGTERM and checks for a clean exit within 20 s.
    pub(crate) async fn terminate(mut self) -> Vec<String> {
        let pid = self.pid();
        let status = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
        let exit = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("the example stops within 20 s of SIGTERM")
            .unwrap();
        assert!(exit.success(), "exit status after SIGTERM: {exit}; printed {:#?}", self.lines());
        let lines = self.lines.clone();
        self.reader.await.unwrap();
        lines.lock().unwrap().clone()
    }
}

pub(crate) fn have_kubectl() -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("kubectl").is_file()));
    if !found {
        eprintln!("kubectl is not on PATH: skipped the example case");
    }
    found
}

async fn the_checked_in_crd_is_the_one_the_type_generates_and_the_server_takes_it(t: &Target) {
    let printed = std::process::Command::new(example_binary("configmap_sets"))
        .arg("--print-crd")
        .output()
        .expect("the example runs");
    assert!(printed.status.success(), "{}", String::from_utf8_lossy(&printed.stderr));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/configmap_sets.crd.yaml");
    let checked_in = std::fs::read_to_string(path).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&printed.stdout),
        checked_in,
        "examples/configmap_sets.crd.yaml is stale: \
         cargo run --example configmap_sets -- --print-crd > examples/configmap_sets.crd.yaml"
    );
    if !have_kubectl() {
        return;
    }
    // The server validates it (a real one checks the schema is structural), stores nothing.
    let out = kubectl(t, &["apply", "--dry-run=server", "-f", path], None).await;
    assert!(
        out.contains(
            "customresourcedefinition.apiextensions.k8s.io/configmapsets.ctrlkit.example.com"
        ),
        "{out}"
    );
    assert!(out.contains("(server dry run)"), "{out}");
}
case!(Needs::Protocol, the_checked_in_crd_is_the_one_the_type_generates_and_the_server_takes_it);

async fn the_pod_example_prints_client_gos_lines_as_kubectl_changes_pods(t: &Target) {
    if !have_kubectl() {
        return;
    }
    let example = Example::start(t, "pods", &["--namespace", &t.ns, "--workers", "2"]);
    let sync = "Sync/Add/Update for Pod web-0";
    let gone = format!("Pod {}/web-0 does not exist anymore", t.ns);

    // Give the example time to list before the first change; a pod created before its list
    // would be printed too, so this only keeps the count of lines predictable.
    tokio::time::sleep(Duration::from_millis(500)).await;
    kubectl(t, &["create", "-f", "-"], Some(KUBECTL_POD)).await;
    eventually("the add is printed", || example.printed(sync) >= 1).await;
    let after_add = example.printed(sync);
    kubectl(t, &["label", "pod", "web-0", "tier=front"], None).await;
    eventually("the update is printed", || example.printed(sync) > after_add).await;
    kubectl(t, &["delete", "pod", "web-0", "--wait=true"], None).await;
    // A pod's delete is two events (its deletion timestamp, then the delete); when the first
    // is reconciled after the second arrived, both print the delete, as in client-go.
    eventually("the delete is printed", || example.printed(&gone) >= 1).await;
    let printed_lines = example.lines();
    assert_eq!(printed_lines[0], "Starting Pod controller", "{printed_lines:?}");
    assert!(
        printed_lines[1..].iter().all(|l| l == sync || *l == gone),
        "only client-go's lines: {printed_lines:?}"
    );
    assert_eq!(printed_lines.last(), Some(&gone), "the delete comes last: {printed_lines:?}");
    assert!(!printed_lines.iter().any(|l| l.contains("embedded")), "it used the cluster");
    example.terminate().await;
}
case!(Needs::Protocol, the_pod_example_prints_client_gos_lines_as_kubectl_changes_pods);

/// The example's ConfigMapSets in the case's namespace.
pub(crate) fn configmap_sets(t: &Target) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "ctrlkit.example.com".into(),
        version: "v1".into(),
        api_version: "ctrlkit.example.com/v1".into(),
        kind: "ConfigMapSet".into(),
        plural: "configmapsets".into(),
    };
    Api::namespaced_with(t.client.clone(), &t.ns, &ar)
}

/// Waits up to 40 s for the set `greetings` to report `want` ready ConfigMaps.
async fn wait_ready(sets: &Api<DynamicObject>, want: i64) {
    for _ in 0..400 {
        if let Ok(set) = sets.get("greetings").await
            && set.data["status"]["ready"].as_i64() == Some(want)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the set never had {want} ready ConfigMaps");
}

const SET: &str = "apiVersion: ctrlkit.example.com/v1
kind: ConfigMapSet
metadata:
  name: greetings
spec:
  replicas: 3
  data:
    greeting: hello
";

/// The operator example against the server: it applies its CRD if missing, keeps a set's
/// ConfigMaps as kubectl deletes and edits them, scales down, writes the set's status, and
/// stops on SIGTERM.
async fn the_configmap_sets_example_keeps_its_configmaps_as_kubectl_changes_them(t: &Target) {
    if !have_kubectl() {
        return;
    }
    let example = Example::start(t, "configmap_sets", &["--namespace", &t.ns]);
    eventually("the controller started", || {
        example.lines().iter().any(|l| l.starts_with("Starting ConfigMapSet controller"))
    })
    .await;
    let sets = configmap_sets(t);
    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let ready = |want: i64| wait_ready(&sets, want);
    let names = || {
        let configmaps = configmaps.clone();
        async move {
            let mut names: Vec<String> = configmaps
                .list(&Default::default())
                .await
                .unwrap()
                .iter()
                .map(|c| c.name_any())
                .collect();
            names.sort();
            names
        }
    };

    kubectl(t, &["apply", "-f", "-"], Some(SET)).await;
    ready(3).await;
    assert_eq!(names().await, ["greetings-0", "greetings-1", "greetings-2"]);
    let cm = configmaps.get("greetings-1").await.unwrap();
    let owner = &cm.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("ConfigMapSet", "greetings", Some(true))
    );
    assert_eq!(cm.data.unwrap()["greeting"], "hello");

    kubectl(t, &["delete", "configmap", "greetings-1"], None).await;
    kubectl(
        t,
        &[
            "patch",
            "configmap",
            "greetings-0",
            "--type=merge",
            "-p",
            r#"{"data":{"greeting":"bye","extra":"x"}}"#,
        ],
        None,
    )
    .await;
    let restored = || {
        let configmaps = configmaps.clone();
        async move {
            for _ in 0..200 {
                let zero = configmaps.get_opt("greetings-0").await.unwrap();
                let one = configmaps.get_opt("greetings-1").await.unwrap();
                let hello = |cm: Option<ConfigMap>| {
                    cm.and_then(|c| c.data)
                        .is_some_and(|d| d.len() == 1 && d["greeting"] == "hello")
                };
                if hello(zero) && hello(one) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("the ConfigMaps were not restored");
        }
    };
    restored().await;

    kubectl(
        t,
        &["patch", "configmapset", "greetings", "--type=merge", "-p", r#"{"spec":{"replicas":1}}"#],
        None,
    )
    .await;
    ready(1).await;
    let deleted = || async { names().await == ["greetings-0"] };
    eventually_async_within(Duration::from_secs(20), "the extra ConfigMaps deleted", deleted).await;

    let lines = example.terminate().await;
    let key = format!("{}/greetings", t.ns);
    for expected in [
        format!("ConfigMapSet {key}: created ConfigMap greetings-1"),
        format!("ConfigMapSet {key}: restored ConfigMap greetings-0"),
        format!("ConfigMapSet {key}: deleted ConfigMap greetings-2"),
        format!("ConfigMapSet {key}: 1/1 ConfigMaps ready"),
    ] {
        assert!(lines.contains(&expected), "{expected:?} not printed: {lines:#?}");
    }
    assert_eq!(lines.last().map(String::as_str), Some("Stopping ConfigMapSet controller"));
}
case!(Needs::Protocol, the_configmap_sets_example_keeps_its_configmaps_as_kubectl_changes_them);

/// The series a platform team's dashboards read besides controller-runtime's, each with a
/// sample on the example's `/metrics` once it has reconciled: the client's requests, the
/// controller's worker scaling (at zero), the async runtime's and, on Linux, the process's.
async fn dashboards_series_served(address: std::net::SocketAddr) {
    let mut names = vec![
        "rest_client_requests_total{",
        "rest_client_request_duration_seconds_bucket{",
        "ctrlkit_controller_worker_scaling_total{",
        "tokio_workers_count ",
        "tokio_alive_tasks ",
        "tokio_global_queue_depth ",
    ];
    if cfg!(target_os = "linux") {
        names.extend([
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
        ]);
    }
    let metrics = crate::support::http::get(address, "/metrics").await.expect("/metrics").1;
    let missing: Vec<&str> =
        names.into_iter().filter(|n| !metrics.lines().any(|l| l.starts_with(n))).collect();
    assert!(missing.is_empty(), "not on the example's /metrics: {missing:?}\n{metrics}");
}

/// Three replicas of the operator with `--leader-elect`: one leads and reconciles; killed, it
/// is succeeded within a lease duration and a jittered retry, and the successor reconciles;
/// events show in `kubectl get events`; deleting a set waits for its finalizer's cleanup.
async fn three_operator_replicas_fail_over_record_events_and_finalize(t: &Target) {
    use crate::support::http::{free_address, get};
    if !have_kubectl() {
        return;
    }
    let addresses: Vec<_> = (0..3).map(|_| free_address()).collect();
    let mut replicas: Vec<Option<Example>> = addresses
        .iter()
        .map(|addr| {
            let args =
                ["--namespace", &t.ns, "--leader-elect", "--metrics-addr", &addr.to_string()];
            Some(Example::start(t, "configmap_sets", &args))
        })
        .collect();
    let leading = |r: &Option<Example>| {
        r.as_ref().is_some_and(|e| {
            let lines = e.lines();
            let became = lines.iter().rposition(|l| l == "Became the leader");
            let stopped = lines.iter().rposition(|l| l == "Stopped leading");
            became.is_some_and(|b| stopped.is_none_or(|s| s < b))
        })
    };
    let leader = |replicas: &[Option<Example>]| -> Vec<usize> {
        replicas.iter().enumerate().filter(|(_, r)| leading(r)).map(|(i, _)| i).collect()
    };
    eventually_within(Duration::from_secs(40), "a leader", || !leader(&replicas).is_empty()).await;
    let first = leader(&replicas)[0];
    let metrics = get(addresses[first], "/metrics").await.expect("the leader serves /metrics").1;
    assert!(
        metrics.contains("leader_election_master_status{name=\"configmap-sets\"} 1"),
        "{metrics}"
    );
    for (i, addr) in addresses.iter().enumerate() {
        let mut ready = None;
        for _ in 0..200 {
            ready = get(*addr, "/readyz").await;
            if ready.as_ref().is_some_and(|(status, _)| *status == 200) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(ready.map(|(s, _)| s), Some(200), "replica {i} ready, leading or following");
    }

    let sets = configmap_sets(t);
    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let ready = |want: i64| wait_ready(&sets, want);
    kubectl(t, &["apply", "-f", "-"], Some(SET)).await;
    ready(3).await;
    let set = sets.get("greetings").await.unwrap();
    assert_eq!(set.finalizers(), ["ctrlkit.example.com/cleanup"]);
    dashboards_series_served(addresses[first]).await;
    // Events are written in the background, after the reconcile that records them: a kill
    // before they are written loses them, as client-go's broadcaster does. Wait for them.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(t.client.clone(), &t.ns);
    eventually_async_within(Duration::from_secs(20), "the Created events written", || async {
        let listed = events.list(&Default::default()).await.unwrap();
        listed.items.iter().any(|e| e.note.as_deref() == Some("created ConfigMap greetings-0"))
    })
    .await;

    // The leader dies without a word; another takes over and keeps reconciling.
    let killed = replicas[first].take().unwrap();
    let killed_at = std::time::Instant::now();
    killed.kill().await;
    eventually_within(Duration::from_secs(40), "a new leader", || !leader(&replicas).is_empty())
        .await;
    let failover = killed_at.elapsed();
    assert!(failover <= Duration::from_secs(15 + 5 + 3), "failover after a kill took {failover:?}");
    let second = leader(&replicas)[0];
    kubectl(
        t,
        &["patch", "configmapset", "greetings", "--type=merge", "-p", r#"{"spec":{"replicas":1}}"#],
        None,
    )
    .await;
    ready(1).await;
    let lines = replicas[second].as_ref().unwrap().lines();
    let key = format!("{}/greetings", t.ns);
    assert!(
        lines.contains(&format!("ConfigMapSet {key}: deleted ConfigMap greetings-2")),
        "{lines:#?}"
    );

    // kubectl shows the events. (The real server serves events.k8s.io/v1 events through
    // core/v1 too, with its table columns; the embedded one keeps the two apart and has no
    // tables, so it is asked for the events.k8s.io ones, as JSON.)
    let events = if t.is_real() {
        kubectl(t, &["get", "events"], None).await
    } else {
        kubectl(t, &["get", "events.events.k8s.io", "-o", "json"], None).await
    };
    assert!(
        events.contains("Created") && events.contains("created ConfigMap greetings-0"),
        "{events}"
    );
    assert!(events.contains("deleted ConfigMap greetings-2"), "{events}");

    // Deleting the set waits for the finalizer: when it is gone, so are its ConfigMaps.
    kubectl(t, &["delete", "configmapset", "greetings", "--wait=true"], None).await;
    let left = configmaps.list(&Default::default()).await.unwrap();
    assert!(
        left.items.iter().all(|cm| !cm.name_any().starts_with("greetings-")),
        "{:?}",
        left.items
    );

    for replica in replicas.into_iter().flatten() {
        replica.terminate().await;
    }
}
case!(Needs::Protocol, three_operator_replicas_fail_over_record_events_and_finalize);

/// Three replicas of the operator with `--shard`: the sets are shared among them (each
/// labelled to the shard the ring names for it among the live replicas, its ConfigMaps with
/// it); a replica killed with SIGKILL loses its sets once its Lease expires, and the others
/// keep every set's ConfigMaps.
async fn three_sharded_operator_replicas_share_the_sets_and_outlive_a_kill(t: &Target) {
    if !have_kubectl() {
        return;
    }
    let mut replicas: Vec<Option<Example>> = (0..3)
        .map(|_| Some(Example::start(t, "configmap_sets", &["--namespace", &t.ns, "--shard"])))
        .collect();
    let shard_of = |e: &Example| {
        e.lines()
            .iter()
            .find_map(|l| l.strip_prefix("Shard ")?.split(' ').next().map(str::to_owned))
    };
    eventually_within(Duration::from_secs(20), "every replica names its shard", || {
        replicas.iter().all(|r| r.as_ref().and_then(&shard_of).is_some())
    })
    .await;
    let ids: Vec<String> =
        replicas.iter().map(|r| shard_of(r.as_ref().unwrap()).unwrap()).collect();

    // Twelve sets: the chance that the ring puts all of them on one of three shards is
    // 3 / 3^12, about one in 180,000 runs.
    let names: Vec<String> = (0..12).map(|i| format!("set-{i}")).collect();
    let manifests: Vec<String> = names
        .iter()
        .map(|name| {
            format!(
                "apiVersion: ctrlkit.example.com/v1\nkind: ConfigMapSet\nmetadata: {{name: {name}}}\n\
                 spec: {{replicas: 2, data: {{greeting: hello}}}}\n"
            )
        })
        .collect();
    kubectl(t, &["apply", "-f", "-"], Some(&manifests.join("---\n"))).await;
    let sets = configmap_sets(t);
    let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let label = "shard.ctrlkit.dev/configmap-sets";
    // Every set ready with its ConfigMaps, each labelled to the shard the ring names for it
    // among the live replicas (not merely to some live shard: until the sharder has seen every
    // member's Lease it may have put them all on the first), its ConfigMaps to the same one;
    // returns each set's shard.
    let settled = |live: Vec<String>, replicas_wanted: i64| {
        let (sets, configmaps, names) = (sets.clone(), configmaps.clone(), names.clone());
        let (ring, ns) = (HashRing::new(live.clone()), t.ns.clone());
        async move {
            for _ in 0..900 {
                let mut shards = BTreeMap::new();
                for name in &names {
                    let Ok(set) = sets.get(name).await else { break };
                    let key = ring_key("ctrlkit.example.com", "ConfigMapSet", Some(&ns), name);
                    let ready = set.data["status"]["ready"].as_i64() == Some(replicas_wanted);
                    match set.labels().get(label) {
                        Some(shard) if ready && Some(shard.as_str()) == ring.shard_for(&key) => {
                            shards.insert(name.clone(), shard.clone());
                        }
                        _ => {}
                    }
                }
                let children = configmaps.list(&Default::default()).await.unwrap().items;
                let children_follow = children.iter().all(|cm| {
                    let owner = cm.owner_references().first().map(|o| o.name.clone());
                    owner.is_none_or(|o| shards.get(&o) == cm.labels().get(label))
                });
                if shards.len() == names.len() && children_follow {
                    return shards;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("the sets never settled on {live:?}");
        }
    };
    let shards = settled(ids.clone(), 2).await;
    let held = |id: &String| shards.values().filter(|s| *s == id).count();
    assert!(ids.iter().filter(|id| held(id) > 0).count() >= 2, "shared: {shards:?}");

    // The replica holding the most sets dies without a word.
    let victim = (0..3).max_by_key(|i| held(&ids[*i])).unwrap();
    replicas[victim].take().unwrap().kill().await;
    let survivors: Vec<String> =
        ids.iter().enumerate().filter(|(i, _)| *i != victim).map(|(_, id)| id.clone()).collect();
    // Its sets are taken over (a lease duration, 15 s, and a pass later) and reconciled: a
    // change made after the kill reaches every set.
    for name in &names {
        let patch = r#"{"spec":{"replicas":3}}"#;
        kubectl(t, &["patch", "configmapset", name, "--type=merge", "-p", patch], None).await;
    }
    let after = settled(survivors.clone(), 3).await;
    assert!(after.values().all(|s| survivors.contains(s)), "{after:?}");
    for replica in replicas.into_iter().flatten() {
        let lines = replica.terminate().await;
        assert_eq!(lines.last().map(String::as_str), Some("Stopping ConfigMapSet controller"));
    }
}
case!(Needs::Protocol, three_sharded_operator_replicas_share_the_sets_and_outlive_a_kill);
