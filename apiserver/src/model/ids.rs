//! Identities and clocks, at the bottom of the server: the uid a new object gets and the
//! time stamps Kubernetes writes, for every layer above the store.

use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::jiff::Timestamp;

/// The current time as Kubernetes writes it: RFC 3339, whole seconds, UTC.
pub(crate) fn now() -> String {
    Timestamp::from_second(Timestamp::now().as_second()).map(|t| t.to_string()).unwrap_or_default()
}

/// A random-looking, unique UUID-shaped uid.
pub(crate) fn new_uid() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let seed = {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(n)
    };
    let hi = seed ^ (n.rotate_left(17));
    format!(
        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        (hi >> 32) as u32,
        (hi >> 16) as u16,
        (hi & 0xfff) as u16,
        (n >> 48) as u16 & 0xfff,
        n & 0xffff_ffff_ffff
    )
}
