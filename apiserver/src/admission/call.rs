//! One call of one webhook: an `admission.k8s.io/v1` `AdmissionReview` POSTed over HTTPS to
//! its `clientConfig.url` (with `?timeout=Ns` added, as the real server adds it), trusting
//! its `caBundle` alone, within its `timeoutSeconds`; and what the answer says.
//!
//! A failure is worded as kube-apiserver v1.36 words it (read off it): `failed to call
//! webhook: Post "URL?timeout=5s": dial tcp 127.0.0.1:1: connect: connection refused`, `...:
//! tls: failed to verify certificate: x509: certificate signed by unknown authority`, `...:
//! context deadline exceeded`, `received invalid webhook response: expected
//! response.uid="…", got "…"`.

use base64::Engine;
use kube_client::{Client, Config};
use serde_json::{Value, json};

use super::hooks::Hook;
use crate::status::ApiError;

/// What a webhook answered.
pub(crate) enum Answer {
    /// Allowed, with a JSON patch (mutating webhooks) and warnings.
    Allowed { patch: Option<Value>, warnings: Vec<String> },
    /// Denied: the error the client gets.
    Denied(ApiError),
}

/// Calls `hook` with `request` (an `AdmissionRequest`); the answer, or why the call failed
/// (the text after `failed calling webhook "NAME": `).
pub(crate) async fn call(hook: &Hook, request: &Value) -> Result<Answer, String> {
    let Some(url) = hook.url.as_deref() else {
        return Err("failed to call webhook: a service reference cannot be reached from the \
                    embedded API server; use clientConfig.url"
            .to_owned());
    };
    let seconds = hook.timeout.as_secs().max(1);
    let (base, path) = split_url(url);
    let path = match path.contains('?') {
        true => format!("{path}&timeout={seconds}s"),
        false => format!("{path}?timeout={seconds}s"),
    };
    let shown = format!("{base}{path}");
    let fail = |why: String| format!("failed to call webhook: Post {shown:?}: {why}");
    let mut config = Config::new(base.parse().map_err(|e| fail(format!("{e}")))?);
    config.root_cert = hook.ca_bundle.as_deref().map(certificates_der);
    let client = Client::try_from(config).map_err(|e| fail(e.to_string()))?;
    let review = json!({ "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request });
    let body = serde_json::to_vec(&review).unwrap_or_default();
    let post = axum::http::Request::post(&path)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json")
        .body(body)
        .map_err(|e| fail(e.to_string()))?;
    let text = match tokio::time::timeout(hook.timeout, client.request_text(post)).await {
        Err(_) => return Err(fail("context deadline exceeded".to_owned())),
        Ok(Err(kube_client::Error::Api(status))) => {
            return Err(format!(
                "failed to call webhook: an error on the server ({:?}) has prevented the request from succeeding",
                status.message
            ));
        }
        Ok(Err(err)) => return Err(fail(transport_error(&err, base))),
        Ok(Ok(text)) => text,
    };
    answer(&hook.name, request["uid"].as_str().unwrap_or_default(), &text)
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

/// What the answer `text` of the webhook `name` to the request `uid` says.
fn answer(name: &str, uid: &str, text: &str) -> Result<Answer, String> {
    let invalid = |why: String| format!("received invalid webhook response: {why}");
    let review: Value = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
    let response = review.get("response").filter(|r| r.is_object());
    let response = response.ok_or_else(|| invalid("webhook response was absent".to_owned()))?;
    let got = response["uid"].as_str().unwrap_or_default();
    if uid != got {
        return Err(invalid(format!("expected response.uid={uid:?}, got {got:?}")));
    }
    let warnings = response["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    if response["allowed"].as_bool() != Some(true) {
        return Ok(Answer::Denied(denial(name, &response["status"])));
    }
    let patch = match &response["patch"] {
        Value::Null => None,
        // Go's JSON encodes `[]byte` as base64; an array of numbers decodes to it too.
        Value::String(b64) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| invalid(e.to_string()))?,
        ),
        Value::Array(bytes) => {
            Some(bytes.iter().filter_map(Value::as_u64).map(|b| b as u8).collect())
        }
        other => return Err(invalid(format!("patch is not bytes: {other}"))),
    };
    let patch = match patch {
        None => None,
        Some(bytes) => {
            if response["patchType"] != "JSONPatch" {
                return Err(invalid(format!(
                    "webhook returned a patch of type {} (JSONPatch is the only one supported)",
                    response["patchType"]
                )));
            }
            Some(serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?)
        }
    };
    Ok(Answer::Allowed { patch, warnings })
}

/// The client's error for a denial with `status` (the webhook's `response.status`), as the
/// real server makes it: at least 400, the message prefixed with the webhook's name.
fn denial(name: &str, status: &Value) -> ApiError {
    let denied_by = format!("admission webhook {name:?} denied the request");
    let code = status["code"].as_u64().filter(|c| *c >= 400).unwrap_or(400) as u16;
    let reason = status["reason"].as_str().unwrap_or_default().to_owned();
    let message = match (status["message"].as_str(), reason.as_str()) {
        (Some(m), _) if !m.is_empty() => format!("{denied_by}: {m}"),
        (_, r) if !r.is_empty() => format!("{denied_by}: {r}"),
        _ => format!("{denied_by} without explanation"),
    };
    let code =
        axum::http::StatusCode::from_u16(code).unwrap_or(axum::http::StatusCode::BAD_REQUEST);
    ApiError::new(code, reason, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(text: &str) -> Result<Answer, String> {
        answer("v.example.com", "u1", text)
    }

    #[test]
    fn denials_are_worded_and_coded_as_the_real_server_words_them() {
        let denied = |status: Value| {
            let text = json!({ "response": { "uid": "u1", "allowed": false, "status": status } });
            match answered(&text.to_string()).unwrap() {
                Answer::Denied(err) => (err.code.as_u16(), err.reason.to_string(), err.message),
                Answer::Allowed { .. } => panic!("allowed"),
            }
        };
        let bare = denied(json!({}));
        assert_eq!(
            bare,
            (
                400,
                String::new(),
                "admission webhook \"v.example.com\" denied the request without explanation".into()
            )
        );
        assert_eq!(
            denied(json!({ "reason": "SomeReason" })).2,
            "admission webhook \"v.example.com\" denied the request: SomeReason"
        );
        let invalid = denied(json!({ "code": 422, "reason": "Invalid", "message": "bad" }));
        assert_eq!(
            invalid,
            (
                422,
                "Invalid".into(),
                "admission webhook \"v.example.com\" denied the request: bad".into()
            )
        );
        assert_eq!(
            denied(json!({ "code": 200, "message": "m" })).0,
            400,
            "a denial is at least 400"
        );
    }

    #[test]
    fn answers_are_checked_and_patches_decoded_from_base64_or_numbers() {
        let other = json!({ "response": { "uid": "u2", "allowed": true } }).to_string();
        let err = answered(&other).err().unwrap();
        assert_eq!(
            err,
            "received invalid webhook response: expected response.uid=\"u1\", got \"u2\""
        );
        let absent = answered("{}").err().unwrap();
        assert_eq!(absent, "received invalid webhook response: webhook response was absent");
        let patch = r#"[{"op":"add","path":"/x","value":1}]"#;
        let b64 = base64::engine::general_purpose::STANDARD.encode(patch);
        let numbers: Vec<u8> = patch.bytes().collect();
        for encoded in [json!(b64), json!(numbers)] {
            let text = json!({ "response": { "uid": "u1", "allowed": true, "patch": encoded, "patchType": "JSONPatch", "warnings": ["w"] } });
            match answered(&text.to_string()).unwrap() {
                Answer::Allowed { patch: Some(p), warnings } => {
                    assert_eq!(p[0]["path"], "/x");
                    assert_eq!(warnings, ["w"]);
                }
                _ => panic!("no patch"),
            }
        }
    }

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
