//! A test harness for operators (feature `harness`): each case runs on a fresh embedded
//! server and, when `CTRLKIT_E2E_KUBECONFIG` names a kubeconfig, on that real server too, as
//! envtest's `UseExistingCluster` switches controller-runtime's tests. It is the harness
//! ctrlkit's own protocol and end-to-end suites run on, against kube-apiserver v1.36.2 and
//! v1.20.2 in CI.
//!
//! The contract:
//! - A case is `async fn name(t: &Target)` that panics on failure, registered beside its
//!   definition with [`case!`](crate::case) and a [`Needs`], which decides on which servers
//!   it runs. There is no list of cases to keep: [`main`] runs every registered one.
//! - Each case gets a [`Target`]: a client, a namespace made for it (deleted afterwards), a
//!   kubeconfig file for processes and kubectl, and a scratch directory. On the embedded server
//!   the case is alone (one server per case); a real server is shared by every case of the run,
//!   so a case works in its namespace and never assumes it is alone there.
//! - Each case is listed once per server, as `embedded::<module>::<case>` and
//!   `real::<module>::<case>`; without a real server the `real::` half is listed as ignored,
//!   with a line that says why, so a run never passes what it did not run.
//! - With `CTRLKIT_PROTOBUF_DIFF=1`, every built-in object a case writes through its
//!   `Target::client` is read back as protobuf and as JSON, and the case fails when the two
//!   decode differently (see [`protobuf_diff`]; cases that need the embedded server alone
//!   are left out, since their faults count requests).
//!
//! A test binary of a user's crate (`tests/operator.rs`, with `harness = false` in its
//! `[[test]]` section and `ctrlkit-apiserver = { version = "0.1", features = ["harness"] }`
//! among its dev-dependencies):
//!
//! ```no_run
//! use ctrlkit_apiserver::harness::{self, Needs, Target};
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube_client::{Api, api::PostParams};
//!
//! async fn a_configmap_is_created_and_read_back(t: &Target) {
//!     let configmaps: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
//!     let cm = serde_json::from_value(serde_json::json!({
//!         "metadata": { "name": "settings" }, "data": { "mode": "fast" }
//!     })).unwrap();
//!     configmaps.create(&PostParams::default(), &cm).await.unwrap();
//!     let read = configmaps.get("settings").await.unwrap();
//!     assert_eq!(read.data.unwrap()["mode"], "fast");
//! }
//! ctrlkit_apiserver::case!(Needs::Protocol, a_configmap_is_created_and_read_back);
//!
//! fn main() -> std::process::ExitCode {
//!     harness::main()
//! }
//! ```
//!
//! [`main_with`] builds each case's embedded server with more (a user's kinds, a garbage
//! collector, users besides the admin, each with its [`embedded_token`]); without it a case's
//! server is a plain [`ApiServer::builder()`](crate::ApiServer::builder).
//! [`Target::custom_resource`] defines a kind by a CRD where a server does not serve it yet. `cargo test` runs it on the embedded server; with
//! `CTRLKIT_E2E_KUBECONFIG=/path/to/kubeconfig cargo test`, on that server too.

pub mod protobuf_diff;
mod proxy;
mod raw;
mod requests;
mod run;
mod target;

#[doc(hidden)]
pub use inventory;

pub use proxy::Proxy;
pub use raw::RawResponse;
pub use requests::{RequestLog, in_process_recording_client, recording_client};
pub use run::{Case, CaseFn, Needs, main, main_with};
pub use target::{
    AUDIT_LOG_ENV, ETCD_ENV, ETCDCTL_ENV, KUBECONFIG_ENV, KUBECTL_POD, ServerVersion, TOKENS_ENV,
    Target, config_from, embedded_token,
};

/// Registers `async fn name(t: &Target)` as a case of this test binary, run by
/// [`harness::main`](crate::harness::main) on the servers its [`Needs`] allow. Write it
/// beside the function; a case in a module compiled only with a feature goes with the module.
///
/// ```
/// use ctrlkit_apiserver::harness::{Needs, Target};
///
/// async fn namespaces_are_listed(t: &Target) {
///     let namespaces: kube_client::Api<k8s_openapi::api::core::v1::Namespace> =
///         kube_client::Api::all(t.client.clone());
///     let names: Vec<_> = namespaces.list(&Default::default()).await.unwrap()
///         .items.into_iter().filter_map(|n| n.metadata.name).collect();
///     assert!(names.contains(&t.ns), "the case's namespace is listed");
/// }
/// ctrlkit_apiserver::case!(Needs::Protocol, namespaces_are_listed);
/// ```
#[macro_export]
macro_rules! case {
    ($needs:expr, $function:ident) => {
        const _: () = {
            fn run<'a>(
                t: &'a $crate::harness::Target,
            ) -> ::std::pin::Pin<Box<dyn ::std::future::Future<Output = ()> + Send + 'a>> {
                Box::pin($function(t))
            }
            $crate::harness::inventory::submit! {
                $crate::harness::Case::new(module_path!(), stringify!($function), $needs, run)
            }
        };
    };
}
