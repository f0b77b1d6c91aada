//! The HTTPS server of webhooks as a process with a low descriptor limit: when it runs out of
//! descriptors it waits before accepting again, instead of spinning a core on the error, and
//! serves again once clients go.

use std::process::Stdio;
use std::time::Duration;

use ctrlkit::webhook::WebhookServer;
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::Command;

/// The environment variable that makes this binary a webhook server on a free loopback port
/// (it prints the port, then its CA bundle, then serves until killed).
pub const HELPER_ENV: &str = "CTRLKIT_SERVE_WEBHOOKS";

/// This binary as that helper.
pub fn helper_main() -> std::process::ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let server = WebhookServer::builder().address("127.0.0.1:0".parse().unwrap()).build();
        let running = server.clone();
        tokio::spawn(async move { running.run(std::future::pending()).await });
        let address = server.serving().await;
        println!("{}", address.port());
        println!("{}", server.certificate().expect("a certificate").ca_pem.trim());
        println!("END");
        std::future::pending::<()>().await;
    });
    std::process::ExitCode::SUCCESS
}

/// User and system CPU of `pid` so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the helper's stat");
    // After the command's name (in parentheses, which may hold spaces): utime is the 12th
    // field, stime the 13th.
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

async fn a_server_out_of_descriptors_waits_instead_of_spinning(_: &Target) {
    let exe = std::env::current_exe().unwrap();
    let mut helper = Command::new("prlimit")
        .arg("--nofile=64:64")
        .arg(&exe)
        .env(HELPER_ENV, "1")
        .env("RUST_LOG", "off")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("prlimit runs the helper");
    let pid = helper.id().unwrap();
    let mut lines = BufReader::new(helper.stdout.take().unwrap()).lines();
    let port: u16 = lines.next_line().await.unwrap().unwrap().parse().unwrap();
    let mut ca = String::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        if line == "END" {
            break;
        }
        ca.push_str(&line);
        ca.push('\n');
    }
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    // More clients than it has descriptors: the rest wait in its listen backlog, and each
    // accept of them fails with EMFILE.
    let mut clients = Vec::new();
    for _ in 0..100 {
        let connect = tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(address));
        match connect.await {
            Ok(Ok(client)) => clients.push(client),
            _ => break, // the backlog is full
        }
    }
    assert!(clients.len() > 64, "{} clients: more than the helper's descriptors", clients.len());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = cpu_ticks(pid);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spent = cpu_ticks(pid) - before;
    // 2 s are 200 ticks (at the usual 100 a second): a loop on the error takes most of them.
    assert!(spent < 40, "the server spent {spent} ticks of CPU in 2 s while out of descriptors");
    // Once clients go it serves again.
    drop(clients);
    let (status, _) = crate::support::http::get_https(address, &ca, "/not-served", None).await;
    assert_eq!(status, 404, "served again once descriptors were free");
}
case!(Needs::Embedded, a_server_out_of_descriptors_waits_instead_of_spinning);
