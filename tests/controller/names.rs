//! Controller names are unique in a manager: the call that adds a second controller of a name
//! (`complete`, `add_controller`, on the manager or through its handle) fails, the first runs
//! on; `Config::skip_name_validation` opts out; removing a controller through the handle frees
//! its name.

use ctrlkit::controller::Config;
use ctrlkit::manager::{HandleError, Manager};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::Api;

use super::common::*;

/// The name a refused add names, or a panic.
fn refused<T: std::fmt::Debug>(result: Result<T, HandleError>) -> String {
    match result {
        Err(HandleError::DuplicateName { name }) => name,
        other => panic!("expected a duplicate name, got {other:?}"),
    }
}

#[tokio::test]
async fn a_second_controller_of_one_name_is_refused_and_the_first_runs_on() {
    let server = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let mut manager = Manager::new(server.client());
    let first = Versions::default();
    manager.controller(cms.clone()).name("stamp").complete(first.clone()).expect("the first");
    let second = Versions::default();
    let err = manager.controller(cms.clone()).name("stamp").complete(second.clone()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "a controller named \"stamp\" is in the manager already: controller names must be \
         unique, so that their metrics, logs, events and Leases do not mix"
    );
    // A controller's default name is its kind's plural: two of one kind collide unnamed.
    manager.controller(cms.clone()).complete(Versions::default()).expect("configmaps");
    let built = manager.controller(cms.clone()).build();
    assert_eq!(refused(manager.add_controller(built, Versions::default())), "configmaps");

    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    create_configmap(&server, "a").await;
    eventually("the first controller reconciled", || first.keys_present() == ["default/a"]).await;
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
    assert_eq!(second.reconciles(), 0, "the refused one never ran");
}

#[tokio::test]
async fn skip_name_validation_takes_a_second_controller_of_one_name() {
    let server = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let mut manager = Manager::new(server.client());
    let (first, second) = (Versions::default(), Versions::default());
    manager.controller(cms.clone()).name("twin").complete(first.clone()).expect("the first");
    let skip = Config::default().skip_name_validation(true);
    manager
        .controller(cms.clone())
        .name("twin")
        .config(skip)
        .complete(second.clone())
        .expect("taken: it opted out");

    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    create_configmap(&server, "a").await;
    eventually("both reconciled", || {
        first.keys_present() == ["default/a"] && second.keys_present() == ["default/a"]
    })
    .await;
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
}

#[tokio::test]
async fn a_name_is_freed_when_its_controller_is_removed_through_the_handle() {
    let server = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let manager = Manager::new(server.client());
    let handle = manager.handle();
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));

    let id = handle.controller(cms.clone()).name("feature").complete(Versions::default());
    let id = id.expect("the first");
    let again = handle.controller(cms.clone()).name("feature").complete(Versions::default());
    assert_eq!(refused(again), "feature");
    let built = handle.controller(cms.clone()).name("feature").build();
    assert_eq!(refused(handle.add_controller(built, Versions::default())), "feature");

    handle.remove(id).await.expect("a graceful removal");
    let back = Versions::default();
    handle
        .controller(cms.clone())
        .name("feature")
        .complete(back.clone())
        .expect("the name is free once its controller is removed");
    create_configmap(&server, "a").await;
    eventually("the one added back reconciled", || back.keys_present() == ["default/a"]).await;
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
}

/// The exposition's sample lines that name `name` (a controller's or a queue's series).
#[cfg(feature = "metrics")]
fn series_of(registry: &ctrlkit::metrics::Registry, name: &str) -> Vec<String> {
    let label = format!("=\"{name}\"");
    let lines = registry.encode();
    lines.lines().filter(|l| !l.starts_with('#') && l.contains(&label)).map(str::to_owned).collect()
}

#[cfg(feature = "metrics")]
#[tokio::test]
async fn a_refused_duplicate_touches_none_of_the_firsts_series() {
    let server = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    for name in ["a", "b"] {
        create_configmap(&server, name).await;
    }
    let registry = ctrlkit::metrics::Registry::new();
    let manager = Manager::builder(server.client()).metrics(registry.clone()).build();
    let handle = manager.handle();
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    let first = Versions::default();
    handle.controller(cms.clone()).name("stamp").complete(first.clone()).expect("the first");
    eventually("the first reconciled both", || first.keys_present().len() == 2).await;
    let adds = |r: &ctrlkit::metrics::Registry| {
        series_of(r, "stamp").into_iter().find(|l| l.starts_with("workqueue_adds_total"))
    };
    eventually("the adds counted", || adds(&registry).is_some_and(|l| l.ends_with(" 2"))).await;
    let before = series_of(&registry, "stamp");

    // Its informer is running with two objects cached: a built duplicate would get them.
    let second = Versions::default();
    let again = handle.controller(cms.clone()).name("stamp").complete(second.clone());
    assert_eq!(refused(again), "stamp");
    assert_eq!(series_of(&registry, "stamp"), before, "the first's series as they were");
    // One more object, once the first has it: counted once, by the first alone.
    create_configmap(&server, "c").await;
    eventually("the first reconciled it", || first.keys_present().len() == 3).await;
    eventually("its add counted", || adds(&registry).is_some_and(|l| !l.ends_with(" 2"))).await;
    let adds = adds(&registry).unwrap();
    assert!(adds.ends_with(" 3"), "one add per object: {adds}");
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
    assert_eq!(second.reconciles(), 0);
}

#[cfg(feature = "metrics")]
#[tokio::test]
async fn a_controller_added_in_a_removed_ones_place_reports_its_own_series() {
    let server = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let registry = ctrlkit::metrics::Registry::new();
    let manager = Manager::builder(server.client()).metrics(registry.clone()).build();
    let handle = manager.handle();
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    let id = handle.controller(cms.clone()).name("feature").complete(Versions::default());
    create_configmap(&server, "a").await;
    let reconciled = |r: &ctrlkit::metrics::Registry| {
        series_of(r, "feature").iter().any(|l| {
            l.starts_with("controller_runtime_reconcile_total")
                && l.contains("success")
                && !l.ends_with(" 0")
        })
    };
    eventually("the first reconciled", || reconciled(&registry)).await;
    handle.remove(id.expect("the first")).await.expect("a graceful removal");
    assert_eq!(series_of(&registry, "feature"), Vec::<String>::new(), "its series forgotten");

    let back = Versions::default();
    handle.controller(cms.clone()).name("feature").complete(back.clone()).expect("free");
    eventually("the one added back reconciled", || back.keys_present() == ["default/a"]).await;
    eventually("and reported it", || reconciled(&registry)).await;
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
}
