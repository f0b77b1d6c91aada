//! [`EventRecorder`]: records events from reconciles without ever blocking or failing them.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{EventSource, ObjectReference};
use k8s_openapi::api::events::v1::EventSeries;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube_client::api::{Patch, PatchParams, PostParams};
use kube_client::{Api, Client, Resource};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::correlator::{CACHE_ENTRIES, ObjectId, Series, SeriesKey, SpamFilter};
use crate::panic::observe;

/// How many events may wait to be written; more are dropped (client-go's
/// `maxQueuedEvents`).
const BUFFER: usize = 1000;
/// Attempts to write one event before it is dropped (client-go's `maxTriesPerEvent`).
const MAX_TRIES: u32 = 12;
/// The wait between attempts, jittered by up to 25% (client-go's `defaultSleepDuration`).
const RETRY_WAIT: Duration = Duration::from_secs(10);

/// An event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `Normal`: something happened as it should.
    Normal,
    /// `Warning`: something went wrong or may need attention.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// An event to record.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NewEvent {
    /// Normal or Warning.
    pub type_: EventType,
    /// Why: a short UpperCamelCase word (`Created`, `FailedCleanup`).
    pub reason: String,
    /// What the controller did or failed to do (`Create`, `Delete`).
    pub action: String,
    /// A human-readable description, at most 1 kB.
    pub note: String,
    /// Another object the event concerns, if any.
    pub related: Option<ObjectReference>,
}

impl NewEvent {
    /// An event with no related object.
    pub fn new(type_: EventType, reason: &str, action: &str, note: &str) -> Self {
        Self {
            type_,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note: note.to_owned(),
            related: None,
        }
    }

    /// With a related object.
    #[must_use]
    pub fn related(mut self, related: ObjectReference) -> Self {
        self.related = Some(related);
        self
    }
}

/// Why an event was dropped, as [`EventMetrics::dropped`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DropReason {
    /// The per-object spam filter refused it.
    Spam,
    /// The buffer was full.
    BufferFull,
    /// The server refused it, or every attempt failed.
    WriteFailed,
}

impl DropReason {
    /// The label value: `spam`, `buffer_full`, `write_failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Spam => "spam",
            Self::BufferFull => "buffer_full",
            Self::WriteFailed => "write_failed",
        }
    }
}

/// Hooks for the recorder's metrics (see `ctrlkit::metrics::Registry`, feature `metrics`, for an implementation).
/// A hook that panics is caught and logged, and costs only that observation. Every hook
/// does nothing by default: an exporter implements those it records, and a hook added later
/// breaks no implementor.
pub trait EventMetrics: Send + Sync {
    /// An event was written (created, or its series updated).
    fn recorded(&self, controller: &str) {
        let _ = controller;
    }
    /// An event was dropped.
    fn dropped(&self, controller: &str, reason: DropReason) {
        let _ = (controller, reason);
    }
}

enum Message {
    /// Boxed: the buffer holds up to a thousand, most of them small.
    Event(Box<(ObjectReference, NewEvent, Instant)>),
    Flush(oneshot::Sender<()>),
}

/// Records Kubernetes events for a controller (client-go's `EventRecorder`): in
/// `events.k8s.io/v1` where the server has it, in `core/v1` otherwise, correlated into series
/// and spam-filtered as client-go does (see the [module docs](super)).
///
/// Recording never blocks and never fails: [`publish`](Self::publish) puts the event in a
/// buffer of 1,000 events that one task writes out; a full buffer, the spam filter, and
/// writes the server refuses (or that fail 12 times, 10 s apart) drop events, logged and
/// counted. Cheap to clone.
#[derive(Clone)]
pub struct EventRecorder {
    tx: mpsc::Sender<Message>,
    controller: Arc<str>,
    metrics: Option<Arc<dyn EventMetrics>>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// A recorder reporting as `reporting_controller` (`example.com/my-operator`), its
    /// instance `<controller>-<hostname>` as client-go names it. Starts its writer task, so
    /// it needs a tokio runtime; the task ends when the last clone is dropped.
    pub fn new(client: Client, reporting_controller: &str) -> Self {
        Self::with_metrics(client, reporting_controller, None)
    }

    /// As [`new`](Self::new), counting written and dropped events with `metrics`.
    pub fn with_metrics(
        client: Client,
        reporting_controller: &str,
        metrics: Option<Arc<dyn EventMetrics>>,
    ) -> Self {
        let client = crate::user_agent::with_default(client);
        let (tx, rx) = mpsc::channel(BUFFER);
        let controller: Arc<str> = Arc::from(reporting_controller);
        let host = crate::identity::hostname().unwrap_or_else(|| "unknown".to_owned());
        let instance = format!("{reporting_controller}-{host}");
        let writer = Writer {
            client,
            api: None,
            controller: controller.clone(),
            instance,
            spam: SpamFilter::default(),
            series: HashMap::new(),
            retries: Vec::new(),
            metrics: metrics.clone(),
            random: RandomState::new(),
        };
        tokio::spawn(writer.run(rx));
        Self { tx, controller, metrics }
    }

    /// Records `event` about the object `regarding` refers to. Returns at once.
    pub fn publish(&self, regarding: &ObjectReference, event: NewEvent) {
        let message = Message::Event(Box::new((regarding.clone(), event, Instant::now())));
        if self.tx.try_send(message).is_err() {
            tracing::warn!(controller = %self.controller, "event buffer full; dropping an event");
            if let Some(metrics) = &self.metrics {
                observe("dropped", || metrics.dropped(&self.controller, DropReason::BufferFull));
            }
        }
    }

    /// Records an event about `object` (a typed object: `Pod`, `ConfigMap`, your CRD's type).
    pub fn publish_for<K>(&self, object: &K, event: NewEvent)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(&object.object_ref(&()), event);
    }

    /// Waits until every event published before this call was written, dropped or (after a
    /// failure that may pass) scheduled for another attempt, and every series was brought up
    /// to date on the server. For tests and shutdown.
    pub async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.tx.send(Message::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }
}

/// Which events API the server has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventsApi {
    EventsV1,
    CoreV1,
}

/// A write that failed for a reason that may pass (a 5xx, a timeout, a cut connection).
struct Retry {
    key: SeriesKey,
    regarding: ObjectReference,
    event: NewEvent,
    tries: u32,
    at: Instant,
}

/// The task that writes events out, in the order published.
struct Writer {
    client: Client,
    api: Option<EventsApi>,
    controller: Arc<str>,
    instance: String,
    spam: SpamFilter,
    series: HashMap<SeriesKey, Series>,
    retries: Vec<Retry>,
    metrics: Option<Arc<dyn EventMetrics>>,
    random: RandomState,
}

/// How a write ended.
enum Written {
    Ok,
    /// Worth another try later.
    Transient(kube_client::Error),
    /// Refused: not worth another try.
    Refused(kube_client::Error),
}

fn classify(result: kube_client::Result<()>) -> Written {
    match result {
        Ok(()) => Written::Ok,
        Err(kube_client::Error::Api(s)) if s.code < 500 && s.code != 429 => {
            Written::Refused(kube_client::Error::Api(s))
        }
        Err(err) => Written::Transient(err),
    }
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<Message>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                message = rx.recv() => match message {
                    Some(Message::Event(event)) => {
                        let (regarding, event, at) = *event;
                        self.record(regarding, event, at).await
                    }
                    Some(Message::Flush(done)) => {
                        self.write_series(true).await;
                        let _ = done.send(());
                    }
                    None => {
                        // Every recorder is gone: last writes, and what still waits for a
                        // retry is dropped, counted.
                        self.write_series(true).await;
                        for _ in std::mem::take(&mut self.retries) {
                            self.dropped(DropReason::WriteFailed);
                        }
                        return;
                    }
                },
                _ = tick.tick() => {
                    self.write_series(false).await;
                    self.retry_due().await;
                }
            }
        }
    }

    fn recorded(&self) {
        if let Some(metrics) = &self.metrics {
            observe("recorded", || metrics.recorded(&self.controller));
        }
    }

    fn dropped(&self, reason: DropReason) {
        if let Some(metrics) = &self.metrics {
            observe("dropped", || metrics.dropped(&self.controller, reason));
        }
    }

    async fn record(&mut self, regarding: ObjectReference, event: NewEvent, at: Instant) {
        if !self.spam.allow(&ObjectId::of(&regarding), at) {
            tracing::debug!(reason = %event.reason, "event dropped by the spam filter");
            self.dropped(DropReason::Spam);
            return;
        }
        let key = SeriesKey {
            action: event.action.clone(),
            reason: event.reason.clone(),
            regarding: ObjectId::of(&regarding),
            related: event.related.as_ref().map(ObjectId::of),
        };
        if let Some(series) = self.series.get_mut(&key) {
            series.count += 1;
            series.last_seen = at;
            if series.due(at) {
                let series = series.clone();
                self.update_series(&key, series).await;
            }
            return;
        }
        self.create(key, regarding, event, 0).await;
    }

    /// Creates the first event of a series.
    async fn create(
        &mut self,
        key: SeriesKey,
        regarding: ObjectReference,
        event: NewEvent,
        tries: u32,
    ) {
        let api = self.api().await;
        let namespace = regarding
            .namespace
            .clone()
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| "default".to_owned());
        let now = Timestamp::now();
        let name =
            format!("{}.{:x}", regarding.name.as_deref().unwrap_or("unknown"), now.as_nanosecond());
        let metadata = ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        };
        let result = match api {
            EventsApi::EventsV1 => {
                let object = k8s_openapi::api::events::v1::Event {
                    metadata,
                    event_time: Some(MicroTime(now)),
                    reporting_controller: Some(self.controller.to_string()),
                    reporting_instance: Some(self.instance.clone()),
                    action: Some(event.action.clone()),
                    reason: Some(event.reason.clone()),
                    regarding: Some(regarding.clone()),
                    related: event.related.clone(),
                    note: Some(event.note.clone()),
                    type_: Some(event.type_.as_str().to_owned()),
                    ..Default::default()
                };
                let events: Api<k8s_openapi::api::events::v1::Event> =
                    Api::namespaced(self.client.clone(), &namespace);
                events.create(&PostParams::default(), &object).await.map(|_| ())
            }
            EventsApi::CoreV1 => {
                let object = k8s_openapi::api::core::v1::Event {
                    metadata,
                    involved_object: regarding.clone(),
                    reason: Some(event.reason.clone()),
                    message: Some(event.note.clone()),
                    type_: Some(event.type_.as_str().to_owned()),
                    action: Some(event.action.clone()),
                    related: event.related.clone(),
                    source: Some(EventSource {
                        component: Some(self.controller.to_string()),
                        host: None,
                    }),
                    reporting_component: Some(self.controller.to_string()),
                    reporting_instance: Some(self.instance.clone()),
                    first_timestamp: Some(Time(now)),
                    last_timestamp: Some(Time(now)),
                    count: Some(1),
                    ..Default::default()
                };
                let events: Api<k8s_openapi::api::core::v1::Event> =
                    Api::namespaced(self.client.clone(), &namespace);
                events.create(&PostParams::default(), &object).await.map(|_| ())
            }
        };
        match classify(result) {
            Written::Ok => {
                self.recorded();
                let at = Instant::now();
                if self.series.len() >= CACHE_ENTRIES {
                    self.evict_oldest_series();
                }
                self.series.insert(
                    key,
                    Series {
                        namespace,
                        name,
                        count: 1,
                        written: 1,
                        last_seen: at,
                        last_written: at,
                    },
                );
            }
            Written::Refused(err) => {
                tracing::warn!(%err, reason = %event.reason, "the server refused an event; dropping it");
                self.dropped(DropReason::WriteFailed);
            }
            Written::Transient(err) => self.schedule_retry(key, regarding, event, tries, err),
        }
    }

    fn schedule_retry(
        &mut self,
        key: SeriesKey,
        regarding: ObjectReference,
        event: NewEvent,
        tries: u32,
        err: kube_client::Error,
    ) {
        let tries = tries + 1;
        if tries >= MAX_TRIES {
            tracing::error!(%err, reason = %event.reason, "writing an event failed {MAX_TRIES} times; dropping it");
            self.dropped(DropReason::WriteFailed);
            return;
        }
        tracing::warn!(%err, reason = %event.reason, "writing an event failed; will retry");
        let jitter = (self.random.hash_one(tries) % 1000) as f64 / 1000.0 * 0.25;
        let at = Instant::now() + RETRY_WAIT + RETRY_WAIT.mul_f64(jitter);
        self.retries.push(Retry { key, regarding, event, tries, at });
    }

    async fn retry_due(&mut self) {
        let now = Instant::now();
        let (due, waiting): (Vec<Retry>, Vec<Retry>) =
            std::mem::take(&mut self.retries).into_iter().partition(|r| r.at <= now);
        self.retries = waiting;
        for retry in due {
            self.create(retry.key, retry.regarding, retry.event, retry.tries).await;
        }
    }

    fn evict_oldest_series(&mut self) {
        if let Some(oldest) =
            self.series.iter().min_by_key(|(_, s)| s.last_seen).map(|(k, _)| k.clone())
        {
            self.series.remove(&oldest);
        }
    }

    /// Writes the series that are due (or all that have news, with `all`), and forgets
    /// finished ones once written.
    async fn write_series(&mut self, all: bool) {
        let now = Instant::now();
        let pending: Vec<(SeriesKey, Series)> = self
            .series
            .iter()
            .filter(|(_, s)| s.due(now) || (s.count > s.written && (all || s.finished(now))))
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        for (key, series) in pending {
            self.update_series(&key, series).await;
        }
        self.series.retain(|_, s| !(s.finished(now) && s.count == s.written));
    }

    /// Tells the server a series' count (events.k8s.io: `series`; core/v1: `count` and
    /// `lastTimestamp`).
    async fn update_series(&mut self, key: &SeriesKey, series: Series) {
        let api = self.api().await;
        let now = Timestamp::now();
        let result = match api {
            EventsApi::EventsV1 => {
                let events: Api<k8s_openapi::api::events::v1::Event> =
                    Api::namespaced(self.client.clone(), &series.namespace);
                let patch = json!({ "series": EventSeries { count: series.count, last_observed_time: MicroTime(now) } });
                events
                    .patch(&series.name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map(|_| ())
            }
            EventsApi::CoreV1 => {
                let events: Api<k8s_openapi::api::core::v1::Event> =
                    Api::namespaced(self.client.clone(), &series.namespace);
                let patch = json!({ "count": series.count, "lastTimestamp": Time(now) });
                events
                    .patch(&series.name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map(|_| ())
            }
        };
        match classify(result) {
            Written::Ok => {
                self.recorded();
                if let Some(s) = self.series.get_mut(key) {
                    s.written = series.count;
                    s.last_written = Instant::now();
                }
            }
            // The event object is gone (expired, deleted): the next repeat starts a new one.
            Written::Refused(kube_client::Error::Api(s)) if s.code == 404 => {
                self.series.remove(key);
            }
            Written::Refused(err) | Written::Transient(err) => {
                // The next tick tries again; nothing is lost but timeliness.
                tracing::warn!(%err, "updating an event series failed");
            }
        }
    }

    /// The events API of the server, found once: events.k8s.io/v1 if it is served.
    async fn api(&mut self) -> EventsApi {
        if let Some(api) = self.api {
            return api;
        }
        let api = match self.client.list_api_group_resources("events.k8s.io/v1").await {
            Ok(list) if list.resources.iter().any(|r| r.name == "events") => EventsApi::EventsV1,
            Ok(_) | Err(kube_client::Error::Api(_)) => EventsApi::CoreV1,
            Err(err) => {
                // Not known yet: core/v1 this time, asked again next time.
                tracing::debug!(%err, "discovering events.k8s.io/v1 failed");
                return EventsApi::CoreV1;
            }
        };
        tracing::debug!(?api, "events API");
        self.api = Some(api);
        api
    }
}
