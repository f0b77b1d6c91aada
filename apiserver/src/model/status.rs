//! API errors as `metav1.Status` objects, with the codes, reasons and messages a real
//! kube-apiserver sends.

use std::borrow::Cow;

use axum::http::StatusCode;
use serde_json::{Value, json};

/// A failed request: HTTP code, Kubernetes reason, message, and the object it concerns.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub(crate) code: StatusCode,
    pub(crate) reason: Cow<'static, str>,
    pub(crate) message: String,
    /// (resource plural, name) for `details`.
    pub(crate) details: Option<Box<(String, String)>>,
    /// Seconds for a `Retry-After` header.
    pub(crate) retry_after: Option<u64>,
    /// `details.causes`, such as the fields of an apply's conflicts.
    pub(crate) causes: Box<[Value]>,
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub(crate) fn new(
        code: StatusCode,
        reason: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            code,
            reason: reason.into(),
            message: message.into(),
            details: None,
            retry_after: None,
            causes: Box::default(),
        }
    }

    fn about(mut self, kind: &str, name: &str) -> Self {
        self.details = Some(Box::new((kind.to_owned(), name.to_owned())));
        self
    }

    pub(crate) fn not_found(plural: &str, name: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NotFound", format!("{plural} \"{name}\" not found"))
            .about(plural, name)
    }

    /// A path that names no resource this server serves.
    pub(crate) fn no_route() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub(crate) fn already_exists(plural: &str, name: &str) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("{plural} \"{name}\" already exists"),
        )
        .about(plural, name)
    }

    pub(crate) fn conflict(plural: &str, name: &str) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {plural} \"{name}\": the object has been \
                 modified; please apply your changes to the latest version and try again"
            ),
        )
        .about(plural, name)
    }

    /// 422 Invalid, as the real server's validation answers: its details name the kind (not
    /// the plural, as NotFound's do).
    pub(crate) fn invalid(kind: &str, name: &str, cause: &str) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {cause}"),
        )
        .about(kind, name)
    }

    /// Adds a `details.causes` entry: `reason` (`FieldValueInvalid`, …), its message, the field.
    pub(crate) fn with_cause(mut self, reason: &str, message: &str, field: &str) -> Self {
        let cause = serde_json::json!({ "reason": reason, "message": message, "field": field });
        self.causes = self.causes.iter().cloned().chain([cause]).collect();
        self
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    pub(crate) fn expired(message: impl Into<String>) -> Self {
        Self::new(StatusCode::GONE, "Expired", message)
    }

    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// The `metav1.Status` body.
    pub(crate) fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        });
        // The real server's Status of an invalid shard selector has no reason.
        if self.reason.is_empty() {
            status.as_object_mut().map(|m| m.remove("reason"));
        }
        if let Some(details) = &self.details {
            let (kind, name) = details.as_ref();
            status["details"] = json!({ "name": name, "kind": kind });
        }
        if let Some(secs) = self.retry_after {
            status["details"]["retryAfterSeconds"] = json!(secs);
        }
        if !self.causes.is_empty() {
            status["details"]["causes"] = json!(self.causes);
        }
        status
    }
}
