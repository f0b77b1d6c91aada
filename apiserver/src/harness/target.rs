//! [`Target`]: the server one test case runs against, a namespace of its own there, and the
//! few operations that differ between the embedded server and a real kube-apiserver.
//!
//! A real server is shared by every case of a run, so each case works in a namespace made
//! for it and never assumes it is alone: cluster-wide lists filter by namespace, and
//! resourceVersions are compared by order, never by exact distance.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use std::sync::OnceLock;

use crate::{ApiServer, ApiServerBuilder, ResourceType};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_client::api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube_client::config::{KubeConfigOptions, Kubeconfig};
use kube_client::{Api, Client, Config};
use serde_json::json;

use super::proxy::Proxy;
use super::requests::{RequestLog, recording_client};

/// The kubeconfig of the real server; unset, real-server cases are skipped.
pub const KUBECONFIG_ENV: &str = "CTRLKIT_E2E_KUBECONFIG";
/// The real server's etcd client URL, for cases that compact its history.
pub const ETCD_ENV: &str = "CTRLKIT_E2E_ETCD";
/// The etcdctl to compact it with (an assets folder's own); unset, `etcdctl` on the PATH.
pub const ETCDCTL_ENV: &str = "CTRLKIT_E2E_ETCDCTL";
/// The real server's audit log (JSON lines), for cases that check what clients sent.
pub const AUDIT_LOG_ENV: &str = "CTRLKIT_E2E_AUDIT_LOG";
/// The real server's token file (`token,user,uid[,"groups"]`), for cases that need other users.
pub const TOKENS_ENV: &str = "CTRLKIT_E2E_TOKENS";

/// Which server a case runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Embedded,
    Real,
}

impl Kind {
    /// The prefix of the case's name in the test list.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Embedded => "embedded",
            Kind::Real => "real",
        }
    }
}

/// A case's server, client and namespace.
pub struct Target {
    /// A client whose requests go straight to the server.
    pub client: Client,
    /// The namespace made for this case.
    pub ns: String,
    kind: Kind,
    embedded: Option<ApiServer>,
    pub(super) config: Config,
    kubeconfig: PathBuf,
    dir: PathBuf,
    version: ServerVersion,
}

/// The Kubernetes version a server reports at `/version`.
///
/// The suites run on kube-apiserver 1.20.2 and 1.36.2 (and the embedded server, which claims
/// 1.36). Where the two differ, a case asserts 1.36's behaviour from 1.36 on and 1.20's
/// before it: a server of a release in between may need a threshold moved to the release
/// that made the change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion {
    /// The major version (1).
    pub major: u32,
    /// The minor version (36 for v1.36.2).
    pub minor: u32,
}

impl ServerVersion {
    /// Whether the server is `1.minor` or later.
    pub fn at_least(self, minor: u32) -> bool {
        self >= ServerVersion { major: 1, minor }
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Whether the server serves `resource` (a list of it answers).
async fn served(client: &Client, resource: &ApiResource) -> bool {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    api.list(&ListParams::default().limit(1)).await.is_ok()
}

/// Reads `/version` (`minor` may carry a `+`, as on some distributions).
async fn server_version(client: &Client) -> ServerVersion {
    let info = client.apiserver_version().await.expect("the server answers /version");
    let number = |s: &str| -> u32 {
        s.trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse()
            .unwrap_or_else(|_| panic!("a version number, not {s:?}"))
    };
    ServerVersion { major: number(&info.major), minor: number(&info.minor) }
}

/// What a test binary adds to each case's embedded server ([`main_with`](super::main_with)).
static CONFIGURE: OnceLock<fn(ApiServerBuilder) -> ApiServerBuilder> = OnceLock::new();

/// Sets what every embedded server of this process is built with; the first call wins.
pub(crate) fn configure(with: fn(ApiServerBuilder) -> ApiServerBuilder) {
    let _ = CONFIGURE.set(with);
}

/// The bearer token [`Target::token`] answers for `user` on the embedded server: a test binary
/// that needs other users than the admin registers each with it, in its
/// [`main_with`](super::main_with) (`server.user(&embedded_token(u), u, &[])`), as the real
/// server's token file ([`TOKENS_ENV`]) lists them.
pub fn embedded_token(user: &str) -> String {
    format!("{user}-token")
}

impl Target {
    /// The bearer token of `user`: on the embedded server, [`embedded_token`] (the user
    /// registered with it); on the real server, its token in the token file
    /// (`CTRLKIT_E2E_TOKENS`: `token,user,uid[,"groups"]`).
    pub fn token(&self, user: &str) -> String {
        if self.kind == Kind::Embedded {
            return embedded_token(user);
        }
        let path =
            std::env::var_os(TOKENS_ENV).unwrap_or_else(|| panic!("{TOKENS_ENV} is not set"));
        let text = std::fs::read_to_string(&path).expect("the token file reads");
        text.lines()
            .find_map(|line| {
                let mut fields = line.split(',');
                let token = fields.next()?;
                (fields.next()? == user).then(|| token.to_owned())
            })
            .unwrap_or_else(|| panic!("no token of {user} in the token file"))
    }

    /// A target outside the runner (a `#[tokio::test]`, a bench): on the real server that
    /// [`KUBECONFIG_ENV`] names when it is set, else on a fresh embedded server; with a
    /// namespace named after `case`. [`cleanup`](Self::cleanup) it when done.
    pub async fn start(case: &str) -> Target {
        let kind = match std::env::var_os(KUBECONFIG_ENV) {
            Some(_) => Kind::Real,
            None => Kind::Embedded,
        };
        Target::new(kind, case).await
    }

    /// As [`start`](Self::start), always on a fresh embedded server (to inject faults).
    pub async fn start_embedded(case: &str) -> Target {
        Target::new(Kind::Embedded, case).await
    }

    /// Starts (embedded) or connects to (real) the server and makes the case's namespace.
    pub(crate) async fn new(kind: Kind, case: &str) -> Target {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ctrlkit-test-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let (embedded, kubeconfig) = match kind {
            Kind::Embedded => {
                let mut builder = ApiServer::builder();
                if let Some(configure) = CONFIGURE.get() {
                    builder = configure(builder);
                }
                let server = builder.start().await.expect("the embedded server starts");
                let path = dir.join("kubeconfig");
                server.write_kubeconfig(&path).expect("the kubeconfig is written");
                (Some(server), path)
            }
            Kind::Real => {
                let path = std::env::var_os(KUBECONFIG_ENV).unwrap_or_else(|| {
                    panic!("{KUBECONFIG_ENV} is not set: no real server to run on")
                });
                (None, PathBuf::from(path))
            }
        };
        let config = config_from(&kubeconfig).await;
        let client = Client::try_from(config.clone()).expect("a client for the server");
        let version = server_version(&client).await;
        let ns = namespace_name(case, n);
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let namespace = serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap();
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {ns}: {e}"));
        Target { client, ns, kind, embedded, config, kubeconfig, dir, version }
    }

    /// The server's Kubernetes version.
    pub fn version(&self) -> ServerVersion {
        self.version
    }

    /// Whether this is a real kube-apiserver.
    pub fn is_real(&self) -> bool {
        self.kind == Kind::Real
    }

    /// The embedded server, for cases that inject faults (which run on it alone).
    pub fn embedded(&self) -> &ApiServer {
        self.embedded.as_ref().expect("an embedded-only case runs on the embedded server")
    }

    /// The client configuration, to build clients of one's own (through a proxy, say).
    pub fn config(&self) -> Config {
        self.config.clone()
    }

    /// A client whose connections pass through a [`Proxy`] (to be cut) and whose requests
    /// are recorded.
    pub async fn through_proxy(&self) -> (Proxy, Client, RequestLog) {
        let url = &self.config.cluster_url;
        let upstream: SocketAddr = format!(
            "{}:{}",
            url.host().expect("the server URL has a host"),
            url.port_u16().unwrap_or(443)
        )
        .parse()
        .expect("the server is at an IP address");
        let proxy = Proxy::start(upstream).await;
        let mut config = self.config.clone();
        config.cluster_url = format!("{}://{}", url.scheme_str().unwrap_or("https"), proxy.addr())
            .parse()
            .expect("a valid URL");
        let (client, log) = recording_client(config);
        (proxy, client, log)
    }

    /// A kubeconfig file for this server, for kubectl and processes.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A scratch directory, removed after the case.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Compacts the server's storage up to now (etcd on the real server, its model on the
    /// embedded one), so that older resourceVersions expire (410).
    ///
    /// Resources served without the watch cache (secrets, as `scripts/kube-apiserver.sh`
    /// starts the real server and this harness the embedded one) expire for watches, lists
    /// and continue tokens alike. The others keep answering from the watch cache: watches on
    /// every version, lists and continue tokens from 1.36 on (1.20 reads those from etcd,
    /// so they expire there).
    pub async fn compact(&self) {
        if let Some(server) = &self.embedded {
            server.faults().compact_storage();
            return;
        }
        // A write first, so that the compaction covers every version the case has seen (etcd
        // keeps the revision it compacts at).
        let configmaps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.ns);
        let marker = serde_json::from_value(json!({"metadata": {"generateName": "compaction-"}}))
            .expect("a valid configmap");
        configmaps
            .create(&PostParams::default(), &marker)
            .await
            .expect("a write before compacting");
        let etcd = std::env::var(ETCD_ENV).expect("compacting cases run only with etcd configured");
        let status = etcdctl(&etcd, &["endpoint", "status", "-w", "json"], &[]).await;
        let status: serde_json::Value = serde_json::from_str(&status).expect("etcdctl's JSON");
        let revision = status[0]["Status"]["header"]["revision"]
            .as_u64()
            .unwrap_or_else(|| panic!("no revision in etcdctl's answer: {status}"));
        // Another case may have compacted past this revision already: as good.
        etcdctl(
            &etcd,
            &["compact", &revision.to_string()],
            &["required revision has been compacted"],
        )
        .await;
    }

    /// The custom resource `resource` describes, defined on the server if it is not served
    /// yet: by a CustomResourceDefinition (namespaced or cluster-scoped as it says, its status
    /// subresource if it has one, any fields kept), waited for until the server serves it. An
    /// embedded server built with it ([`main_with`](super::main_with) and
    /// [`ApiServerBuilder::resource`]) serves it from the start.
    pub async fn custom_resource(&self, resource: &ResourceType) -> ApiResource {
        let ar = resource.api_resource();
        if served(&self.client, &ar).await {
            return ar;
        }
        let singular = ar.kind.to_lowercase();
        let mut version = json!({
            "name": ar.version, "served": true, "storage": true,
            "schema": { "openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": true
            } }
        });
        if resource.status_subresource {
            version["subresources"] = json!({ "status": {} });
        }
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let crd = serde_json::from_value(json!({
            "metadata": { "name": format!("{}.{}", ar.plural, ar.group) },
            "spec": {
                "group": ar.group,
                "scope": if resource.namespaced { "Namespaced" } else { "Cluster" },
                "names": {
                    "plural": ar.plural, "singular": singular,
                    "kind": ar.kind, "listKind": format!("{}List", ar.kind)
                },
                "versions": [version]
            }
        }))
        .expect("a valid CRD");
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube_client::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("creating the {} CRD: {e}", ar.kind),
        }
        // Served once established: until then, requests for it are 404.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !served(&self.client, &ar).await {
            assert!(tokio::time::Instant::now() < deadline, "the {} CRD was not served", ar.kind);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ar
    }

    /// Deletes the case's namespace (real) or stops the server (embedded), and removes the
    /// scratch directory. The runner does it after each case.
    pub async fn cleanup(self) {
        if self.is_real() {
            let namespaces: Api<Namespace> = Api::all(self.client.clone());
            let _ = namespaces.delete(&self.ns, &DeleteParams::background()).await;
        }
        if let Some(server) = self.embedded {
            server.shutdown().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A client configuration read from a kubeconfig file.
pub async fn config_from(path: &Path) -> Config {
    let kubeconfig = Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("reading kubeconfig {}: {e}", path.display()));
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", path.display()))
}

/// `t-<case>-<n><random>`, a valid namespace name (a DNS label) unique to this run.
fn namespace_name(case: &str, n: u32) -> String {
    use std::hash::{BuildHasher, RandomState};
    let slug: String = case
        .rsplit("::")
        .next()
        .unwrap_or(case)
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .take(40)
        .collect();
    let random = RandomState::new().hash_one(n) % 0x100_0000;
    format!("t-{}-{n}{random:06x}", slug.trim_matches('-'))
}

/// Runs etcdctl; a failure whose message contains one of `benign` counts as success.
async fn etcdctl(endpoint: &str, args: &[&str], benign: &[&str]) -> String {
    let etcdctl = std::env::var_os(ETCDCTL_ENV).unwrap_or_else(|| "etcdctl".into());
    let out = tokio::process::Command::new(etcdctl)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(args)
        .output()
        .await
        .expect("running etcdctl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || benign.iter().any(|b| stderr.contains(b)),
        "etcdctl {args:?} failed: {stderr}"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A pod manifest for `kubectl create -f -` / `apply -f -`.
pub const KUBECTL_POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web-0
  labels: {app: web}
spec:
  containers:
  - name: web
    image: nginx:1.25
";
