//! The workqueue contract, one test per rule, on tokio's paused clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ctrlkit::workqueue::{
    BucketRateLimiter, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
    MaxOfRateLimiter, Priority, QueueMetrics, QueueMetricsProvider, RateLimiter, WorkQueue,
    default_controller_rate_limiter,
};
use tokio::time::{Instant, advance, sleep, timeout};

fn key(i: usize) -> String {
    format!("default/pod-{i}")
}

/// Lets spawned tasks run until they block, without moving the paused clock much.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// A queue whose rate limiter never waits, for tests that look at the queue alone.
fn plain_queue() -> WorkQueue<String> {
    WorkQueue::builder()
        .rate_limiter(ItemFastSlowRateLimiter::new(Duration::ZERO, Duration::ZERO, 0))
        .build()
}

#[tokio::test(start_paused = true)]
async fn fair_items_come_out_in_the_order_they_went_in() {
    let q = plain_queue();
    for i in 0..100 {
        q.add(key(i));
    }
    assert_eq!(q.len(), 100);
    for i in 0..100 {
        let item = q.get().await.unwrap();
        assert_eq!(item, key(i));
        q.done(&item);
    }
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn stingy_many_adds_before_get_hand_out_once() {
    let q = plain_queue();
    for _ in 0..10 {
        q.add(key(1));
        q.add(key(2));
    }
    assert_eq!(q.len(), 2);
    let a = q.get().await.unwrap();
    let b = q.get().await.unwrap();
    assert_eq!((a.as_str(), b.as_str()), ("default/pod-1", "default/pod-2"));
    assert!(q.is_empty());
    q.shut_down();
    assert_eq!(q.get().await, None, "no duplicate was queued");
}

#[tokio::test(start_paused = true)]
async fn stingy_an_item_added_while_held_comes_back_after_done_and_not_before() {
    let q = plain_queue();
    q.add(key(1));
    let held = q.get().await.unwrap();
    q.add(key(1));
    q.add(key(1));
    assert_eq!(q.len(), 0, "a held item is not handed out again");
    // A second worker waits: it must not get the held item.
    let q2 = q.clone();
    let second = tokio::spawn(async move { q2.get().await });
    settle().await;
    assert!(!second.is_finished(), "the second worker got a held item");
    q.done(&held);
    let again = timeout(Duration::from_secs(1), second).await.unwrap().unwrap();
    assert_eq!(again, Some(key(1)));
    assert_eq!(q.len(), 0, "handed out once, not once per add");
}

#[tokio::test(start_paused = true)]
async fn get_waits_for_an_add_and_wakes_every_waiter_at_shut_down() {
    let q = plain_queue();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        })
        .collect();
    settle().await;
    assert!(waiters.iter().all(|w| !w.is_finished()), "get returned with nothing queued");
    q.add(key(7));
    settle().await;
    let finished: Vec<_> = waiters.iter().filter(|w| w.is_finished()).collect();
    assert_eq!(finished.len(), 1, "one add wakes one waiter");
    q.shut_down();
    let mut got = Vec::new();
    for w in waiters {
        got.push(timeout(Duration::from_secs(1), w).await.unwrap().unwrap());
    }
    got.sort();
    assert_eq!(got, vec![None, None, Some(key(7))]);
}

#[tokio::test(start_paused = true)]
async fn after_shut_down_queued_items_are_still_handed_out_then_none() {
    let q = plain_queue();
    q.add(key(1));
    q.add(key(2));
    q.shut_down();
    assert!(q.is_shutting_down());
    q.add(key(3));
    assert_eq!(q.len(), 2, "an add after shut down is dropped");
    assert_eq!(q.get().await, Some(key(1)));
    assert_eq!(q.get().await, Some(key(2)));
    assert_eq!(q.get().await, None);
    assert_eq!(q.get().await, None, "every later caller gets None too");
}

#[tokio::test(start_paused = true)]
async fn shut_down_with_drain_waits_for_every_item_handed_out() {
    let q = plain_queue();
    q.add(key(1));
    q.add(key(2));
    let a = q.get().await.unwrap();
    let b = q.get().await.unwrap();
    let q2 = q.clone();
    let drain = tokio::spawn(async move { q2.shut_down_with_drain().await });
    settle().await;
    assert!(!drain.is_finished(), "returned with two items in flight");
    q.done(&a);
    settle().await;
    assert!(!drain.is_finished(), "returned with one item in flight");
    q.done(&b);
    timeout(Duration::from_secs(1), drain).await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn shut_down_with_drain_returns_at_once_when_nothing_is_in_flight() {
    let q = plain_queue();
    q.add(key(1));
    timeout(Duration::from_secs(1), q.shut_down_with_drain()).await.unwrap();
    assert_eq!(q.get().await, Some(key(1)), "queued items stay available");
}

#[tokio::test(start_paused = true)]
async fn done_for_an_item_not_processing_changes_nothing() {
    let q = plain_queue();
    q.done(&key(1));
    assert!(q.is_empty());
    q.add(key(1));
    q.done(&key(1));
    assert_eq!(q.len(), 1, "done on a queued item pushes no duplicate");
    let item = q.get().await.unwrap();
    q.done(&item);
    q.done(&item);
    assert!(q.is_empty());
    q.shut_down();
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn an_add_accepted_while_held_survives_a_shut_down() {
    let q = plain_queue();
    q.add(key(1));
    let held = q.get().await.unwrap();
    q.add(key(1));
    q.shut_down();
    q.done(&held);
    assert_eq!(q.get().await, Some(key(1)), "the re-add before shut down was lost");
    q.done(&key(1));
    assert_eq!(q.get().await, None);
}

#[test]
fn futures_and_handles_are_send() {
    fn assert_send<F: Send>(_: &F) {}
    fn assert_send_sync<S: Send + Sync + Clone>() {}
    assert_send_sync::<WorkQueue<String>>();
    let q = plain_queue();
    assert_send(&q.get());
    assert_send(&q.shut_down_with_drain());
}

#[tokio::test(start_paused = true)]
async fn add_after_zero_adds_at_once() {
    let q = plain_queue();
    q.add_after(key(1), Duration::ZERO);
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn add_after_fires_at_its_deadline_on_the_paused_clock() {
    let q = plain_queue();
    let start = Instant::now();
    q.add_after(key(1), Duration::from_secs(30));
    assert_eq!(q.len(), 0);
    advance(Duration::from_secs(29)).await;
    assert_eq!(q.len(), 0, "fired early");
    let item = q.get().await.unwrap();
    assert_eq!(item, key(1));
    assert_eq!(Instant::now() - start, Duration::from_secs(30), "get slept to the deadline");
}

#[tokio::test(start_paused = true)]
async fn a_second_add_after_keeps_the_earlier_deadline_and_fires_once() {
    let q = plain_queue();
    let start = Instant::now();
    q.add_after(key(1), Duration::from_secs(10));
    q.add_after(key(1), Duration::from_secs(50));
    q.add_after(key(1), Duration::from_secs(20));
    let item = q.get().await.unwrap();
    assert_eq!(Instant::now() - start, Duration::from_secs(10));
    q.done(&item);
    advance(Duration::from_secs(100)).await;
    assert_eq!(q.len(), 0, "the item fired more than once");

    // An earlier deadline replaces a later one.
    q.add_after(key(2), Duration::from_secs(50));
    q.add_after(key(2), Duration::from_secs(5));
    let before = Instant::now();
    assert_eq!(q.get().await, Some(key(2)));
    assert_eq!(Instant::now() - before, Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn waiting_items_never_block_ready_ones() {
    let q = plain_queue();
    q.add_after(key(1), Duration::from_secs(3600));
    q.add(key(2));
    let start = Instant::now();
    assert_eq!(q.get().await, Some(key(2)));
    assert_eq!(Instant::now(), start);
}

#[tokio::test(start_paused = true)]
async fn a_parked_getter_wakes_for_an_earlier_deadline_added_later() {
    let q = plain_queue();
    q.add_after(key(1), Duration::from_secs(100));
    let q2 = q.clone();
    let start = Instant::now();
    let getter = tokio::spawn(async move {
        let item = q2.get().await;
        (item, Instant::now())
    });
    settle().await;
    q.add_after(key(2), Duration::from_secs(10));
    let (item, at) = getter.await.unwrap();
    assert_eq!(item, Some(key(2)));
    assert_eq!(at - start, Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn waiting_items_are_dropped_at_shut_down() {
    let q = plain_queue();
    q.add_after(key(1), Duration::from_secs(1));
    q.shut_down();
    advance(Duration::from_secs(5)).await;
    assert_eq!(q.get().await, None);
    q.add_after(key(2), Duration::ZERO);
    assert_eq!(q.len(), 0, "add_after after shut down is dropped");
}

#[tokio::test(start_paused = true)]
async fn add_rate_limited_waits_as_the_limiter_says_and_forget_resets() {
    let q = WorkQueue::builder()
        .rate_limiter(ItemExponentialFailureRateLimiter::new(
            Duration::from_millis(100),
            Duration::from_secs(10),
        ))
        .build();
    let k = key(1);
    for (attempt, expected_ms) in [100u64, 200, 400, 800].into_iter().enumerate() {
        let start = Instant::now();
        q.add_rate_limited(k.clone());
        assert_eq!(q.num_requeues(&k), attempt as u32 + 1);
        let item = q.get().await.unwrap();
        assert_eq!(Instant::now() - start, Duration::from_millis(expected_ms));
        q.done(&item);
    }
    q.forget(&k);
    assert_eq!(q.num_requeues(&k), 0);
    let start = Instant::now();
    q.add_rate_limited(k.clone());
    q.get().await.unwrap();
    assert_eq!(Instant::now() - start, Duration::from_millis(100), "forget resets the backoff");
}

#[test]
fn exponential_limiter_doubles_caps_and_never_overflows() {
    let r =
        ItemExponentialFailureRateLimiter::new(Duration::from_millis(1), Duration::from_secs(1));
    let waits: Vec<_> = (0..5).map(|_| r.when(&"a")).collect();
    assert_eq!(waits, [1, 2, 4, 8, 16].map(Duration::from_millis));
    assert_eq!(r.when(&"b"), Duration::from_millis(1), "per item");
    assert_eq!(r.num_requeues(&"a"), 5);
    for _ in 0..10_000 {
        assert!(r.when(&"a") <= Duration::from_secs(1));
    }
    assert_eq!(r.when(&"a"), Duration::from_secs(1));
    r.forget(&"a");
    assert_eq!(r.num_requeues(&"a"), 0);
    assert_eq!(r.when(&"a"), Duration::from_millis(1));

    let huge = ItemExponentialFailureRateLimiter::new(Duration::MAX / 2, Duration::MAX);
    for _ in 0..200 {
        assert!(huge.when(&"x") >= Duration::MAX / 2);
    }
}

#[test]
fn fast_slow_limiter_switches_after_max_fast_attempts() {
    let r = ItemFastSlowRateLimiter::new(Duration::from_millis(5), Duration::from_secs(10), 3);
    let waits: Vec<_> = (0..5).map(|_| r.when(&"a")).collect();
    assert_eq!(
        waits,
        [
            Duration::from_millis(5),
            Duration::from_millis(5),
            Duration::from_millis(5),
            Duration::from_secs(10),
            Duration::from_secs(10)
        ]
    );
    assert_eq!(r.num_requeues(&"a"), 5);
    assert_eq!(r.when(&"b"), Duration::from_millis(5));
    r.forget(&"a");
    assert_eq!(r.when(&"a"), Duration::from_millis(5));
}

#[tokio::test(start_paused = true)]
async fn bucket_limiter_allows_a_burst_then_spaces_by_qps_and_refills() {
    let r = BucketRateLimiter::new(10.0, 3);
    let burst: Vec<_> = (0..3).map(|_| RateLimiter::<&str>::when(&r, &"x")).collect();
    assert_eq!(burst, [Duration::ZERO; 3]);
    let w1 = RateLimiter::<&str>::when(&r, &"y");
    let w2 = RateLimiter::<&str>::when(&r, &"z");
    assert!((w1.as_secs_f64() - 0.1).abs() < 1e-9, "{w1:?}");
    assert!((w2.as_secs_f64() - 0.2).abs() < 1e-9, "shared by all items: {w2:?}");
    assert_eq!(RateLimiter::<&str>::num_requeues(&r, &"x"), 0);
    // Two reserved tokens are owed; after 1.2 s the bucket is full again (3 tokens).
    advance(Duration::from_millis(1200)).await;
    let again: Vec<_> = (0..3).map(|_| RateLimiter::<&str>::when(&r, &"x")).collect();
    assert_eq!(again, [Duration::ZERO; 3]);
    assert!(RateLimiter::<&str>::when(&r, &"x") > Duration::ZERO);
}

#[test]
fn max_of_limiter_takes_the_longest_wait_and_forgets_in_all() {
    let r: MaxOfRateLimiter<&str> = MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(
            Duration::from_millis(1),
            Duration::from_secs(100),
        )),
        Box::new(ItemFastSlowRateLimiter::new(Duration::from_millis(3), Duration::from_secs(1), 2)),
    ]);
    assert_eq!(r.when(&"a"), Duration::from_millis(3)); // max(1, 3)
    assert_eq!(r.when(&"a"), Duration::from_millis(3)); // max(2, 3)
    assert_eq!(r.when(&"a"), Duration::from_secs(1)); // max(4, 1000)
    assert_eq!(r.num_requeues(&"a"), 3);
    r.forget(&"a");
    assert_eq!(r.num_requeues(&"a"), 0);
    assert_eq!(r.when(&"a"), Duration::from_millis(3), "both forgot");
}

#[tokio::test(start_paused = true)]
async fn default_controller_limiter_is_5ms_exponential_and_a_100_burst_at_10_qps() {
    let r = default_controller_rate_limiter::<String>();
    assert_eq!(r.when(&key(0)), Duration::from_millis(5));
    assert_eq!(r.when(&key(0)), Duration::from_millis(10));
    // 98 more tokens of the burst, each on a fresh item: 5 ms each.
    for i in 1..99 {
        assert_eq!(r.when(&key(i)), Duration::from_millis(5));
    }
    // The bucket is empty now: the 101st wait is the bucket's 100 ms.
    let w = r.when(&key(1000));
    assert!((w.as_secs_f64() - 0.1).abs() < 1e-9, "{w:?}");
    // The exponential part caps at 1000 s.
    let slow = key(5000);
    let mut last = Duration::ZERO;
    for _ in 0..40 {
        last = r.when(&slow);
    }
    assert_eq!(last, Duration::from_secs(1000));
}

/// A provider that records what the queue reports, for the metrics test.
#[derive(Default)]
struct Recorder {
    depth: Gauge,
    adds: Counter,
    retries: Counter,
    latency: Histogram,
    work: Histogram,
    unfinished: Settable,
    longest: Settable,
    names: std::sync::Mutex<Vec<String>>,
}
#[derive(Default)]
struct Gauge(std::sync::atomic::AtomicI64);
#[derive(Default)]
struct Counter(AtomicUsize);
#[derive(Default)]
struct Histogram(std::sync::Mutex<Vec<f64>>);
#[derive(Default)]
struct Settable(std::sync::Mutex<f64>);

/// One queue's view of the recorder.
struct Recording(Arc<Recorder>);

impl QueueMetrics for Recording {
    fn depth(&self, _: Priority, delta: i64) {
        self.0.depth.0.fetch_add(delta, Ordering::SeqCst);
    }
    fn added(&self) {
        self.0.adds.0.fetch_add(1, Ordering::SeqCst);
    }
    fn queue_latency(&self, seconds: f64) {
        self.0.latency.0.lock().unwrap().push(seconds);
    }
    fn work_duration(&self, seconds: f64) {
        self.0.work.0.lock().unwrap().push(seconds);
    }
    fn unfinished_work(&self, seconds: f64) {
        *self.0.unfinished.0.lock().unwrap() = seconds;
    }
    fn longest_running_processor(&self, seconds: f64) {
        *self.0.longest.0.lock().unwrap() = seconds;
    }
    fn retried(&self) {
        self.0.retries.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Hands out recordings of one shared recorder (a test's `Arc<Recorder>` is the provider).
struct Provider(Arc<Recorder>);

impl QueueMetricsProvider for Provider {
    fn new_queue_metrics(&self, name: &str) -> Arc<dyn QueueMetrics> {
        self.0.names.lock().unwrap().push(name.to_owned());
        Arc::new(Recording(self.0.clone()))
    }
}

#[tokio::test(start_paused = true)]
async fn metrics_report_depth_adds_latency_work_unfinished_and_retries() {
    let rec = Arc::new(Recorder::default());
    let provider = Arc::new(Provider(rec.clone()));
    let q: WorkQueue<String> = WorkQueue::builder().name("pods").metrics(provider).build();
    assert_eq!(rec.names.lock().unwrap().as_slice(), ["pods"]);
    q.add(key(1));
    q.add(key(1));
    q.add(key(2));
    // Adds are recorded when the queue applies them: by the next get, done or len (or the
    // 500 ms refresh), at once when a worker waits.
    assert_eq!(q.len(), 2);
    assert_eq!(rec.depth.0.load(Ordering::SeqCst), 2);
    assert_eq!(rec.adds.0.load(Ordering::SeqCst), 2, "a duplicate add is not counted");
    advance(Duration::from_secs(3)).await;
    let a = q.get().await.unwrap();
    assert_eq!(rec.depth.0.load(Ordering::SeqCst), 1);
    assert_eq!(rec.latency.0.lock().unwrap().as_slice(), [3.0]);
    advance(Duration::from_secs(2)).await;
    q.update_unfinished_work();
    assert_eq!(*rec.unfinished.0.lock().unwrap(), 2.0);
    assert_eq!(*rec.longest.0.lock().unwrap(), 2.0);
    q.done(&a);
    assert_eq!(rec.work.0.lock().unwrap().as_slice(), [2.0]);
    q.add_rate_limited(key(3));
    assert_eq!(rec.retries.0.load(Ordering::SeqCst), 1);
    // The queue refreshes the unfinished-work gauges by itself every 500 ms.
    let b = q.get().await.unwrap();
    sleep(Duration::from_secs(4)).await;
    let unfinished = *rec.unfinished.0.lock().unwrap();
    assert!((3.5..=4.0).contains(&unfinished), "unfinished work not refreshed: {unfinished}");
    q.done(&b);
}

/// Adds wait in a buffer until the queue applies them as a batch; with metrics on, each one's
/// latency still counts from its own add, not from its batch's first.
#[tokio::test(start_paused = true)]
async fn the_latency_of_a_buffered_add_counts_from_that_add() {
    let rec = Arc::new(Recorder::default());
    let q: WorkQueue<String> =
        WorkQueue::builder().metrics(Arc::new(Provider(rec.clone()))).build();
    // The metrics refresh locks the queue, which applies the buffer, every 500 ms from its
    // first tick: let that tick pass, then add three keys within one period, so that the
    // first `get` applies them as one batch.
    tokio::task::yield_now().await;
    q.add(key(1));
    advance(Duration::from_millis(200)).await;
    q.add(key(2));
    advance(Duration::from_millis(100)).await;
    q.add(key(3));
    advance(Duration::from_millis(100)).await;
    for _ in 0..3 {
        let item = q.get().await.unwrap();
        q.done(&item);
    }
    assert_eq!(rec.latency.0.lock().unwrap().as_slice(), [0.4, 0.2, 0.1]);
}

/// Metrics hooks that panic, every one of them.
struct Panicking;

impl QueueMetrics for Panicking {
    fn depth(&self, _: Priority, _: i64) {
        panic!("depth hook");
    }
    fn added(&self) {
        panic!("added hook");
    }
    fn queue_latency(&self, _: f64) {
        panic!("queue_latency hook");
    }
    fn work_duration(&self, _: f64) {
        panic!("work_duration hook");
    }
    fn unfinished_work(&self, _: f64) {
        panic!("unfinished_work hook");
    }
    fn longest_running_processor(&self, _: f64) {
        panic!("longest_running_processor hook");
    }
    fn retried(&self) {
        panic!("retried hook");
    }
}

impl QueueMetricsProvider for Panicking {
    fn new_queue_metrics(&self, _: &str) -> Arc<dyn QueueMetrics> {
        Arc::new(Panicking)
    }
}

/// A metrics hook is user code: its panic costs the metric, never an item. The adds are
/// applied as a batch, whose first recorded add used to unwind out of the `get` applying it,
/// losing the rest of the batch.
#[tokio::test(start_paused = true)]
async fn metrics_hooks_that_panic_lose_no_item_and_leave_the_queue_working() {
    let q: WorkQueue<String> = WorkQueue::builder().metrics(Arc::new(Panicking)).build();
    for i in 0..3 {
        q.add(key(i));
    }
    q.add_rate_limited(key(3));
    let mut got = Vec::new();
    for _ in 0..4 {
        let item = timeout(Duration::from_secs(1), q.get()).await.expect("an item").unwrap();
        // The 500 ms refresh of the unfinished-work gauges calls its hooks too.
        sleep(Duration::from_millis(600)).await;
        q.done(&item);
        got.push(item);
    }
    got.sort();
    assert_eq!(got, [key(0), key(1), key(2), key(3)]);
    q.shut_down();
    assert_eq!(q.get().await, None);
}
