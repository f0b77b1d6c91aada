//! Webhook CAs through renewals and beside other writers, as the API server meets them: at
//! every instant each replica's certificate is trusted by the bundle injected into the
//! webhook configuration; injection adds its CA beside other writers' and settles; a deleted
//! or corrupted certificate Secret comes back with the CA it held; failed injections back off.

use std::time::Duration;

use ctrlkit::tls::{CertificateSource, Lifetimes, SecretCertificates, SelfSignedCa};
use ctrlkit::webhook::{CaInjection, WebhookServer};
use ctrlkit_apiserver::{ApiServer, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube_client::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube_client::{Api, Client, Config};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::json;

use crate::webhook::{Small, admission, post};

/// The certificates of a PEM bundle, as DER.
pub(super) fn ders(pem: &str) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem.as_bytes()).map(|c| c.unwrap().to_vec()).collect()
}

/// A client of `https://address` trusting every CA of `bundle` (as the API server trusts a
/// `caBundle`).
pub(super) fn trusting(address: std::net::SocketAddr, bundle: &[u8]) -> Client {
    let mut config = Config::new(format!("https://{address}").parse().unwrap());
    config.root_cert = Some(ders(std::str::from_utf8(bundle).unwrap()));
    Client::try_from(config).unwrap()
}

/// The ValidatingWebhookConfiguration `sets`, one webhook, its bundle `ca_bundle` if given.
pub(super) async fn configuration(
    api: &ApiServer,
    ca_bundle: Option<&str>,
) -> Api<ValidatingWebhookConfiguration> {
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(api.client());
    let mut client_config = json!({ "url": "https://127.0.0.1:9443/validate" });
    if let Some(bundle) = ca_bundle {
        client_config["caBundle"] = json!(ByteString(bundle.as_bytes().to_vec()));
    }
    let config = json!({
        "metadata": { "name": "sets" },
        "webhooks": [{ "name": "a.example.com", "admissionReviewVersions": ["v1"],
                       "sideEffects": "None", "clientConfig": client_config }],
    });
    configs.create(&PostParams::default(), &serde_json::from_value(config).unwrap()).await.unwrap();
    configs
}

/// The bundle of the configuration's webhook.
pub(super) fn bundle_of(config: Option<&ValidatingWebhookConfiguration>) -> Vec<u8> {
    let hooks = config.and_then(|c| c.webhooks.clone()).unwrap_or_default();
    hooks
        .into_iter()
        .next()
        .and_then(|w| w.client_config.ca_bundle)
        .map(|b| b.0)
        .unwrap_or_default()
}

/// A replica keeping its certificates in the Secret `default/webhook-certs`, injecting the
/// bundle into `sets` every `inject_every`.
fn replica(client: Client, lifetimes: Lifetimes, inject_every: Duration) -> WebhookServer {
    let store = SecretCertificates::new(client.clone(), "default", "webhook-certs", ["127.0.0.1"])
        .lifetimes(lifetimes);
    WebhookServer::builder()
        .address("127.0.0.1:0".parse().unwrap())
        .certificates(store)
        .validator("/validate", Small)
        .inject_ca_bundle(client, CaInjection::new().validating("sets").every(inject_every))
        .build()
}

/// A server with a self-signed CA of its own, injecting it into `sets` every `inject_every`.
fn self_signed(api: &ApiServer, inject_every: Duration) -> WebhookServer {
    WebhookServer::builder()
        .address("127.0.0.1:0".parse().unwrap())
        .certificates(CertificateSource::self_signed(["127.0.0.1"]))
        .validator("/validate", Small)
        .inject_ca_bundle(api.client(), CaInjection::new().validating("sets").every(inject_every))
        .build()
}

/// Runs `server` until `stop` is notified.
async fn run_until(server: WebhookServer, stop: &tokio::sync::Notify) {
    tokio::select! {
        served = server.run(std::future::pending()) => served.unwrap(),
        () = stop.notified() => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_through_a_ca_renewal_are_trusted_by_the_injected_bundle_at_every_instant() {
    let api = ApiServer::start().await.unwrap();
    let configs = configuration(&api, None).await;
    // A CA and leaves of 6 s, checked every 250 ms (so a new CA signs its first leaf 500 ms
    // after it enters the bundle), injected every 50 ms: the CA is due after 4 s, so the test
    // sees one renewal and the leaves that follow it.
    let lifetimes = Lifetimes {
        ca: Duration::from_secs(6),
        leaf: Duration::from_secs(6),
        check_every: Duration::from_millis(250),
    };
    let (one, two) = (
        replica(api.client(), lifetimes, Duration::from_millis(50)),
        replica(api.client(), lifetimes, Duration::from_millis(50)),
    );
    let stop = tokio::sync::Notify::new();
    let test = async {
        let addresses = [one.serving().await, two.serving().await];
        let first_ca = ders(&one.certificate().unwrap().ca_pem)[0].clone();
        let within = Duration::from_secs(10);
        wait_for(&configs, "sets", "a bundle injected", within, |c| !bundle_of(c).is_empty())
            .await
            .unwrap();
        // A client that reads the configuration's bundle, as the API server's informer does,
        // and calls each replica with it, until each serves a leaf of a second CA.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut calls = 0;
        loop {
            let bundle = bundle_of(configs.get_opt("sets").await.unwrap().as_ref());
            for (i, address) in addresses.iter().enumerate() {
                let answered = post(
                    &trusting(*address, &bundle),
                    "/validate",
                    &admission("CREATE", json!({ "metadata": { "name": "x" } })),
                )
                .await;
                if let Err(err) = answered {
                    panic!(
                        "replica {i} is not trusted by the injected bundle after {calls} calls: {err}"
                    );
                }
                calls += 1;
            }
            let renewed = [&one, &two].iter().all(|r| {
                let served = r.certificate().unwrap();
                ders(&served.ca_pem)[0] != first_ca && issued_by(&served.cert_pem, &served.ca_pem)
            });
            if renewed {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "the CA was never renewed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.notify_waiters();
    };
    tokio::join!(run_until(one.clone(), &stop), run_until(two.clone(), &stop), test);
}

/// Whether the leaf of `cert_pem` names the first CA of `ca_pem` as its issuer.
fn issued_by(cert_pem: &str, ca_pem: &str) -> bool {
    let leaf = ders(cert_pem).remove(0);
    let ca = ders(ca_pem).remove(0);
    let (_, leaf) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    let (_, ca) = x509_parser::parse_x509_certificate(&ca).unwrap();
    leaf.issuer().as_raw() == ca.subject().as_raw()
}

#[tokio::test]
async fn injection_adds_its_ca_beside_another_writers_and_settles() {
    let api = ApiServer::start().await.unwrap();
    let other = SelfSignedCa::generate("another writer's CA", Duration::from_secs(3600)).unwrap();
    let configs = configuration(&api, Some(&other.pem())).await;
    let server = self_signed(&api, Duration::from_millis(20));
    let stop = tokio::sync::Notify::new();
    let test = async {
        server.serving().await;
        let ours = server.certificate().unwrap().ca_pem;
        let within = Duration::from_secs(10);
        let holds = |bundle: &[u8], pem: &str| {
            let have = ders(std::str::from_utf8(bundle).unwrap());
            ders(pem).iter().all(|ca| have.contains(ca))
        };
        wait_for(&configs, "sets", "both CAs", within, |c| {
            holds(&bundle_of(c), &ours) && holds(&bundle_of(c), &other.pem())
        })
        .await
        .unwrap();
        // Settled: no write over many passes.
        let version = configs.get("sets").await.unwrap().metadata.resource_version;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            configs.get("sets").await.unwrap().metadata.resource_version,
            version,
            "written again"
        );

        // The other writer replaces the bundle with its own (as cert-manager's cainjector
        // does): ctrlkit adds its CA back and keeps the other writer's.
        let third = SelfSignedCa::generate("a third CA", Duration::from_secs(3600)).unwrap();
        let theirs = format!("{}{}", other.pem(), third.pem());
        let patch = json!({ "webhooks": [{ "name": "a.example.com", "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "clientConfig": { "url": "https://127.0.0.1:9443/validate",
            "caBundle": ByteString(theirs.clone().into_bytes()) } }] });
        configs.patch("sets", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
        wait_for(&configs, "sets", "ours added back beside theirs", within, |c| {
            holds(&bundle_of(c), &ours) && holds(&bundle_of(c), &theirs)
        })
        .await
        .unwrap();
        stop.notify_waiters();
    };
    tokio::join!(run_until(server.clone(), &stop), test);
}

#[tokio::test]
async fn a_deleted_or_corrupted_secret_is_restored_with_the_ca_and_certificate_it_held() {
    let api = ApiServer::start().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(api.client(), "default");
    let lifetimes = Lifetimes { check_every: Duration::from_millis(50), ..Lifetimes::default() };
    let server = replica(api.client(), lifetimes, Duration::from_secs(3600));
    let stop = tokio::sync::Notify::new();
    let test = async {
        server.serving().await;
        let served = server.certificate().unwrap();
        let within = Duration::from_secs(10);
        let restored = |s: Option<&Secret>| {
            let data = s.and_then(|s| s.data.clone()).unwrap_or_default();
            let text =
                |key: &str| data.get(key).map(|b| String::from_utf8_lossy(&b.0).into_owned());
            text("ca.crt") == Some(served.ca_pem.clone())
                && text("tls.crt") == Some(served.cert_pem.clone())
                && text("tls.key") == Some(served.key_pem.clone())
        };
        // Pruned (a GitOps tool deleting what it does not own).
        secrets.delete("webhook-certs", &DeleteParams::default()).await.unwrap();
        wait_for(&secrets, "webhook-certs", "the Secret restored", within, restored).await.unwrap();
        // Corrupted (a key edited by hand).
        let corrupt = json!({ "data": { "tls.key": ByteString(b"not a key".to_vec()) } });
        secrets
            .patch("webhook-certs", &PatchParams::default(), &Patch::Merge(corrupt))
            .await
            .unwrap();
        wait_for(&secrets, "webhook-certs", "the Secret repaired", within, restored).await.unwrap();
        assert_eq!(server.certificate().unwrap(), served, "the same certificate served throughout");
        stop.notify_waiters();
    };
    tokio::join!(run_until(server.clone(), &stop), test);
}

/// On a paused clock: an injection whose every request fails waits longer after each failure
/// (instead of trying every pass, for ever).
#[tokio::test(start_paused = true)]
async fn failed_injections_back_off() {
    let api = ApiServer::start().await.unwrap();
    configuration(&api, None).await;
    let server = self_signed(&api, Duration::from_secs(1));
    let stop = tokio::sync::Notify::new();
    let test = async {
        server.serving().await;
        api.faults().fail_next(usize::MAX, ctrlkit_apiserver::Failure::InternalError);
        let before = api.requests().get;
        // Ten minutes of one-second passes: 600 tries without a backoff.
        tokio::time::sleep(Duration::from_secs(600)).await;
        let tries = api.requests().get - before;
        assert!((3..=20).contains(&tries), "{tries} reads in 10 minutes");
        stop.notify_waiters();
    };
    tokio::join!(run_until(server.clone(), &stop), test);
}
