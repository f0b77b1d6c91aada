//! kubectl as a real client of the server.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{KUBECTL_POD, Needs, Target};

/// Runs kubectl against `kubeconfig` in `namespace` (unless the arguments name one);
/// `None` when kubectl is not installed.
fn kubectl(
    kubeconfig: &Path,
    namespace: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Option<(bool, String)> {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(kubeconfig).args(args);
    if !args.iter().any(|a| *a == "-A" || *a == "-n") {
        cmd.args(["-n", namespace]);
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("running kubectl: {e}"),
    };
    if let Some(input) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Some((out.status.success(), text))
}

/// kubectl against the case's server in its namespace, off the async threads.
async fn in_case(
    t: &Target,
    args: &'static [&'static str],
    stdin: Option<&'static str>,
) -> Option<(bool, String)> {
    let kubeconfig = t.kubeconfig().to_owned();
    let ns = t.ns.clone();
    tokio::task::spawn_blocking(move || kubectl(&kubeconfig, &ns, args, stdin)).await.unwrap()
}

/// The words of the first line of kubectl's output: a table's column headers.
fn header(out: &str) -> Vec<&str> {
    out.lines().next().unwrap_or_default().split_whitespace().collect()
}

async fn kubectl_creates_gets_labels_patches_watches_and_deletes(t: &Target) {
    let k = |args, stdin| in_case(t, args, stdin);
    let Some((ok, out)) = k(&["api-resources"], None).await else {
        eprintln!(
            "kubectl is not on PATH: skipped kubectl_creates_gets_labels_patches_watches_and_deletes"
        );
        return;
    };
    assert!(
        ok && out.contains("pods")
            && out.contains("leases")
            && out.contains("coordination.k8s.io/v1"),
        "{out}"
    );

    // `get -w` in the background, for the whole session.
    let watch_config = t.kubeconfig().to_owned();
    let watch_ns = t.ns.clone();
    let watcher = std::thread::spawn(move || {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&watch_config)
            .args(["get", "pods", "-n", &watch_ns, "-w", "--request-timeout=6s"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (ok, out) = k(&["create", "-f", "-"], Some(KUBECTL_POD)).await.unwrap();
    assert!(ok, "{out}");
    let (ok, out) = k(&["get", "pods"], None).await.unwrap();
    assert!(ok && out.contains("web-0"), "{out}");
    // The server's table: kubectl prints its columns, the wide ones with `-o wide`.
    assert_eq!(header(&out), ["NAME", "READY", "STATUS", "RESTARTS", "AGE"], "{out}");
    let (ok, out) = k(&["get", "pods", "-o", "wide"], None).await.unwrap();
    let wide = [
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED",
        "NODE",
        "READINESS",
        "GATES",
    ];
    assert!(ok && header(&out) == wide, "{out}");
    let (ok, out) = k(&["label", "pod", "web-0", "tier=front"], None).await.unwrap();
    assert!(ok, "{out}");
    let (ok, out) = k(&["annotate", "pod", "web-0", "note=hello"], None).await.unwrap();
    assert!(ok, "{out}");
    let (ok, out) = k(
        &[
            "patch",
            "pod",
            "web-0",
            "-p",
            r#"{"spec":{"containers":[{"name":"web","image":"nginx:1.26"}]}}"#,
        ],
        None,
    )
    .await
    .unwrap();
    assert!(ok, "{out}");
    let (ok, out) = k(&["get", "pod", "web-0", "-o", "jsonpath={.metadata.labels.tier} {.metadata.annotations.note} {.spec.containers[0].image}"], None).await.unwrap();
    assert!(ok && out.contains("front hello nginx:1.26"), "{out}");
    let (ok, out) = k(&["apply", "-f", "-"], Some(KUBECTL_POD)).await.unwrap();
    assert!(ok && out.contains("configured"), "{out}");
    let (ok, out) = k(&["get", "pods", "-A", "-l", "app=web"], None).await.unwrap();
    assert!(ok && out.contains(&t.ns) && out.contains("web-0"), "{out}");
    let (ok, out) = k(&["get", "pods", "-n", "kube-system"], None).await.unwrap();
    assert!(ok && !out.contains("web-0"), "{out}");
    let (ok, out) = k(&["delete", "pod", "web-0"], None).await.unwrap();
    assert!(ok && out.contains("deleted"), "{out}");
    let (_, out) = k(&["get", "pod", "web-0"], None).await.unwrap();
    assert!(out.contains("NotFound"), "{out}");

    let watched = tokio::task::spawn_blocking(move || watcher.join().unwrap()).await.unwrap();
    assert!(watched.matches("web-0").count() >= 3, "get -w saw the pod's changes:\n{watched}");
}
case!(Needs::Protocol, kubectl_creates_gets_labels_patches_watches_and_deletes);

/// A Deployment for `kubectl apply`.
const KUBECTL_DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.26
"#;

async fn kubectl_scales_applies_server_side_and_finds_workloads_by_short_name(t: &Target) {
    let k = |args, stdin| in_case(t, args, stdin);
    let Some((ok, out)) = k(&["apply", "-f", "-"], Some(KUBECTL_DEPLOYMENT)).await else {
        eprintln!("kubectl is not on PATH: skipped kubectl_scales_applies_server_side_…");
        return;
    };
    assert!(ok && out.contains("created"), "{out}");
    let (ok, out) = k(&["scale", "deployment", "web", "--replicas=3"], None).await.unwrap();
    assert!(ok && out.contains("scaled"), "{out}");
    let (ok, out) =
        k(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"], None).await.unwrap();
    assert!(ok && out.trim() == "3", "{out}");
    let (ok, out) = k(&["get", "deploy,rs,sts,ds,jobs,sa", "-o", "name"], None).await.unwrap();
    assert!(ok && out.contains("deployment.apps/web"), "{out}");
    let (ok, out) = k(&["get", "deploy"], None).await.unwrap();
    assert!(ok && header(&out) == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"], "{out}");
    assert!(out.contains("0/3"), "no controller made pods: {out}");

    // Server-side apply: a second manager changing the first's field conflicts until forced.
    let ssa = |level: &'static str| -> &'static str {
        match level {
            "1" => {
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {level: \"1\"}\n"
            }
            _ => {
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {level: \"2\"}\n"
            }
        }
    };
    let (ok, out) = k(&["apply", "--server-side", "-f", "-"], Some(ssa("1"))).await.unwrap();
    assert!(ok && out.contains("serverside-applied"), "{out}");
    let other = &["apply", "--server-side", "--field-manager=other", "-f", "-"];
    let (ok, out) = k(other, Some(ssa("2"))).await.unwrap();
    assert!(!ok && out.contains("conflict") && out.contains(".data.level"), "{out}");
    let forced =
        &["apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", "-"];
    let (ok, out) = k(forced, Some(ssa("2"))).await.unwrap();
    assert!(ok, "{out}");
    let (ok, out) =
        k(&["get", "cm", "settings", "-o", "jsonpath={.data.level}"], None).await.unwrap();
    assert!(ok && out.trim() == "2", "{out}");
}
case!(Needs::Protocol, kubectl_scales_applies_server_side_and_finds_workloads_by_short_name);

/// kubectl's generator commands send protobuf (`-v=8` shows it); a session of them works,
/// and what they create is what a JSON client reads back.
async fn kubectl_generators_create_namespaces_configmaps_and_secrets(t: &Target) {
    let kubeconfig = t.kubeconfig().to_owned();
    let ns = t.ns.clone();
    let team = format!("{ns}-team");
    let k = move |args: Vec<String>| {
        let (kubeconfig, ns) = (kubeconfig.clone(), ns.clone());
        async move {
            tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                kubectl(&kubeconfig, &ns, &args, None)
            })
            .await
            .unwrap()
        }
    };
    let words = |text: &str| text.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let Some((ok, out)) = k(words(&format!("create namespace {team} -v=8"))).await else {
        eprintln!("kubectl is not on PATH: skipped kubectl_generators_…");
        return;
    };
    assert!(ok && out.contains(&format!("namespace/{team} created")), "{out}");
    assert!(
        out.contains("Content-Type: application/vnd.kubernetes.protobuf"),
        "sent as protobuf: {out}"
    );
    let (ok, out) = k(words(&format!("get namespace {team}"))).await.unwrap();
    assert!(ok && header(&out) == ["NAME", "STATUS", "AGE"] && out.contains("Active"), "{out}");

    let create =
        format!("create configmap settings -n {team} --from-literal=level=1 --from-literal=empty=");
    let (ok, out) = k(words(&create)).await.unwrap();
    assert!(ok && out.contains("configmap/settings created"), "{out}");
    let (ok, out) = k(words(&format!("get configmap settings -n {team} -o json"))).await.unwrap();
    assert!(ok, "{out}");
    let configmap: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(configmap["data"], serde_json::json!({ "level": "1", "empty": "" }), "{out}");
    assert!(configmap["metadata"].get("generateName").is_none(), "no empty fields: {out}");

    let create = format!("create secret generic creds -n {team} --from-literal=password=hunter2");
    let (ok, out) = k(words(&create)).await.unwrap();
    assert!(ok && out.contains("secret/creds created"), "{out}");
    let (ok, out) = k(words(&format!("get secrets -n {team}"))).await.unwrap();
    assert!(ok && header(&out) == ["NAME", "TYPE", "DATA", "AGE"], "{out}");
    assert!(out.lines().any(|l| words(l)[..3] == ["creds", "Opaque", "1"]), "{out}");
    let jsonpath = "jsonpath={.data.password}";
    let (ok, out) = k(vec![
        "get".into(),
        "secret".into(),
        "creds".into(),
        "-n".into(),
        team.clone(),
        "-o".into(),
        jsonpath.into(),
    ])
    .await
    .unwrap();
    assert!(ok && out.trim() == "aHVudGVyMg==", "{out}");

    let (ok, out) = k(words("get configmaps,secrets -A")).await.unwrap();
    assert!(ok && out.contains(&team) && out.contains("settings"), "{out}");
    let (ok, out) = k(words(&format!("delete namespace {team} --wait=false"))).await.unwrap();
    assert!(ok && out.contains("deleted"), "{out}");
}
case!(Needs::Protocol, kubectl_generators_create_namespaces_configmaps_and_secrets);

const GADGET_CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: applygadgets.kubectl.example.com
spec:
  group: kubectl.example.com
  scope: Namespaced
  names: {plural: applygadgets, singular: applygadget, kind: ApplyGadget, listKind: ApplyGadgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        description: A gadget, for kubectl's cases.
        properties:
          spec:
            type: object
            description: What the gadget should be.
            properties:
              size: {type: integer, description: How big it is.}
";

const GADGET: &str = "apiVersion: kubectl.example.com/v1
kind: ApplyGadget
metadata: {name: g1}
spec: {size: 3}
";

const SETTINGS: &str = "apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {level: \"1\"}
";

const SETTINGS_CHANGED: &str = "apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {level: \"2\"}
";

const UNKNOWN_FIELD: &str = "apiVersion: v1
kind: ConfigMap
metadata: {name: typo}
dta: {level: \"1\"}
";

/// kubectl with its default validation (`--validate=strict`): it reads the server's OpenAPI
/// documents (v3 on 1.36 and the embedded server, v2 on 1.20) to validate, diff and explain,
/// for built-in kinds and a CRD's kind alike. The kind's plural is the suite's only one
/// (`gadgets` of another case's CRD would make `explain gadgets` ambiguous on a shared server).
async fn kubectl_applies_diffs_and_explains_with_its_default_validation(t: &Target) {
    let k = |args, stdin| in_case(t, args, stdin);
    let Some((ok, out)) = k(&["apply", "-f", "-"], Some(SETTINGS)).await else {
        eprintln!("kubectl is not on PATH: skipped");
        return;
    };
    assert!(ok && out.contains("configmap/settings created"), "{out}");
    let (ok, out) = k(&["apply", "-f", "-"], Some(KUBECTL_DEPLOYMENT)).await.unwrap();
    assert!(ok && out.contains("deployment.apps/web"), "{out}");
    let (ok, out) = k(&["apply", "-f", "-"], Some(GADGET_CRD)).await.unwrap();
    assert!(ok && out.contains("customresourcedefinition"), "{out}");
    let established: &'static [&'static str] = &[
        "wait",
        "--for=condition=established",
        "--timeout=30s",
        "crd/applygadgets.kubectl.example.com",
    ];
    let (ok, out) = k(established, None).await.unwrap();
    assert!(ok, "{out}");
    let (ok, out) = k(&["apply", "-f", "-"], Some(GADGET)).await.unwrap();
    assert!(ok && out.contains("applygadget.kubectl.example.com/g1"), "{out}");

    // diff: exit status 1 and the change, nothing written.
    let (ok, out) = k(&["diff", "-f", "-"], Some(SETTINGS_CHANGED)).await.unwrap();
    assert!(!ok && out.contains("-  level: \"1\"") && out.contains("+  level: \"2\""), "{out}");
    let (_, out) =
        k(&["get", "configmap", "settings", "-o", "jsonpath={.data.level}"], None).await.unwrap();
    assert_eq!(out, "1", "diff wrote nothing");

    let (ok, out) = k(&["explain", "pods.spec.restartPolicy"], None).await.unwrap();
    assert!(ok && out.contains("restartPolicy") && out.contains("<string>"), "{out}");
    // A real server publishes a new CRD's schema a moment after the CRD is established: the
    // same 30 s as the wait above.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out) = k(&["explain", "applygadgets.spec.size"], None).await.unwrap();
        if ok && out.contains("How big it is.") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{out}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // An unknown field fails the command: on 1.36 the server refuses it (kubectl asks for
    // fieldValidation=Strict), on 1.20 kubectl itself, from the v2 document.
    let (ok, out) = k(&["apply", "-f", "-"], Some(UNKNOWN_FIELD)).await.unwrap();
    assert!(!ok && out.contains("dta"), "{out}");
    if t.version().at_least(25) {
        assert!(out.contains("strict decoding error: unknown field \"dta\""), "{out}");
    }
}
case!(Needs::Protocol, kubectl_applies_diffs_and_explains_with_its_default_validation);
