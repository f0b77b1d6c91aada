//! The signals that stop an operator: Ctrl-C (SIGINT) and, on Unix, SIGTERM, which the kubelet
//! sends a pod it deletes.

/// Resolves on Ctrl-C or SIGTERM. If a signal cannot be listened for (no signal driver), logs
/// why and waits on the other alone.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(err) => {
                tracing::warn!(%err, "cannot listen for SIGTERM; only Ctrl-C stops this process");
                ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    ctrl_c().await;
}

async fn ctrl_c() {
    if let Err(err) = tokio::signal::ctrl_c().await {
        tracing::warn!(%err, "cannot listen for Ctrl-C");
        std::future::pending::<()>().await;
    }
}
