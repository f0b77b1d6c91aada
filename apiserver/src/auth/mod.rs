//! `TokenReview` (`authentication.k8s.io/v1`) and `SubjectAccessReview`
//! (`authorization.k8s.io/v1`), answered as the real server answers them, so that a
//! component that delegates authentication and authorization to the API server (a metrics
//! endpoint behind `TokenReview` and `SubjectAccessReview`, as controller-runtime's and
//! ctrlkit's secure serving) is tested without a cluster.
//!
//! - A `TokenReview` authenticates the tokens given to [`ApiServerBuilder::user`]: the user's
//!   name, uid and groups, with `system:authenticated` added; any other token is
//!   `authenticated: false`.
//! - A `SubjectAccessReview` is decided by RBAC over the stored roles and bindings (see
//!   `rbac`); `system:masters` may do anything.
//! - Both are answered (201) and never stored: their strategies
//!   (`registry::authentication`, `registry::authorization`) answer a create with
//!   [`review`] and the decision made here. The server itself still lets every request in:
//!   it authenticates and authorizes nobody.
//!
//! [`ApiServerBuilder::user`]: crate::ApiServerBuilder::user

mod rbac;

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::model::status::{ApiError, ApiResult};
use crate::storage::store::Store;

/// A user the server authenticates by token.
#[derive(Debug, Clone)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) groups: Vec<String>,
}

/// Tokens and their users.
pub(crate) type Users = HashMap<String, User>;

/// The answer to a create of a review (`rt`) with `body`: the review with the status that
/// `decide` gives its spec.
pub(crate) fn review(
    rt: &ResourceType,
    body: &[u8],
    decide: impl FnOnce(&Value) -> ApiResult<Value>,
) -> ApiResult<Value> {
    let mut review: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("the body of the request was in an unknown format: {e}"))
    })?;
    review["status"] = decide(&review["spec"])?;
    review["apiVersion"] = json!(rt.api_version());
    review["kind"] = json!(rt.kind);
    if let Some(meta) = review["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
    } else {
        review["metadata"] = json!({});
    }
    Ok(review)
}

/// A `TokenReview`'s status: the user `spec.token` authenticates as, if any.
pub(crate) fn token_review(users: &Users, spec: &Value) -> ApiResult<Value> {
    let token = spec["token"].as_str().unwrap_or_default();
    if token.is_empty() {
        let why = "spec.token: Required value";
        return Err(ApiError::invalid("TokenReview.authentication.k8s.io", "", why));
    }
    Ok(match users.get(token) {
        Some(user) => {
            let mut groups = user.groups.clone();
            groups.push("system:authenticated".to_owned());
            json!({
                "authenticated": true,
                "user": { "username": user.name, "uid": user.uid, "groups": groups },
                "audiences": spec["audiences"].clone(),
            })
        }
        None => json!({ "user": {}, "error": "[invalid bearer token, token lookup failed]" }),
    })
}

/// A `SubjectAccessReview`'s status: whether RBAC over `store` lets the spec's user do what
/// it asks.
pub(crate) fn access_review(store: &Store, spec: &Value) -> ApiResult<Value> {
    let user = spec["user"].as_str().unwrap_or_default();
    let groups: Vec<String> =
        crate::model::json::strings(spec, "groups").map(str::to_owned).collect();
    if user.is_empty() && groups.is_empty() {
        let why = "spec.user: Invalid value: \"\": at least one of user or group must be specified";
        return Err(ApiError::invalid("SubjectAccessReview.authorization.k8s.io", "", why));
    }
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let (path, resource) = (&spec["nonResourceAttributes"], &spec["resourceAttributes"]);
    let (path_text, path_verb) = (text(&path["path"]), text(&path["verb"]));
    let fields: Vec<String> = ["namespace", "verb", "group", "resource", "subresource", "name"]
        .iter()
        .map(|f| text(&resource[*f]))
        .collect();
    let asked = match (path.is_object(), resource.is_object()) {
        (true, false) => rbac::Asked::Path { path: &path_text, verb: &path_verb },
        (false, true) => rbac::Asked::Resource {
            namespace: &fields[0],
            verb: &fields[1],
            group: &fields[2],
            resource: &fields[3],
            subresource: &fields[4],
            name: &fields[5],
        },
        _ => {
            let why = "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified";
            return Err(ApiError::invalid("SubjectAccessReview.authorization.k8s.io", "", why));
        }
    };
    let (allowed, reason) = rbac::decide(store, user, &groups, &asked);
    let mut status = json!({ "allowed": allowed });
    if !reason.is_empty() {
        status["reason"] = json!(reason);
    }
    Ok(status)
}
