//! The pod example (`cargo run --example pods`) as a process against the server, while
//! kubectl creates, labels and deletes a pod: the seed's lines, in order, and a clean exit
//! on SIGTERM.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use super::common::*;
use crate::support::{KUBECTL_POD, Target};

/// The example's binary, built by `cargo test` (or `cargo build --examples`) beside this
/// test's.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    profile_dir.join("examples").join(format!("pods{}", std::env::consts::EXE_SUFFIX))
}

async fn kubectl(t: &Target, args: &[&str], stdin: Option<&str>) -> String {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(t.kubeconfig()).args(["-n", &t.ns]).args(args);
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
    assert!(out.status.success(), "kubectl {args:?} failed: {text}");
    text
}

pub async fn the_pod_example_prints_the_seed_lines_as_kubectl_changes_pods(t: &Target) {
    if which("kubectl").is_none() {
        eprintln!("kubectl is not on PATH: skipped the pod example case");
        return;
    }
    let binary = example_binary();
    assert!(
        binary.exists(),
        "{} is missing: build it with `cargo build --all-features --example pods` \
         (cargo test builds it too)",
        binary.display()
    );
    let mut child = Command::new(&binary)
        .args(["--namespace", &t.ns, "--workers", "2"])
        .env("KUBECONFIG", t.kubeconfig())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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
    let printed = |line: &str| lines.lock().unwrap().iter().filter(|l| *l == line).count();
    let sync = "Sync/Add/Update for Pod web-0";
    let gone = format!("Pod {}/web-0 does not exist anymore", t.ns);

    // Give the example time to list before the first change; a pod created before its list
    // would be printed too, so this only keeps the count of lines predictable.
    tokio::time::sleep(Duration::from_millis(500)).await;
    kubectl(t, &["create", "-f", "-", "--validate=false"], Some(KUBECTL_POD)).await;
    eventually("the add is printed", || printed(sync) >= 1).await;
    let after_add = printed(sync);
    kubectl(t, &["label", "pod", "web-0", "tier=front"], None).await;
    eventually("the update is printed", || printed(sync) > after_add).await;
    kubectl(t, &["delete", "pod", "web-0", "--wait=true"], None).await;
    // A pod's delete is two events (its deletion timestamp, then the delete); when the first
    // is reconciled after the second arrived, both print the delete, as in client-go.
    eventually("the delete is printed", || printed(&gone) >= 1).await;
    let printed_lines = lines.lock().unwrap().clone();
    assert_eq!(printed_lines[0], "Starting Pod controller", "{printed_lines:?}");
    assert!(
        printed_lines[1..].iter().all(|l| l == sync || *l == gone),
        "only the seed's lines: {printed_lines:?}"
    );
    assert_eq!(printed_lines.last(), Some(&gone), "the delete comes last: {printed_lines:?}");
    assert!(!lines.lock().unwrap().iter().any(|l| l.contains("embedded")), "it used the cluster");

    let pid = child.id().expect("still running").to_string();
    let status = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("the example stops within 20 s of SIGTERM")
        .unwrap();
    assert!(exit.success(), "exit status after SIGTERM: {exit}");
    reader.await.unwrap();
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| PathBuf::from(dir).join(program))
        .find(|p| p.is_file())
}
