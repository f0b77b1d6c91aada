//! Panics in user code (handlers, transforms, mappers, reconcilers) are caught at the
//! boundary where ctrlkit calls that code, logged and counted, never allowed to tear down an
//! informer or a worker. This module turns a caught panic into a message.

use std::any::Any;

/// The message of a caught panic: its `&str` or `String` payload, or a placeholder.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".to_owned())
}

/// Runs `f`, turning a panic into `Err(message)`.
pub(crate) fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| panic_message(&*p))
}

/// Calls a metrics hook (user code: any `*Metrics` implementation). A panic in it is logged
/// and that one observation lost; it never unwinds into the queue, informer, worker, elector,
/// recorder or sharder that reported it, whose work a metric must not change (a queue halfway
/// through applying a batch of adds would lose the rest).
pub(crate) fn observe(hook: &'static str, f: impl FnOnce()) {
    if let Err(panic) = catch(f) {
        tracing::error!(hook, %panic, "a metrics hook panicked; its observation is lost");
    }
}
