//! The runnables of one [`Manager`](super::Manager): one table that `run`, the manager's
//! [`ManagerHandle`](super::ManagerHandle)s and the runnables' own tasks share, so that a
//! runnable added before `run` and one added while it runs take the same path.
//!
//! Invariants (under the table's lock):
//! - An entry is `Waiting` until the phase it starts in has been reached (and, after the
//!   caches synced, the Lease it runs under is held), then `Running` with its own stop signal
//!   and the handle of its task, then gone: removed, returned on its own (its runnable,
//!   ready check and series let go of then), or dropped with the table's end. Nothing of an
//!   entry gone is kept: an id below `next` and not in `entries` is one that is gone, which
//!   is all a later removal of it needs to know, so the table holds only what runs or waits.
//! - A phase once reached stays reached: [`Table::reach`] starts every entry waiting for it,
//!   and an entry inserted after that starts at once, under the same lock, so none is missed.
//! - A task's end is told by a guard the task owns, on every path (returned, panicked,
//!   aborted): the guard drops its hold on the runnable first, then updates the entry, then
//!   tells the run loop (`Ended`) and, for an entry being removed, its remover.
//! - No method of a runnable runs under the lock (a panic there would drop tasks whose
//!   guards take it): what the table needs of one is asked once, as it is added.
//! - Nothing starts once the manager is stopping; the fences of the Lease groups are dropped
//!   then, so that the table holds no mark that would keep a Lease's release waiting.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::{AbortHandle, BoxFuture};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

use super::error::{Abandoned, HandleError};
use super::id::RunnableId;
use super::outcome::Outcome;
use super::removal::{Done, Stopping};
use super::telemetry::{Forget, Telemetry};
use crate::controller::ControllerError;
use crate::fence::Fence;
use crate::runnable::{Phase, ReadyCheck, Runnable, RunnableError, Stop};

/// A task's end, as the run loop hears of it: with the runnable's failure, unless someone
/// removing it took the outcome.
pub(super) struct Ended {
    pub(super) name: String,
    pub(super) failure: Option<RunnableError>,
}

/// Where the manager's run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    /// Not running yet: entries wait.
    Open,
    /// Running: entries start as their phases are reached.
    Running,
    /// Stopping or stopped: nothing is added or started any more.
    Stopping,
}

/// A Lease group as the table places runnables under it.
#[derive(Clone)]
struct Group {
    /// Its index among the run loop's groups.
    index: usize,
    /// Its fence, once the Lease is held.
    fence: Option<Fence>,
}

/// The phases reached so far.
#[derive(Default)]
struct Reached {
    servers: bool,
    caches: bool,
    synced: bool,
    shard: Option<Group>,
    leader: Option<Group>,
}

/// A phase reached, told by the run loop.
pub(super) enum Reach {
    /// Servers start.
    Servers,
    /// The informers started: cache runnables start.
    Caches,
    /// The caches synced: the rest starts, those under a Lease once their group's is held.
    Synced {
        /// The shard Lease's group, if sharded.
        shard: Option<usize>,
        /// The leader Lease's group, with leader election.
        leader: Option<usize>,
    },
    /// The Lease of group `index` is held, fenced by `fence`.
    Held { index: usize, fence: Fence },
}

enum Run {
    Waiting,
    Running {
        stop: watch::Sender<bool>,
        abort: AbortHandle,
        /// The group it runs under, if any.
        group: Option<usize>,
        /// Its removal, once begun: told of its outcome instead of the run loop.
        removal: Option<Removing>,
    },
}

/// A removal under way, as the table keeps it.
struct Removing {
    /// Where its outcome goes (taken when it ends).
    outcome: Option<oneshot::Sender<Outcome>>,
    /// The removal's own outcome, for a second remover to wait on.
    done: Done,
}

struct Entry {
    runnable: Arc<dyn Runnable>,
    name: String,
    phase: Phase,
    /// [`Runnable::needs_shard_membership`] and [`Runnable::needs_leader_election`], asked
    /// once, outside the lock.
    needs_shard: bool,
    needs_leader: bool,
    check: Option<ReadyCheck>,
    forget: Option<Forget>,
    /// For a controller added while the manager runs: whether its caches synced, which
    /// `caches-synced` waits for.
    synced: Option<ReadyCheck>,
    /// The controller name no other entry may hold, if it claims one.
    unique_name: Option<String>,
    run: Run,
}

struct State {
    next: u64,
    lifecycle: Lifecycle,
    entries: BTreeMap<RunnableId, Entry>,
    reached: Reached,
    /// The runtime `run` runs on: a handle may add from any thread.
    runtime: Option<tokio::runtime::Handle>,
    /// The controller names claimed: by an add on its way in (before its controller is
    /// built, so that a refused one touches nothing of the first's), then by its entry until
    /// the entry's metric series are forgotten.
    claimed: BTreeSet<String>,
}

/// A controller name claimed for an add ([`Table::claim`]); freed when dropped, unless the
/// add's entry takes it over.
pub(super) struct NameClaim {
    table: Arc<Table>,
    name: Option<String>,
}

impl NameClaim {
    /// The name, now the entry's to free.
    fn take(mut self) -> Option<String> {
        self.name.take()
    }
}

impl Drop for NameClaim {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            self.table.lock().claimed.remove(&name);
        }
    }
}

/// The table; see the module docs.
pub(super) struct Table {
    state: Mutex<State>,
    ended: mpsc::UnboundedSender<Ended>,
    /// Taken by the one `run`.
    ended_rx: Mutex<Option<mpsc::UnboundedReceiver<Ended>>>,
    telemetry: Telemetry,
}

/// A removal begun: what the remover waits on.
pub(super) enum Removal {
    /// It was not running: it left the table at once.
    Gone,
    /// It was told to stop: the removal is to be driven.
    Stopping(Stopping),
    /// Another remover began its removal: its outcome is this one's too.
    Pending { name: String, done: Done },
}

impl Table {
    pub(super) fn new(telemetry: Telemetry) -> Arc<Self> {
        let (ended, ended_rx) = mpsc::unbounded_channel();
        Arc::new(Self {
            state: Mutex::new(State {
                next: 0,
                lifecycle: Lifecycle::Open,
                entries: BTreeMap::new(),
                reached: Reached::default(),
                runtime: None,
                claimed: BTreeSet::new(),
            }),
            ended,
            ended_rx: Mutex::new(Some(ended_rx)),
            telemetry,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Claims the controller name `name` for an add, before its controller is built:
    /// refused if another add or entry holds it. A name is freed when its entry leaves
    /// (removed, or returned on its own) and its metric series are forgotten, so that a
    /// controller added in its place has series of its own.
    pub(super) fn claim(
        self: &Arc<Self>,
        name: Option<&str>,
    ) -> Result<Option<NameClaim>, HandleError> {
        let Some(name) = name else { return Ok(None) };
        if !self.lock().claimed.insert(name.to_owned()) {
            return Err(HandleError::DuplicateName { name: name.to_owned() });
        }
        Ok(Some(NameClaim { table: self.clone(), name: Some(name.to_owned()) }))
    }

    /// Adds `runnable`, started at once if its phase has been reached; refused once the
    /// manager is stopping. `synced`, a controller's, joins `caches-synced` if the manager
    /// runs (before, the factory's first sync covers the informers it asked for). `claim`,
    /// a controller's name ([`claim`](Self::claim)), becomes the entry's.
    pub(super) fn insert(
        self: &Arc<Self>,
        runnable: Arc<dyn Runnable>,
        forget: Option<Forget>,
        synced: Option<ReadyCheck>,
        claim: Option<NameClaim>,
    ) -> Result<RunnableId, HandleError> {
        // The user's methods run before the lock is taken: a panic in one is the add's, and
        // leaves no task of the table to be dropped while it is held.
        let name = runnable.name();
        let check = runnable.ready_check();
        let phase = runnable.phase();
        let needs_shard = runnable.needs_shard_membership();
        let needs_leader = runnable.needs_leader_election();
        let mut state = self.lock();
        if state.lifecycle == Lifecycle::Stopping {
            drop(state); // the claim's drop takes the lock
            drop(claim);
            return Err(HandleError::Stopped { runnable: name });
        }
        let unique_name = claim.and_then(NameClaim::take);
        let id = RunnableId(state.next);
        state.next += 1;
        if let Some(check) = &check {
            self.telemetry.add_ready_check(&name, check.clone());
        }
        let synced = synced.filter(|_| state.lifecycle == Lifecycle::Running);
        let run = Run::Waiting;
        let entry = Entry {
            runnable,
            name,
            phase,
            needs_shard,
            needs_leader,
            check,
            forget,
            synced,
            unique_name,
            run,
        };
        state.entries.insert(id, entry);
        let starts = self.start_waiting(&mut state);
        drop(state);
        starts.spawn();
        Ok(id)
    }

    /// Marks the manager running and hands its loop the ends of tasks (`None` for a second
    /// run, which cannot happen: `run` takes the manager).
    pub(super) fn run(&self) -> Option<mpsc::UnboundedReceiver<Ended>> {
        let mut state = self.lock();
        state.lifecycle = Lifecycle::Running;
        state.runtime = Some(tokio::runtime::Handle::current());
        drop(state);
        self.ended_rx.lock().take()
    }

    /// Records a phase reached and starts what waited for it.
    pub(super) fn reach(self: &Arc<Self>, reach: Reach) {
        let mut state = self.lock();
        if state.lifecycle != Lifecycle::Running {
            return;
        }
        let reached = &mut state.reached;
        match reach {
            Reach::Servers => reached.servers = true,
            Reach::Caches => reached.caches = true,
            Reach::Synced { shard, leader } => {
                reached.synced = true;
                reached.shard = shard.map(|index| Group { index, fence: None });
                reached.leader = leader.map(|index| Group { index, fence: None });
            }
            Reach::Held { index, fence } => {
                for group in [&mut reached.shard, &mut reached.leader].into_iter().flatten() {
                    if group.index == index {
                        group.fence = Some(fence.clone());
                    }
                }
            }
        }
        let starts = self.start_waiting(&mut state);
        drop(state);
        starts.spawn();
    }

    /// Where `entry` would run now: its fence and its group; `None` while it must wait.
    fn placement(reached: &Reached, entry: &Entry) -> Option<Placement> {
        let unfenced = Some(Placement { fence: Fence::default(), group: None });
        match entry.phase {
            Phase::Server => unfenced.filter(|_| reached.servers),
            Phase::Cache => unfenced.filter(|_| reached.caches),
            Phase::AfterCacheSync if !reached.synced => None,
            Phase::AfterCacheSync => {
                // The shard Lease comes first, so that one asking for both runs on every
                // member of the ring.
                let shard = reached.shard.as_ref().filter(|_| entry.needs_shard);
                let leader = reached.leader.as_ref().filter(|_| entry.needs_leader);
                match shard.or(leader) {
                    None => unfenced,
                    Some(group) => group
                        .fence
                        .clone()
                        .map(|fence| Placement { fence, group: Some(group.index) }),
                }
            }
        }
    }

    /// Marks running every waiting entry whose phase has been reached; the tasks are
    /// spawned once the lock is released (a runtime shutting down drops a task at its spawn,
    /// and its guard then takes the lock).
    fn start_waiting(self: &Arc<Self>, state: &mut State) -> Starts {
        let State { entries, reached, runtime, lifecycle, .. } = state;
        let mut starts = Starts { runtime: runtime.clone(), tasks: Vec::new() };
        if *lifecycle != Lifecycle::Running {
            return starts;
        }
        for (id, entry) in entries.iter_mut() {
            if !matches!(entry.run, Run::Waiting) {
                continue;
            }
            let Some(placement) = Self::placement(reached, entry) else { continue };
            let (run, task) = self.task(*id, entry, placement);
            entry.run = run;
            starts.tasks.push(task);
        }
        starts
    }

    /// `entry`'s task under `placement`, to spawn, and the entry's state once it is.
    fn task(
        self: &Arc<Self>,
        id: RunnableId,
        entry: &Entry,
        placement: Placement,
    ) -> (Run, BoxFuture<'static, ()>) {
        let (stop, stop_rx) = watch::channel(false);
        let stop_signal = Stop::new(stop_rx, placement.fence);
        let mut guard = TaskGuard {
            id,
            table: self.clone(),
            runnable: Some(entry.runnable.clone()),
            outcome: None,
        };
        let span = tracing::info_span!("runnable", name = %entry.name);
        // The start future borrows the guard, so it is dropped before the guard is (an
        // aborted task included): the guard's report comes after the runnable let go. An
        // abort (before the first poll too) ends the task at its next poll.
        let (task, abort) = futures::future::abortable(async move {
            if let Some(runnable) = &guard.runnable {
                let result = AssertUnwindSafe(runnable.start(stop_signal)).catch_unwind().await;
                // A panic is the runnable's failure, reported as such.
                let result = result.unwrap_or_else(|panic| Err(panicked(&*panic)));
                guard.returned(result);
            }
        });
        let task = task.map(drop).instrument(span).boxed();
        (Run::Running { stop, abort, group: placement.group, removal: None }, task)
    }

    /// A task's end (from its guard): the entry updated, then the remover or the run loop
    /// told.
    fn ended(&self, id: RunnableId, outcome: Outcome) {
        let mut state = self.lock();
        let Some(entry) = state.entries.get_mut(&id) else { return };
        let removal = match &mut entry.run {
            Run::Running { removal: Some(removing), .. } => removing.outcome.take(),
            _ => None,
        };
        let name = entry.name.clone();
        if let Some(removal) = removal {
            let entry = state.entries.remove(&id);
            drop(state);
            if let Some(entry) = entry {
                self.forget(entry);
            }
            // A shard that fenced itself stops the manager at once, removed or not, as a
            // lost Lease does: its ranges move only once the shard's Lease is released. The
            // remover hears the same error.
            let fenced = match &outcome {
                Outcome::Returned(Err(err)) => fenced_itself(err.as_ref()),
                _ => None,
            };
            let failure = fenced.map(|err| Box::new(err) as RunnableError);
            let _ = removal.send(outcome);
            let _ = self.ended.send(Ended { name, failure });
            return;
        }
        // Returned on its own: let go of now; a removal of its id finds it gone.
        let entry = state.entries.remove(&id);
        drop(state);
        if let Some(entry) = entry {
            self.forget(entry);
        }
        let failure = match outcome {
            Outcome::Returned(Ok(())) => {
                tracing::info!(runnable = %name, "runnable finished");
                None
            }
            Outcome::Returned(Err(err)) => Some(err),
            Outcome::Aborted => None,
        };
        let _ = self.ended.send(Ended { name, failure });
    }

    /// Its ready check out of `/readyz`, its metric series forgotten, its runnable dropped;
    /// then its name freed, not before: a controller added under it builds series anew.
    fn forget(&self, entry: Entry) {
        if let Some(check) = &entry.check {
            self.telemetry.remove_ready_check(&entry.name, check);
        }
        if let Some(forget) = entry.forget {
            forget();
        }
        if let Some(name) = entry.unique_name {
            self.lock().claimed.remove(&name);
        }
    }

    /// Begins removing `id`: one waiting leaves at once, and one gone already (finished on
    /// its own, or removed) is gone; one running is told to stop, its outcome to come to the
    /// removal; one being removed already is awaited. Once the manager stops (it stops them
    /// all), any other answers `Stopped`. An id this table never handed out is not found.
    pub(super) fn begin_removal(&self, id: RunnableId) -> Result<Removal, HandleError> {
        let mut state = self.lock();
        let stopping = state.lifecycle == Lifecycle::Stopping;
        let Some(entry) = state.entries.get_mut(&id) else {
            return match (stopping, id.0 < state.next) {
                (true, _) => Err(HandleError::Stopped { runnable: id.to_string() }),
                (false, true) => Ok(Removal::Gone),
                (false, false) => Err(HandleError::NotFound(id)),
            };
        };
        if let Run::Running { removal: Some(removing), .. } = &entry.run {
            return Ok(Removal::Pending { name: entry.name.clone(), done: removing.done.clone() });
        }
        if stopping {
            return Err(HandleError::Stopped { runnable: entry.name.clone() });
        }
        if let Run::Running { stop, abort, removal, .. } = &mut entry.run {
            let (tx, outcome) = oneshot::channel();
            let (done, done_rx) = watch::channel(None);
            *removal = Some(Removing { outcome: Some(tx), done: done_rx });
            stop.send_replace(true);
            return Ok(Removal::Stopping(Stopping {
                name: entry.name.clone(),
                runnable: entry.runnable.clone(),
                abort: abort.clone(),
                outcome,
                done,
                runtime: state.runtime.clone(),
            }));
        }
        let entry = state.entries.remove(&id);
        drop(state);
        if let Some(entry) = entry {
            self.forget(entry);
        }
        Ok(Removal::Gone)
    }

    /// The manager stops: nothing starts any more, the Lease groups' fences are dropped
    /// (their marks must not hold a release back), and every runnable is told to stop.
    pub(super) fn stop(&self) {
        let mut state = self.lock();
        state.lifecycle = Lifecycle::Stopping;
        state.reached = Reached::default();
        for entry in state.entries.values() {
            if let Run::Running { stop, .. } = &entry.run {
                stop.send_replace(true);
            }
        }
    }

    /// Aborts every running task (each tells its end as it goes).
    pub(super) fn abort_all(&self) {
        let aborts: Vec<AbortHandle> = {
            let state = self.lock();
            let running = state.entries.values().filter_map(|e| match &e.run {
                Run::Running { abort, .. } => Some(abort.clone()),
                _ => None,
            });
            running.collect()
        };
        // Outside the lock: a task's guard takes it as the task goes.
        aborts.iter().for_each(AbortHandle::abort);
    }

    /// How many tasks still run.
    pub(super) fn running(&self) -> usize {
        let state = self.lock();
        state.entries.values().filter(|e| matches!(e.run, Run::Running { .. })).count()
    }

    /// The runnables still running, with what they are doing.
    pub(super) fn abandoned(&self) -> Vec<Abandoned> {
        let running: Vec<(String, Arc<dyn Runnable>)> = {
            let state = self.lock();
            let running = state.entries.values().filter(|e| matches!(e.run, Run::Running { .. }));
            running.map(|e| (e.name.clone(), e.runnable.clone())).collect()
        };
        running
            .into_iter()
            .map(|(name, r)| Abandoned { runnable: name, in_flight: r.in_flight() })
            .collect()
    }

    /// The ready checks of the servers present now.
    pub(super) fn server_checks(&self) -> Vec<(String, ReadyCheck)> {
        let state = self.lock();
        let servers = state.entries.values().filter(|e| e.phase == Phase::Server);
        servers.filter_map(|e| Some((e.name.clone(), e.check.clone()?))).collect()
    }

    /// The names of the runnables, in the order they were added.
    pub(super) fn names(&self) -> Vec<String> {
        self.lock().entries.values().map(|e| e.name.clone()).collect()
    }

    /// Whether the caches of every controller added while the manager runs have synced
    /// (asked outside the lock).
    pub(super) fn caches_synced(&self) -> bool {
        let checks: Vec<ReadyCheck> = {
            let state = self.lock();
            state.entries.values().filter_map(|e| e.synced.clone()).collect()
        };
        checks.iter().all(|synced| synced())
    }

    /// How many runnables the table holds.
    pub(super) fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// The reconciles in flight of the runnables running under group `index`, each named by
    /// its runnable: what holds the Lease's release back.
    pub(super) fn in_flight(self: &Arc<Self>, index: usize) -> super::leases::InFlight {
        let table = Arc::downgrade(self);
        Arc::new(move || {
            let Some(table) = table.upgrade() else { return Vec::new() };
            let under: Vec<(String, Arc<dyn Runnable>)> = {
                let state = table.lock();
                let under = state
                    .entries
                    .values()
                    .filter(|e| matches!(e.run, Run::Running { group: Some(g), .. } if g == index));
                under.map(|e| (e.name.clone(), e.runnable.clone())).collect()
            };
            under
                .into_iter()
                .flat_map(|(name, r)| {
                    r.in_flight().into_iter().map(move |k| format!("{name}: {k}"))
                })
                .collect()
        })
    }

    /// The manager is gone (its run returned, or it was dropped): what still runs is
    /// aborted, and every runnable leaves the table, so that nothing a handle keeps alive
    /// holds a controller (and what it holds) past its manager.
    pub(super) fn close(&self) {
        let entries = {
            let mut state = self.lock();
            state.lifecycle = Lifecycle::Stopping;
            state.reached = Reached::default();
            state.runtime = None;
            std::mem::take(&mut state.entries)
        };
        for entry in entries.values() {
            if let Run::Running { abort, .. } = &entry.run {
                abort.abort();
            }
        }
        drop(entries);
    }
}

/// Tasks to spawn, once the table's lock is released.
#[must_use]
struct Starts {
    runtime: Option<tokio::runtime::Handle>,
    tasks: Vec<BoxFuture<'static, ()>>,
}

impl Starts {
    fn spawn(self) {
        let Some(runtime) = self.runtime else { return };
        for task in self.tasks {
            runtime.spawn(task);
        }
    }
}

/// Where a runnable runs: under which fence, in which Lease group.
struct Placement {
    fence: Fence,
    group: Option<usize>,
}

/// Owned by a runnable's task: on its drop (the task returned or was aborted) it lets go
/// of the runnable, then tells the table.
struct TaskGuard {
    id: RunnableId,
    table: Arc<Table>,
    runnable: Option<Arc<dyn Runnable>>,
    outcome: Option<Outcome>,
}

impl TaskGuard {
    /// Records what `start` returned, for the drop to tell.
    fn returned(&mut self, result: Result<(), RunnableError>) {
        self.outcome = Some(Outcome::Returned(result));
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        drop(self.runnable.take());
        let outcome = self.outcome.take().unwrap_or(Outcome::Aborted);
        self.table.ended(self.id, outcome);
    }
}

/// The error of a controller that fenced its shard after a stalled hand-off, if `err` is
/// one: what stops the manager at once, as a lost Lease does.
pub(super) fn fenced_itself(err: &(dyn std::error::Error + 'static)) -> Option<ControllerError> {
    let err = err.downcast_ref::<ControllerError>()?;
    matches!(err, ControllerError::HandOffTimeout { .. }).then(|| err.clone())
}

fn panicked(panic: &(dyn std::any::Any + Send)) -> RunnableError {
    format!("panicked: {}", crate::panic::panic_message(panic)).into()
}

#[cfg(test)]
#[path = "name_claim_tests.rs"]
mod name_claims;
