//! The soak of the convergence harness (`tests/support/convergence.rs`): by default 100,000
//! ConfigMaps and 1,000,000 random mutations on the embedded API server, with every fault it
//! can inject about every 2,000 mutations and the reconciler failing or panicking at random,
//! then the harness's proof of convergence. Not a criterion bench: one long run, its figures.
//!
//! `cargo bench --bench soak --features testing [-- OBJECTS MUTATIONS SEED]`
//!
//! Prints mutations per second (the writers', while the controller keeps up), the time to
//! converge after the last one, reconciles, injected failures and panics, relists, faults by
//! kind, the process's peak RSS (server, writers and controller together: one process), and
//! the lost updates (objects whose last reconcile missed their final state), which must be 0.

use std::time::Duration;

#[path = "../tests/support/mod.rs"]
#[allow(unused_imports)]
mod test_support;

#[allow(dead_code)] // the pod fixtures serve the other benches
#[path = "../apiserver/benches/support/mod.rs"]
mod support;
use ctrlkit_apiserver::harness::Target;
use support::status_kib;
use test_support::convergence::{self, Settings};

fn peak_rss_mib() -> f64 {
    status_kib("VmHWM:") as f64 / 1024.0
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let arg = |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let settings = Settings {
        seed: arg(2, 1),
        objects: arg(0, 100_000) as usize,
        mutations: arg(1, 1_000_000) as usize,
        streams: 16,
        workers: 4,
        fault_every: 2_000,
        fail_percent: 10,
        panic_percent: 3,
        settle: Duration::from_secs(600),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let report = runtime.block_on(async {
        let target = Target::start_embedded("soak").await;
        let report = convergence::run(&target, settings.clone()).await;
        target.cleanup().await;
        report
    });
    let seconds = report.mutating.as_secs_f64();
    println!("soak: {} objects, seed {}", settings.objects, report.seed);
    println!(
        "  mutations        {} in {seconds:.1} s: {:.0} /s",
        report.mutations,
        report.mutations as f64 / seconds
    );
    println!("  converged        {:.2?} after the last mutation", report.converging);
    println!(
        "  reconciles       {} ({} injected failures, {} injected panics)",
        report.reconciles, report.failures, report.panics
    );
    println!("  relists          {}", report.relists);
    println!("  faults           {} {:?}", report.faults.values().sum::<usize>(), report.faults);
    println!(
        "  peak RSS         {:.0} MiB (server, writers and controller in one process)",
        peak_rss_mib()
    );
    println!("  overlaps         {}", report.overlaps);
    println!("  lost updates     {}", report.lost.len());
    println!("  store differs    {}", report.store_differs.len());
    report.assert_converged();
}
