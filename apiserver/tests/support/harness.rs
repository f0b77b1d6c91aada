//! A libtest-compatible runner (libtest-mimic) that lists each case once per server it
//! runs on, as `embedded::<module>::<case>` and `real::<module>::<case>`, so that
//! `cargo test -- real::` runs the real-server half and a missing server shows as ignored
//! cases rather than as passes.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::{PoisonError, RwLock};

use futures::FutureExt;
use libtest_mimic::{Arguments, Trial};

use super::target::{AUDIT_LOG_ENV, ETCD_ENV, KUBECONFIG_ENV, Kind, Target};

/// A case's body: it gets its target and panics on failure.
pub type CaseFn = for<'a> fn(&'a Target) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What a case needs of a server beyond the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Only the protocol: runs on both servers.
    Protocol,
    /// Compacting the server's history (`Target::compact`): on a real server, etcd access.
    Compaction,
    /// The embedded server alone: its fault injection, or behaviour the real server under
    /// test lacks (each such case says why).
    Embedded,
    /// A real server's audit log (`CTRLKIT_E2E_AUDIT_LOG`): runs on the real server alone.
    AuditLog,
    /// Webhooks that every write of a kind passes through, and a CRD's versions: both
    /// servers, but on the real one such a case changes what every other case's writes meet
    /// (cluster-wide objects), so it runs alone there, as a compacting case does.
    Webhooks,
}

/// One test case.
pub struct Case {
    pub name: String,
    pub run: CaseFn,
    pub needs: Needs,
}

/// Cases from async functions `async fn name(t: &Target)`:
/// `cases![Needs::Protocol; crud::create, #[cfg(feature = "webhook")] hooks::call]` (a case
/// of a module compiled only with a feature carries the module's `cfg`).
#[macro_export]
macro_rules! cases {
    ($needs:expr; $($(#[$meta:meta])* $($segment:ident)::+),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut cases = Vec::new();
        $(
            $(#[$meta])*
            cases.push({
                fn run<'a>(
                    t: &'a $crate::support::Target,
                ) -> ::std::pin::Pin<Box<dyn ::std::future::Future<Output = ()> + Send + 'a>> {
                    Box::pin($($segment)::+(t))
                }
                $crate::support::Case {
                    name: [$(stringify!($segment)),+].join("::"),
                    run,
                    needs: $needs,
                }
            });
        )*
        cases
    }};
}

/// Runs `cases` as a test binary's main, with libtest's arguments and output.
pub fn main(cases: Vec<Case>) -> ExitCode {
    let mut args = Arguments::from_args();
    // The cases wait on servers far more than they compute; 2 threads would serialise them.
    args.test_threads.get_or_insert(6);
    let real = std::env::var_os(KUBECONFIG_ENV).is_some();
    let etcd = std::env::var_os(ETCD_ENV).is_some();
    let audit = std::env::var_os(AUDIT_LOG_ENV).is_some();
    if !real && !args.list {
        println!(
            "real-server cases skipped (listed as ignored): {KUBECONFIG_ENV} is not set; \
             scripts/e2e.sh starts a kube-apiserver and runs them"
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
        for &kind in kinds {
            let unmet = match case.needs {
                Needs::Compaction => !etcd,
                Needs::AuditLog => !audit,
                _ => false,
            };
            let skip = kind == Kind::Real && (!real || unmet);
            let name = format!("{}::{}", kind.name(), case.name);
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
    libtest_mimic::run(&args, trials).exit_code()
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
        let target = Target::new(kind, name).await;
        let outcome = AssertUnwindSafe(run(&target)).catch_unwind().await;
        target.cleanup().await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}
