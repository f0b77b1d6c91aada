//! Kubernetes events from controllers, as `kubectl get events` and `kubectl describe` show
//! them: client-go's event recorder in async Rust.
//!
//! [`EventRecorder::publish`] never blocks and never fails a reconcile: events go into a
//! bounded buffer (1,000) that one task writes to the API server, in `events.k8s.io/v1` where
//! the server serves it (found once by discovery) and in `core/v1` otherwise. Before they are
//! written, a per-object spam filter (a burst of 25, then one per 5 minutes: client-go's
//! defaults) drops floods, and repeats of an event (same action, reason, object and related
//! object) count into one event's series instead of each making an object. Dropped events are
//! logged and counted ([`EventMetrics`]); a write that fails for a passing reason is retried
//! up to 12 times, 10 s apart (client-go's numbers).

mod correlator;
mod recorder;

pub use recorder::{DropReason, EventMetrics, EventRecorder, EventType, NewEvent};
