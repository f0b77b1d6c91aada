//! Runs ctrlkit's embedded Kubernetes API server until Ctrl-C.
//!
//! `cargo run --example apiserver -- --port 8080`, then
//! `kubectl --server http://127.0.0.1:8080 get pods -A`.
//! With `--kubeconfig FILE` it also writes a kubeconfig for it.

use ctrlkit_apiserver::ApiServer;

fn flag(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let port = match flag("--port") {
        Some(p) => p.parse().map_err(|e| format!("--port {p}: {e}"))?,
        None => 0,
    };
    let server = ApiServer::builder().port(port).start().await?;
    if let Some(path) = flag("--kubeconfig") {
        server.write_kubeconfig(&path)?;
        println!("kubeconfig written to {path}");
    }
    println!("ctrlkit embedded API server listening on {}", server.url());
    println!("try: kubectl --server {} get namespaces", server.url());
    tokio::signal::ctrl_c().await?;
    server.shutdown().await;
    Ok(())
}
