//! A `ManagedController` goes to the manager whose builder built it, once: a manager refuses
//! one of another manager (its informers would never run there) and one that has run
//! already (the manager could not start it), with an error at the add, and runs on.

use ctrlkit::manager::{HandleError, Manager};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::Api;

use super::common::*;

#[tokio::test]
async fn a_controller_of_another_manager_is_refused_by_this_manager() {
    let server = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let mut a = Manager::new(server.client());
    let mut b = Manager::new(server.client());

    let from_a = a.controller(cms.clone()).build();
    let err = b.add_controller(from_a, Versions::default()).unwrap_err();
    assert!(
        matches!(&err, HandleError::ForeignController { controller } if controller == "configmaps"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "controller \"configmaps\" was built by another manager's builder: it reads that \
         manager's informers, which this manager does not run; add it to the manager that \
         built it"
    );
    let (handle_a, handle_b) = (a.handle(), b.handle());
    let from_a = handle_a.controller(cms.clone()).name("through-handles").build();
    let err = handle_b.add_controller(from_a, Versions::default()).unwrap_err();
    assert!(matches!(err, HandleError::ForeignController { .. }), "{err:?}");

    // Refused before its name was claimed: b's own controller of that name is taken, and runs.
    let own = Versions::default();
    b.controller(cms.clone()).complete(own.clone()).expect("the name is free in b");
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(b.run_until(stopped));
    create_configmap(&server, "a").await;
    eventually("b's own controller reconciled", || own.keys_present() == ["default/a"]).await;
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop");
    drop(a);
}

#[tokio::test]
async fn a_controller_that_ran_is_refused_and_the_manager_runs_on() {
    let server = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let mut manager = Manager::new(server.client());
    let built = manager.controller(cms.clone()).name("ran").build();
    // A clone run by hand (stopped at once): the controller has had its one run.
    let by_hand = (*built).clone().run(Versions::default(), std::future::ready(())).await;
    assert!(by_hand.is_err(), "stopped before its caches synced: {by_hand:?}");

    let err = manager.add_controller(built, Versions::default()).unwrap_err();
    assert!(
        matches!(&err, HandleError::AlreadyRun { controller } if controller == "ran"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "controller \"ran\" has run already (a controller runs once): build a new one"
    );

    let fresh = Versions::default();
    manager.controller(cms.clone()).name("ran").complete(fresh.clone()).expect("the name is free");
    let (stop, stopped) = shutdown();
    let run = tokio::spawn(manager.run_until(stopped));
    create_configmap(&server, "a").await;
    eventually("the new controller reconciled", || fresh.keys_present() == ["default/a"]).await;
    stop.send(()).unwrap();
    run.await.unwrap().expect("a clean stop, not an AlreadyRun failure");
}
