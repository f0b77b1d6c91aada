//! The connections an HTTPS server holds, and which goes when a new one comes at the cap.
//!
//! Contract:
//! - Below the cap, every connection is accepted.
//! - At the cap, a new connection is accepted only if one held may be shed for it: one still
//!   in its handshake, its request's headers or body, or idle (never one whose whole request
//!   has arrived: its answer is on its way), and accepted at least [`SHED_GRACE`] ago (so a
//!   newcomer has the time to send its request before it can be shed in turn). Of those, the
//!   one that has sent least for longest goes: the fewest bytes per second since it was
//!   accepted. A slow client trickling its request scores lowest; an API server's
//!   connection, which sends a review in one go, highest.
//! - Otherwise the newcomer waits in the listen backlog until a connection closes, goes
//!   idle, or passes its grace.
//!
//! No cap per peer address: an API server opens a connection per concurrent call from one to
//! three addresses, and would be throttled first.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::limits::Activity;

/// How long a new connection is spared at the cap: its time to send its request.
pub(crate) const SHED_GRACE: Duration = Duration::from_secs(1);

struct Held {
    activity: Activity,
    /// Its task, once spawned.
    task: Option<AbortHandle>,
    /// Shed already: its task is aborted but may not have stopped yet. Never chosen again,
    /// nor counted toward the cap.
    shed: bool,
}

/// The connections a server holds: see the module docs.
pub(crate) struct Connections {
    cap: usize,
    held: Mutex<(u64, HashMap<u64, Held>)>,
    /// Told when a connection closes or goes idle: room may have come.
    room: Arc<Notify>,
}

/// A connection's place in [`Connections`], given up when dropped (with its task).
pub(crate) struct Place {
    connections: Arc<Connections>,
    id: u64,
}

impl Place {
    /// Its id among the connections.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.connections.held.lock().1.remove(&self.id);
        self.connections.room.notify_one();
    }
}

/// Whether a new connection may be accepted now.
pub(crate) enum Admission {
    /// Yes: below the cap, or with one to shed.
    Now,
    /// Not before this instant (a connection's grace ends), or a connection closing or going
    /// idle (`None`: only that).
    Wait(Option<Instant>),
}

impl Connections {
    /// No connection yet, `cap` at most (1 at least).
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            cap: cap.max(1),
            held: Mutex::new((0, HashMap::new())),
            room: Arc::new(Notify::new()),
        })
    }

    /// Holds a new connection: its place and its activity.
    pub(crate) fn hold(self: &Arc<Self>) -> (Place, Activity) {
        let activity = Activity::new(self.room.clone());
        let mut held = self.held.lock();
        let id = held.0;
        held.0 += 1;
        held.1.insert(id, Held { activity: activity.clone(), task: None, shed: false });
        (Place { connections: self.clone(), id }, activity)
    }

    /// Records the task serving the connection `place` (a [`Place::id`]), so that it can be
    /// shed (a task that ended already is not recorded).
    pub(crate) fn serving(&self, place: u64, task: AbortHandle) {
        if let Some(held) = self.held.lock().1.get_mut(&place) {
            held.task = Some(task);
        }
    }

    /// How many connections are held (those shed, whose tasks may still be stopping, aside).
    pub(crate) fn len(&self) -> usize {
        Self::counted(&self.held.lock().1)
    }

    /// How many of `held` count toward the cap: all but those shed.
    fn counted(held: &HashMap<u64, Held>) -> usize {
        held.values().filter(|h| !h.shed).count()
    }

    /// Whether a new connection may be accepted now.
    pub(crate) fn admission(&self, now: Instant) -> Admission {
        let held = self.held.lock();
        if Self::counted(&held.1) < self.cap {
            return Admission::Now;
        }
        let mut spared_until: Option<Instant> = None;
        for held in held.1.values() {
            if held.shed || !held.activity.phase().sheddable() {
                continue;
            }
            let until = held.activity.sent().0 + SHED_GRACE;
            if until <= now {
                return Admission::Now;
            }
            spared_until = Some(spared_until.map_or(until, |at| at.min(until)));
        }
        Admission::Wait(spared_until)
    }

    /// At the cap, sheds the connection that has sent least for longest, if one may be shed;
    /// returns whether one was.
    pub(crate) fn shed_one(&self, now: Instant) -> bool {
        let task = {
            let mut held = self.held.lock();
            if Self::counted(&held.1) <= self.cap {
                return false;
            }
            let victim = held
                .1
                .iter_mut()
                .map(|(_, h)| h)
                .filter(|h| !h.shed && h.activity.phase().sheddable() && h.task.is_some())
                .map(|h| {
                    let sent = h.activity.sent();
                    (h, sent)
                })
                .filter(|(_, (accepted, _))| *accepted + SHED_GRACE <= now)
                // Bytes per second, compared as `bytes_a × age_b < bytes_b × age_a`.
                .min_by(|(_, (at_a, sent_a)), (_, (at_b, sent_b))| {
                    let rate_a = u128::from(*sent_a) * (now - *at_b).as_nanos();
                    let rate_b = u128::from(*sent_b) * (now - *at_a).as_nanos();
                    rate_a.cmp(&rate_b).then(at_a.cmp(at_b))
                });
            victim.and_then(|(held, _)| {
                // Its task stops at its next poll, which may come after the next admission.
                held.shed = true;
                held.task.clone()
            })
        };
        match task {
            Some(task) => {
                task.abort();
                true
            }
            None => false,
        }
    }

    /// Resolves once a connection closed or went idle since the last call.
    pub(crate) async fn room(&self) {
        self.room.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn at_the_cap_the_connection_that_sent_least_for_longest_is_shed() {
        let connections = Connections::new(3);
        let mut tasks = tokio::task::JoinSet::new();
        let mut hold = |bytes: usize, phase: fn(&Activity)| {
            let (place, activity) = connections.hold();
            activity.handshaken();
            phase(&activity);
            activity.received(bytes);
            let task = tasks.spawn(std::future::pending::<()>());
            let id = task.id();
            connections.serving(place.id(), task);
            (place, id)
        };
        // 300 bytes over 8 s (37 B/s) against 2,000 over 3 s: the first sent least for longest.
        let (trickling, trickling_task) = hold(300, |_| {});
        tokio::time::advance(Duration::from_secs(5)).await;
        let _quick = hold(2_000, |a| a.headers_read(false));
        tokio::time::advance(Duration::from_secs(2)).await;
        // Its whole request is in: never shed, however little it sent.
        let _answered = hold(10, |a| a.headers_read(true));
        assert!(matches!(connections.admission(Instant::now()), Admission::Now));
        let _newcomer = hold(0, |_| {});
        assert!(connections.shed_one(Instant::now()));
        let shed = tasks.join_next().await.unwrap().unwrap_err().id();
        assert_eq!(shed, trickling_task, "the trickling connection was shed");
        drop(trickling);
        assert_eq!(connections.len(), 3);
        assert!(!connections.shed_one(Instant::now()), "back at the cap: none to shed");
    }

    /// A burst of admissions at the cap: each shed picks a new victim, and those shed (whose
    /// tasks have not stopped yet) no longer count. Before, the second shed picked the first
    /// victim again, and the server held cap + 1 connections.
    #[tokio::test(start_paused = true)]
    async fn a_burst_at_the_cap_sheds_distinct_connections_and_holds_at_most_the_cap() {
        let cap = 3;
        let connections = Connections::new(cap);
        let mut tasks = tokio::task::JoinSet::new();
        for bytes in [10, 20, 30] {
            let (place, activity) = connections.hold();
            activity.handshaken();
            activity.received(bytes);
            let id = place.id();
            // Its place goes with its task, as the server's does.
            let task = tasks.spawn(async move {
                let _place = place;
                std::future::pending::<()>().await
            });
            connections.serving(id, task);
        }
        tokio::time::advance(SHED_GRACE * 2).await;
        let mut newcomers = Vec::new();
        for _ in 0..2 {
            assert!(matches!(connections.admission(Instant::now()), Admission::Now));
            newcomers.push(connections.hold());
            assert!(connections.shed_one(Instant::now()), "one to shed for the newcomer");
            assert!(connections.len() <= cap, "{} held, cap {cap}", connections.len());
        }
        let first = tasks.join_next().await.unwrap().unwrap_err().id();
        let second = tasks.join_next().await.unwrap().unwrap_err().id();
        assert_ne!(first, second, "the same connection was shed twice");
        assert_eq!(connections.len(), cap);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_whose_whole_request_arrived_is_never_shed() {
        let connections = Connections::new(1);
        let (place, activity) = connections.hold();
        activity.handshaken();
        activity.headers_read(true);
        let mut tasks = tokio::task::JoinSet::new();
        connections.serving(place.id(), tasks.spawn(std::future::pending::<()>()));
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(matches!(connections.admission(Instant::now()), Admission::Wait(None)));
        let (newcomer, _) = connections.hold();
        connections.serving(newcomer.id(), tasks.spawn(std::future::pending::<()>()));
        assert!(!connections.shed_one(Instant::now()), "the newcomer is within its grace");
        // A connection within its grace is not shed either, but only until its grace ends.
        drop(place);
        let spared = Instant::now() + SHED_GRACE;
        assert!(
            matches!(connections.admission(Instant::now()), Admission::Wait(Some(at)) if at == spared)
        );
    }
}
