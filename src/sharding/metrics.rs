//! [`ShardingMetrics`]: what a ring's [`Sharder`](super::Sharder) reports after each pass, and
//! every assignment and drain it makes. The `metrics` feature's
//! [`Registry`](crate::metrics::Registry) implements it (`ctrlkit_sharding_*`).

/// Why the sharder labelled an object to a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignReason {
    /// It had no shard: a new object, or one its shard gave up after a drain.
    Unassigned,
    /// Its shard was expired or dead: moved at once, without a drain.
    ShardStopped,
}

impl AssignReason {
    /// The label value: `unassigned`, `shard_stopped`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unassigned => "unassigned",
            Self::ShardStopped => "shard_stopped",
        }
    }
}

/// Hooks a [`Sharder`](super::Sharder) calls; see the module docs.
/// A hook that panics is caught and logged, and costs only that observation. Every hook
/// does nothing by default: an exporter implements those it records, and a hook added later
/// breaks no implementor.
pub trait ShardingMetrics: Send + Sync {
    /// After a pass: the primary objects labelled to `shard`, for each shard that holds any
    /// (a shard missing from `counts` holds none).
    fn objects(&self, ring: &str, counts: &[(String, usize)]) {
        let _ = (ring, counts);
    }
    /// After a pass: how many shards are ready, expired and dead.
    fn members(&self, ring: &str, ready: usize, expired: usize, dead: usize) {
        let _ = (ring, ready, expired, dead);
    }
    /// An object was labelled to a shard (a write that went through).
    fn assigned(&self, ring: &str, reason: AssignReason) {
        let _ = (ring, reason);
    }
    /// An object was marked for draining on its live shard.
    fn drained(&self, ring: &str) {
        let _ = ring;
    }
}
