//! The `User-Agent` of ctrlkit's requests, so that a cluster's audit log and its
//! `managedFields` say which controller did what.
//!
//! client-go sends `<binary>/<version> (<os>/<arch>) kubernetes/<commit>` unless the
//! `rest.Config` says otherwise; kube-client sends none. Every client ctrlkit is handed (by
//! [`ListWatch`](crate::cache::ListWatch), the [`SharedInformerFactory`](crate::cache::SharedInformerFactory)
//! and the [`Manager`](crate::manager::Manager) through it, the
//! [`LeaseLock`](crate::leaderelection::LeaseLock) and the
//! [`EventRecorder`](crate::events::EventRecorder)) sends [`default_user_agent`] on each request that
//! has no `User-Agent` yet: `<binary>/<ctrlkit version> (<os>/<arch>) ctrlkit/<ctrlkit
//! version>`, as `pods/0.1.0 (linux/amd64) ctrlkit/0.1.0`.
//!
//! To name a controller otherwise, per client, wrap its client with [`with_user_agent`]
//! before handing it over: its value replaces the default on every request. (A
//! `User-Agent` in kube-client's `Config::headers` is appended after ctrlkit's, and the API
//! server reads the first: use [`with_user_agent`] instead.) Helpers that take the caller's
//! own `Api` ([`finalizer`](crate::finalizer::finalizer), the controller's writes) send
//! whatever that client sends.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use http::HeaderValue;
use http::header::USER_AGENT;
use kube_client::Client;
use kube_client::client::Body;

/// The User-Agent ctrlkit sends by default:
/// `<binary>/<ctrlkit version> (<os>/<arch>) ctrlkit/<ctrlkit version>`, with the binary's
/// file name and Go's names for the operating system and architecture (`linux/amd64`,
/// `darwin/arm64`), as client-go writes them.
pub fn default_user_agent() -> &'static str {
    static AGENT: OnceLock<String> = OnceLock::new();
    AGENT.get_or_init(|| {
        let binary = std::env::args_os()
            .next()
            .and_then(|arg0| {
                std::path::Path::new(&arg0).file_name().map(|n| n.to_string_lossy().into_owned())
            })
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "unknown".to_owned());
        let version = env!("CARGO_PKG_VERSION");
        format!("{binary}/{version} ({}/{}) ctrlkit/{version}", go_os(), go_arch())
    })
}

/// `std::env::consts::OS` as Go's `GOOS` names it.
fn go_os() -> &'static str {
    match std::env::consts::OS {
        "macos" => "darwin",
        os => os,
    }
}

/// `std::env::consts::ARCH` as Go's `GOARCH` names it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "loongarch64" => "loong64",
        arch => arch,
    }
}

/// `client`, with every request sent as `user_agent` (replacing any `User-Agent` it had):
/// how one controller's requests get a name of their own. ctrlkit's default then no longer
/// applies to this client.
///
/// # Errors
/// [`InvalidUserAgent`] if `user_agent` is not a valid header value (a control character,
/// say).
pub fn with_user_agent(
    client: Client,
    user_agent: impl AsRef<str>,
) -> Result<Client, InvalidUserAgent> {
    let value = HeaderValue::from_str(user_agent.as_ref())
        .map_err(|_| InvalidUserAgent(user_agent.as_ref().to_owned()))?;
    Ok(wrap(client, value, true))
}

/// A User-Agent that is not a valid HTTP header value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a valid User-Agent header value")]
pub struct InvalidUserAgent(pub String);

/// `client`, sending [`default_user_agent`] on requests that have no User-Agent: what
/// ctrlkit does to each client it is handed.
pub(crate) fn with_default(client: Client) -> Client {
    let value = HeaderValue::from_str(default_user_agent())
        .unwrap_or_else(|_| HeaderValue::from_static("ctrlkit"));
    wrap(client, value, false)
}

fn wrap(client: Client, value: HeaderValue, replace: bool) -> Client {
    let namespace = client.default_namespace().to_owned();
    Client::new(SetUserAgent { inner: client, value, replace }, namespace)
}

/// A service that sets the User-Agent, then sends through the client it wraps (whose errors
/// pass through unchanged: kube-client unwraps its own error type).
#[derive(Clone)]
struct SetUserAgent {
    inner: Client,
    value: HeaderValue,
    replace: bool,
}

type Sent = Pin<Box<dyn Future<Output = Result<http::Response<Body>, kube_client::Error>> + Send>>;

impl tower::Service<http::Request<Body>> for SetUserAgent {
    type Response = http::Response<Body>;
    type Error = kube_client::Error;
    type Future = Sent;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The wrapped client waits for its own capacity in `send`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        if self.replace || !request.headers().contains_key(USER_AGENT) {
            request.headers_mut().insert(USER_AGENT, self.value.clone());
        }
        let client = self.inner.clone();
        Box::pin(async move { client.send(request).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_names_the_binary_ctrlkit_and_the_platform_as_client_go_does() {
        let agent = default_user_agent();
        let version = env!("CARGO_PKG_VERSION");
        let (binary, rest) = agent.split_once('/').expect("binary/version");
        assert!(!binary.is_empty() && !binary.contains(' '), "{agent}");
        let platform = format!("({}/{})", go_os(), go_arch());
        assert_eq!(rest, format!("{version} {platform} ctrlkit/{version}"));
        if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            assert!(agent.contains(" (linux/amd64) "), "{agent}");
        }
        assert!(HeaderValue::from_str(agent).is_ok());
    }
}
