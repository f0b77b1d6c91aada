//! Fencing by the replica's own clock: what it holds (a leader Lease, a shard Lease), and until
//! when, so that work starts only while everything it runs under is held.
//!
//! A candidate holds a Lease until the instant its last successful write of it was *sent*
//! plus its renew deadline ([`Hold`]). Others may take the Lease over only a lease duration
//! after they observed that write, which is after it was sent; and the configuration is
//! checked so that the renew deadline, with a jittered retry period to spare, ends before the
//! lease duration does. So at every instant a replica that still holds a Lease by its own
//! clock is the only one that may.
//!
//! The clock is tokio's (the process's monotonic clock; the paused clock in tests), read when
//! a reconcile is about to start, never a timer waited on: a process frozen past its lease
//! duration (a stop signal, a frozen VM, a long pause) and then resumed finds, at its first
//! look, that its holds have lapsed, whatever order its tasks resume in.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Until when this replica holds one Lease, by its own monotonic clock: shared by the
/// candidate that renews it and whoever checks it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hold {
    until: Arc<Mutex<Option<Instant>>>,
}

impl Hold {
    /// Held until `until` (`None`: not held).
    pub(crate) fn set(&self, until: Option<Instant>) {
        *self.until.lock() = until;
    }

    /// Until when it is held, if it is held at all.
    pub(crate) fn until(&self) -> Option<Instant> {
        *self.until.lock()
    }

    /// Whether it is held now.
    pub(crate) fn holds(&self) -> bool {
        self.until().is_some_and(|until| Instant::now() < until)
    }
}

/// A mark of work under a Lease still alive: carried by every task that may reconcile under
/// it (inside the [`Fence`] its runnables get), so that whoever releases the Lease can wait
/// until the last of them is gone (the channel's receiver sees its end once every mark is
/// dropped).
#[derive(Debug, Clone)]
// Held, never read: its drop is the signal.
pub(crate) struct Working(#[allow(dead_code)] tokio::sync::mpsc::Sender<()>);

impl Working {
    /// A mark, and what resolves once it and every clone of it are dropped.
    pub(crate) fn new() -> (Self, impl Future<Output = ()> + Send) {
        let (mark, mut gone) = tokio::sync::mpsc::channel(1);
        (Self(mark), async move { while gone.recv().await.is_some() {} })
    }
}

/// Every Lease a runnable runs under, each with what it is (`leader Lease`, `shard Lease`):
/// the runnable may start work only while all of them are held. A fence of none always holds.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fence {
    holds: Vec<(&'static str, Hold)>,
    /// The marks of the work under those Leases, which every clone carries.
    working: Vec<Working>,
}

impl Fence {
    /// This fence and `hold`, the Lease named `what`.
    #[must_use]
    pub(crate) fn with(mut self, what: &'static str, hold: Hold) -> Self {
        self.holds.push((what, hold));
        self
    }

    /// This fence, its clones marked as work under its Leases by `working`.
    #[must_use]
    pub(crate) fn marked(mut self, working: Working) -> Self {
        self.working.push(working);
        self
    }

    /// The same Leases, without the marks: for what outlives the work (a controller's
    /// shared state), so that it does not hold a release back.
    #[must_use]
    pub(crate) fn unmarked(&self) -> Self {
        Self { holds: self.holds.clone(), working: Vec::new() }
    }

    /// The first Lease no longer held now, if any.
    pub(crate) fn lapsed(&self) -> Option<&'static str> {
        self.holds.iter().find(|(_, hold)| !hold.holds()).map(|(what, _)| *what)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_fence_holds_until_the_first_of_its_holds_lapses() {
        let (leader, shard) = (Hold::default(), Hold::default());
        let fence = Fence::default()
            .with("leader Lease", leader.clone())
            .with("shard Lease", shard.clone());
        assert_eq!(fence.lapsed(), Some("leader Lease"), "nothing held yet");
        let now = Instant::now();
        leader.set(Some(now + Duration::from_secs(10)));
        shard.set(Some(now + Duration::from_secs(5)));
        assert_eq!(fence.lapsed(), None);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(fence.lapsed(), Some("shard Lease"), "held until, not through, the instant");
        shard.set(None);
        assert_eq!(fence.lapsed(), Some("shard Lease"));
        assert!(Fence::default().lapsed().is_none(), "a fence of none always holds");
    }
}
