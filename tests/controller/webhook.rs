//! The webhook server over HTTPS, called as the API server calls it (kube-client, trusting
//! only the server's CA): a validator's denial, a defaulter's patch, a conversion, a bad body's
//! 400, `/readyz` on the Manager, and certificate files rotated while it serves.

use std::time::Duration;

use async_trait::async_trait;
use ctrlkit::manager::Manager;
use ctrlkit::tls::{CertificateSource, SelfSignedCa};
use ctrlkit::webhook::{
    AdmissionRequest, Conversion, Defaulter, Denial, Validation, Validator, WebhookServer,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::{Client, Config};
use rustls_pemfile_free::ca_der;
use serde_json::{Value, json};

use crate::support::http::{free_address, get};

/// At most two keys.
pub(super) struct Small;

#[async_trait]
impl Validator<ConfigMap> for Small {
    async fn validate_create(&self, cm: &ConfigMap, _: &AdmissionRequest<ConfigMap>) -> Validation {
        match cm.data.as_ref().map_or(0, |d| d.len()) {
            n if n > 2 => Err(Denial::invalid(format!("{n} keys: at most 2"))),
            _ => Ok(vec![]),
        }
    }
}

/// Labels every ConfigMap `defaulted: "yes"`.
struct Labelled;

#[async_trait]
impl Defaulter<ConfigMap> for Labelled {
    async fn default(&self, cm: &mut ConfigMap, _: &AdmissionRequest<ConfigMap>) {
        cm.metadata.labels.get_or_insert_default().insert("defaulted".into(), "yes".into());
    }
}

pub(super) mod rustls_pemfile_free {
    /// The DER of the first certificate of a PEM bundle.
    pub fn ca_der(pem: &str) -> Vec<u8> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        CertificateDer::pem_slice_iter(pem.as_bytes()).next().unwrap().unwrap().to_vec()
    }
}

/// A client of `https://address` trusting only `ca_pem`.
pub(super) fn client(address: std::net::SocketAddr, ca_pem: &str) -> Client {
    client_of(&format!("https://{address}"), ca_pem)
}

/// A client of `url` (a host name, say) trusting only `ca_pem`.
fn client_of(url: &str, ca_pem: &str) -> Client {
    let mut config = Config::new(url.parse().unwrap());
    config.root_cert = Some(vec![ca_der(ca_pem)]);
    Client::try_from(config).unwrap()
}

/// A replica of the webhook server on a free loopback port, validating at `/validate`, its
/// certificates kept for `host` in the Secret `default/webhook-certs` that replicas share.
fn secret_replica(client: Client, host: &str, lifetimes: ctrlkit::tls::Lifetimes) -> WebhookServer {
    let store = ctrlkit::tls::SecretCertificates::new(client, "default", "webhook-certs", [host])
        .lifetimes(lifetimes);
    WebhookServer::builder()
        .address("127.0.0.1:0".parse().unwrap())
        .certificates(store)
        .validator("/validate", Small)
        .build()
}

/// Runs `server` until `stop` is notified.
pub(super) async fn run_until(server: WebhookServer, stop: &tokio::sync::Notify) {
    tokio::select! {
        served = server.run(std::future::pending()) => served.unwrap(),
        () = stop.notified() => {}
    }
}

/// `POST path` with `body`: the answer's JSON, or the API error kube-client makes of a
/// non-2xx answer.
pub(super) async fn post(
    client: &Client,
    path: &str,
    body: &Value,
) -> Result<Value, kube_client::Error> {
    let request = http::Request::post(path)
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(body).unwrap())
        .unwrap();
    let text = client.request_text(request).await?;
    Ok(serde_json::from_str(&text).unwrap())
}

pub(super) fn admission(operation: &str, object: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": { "group": "", "version": "v1", "kind": "ConfigMap" },
            "resource": { "group": "", "version": "v1", "resource": "configmaps" },
            "operation": operation,
            "namespace": "default",
            "name": "x",
            "userInfo": { "username": "alice" },
            "object": object,
        },
    })
}

fn config_map(keys: &[&str]) -> Value {
    let data: serde_json::Map<String, Value> =
        keys.iter().map(|k| (k.to_string(), json!("v"))).collect();
    json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "x", "namespace": "default" }, "data": data })
}

/// A set's v1, the hub: `spec.replicas`.
#[derive(
    kube::CustomResource, Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[kube(group = "example.com", version = "v1", kind = "Set", namespaced)]
pub struct SetSpec {
    replicas: i32,
}

mod v2 {
    /// A set's v2: `spec.size`.
    #[derive(
        kube::CustomResource,
        Debug,
        Clone,
        serde::Serialize,
        serde::Deserialize,
        schemars::JsonSchema,
    )]
    #[kube(group = "example.com", version = "v2", kind = "Set", namespaced)]
    pub struct SetSpec {
        pub size: i32,
    }
}

impl From<v2::Set> for Set {
    fn from(set: v2::Set) -> Self {
        Set { metadata: set.metadata, spec: SetSpec { replicas: set.spec.size } }
    }
}

impl TryFrom<Set> for v2::Set {
    type Error = String;
    fn try_from(set: Set) -> Result<Self, String> {
        match set.spec.replicas {
            n if n < 0 => Err(format!("{n} replicas has no size")),
            size => Ok(v2::Set { metadata: set.metadata, spec: v2::SetSpec { size } }),
        }
    }
}

fn conversion() -> Conversion<Set> {
    Conversion::<Set>::new().spoke::<v2::Set>().expect("v2 is not the hub")
}

#[tokio::test]
async fn the_webhook_server_validates_defaults_and_converts_over_https_and_is_ready() {
    let metrics = free_address();
    let server = WebhookServer::builder()
        .address("127.0.0.1:0".parse().unwrap())
        .validator("/validate", Small)
        .defaulter("/default", Labelled)
        .conversion("/convert", conversion())
        .build();
    let api = ctrlkit_apiserver::ApiServer::start().await.unwrap();
    let mut manager = Manager::builder(api.client()).metrics_address(metrics).build();
    manager.add(server.clone());
    let running = tokio::spawn(manager.run_until(std::future::pending()));
    let address = server.serving().await;
    let ca = server.certificate().unwrap().ca_pem;
    let https = client(address, &ca);

    let denied = post(&https, "/validate", &admission("CREATE", config_map(&["a", "b", "c"])))
        .await
        .unwrap();
    assert_eq!(denied["response"]["allowed"], false);
    assert_eq!(denied["response"]["status"]["message"], "3 keys: at most 2");
    assert_eq!(denied["response"]["status"]["code"], 422);
    let allowed = post(&https, "/validate", &admission("CREATE", config_map(&["a"]))).await;
    assert_eq!(allowed.unwrap()["response"]["allowed"], true);

    let defaulted = post(&https, "/default", &admission("CREATE", config_map(&["a"]))).await;
    let response = &defaulted.unwrap()["response"];
    assert_eq!(response["patchType"], "JSONPatch");
    // A `[]byte` in Go's JSON: base64, or (as kube-core writes it) an array of bytes.
    let patch: Vec<u8> = match &response["patch"] {
        Value::String(text) => base64_decode(text),
        other => serde_json::from_value(other.clone()).expect("a patch"),
    };
    let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
    let mut object = config_map(&["a"]);
    json_patch::patch(&mut object, &patch).unwrap();
    assert_eq!(object["metadata"]["labels"]["defaulted"], "yes");

    let bad = post(&https, "/validate", &json!({ "kind": "Pod" })).await;
    match bad {
        Err(kube_client::Error::Api(status)) => {
            assert_eq!(status.code, 400);
            assert!(status.message.contains("not an AdmissionReview"), "{}", status.message);
        }
        other => panic!("a 400 for a body that is not a review, got {other:?}"),
    }

    let review = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {
            "uid": "c1",
            "desiredAPIVersion": "example.com/v2",
            "objects": [
                { "apiVersion": "example.com/v1", "kind": "Set", "metadata": { "name": "one", "uid": "u1", "labels": { "a": "b" } }, "spec": { "replicas": 3 } },
                { "apiVersion": "example.com/v2", "kind": "Set", "metadata": { "name": "two" }, "spec": { "size": 5 } },
            ],
        },
    });
    let converted = post(&https, "/convert", &review).await.unwrap();
    assert_eq!(converted["response"]["uid"], "c1");
    assert_eq!(converted["response"]["result"]["status"], "Success");
    let objects = &converted["response"]["convertedObjects"];
    assert_eq!(objects[0]["apiVersion"], "example.com/v2");
    assert_eq!(objects[0]["spec"], json!({ "size": 3 }));
    assert_eq!(
        objects[0]["metadata"],
        json!({ "name": "one", "uid": "u1", "labels": { "a": "b" } })
    );
    assert_eq!(objects[1]["metadata"]["name"], "two", "in the order received");
    assert_eq!(objects[1]["spec"], json!({ "size": 5 }));

    let unknown = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {
            "uid": "c2",
            "desiredAPIVersion": "example.com/v2",
            "objects": [
                { "apiVersion": "example.com/v1", "kind": "Set", "metadata": { "name": "ok" }, "spec": { "replicas": 1 } },
                { "apiVersion": "example.com/v1", "kind": "Set", "metadata": { "name": "nine", "namespace": "ns" }, "spec": { "replicas": -9 } },
            ],
        },
    });
    let failed = post(&https, "/convert", &unknown).await.unwrap();
    assert_eq!(failed["response"]["result"]["status"], "Failure");
    let message = failed["response"]["result"]["message"].as_str().unwrap();
    assert_eq!(
        message,
        "converting ns/nine from example.com/v1 to example.com/v2: -9 replicas has no size"
    );
    assert_eq!(failed["response"]["convertedObjects"], json!([]), "nothing half-converted");

    // The caches start once the server's check passed: ready once they synced too.
    super::common::eventually_async_within(
        Duration::from_secs(10),
        "ready once serving",
        || async { get(metrics, "/readyz").await == Some((200, "ok".into())) },
    )
    .await;
    assert_eq!(server.stats().denied(), 1);
    assert_eq!(server.stats().malformed(), 1);
    running.abort();
}

fn base64_decode(text: &str) -> Vec<u8> {
    // The answer is standard base64 (kube-core's `ByteString`).
    let bytes: k8s_openapi::ByteString = serde_json::from_value(json!(text)).unwrap();
    bytes.0
}

#[tokio::test]
async fn certificate_files_rotated_while_serving_are_served_to_new_connections() {
    let dir = std::env::temp_dir().join(format!("ctrlkit-webhook-certs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |ca: &SelfSignedCa| {
        let bundle = ca.issue(&["127.0.0.1".to_owned()], Duration::from_secs(3600)).unwrap();
        // The key first, then the certificate: between the two the pair does not match, and
        // the server keeps serving the old one.
        std::fs::write(dir.join("tls.key"), &bundle.key_pem).unwrap();
        std::fs::write(dir.join("tls.crt"), &bundle.cert_pem).unwrap();
        std::fs::write(dir.join("ca.crt"), &bundle.ca_pem).unwrap();
        bundle.ca_pem
    };
    let first = SelfSignedCa::generate("first", Duration::from_secs(7200)).unwrap();
    let first_ca = write(&first);
    let source = match CertificateSource::dir(&dir) {
        CertificateSource::Files { cert, key, ca, .. } => {
            CertificateSource::Files { cert, key, ca, poll: Duration::from_millis(50) }
        }
        other => other,
    };
    let server = WebhookServer::builder()
        .address("127.0.0.1:0".parse().unwrap())
        .certificates(source)
        .validator("/validate", Small)
        .build();
    let serving = server.clone();
    let stop = tokio::sync::Notify::new();
    let run = async { serving.run(stop.notified()).await.unwrap() };
    let test = async {
        let address = server.serving().await;
        let call = |ca: &str| {
            let https = client(address, ca);
            async move { post(&https, "/validate", &admission("CREATE", config_map(&[]))).await }
        };
        assert!(call(&first_ca).await.is_ok(), "the first CA is trusted");
        let second = SelfSignedCa::generate("second", Duration::from_secs(7200)).unwrap();
        let second_ca = write(&second);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while call(&second_ca).await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "the new certificate is never served");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(call(&first_ca).await.is_err(), "a client of the old CA alone no longer connects");
        assert_eq!(server.certificate().unwrap().ca_pem, second_ca);
        // A client that keeps its connection open (as an API server does) does not hold up
        // the stop: the connection is closed once its request is answered.
        let kept = client(address, &second_ca);
        post(&kept, "/validate", &admission("CREATE", config_map(&[]))).await.unwrap();
        stop.notify_one();
        (kept, tokio::time::Instant::now())
    };
    let ((), (_kept, stopped_at)) = tokio::join!(run, test);
    assert!(stopped_at.elapsed() < Duration::from_secs(5), "the stop waited on an idle connection");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn the_ca_bundle_is_injected_into_configurations_and_crds_and_put_back_when_overwritten() {
    use ctrlkit::webhook::CaInjection;
    use ctrlkit_apiserver::{ApiServer, ResourceType, wait_for};
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    use kube_client::Api;
    use kube_client::api::{Patch, PatchParams, PostParams};

    let api = ApiServer::builder()
        .resource(ResourceType::new(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            false,
        ))
        .start()
        .await
        .unwrap();
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(api.client());
    let hook = |name: &str| {
        json!({ "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "clientConfig": { "url": "https://127.0.0.1:9443/validate" } })
    };
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": "sets" },
        "webhooks": [hook("a.example.com"), hook("b.example.com")],
    });
    configs.create(&PostParams::default(), &serde_json::from_value(config).unwrap()).await.unwrap();
    let mut crd = serde_json::to_value(Set::crd()).unwrap();
    crd["spec"]["conversion"] = json!({ "strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"],
        "clientConfig": { "url": "https://127.0.0.1:9443/convert" } } });
    let crds: Api<CustomResourceDefinition> = Api::all(api.client());
    crds.create(&PostParams::default(), &serde_json::from_value(crd).unwrap()).await.unwrap();

    let server = WebhookServer::builder()
        .address("127.0.0.1:0".parse().unwrap())
        .validator("/validate", Small)
        .inject_ca_bundle(
            api.client(),
            CaInjection::new()
                .validating("sets")
                .crd("sets.example.com")
                .every(Duration::from_millis(50)),
        )
        .build();
    let serving = server.clone();
    let stop = tokio::sync::Notify::new();
    let run = async { serving.run(stop.notified()).await.unwrap() };
    let test = async {
        server.serving().await;
        let ca = server.certificate().unwrap().ca_pem.into_bytes();
        let bundles = |c: Option<&ValidatingWebhookConfiguration>| -> Vec<Option<Vec<u8>>> {
            let hooks = c.and_then(|c| c.webhooks.clone()).unwrap_or_default();
            hooks.into_iter().map(|w| w.client_config.ca_bundle.map(|b| b.0)).collect()
        };
        let both = vec![Some(ca.clone()), Some(ca.clone())];
        let within = Duration::from_secs(10);
        wait_for(&configs, "sets", "the bundle in both webhooks", within, |c| bundles(c) == both)
            .await
            .unwrap();
        let crd_bundle = |c: Option<&CustomResourceDefinition>| {
            let conversion = c.and_then(|c| c.spec.conversion.as_ref());
            let webhook = conversion.and_then(|c| c.webhook.as_ref());
            webhook
                .and_then(|w| w.client_config.as_ref())
                .and_then(|c| c.ca_bundle.clone())
                .map(|b| b.0)
        };
        wait_for(&crds, "sets.example.com", "the bundle in the CRD", within, |c| {
            crd_bundle(c) == Some(ca.clone())
        })
        .await
        .unwrap();

        // Someone (a `kubectl apply` of the manifests) overwrites it: put back.
        let overwrite = json!({ "webhooks": [
            { "name": "a.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
              "clientConfig": { "url": "https://127.0.0.1:9443/validate", "caBundle": "b3RoZXI=" } },
            hook("b.example.com"),
        ] });
        configs.patch("sets", &PatchParams::default(), &Patch::Merge(overwrite)).await.unwrap();
        wait_for(&configs, "sets", "the bundle put back", within, |c| bundles(c) == both)
            .await
            .unwrap();
        stop.notify_one();
    };
    tokio::join!(run, test);
}

#[tokio::test]
async fn replicas_share_the_certificates_of_one_secret_and_keep_serving_through_a_renewal() {
    use ctrlkit::tls::Lifetimes;

    let api = ctrlkit_apiserver::ApiServer::start().await.unwrap();
    // Leaves of 3 s, checked every 100 ms: renewed with a second left, twice a test.
    let lifetimes = Lifetimes {
        ca: Duration::from_secs(3600),
        leaf: Duration::from_secs(3),
        check_every: Duration::from_millis(100),
    };
    let replica = || secret_replica(api.client(), "127.0.0.1", lifetimes);
    let (one, two) = (replica(), replica());
    let stop = tokio::sync::Notify::new();
    let test = async {
        let (a, b) = (one.serving().await, two.serving().await);
        let first = one.certificate().unwrap();
        assert_eq!(two.certificate().unwrap(), first, "both serve the Secret's certificate");
        let call = |address, ca: String| async move {
            post(&client(address, &ca), "/validate", &admission("CREATE", config_map(&[]))).await
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            // A client trusting the one CA bundle reaches both replicas, before, through and
            // after the renewal.
            call(a, first.ca_pem.clone()).await.expect("replica one answers");
            call(b, first.ca_pem.clone()).await.expect("replica two answers");
            let (now_one, now_two) = (one.certificate().unwrap(), two.certificate().unwrap());
            if now_one.cert_pem != first.cert_pem && now_one == now_two {
                assert_eq!(now_one.ca_pem, first.ca_pem, "the CA stays: no new bundle needed");
                assert!(now_one.not_after > first.not_after, "a later expiry");
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "never renewed to one certificate");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.notify_waiters();
    };
    tokio::join!(run_until(one.clone(), &stop), run_until(two.clone(), &stop), test);
    let secrets: kube_client::Api<k8s_openapi::api::core::v1::Secret> =
        kube_client::Api::namespaced(api.client(), "default");
    let secret = secrets.get("webhook-certs").await.unwrap();
    let data = secret.data.unwrap();
    assert_eq!(
        String::from_utf8(data["tls.crt"].0.clone()).unwrap(),
        one.certificate().unwrap().cert_pem
    );
    assert!(data.contains_key("ca.key"));
}

#[tokio::test]
async fn a_replica_with_other_hosts_gets_a_certificate_for_every_replicas_hosts() {
    use ctrlkit::tls::Lifetimes;

    let api = ctrlkit_apiserver::ApiServer::start().await.unwrap();
    let lifetimes = Lifetimes {
        ca: Duration::from_secs(3600),
        leaf: Duration::from_secs(3600),
        check_every: Duration::from_millis(50),
    };
    // One replica reached as 127.0.0.1, a newer one (say, after a Service was renamed) as
    // localhost, on one Secret.
    let old = secret_replica(api.client(), "127.0.0.1", lifetimes);
    let new = secret_replica(api.client(), "localhost", lifetimes);
    let stop = tokio::sync::Notify::new();
    let test = async {
        let a = old.serving().await;
        let b = new.serving().await;
        let ca = new.certificate().unwrap().ca_pem;
        let call = |url: String| {
            let client = client_of(&url, &ca);
            async move { post(&client, "/validate", &admission("CREATE", config_map(&[]))).await }
        };
        call(format!("https://localhost:{}", b.port()))
            .await
            .expect("the new replica, as localhost");
        // The old replica serves the reissued certificate from its next check: both names.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while old.certificate() != new.certificate() {
            assert!(tokio::time::Instant::now() < deadline, "the old replica kept its certificate");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        call(format!("https://127.0.0.1:{}", a.port())).await.expect("the old one, as 127.0.0.1");
        call(format!("https://localhost:{}", a.port())).await.expect("the old one, as localhost");
        stop.notify_waiters();
    };
    tokio::join!(run_until(old.clone(), &stop), run_until(new.clone(), &stop), test);
}

/// A Secret made for the webhook's certificates before it starts, as least-privilege charts
/// do (an empty `Opaque` Secret the operator may only update) and as Helm does (labels,
/// annotations, an owner): the server writes its keys and keeps the rest; an `immutable`
/// Secret is refused at start, by name.
#[tokio::test]
async fn a_pre_created_secret_keeps_its_type_and_metadata_and_an_immutable_one_is_refused() {
    use k8s_openapi::api::core::v1::Secret;
    let api = ctrlkit_apiserver::ApiServer::start().await.unwrap();
    let secrets: kube_client::Api<Secret> = kube_client::Api::namespaced(api.client(), "default");
    let owner = crate::common::create_configmap(&api, "chart").await;
    let pre_created = json!({
        "metadata": {
            "name": "webhook-certs",
            "labels": { "app.kubernetes.io/managed-by": "Helm" },
            "annotations": { "meta.helm.sh/release-name": "operator" },
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "chart",
                "uid": owner.metadata.uid.clone().unwrap(),
            }],
        },
        "type": "Opaque",
        "data": { "other": "a2VwdA==" },
    });
    let pp = kube_client::api::PostParams::default();
    secrets.create(&pp, &serde_json::from_value(pre_created).unwrap()).await.unwrap();
    let server = secret_replica(api.client(), "127.0.0.1", ctrlkit::tls::Lifetimes::default());
    let stop = tokio::sync::Notify::new();
    let test = async {
        let serving = tokio::time::timeout(Duration::from_secs(10), server.serving()).await;
        stop.notify_waiters();
        serving.expect("the server starts with the pre-created Secret");
    };
    tokio::join!(run_until(server.clone(), &stop), test);
    let secret = secrets.get("webhook-certs").await.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("Opaque"), "its type kept");
    let data = secret.data.clone().unwrap();
    for key in ["ca.crt", "ca.key", "tls.crt", "tls.key", "other"] {
        assert!(data.contains_key(key), "{key} in {:?}", data.keys().collect::<Vec<_>>());
    }
    assert_eq!(
        String::from_utf8(data["tls.crt"].0.clone()).unwrap(),
        server.certificate().unwrap().cert_pem
    );
    assert_eq!(secret.metadata.labels.unwrap()["app.kubernetes.io/managed-by"], "Helm");
    assert_eq!(secret.metadata.annotations.unwrap()["meta.helm.sh/release-name"], "operator");
    assert_eq!(secret.metadata.owner_references.unwrap()[0].name, "chart");

    // An immutable Secret could never be renewed: the server does not start, and says which.
    let frozen =
        json!({ "metadata": { "name": "frozen-certs" }, "immutable": true, "type": "Opaque" });
    secrets.create(&pp, &serde_json::from_value(frozen).unwrap()).await.unwrap();
    let store = ctrlkit::tls::SecretCertificates::new(
        api.client(),
        "default",
        "frozen-certs",
        ["127.0.0.1"],
    );
    let server = WebhookServer::builder()
        .address("127.0.0.1:0".parse().unwrap())
        .certificates(store)
        .build();
    let ended =
        tokio::time::timeout(Duration::from_secs(10), server.run(std::future::pending())).await;
    let err =
        ended.expect("the server gives up at once").expect_err("an immutable Secret is an error");
    let message = err.to_string();
    assert!(message.contains("default/frozen-certs") && message.contains("immutable"), "{message}");
}
