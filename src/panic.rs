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
