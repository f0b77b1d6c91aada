//! The runner: every [`Case`] registered with [`case!`](crate::case) in the test binary, run
//! by libtest-mimic once per server it applies to, as `embedded::<module>::<case>` and
//! `real::<module>::<case>`, so that `cargo test -- real::` runs the real-server half and a
//! server that is not configured shows as ignored cases rather than as passes.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::{PoisonError, RwLock};

use futures::FutureExt;
use libtest_mimic::{Arguments, Trial};

use super::protobuf_diff;
use super::target::{AUDIT_LOG_ENV, ETCD_ENV, KUBECONFIG_ENV, Kind, Target, configure};
use crate::ApiServerBuilder;

/// A case's body: it gets its target and panics on failure.
pub type CaseFn = for<'a> fn(&'a Target) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What a case needs of a server beyond the protocol, which decides where it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Only the protocol: runs on both servers.
    Protocol,
    /// Compacting the server's history ([`Target::compact`]): on a real server, etcd access
    /// (`CTRLKIT_E2E_ETCD`). Runs alone on the real server.
    Compaction,
    /// The embedded server alone: its fault injection, or behaviour a real server lacks.
    Embedded,
    /// A real server's audit log (`CTRLKIT_E2E_AUDIT_LOG`): runs on the real server alone.
    AuditLog,
    /// Cluster-wide objects every write passes through (webhook configurations, a CRD's
    /// versions): both servers, but alone on the real one, since such a case changes what
    /// every other case's writes meet there.
    Webhooks,
}

/// One test case: an async function of a [`Target`], registered with
/// [`case!`](crate::case).
pub struct Case {
    /// The module path of the function, the test binary's crate name left out.
    module: &'static str,
    /// The function's name.
    function: &'static str,
    run: CaseFn,
    needs: Needs,
}

impl Case {
    /// A case; [`case!`](crate::case) makes them.
    #[doc(hidden)]
    pub const fn new(
        module: &'static str,
        function: &'static str,
        needs: Needs,
        run: CaseFn,
    ) -> Self {
        Case { module, function, run, needs }
    }

    /// `<module>::<function>`, the module path without the test binary's crate name.
    pub fn name(&self) -> String {
        match self.module.split_once("::") {
            Some((_, module)) => format!("{module}::{}", self.function),
            None => self.function.to_owned(),
        }
    }

    /// What the case needs of a server.
    pub fn needs(&self) -> Needs {
        self.needs
    }
}

inventory::collect!(Case);

/// Runs every registered case as the test binary's `main`, with libtest's arguments and
/// output (`--list`, filters, `--ignored`, `--test-threads`, `--exact`).
pub fn main() -> ExitCode {
    run_all()
}

/// As [`main`], each case's embedded server built with `configure` too, after the harness's
/// own settings: the resource types of a user's CRDs registered up front, a garbage
/// collector, users for RBAC cases. (A real server is what it is: a case that needs a CRD
/// there creates it through the API, which the embedded server serves as well.)
///
/// ```no_run
/// use ctrlkit_apiserver::ResourceType;
///
/// fn main() -> std::process::ExitCode {
///     ctrlkit_apiserver::harness::main_with(|server| {
///         server
///             .resource(ResourceType::new("example.com", "v1", "Stamp", "stamps", true))
///             .garbage_collector()
///     })
/// }
/// ```
pub fn main_with(configure_server: fn(ApiServerBuilder) -> ApiServerBuilder) -> ExitCode {
    configure(configure_server);
    run_all()
}

fn run_all() -> ExitCode {
    let mut cases: Vec<&Case> = inventory::iter::<Case>.into_iter().collect();
    cases.sort_by_cached_key(|case| case.name());
    let mut args = Arguments::from_args();
    // The cases wait on servers far more than they compute; 2 threads would serialise them.
    args.test_threads.get_or_insert(6);
    let real = std::env::var_os(KUBECONFIG_ENV).is_some();
    let etcd = std::env::var_os(ETCD_ENV).is_some();
    let audit = std::env::var_os(AUDIT_LOG_ENV).is_some();
    if !real && !args.list {
        println!(
            "real-server cases skipped (listed as ignored): {KUBECONFIG_ENV} does not name a \
             kubeconfig"
        );
    } else if !etcd && !args.list {
        println!("real-server cases that compact history skipped: {ETCD_ENV} is not set");
    }
    let mut trials = Vec::new();
    for case in cases {
        let kinds: &[Kind] = match case.needs {
            Needs::Embedded => &[Kind::Embedded],
            Needs::AuditLog => &[Kind::Real],
            _ => &[Kind::Embedded, Kind::Real],
        };
        let unmet = match case.needs {
            Needs::Compaction => !etcd,
            Needs::AuditLog => !audit,
            _ => false,
        };
        for &kind in kinds {
            let skip = kind == Kind::Real && (!real || unmet);
            let name = format!("{}::{}", kind.name(), case.name());
            let (run, needs) = (case.run, case.needs);
            let trial_name = name.clone();
            trials.push(
                Trial::test(name, move || {
                    run_case(kind, &trial_name, run, needs);
                    Ok(())
                })
                .with_ignored_flag(skip),
            );
        }
    }
    let conclusion = libtest_mimic::run(&args, trials);
    let ran = conclusion.num_passed + conclusion.num_failed > 0;
    protobuf_diff::finish(ran, conclusion.exit_code())
}

/// Compacting a real server's history expires the continue tokens and old versions of every
/// case running on it, so a compacting case runs alone (and so does a webhook case, which
/// changes what every case's writes pass through): it takes this lock to write, every other
/// real-server case to read. (The embedded server is one per case.)
static REAL_SERVER: RwLock<()> = RwLock::new(());

fn run_case(kind: Kind, name: &str, run: CaseFn, needs: Needs) {
    let _shared;
    let _exclusive;
    if kind == Kind::Real {
        if matches!(needs, Needs::Compaction | Needs::Webhooks) {
            _exclusive = REAL_SERVER.write().unwrap_or_else(PoisonError::into_inner);
        } else {
            _shared = REAL_SERVER.read().unwrap_or_else(PoisonError::into_inner);
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let mut target = Target::new(kind, name).await;
        // Faults injected into the embedded server count requests: its cases' clients stay
        // as they are.
        if needs != Needs::Embedded {
            target.client = protobuf_diff::diffing(target.client);
        }
        let outcome = AssertUnwindSafe(run(&target)).catch_unwind().await;
        target.cleanup().await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_is_named_by_its_module_path_without_the_crate() {
        fn run<'a>(_: &'a Target) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
            Box::pin(async {})
        }
        let nested = Case::new("apiserver::crud", "create", Needs::Protocol, run);
        assert_eq!(nested.name(), "crud::create");
        let top = Case::new("operator", "reconciles", Needs::Protocol, run);
        assert_eq!(top.name(), "reconciles");
    }
}
