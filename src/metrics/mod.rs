//! Prometheus metrics and the probe endpoint (feature `metrics`), under the names
//! controller-runtime uses, so existing dashboards and alerts work unchanged.
//!
//! [`Registry`] implements the metrics hooks of every layer; a
//! [`Manager`](crate::manager::Manager) built with
//! [`metrics_address`](crate::manager::ManagerBuilder::metrics_address) hands it to its work
//! queues, informers, controllers, leader election, event recorders and clients, and serves
//! it at `/metrics`, beside `/healthz` and `/readyz`. It also reads the process and the async
//! runtime at each scrape (below).
//!
//! **The hooks.** Each layer reports through a trait of its own:
//! [`InformerMetrics`](crate::cache::InformerMetrics),
//! [`QueueMetrics`](crate::workqueue::QueueMetrics),
//! [`ControllerMetrics`](crate::controller::ControllerMetrics),
//! [`EventMetrics`](crate::events::EventMetrics),
//! [`LeaderMetrics`](crate::leaderelection::LeaderMetrics),
//! [`ShardingMetrics`](crate::sharding::ShardingMetrics) and
//! [`RequestMetrics`](crate::rest_client::RequestMetrics). Two rules hold for all of them:
//! - Every hook method has a default that does nothing: an exporter implements the hooks it
//!   records, and a hook added in a later version breaks no implementor.
//! - A provider only where each instance needs an object of its own, its labels bound when it
//!   is made (client-go's `workqueue.MetricsProvider`): one informer, queue or controller gets
//!   its hooks from [`InformerMetricsProvider`](crate::cache::InformerMetricsProvider),
//!   [`QueueMetricsProvider`](crate::workqueue::QueueMetricsProvider) or
//!   [`ControllerMetricsProvider`](crate::controller::ControllerMetricsProvider). The others
//!   are called once per recorder, elector, ring or Manager, and take its name (a request's
//!   host) with each call.
//!
//! ```
//! /// An exporter that records nothing yet.
//! struct Nothing;
//!
//! impl ctrlkit::cache::InformerMetrics for Nothing {}
//! impl ctrlkit::workqueue::QueueMetrics for Nothing {}
//! impl ctrlkit::controller::ControllerMetrics for Nothing {}
//! impl ctrlkit::events::EventMetrics for Nothing {}
//! impl ctrlkit::leaderelection::LeaderMetrics for Nothing {}
//! impl ctrlkit::sharding::ShardingMetrics for Nothing {}
//! impl ctrlkit::rest_client::RequestMetrics for Nothing {}
//! ```
//!
//! **Secure serving** (feature `secure-metrics`, `SecureServing`): `/metrics` over HTTPS, let
//! in only for a bearer token the API server authenticates (`TokenReview`) and authorizes
//! (`SubjectAccessReview` for `get /metrics`), as controller-runtime's secure serving. Its
//! limits and defaults: a token's review is cached 1 minute, an allowed user 5 minutes, a
//! denied one 30 seconds, 1,024 entries each (least recently used evicted first, tokens that
//! authenticated apart from those that did not, tokens kept as their SHA-256); a token over
//! 16 KiB is a 401 without a review; one review per token at a time; reviews of unknown
//! tokens at 10 a second (bursts of 40; over it a 429 with `Retry-After: 1` without a review,
//! a scraper's new or rotated token too while a flood lasts) and 8 in flight at most, those
//! of tokens known in the last 10 minutes beside them, never behind; the HTTPS
//! server's handshake and headers within 10 s
//! (headers of 64 KiB at most), idle connections closed after 90 s, 1,024 connections at once
//! (the webhook server's `ServingLimits`).
//!
//! | metric | type | labels | counts |
//! |---|---|---|---|
//! | `workqueue_depth` | gauge | `name`, `controller`, `priority` | keys waiting |
//! | `workqueue_adds_total` | counter | `name`, `controller` | adds |
//! | `workqueue_queue_duration_seconds` | histogram | `name`, `controller` | add → get |
//! | `workqueue_work_duration_seconds` | histogram | `name`, `controller` | get → done |
//! | `workqueue_unfinished_work_seconds` | gauge | `name`, `controller` | age of the work in progress, summed |
//! | `workqueue_longest_running_processor_seconds` | gauge | `name`, `controller` | age of the oldest work in progress |
//! | `workqueue_retries_total` | counter | `name`, `controller` | `add_rate_limited` calls |
//! | `ctrlkit_workqueue_fairness_groups` | gauge | `name`, `controller`, `level` | a fair queue's groups (namespaces, clusters) with ready items at one level of its fairness key; a series per level, never per group |
//! | `ctrlkit_workqueue_fairness_deepest` | gauge | `name`, `controller`, `level` | the most ready items of one group at that level |
//! | `ctrlkit_workqueue_fairness_longest_wait_seconds` | gauge | `name`, `controller`, `level` | the longest wait of a group's oldest ready item at that level |
//! | `controller_runtime_reconcile_total` | counter | `controller`, `result` | reconciles by `success`, `error`, `requeue`, `requeue_after` |
//! | `controller_runtime_reconcile_errors_total` | counter | `controller` | errors, panics and timeouts |
//! | `controller_runtime_terminal_reconcile_errors_total` | counter | `controller` | keys given up on |
//! | `controller_runtime_reconcile_panics_total` | counter | `controller` | panics caught |
//! | `controller_runtime_reconcile_timeouts_total` | counter | `controller` | reconciles cut by the reconcile timeout |
//! | `controller_runtime_reconcile_time_seconds` | histogram | `controller` | reconcile time |
//! | `controller_runtime_max_concurrent_reconciles` | gauge | `controller` | workers |
//! | `controller_runtime_active_workers` | gauge | `controller` | workers reconciling now |
//! | `ctrlkit_controller_worker_scaling_total` | counter | `controller`, `reason` | changes of the worker count by `manual`, `queue`, `cpu_bound`, `throttled`, `idle` |
//! | `rest_client_requests_total` | counter | `code`, `method`, `host` | requests of the Manager's clients by status (`<error>` without an answer), HTTP method and API server `host:port` |
//! | `rest_client_request_duration_seconds` | histogram | `verb`, `host` | request → answer's headers, by HTTP method |
//! | `process_cpu_seconds_total` | counter | | user and system CPU time (Linux) |
//! | `process_resident_memory_bytes` | gauge | | resident memory (Linux) |
//! | `process_virtual_memory_bytes` | gauge | | virtual memory (Linux) |
//! | `process_open_fds` | gauge | | open file descriptors (Linux) |
//! | `process_max_fds` | gauge | | the soft limit on open file descriptors (Linux) |
//! | `process_start_time_seconds` | gauge | | the process's start, seconds since the epoch (Linux) |
//! | `tokio_workers_count` | gauge | | the tokio runtime's worker threads |
//! | `tokio_alive_tasks` | gauge | | tasks alive in the runtime |
//! | `tokio_global_queue_depth` | gauge | | tasks waiting in the runtime's global queue |
//! | `leader_election_master_status` | gauge | `name` | 1 while leading the Lease `name` |
//! | `ctrlkit_informer_list_requests_total` | counter | `resource`, `namespace`, `selector`, `result` | list pages requested |
//! | `ctrlkit_informer_watch_requests_total` | counter | `resource`, `namespace`, `selector`, `result` | watches opened |
//! | `ctrlkit_informer_watch_events_total` | counter | `resource`, `namespace`, `selector`, `type` | events by `added`, `modified`, `deleted`, `bookmark`, `error` |
//! | `ctrlkit_informer_relists_total` | counter | `resource`, `namespace`, `selector` | lists after the first sync |
//! | `ctrlkit_informer_objects_skipped_total` | counter | `resource`, `namespace`, `selector` | objects skipped, nested deeper than the informer's `max_depth` (512 levels by default); a cached copy stays |
//! | `ctrlkit_informer_wire_format_fallbacks_total` | counter | `resource`, `namespace`, `selector` | protobuf met a field the vendored messages lack (a newer server): the informer reads JSON from then on and relisted |
//! | `ctrlkit_informer_objects` | gauge | `resource`, `namespace`, `selector` | objects in the store |
//! | `ctrlkit_informer_resource_version` | gauge | `resource`, `namespace`, `selector` | the resourceVersion reached (numeric ones) |
//! | `ctrlkit_events_recorded_total` | counter | `controller` | events written |
//! | `ctrlkit_events_dropped_total` | counter | `controller`, `reason` | events dropped: `spam`, `buffer_full`, `write_failed` |
//! | `ctrlkit_sharding_objects` | gauge | `ring`, `shard` | primary objects labelled to the shard |
//! | `ctrlkit_sharding_members` | gauge | `ring`, `state` | shards `ready`, `expired`, `dead` |
//! | `ctrlkit_sharding_assignments_total` | counter | `ring`, `reason` | objects labelled: `unassigned`, `shard_stopped` |
//! | `ctrlkit_sharding_drains_total` | counter | `ring` | objects marked for draining |
//! | `ctrlkit_secure_metrics_token_reviews_total` | counter | `result` | secure serving's `TokenReview`s of scrapes by `authenticated`, `unauthenticated`, `failed`, and `throttled` (refused unsent, over the rate of unknown tokens' reviews) |
//!
//! Checked against controller-runtime's `pkg/metrics/workqueue.go`,
//! `pkg/internal/controller/metrics/metrics.go` and `pkg/metrics/leaderelection.go`: the same
//! names, types, label sets, help texts and histogram buckets. Where ctrlkit differs:
//! - `result="requeue"` never counts: a ctrlkit reconcile asks for a requeue with a delay
//!   (`requeue_after`) or fails (`error`); the series exists, at zero.
//! - `controller_runtime_terminal_reconcile_errors_total` counts the errors a reconciler calls
//!   terminal (`Reconciler::is_terminal`, as controller-runtime counts `TerminalError`s) and
//!   also keys dropped after their last retry, which are given up on as well.
//! - `workqueue_depth` has one series per priority in use (`priority="0"`, `"-100"`, ...),
//!   for every queue, as controller-runtime's priority queue reports (its plain queue reports
//!   `priority=""`).
//! - controller-runtime also exports the Go runtime's collector (`go_*`); ctrlkit never does:
//!   it exports stable tokio's runtime metrics instead (`tokio_*`, read from the runtime the
//!   registry was made on, else the one current at the scrape; absent outside any runtime).
//! - The process's metrics (`process_*`, the Prometheus client libraries' names and help
//!   texts) are read from `/proc` at each scrape, on Linux only: on other systems there are
//!   none. Like the `tokio_*` ones they are read before the registry is locked, so a slow
//!   `/proc` never holds up the hooks.
//! - `rest_client_requests_total` and `rest_client_request_duration_seconds` are client-go's
//!   (names, help texts, buckets; `method` and `verb` both the HTTP method). They count the
//!   requests of the clients a [`Manager`](crate::manager::Manager) hands out and uses itself,
//!   through [`RequestMetrics`](crate::rest_client::RequestMetrics), which `Registry`
//!   implements. A Manager built from a prebuilt `Client` whose `default_retry` is on
//!   (kube-client's default) counts only each request's final answer: a 429 kube-client
//!   retried and then got through shows as its final code. `Manager::builder_from_config`
//!   counts each attempt.
//! - The `ctrlkit_informer_*`, `ctrlkit_events_*`, `ctrlkit_sharding_*`,
//!   `ctrlkit_controller_*` and `ctrlkit_secure_metrics_*` metrics are ctrlkit's own (no peer
//!   exports them).

mod process;
mod registry;
mod runtime;
#[cfg(feature = "secure-metrics")]
mod secure;
mod server;
mod snapshot;

pub use registry::Registry;
#[cfg(feature = "secure-metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "secure-metrics")))]
pub use secure::SecureServing;
pub(crate) use server::{MetricsServer, Probes};
