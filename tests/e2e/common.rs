//! Helpers of the end-to-end cases: pods, informers behind a proxy, and the shared recording
//! handler and polling (`tests/support`).

use std::time::Duration;

use ctrlkit::cache::{Informer, InformerBuilder, InformerObject, ListWatch, wait_for_cache_sync};
use ctrlkit_apiserver::harness::{Proxy, RequestLog, Target, embedded_token};
use ctrlkit_apiserver::{ApiServerBuilder, ResourceType};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Pod;
use kube_client::api::PostParams;
use kube_client::{Api, Resource};

pub use crate::support::observe::*;

/// The users besides the admin that the suite's servers authenticate by token, with no
/// permissions until a case grants them some: scripts/kube-apiserver.sh's token file lists
/// them for the real server.
pub const USERS: [&str; 2] = ["ctrlkit-e2e-reader", "ctrlkit-e2e-stranger"];

/// The suite's embedded servers: bookmarks every 5 s rather than the real server's minute,
/// to keep the suite short; Secrets without the watch cache, as scripts/kube-apiserver.sh
/// starts the real one; the Widget and Tracker kinds; the [`USERS`].
pub fn server(builder: ApiServerBuilder) -> ApiServerBuilder {
    USERS.into_iter().fold(
        builder
            .bookmark_interval(Duration::from_secs(5))
            .without_watch_cache("", "secrets")
            .resource(widget())
            .resource(crate::guards::tracker()),
        |builder, user| builder.user(&embedded_token(user), user, &[]),
    )
}

/// The custom resource the suite uses: namespaced, with a status subresource
/// (`Target::custom_resource` defines it on a real server).
pub fn widget() -> ResourceType {
    ResourceType::new("example.com", "v1", "Widget", "widgets", true).with_status()
}

pub async fn create(pods: &Api<Pod>, names: &[&str], labels: serde_json::Value) {
    for name in names {
        pods.create(&PostParams::default(), &pod(name, labels.clone())).await.expect("create");
    }
}

/// Waits up to 20 s for `check` to hold.
pub async fn eventually(what: &str, check: impl FnMut() -> bool) {
    eventually_within(Duration::from_secs(20), what, check).await
}

/// An informer running through a proxy, synced, with a recorder of what it told handlers
/// and a log of its requests. Dropping it stops the informer.
pub struct Synced<K> {
    pub informer: Informer<K>,
    pub recorder: Recorder,
    pub proxy: Proxy,
    pub log: RequestLog,
    _running: (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>),
}

/// Starts an informer for `K` in the case's namespace, its connections through a proxy,
/// shaped by `configure`, and waits for its cache to sync.
pub async fn synced_informer<K>(
    t: &Target,
    configure: impl FnOnce(InformerBuilder<K>) -> InformerBuilder<K>,
    list_watch: impl FnOnce(ListWatch<K>) -> ListWatch<K>,
) -> Synced<K>
where
    K: InformerObject + Resource<Scope = NamespaceResourceScope>,
    K::DynamicType: Default,
{
    let (proxy, client, log) = t.through_proxy().await;
    let list_watch = list_watch(ListWatch::new(Api::namespaced(client, &t.ns)));
    let informer = configure(Informer::builder(list_watch).backoff(fast_backoff())).build();
    let recorder = Recorder::default();
    informer.add_event_handler(recorder.clone());
    let running = start(&informer);
    assert!(wait_for_cache_sync(&[&informer], std::future::pending()).await.is_ok());
    Synced { informer, recorder, proxy, log, _running: running }
}

/// A resourceVersion as a number, to compare versions in tests (clients must not, in
/// general; both servers here use etcd-style increasing integers).
pub fn rv_number(rv: &str) -> u64 {
    rv.parse().unwrap_or_else(|_| panic!("a numeric resourceVersion, got {rv:?}"))
}

/// Runs `case`, then `clean_up` whether the case passed or panicked (so that what the case
/// made on a shared server, webhook configurations say, never outlives it); a panic is passed
/// on after the clean-up.
pub async fn then_clean_up(
    case: impl std::future::Future<Output = ()>,
    clean_up: impl std::future::Future<Output = ()>,
) {
    use futures::FutureExt;
    let outcome = std::panic::AssertUnwindSafe(case).catch_unwind().await;
    clean_up.await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
