//! The chaos harness for leader election and rings (`tests/support/chaos.rs`), bounded: three
//! replicas as processes in each mode, killed, stopped, joined, frozen past their lease
//! duration and cut off, on the embedded server and a real one. `CTRLKIT_CHAOS_SEEDS=7,8`
//! replays chosen seeds; `CTRLKIT_CHAOS_SECONDS=300` runs the schedule longer;
//! `CTRLKIT_CHAOS_EVENTS=roll,join` draws only those events, and
//! `CTRLKIT_CHAOS_LONG_PERCENT=30` makes that many reconciles outlast a lease duration.

use std::time::Duration;

use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};

use crate::support::chaos::{self, Mode, Settings};

/// A list of numbers from the environment, or `default`.
fn from_env(name: &str, default: &[u64]) -> Vec<u64> {
    match std::env::var(name) {
        Ok(list) => list.split(',').map(|s| s.trim().parse().expect("a number")).collect(),
        Err(_) => default.to_vec(),
    }
}

async fn chaos(t: &Target, mode: Mode) {
    let seconds = from_env("CTRLKIT_CHAOS_SECONDS", &[12])[0];
    for seed in from_env("CTRLKIT_CHAOS_SEEDS", &[1]) {
        let settings = Settings {
            mode,
            seed,
            replicas: 3,
            max_replicas: 5,
            objects: 24,
            chaos: Duration::from_secs(seconds),
            every: Duration::from_millis(1200),
            write_every: Duration::from_millis(20),
            // Leases of 2 s (renewed within 1.2 s, tried every 0.3 s): short, so that a
            // pause or a cut outlasts one soon.
            lease_ms: (2000, 1200, 300),
            long_percent: from_env("CTRLKIT_CHAOS_LONG_PERCENT", &[3])[0],
            events: std::env::var("CTRLKIT_CHAOS_EVENTS")
                .unwrap_or_else(|_| "kill,stop,join,pause,cut,roll".into())
                .split(',')
                .map(|e| e.trim().to_owned())
                .collect(),
            settle: Duration::from_secs(60),
        };
        let report = chaos::run(t, settings).await;
        println!(
            "{mode:?} seed {seed}: {} replicas, {} reconciles, {} writes ({} conflicts), {} mutations; {} kills, {} stops, {} joins, {} rolls, {} pauses, {} cuts, {} exits; {} reconciles frozen across a pause, {} reported; converged {:.1?} after; violations: {}",
            report.replicas,
            report.reconciles,
            report.writes,
            report.conflicts,
            report.mutations,
            report.kills,
            report.stops,
            report.joins,
            report.rolls,
            report.pauses,
            report.cuts,
            report.exits,
            report.frozen,
            report.reported,
            report.converging,
            report.violations.len(),
        );
        report.assert_clean();
        assert!(report.reconciles > 0 && report.writes > 0, "{report:?}");
    }
}

async fn a_leader_elected_replica_set_under_chaos_never_reconciles_without_the_lease(t: &Target) {
    chaos(t, Mode::Leader).await;
}
case!(Needs::Protocol, a_leader_elected_replica_set_under_chaos_never_reconciles_without_the_lease);

async fn a_ring_of_labels_under_chaos_never_reconciles_a_key_twice_at_once(t: &Target) {
    chaos(t, Mode::Labels).await;
}
case!(Needs::Protocol, a_ring_of_labels_under_chaos_never_reconciles_a_key_twice_at_once);

async fn a_ring_of_shard_selectors_under_chaos_never_reconciles_a_key_twice_at_once(t: &Target) {
    chaos(t, Mode::Selectors).await;
}
case!(Needs::Protocol, a_ring_of_shard_selectors_under_chaos_never_reconciles_a_key_twice_at_once);
