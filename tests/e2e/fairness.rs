//! The fair queue, shown on a server: a controller of ConfigMaps in every namespace (2 workers,
//! a 5 ms reconcile). A namespace floods the queue; a change in another namespace is reconciled
//! after a few of the flood's keys with fairness on, and after all of them with it off. And a
//! retry of that lone key waits its own backoff, not the flood's reservations of the overall
//! bucket, with fair retries on.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ctrlkit::cache::{HasSynced, ListWatch, ObjectKey};
use ctrlkit::controller::{Action, Config, Controller, Reconciler};
use ctrlkit::workqueue::{WorkQueue, WorkQueueBuilder};
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube_client::Api;
use kube_client::api::{DeleteParams, PostParams};
use serde_json::json;
use tokio::time::Instant;

use super::common::*;
use crate::support::Failed;

const FLOOD: usize = 2000;
const WORKERS: usize = 2;

/// Whether a key fails at its n-th reconcile (1 for the first).
type Fails = Arc<dyn Fn(&ObjectKey, usize) -> bool + Send + Sync>;

/// Records the keys it reconciles, in order, and when; waits at `gate` until it opens; fails
/// the keys `fails` says.
#[derive(Clone)]
struct Flooded {
    open: Arc<AtomicBool>,
    gate: Arc<tokio::sync::Notify>,
    log: Arc<Mutex<Vec<(String, Instant)>>>,
    fails: Fails,
}

impl Flooded {
    fn new(fails: impl Fn(&ObjectKey, usize) -> bool + Send + Sync + 'static) -> Self {
        Self {
            open: Arc::new(AtomicBool::new(true)),
            gate: Arc::default(),
            log: Arc::default(),
            fails: Arc::new(fails),
        }
    }
    fn keys(&self) -> Vec<String> {
        self.log.lock().unwrap().iter().map(|(k, _)| k.clone()).collect()
    }
    fn times(&self, key: &str) -> Vec<Instant> {
        self.log.lock().unwrap().iter().filter(|(k, _)| k == key).map(|(_, t)| *t).collect()
    }
}

#[async_trait]
impl Reconciler for Flooded {
    type Object = ConfigMap;
    type Error = Failed;

    async fn reconcile(
        &self,
        key: &ObjectKey,
        _: Option<Arc<ConfigMap>>,
    ) -> Result<Action, Failed> {
        let seen = {
            let mut log = self.log.lock().unwrap();
            log.push((key.to_string(), Instant::now()));
            log.iter().filter(|(k, _)| *k == key.to_string()).count()
        };
        while !self.open.load(Ordering::SeqCst) {
            let opened = self.gate.notified();
            if self.open.load(Ordering::SeqCst) {
                break;
            }
            opened.await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        if (self.fails)(key, seen) {
            return Err(Failed::from("failing on purpose"));
        }
        Ok(Action::done())
    }
}

/// The case's two namespaces: the flood's (the case's own) and the lone key's (made here).
async fn quiet_namespace(t: &Target) -> String {
    let name = format!("{}-quiet", t.ns);
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    let ns = serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap();
    namespaces.create(&PostParams::default(), &ns).await.expect("the quiet namespace");
    name
}

async fn delete_namespace(t: &Target, name: &str) {
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    let _ = namespaces.delete(name, &DeleteParams::background()).await;
}

/// Creates ConfigMaps labelled `run` in `ns`, 32 at a time.
async fn create_configmaps(t: &Target, ns: &str, run: &str, names: Vec<String>) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), ns);
    stream::iter(names)
        .for_each_concurrent(32, |name| {
            let api = api.clone();
            async move {
                let cm = serde_json::from_value(json!({
                    "metadata": { "name": name, "labels": { "ctrlkit-e2e-fairness": run } },
                }))
                .unwrap();
                api.create(&PostParams::default(), &cm).await.expect("a configmap");
            }
        })
        .await;
}

/// A controller of the run's ConfigMaps in every namespace, 2 workers, with `config` and
/// `queue`.
fn controller(
    t: &Target,
    run: &str,
    config: Config,
    queue: WorkQueueBuilder<ObjectKey>,
) -> Controller<ConfigMap> {
    let selector = format!("ctrlkit-e2e-fairness={run}");
    Controller::builder(ListWatch::new(Api::<ConfigMap>::all(t.client.clone())).labels(&selector))
        .name(&format!("fairness-{run}"))
        .config(config.workers(WORKERS))
        .queue(queue)
        .build()
}

/// How many of the flood's keys were reconciled after the lone key was queued and before it,
/// with the flood fully queued (depth at least 1,900) behind two gated workers first.
async fn flood_keys_before_the_lone_one(t: &Target, quiet: &str, fair: bool) -> usize {
    let run = if fair { "fair" } else { "fifo" };
    let reconciler = Flooded::new(|_, _| false);
    reconciler.open.store(false, Ordering::SeqCst);
    let config = Config::default().fair_queue(fair);
    let controller = controller(t, run, config, WorkQueue::builder());
    let (stop, running) = run_controller(&controller, reconciler.clone());
    eventually("the controller synced", || controller.informer().has_synced()).await;
    let names = (0..FLOOD).map(|i| format!("{run}-{i:04}")).collect();
    create_configmaps(t, &t.ns, run, names).await;
    eventually_within(Duration::from_secs(120), "the flood queued", || {
        controller.queue().len() + WORKERS >= FLOOD
    })
    .await;
    assert!(controller.queue().len() >= 1900, "depth {}", controller.queue().len());
    create_configmaps(t, quiet, run, vec![format!("{run}-lone")]).await;
    eventually("the lone key queued", || controller.queue().len() + WORKERS > FLOOD).await;
    let before_lone = reconciler.keys().len();
    reconciler.open.store(true, Ordering::SeqCst);
    reconciler.gate.notify_waiters();
    let lone = format!("{quiet}/{run}-lone");
    eventually_within(Duration::from_secs(120), "the lone key reconciled", || {
        reconciler.keys().contains(&lone)
    })
    .await;
    let _ = stop.send(());
    let _ = running.await;
    let keys = reconciler.keys();
    let at = keys.iter().position(|k| *k == lone).unwrap();
    let before = keys[before_lone..at].len();
    eprintln!("fairness ({run}): {before} of the flood's keys before the lone one");
    before
}

async fn a_lone_namespaces_change_is_not_held_behind_a_floods_backlog(t: &Target) {
    let quiet = quiet_namespace(t).await;
    then_clean_up(
        async {
            let fair = flood_keys_before_the_lone_one(t, &quiet, true).await;
            assert!(fair <= 2 * WORKERS, "fair: {fair} of the flood's keys before the lone one");
            // The same with the queue FIFO, as client-go's: the whole flood goes first.
            let fifo = flood_keys_before_the_lone_one(t, &quiet, false).await;
            assert!(fifo >= 1900, "FIFO: {fifo} of the flood's keys before the lone one");
        },
        delete_namespace(t, &quiet),
    )
    .await;
}
case!(Needs::Protocol, a_lone_namespaces_change_is_not_held_behind_a_floods_backlog);

/// With the flood's keys all failing (each reconciled and failed once, so that its retries
/// have taken the bucket's burst and queued for its tokens), the lone key fails once: the time
/// from its failure to its retry, or `None` if it was not retried within `within`.
async fn lone_retry_wait(
    t: &Target,
    quiet: &str,
    fair: bool,
    within: Duration,
) -> Option<Duration> {
    let run = if fair { "fair-retry" } else { "fifo-retry" };
    let lone = format!("{run}-lone");
    let lone_key = lone.clone();
    let reconciler = Flooded::new(move |key, seen| key.name != lone_key || seen == 1);
    let queue = WorkQueue::builder().fair_retries(fair);
    let controller = controller(t, run, Config::default(), queue);
    let (stop, running) = run_controller(&controller, reconciler.clone());
    eventually("the controller synced", || controller.informer().has_synced()).await;
    let names = (0..FLOOD).map(|i| format!("{run}-{i:04}")).collect();
    create_configmaps(t, &t.ns, run, names).await;
    let flood_prefix = format!("{}/", t.ns);
    eventually_within(Duration::from_secs(120), "every flood key failed once", || {
        let keys = reconciler.keys();
        let flood: HashSet<&String> =
            keys.iter().filter(|k| k.starts_with(&flood_prefix)).collect();
        flood.len() >= FLOOD
    })
    .await;
    create_configmaps(t, quiet, run, vec![lone.clone()]).await;
    let key = format!("{quiet}/{lone}");
    eventually("the lone key reconciled", || !reconciler.times(&key).is_empty()).await;
    let failed_at = reconciler.times(&key)[0] + Duration::from_millis(5);
    let deadline = Instant::now() + within;
    while reconciler.times(&key).len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(());
    let _ = running.await;
    let wait = reconciler.times(&key).get(1).map(|at| at.saturating_duration_since(failed_at));
    eprintln!("fairness ({run}): the lone key retried after {wait:?}");
    wait
}

async fn a_lone_retry_is_not_held_behind_a_floods_reservations(t: &Target) {
    let quiet = quiet_namespace(t).await;
    then_clean_up(
        async {
            let budget = Duration::from_millis(5) + Duration::from_secs(1);
            let fair = lone_retry_wait(t, &quiet, true, Duration::from_secs(30)).await;
            assert!(fair.is_some_and(|w| w <= budget), "fair: retried after {fair:?}");
            // With the bucket reserved first come, first served (client-go's), the retry waits
            // behind the flood's reservations: minutes, not within the budget.
            let fifo = lone_retry_wait(t, &quiet, false, 3 * budget).await;
            assert!(fifo.is_none_or(|w| w > budget), "FIFO bucket: retried after {fifo:?}");
        },
        delete_namespace(t, &quiet),
    )
    .await;
}
case!(Needs::Protocol, a_lone_retry_is_not_held_behind_a_floods_reservations);
