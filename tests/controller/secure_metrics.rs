//! The Manager's metrics endpoint served securely, when the API server cannot review a token
//! (the e2e case `secure_metrics` checks 401, 403 and 200 under RBAC on every server).

use std::time::Duration;

use ctrlkit::manager::Manager;
use ctrlkit::metrics::SecureServing;
use ctrlkit::webhook::{CertificateSource, SelfSignedCa};

use crate::support::http::{free_address, get, get_https};

#[tokio::test]
async fn a_secure_endpoint_refuses_scrapes_it_cannot_review_and_keeps_probes_open() {
    // A server without TokenReviews: every review fails.
    let api = ctrlkit_apiserver::ApiServer::builder()
        .without_resource("authentication.k8s.io", "v1", "tokenreviews")
        .start()
        .await
        .unwrap();
    let ca = SelfSignedCa::generate("metrics-ca", Duration::from_secs(3600)).unwrap();
    let bundle = ca.issue(&["127.0.0.1".to_owned()], Duration::from_secs(3600)).unwrap();
    let ca_pem = bundle.ca_pem.clone();
    let address = free_address();
    let manager = Manager::builder(api.client())
        .metrics_address(address)
        .metrics_secure_serving(
            SecureServing::new().certificates(CertificateSource::Bundle(bundle)),
        )
        .build();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(manager.run_until(async {
        let _ = stopped.await;
    }));
    let mut connected = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(address).await.is_ok() {
            connected = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(connected, "the endpoint never listened");

    assert_eq!(get_https(address, &ca_pem, "/healthz", None).await, (200, "ok".to_owned()));
    let (code, body) = get_https(address, &ca_pem, "/metrics", None).await;
    assert_eq!((code, body.trim()), (401, "Unauthorized"), "no token");
    // The review fails, and the scrape with it.
    let (code, body) = get_https(address, &ca_pem, "/metrics", Some("some-token")).await;
    assert_eq!((code, body.trim()), (401, "Authentication failed"));
    // Plain HTTP is not served.
    assert_eq!(get(address, "/metrics").await, None, "plain HTTP answered");

    let _ = stop.send(());
    running.await.unwrap().unwrap();
}
