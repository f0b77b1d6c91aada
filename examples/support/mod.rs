//! What the examples share: logs on stderr, and a client for the configured cluster or, when
//! none is configured (or `--embedded` asks for it), for ctrlkit's embedded API server.

use std::process::ExitCode;

use ctrlkit_apiserver::ApiServer;
use kube_client::{Client, Config};

/// What an example's `main` starts with: logs on, its arguments, the cluster's client config
/// and a client made from it (and the embedded server behind them, if any). A bad argument
/// is exit code 2, a failed connection 1, each with its message on stderr.
pub async fn start<A>(
    args: Result<A, String>,
    embedded: impl Fn(&A) -> bool,
) -> Result<(A, Config, Client, Option<ApiServer>), ExitCode> {
    init_logging();
    let args = args.map_err(|message| {
        eprintln!("{message}");
        ExitCode::from(2)
    })?;
    let (config, client, server) = connect(embedded(&args)).await.map_err(|err| {
        eprintln!("error: {err}");
        ExitCode::FAILURE
    })?;
    Ok((args, config, client, server))
}

/// Logs to stderr at `warn`, or as `RUST_LOG` says.
fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// The config (and a client) for the cluster KUBECONFIG, `~/.kube/config` or the pod's
/// service account names; without one, or with `embedded`, for an embedded API server
/// started here (returned too, to keep it running).
async fn connect(embedded: bool) -> Result<(Config, Client, Option<ApiServer>), String> {
    let cluster = if embedded { None } else { Config::infer().await.ok() };
    match cluster {
        Some(config) => Client::try_from(config.clone())
            .map(|client| (config, client, None))
            .map_err(|err| format!("cannot build a client for the configured cluster: {err}")),
        None => {
            let server = ApiServer::start()
                .await
                .map_err(|err| format!("cannot start the embedded API server: {err}"))?;
            println!(
                "No cluster configured: running on ctrlkit's embedded API server at {}",
                server.url()
            );
            let options = kube_client::config::KubeConfigOptions::default();
            let config =
                Config::from_custom_kubeconfig(server.kubeconfig(), &options).await.map_err(
                    |err| format!("cannot read the embedded API server's kubeconfig: {err}"),
                )?;
            Ok((config, server.client(), Some(server)))
        }
    }
}
