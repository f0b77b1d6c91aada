//! One call of one webhook: an `admission.k8s.io/v1` `AdmissionReview` POSTed to its
//! `clientConfig.url` (see the `https` module: timeout, `caBundle`, Go's words for a failed
//! call, after `failed to call webhook: `), and what the answer says: a denial as the real
//! server makes it of the webhook's status, an invalid answer as `received invalid webhook
//! response: expected response.uid="…", got "…"` (read off kube-apiserver v1.36.2).

use base64::Engine;
use serde_json::{Value, json};

use super::hooks::Hook;
use crate::model::status::ApiError;
use crate::webhook::post;

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
    let review = json!({ "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request });
    let body = serde_json::to_vec(&review).unwrap_or_default();
    let text = post(url, hook.ca_bundle.as_deref(), hook.timeout, body)
        .await
        .map_err(|why| format!("failed to call webhook: {why}"))?;
    answer(&hook.name, request["uid"].as_str().unwrap_or_default(), &text)
}

/// What the answer `text` of the webhook `name` to the request `uid` says.
fn answer(name: &str, uid: &str, text: &str) -> Result<Answer, String> {
    let invalid = |why: String| format!("received invalid webhook response: {why}");
    let review: Value =
        crate::model::shapes::from_slice(text.as_bytes()).map_err(|e| invalid(e.to_string()))?;
    let response = review.get("response").filter(|r| r.is_object());
    let response = response.ok_or_else(|| invalid("webhook response was absent".to_owned()))?;
    let got = response["uid"].as_str().unwrap_or_default();
    if uid != got {
        return Err(invalid(format!("expected response.uid={uid:?}, got {got:?}")));
    }
    let warnings = crate::model::json::strings(response, "warnings").map(str::to_owned).collect();
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
            Some(crate::model::shapes::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?)
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
}
