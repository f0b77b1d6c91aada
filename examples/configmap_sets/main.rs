//! An operator over a custom resource: a `ConfigMapSet` keeps `spec.replicas` ConfigMaps
//! named `<set>-0`, `<set>-1`, …, each holding `spec.data` and controlled by the set.
//!
//! It owns its ConfigMaps, so deleting or editing one by hand brings it back, and scaling
//! down deletes the extra ones; it writes `status.ready` (the ConfigMaps that match) through
//! `/status`; set events that do not change `metadata.generation` (status writes, label
//! edits) are filtered out by a predicate. One [`Manager`] hosts the controller over one
//! informer factory; the ConfigMap cache gets an index by owner, which the reconciler reads.
//!
//! It puts the finalizer `ctrlkit.example.com/cleanup` on each set, whose cleanup deletes the
//! set's ConfigMaps before the set goes; it records events (`kubectl get events`) when it
//! creates, restores and deletes ConfigMaps. With `--leader-elect`, replicas elect a leader on
//! the Lease `configmap-sets` (identity: hostname and a random mark) and only the leader
//! reconciles; with `--shard`, replicas share the sets instead: each is a shard of the ring
//! `configmap-sets` (its own Lease, id from hostname and a random mark), reconciling the sets the
//! ring's sharder (run by the elected leader) labels to it, and their ConfigMaps; with
//! `--metrics-addr ADDR`, it serves `/metrics`, `/healthz` and `/readyz` (and `/readyz/<check>`:
//! `/readyz/configmap-sets-webhooks` is the webhook server's own readiness, which its pod's
//! readiness probe asks, `examples/configmap_sets.deploy.yaml`).
//!
//! It applies its CustomResourceDefinition (`examples/configmap_sets.crd.yaml`) when the
//! cluster lacks it. It uses your cluster when one is configured (KUBECONFIG,
//! `~/.kube/config`, in-cluster); otherwise it starts ctrlkit's embedded API server and plays
//! a short demo on it.
//!
//! ```text
//! cargo run --example configmap_sets -- [--namespace NS] [--embedded] [--leader-elect] [--shard] [--metrics-addr ADDR]
//!     [--webhook-port PORT [--webhook-host HOST] [--storage-version v1|v2]]
//! kubectl apply -f - <<'EOF'
//! apiVersion: ctrlkit.example.com/v1
//! kind: ConfigMapSet
//! metadata: {name: greetings}
//! spec: {replicas: 3, data: {greeting: hello}}
//! EOF
//! ```
//! Ctrl-C or SIGTERM stops it cleanly (exit code 0).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ctrlkit::cache::{Indexer, InformerGuard, ListWatch, ObjectKey};
use ctrlkit::controller::{Action, Config, Predicate, Reconciler};
use ctrlkit::events::{EventRecorder, EventType, NewEvent};
use ctrlkit::finalizer::{Event, FinalizerError, finalizer};
use ctrlkit::leaderelection::{LeaderElectionConfig, LeaseLock, default_identity};
use ctrlkit::manager::{Manager, shutdown_signal};
use ctrlkit::sharding::{Ring, Sharder, default_shard_id, shard_label};
use ctrlkit::status::apply_status;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResource;
use kube_client::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube_client::{Api, Client, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

const GROUP: &str = "ctrlkit.example.com";
/// The ConfigMap cache's index of ConfigMaps by the `namespace/name` of their controlling set.
const BY_SET: &str = "configmapset";
/// The field manager of the controller's status writes.
const FIELD_MANAGER: &str = "ctrlkit.example.com/configmap-sets";
/// The finalizer whose cleanup deletes a set's ConfigMaps before the set goes.
const FINALIZER: &str = "ctrlkit.example.com/cleanup";
/// The CustomResourceDefinition's name.
const CRD_NAME: &str = "configmapsets.ctrlkit.example.com";
/// The ConfigMaps of a set that leaves `spec.replicas` out (the defaulter writes it).
const DEFAULT_REPLICAS: i32 = 1;
/// The conversion webhook's path.
const CONVERT_PATH: &str = "/convert-configmapsets";

mod crd;
mod v2;
#[cfg(feature = "webhook")]
mod webhooks;

// `ConfigMapSet` (`ctrlkit.example.com/v1`), a kube-derive custom resource: the derive makes
// the `ConfigMapSet` type (metadata, spec, status) and its CustomResourceDefinition,
// `ConfigMapSet::crd()`, which `--print-crd` prints (`examples/configmap_sets.crd.yaml` is that
// output). The doc comments become the schema's descriptions.
/// A set of ConfigMaps named `<set>-0`, `<set>-1`, ..., each holding `data`.
// Two `printcolumn(..)` are two columns, not one attribute twice.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ctrlkit.example.com",
    version = "v1",
    kind = "ConfigMapSet",
    namespaced,
    status = "ConfigMapSetStatus",
    shortname = "cms",
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.ready")
)]
struct ConfigMapSetSpec {
    /// How many ConfigMaps the set keeps (1 when left out).
    #[schemars(range(min = 0))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replicas: Option<i32>,
    /// What each ConfigMap holds.
    #[serde(default)]
    data: BTreeMap<String, String>,
}

/// What the controller last saw of the set's ConfigMaps.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
struct ConfigMapSetStatus {
    /// The ConfigMaps that match the spec.
    ready: i32,
}

/// The `namespace/name` of the set that controls `cm`, if one does.
fn controlling_set(cm: &ConfigMap) -> Option<String> {
    let owner = cm.owner_references().iter().find(|r| {
        r.controller == Some(true)
            && r.kind == "ConfigMapSet"
            && r.api_version.split('/').next() == Some(GROUP)
    })?;
    Some(format!("{}/{}", cm.namespace()?, owner.name))
}

/// Keeps each set's ConfigMaps as its spec says.
struct SetReconciler {
    client: Client,
    /// The ConfigMaps, indexed by controlling set: the controller's own cache of them.
    configmaps: Indexer<ConfigMap>,
    /// Keeps the ConfigMap informer running for as long as the reconciler reads it.
    _configmaps_guard: InformerGuard,
    events: EventRecorder,
}

#[async_trait]
impl Reconciler for SetReconciler {
    type Object = ConfigMapSet;
    type Error = FinalizerError<kube_client::Error>;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        set: Option<Arc<ConfigMapSet>>,
    ) -> Result<Action, Self::Error> {
        // Gone: its finalizer's cleanup ran before it went.
        let Some(set) = set else { return Ok(Action::done()) };
        let sets: Api<ConfigMapSet> =
            Api::namespaced(self.client.clone(), key.namespace.as_deref().unwrap_or("default"));
        finalizer(&sets, FINALIZER, set, |event| async move {
            match event {
                Event::Apply(set) => self.apply(key, &set).await,
                Event::Cleanup(set) => self.cleanup(key, &set).await,
            }
        })
        .await
    }
}

impl SetReconciler {
    /// Makes the set's ConfigMaps match its spec and writes its status.
    async fn apply(
        &self,
        key: &ObjectKey,
        set: &ConfigMapSet,
    ) -> Result<Action, kube_client::Error> {
        let namespace = key.namespace.as_deref().unwrap_or("default");
        let configmaps: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let owned = self.configmaps.by_index(BY_SET, &key.to_string()).unwrap_or_default();
        let replicas = set.spec.replicas.unwrap_or(DEFAULT_REPLICAS).max(0);
        let wanted: Vec<String> = (0..replicas).map(|i| format!("{}-{i}", key.name)).collect();
        let mut ready = 0;
        for name in &wanted {
            let cached = self.configmaps.get(&ObjectKey::namespaced(namespace, name));
            match cached {
                None => {
                    let cm =
                        configmaps.create(&PostParams::default(), &self.desired(set, name)).await?;
                    println!("ConfigMapSet {key}: created ConfigMap {name}");
                    self.event(set, &cm, "Created", "Create", &format!("created ConfigMap {name}"));
                }
                Some(cm) if controlling_set(&cm).as_deref() != Some(&key.to_string()) => {
                    println!(
                        "ConfigMapSet {key}: ConfigMap {name} exists and is not ours; leaving it"
                    );
                }
                Some(cm) if cm.data.clone().unwrap_or_default() != set.spec.data => {
                    // A merge patch of the whole map: wanted keys set, others removed.
                    let mut data = serde_json::Map::new();
                    for extra in cm.data.iter().flatten().map(|(k, _)| k) {
                        data.insert(extra.clone(), serde_json::Value::Null);
                    }
                    for (k, v) in &set.spec.data {
                        data.insert(k.clone(), v.clone().into());
                    }
                    let patch = Patch::Merge(json!({ "data": data }));
                    configmaps.patch(name, &PatchParams::default(), &patch).await?;
                    println!("ConfigMapSet {key}: restored ConfigMap {name}");
                    let note = format!("restored ConfigMap {name}");
                    self.event(set, &cm, "Restored", "Update", &note);
                }
                Some(_) => ready += 1,
            }
        }
        for cm in owned.iter().filter(|cm| !wanted.contains(&cm.name_any())) {
            delete_ignoring_missing(&configmaps, &cm.name_any()).await?;
            println!("ConfigMapSet {key}: deleted ConfigMap {}", cm.name_any());
            self.event(
                set,
                cm,
                "Deleted",
                "Delete",
                &format!("deleted ConfigMap {}", cm.name_any()),
            );
        }
        let status = ConfigMapSetStatus { ready };
        if set.status.as_ref() != Some(&status) {
            let sets: Api<ConfigMapSet> = Api::namespaced(self.client.clone(), namespace);
            apply_status(&sets, set, &status, FIELD_MANAGER).await?;
            println!("ConfigMapSet {key}: {ready}/{replicas} ConfigMaps ready");
        }
        Ok(Action::done())
    }

    /// The set is being deleted: its ConfigMaps go first, then (the finalizer removed) the set.
    async fn cleanup(
        &self,
        key: &ObjectKey,
        set: &ConfigMapSet,
    ) -> Result<Action, kube_client::Error> {
        let namespace = key.namespace.as_deref().unwrap_or("default");
        let configmaps: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        // Asked of the server, not the cache: a ConfigMap the cache has not heard of yet must
        // not outlive the set.
        let all = configmaps.list(&Default::default()).await?;
        let owned: Vec<&ConfigMap> = all
            .items
            .iter()
            .filter(|cm| controlling_set(cm).as_deref() == Some(&key.to_string()))
            .collect();
        for cm in &owned {
            delete_ignoring_missing(&configmaps, &cm.name_any()).await?;
            self.event(
                set,
                cm,
                "Deleted",
                "Delete",
                &format!("deleted ConfigMap {}", cm.name_any()),
            );
        }
        println!("ConfigMapSet {key} is being deleted: deleted its {} ConfigMaps", owned.len());
        Ok(Action::done())
    }

    /// Records a Normal event about `set` and the ConfigMap `cm` (related: so that each
    /// ConfigMap's events are a series of their own); never blocks, never fails.
    fn event(&self, set: &ConfigMapSet, cm: &ConfigMap, reason: &str, action: &str, note: &str) {
        let event =
            NewEvent::new(EventType::Normal, reason, action, note).related(cm.object_ref(&()));
        self.events.publish_for(set, event);
    }

    /// The ConfigMap `name` of `set`: its data, a label, and the set as controller.
    /// Sharded, it carries the set's shard label from the start, so that it is in this
    /// shard's cache before the sharder would have labelled it.
    fn desired(&self, set: &ConfigMapSet, name: &str) -> ConfigMap {
        let owner = set.controller_owner_ref(&()).expect("a cached set has a name and uid");
        let mut labels: BTreeMap<String, String> =
            [("app.kubernetes.io/managed-by".to_owned(), "configmapsets".to_owned())].into();
        let shard = shard_label("configmap-sets");
        if let Some(id) = set.labels().get(&shard) {
            labels.insert(shard, id.clone());
        }
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(labels),
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            data: Some(set.spec.data.clone()),
            ..ConfigMap::default()
        }
    }
}

async fn delete_ignoring_missing(
    api: &Api<ConfigMap>,
    name: &str,
) -> Result<(), kube_client::Error> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube_client::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(err) => Err(err),
    }
}

/// A set created, a ConfigMap deleted and one edited by hand, the set scaled down.
async fn demo(client: Client, namespace: &str) -> Result<(), String> {
    let sets: Api<ConfigMapSet> = Api::namespaced(client.clone(), namespace);
    let configmaps: Api<ConfigMap> = Api::namespaced(client, namespace);
    let fail = |what: &str, e: kube_client::Error| format!("{what}: {e}");
    let greeting: BTreeMap<String, String> = [("greeting".to_owned(), "hello".to_owned())].into();
    println!("Demo: creating ConfigMapSet demo with 3 replicas");
    let set =
        ConfigMapSet::new("demo", ConfigMapSetSpec { replicas: Some(3), data: greeting.clone() });
    sets.create(&PostParams::default(), &set).await.map_err(|e| fail("creating the set", e))?;
    let ready = |want: i32| {
        let sets = sets.clone();
        move || {
            let sets = sets.clone();
            async move {
                let set = sets.get("demo").await.ok()?;
                (set.status.map(|s| s.ready) == Some(want)).then_some(())
            }
        }
    };
    wait_for("3 ConfigMaps ready", ready(3)).await?;

    println!("Demo: deleting ConfigMap demo-1 by hand");
    configmaps.delete("demo-1", &DeleteParams::default()).await.map_err(|e| fail("deleting", e))?;
    let back = |name: &'static str| {
        let configmaps = configmaps.clone();
        let greeting = greeting.clone();
        move || {
            let (configmaps, greeting) = (configmaps.clone(), greeting.clone());
            async move {
                let cm = configmaps.get_opt(name).await.ok()??;
                (cm.data == Some(greeting)).then_some(())
            }
        }
    };
    wait_for("demo-1 back", back("demo-1")).await?;

    println!("Demo: editing ConfigMap demo-0 by hand");
    let edit = Patch::Merge(json!({"data": {"greeting": "goodbye", "extra": "x"}}));
    configmaps
        .patch("demo-0", &PatchParams::default(), &edit)
        .await
        .map_err(|e| fail("editing", e))?;
    wait_for("demo-0 restored", back("demo-0")).await?;

    println!("Demo: scaling ConfigMapSet demo down to 1");
    let scale = Patch::Merge(json!({"spec": {"replicas": 1}}));
    sets.patch("demo", &PatchParams::default(), &scale).await.map_err(|e| fail("scaling", e))?;
    wait_for("1 ConfigMap ready", ready(1)).await?;
    let gone = || {
        let configmaps = configmaps.clone();
        async move {
            let none = configmaps.get_opt("demo-2").await.ok()?.is_none()
                && configmaps.get_opt("demo-1").await.ok()?.is_none();
            none.then_some(())
        }
    };
    wait_for("demo-1 and demo-2 deleted", gone).await?;

    println!("Demo: deleting ConfigMapSet demo (its finalizer deletes its ConfigMaps first)");
    sets.delete("demo", &DeleteParams::default()).await.map_err(|e| fail("deleting the set", e))?;
    let all_gone = || {
        let (sets, configmaps) = (sets.clone(), configmaps.clone());
        async move {
            let none = sets.get_opt("demo").await.ok()?.is_none()
                && configmaps.get_opt("demo-0").await.ok()?.is_none();
            none.then_some(())
        }
    };
    wait_for("the set and its ConfigMaps gone", all_gone).await
}

/// Polls `check` until it yields `Some`, for up to 10 s.
async fn wait_for<F, Fut>(what: &str, check: F) -> Result<(), String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    for _ in 0..100 {
        if check().await.is_some() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("timed out waiting for {what}"))
}

#[path = "../support/mod.rs"]
mod support;

struct Args {
    namespace: String,
    embedded: bool,
    leader_elect: bool,
    shard: bool,
    metrics_addr: Option<std::net::SocketAddr>,
    webhook_port: Option<u16>,
    webhook_host: String,
    storage_version: String,
}

const USAGE: &str = "usage: configmap_sets [--namespace NS] [--embedded] [--leader-elect] \
                     [--shard] [--metrics-addr ADDR] \
                     [--webhook-port PORT [--webhook-host HOST] [--storage-version v1|v2]] \
                     | --print-crd";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        namespace: "default".into(),
        embedded: false,
        leader_elect: false,
        shard: false,
        metrics_addr: None,
        webhook_port: None,
        webhook_host: "127.0.0.1".into(),
        storage_version: "v1".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--namespace" | "-n" => {
                args.namespace = it.next().ok_or("--namespace needs a value")?
            }
            "--embedded" => args.embedded = true,
            "--leader-elect" => args.leader_elect = true,
            "--shard" => args.shard = true,
            "--metrics-addr" => {
                let addr = it.next().ok_or("--metrics-addr needs an address, as 127.0.0.1:8080")?;
                let parsed = addr.parse().map_err(|e| format!("--metrics-addr {addr}: {e}"))?;
                args.metrics_addr = Some(parsed);
            }
            "--webhook-port" => {
                let port = it.next().ok_or("--webhook-port needs a port, as 9443")?;
                let parsed = port.parse().map_err(|e| format!("--webhook-port {port}: {e}"))?;
                args.webhook_port = Some(parsed);
            }
            "--webhook-host" => {
                args.webhook_host = it.next().ok_or("--webhook-host needs a host, as 127.0.0.1")?
            }
            "--storage-version" => {
                let version = it.next().ok_or("--storage-version needs v1 or v2")?;
                if !matches!(version.as_str(), "v1" | "v2") {
                    return Err(format!("--storage-version {version}: v1 or v2"));
                }
                args.storage_version = version;
            }
            "--help" | "-h" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> ExitCode {
    if std::env::args().skip(1).any(|a| a == "--print-crd") {
        return match crd::yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("error: writing the CRD as YAML: {err}");
                ExitCode::FAILURE
            }
        };
    }
    let (args, config, client, server) = match support::start(parse_args(), |a| a.embedded).await {
        Ok(started) => started,
        Err(code) => return code,
    };
    // With --webhook-port: the webhooks on this process, registered with the cluster (or
    // the embedded server, which calls them as a cluster does).
    #[cfg(feature = "webhook")]
    let webhooks =
        args.webhook_port.map(|port| webhooks::Webhooks { port, host: args.webhook_host.clone() });
    #[cfg(feature = "webhook")]
    let convert_at = webhooks.as_ref().map(|w| w.url(CONVERT_PATH));
    #[cfg(not(feature = "webhook"))]
    let convert_at = match args.webhook_port {
        Some(port) => {
            eprintln!(
                "error: --webhook-port {port} needs ctrlkit's `webhook` feature: \
                 cargo run --features webhook --example configmap_sets -- --webhook-port {port}"
            );
            return ExitCode::FAILURE;
        }
        None => None,
    };
    if let Err(err) = crd::ensure(&client, convert_at, &args.storage_version).await {
        eprintln!("error: {err}");
        return ExitCode::FAILURE;
    }

    let ns = args.namespace.as_str();
    // Built from the config, the manager's client retries 429s outside the layer that counts
    // requests (rest_client_requests_total), so each refused attempt shows on /metrics.
    let mut builder = match Manager::builder_from_config(config) {
        Ok(builder) => builder.graceful_shutdown_timeout(Duration::from_secs(10)),
        Err(err) => {
            eprintln!("error: cannot build the manager's client: {err}");
            return ExitCode::FAILURE;
        }
    };
    // Sharded, the replicas share the sets; the sharder runs on the elected leader.
    let shard = args.shard.then(|| (Ring::new("configmap-sets").namespace(ns), default_shard_id()));
    if let Some((ring, id)) = &shard {
        println!("Shard {id} of ring {}", ring.name());
        builder = builder.sharding(ring.clone(), id);
    }
    if args.leader_elect || shard.is_some() {
        let identity = default_identity();
        println!("Leader election on Lease {ns}/configmap-sets as {identity}");
        let lock = LeaseLock::new(client.clone(), ns, "configmap-sets", &identity);
        builder = builder.leader_election(lock, LeaderElectionConfig::default());
    }
    if let Some(addr) = args.metrics_addr {
        #[cfg(feature = "metrics")]
        {
            println!("Serving /metrics, /healthz and /readyz on {addr}");
            builder = builder.metrics_address(addr);
        }
        #[cfg(not(feature = "metrics"))]
        {
            eprintln!(
                "error: --metrics-addr {addr} needs ctrlkit's `metrics` feature: \
                 cargo run --features metrics --example configmap_sets -- --metrics-addr {addr}"
            );
            return ExitCode::FAILURE;
        }
    }
    let mut manager = builder.build();
    // From here on, the manager's client: its requests are counted too.
    let client = manager.client().clone();
    #[cfg(feature = "webhook")]
    if let Some(webhooks) = &webhooks {
        if let Err(err) = webhooks.register(&client).await {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
        match webhooks.server(&client, ns, CRD_NAME) {
            Ok(server) => manager.add(server),
            Err(err) => {
                eprintln!("error: {err}");
                return ExitCode::FAILURE;
            }
        }
        println!(
            "Serving the validating, defaulting and conversion webhooks on port {} as {}",
            webhooks.port,
            webhooks.url("")
        );
    }
    let sets: Api<ConfigMapSet> = Api::namespaced(client.clone(), ns);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    // The controller's ConfigMap informer (the factory shares it), with an index by owner;
    // sharded, it holds this shard's ConfigMaps alone.
    let owned = match &shard {
        Some((ring, id)) => ListWatch::new(configmaps.clone()).labels(&ring.shard_selector(id)),
        None => ListWatch::new(configmaps.clone()),
    };
    let (informer, guard) = manager.factory().guarded_informer_for(owned.clone()).into_parts();
    let cache = informer.indexer();
    if let Err(err) =
        cache.add_index(BY_SET, |cm: &ConfigMap| controlling_set(cm).into_iter().collect())
    {
        eprintln!("error: {err}");
        return ExitCode::FAILURE;
    }
    if let Some((ring, _)) = &shard {
        let sharder = Sharder::<ConfigMapSet>::new(client.clone(), ring.clone(), Some(ns))
            .owns::<ConfigMap>();
        // With --metrics-addr, the ring's metrics go to /metrics too.
        #[cfg(feature = "metrics")]
        let sharder = match manager.metrics() {
            Some(registry) => sharder.metrics(Arc::new(registry.clone())),
            None => sharder,
        };
        manager.add(sharder);
    }
    let events = manager.event_recorder("ctrlkit.example.com/configmap-sets");
    let added = manager
        .controller(sets)
        .predicate(Predicate::generation_changed())
        .owns(owned)
        .config(Config::default().workers(2))
        .complete(SetReconciler {
            client: client.clone(),
            configmaps: cache,
            _configmaps_guard: guard,
            events,
        });
    if let Err(err) = added {
        eprintln!("error: {err}");
        return ExitCode::FAILURE;
    }
    if let Some(elector) = manager.leader_elector() {
        // Say who leads, for whoever watches the processes.
        let mut status = elector.status();
        tokio::spawn(async move {
            let mut leading = false;
            while status.changed().await.is_ok() {
                let now = status.borrow_and_update().leading;
                if now != leading {
                    leading = now;
                    println!("{}", if leading { "Became the leader" } else { "Stopped leading" });
                }
            }
        });
    }

    let demo_failed = std::sync::atomic::AtomicBool::new(false);
    let shutdown = async {
        match &server {
            Some(_) => tokio::select! {
                result = demo(client.clone(), ns) => match result {
                    Ok(()) => println!("Demo finished; stopping (run against a cluster to keep watching)."),
                    Err(err) => {
                        eprintln!("demo failed: {err}");
                        demo_failed.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                },
                _ = shutdown_signal() => {}
            },
            None => shutdown_signal().await,
        }
    };
    println!("Starting ConfigMapSet controller in namespace {ns}");
    let result = manager.run_until(shutdown).await;
    println!("Stopping ConfigMapSet controller");
    if let Some(server) = server {
        server.shutdown().await;
    }
    match result {
        Ok(()) if demo_failed.into_inner() => ExitCode::FAILURE,
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
