//! The seeded convergence harness (`tests/support/convergence.rs`), bounded: on the embedded
//! server with every fault it can inject, on a real kube-apiserver with cut, refused and held
//! connections and etcd compaction. `CTRLKIT_CONVERGENCE_SEEDS=7,8` replays chosen seeds.

use std::time::Duration;

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};

use crate::support::convergence::{self, Settings};

/// The seeds to run: the environment's, or fixed ones (so CI is repeatable).
fn seeds(default: &[u64]) -> Vec<u64> {
    match std::env::var("CTRLKIT_CONVERGENCE_SEEDS") {
        Ok(list) => list.split(',').map(|s| s.trim().parse().expect("a seed is a u64")).collect(),
        Err(_) => default.to_vec(),
    }
}

async fn seeded_mutations_under_faults_converge(t: &Target) {
    let (objects, mutations, default_seeds): (usize, usize, &[u64]) =
        if t.is_real() { (500, 6_000, &[1]) } else { (1_000, 20_000, &[1, 2, 3]) };
    for seed in seeds(default_seeds) {
        let settings = Settings {
            seed,
            objects,
            mutations,
            streams: 8,
            workers: 4,
            fault_every: 250,
            fail_percent: 10,
            panic_percent: 3,
            settle: Duration::from_secs(60),
        };
        let report = convergence::run(t, settings).await;
        println!(
            "seed {seed}: {} mutations in {:.1?}, converged {:.1?} later; {} reconciles ({} injected failures, {} injected panics), {} relists, faults {:?}",
            report.mutations,
            report.mutating,
            report.converging,
            report.reconciles,
            report.failures,
            report.panics,
            report.relists,
            report.faults,
        );
        report.assert_converged();
        assert!(report.reconciles > 0 && report.failures > 0 && report.panics > 0, "{report:?}");
        assert!(!report.faults.is_empty(), "faults fired: {report:?}");
    }
}
case!(Needs::Compaction, seeded_mutations_under_faults_converge);
