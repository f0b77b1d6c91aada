//! The Manager's metrics served securely (`metrics_secure_serving`): a scrape is let in by the
//! server's own reviews of its token (TokenReview) and of its user's permission
//! (SubjectAccessReview on `get /metrics`), under RBAC: the real servers' and the embedded
//! server's, which answers both for its test users.

use std::time::Duration;

use ctrlkit::manager::Manager;
use ctrlkit::metrics::SecureServing;
use ctrlkit::tls::{CertificateSource, SelfSignedCa};
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube_client::Api;
use kube_client::api::{DeleteParams, PostParams};
use serde_json::json;

use crate::support::http::{free_address, get_https};

/// No token: 401; a user the server authenticates but RBAC does not let `get /metrics`: 403;
/// one bound to a role that does: 200 with the metrics; a token the server does not know:
/// 401. `/healthz` needs no token.
async fn a_scrape_is_let_in_by_token_review_and_subject_access_review(t: &Target) {
    let [reader, stranger] = crate::common::USERS.map(|user| t.token(user));
    let (reader, stranger) = (&reader, &stranger);
    // The permission, granted to the reader alone (cluster-wide objects: named for the case).
    let name = format!("ctrlkit-e2e-metrics-reader-{}", t.ns);
    let roles: Api<ClusterRole> = Api::all(t.client.clone());
    let role = serde_json::from_value(json!({
        "metadata": { "name": name },
        "rules": [{ "nonResourceURLs": ["/metrics"], "verbs": ["get"] }],
    }))
    .unwrap();
    roles.create(&PostParams::default(), &role).await.unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(t.client.clone());
    let binding = serde_json::from_value(json!({
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "ctrlkit-e2e-reader" }],
    }))
    .unwrap();
    bindings.create(&PostParams::default(), &binding).await.unwrap();
    // RBAC's authorizer reads bindings from its informer: wait until it has this one, so
    // that the reader's first scrape is decided on it (a denial would be remembered 30 s).
    let reviews: Api<SubjectAccessReview> = Api::all(t.client.clone());
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": { "user": "ctrlkit-e2e-reader", "nonResourceAttributes": { "path": "/metrics", "verb": "get" } },
    }))
    .unwrap();
    let mut granted = false;
    for _ in 0..100 {
        let answer = reviews.create(&PostParams::default(), &review).await.unwrap();
        if answer.status.is_some_and(|s| s.allowed) {
            granted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(granted, "RBAC never granted the reader get /metrics");

    let ca = SelfSignedCa::generate("metrics-ca", Duration::from_secs(3600)).unwrap();
    let bundle = ca.issue(&["127.0.0.1".to_owned()], Duration::from_secs(3600)).unwrap();
    let ca_pem = bundle.ca_pem.clone();
    let address = free_address();
    let manager = Manager::builder(t.client.clone())
        .metrics_address(address)
        .metrics_secure_serving(
            SecureServing::new().certificates(CertificateSource::Bundle(bundle)),
        )
        .build();
    // A metric of the operator's own, for the scrape to find.
    let counter = prometheus_client::metrics::counter::Counter::<u64>::default();
    counter.inc();
    manager.metrics().expect("a registry").register("e2e_scrapes", "Scrapes", counter);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(manager.run_until(async {
        let _ = stopped.await;
    }));
    let mut healthz = (0, String::new());
    for _ in 0..100 {
        if let Ok(Ok(answer)) = tokio::time::timeout(Duration::from_secs(1), async {
            tokio::net::TcpStream::connect(address).await
        })
        .await
        {
            drop(answer);
            healthz = get_https(address, &ca_pem, "/healthz", None).await;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(healthz, (200, "ok".to_owned()), "/healthz needs no token");

    let (code, body) = get_https(address, &ca_pem, "/metrics", None).await;
    assert_eq!((code, body.trim()), (401, "Unauthorized"));
    let (code, body) = get_https(address, &ca_pem, "/metrics", Some("not-a-token")).await;
    assert_eq!((code, body.trim()), (401, "Unauthorized"));
    let (code, body) = get_https(address, &ca_pem, "/metrics", Some(stranger)).await;
    assert_eq!((code, body.trim()), (403, "Authorization denied for user ctrlkit-e2e-stranger"));
    let allowed = get_https(address, &ca_pem, "/metrics", Some(reader)).await;
    assert_eq!(allowed.0, 200, "the reader was refused: {}", allowed.1);
    assert!(allowed.1.contains("\ne2e_scrapes_total 1\n"), "Prometheus text: {}", allowed.1);

    let _ = stop.send(());
    running.await.unwrap().unwrap();
    let _ = bindings.delete(&name, &DeleteParams::default()).await;
    let _ = roles.delete(&name, &DeleteParams::default()).await;
}
case!(Needs::Protocol, a_scrape_is_let_in_by_token_review_and_subject_access_review);
