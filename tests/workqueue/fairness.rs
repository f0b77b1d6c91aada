//! Fairness keys: a quiet tenant's item is not held behind a noisy tenant's backlog, at each
//! level of the key, through priorities, aging, retries and an in-flight cap.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlkit::workqueue::{
    FairnessKey, FairnessLevelStats, Priority, QueueMetrics, QueueMetricsProvider, WorkQueue,
    WorkQueueBuilder,
};
use futures::FutureExt;

/// Keys are "namespace/name": fair by the namespace.
#[allow(clippy::ptr_arg)] // the queue's items are `String`s
fn by_namespace(key: &String) -> FairnessKey {
    FairnessKey::new().level(key.split('/').next())
}

/// Keys are "cluster/namespace/name": fair by cluster, then namespace.
#[allow(clippy::ptr_arg)]
fn by_cluster_then_namespace(key: &String) -> FairnessKey {
    let mut parts = key.split('/');
    FairnessKey::new().level(parts.next()).level(parts.next())
}

fn get_now(q: &WorkQueue<String>) -> Option<String> {
    q.get().now_or_never().flatten()
}

/// How many of the flood's keys a worker takes before the lone key, with the flood queued
/// first.
fn flood_keys_before_the_lone_one(builder: WorkQueueBuilder<String>) -> usize {
    let q = builder.build();
    for i in 0..2000 {
        q.add(format!("noisy/cm-{i}"));
    }
    q.add("quiet/cm-0".to_owned());
    let mut before = 0;
    while let Some(key) = get_now(&q) {
        q.done(&key);
        if key == "quiet/cm-0" {
            return before;
        }
        before += 1;
    }
    panic!("the lone key never came out");
}

#[test]
fn a_lone_key_comes_after_at_most_one_of_a_flood_queued_before_it() {
    let fair = flood_keys_before_the_lone_one(WorkQueue::builder().fairness(by_namespace));
    assert!(fair <= 1, "fair: {fair} of the flood's keys first");
    let fifo = flood_keys_before_the_lone_one(WorkQueue::builder());
    assert_eq!(fifo, 2000, "FIFO: the whole flood first");
}

#[test]
fn a_cluster_with_many_namespaces_gets_no_more_turns_than_one_with_a_single_namespace() {
    let q = WorkQueue::builder().fairness(by_cluster_then_namespace).build();
    for ns in 0..500 {
        for i in 0..4 {
            q.add(format!("big/ns-{ns}/cm-{i}"));
        }
    }
    for i in 0..1000 {
        q.add(format!("small/only/cm-{i}"));
    }
    let mut big = 0;
    let mut namespaces = std::collections::HashSet::new();
    for _ in 0..1000 {
        let key = get_now(&q).unwrap();
        q.done(&key);
        if key.starts_with("big/") {
            big += 1;
            namespaces.insert(key.split('/').nth(1).unwrap().to_owned());
        }
    }
    assert_eq!(big, 500, "one in two turns goes to each cluster");
    assert_eq!(namespaces.len(), 500, "within the big cluster, each namespace once per round");
}

#[test]
fn a_re_add_of_a_queued_key_keeps_its_place_and_a_held_key_comes_back_in_its_flow() {
    let q = WorkQueue::builder().fairness(by_namespace).build();
    q.add("a/1".to_owned());
    q.add("a/2".to_owned());
    q.add("b/1".to_owned());
    for _ in 0..100 {
        q.add("a/1".to_owned()); // dedup first: no extra turn for a
    }
    assert_eq!(q.len(), 3);
    let first = get_now(&q).unwrap();
    assert_eq!(first, "a/1");
    q.add("a/1".to_owned()); // held: comes back after done, once
    assert_eq!(get_now(&q).as_deref(), Some("b/1"));
    q.done(&first);
    q.done(&"b/1".to_owned());
    assert_eq!(get_now(&q).as_deref(), Some("a/2"));
    assert_eq!(get_now(&q).as_deref(), Some("a/1"), "one worker at a time, back once");
    assert_eq!(get_now(&q), None);
}

#[test]
fn priorities_come_first_and_fairness_holds_within_each() {
    let q = WorkQueue::builder().fairness(by_namespace).aging(Duration::MAX).build();
    for i in 0..3 {
        q.add_with_priority(format!("noisy/low-{i}"), Priority::LOW);
        q.add_with_priority(format!("noisy/high-{i}"), Priority(10));
    }
    q.add_with_priority("quiet/low".to_owned(), Priority::LOW);
    q.add_with_priority("quiet/high".to_owned(), Priority(10));
    let order: Vec<String> = std::iter::from_fn(|| {
        let key = get_now(&q)?;
        q.done(&key);
        Some(key)
    })
    .collect();
    assert_eq!(
        order,
        [
            "noisy/high-0",
            "quiet/high",
            "noisy/high-1",
            "noisy/high-2",
            "noisy/low-0",
            "quiet/low",
            "noisy/low-1",
            "noisy/low-2"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn only_aged_items_are_promoted_and_served_fairly_among_themselves() {
    let q = WorkQueue::builder().fairness(by_namespace).aging(Duration::from_secs(60)).build();
    for i in 0..100 {
        q.add_with_priority(format!("noisy/old-{i}"), Priority::LOW);
    }
    q.add_with_priority("quiet/old".to_owned(), Priority::LOW);
    assert_eq!(q.len(), 101, "applied: their wait starts now");
    tokio::time::advance(Duration::from_secs(61)).await;
    q.add_with_priority("noisy/new".to_owned(), Priority::NORMAL);
    q.add_with_priority("quiet/young".to_owned(), Priority::LOW);
    // The aged low items have waited longer than the newer normal item: they go first, fairly.
    assert_eq!(q.get().await.as_deref(), Some("noisy/old-0"));
    assert_eq!(q.get().await.as_deref(), Some("quiet/old"), "fair among the aged");
    // Only the aged items were promoted: quiet/young, which did not age, comes after every
    // normal item, and after the aged ones.
    let rest: Vec<String> = std::iter::from_fn(|| get_now(&q)).collect();
    assert_eq!(rest.len(), 101);
    assert_eq!(rest[99], "noisy/new", "behind noisy's aged items");
    assert_eq!(rest[100], "quiet/young", "a low item that did not age waits for the normal one");
}

#[tokio::test(start_paused = true)]
async fn an_in_flight_cap_keeps_a_slow_group_from_holding_every_worker() {
    let q = WorkQueue::builder().fairness(by_namespace).max_in_flight_per_key(2).build();
    for i in 0..10 {
        q.add(format!("slow/{i}"));
    }
    let a = q.get().await.unwrap();
    let b = q.get().await.unwrap();
    assert_eq!(q.len(), 8);
    assert_eq!(q.len_available(), 0, "slow is at its cap");
    assert!(q.get().now_or_never().is_none(), "a third worker waits");
    q.add("fast/0".to_owned());
    assert_eq!(q.len_available(), 1);
    assert_eq!(q.get().await.as_deref(), Some("fast/0"), "another group's item goes");
    q.done(&a);
    assert_eq!(q.len_available(), 8, "slow is under its cap again");
    let c = q.get().await.unwrap();
    assert!(c.starts_with("slow/"));
    q.done(&b);
    q.done(&c);
}

/// When the lone key, failing once after 2,000 keys of another namespace failed, is handed
/// out again, counted from its failure.
async fn lone_retry_wait(builder: WorkQueueBuilder<String>) -> Duration {
    let q = builder.fairness(by_namespace).build();
    let noisy: Vec<String> = (0..2000).map(|i| format!("noisy/cm-{i}")).collect();
    for key in &noisy {
        q.add(key.clone());
    }
    for _ in &noisy {
        let key = q.get().await.unwrap();
        q.add_rate_limited(key.clone());
        q.done(&key);
    }
    q.add("quiet/cm-0".to_owned());
    let lone = q.get().await.unwrap();
    let failed_at = tokio::time::Instant::now();
    q.add_rate_limited(lone.clone());
    q.done(&lone);
    assert_eq!(q.num_requeues(&lone), 1);
    loop {
        let key = q.get().await.unwrap();
        q.forget(&key);
        q.done(&key);
        if key == lone {
            return failed_at.elapsed();
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_lone_retry_waits_its_own_backoff_not_the_floods_reservations() {
    let fair = lone_retry_wait(WorkQueue::builder()).await;
    assert!(fair <= Duration::from_millis(5) + Duration::from_secs(1), "{fair:?}");
    // With the bucket reserved first come, first served (client-go's), the lone retry waits
    // behind the flood's 1,900 reservations past the burst, at 10 qps.
    let fifo = lone_retry_wait(WorkQueue::builder().fair_retries(false)).await;
    assert!(fifo > Duration::from_secs(150), "{fifo:?}");
}

#[tokio::test(start_paused = true)]
async fn the_fair_bucket_keeps_the_default_limiters_total() {
    let q = WorkQueue::builder().fairness(by_namespace).build();
    let start = tokio::time::Instant::now();
    for i in 0..300 {
        let key = format!("ns-{}/cm-{i}", i % 7);
        q.add(key.clone());
        let key = q.get().await.unwrap();
        q.add_rate_limited(key.clone());
        q.done(&key);
    }
    // A retry of a quiet namespace after the 300: its line gets a token in turn.
    q.add_rate_limited("quiet/cm-0".to_owned());
    let mut quiet_at = None;
    for _ in 0..301 {
        let key = q.get().await.unwrap();
        if key.starts_with("quiet/") {
            quiet_at = Some(start.elapsed());
        }
        q.forget(&key);
        q.done(&key);
    }
    // 100 at once, then 10 a second: the last of 301 retries at 20.1 s.
    let took = start.elapsed();
    assert!(took >= Duration::from_secs(20) && took < Duration::from_secs(21), "{took:?}");
    // Handed out after one token per namespace, not behind the 200 retries before it.
    let quiet_at = quiet_at.expect("the quiet retry came out");
    assert!(quiet_at < Duration::from_secs(2), "fair allocation: {quiet_at:?}");
}

#[derive(Default)]
struct Levels(Mutex<Vec<(usize, FairnessLevelStats)>>);

impl QueueMetrics for Levels {
    fn depth(&self, _: Priority, _: i64) {}
    fn added(&self) {}
    fn queue_latency(&self, _: f64) {}
    fn work_duration(&self, _: f64) {}
    fn unfinished_work(&self, _: f64) {}
    fn longest_running_processor(&self, _: f64) {}
    fn retried(&self) {}
    fn fairness_level(&self, level: usize, stats: &FairnessLevelStats) {
        self.0.lock().unwrap().push((level, *stats));
    }
}

struct Provider(Arc<Levels>);

impl QueueMetricsProvider for Provider {
    fn new_queue_metrics(&self, _: &str) -> Arc<dyn QueueMetrics> {
        self.0.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn metrics_report_each_level_with_no_series_per_group() {
    let levels = Arc::new(Levels::default());
    let q = WorkQueue::builder()
        .fairness(by_cluster_then_namespace)
        .metrics(Arc::new(Provider(levels.clone())))
        .build();
    for ns in 0..50 {
        q.add(format!("a/ns-{ns}/cm"));
    }
    for i in 0..30 {
        q.add(format!("b/ns-0/cm-{i}"));
    }
    tokio::time::advance(Duration::from_secs(3)).await;
    q.update_unfinished_work();
    let seen = levels.0.lock().unwrap().clone();
    let level = |l: usize| seen.iter().rev().find(|(at, _)| *at == l).unwrap().1;
    assert_eq!(level(0).groups, 2, "two clusters");
    assert_eq!(level(0).deepest, 50, "cluster a holds 50 items");
    assert_eq!(level(1).groups, 51, "51 namespaces");
    assert_eq!(level(1).deepest, 30);
    assert!(level(1).longest_wait_seconds >= 3.0);
}

/// A queue capped at one item per namespace, with slow/0 held by a worker and slow/1 ready
/// behind the cap; and a `get` spawned after `before_get`, checked parked.
async fn a_get_waiting_behind_the_cap(
    before_get: impl FnOnce(&WorkQueue<String>),
) -> (WorkQueue<String>, String, tokio::task::JoinHandle<Option<String>>) {
    let q = WorkQueue::builder().fairness(by_namespace).max_in_flight_per_key(1).build();
    q.add("slow/0".to_owned());
    q.add("slow/1".to_owned());
    let held = q.get().await.unwrap();
    before_get(&q);
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished(), "slow/1 is ready but slow is at its cap: get waits");
    (q, held, waiter)
}

#[tokio::test(start_paused = true)]
async fn done_under_a_cap_wakes_a_get_waiting_for_that_groups_items() {
    let (q, held, waiter) = a_get_waiting_behind_the_cap(|_| {}).await;
    q.done(&held);
    let got = tokio::time::timeout(Duration::from_secs(60), waiter).await;
    assert_eq!(got.expect("done wakes the waiting get").unwrap().as_deref(), Some("slow/1"));
}

#[tokio::test(start_paused = true)]
async fn after_shut_down_a_capped_groups_ready_items_are_still_handed_out() {
    let (q, held, waiter) = a_get_waiting_behind_the_cap(|q| {
        q.shut_down();
        assert_eq!(q.len(), 1);
    })
    .await;
    q.done(&held);
    let got = tokio::time::timeout(Duration::from_secs(60), waiter).await;
    assert_eq!(got.expect("done wakes it").unwrap().as_deref(), Some("slow/1"));
    assert_eq!(q.get().await, None, "then None");
}

#[tokio::test(start_paused = true)]
async fn a_panicking_key_extractor_loses_no_add_and_is_counted() {
    let q = WorkQueue::builder()
        .fairness(|k: &String| {
            assert!(!k.starts_with("bad"), "no key for {k}");
            by_namespace(k)
        })
        .build();
    for k in ["a/1", "bad/1", "b/1", "bad/2"] {
        q.add(k.to_owned());
    }
    let mut got: Vec<String> = std::iter::from_fn(|| get_now(&q)).collect();
    got.sort();
    assert_eq!(got, ["a/1", "b/1", "bad/1", "bad/2"], "every add was queued");
    assert_eq!(q.fairness_key_panics(), 2);
    for k in &got {
        q.done(k);
    }
    q.add("a/2".to_owned());
    assert_eq!(get_now(&q).as_deref(), Some("a/2"), "the queue keeps working");
}

#[tokio::test(start_paused = true)]
async fn a_retry_re_added_while_waiting_for_a_token_waits_there_once() {
    let q = WorkQueue::builder().fairness(by_namespace).build();
    // 150 retries spend the burst of 100: 50 wait for tokens at 10 a second.
    for i in 0..150 {
        q.add_rate_limited(format!("noisy/cm-{i}"));
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    q.len();
    let quiet = "quiet/cm-0".to_owned();
    q.add_rate_limited(quiet.clone());
    tokio::time::sleep(Duration::from_millis(6)).await;
    q.len(); // past its 5 ms backoff: in its line at the bucket
    q.add_rate_limited(quiet.clone());
    tokio::time::sleep(Duration::from_millis(11)).await;
    q.len(); // past its 10 ms backoff: at the bucket again
    let mut handed_out = 0;
    while let Ok(Some(key)) = tokio::time::timeout(Duration::from_secs(30), q.get()).await {
        handed_out += usize::from(key == quiet);
        q.forget(&key);
        q.done(&key);
    }
    assert_eq!(handed_out, 1, "the re-added retry is deduplicated at the bucket");
}

/// A fair queue with the default limiter whose burst was spent (by 100 retries of another
/// namespace, handed out and done), and a quiet namespace's retry past its 5 ms backoff,
/// waiting for a token.
async fn a_retry_waiting_for_a_token() -> (WorkQueue<String>, String) {
    let q = WorkQueue::builder().fairness(by_namespace).build();
    for i in 0..100 {
        q.add_rate_limited(format!("noisy/cm-{i}"));
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    while let Some(key) = get_now(&q) {
        q.done(&key);
    }
    let quiet = "quiet/cm-0".to_owned();
    q.add_rate_limited(quiet.clone());
    tokio::time::sleep(Duration::from_millis(6)).await;
    assert_eq!(q.len(), 0, "past its 5 ms backoff, it waits for a token");
    (q, quiet)
}

#[tokio::test(start_paused = true)]
async fn an_add_after_merges_with_a_retry_waiting_for_a_token() {
    let (q, quiet) = a_retry_waiting_for_a_token().await;
    // A requeue-after of the same key, due before the token: one add, at the earlier time,
    // as client-go's waiting items keep the earlier of two.
    q.add_after(quiet.clone(), Duration::from_millis(10));
    tokio::time::sleep(Duration::from_millis(11)).await;
    assert_eq!(get_now(&q), Some(quiet.clone()));
    q.done(&quiet);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(get_now(&q), None, "the token's turn adds it no second time");
}

#[tokio::test(start_paused = true)]
async fn a_token_for_a_retry_merges_with_a_later_add_after() {
    let (q, quiet) = a_retry_waiting_for_a_token().await;
    // A requeue-after due long after the token: one add, at the token.
    q.add_after(quiet.clone(), Duration::from_secs(5));
    let got = tokio::time::timeout(Duration::from_secs(1), q.get()).await;
    assert_eq!(got, Ok(Some(quiet.clone())), "the token comes within a second");
    q.done(&quiet);
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(get_now(&q), None, "the requeue-after adds it no second time");
}

#[tokio::test(start_paused = true)]
async fn a_panicking_label_function_stops_no_refresh() {
    let levels = Arc::new(Levels::default());
    let q = WorkQueue::builder()
        .fairness(by_namespace)
        .fairness_labels(|_: &String, _| panic!("no label"))
        .metrics(Arc::new(Provider(levels.clone())))
        .build();
    q.add("a/1".to_owned());
    // User code run under the queue's lock at each refresh: its panic must not unwind out.
    q.update_unfinished_work();
    let seen = levels.0.lock().unwrap().clone();
    assert_eq!(seen.last().map(|(level, stats)| (*level, stats.groups)), Some((0, 1)));
    assert_eq!(get_now(&q).as_deref(), Some("a/1"), "the queue works on");
}
