//! Priorities and aging in the workqueue, on tokio's paused clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlkit::workqueue::{
    ItemFastSlowRateLimiter, Priority, QueueMetrics, QueueMetricsProvider, WorkQueue,
};
use futures::FutureExt;
use tokio::time::{Instant, advance};

const LOW: Priority = Priority::LOW;
const NORMAL: Priority = Priority::NORMAL;
const HIGH: Priority = Priority(10);

fn queue(aging: Duration) -> WorkQueue<&'static str> {
    WorkQueue::builder()
        .rate_limiter(ItemFastSlowRateLimiter::new(Duration::ZERO, Duration::ZERO, 0))
        .aging(aging)
        .build()
}

/// Takes everything ready, marking each done.
fn drain(q: &WorkQueue<&'static str>) -> Vec<(&'static str, Priority)> {
    let mut out = Vec::new();
    while let Some(Some((item, priority))) = q.get_with_priority().now_or_never() {
        q.done(&item);
        out.push((item, priority));
    }
    out
}

#[tokio::test(start_paused = true)]
async fn higher_priorities_come_first_and_each_priority_is_fifo() {
    let q = queue(Duration::from_secs(300));
    q.add_with_priority("low-1", LOW);
    q.add("normal-1");
    q.add_with_priority("high-1", HIGH);
    q.add_with_priority("low-2", LOW);
    q.add("normal-2");
    q.add_with_priority("high-2", HIGH);
    let order: Vec<_> = drain(&q).into_iter().map(|(item, _)| item).collect();
    assert_eq!(order, ["high-1", "high-2", "normal-1", "normal-2", "low-1", "low-2"]);
}

#[tokio::test(start_paused = true)]
async fn an_item_added_twice_keeps_its_highest_priority_and_moves_up_once() {
    let q = queue(Duration::from_secs(300));
    q.add_with_priority("a", LOW);
    q.add_with_priority("b", LOW);
    q.add("c");
    q.add_with_priority("b", HIGH);
    q.add_with_priority("b", LOW);
    assert_eq!(q.len(), 3, "still three items: a raise is not a second copy");
    assert_eq!(drain(&q), [("b", HIGH), ("c", NORMAL), ("a", LOW)]);
}

#[tokio::test(start_paused = true)]
async fn a_held_item_comes_back_at_the_highest_priority_it_was_added_at_meanwhile() {
    let q = queue(Duration::from_secs(300));
    q.add_with_priority("a", LOW);
    let held = q.get().await.unwrap();
    q.add_with_priority("a", LOW);
    q.add_with_priority("a", HIGH);
    q.add("b");
    assert_eq!(q.len(), 1, "the held item is not ready");
    q.done(&held);
    assert_eq!(drain(&q), [("a", HIGH), ("b", NORMAL)]);
}

#[tokio::test(start_paused = true)]
async fn add_after_keeps_the_earliest_deadline_and_the_highest_priority() {
    let q = queue(Duration::from_secs(300));
    q.add_after_with_priority("a", Duration::from_secs(10), LOW);
    q.add_after_with_priority("a", Duration::from_secs(20), HIGH);
    q.add_after_with_priority("b", Duration::from_secs(5), NORMAL);
    advance(Duration::from_secs(9)).await;
    assert_eq!(drain(&q), [("b", NORMAL)], "a waits for its earlier deadline, 10 s");
    advance(Duration::from_secs(1)).await;
    assert_eq!(drain(&q), [("a", HIGH)], "once, at the priority it was raised to");
    advance(Duration::from_secs(30)).await;
    assert!(drain(&q).is_empty(), "the later deadline does not fire a second time");
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_retry_keeps_the_priority_it_is_given() {
    let q = queue(Duration::from_secs(300));
    q.add_rate_limited_with_priority("retry", LOW);
    q.add("fresh");
    advance(Duration::from_millis(1)).await;
    assert_eq!(drain(&q), [("fresh", NORMAL), ("retry", LOW)]);
}

/// A worker busy with a constant stream of new high-priority items, one taken and done every
/// `step`, two added every `step`: the queue never runs dry of them. Returns when `low` was
/// handed out, if it was within `limit`.
async fn serve_under_a_stream(q: &WorkQueue<&'static str>, limit: Duration) -> Option<Duration> {
    let names: Vec<&'static str> =
        (0..10_000).map(|i| &*Box::leak(format!("high-{i}").into_boxed_str())).collect();
    let mut names = names.into_iter();
    let start = Instant::now();
    let step = Duration::from_secs(1);
    q.add_with_priority(names.next().unwrap(), HIGH);
    q.add_with_priority("low", LOW);
    while start.elapsed() < limit {
        q.add_with_priority(names.next().unwrap(), HIGH);
        q.add_with_priority(names.next().unwrap(), HIGH);
        let (item, _) = q.get_with_priority().await.unwrap();
        if item == "low" {
            return Some(start.elapsed());
        }
        advance(step).await;
        q.done(&item);
    }
    None
}

#[tokio::test(start_paused = true)]
async fn aging_bounds_the_wait_of_a_low_priority_item_under_a_constant_high_priority_stream() {
    let aging = Duration::from_secs(60);
    // Without aging (strict priorities, as controller-runtime's queue) the low item starves.
    let strict = queue(Duration::MAX);
    assert_eq!(serve_under_a_stream(&strict, Duration::from_secs(600)).await, None);
    // With it, the low item is served once it has waited the aging period: ahead of every
    // high item added after it, though more of them keep coming.
    let aged = queue(aging);
    let served = serve_under_a_stream(&aged, Duration::from_secs(600)).await;
    let served = served.expect("the low item is served");
    assert!(served >= aging, "not before it aged: {served:?}");
    assert!(served <= aging + Duration::from_secs(1), "within one item of aging: {served:?}");
}

#[tokio::test(start_paused = true)]
async fn an_aged_item_goes_before_newer_higher_ones_but_not_before_older_ones() {
    let q = queue(Duration::from_secs(60));
    // `len` after each add stands for the workers' gets and dones: each takes the queue's lock,
    // which ends a batch of buffered adds (a batch's adds count as made at its first).
    q.add_with_priority("old-high", HIGH);
    q.len();
    advance(Duration::from_secs(1)).await;
    q.add_with_priority("low", LOW);
    q.len();
    advance(Duration::from_secs(1)).await;
    q.add_with_priority("new-high", HIGH);
    q.len();
    advance(Duration::from_secs(120)).await;
    // All three have aged: the oldest first, whatever its priority, then by age.
    assert_eq!(drain(&q), [("old-high", HIGH), ("low", LOW), ("new-high", HIGH)]);
}

/// The depth a queue reports, by priority and in all (`"total"`).
#[derive(Default)]
struct Depths(Mutex<HashMap<String, i64>>);

impl Depths {
    fn get(&self, label: &str) -> i64 {
        self.0.lock().unwrap().get(label).copied().unwrap_or(0)
    }
}

/// One queue's view of the depths.
struct DepthsOf(Arc<Depths>);

impl QueueMetrics for DepthsOf {
    fn depth(&self, priority: Priority, delta: i64) {
        let mut depths = self.0.0.lock().unwrap();
        *depths.entry(priority.to_string()).or_default() += delta;
        *depths.entry("total".into()).or_default() += delta;
    }
    fn added(&self) {}
    fn queue_latency(&self, _: f64) {}
    fn work_duration(&self, _: f64) {}
    fn unfinished_work(&self, _: f64) {}
    fn longest_running_processor(&self, _: f64) {}
    fn retried(&self) {}
}

impl QueueMetricsProvider for DepthsOf {
    fn new_queue_metrics(&self, _: &str) -> Arc<dyn QueueMetrics> {
        Arc::new(DepthsOf(self.0.clone()))
    }
}

#[tokio::test(start_paused = true)]
async fn depth_is_reported_per_priority_and_follows_raises() {
    let depths = Arc::new(Depths::default());
    let q: WorkQueue<&str> =
        WorkQueue::builder().metrics(Arc::new(DepthsOf(depths.clone()))).build();
    q.add_with_priority("a", LOW);
    q.add_with_priority("b", LOW);
    q.add("c");
    assert_eq!(q.len(), 3);
    assert_eq!((depths.get("-100"), depths.get("0"), depths.get("total")), (2, 1, 3));
    q.add("a");
    assert_eq!(q.len(), 3);
    assert_eq!((depths.get("-100"), depths.get("0"), depths.get("total")), (1, 2, 3), "a moved up");
    let first = q.get().await.unwrap();
    assert_eq!(first, "c");
    assert_eq!((depths.get("-100"), depths.get("0"), depths.get("total")), (1, 1, 2));
    q.shut_down();
}
