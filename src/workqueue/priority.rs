//! [`Priority`]: which ready items a worker gets first.

use std::fmt;

/// How urgently an item should be handed out: higher first, FIFO among equals.
///
/// Any `i32` is a priority; the two named ones are those controller-runtime's priority queue
/// uses. [`WorkQueue::add`](super::WorkQueue::add) adds at [`NORMAL`](Self::NORMAL); a
/// controller adds the objects of an informer's initial list and unchanged resyncs at
/// [`LOW`](Self::LOW), so that after a restart the objects that really changed are reconciled
/// before the flood of objects that did not.
///
/// Priorities order only the items ready now: a waiting (`add_after`) item enters at its
/// deadline with its priority, and an item that has waited longer than the queue's
/// [aging period](super::WorkQueueBuilder::aging) is served before newer items of any priority,
/// so low priorities are delayed, never starved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Priority(pub i32);

impl Priority {
    /// Work that can wait for everything else: initial-list adds and unchanged resyncs
    /// (controller-runtime's `handler.LowPriority`, -100).
    pub const LOW: Priority = Priority(-100);
    /// The priority of a plain `add` (0).
    pub const NORMAL: Priority = Priority(0);
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<i32> for Priority {
    fn from(value: i32) -> Self {
        Priority(value)
    }
}
