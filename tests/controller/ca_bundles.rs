//! CA bundles that stay bounded while replicas with in-memory certificates restart, as the
//! API server meets them: a replica that restarts again and again leaves at most K of
//! ctrlkit's CAs in a bundle (3 by default) beside every other writer's, and replicas that
//! restart in turn are trusted by the bundles whenever they serve. Webhook configurations and
//! CRDs' conversion webhooks alike.

use std::sync::Arc;
use std::time::Duration;

use ctrlkit::tls::{CertificateSource, SelfSignedCa};
use ctrlkit::webhook::{CaInjection, WebhookServer};
use ctrlkit_apiserver::{ApiServer, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube_client::Api;
use kube_client::api::PostParams;
use serde_json::json;

use crate::ca_rotation::{bundle_of, configuration, ders, trusting};
use crate::webhook::{Set, Small, admission, post};

/// The common name of ctrlkit's CAs.
const CTRLKIT_CA: &str = "ctrlkit webhook CA";

/// The CRD `sets.example.com` with a conversion webhook whose bundle is `ca_bundle`.
async fn converting_crd(api: &ApiServer, ca_bundle: &str) -> Api<CustomResourceDefinition> {
    let mut crd = serde_json::to_value(Set::crd()).unwrap();
    crd["spec"]["conversion"] = json!({ "strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"],
        "clientConfig": { "url": "https://127.0.0.1:9443/convert",
                          "caBundle": ByteString(ca_bundle.as_bytes().to_vec()) } } });
    let crds: Api<CustomResourceDefinition> = Api::all(api.client());
    crds.create(&PostParams::default(), &serde_json::from_value(crd).unwrap()).await.unwrap();
    crds
}

/// The bundle of the CRD's conversion webhook.
fn crd_bundle(crd: Option<&CustomResourceDefinition>) -> Vec<u8> {
    let conversion = crd.and_then(|c| c.spec.conversion.as_ref());
    let webhook = conversion.and_then(|c| c.webhook.as_ref());
    let config = webhook.and_then(|w| w.client_config.as_ref());
    config.and_then(|c| c.ca_bundle.clone()).map(|b| b.0).unwrap_or_default()
}

/// The certificates of `bundle` whose subject's common name is ctrlkit's.
fn ctrlkits(bundle: &[u8]) -> Vec<Vec<u8>> {
    let certificates = ders(std::str::from_utf8(bundle).unwrap());
    let ours = |der: &Vec<u8>| {
        let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
        let name = cert.subject().iter_common_name().next().and_then(|cn| cn.as_str().ok());
        name == Some(CTRLKIT_CA)
    };
    certificates.into_iter().filter(ours).collect()
}

/// Whether `bundle` holds every certificate of `pem`.
fn holds(bundle: &[u8], pem: &str) -> bool {
    let have = ders(std::str::from_utf8(bundle).unwrap());
    ders(pem).iter().all(|ca| have.contains(ca))
}

/// The injection into `sets` and the CRD, once at a replica's start: the next pass is an
/// hour away, so a CA another replica drops stays dropped while a test looks.
fn at_start() -> CaInjection {
    CaInjection::new().validating("sets").crd("sets.example.com").every(Duration::from_secs(3600))
}

/// A server with a self-signed CA of its own in memory (the default lifetimes), injecting it
/// as `injection` says.
fn in_memory(api: &ApiServer, injection: CaInjection) -> WebhookServer {
    WebhookServer::builder()
        .address("127.0.0.1:0".parse().unwrap())
        .certificates(CertificateSource::self_signed(["127.0.0.1"]))
        .validator("/validate", Small)
        .inject_ca_bundle(api.client(), injection)
        .build()
}

/// A replica serving in a task of its own.
struct Replica {
    server: WebhookServer,
    stop: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Replica {
    /// Starts `server`, once it serves.
    async fn start(server: WebhookServer) -> Self {
        let stop = Arc::new(tokio::sync::Notify::new());
        let task = tokio::spawn({
            let (server, stop) = (server.clone(), stop.clone());
            async move { server.run(stop.notified()).await.unwrap() }
        });
        server.serving().await;
        Self { server, stop, task }
    }

    /// Stops it, and waits until it no longer serves.
    async fn stop(self) {
        self.stop.notify_one();
        self.task.await.unwrap();
    }

    /// Waits until both bundles hold its CA; returns them.
    async fn injected(
        &self,
        configs: &Api<ValidatingWebhookConfiguration>,
        crds: &Api<CustomResourceDefinition>,
    ) -> [Vec<u8>; 2] {
        let ca = self.server.certificate().unwrap().ca_pem;
        let within = Duration::from_secs(10);
        wait_for(configs, "sets", "its CA in the configuration", within, |c| {
            holds(&bundle_of(c), &ca)
        })
        .await
        .unwrap();
        wait_for(crds, "sets.example.com", "its CA in the CRD", within, |c| {
            holds(&crd_bundle(c), &ca)
        })
        .await
        .unwrap();
        [
            bundle_of(configs.get_opt("sets").await.unwrap().as_ref()),
            crd_bundle(crds.get_opt("sets.example.com").await.unwrap().as_ref()),
        ]
    }

    /// Whether a client trusting `bundle` (as the API server does a `caBundle`) is answered.
    async fn trusted_by(&self, bundle: &[u8]) -> Result<(), kube_client::Error> {
        let address = self.server.local_addr().unwrap();
        let review = admission("CREATE", json!({ "metadata": { "name": "x" } }));
        post(&trusting(address, bundle), "/validate", &review).await.map(drop)
    }
}

#[tokio::test]
async fn fifty_restarts_of_one_replica_leave_three_of_its_cas_beside_another_writers() {
    let api = ApiServer::start().await.unwrap();
    let other = SelfSignedCa::generate("another writer's CA", Duration::from_secs(3600)).unwrap();
    // One of ctrlkit's CAs, expired (a replica's, long gone).
    let expired = SelfSignedCa::generate(CTRLKIT_CA, Duration::ZERO).unwrap();
    let first = format!("{}{}", other.pem(), expired.pem());
    let configs = configuration(&api, Some(&first)).await;
    let crds = converting_crd(&api, &first).await;
    for restart in 0..50 {
        let replica = Replica::start(in_memory(&api, at_start())).await;
        for bundle in replica.injected(&configs, &crds).await {
            // Each start adds its CA, and the default K = 3 keeps the newest three.
            let own = ctrlkits(&bundle).len();
            let kept = (restart + 1).min(3);
            assert_eq!(own, kept, "after {restart} restarts, of ctrlkit's CAs in a bundle");
            assert!(holds(&bundle, &other.pem()), "the other writer's CA dropped");
            assert!(!holds(&bundle, &expired.pem()), "an expired CA of ctrlkit's kept");
            if let Err(err) = replica.trusted_by(&bundle).await {
                panic!("after {restart} restarts, the live leaf is not trusted: {err}");
            }
        }
        replica.stop().await;
    }
}

#[tokio::test]
async fn two_replicas_keeping_five_cas_restarting_in_turn_are_trusted_while_they_serve() {
    let api = ApiServer::start().await.unwrap();
    let other = SelfSignedCa::generate("another writer's CA", Duration::from_secs(3600)).unwrap();
    let configs = configuration(&api, Some(&other.pem())).await;
    let crds = converting_crd(&api, &other.pem()).await;
    let keeping_five = || in_memory(&api, at_start().keep_own_cas(5));
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let replica = Replica::start(keeping_five()).await;
        replica.injected(&configs, &crds).await;
        replicas.push(replica);
    }
    // Each restart a rollout's: the new replica starts and injects, then the old one stops.
    // Every replica serving is trusted by both bundles after each write.
    for restart in 0..20 {
        let new = Replica::start(keeping_five()).await;
        let bundles = new.injected(&configs, &crds).await;
        for bundle in &bundles {
            let own = ctrlkits(bundle).len();
            assert!(own <= 5, "after {restart} restarts, {own} of ctrlkit's CAs in a bundle");
            assert!(holds(bundle, &other.pem()), "the other writer's CA dropped");
            for (i, replica) in replicas.iter().chain([&new]).enumerate() {
                if let Err(err) = replica.trusted_by(bundle).await {
                    panic!("after {restart} restarts, replica {i}'s leaf is not trusted: {err}");
                }
            }
        }
        let old = std::mem::replace(&mut replicas[restart % 2], new);
        old.stop().await;
    }
}
