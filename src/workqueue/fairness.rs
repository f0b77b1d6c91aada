//! Fairness keys: which tenant an item belongs to, and the round-robin that takes ready items
//! across tenants instead of in the order they came.
//!
//! A [`FairnessKey`] is a list of levels (a namespace; or a cluster, then a namespace). Items
//! of one key form a *flow*; flows sharing their first levels form *groups*, one tree per
//! priority: a group's turn serves one item from the next of its children in rotation, so at
//! every level each group with ready items gets one item per round, however many children or
//! items it has. A child that gets ready items joins the back of its parent's rotation; a child
//! served goes to the back, or leaves the rotation once it has nothing left.
//!
//! The queue interns a flow (and its groups) at the first add of an item of a new key: an add
//! of an item already queued never reaches this module, so dedup comes before fairness and
//! costs it nothing. A group is freed when its last user goes (its items, the entries naming it,
//! its children) and its number reused, so namespace churn costs no memory beyond the peak of
//! groups in use at once (the tables keep that size). Keys of one queue
//! may have different numbers of levels: each key's flow sits at its own depth, so a one-level
//! key `a` and the group `a` of two-level keys `a/x` are two tenants of the first level.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, OnceLock};

use hashbrown::HashTable;

/// The most levels a fairness key has; more are folded into the last.
pub const MAX_FAIRNESS_LEVELS: usize = 4;

/// A group or flow number; `NONE` means no parent (a first-level group).
const NONE: u32 = u32::MAX;

/// Hashes levels with one seed per process, random, so that tenants cannot pick names whose
/// levels collide on purpose, and the same name gives the same level in every queue.
fn level_hasher() -> &'static foldhash::quality::RandomState {
    static HASHER: OnceLock<foldhash::quality::RandomState> = OnceLock::new();
    HASHER.get_or_init(foldhash::quality::RandomState::default)
}

/// Which tenant an item belongs to, as a list of levels: for a controller's keys the namespace
/// (cluster-scoped keys share one level of their own), for many clusters the cluster, then the
/// namespace. Items are taken round-robin across keys at each level in turn (see the
/// [module docs](super)).
///
/// Levels are kept as 64-bit hashes (a random seed per process), so a key is small and `Copy`;
/// two different names of one level collide with a chance of 2^-64, merging their two tenants.
///
/// ```
/// use ctrlkit::workqueue::FairnessKey;
///
/// let by_namespace = FairnessKey::new().level("team-a");
/// let by_cluster = FairnessKey::new().level("eu-1").level("team-a");
/// assert_ne!(by_namespace, by_cluster);
/// assert_eq!(by_cluster.levels(), 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FairnessKey {
    levels: [u64; MAX_FAIRNESS_LEVELS],
    len: u8,
}

impl FairnessKey {
    /// A key with no levels: every item with it shares one tenant.
    pub fn new() -> Self {
        Self::default()
    }

    /// The key with one more level, `value`'s hash. Past [`MAX_FAIRNESS_LEVELS`], the value
    /// is folded into the last level.
    #[must_use]
    pub fn level(mut self, value: impl Hash) -> Self {
        let hash = level_hasher().hash_one(value);
        let len = usize::from(self.len);
        if len < MAX_FAIRNESS_LEVELS {
            self.levels[len] = hash;
            self.len += 1;
        } else {
            let last = &mut self.levels[MAX_FAIRNESS_LEVELS - 1];
            *last = level_hasher().hash_one((*last, hash));
        }
        self
    }

    /// How many levels the key has.
    pub fn levels(&self) -> usize {
        usize::from(self.len)
    }
}

/// One level of a fair queue's fairness key, at one moment: bounded-cardinality figures, with
/// no series per group.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct FairnessLevelStats {
    /// Groups of this level with ready items (namespaces, clusters).
    pub groups: usize,
    /// The most ready items of one group.
    pub deepest: usize,
    /// The longest wait, in seconds, of a group's oldest ready item.
    pub longest_wait_seconds: f64,
}

/// One fairness level as the queue saw it: its figures, and its deepest groups by name.
#[derive(Debug, Default)]
pub(crate) struct LevelSnapshot {
    pub(crate) stats: FairnessLevelStats,
    pub(crate) deepest: Vec<(String, usize)>,
}

/// A fairness key's extractor.
pub(crate) type FairnessFn<T> = Arc<dyn Fn(&T) -> FairnessKey + Send + Sync>;
/// Names an item's level in logs.
pub(crate) type LabelFn<T> = Arc<dyn Fn(&T, usize) -> String + Send + Sync>;

/// How a queue finds its items' fairness keys: the function, and optionally how to name an
/// item's level in logs.
pub(crate) struct Fairness<T> {
    pub(crate) key: FairnessFn<T>,
    pub(crate) label: Option<LabelFn<T>>,
    /// At most this many items of one first-level group processing at once.
    pub(crate) max_in_flight: Option<usize>,
}

impl<T> Clone for Fairness<T> {
    fn clone(&self) -> Self {
        Self {
            key: Arc::clone(&self.key),
            label: self.label.clone(),
            max_in_flight: self.max_in_flight,
        }
    }
}

/// One group of one level (a flow is a group of the last level). It lives while it has users
/// (see [`Groups`]); then its number goes to the next new group.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) parent: u32,
    pub(crate) level: u8,
    /// The level's hash, and (flows only) the whole key, to find the group again.
    hash: u64,
    key: FairnessKey,
    /// Ready items of a flow, and of a first-level group (kept only when the queue counts
    /// them: with metrics or a cap).
    pub(crate) ready: usize,
    pub(crate) top_ready: usize,
    /// Items of this first-level group being processed (kept only under a cap).
    pub(crate) in_flight: usize,
    /// A flow (a whole key's group), not a group of the levels above one.
    pub(crate) is_flow: bool,
    /// Users: for a flow, the queue's items of its key (ready or processing) and the entries
    /// naming it in a round-robin (stale ones too) or at the fair bucket; for a group above,
    /// its children. At zero the group is freed.
    users: u32,
}

/// The groups and flows of one queue: interned at the first add of a new key, freed when their
/// last user goes (see [`Group::users`]), their numbers reused, so that memory and every walk
/// over the groups follow the tenants in use, not every tenant ever seen.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    pub(crate) groups: Vec<Group>,
    /// Groups of the first levels by (level, parent, hash); flows by their key's hash.
    inner: HashTable<u32>,
    flows: HashTable<u32>,
    depth: usize,
    /// For each flow, the first-level group it belongs to.
    pub(crate) top: Vec<u32>,
    /// Numbers of freed groups, for the next new ones.
    free: Vec<u32>,
}

impl Groups {
    /// The flow of `key`, made with its groups if new, with one more user: the caller gives
    /// it back with [`release`](Self::release).
    #[inline]
    pub(crate) fn flow(&mut self, key: FairnessKey) -> u32 {
        let flow = self.find_or_make(key);
        self.acquire(flow);
        flow
    }

    /// One more user of `group` (a flow: an entry naming it).
    #[inline]
    pub(crate) fn acquire(&mut self, group: u32) {
        self.groups[group as usize].users += 1;
    }

    /// One user fewer of `group`; at none, it is freed, and its parent loses a user.
    #[inline]
    pub(crate) fn release(&mut self, mut group: u32) {
        loop {
            let g = &mut self.groups[group as usize];
            g.users -= 1;
            if g.users > 0 {
                return;
            }
            let (parent, level, h, key) = (g.parent, usize::from(g.level), g.hash, g.key);
            let is_flow = g.is_flow;
            if is_flow {
                let hash = level_hasher().hash_one(key);
                if let Ok(e) = self.flows.find_entry(hash, |&g| g == group) {
                    e.remove();
                }
            } else if let Ok(e) =
                self.inner.find_entry(level_hasher().hash_one((level, parent, h)), |&g| g == group)
            {
                e.remove();
            }
            self.free.push(group);
            if parent == NONE {
                return;
            }
            group = parent;
        }
    }

    /// Groups alive now (for tests).
    #[cfg(test)]
    pub(crate) fn alive(&self) -> usize {
        self.groups.len() - self.free.len()
    }

    fn find_or_make(&mut self, key: FairnessKey) -> u32 {
        let hash = level_hasher().hash_one(key);
        let groups = &self.groups;
        if let Some(&flow) = self.flows.find(hash, |&g| groups[g as usize].key == key) {
            return flow;
        }
        self.make_flow(key, hash)
    }

    #[inline(never)]
    fn make_flow(&mut self, key: FairnessKey, hash: u64) -> u32 {
        // A key with no levels is a flow of the first level, as one with a single level.
        let depth = key.levels().max(1);
        self.depth = self.depth.max(depth);
        let mut parent = NONE;
        for level in 0..depth - 1 {
            let h = key.levels[level];
            let groups = &self.groups;
            let found = self.inner.find(level_hasher().hash_one((level, parent, h)), |&g| {
                let g = &groups[g as usize];
                usize::from(g.level) == level && g.parent == parent && g.hash == h
            });
            parent = match found {
                Some(&g) => g,
                None => {
                    let g = self.push(parent, level, h, FairnessKey::new(), false);
                    let groups = &self.groups;
                    self.inner.insert_unique(
                        level_hasher().hash_one((level, parent, h)),
                        g,
                        |&g| {
                            let g = &groups[g as usize];
                            level_hasher().hash_one((usize::from(g.level), g.parent, g.hash))
                        },
                    );
                    g
                }
            };
        }
        let flow = self.push(parent, depth - 1, key.levels[depth - 1], key, true);
        let groups = &self.groups;
        self.flows.insert_unique(hash, flow, |&g| level_hasher().hash_one(groups[g as usize].key));
        flow
    }

    /// A new group, a user of its parent.
    fn push(
        &mut self,
        parent: u32,
        level: usize,
        hash: u64,
        key: FairnessKey,
        is_flow: bool,
    ) -> u32 {
        let group = Group {
            parent,
            level: level as u8,
            hash,
            key,
            ready: 0,
            top_ready: 0,
            in_flight: 0,
            users: 0,
            is_flow,
        };
        let top = if parent == NONE { None } else { Some(self.top_of(parent)) };
        if parent != NONE {
            self.acquire(parent);
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.groups[id as usize] = group;
                id
            }
            None => {
                self.groups.push(group);
                self.top.push(0);
                u32::try_from(self.groups.len() - 1).expect("fewer than 2^32 fairness groups")
            }
        };
        self.top[id as usize] = top.unwrap_or(id);
        id
    }

    /// The first-level group `group` belongs to (itself, for one).
    pub(crate) fn top_of(&self, group: u32) -> u32 {
        self.top[group as usize]
    }

    /// The group's parent, if it has one.
    pub(crate) fn parent(&self, group: u32) -> Option<u32> {
        let parent = self.groups[group as usize].parent;
        (parent != NONE).then_some(parent)
    }

    /// The most levels of this queue's keys so far (0 until the first key).
    pub(crate) fn depth(&self) -> usize {
        self.depth
    }
}

#[cfg(test)]
thread_local! {
    /// Nodes made by every tree of this thread (a test's), dropped trees included.
    pub(crate) static NODES_MADE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// One group's place in one tree.
#[derive(Debug, Default)]
struct Node<E> {
    /// Children with entries, in rotation order (groups of the levels above the last).
    active: VecDeque<u32>,
    /// Entries, in the order they came (flows), but for aged ones moved in from a lower
    /// priority, which come first.
    entries: VecDeque<E>,
    /// How many of `entries`' first ones were moved in by aging (see `push_aged`).
    aged: usize,
    /// In its parent's rotation (or the root's, or parked).
    queued: bool,
}

/// A node's lines keep their capacity while it empties and refills, up to this many entries;
/// beyond, an emptied node gives it back, so that one burst does not keep its memory for good.
const KEPT_CAPACITY: usize = 1024;

impl<E> Node<E> {
    /// The node left its parent's rotation, its lines empty.
    fn leave(&mut self) {
        self.queued = false;
        if self.entries.capacity() > KEPT_CAPACITY {
            self.entries = VecDeque::new();
        }
        if self.active.capacity() > KEPT_CAPACITY {
            self.active = VecDeque::new();
        }
    }
}

/// The round-robin over the groups of one queue for one set of entries (a priority's ready
/// items, or the retries waiting for a token). Invariant: a node is `queued` exactly while its
/// subtree holds an entry, and then it is in its parent's `active` once (a first-level group:
/// in `root` or in `parked`, not both).
#[derive(Debug)]
pub(crate) struct Tree<E> {
    nodes: Vec<Node<E>>,
    root: VecDeque<u32>,
    /// First-level groups at their in-flight cap, out of the rotation until one is done.
    parked: Vec<u32>,
    /// Entries in the tree.
    len: usize,
    /// Nodes made so far: kept across `clear`, so that refilling an emptied tree makes none.
    made: usize,
    /// The flows of the entries taken out since the last `released` (served, refused or
    /// cleared): the owner gives each its user back.
    released: Vec<u32>,
}

impl<E: Copy> Tree<E> {
    pub(crate) fn new() -> Self {
        Self {
            nodes: Vec::new(),
            root: VecDeque::new(),
            parked: Vec::new(),
            len: 0,
            made: 0,
            released: Vec::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn node(&mut self, id: u32) -> &mut Node<E> {
        let id = id as usize;
        if self.nodes.len() <= id {
            self.made += id + 1 - self.nodes.len();
            #[cfg(test)]
            NODES_MADE.with(|n| n.set(n.get() + id + 1 - self.nodes.len()));
            self.nodes.resize_with(id + 1, || Node {
                active: VecDeque::new(),
                entries: VecDeque::new(),
                aged: 0,
                queued: false,
            });
        }
        &mut self.nodes[id]
    }

    /// Appends `entry` to `flow`, which joins the back of its parent's rotation (and so on up)
    /// if it had nothing.
    #[inline]
    pub(crate) fn push(&mut self, groups: &Groups, flow: u32, entry: E) {
        self.len += 1;
        let node = self.node(flow);
        node.entries.push_back(entry);
        if !node.queued {
            self.activate(groups, flow);
        }
    }

    /// Puts `entry`, an item aged at a lower priority, into `flow` behind the aged entries it
    /// has and ahead of the rest: it has waited longer than they have, as the FIFO queue
    /// serves an aged item ahead of newer ones. The flow joins its rotations as with `push`.
    pub(crate) fn push_aged(&mut self, groups: &Groups, flow: u32, entry: E) {
        self.len += 1;
        let node = self.node(flow);
        node.entries.insert(node.aged, entry);
        node.aged += 1;
        if !node.queued {
            self.activate(groups, flow);
        }
    }

    fn activate(&mut self, groups: &Groups, mut group: u32) {
        loop {
            let node = self.node(group);
            if node.queued {
                return;
            }
            node.queued = true;
            match groups.parent(group) {
                Some(parent) => {
                    self.node(parent).active.push_back(group);
                    group = parent;
                }
                None => {
                    self.root.push_back(group);
                    return;
                }
            }
        }
    }

    /// Takes the next entry of the rotation that `keep` accepts, skipping (and dropping) those
    /// it refuses within the same turn; first-level groups that `capped` says are full are
    /// parked instead. The groups along the served path go to the back of their rotations.
    pub(crate) fn pop(
        &mut self,
        mut keep: impl FnMut(&E) -> bool,
        capped: impl Fn(u32) -> bool,
    ) -> Option<E> {
        // The path from a first-level group to a flow: at most MAX_FAIRNESS_LEVELS long.
        let mut path = [0u32; MAX_FAIRNESS_LEVELS];
        loop {
            let &top = self.root.front()?;
            if capped(top) {
                self.root.pop_front();
                self.parked.push(top);
                continue;
            }
            let mut depth = 0;
            let mut group = top;
            loop {
                path[depth] = group;
                depth += 1;
                match self.nodes[group as usize].active.front() {
                    Some(&child) => group = child,
                    None => break,
                }
            }
            let flow = &mut self.nodes[group as usize];
            let entry = flow.entries.pop_front().expect("a queued flow has entries");
            flow.aged = flow.aged.saturating_sub(1);
            self.len -= 1;
            self.released.push(group);
            if keep(&entry) {
                self.rotate(&path[..depth]);
                return Some(entry);
            }
            // Refused (stale): drop emptied nodes without rotating, and look again.
            self.prune(&path[..depth]);
        }
    }

    /// After a served entry: each group along `path` moves to the back of its parent's
    /// rotation, or leaves it once empty.
    fn rotate(&mut self, path: &[u32]) {
        for (i, &group) in path.iter().enumerate().rev() {
            let node = &self.nodes[group as usize];
            let empty = node.entries.is_empty() && node.active.is_empty();
            let parent_line = match i {
                0 => &mut self.root,
                _ => &mut self.nodes[path[i - 1] as usize].active,
            };
            parent_line.pop_front();
            if empty {
                self.nodes[group as usize].leave();
            } else {
                let parent_line = match i {
                    0 => &mut self.root,
                    _ => &mut self.nodes[path[i - 1] as usize].active,
                };
                parent_line.push_back(group);
            }
        }
    }

    /// After a refused entry: groups along `path` that emptied leave their rotations; the rest
    /// keep their places.
    fn prune(&mut self, path: &[u32]) {
        for (i, &group) in path.iter().enumerate().rev() {
            let node = &self.nodes[group as usize];
            if !(node.entries.is_empty() && node.active.is_empty()) {
                return;
            }
            self.nodes[group as usize].leave();
            match i {
                0 => self.root.pop_front(),
                _ => self.nodes[path[i - 1] as usize].active.pop_front(),
            };
        }
    }

    /// The flows of the entries taken out since the last call, one per entry.
    pub(crate) fn released(&mut self) -> std::vec::Drain<'_, u32> {
        self.released.drain(..)
    }

    /// Puts a parked first-level group back at the back of the rotation (its cap freed).
    pub(crate) fn unpark(&mut self, top: u32) {
        if let Some(i) = self.parked.iter().position(|&g| g == top) {
            self.parked.swap_remove(i);
            self.root.push_back(top);
        }
    }

    /// Drops every entry. Resets only the nodes in a rotation (the rest are empty already)
    /// and keeps them all, so that it and the next push cost the groups with entries, not
    /// every group the queue has seen.
    pub(crate) fn clear(&mut self) {
        let mut stack: Vec<u32> = self.root.drain(..).chain(self.parked.drain(..)).collect();
        while let Some(group) = stack.pop() {
            let node = &mut self.nodes[group as usize];
            self.released.extend(std::iter::repeat_n(group, node.entries.len()));
            node.entries.clear();
            node.aged = 0;
            stack.extend(node.active.drain(..));
            node.leave();
        }
        self.len = 0;
    }

    /// Each flow with entries, and its entries in order (for metrics).
    pub(crate) fn flows(&self) -> impl Iterator<Item = (u32, &VecDeque<E>)> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.entries.is_empty())
            .map(|(i, n)| (i as u32, &n.entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(levels: &[&str]) -> FairnessKey {
        levels.iter().fold(FairnessKey::new(), |k, l| k.level(l))
    }

    #[test]
    fn one_level_round_robin_lets_a_newcomer_in_after_one_of_the_flood() {
        let mut groups = Groups::default();
        let mut tree = Tree::new();
        let noisy = groups.flow(key(&["noisy"]));
        for i in 0..100 {
            tree.push(&groups, noisy, i);
        }
        assert_eq!(tree.pop(|_| true, |_| false), Some(0));
        let quiet = groups.flow(key(&["quiet"]));
        tree.push(&groups, quiet, 1000);
        assert_eq!(tree.pop(|_| true, |_| false), Some(1));
        assert_eq!(tree.pop(|_| true, |_| false), Some(1000));
        assert_eq!(tree.pop(|_| true, |_| false), Some(2));
    }

    #[test]
    fn two_levels_share_first_by_cluster_then_by_namespace() {
        let mut groups = Groups::default();
        let mut tree = Tree::new();
        // Cluster a: 3 namespaces with 2 items each; cluster b: one namespace, 3 items.
        for ns in ["x", "y", "z"] {
            let f = groups.flow(key(&["a", ns]));
            tree.push(&groups, f, format!("a/{ns}/1").leak() as &str);
            tree.push(&groups, f, format!("a/{ns}/2").leak() as &str);
        }
        let b = groups.flow(key(&["b", "w"]));
        for i in 1..=3 {
            tree.push(&groups, b, format!("b/w/{i}").leak() as &str);
        }
        let order: Vec<&str> =
            std::iter::from_fn(|| tree.pop(|_| true, |_| false)).take(6).collect();
        assert_eq!(order, ["a/x/1", "b/w/1", "a/y/1", "b/w/2", "a/z/1", "b/w/3"]);
        assert!(tree.len == 3);
    }

    #[test]
    fn a_capped_group_is_parked_until_unparked_and_refused_entries_are_skipped() {
        let mut groups = Groups::default();
        let mut tree = Tree::new();
        let a = groups.flow(key(&["a"]));
        let b = groups.flow(key(&["b"]));
        tree.push(&groups, a, 1);
        tree.push(&groups, a, 2);
        tree.push(&groups, b, 3);
        assert_eq!(tree.pop(|_| true, |g| g == a), Some(3));
        assert_eq!(tree.pop(|_| true, |g| g == a), None, "a is parked");
        tree.unpark(a);
        assert_eq!(tree.pop(|&e| e != 1, |_| false), Some(2), "1 refused, skipped");
        assert!(tree.is_empty());
    }

    #[test]
    fn an_emptied_tree_is_refilled_without_making_a_node_per_group_ever_seen() {
        let mut groups = Groups::default();
        let mut tree = Tree::new();
        let flows: Vec<u32> = (0..1000).map(|i| groups.flow(key(&["c", &i.to_string()]))).collect();
        for &f in &flows {
            tree.push(&groups, f, f);
        }
        tree.pop(|_| true, |_| false);
        tree.clear();
        assert!(tree.is_empty());
        let made = tree.made;
        tree.push(&groups, flows[999], 1);
        assert_eq!(tree.made - made, 0, "the emptied tree's nodes are reused");
        assert_eq!(tree.pop(|_| true, |_| false), Some(1));
        assert_eq!(tree.pop(|_| true, |_| false), None, "cleared entries are gone");
    }

    #[test]
    fn a_burst_gives_its_lines_memory_back_once_served_or_cleared() {
        let mut groups = Groups::default();
        let mut tree = Tree::new();
        let flow = groups.flow(key(&["burst", "x"]));
        let top = groups.top_of(flow) as usize;
        let capacity = |tree: &Tree<u32>| {
            tree.nodes.iter().map(|n| n.entries.capacity() + n.active.capacity()).sum::<usize>()
        };
        for i in 0..100_000 {
            tree.push(&groups, flow, i);
        }
        while tree.pop(|_| true, |_| false).is_some() {}
        assert!(capacity(&tree) <= 2 * KEPT_CAPACITY, "served: {}", capacity(&tree));
        for i in 0..100_000 {
            tree.push(&groups, flow, i);
        }
        tree.clear();
        assert!(capacity(&tree) <= 2 * KEPT_CAPACITY, "cleared: {}", capacity(&tree));
        assert!(tree.nodes[top].active.capacity() <= KEPT_CAPACITY);
    }

    #[test]
    fn a_group_is_freed_with_its_last_user_and_its_number_reused_under_another_parent() {
        let mut groups = Groups::default();
        let mut tree = Tree::new();
        let ax = groups.flow(key(&["a", "x"]));
        let ay = groups.flow(key(&["a", "y"]));
        let a = groups.parent(ax).unwrap();
        tree.push(&groups, ax, 1);
        groups.acquire(ax);
        groups.release(ax);
        assert_eq!(groups.alive(), 3, "x still has its entry");
        groups.release(ay);
        assert_eq!(groups.alive(), 2, "y went; a keeps x");
        assert_eq!(tree.pop(|_| true, |_| false), Some(1));
        tree.released().for_each(|f| groups.release(f));
        assert_eq!(groups.alive(), 0, "x, then a, with their last users");
        let bz = groups.flow(key(&["b", "z"]));
        let b = groups.parent(bz).unwrap();
        assert!([a, ax, ay].contains(&bz) && [a, ax, ay].contains(&b), "numbers reused");
        assert_eq!(groups.top_of(bz), b);
        assert_eq!(groups.flow(key(&["b", "z"])), bz, "found again");
        assert_ne!(groups.flow(key(&["a", "x"])), bz, "a freed key is made anew");
        tree.push(&groups, bz, 2);
        assert_eq!(tree.pop(|_| true, |_| false), Some(2));
        assert!(tree.is_empty());
    }

    #[test]
    fn keys_of_other_lengths_keep_their_own_levels_whichever_came_first() {
        let mut groups = Groups::default();
        let mut tree = Tree::new();
        // A one-level key first: later two-level keys still share by their second level.
        let lone = groups.flow(key(&["lone"]));
        assert_eq!(groups.depth(), 1);
        let ax = groups.flow(key(&["a", "x"]));
        let ay = groups.flow(key(&["a", "y"]));
        assert_eq!(groups.depth(), 2);
        assert_ne!(ax, ay, "two namespaces of cluster a, not folded into one");
        assert_eq!(groups.parent(ax), groups.parent(ay));
        assert_eq!(groups.parent(lone), None);
        for i in 0..2 {
            tree.push(&groups, ax, ("a/x", i));
        }
        tree.push(&groups, ay, ("a/y", 0));
        tree.push(&groups, lone, ("lone", 0));
        tree.push(&groups, lone, ("lone", 1));
        let order: Vec<_> = std::iter::from_fn(|| tree.pop(|_| true, |_| false)).collect();
        assert_eq!(order, [("a/x", 0), ("lone", 0), ("a/y", 0), ("lone", 1), ("a/x", 1)]);
        assert_eq!(groups.flow(key(&["a", "x"])), ax, "found again");
    }
}
