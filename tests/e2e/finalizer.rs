//! The finalizer helper against a server: added before apply, cleanup on delete and then
//! removed, a failing cleanup keeps it, an object deleted before it was added is not blocked,
//! and a patch made from a stale cache cannot drop another finalizer.

use std::sync::{Arc, Mutex};

use ctrlkit::controller::Action;
use ctrlkit::finalizer::{Event, FinalizerError, finalizer};
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube_client::{Api, ResourceExt};
use serde_json::json;

const MINE: &str = "example.com/cleanup";

#[derive(Debug, thiserror::Error)]
#[error("cleanup refused")]
struct Refused;

/// Runs the helper once; returns what it asked of the user's function.
async fn run(
    api: &Api<ConfigMap>,
    cm: ConfigMap,
    fail_cleanup: bool,
) -> (Result<Action, FinalizerError<Refused>>, Vec<&'static str>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let record = asked.clone();
    let result = finalizer(api, MINE, Arc::new(cm), |event| async move {
        match event {
            Event::Apply(_) => record.lock().unwrap().push("apply"),
            Event::Cleanup(_) => {
                record.lock().unwrap().push("cleanup");
                if fail_cleanup {
                    return Err(Refused);
                }
            }
        }
        Ok(Action::done())
    })
    .await;
    let asked = asked.lock().unwrap().clone();
    (result, asked)
}

async fn create(api: &Api<ConfigMap>, name: &str, finalizers: &[&str]) -> ConfigMap {
    let cm = serde_json::from_value(json!({"metadata": {"name": name, "finalizers": finalizers}}))
        .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap()
}

async fn the_finalizer_is_added_before_apply_and_removed_after_cleanup(t: &Target) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let cm = create(&api, "a", &[]).await;
    let applied = Arc::new(Mutex::new(Vec::new()));
    let seen = applied.clone();
    let result = finalizer(&api, MINE, Arc::new(cm), |event| async move {
        if let Event::Apply(cm) = event {
            // Apply sees the object with the finalizer already on the server.
            seen.lock().unwrap().push(cm.finalizers().to_vec());
        }
        Ok::<_, Refused>(Action::done())
    })
    .await;
    assert!(result.is_ok());
    assert_eq!(*applied.lock().unwrap(), [vec![MINE.to_owned()]]);
    let cm = api.get("a").await.unwrap();
    assert_eq!(cm.finalizers(), [MINE]);
    let (result, asked) = run(&api, cm, false).await;
    assert!(result.is_ok());
    assert_eq!(asked, ["apply"]);

    api.delete("a", &DeleteParams::default()).await.unwrap();
    let deleting = api.get("a").await.expect("held by the finalizer");
    assert!(deleting.metadata.deletion_timestamp.is_some());
    let (result, asked) = run(&api, deleting, false).await;
    assert!(result.is_ok());
    assert_eq!(asked, ["cleanup"]);
    assert!(api.get_opt("a").await.unwrap().is_none(), "gone once the finalizer was removed");
}
case!(Needs::Protocol, the_finalizer_is_added_before_apply_and_removed_after_cleanup);

async fn a_failed_cleanup_keeps_the_finalizer_and_an_unfinalized_delete_is_not_blocked(t: &Target) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    create(&api, "b", &[MINE]).await;
    api.delete("b", &DeleteParams::default()).await.unwrap();
    let (result, asked) = run(&api, api.get("b").await.unwrap(), true).await;
    assert!(matches!(result, Err(FinalizerError::CleanupFailed(Refused))), "{result:?}");
    assert_eq!(asked, ["cleanup"]);
    assert_eq!(api.get("b").await.unwrap().finalizers(), [MINE], "kept for the retry");

    // Deleted before this controller's finalizer was added (another finalizer holds it):
    // the helper neither adds its own nor asks for cleanup.
    create(&api, "c", &["other.example.com/keep"]).await;
    api.delete("c", &DeleteParams::default()).await.unwrap();
    let (result, asked) = run(&api, api.get("c").await.unwrap(), false).await;
    assert!(result.is_ok() && asked.is_empty(), "{asked:?}");
    assert_eq!(api.get("c").await.unwrap().finalizers(), ["other.example.com/keep"]);
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    api.patch("c", &PatchParams::default(), &release).await.unwrap();
    assert!(api.get_opt("c").await.unwrap().is_none());
    let (result, _) = run(&api, api.get("b").await.unwrap(), false).await;
    assert!(result.is_ok());
}
case!(
    Needs::Protocol,
    a_failed_cleanup_keeps_the_finalizer_and_an_unfinalized_delete_is_not_blocked
);

/// A cache that missed another controller's finalizer cannot overwrite it: the add is a JSON
/// patch that tests the list first.
async fn a_stale_cache_cannot_drop_another_finalizer(t: &Target) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let stale = create(&api, "d", &[]).await;
    let theirs = Patch::Merge(json!({"metadata": {"finalizers": ["other.example.com/x"]}}));
    api.patch("d", &PatchParams::default(), &theirs).await.unwrap();
    let (result, _) = run(&api, stale, false).await;
    match result {
        Err(FinalizerError::AddFinalizer { source: kube_client::Error::Api(s), .. }) => {
            assert_eq!(s.code, 422, "{s:?}")
        }
        other => panic!("expected a refused patch, got {other:?}"),
    }
    assert_eq!(api.get("d").await.unwrap().finalizers(), ["other.example.com/x"]);
    let (result, asked) = run(&api, api.get("d").await.unwrap(), false).await;
    assert!(result.is_ok());
    assert_eq!(asked, ["apply"]);
    assert_eq!(api.get("d").await.unwrap().finalizers(), ["other.example.com/x", MINE]);
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    api.patch("d", &PatchParams::default(), &release).await.unwrap();
}
case!(Needs::Protocol, a_stale_cache_cannot_drop_another_finalizer);
