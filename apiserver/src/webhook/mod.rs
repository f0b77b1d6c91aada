//! Layer 2, the webhook client that admission and CRD conversion share (kube's `util/webhook`).
//! It imports nothing of the crate and offers [`post`]: a JSON body to a URL, a JSON answer back.
//!
//! POSTs of JSON to webhooks over HTTPS, as kube-apiserver makes them (admission and CRD
//! conversion): `?timeout=Ns` added to the URL, the webhook's `caBundle` the only trusted
//! roots (the system's without one), the call cut at its timeout; a failure worded as Go's
//! HTTP client words it (read off kube-apiserver v1.36.2): `Post "URL?timeout=5s": dial tcp
//! 127.0.0.1:1: connect: connection refused`, `…: tls: failed to verify certificate: x509:
//! certificate signed by unknown authority`, `…: context deadline exceeded`.

use std::time::Duration;

use base64::Engine;
use kube_client::{Client, Config};

/// POSTs `body` to `url`, trusting `ca_bundle` (PEM) alone, within `timeout`: the answer's
/// text, or why there is none.
pub(crate) async fn post(
    url: &str,
    ca_bundle: Option<&[u8]>,
    timeout: Duration,
    body: Vec<u8>,
) -> Result<String, String> {
    let seconds = timeout.as_secs().max(1);
    let (base, path) = split_url(url);
    let path = match path.contains('?') {
        true => format!("{path}&timeout={seconds}s"),
        false => format!("{path}?timeout={seconds}s"),
    };
    let shown = format!("{base}{path}");
    let fail = |why: String| format!("Post {shown:?}: {why}");
    let mut config = Config::new(base.parse().map_err(|e| fail(format!("{e}")))?);
    config.root_cert = ca_bundle.map(certificates_der);
    let client = Client::try_from(config).map_err(|e| fail(e.to_string()))?;
    let post = axum::http::Request::post(&path)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json")
        .body(body)
        .map_err(|e| fail(e.to_string()))?;
    match tokio::time::timeout(timeout, client.request_text(post)).await {
        Err(_) => Err(fail("context deadline exceeded".to_owned())),
        Ok(Err(kube_client::Error::Api(status))) => Err(format!(
            "an error on the server ({:?}) has prevented the request from succeeding",
            status.message
        )),
        Ok(Err(err)) => Err(fail(transport_error(&err, base))),
        Ok(Ok(text)) => Ok(text),
    }
}

/// `https://host:port` and the rest (`/path?query`, or `/`).
fn split_url(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => url.split_at(after_scheme + i),
        None => (url, "/"),
    }
}

/// The DER of each certificate in a PEM bundle.
fn certificates_der(pem: &[u8]) -> Vec<Vec<u8>> {
    let text = String::from_utf8_lossy(pem);
    let mut ders = Vec::new();
    let mut inside: Option<String> = None;
    for line in text.lines().map(str::trim) {
        match (line, &mut inside) {
            ("-----BEGIN CERTIFICATE-----", _) => inside = Some(String::new()),
            ("-----END CERTIFICATE-----", Some(b64)) => {
                if let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b64.as_bytes()) {
                    ders.push(der);
                }
                inside = None;
            }
            (line, Some(b64)) => b64.push_str(line),
            _ => {}
        }
    }
    ders
}

/// A transport error in Go's words, where it is one Go names.
fn transport_error(err: &kube_client::Error, base: &str) -> String {
    let mut chain = format!("{err}");
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        chain.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    let host = base.split_once("://").map_or(base, |(_, host)| host);
    if chain.contains("Connection refused") || chain.contains("connection refused") {
        format!("dial tcp {host}: connect: connection refused")
    } else if chain.contains("UnknownIssuer") {
        "tls: failed to verify certificate: x509: certificate signed by unknown authority"
            .to_owned()
    } else if chain.contains("NotValidForName") || chain.contains("not valid for name") {
        format!("tls: failed to verify certificate: x509: certificate is not valid for {host}")
    } else {
        chain
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_the_server_and_the_path() {
        assert_eq!(
            split_url("https://127.0.0.1:9443/validate"),
            ("https://127.0.0.1:9443", "/validate")
        );
        assert_eq!(split_url("https://h:1"), ("https://h:1", "/"));
        assert_eq!(split_url("https://h:1/a?b=c"), ("https://h:1", "/a?b=c"));
    }
}
