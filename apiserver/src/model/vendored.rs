//! The v3 OpenAPI documents of the built-in group versions, vendored from Kubernetes 1.36.2
//! (`openapi/`, by `scripts/vendor-openapi.py`), and what the server reads off them: the
//! `openapi` module serves them, the wrong-shape checks ask which top-level fields a kind has.

use std::sync::OnceLock;

use serde_json::Value;

/// The vendored v3 documents: (group version path, document).
pub(crate) const BUILT_IN: [(&str, &str); 11] = [
    ("api/v1", include_str!("../../openapi/v3/api__v1.json")),
    ("apis/apps/v1", include_str!("../../openapi/v3/apis__apps__v1.json")),
    ("apis/batch/v1", include_str!("../../openapi/v3/apis__batch__v1.json")),
    ("apis/autoscaling/v1", include_str!("../../openapi/v3/apis__autoscaling__v1.json")),
    (
        "apis/coordination.k8s.io/v1",
        include_str!("../../openapi/v3/apis__coordination.k8s.io__v1.json"),
    ),
    ("apis/events.k8s.io/v1", include_str!("../../openapi/v3/apis__events.k8s.io__v1.json")),
    (
        "apis/apiextensions.k8s.io/v1",
        include_str!("../../openapi/v3/apis__apiextensions.k8s.io__v1.json"),
    ),
    (
        "apis/admissionregistration.k8s.io/v1",
        include_str!("../../openapi/v3/apis__admissionregistration.k8s.io__v1.json"),
    ),
    (
        "apis/rbac.authorization.k8s.io/v1",
        include_str!("../../openapi/v3/apis__rbac.authorization.k8s.io__v1.json"),
    ),
    (
        "apis/authentication.k8s.io/v1",
        include_str!("../../openapi/v3/apis__authentication.k8s.io__v1.json"),
    ),
    (
        "apis/authorization.k8s.io/v1",
        include_str!("../../openapi/v3/apis__authorization.k8s.io__v1.json"),
    ),
];

/// A built-in document's JSON tree, parsed when first asked for (a ConfigMap's write reads
/// `api/v1` alone).
pub(crate) fn parsed(path: &str) -> Option<&'static Value> {
    static PARSED: [OnceLock<Value>; BUILT_IN.len()] = [const { OnceLock::new() }; BUILT_IN.len()];
    let i = BUILT_IN.iter().position(|(p, _)| *p == path)?;
    Some(
        PARSED[i].get_or_init(|| {
            serde_json::from_str(BUILT_IN[i].1).expect("a vendored OpenAPI document")
        }),
    )
}

/// Whether a schema is the one of `group`/`version`/`kind`.
pub(crate) fn is_kind(schema: &Value, group: &str, version: &str, kind: &str) -> bool {
    schema["x-kubernetes-group-version-kind"].as_array().is_some_and(|gvks| {
        gvks.iter().any(|g| g["group"] == group && g["version"] == version && g["kind"] == kind)
    })
}

/// Whether the built-in `kind` of `group`/`version` has the top-level field `field` in its
/// vendored schema (a Deployment has `spec`, a ConfigMap has not); `None` where no vendored
/// document describes the kind. A kind is looked for in its group version's document, then
/// in the others (`autoscaling/v1`'s `Scale` is published with the kinds that serve it).
pub(crate) fn builtin_kind_has(
    group: &str,
    version: &str,
    kind: &str,
    field: &str,
) -> Option<bool> {
    let own =
        if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") };
    let others = BUILT_IN.iter().map(|(path, _)| *path).filter(|path| *path != own);
    std::iter::once(own.as_str()).chain(others).find_map(|path| {
        let schemas = parsed(path)?["components"]["schemas"].as_object()?;
        let schema = schemas.values().find(|s| is_kind(s, group, version, kind))?;
        Some(schema["properties"].get(field).is_some())
    })
}
