//! Leader election on a Lease: three candidates, one leader at every instant; failover when
//! the leader dies and when it stops gracefully; a leader cut off from the server steps down
//! before anyone takes over; two replicas with one hostname, each pid 1 of its own PID
//! namespace, elect one leader; the Lease deleted under the example's leader never makes
//! two leaders. Timings are scaled down from client-go's defaults (lease 1.2 s, renew
//! deadline 0.8 s, retry 0.2 s) so the cases stay short, but for the example's replicas,
//! which run with the defaults; the algorithm is the same.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlkit::leaderelection::{
    LeaderElectionConfig, LeaderElectionError, LeaderElector, LeaseLock,
};
use ctrlkit_apiserver::case;
use ctrlkit_apiserver::harness::{Needs, Target};
use k8s_openapi::api::coordination::v1::Lease;
use kube_client::api::{WatchEvent, WatchParams};
use kube_client::{Api, Client};

/// client-go's jitter factor, which ctrlkit's elector uses: a candidate retries between one
/// and 2.2 retry periods apart.
const JITTER_FACTOR: f64 = 1.2;
use tokio::time::Instant;

use super::common::*;
use crate::example::Example;

fn config() -> LeaderElectionConfig {
    let mut config = LeaderElectionConfig::default();
    config.lease_duration = Duration::from_millis(1200);
    config.renew_deadline = Duration::from_millis(800);
    config.retry_period = Duration::from_millis(200);
    config
}

/// The instants a candidate started leading, and stopped (`None`: leads still).
type Intervals = Arc<Mutex<Vec<(Instant, Option<Instant>)>>>;

/// One candidate: its elector, its run, and the instants it started and stopped leading.
struct Candidate {
    elector: LeaderElector,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    run: tokio::task::JoinHandle<Result<(), LeaderElectionError>>,
    intervals: Intervals,
}

impl Candidate {
    fn start(client: Client, ns: &str, identity: &str) -> Candidate {
        let lock = LeaseLock::new(client, ns, "election", identity);
        let elector = LeaderElector::new(lock, config()).expect("a valid config");
        let intervals: Intervals = Arc::default();
        let mut status = elector.status();
        let record = intervals.clone();
        tokio::spawn(async move {
            while status.changed().await.is_ok() {
                let leading = status.borrow_and_update().leading;
                let mut intervals = record.lock().unwrap();
                match (leading, intervals.last_mut()) {
                    (true, _) => intervals.push((Instant::now(), None)),
                    (false, Some((_, end @ None))) => *end = Some(Instant::now()),
                    _ => {}
                }
            }
        });
        let (stop, stopped) = shutdown();
        let run = {
            let elector = elector.clone();
            tokio::spawn(async move { elector.run(stopped).await })
        };
        Candidate { elector, stop: Some(stop), run, intervals }
    }

    fn leading(&self) -> bool {
        self.elector.is_leader()
    }

    /// Ends the candidate as a killed process ends: no release, its interval cut now.
    fn kill(&self) {
        self.run.abort();
        let mut intervals = self.intervals.lock().unwrap();
        if let Some((_, end @ None)) = intervals.last_mut() {
            *end = Some(Instant::now());
        }
    }

    fn intervals(&self) -> Vec<(Instant, Instant)> {
        let far = Instant::now() + Duration::from_secs(3600);
        self.intervals.lock().unwrap().iter().map(|&(s, e)| (s, e.unwrap_or(far))).collect()
    }
}

/// No two candidates' leading intervals overlap.
fn assert_one_leader_at_a_time(candidates: &[&Candidate]) {
    let all: Vec<(usize, Instant, Instant)> = candidates
        .iter()
        .enumerate()
        .flat_map(|(i, c)| c.intervals().into_iter().map(move |(s, e)| (i, s, e)))
        .collect();
    for (i, s1, e1) in &all {
        for (j, s2, e2) in &all {
            if i != j {
                assert!(e1 <= s2 || e2 <= s1, "candidates {i} and {j} led at once: {all:?}");
            }
        }
    }
}

fn refs(candidates: &[Candidate]) -> Vec<&Candidate> {
    candidates.iter().collect()
}

async fn wait_for_leader(candidates: &[&Candidate], limit: Duration) -> (usize, Duration) {
    let started = Instant::now();
    loop {
        if let Some(i) = candidates.iter().position(|c| c.leading()) {
            return (i, started.elapsed());
        }
        assert!(started.elapsed() < limit, "no leader within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every holder the Lease named, in the order its watch reported them, repeats folded.
fn record_holders(leases: Api<Lease>, from: String) -> Arc<Mutex<Vec<String>>> {
    let holders: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = holders.clone();
    tokio::spawn(async move {
        use futures::StreamExt;
        let params = WatchParams::default().fields("metadata.name=election");
        let mut stream = leases.watch(&params, &from).await.expect("a watch of the lease").boxed();
        while let Some(Ok(event)) = stream.next().await {
            if let WatchEvent::Added(lease) | WatchEvent::Modified(lease) = event {
                let holder = lease.spec.and_then(|s| s.holder_identity).unwrap_or_default();
                let mut holders = record.lock().unwrap();
                if holders.last() != Some(&holder) {
                    holders.push(holder);
                }
            }
        }
    });
    holders
}

async fn three_candidates_one_leader_and_failover_on_death_and_on_shutdown(t: &Target) {
    let leases: Api<Lease> = Api::namespaced(t.client.clone(), &t.ns);
    let from = leases.list(&Default::default()).await.unwrap().metadata.resource_version.unwrap();
    let history = record_holders(leases.clone(), from);
    let mut candidates: Vec<Candidate> =
        ["a", "b", "c"].iter().map(|id| Candidate::start(t.client.clone(), &t.ns, id)).collect();
    let (first, _) = wait_for_leader(&refs(&candidates), Duration::from_secs(10)).await;
    // Leadership is stable while the leader renews.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(candidates[first].leading(), "the first leader kept leading");
    assert_eq!(candidates.iter().filter(|c| c.leading()).count(), 1);

    // Killed: another leads once the lease expired, at its next jittered retry: the lease
    // duration and a retry, plus request time. The waits allow five times that, for a busy
    // machine; no one leading twice at once is the assertion (below), not the figure.
    let config = config();
    let failover = config.lease_duration + config.retry_period.mul_f64(1.0 + JITTER_FACTOR);
    candidates[first].kill();
    let others: Vec<&Candidate> =
        candidates.iter().enumerate().filter(|(i, _)| *i != first).map(|(_, c)| c).collect();
    let (second, after_kill) = wait_for_leader(&others, failover * 5).await;
    let second = candidates.iter().position(|c| std::ptr::eq(c, others[second])).unwrap();
    println!("failover after a kill: {after_kill:?} (lease and a retry: {failover:?})");

    // Stopped gracefully: it releases the lease; the third takes over at its next attempt.
    let before = Instant::now();
    candidates[second].stop.take().unwrap().send(()).unwrap();
    let third = 3 - first - second;
    let release = config.retry_period.mul_f64(1.0 + JITTER_FACTOR);
    while !candidates[third].leading() {
        assert!(before.elapsed() < failover * 5, "no takeover after a release");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("failover after a graceful stop: {:?} (a retry: {release:?})", before.elapsed());
    let run = &mut candidates[second].run;
    assert_eq!(run.await.unwrap(), Ok(()), "a graceful stop ends the run cleanly");
    assert_one_leader_at_a_time(&refs(&candidates));

    // The Lease as client-go would leave it: the third holds it, three transitions in all
    // (created by the first, taken by the second, released, taken by the third).
    let lease = leases.get("election").await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity.as_deref(), Some(["a", "b", "c"][third]));
    assert_eq!(lease.lease_transitions, Some(2));
    // 1.2 s, rounded up: followers wait out what the Lease says, so it never says less than
    // the leader's lease duration (client-go rounds down, to 1).
    assert_eq!(lease.lease_duration_seconds, Some(2));
    assert!(lease.acquire_time.is_some() && lease.renew_time.is_some());
    // The Lease's own history says the same: the first, the second, released, the third.
    let names = ["a", "b", "c"];
    let expected = [names[first], names[second], "", names[third]];
    eventually("the lease's watch caught up", || history.lock().unwrap().len() >= 4).await;
    assert_eq!(*history.lock().unwrap(), expected);
    let _ = candidates[third].stop.take().map(|s| s.send(()));
}
case!(Needs::Protocol, three_candidates_one_leader_and_failover_on_death_and_on_shutdown);

/// A leader whose requests hang steps down within the renew deadline (and a retry), before
/// its lease can expire for the others; another takes over after it.
async fn a_leader_cut_off_from_the_server_steps_down_before_its_lease_expires(t: &Target) {
    let (proxy, through_proxy, _) = t.through_proxy().await;
    let mut leader = Candidate::start(through_proxy, &t.ns, "cut-off");
    eventually("the first candidate leads", || leader.leading()).await;
    let follower = Candidate::start(t.client.clone(), &t.ns, "follower");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!follower.leading());
    let cut = Instant::now();
    proxy.close();
    eventually("the cut-off leader steps down", || !leader.leading()).await;
    // It steps down at its renew deadline (and a retry); that this comes before the follower
    // leads, whatever the machine's load, is what `assert_one_leader_at_a_time` checks.
    let config = config();
    println!(
        "stepped down after {:?} (renew deadline and a retry: {:?})",
        cut.elapsed(),
        config.renew_deadline + config.retry_period
    );
    eventually("the follower takes over", || follower.leading()).await;
    let result = (&mut leader.run).await.unwrap();
    assert!(matches!(result, Err(LeaderElectionError::Lost { .. })), "{result:?}");
    assert_one_leader_at_a_time(&[&leader, &follower]);
    let _ = leader.stop.take();
    proxy.open();
}
case!(Needs::Protocol, a_leader_cut_off_from_the_server_steps_down_before_its_lease_expires);

/// Two replicas as a Deployment or StatefulSet runs them: each the first process (pid 1) of
/// its own PID namespace, with the same `HOSTNAME` (a template's `spec.hostname`, or the
/// node's name). Their default identities must differ, or each takes the other's renewals
/// for its own and both lead.
async fn two_replicas_with_one_hostname_and_pid_1_elect_one_leader(t: &Target) {
    let launcher = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"];
    let args = ["--namespace", &t.ns, "--leader-elect"];
    let replica =
        || Example::start_in(t, "configmap_sets", &args, &launcher, &[("HOSTNAME", "web-0")]);
    let first = replica();
    eventually_within(Duration::from_secs(60), "the first replica leads", || first.leads()).await;
    let second = replica();
    let identity = |e: &Example| {
        let prefix = format!("Leader election on Lease {}/configmap-sets as ", t.ns);
        e.lines().iter().find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
    };
    eventually("the second replica campaigns", || identity(&second).is_some()).await;
    // The second reads the Lease at once and then every 2 to 4.4 s (the default retry
    // period, jittered): sharing the leader's identity, it would lead within that.
    tokio::time::sleep(Duration::from_secs(9)).await;
    let (a, b) = (identity(&first).unwrap(), identity(&second).unwrap());
    assert!(
        first.leads() && !second.leads(),
        "one leader: {a} printed {:?}\n{b} printed {:?}",
        first.lines(),
        second.lines()
    );
    assert!(a.starts_with("web-0_") && b.starts_with("web-0_"), "{a} and {b}");
    assert_ne!(a, b, "two replicas with one identity");
    let leases: Api<Lease> = Api::namespaced(t.client.clone(), &t.ns);
    let lease = leases.get("configmap-sets").await.unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity, Some(a));
    first.terminate().await;
    second.terminate().await;
}
case!(Needs::Protocol, two_replicas_with_one_hostname_and_pid_1_elect_one_leader);

/// Whether the example at `address` reports that it leads (`leader_election_master_status`
/// 1); a replica that stopped serving does not.
async fn reports_leading(address: std::net::SocketAddr) -> bool {
    let metrics = crate::support::http::get(address, "/metrics").await;
    metrics.is_some_and(|(_, text)| {
        text.contains("leader_election_master_status{name=\"configmap-sets\"} 1")
    })
}

/// The Lease deleted under the leader (`kubectl delete lease`, as a GitOps prune does), with
/// two replicas of the example: at no instant do both report that they lead. The leader
/// stops at its next renewal, which reads the Lease absent; the follower, which saw it held,
/// creates it a lease duration later and leads.
async fn a_lease_deleted_under_the_leader_never_makes_two_leaders(t: &Target) {
    use crate::support::http::free_address;
    let addresses = [free_address(), free_address()];
    let replicas: Vec<Example> = addresses
        .iter()
        .map(|addr| {
            let args =
                ["--namespace", &t.ns, "--leader-elect", "--metrics-addr", &addr.to_string()];
            Example::start(t, "configmap_sets", &args)
        })
        .collect();
    eventually_within(Duration::from_secs(60), "a leader", || replicas.iter().any(Example::leads))
        .await;
    let leader = replicas.iter().position(Example::leads).unwrap();
    let follower = 1 - leader;
    eventually_within(Duration::from_secs(30), "the follower serves its metrics", || {
        std::net::TcpStream::connect(addresses[follower]).is_ok()
    })
    .await;
    // The follower reads the Lease at once, then every 2 to 4.4 s: it has seen it held.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let leases: Api<Lease> = Api::namespaced(t.client.clone(), &t.ns);
    leases.delete("configmap-sets", &Default::default()).await.unwrap();
    let deleted = Instant::now();
    // Both replicas' metrics, every 100 ms, until the follower leads (a lease duration, 15 s,
    // and a jittered retry period after it read the Lease absent), 60 s at most.
    let mut both = Vec::new();
    loop {
        let (a, b) = tokio::join!(reports_leading(addresses[0]), reports_leading(addresses[1]));
        if a && b {
            both.push(deleted.elapsed());
        }
        if [a, b][follower] {
            break;
        }
        assert!(deleted.elapsed() < Duration::from_secs(60), "nobody led again within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(both.is_empty(), "both replicas led at once, at {both:?} after the delete");
    let took_over = deleted.elapsed();
    // It waited out the lease duration the Lease said (15 s) before it created it.
    assert!(
        took_over >= Duration::from_secs(15),
        "the follower led {took_over:?} after the delete"
    );
    drop(replicas);
}
case!(Needs::Protocol, a_lease_deleted_under_the_leader_never_makes_two_leaders);

/// The lease lock reads its Lease live as client-go's generated clients read built-in
/// kinds: protobuf first where the process's wire format (`CTRLKIT_WIRE_FORMAT`) is
/// protobuf, JSON otherwise. The follower decodes what the leader wrote, and the record it
/// read is the one a JSON read gives (its holder, renewed in the Lease).
async fn a_lease_lock_reads_its_lease_in_the_process_wire_format(t: &Target) {
    let (_proxy, recorded, log) = t.through_proxy().await;
    let mut leader = Candidate::start(recorded, &t.ns, "reader");
    eventually("the candidate leads", || leader.leading()).await;
    let follower = Candidate::start(t.client.clone(), &t.ns, "follower");
    let gets = || -> Vec<String> {
        let lease = format!("/namespaces/{}/leases/election", t.ns);
        log.accepts()
            .into_iter()
            .filter(|(r, _)| r.starts_with("GET ") && r.ends_with(&lease))
            .map(|(_, accept)| accept)
            .collect()
    };
    eventually("the leader renewed, reading its Lease", || gets().len() >= 3).await;
    let protobuf = ctrlkit::cache::WireFormat::default() == ctrlkit::cache::WireFormat::Protobuf;
    for accept in gets() {
        let asked_protobuf = accept.starts_with("application/vnd.kubernetes.protobuf,");
        assert_eq!(asked_protobuf, protobuf, "a get of the Lease asked {accept:?}");
    }
    // The follower decoded the held Lease: it names the leader, and never leads meanwhile.
    let seen = || follower.elector.status().borrow().leader.clone();
    eventually("the follower read the leader", || seen().as_deref() == Some("reader")).await;
    let leases: Api<Lease> = Api::namespaced(t.client.clone(), &t.ns);
    let spec = leases.get("election").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("reader"));
    assert!(leader.leading() && !follower.leading());
    let _ = leader.stop.take().map(|s| s.send(()));
}
case!(Needs::Protocol, a_lease_lock_reads_its_lease_in_the_process_wire_format);
