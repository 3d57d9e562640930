//! One scheduling cycle's working state (KAI's "session") and its transactional journal (KAI's
//! "statement").
//!
//! A session borrows the model mutably for one cycle. Every change of a pod's placement goes through
//! [`Session::allocate`], [`Session::pipeline`], [`Session::evict`] or [`Session::unreserve`], each
//! journaled; [`Session::checkpoint`] / [`Session::rollback`] make a gang's placement all or nothing.
//! What survives the cycle is the model's assumed placements; [`Session::close`] turns the difference from
//! the start of the cycle into [`Decisions`]. Nothing here does I/O or reads a clock.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::backlog::{Backlog, ClassKey, JobPlace, KeptGang};
use super::decisions::{Bind, Decisions, Evict, EvictionCause};
use super::gang::{self, ChildIndex, Gang};
use super::policy::fairness::{self, Fairness, GangUsage};
use super::policy::placement::{Eligibility, NodeIndex, PlacementPolicy, Room, Summaries};
use super::report::explain::Why;
use super::report::status::{self, ReportStamp};
use super::reservations;
use crate::config::{ActionKind, Config, PlacementStrategy};
use crate::model::{
    Assumed, Cluster, DenseMap, GroupId, IdMap, Millis, NodeId, PlacementUndo, QueueId, Resources, SlotBits,
    TaskId,
};

/// The share of arrivals the `fragmentation` strategy's shape mix covers (FGD's "typical pods": the
/// most frequent shapes that make up 95 % of pods).
const MIX_COVERAGE: f64 = 0.95;

/// What a session leaves for the next one (kept in [`Cluster::session_carry`]): each gang as built with
/// what its pods count against its queue, when each group's report inputs were last fingerprinted, and
/// the node index's free-capacity part and static eligibility answers. An entry is
/// used only while the arena stamps (`Arena::stamp`) of everything it was derived from are not above
/// the clocks it recorded, so a carried entry is exactly what deriving it again would give; a churn
/// cycle rebuilds only the gangs whose PodGroups or pods changed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Carry {
    /// The PodGroup hierarchy the gangs were built under (any change drops every carried gang).
    children: ChildIndex,
    /// The roots in order, when no PodGroup named a parent, but for the gangs the backlog keeps (the
    /// next session places only the groups changed since, `gang::roots_of_flat`, and those the backlog
    /// let go, `gang::with_released`).
    flat_roots: Option<Vec<GroupId>>,
    /// By root PodGroup.
    gangs: DenseMap<GroupId, CarriedGang>,
    /// By PodGroup: the model when its report inputs were last fingerprinted (`status::report`).
    reports: DenseMap<GroupId, ReportStamp>,
    /// The node index, with the node arena's clock it was last brought up to date at (the next
    /// session updates the nodes stamped since: `NodeIndex::reopen`).
    index: Option<(Room, u64)>,
    /// The node index's static eligibility answers, with the nodes' facts version they hold for
    /// (`Cluster::node_facts_version`).
    eligibility: Option<(Eligibility, u64)>,
    /// The node index's explanation summaries, with the nodes' facts version, the node slots and the
    /// placement settings they hold for.
    summaries: Option<CarriedSummaries>,
    /// What fair share last divided, with the capacity version and resource names count it holds for.
    capacity: Option<(Resources, (u64, usize))>,
    /// The last session's fair-share state, with what its tree was built from ([`FairnessKey`]): the
    /// next session built from the same queues and settings records and divides in it again instead
    /// of building the tree (`Fairness::reopen`).
    fairness: Option<CarriedFairness>,
    /// The clocks every carried gang was built or checked at (the same for all).
    built: Option<BuiltAt>,
    /// Where the last status report left off (`status::report`).
    report: Option<status::ReportCarry>,
    /// Waiting gangs kept out of the session (`framework::backlog`).
    backlog: Option<Backlog>,
    /// The roots of [`Self::gangs`], so that the next session empties that map by its keys and keeps
    /// it for its own carry instead of dropping and allocating a map over every group slot.
    gang_roots: Vec<GroupId>,
    /// The last session's gang-by-group map, emptied, for the next one to fill.
    spare_gang_of: Option<DenseMap<GroupId, usize>>,
}

/// Explanation summaries as a session left them (see [`Carry::summaries`]).
#[derive(Clone, Debug)]
struct CarriedSummaries {
    summaries: Summaries,
    facts_version: u64,
    node_slots: usize,
    policy: PlacementPolicy,
}

/// A session's fair-share state left for the next one, with what its tree was built from. The carry
/// is shared between threads and a session's state is not (its caches are `RefCell`s), so it sits
/// behind a lock: the next session takes it out without locking when it owns the carry, and a copy
/// of the model that shares the carry locks it to clone it.
#[derive(Debug)]
struct CarriedFairness {
    fairness: std::sync::Mutex<Fairness>,
    key: FairnessKey,
}

impl CarriedFairness {
    // A lock is poisoned by a panic while it is held; the only thing done under this one is a
    // clone, which leaves the state as it was, so a poisoned state is still whole.
    fn cloned(&self) -> (Fairness, FairnessKey) {
        let fairness = self
            .fairness
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        (fairness, self.key)
    }

    fn into_parts(self) -> (Fairness, FairnessKey) {
        let fairness = self
            .fairness
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (fairness, self.key)
    }
}

impl Clone for CarriedFairness {
    fn clone(&self) -> Self {
        let (fairness, key) = self.cloned();
        Self {
            fairness: std::sync::Mutex::new(fairness),
            key,
        }
    }
}

/// What a session's fair-share tree was built from, besides the settings: the queue arena's clock
/// (every change to a queue, its insertion or removal stamps it; the status report's own bookkeeping
/// does not) and its slot count (the tree's ids are by slot).
#[derive(Clone, Copy, Debug, PartialEq)]
struct FairnessKey {
    queues_clock: u64,
    queue_slots: usize,
    args: crate::config::ProportionArgs,
}

impl FairnessKey {
    fn of(cluster: &Cluster, args: &crate::config::ProportionArgs) -> Self {
        Self {
            queues_clock: cluster.queues.clock(),
            queue_slots: cluster.queues.capacity(),
            args: *args,
        }
    }
}

/// A gang as a session built it (small: a churn cycle carries every gang across, so what is copied per
/// gang is two pointers, not its usage sums).
#[derive(Clone, Debug)]
struct CarriedGang {
    gang: Arc<Gang>,
    usage: Arc<GangUsage>,
    /// Whether it had work when built ([`Gang::has_work`]; the same while it is carried).
    has_work: bool,
    /// Some pod's share is read through its node's devices (never carried, see
    /// [`pods_unchanged_since`]).
    reads_devices: bool,
}

/// The group and task arenas' clocks a carried gang is checked against: every gang of a session held
/// when it opened, so the task clock is read then, before the session places anything (pods it places
/// change what their gangs count against their queues). The group clock is read when it closes: a
/// session writes on PodGroups only its own bookkeeping (hierarchy problems, waiting and stale times,
/// timeouts, what a report wrote), none of which a gang is built from.
#[derive(Clone, Copy, Debug)]
struct BuiltAt {
    groups: u64,
    tasks: u64,
}

impl CarriedGang {
    /// Whether building it again would give the same: none of its PodGroups, nor any pod they list,
    /// changed since it was built (`built`), and no pod's share depends on its node's devices.
    fn holds(&self, cluster: &Cluster, built: BuiltAt) -> bool {
        self.gang.groups.iter().all(|g| {
            cluster.groups.stamp(g.0) <= built.groups
                && cluster
                    .groups
                    .get(g.0)
                    .is_some_and(|group| pods_unchanged_since(cluster, group, built.tasks))
        })
    }
}

/// Whether none of a PodGroup's pods changed since the task arena's clock read `since`
/// (`Arena::stamp`), and none has a share read through its node (a `gpu-memory` request, sized by the
/// node's devices, which a pod's stamp does not cover).
pub(crate) fn pods_unchanged_since(cluster: &Cluster, group: &crate::model::Group, since: u64) -> bool {
    pods_stamped_by(cluster, group, since)
        && group.tasks.iter().all(|t| {
            cluster
                .tasks
                .get(t.0)
                .is_some_and(|task| !matches!(task.gpu, crate::model::GpuRequest::Memory { .. }))
        })
}

/// Whether no pod of a PodGroup was stamped after the task arena's clock read `since` (the arena's
/// stamps alone: no pod is read).
pub(crate) fn pods_stamped_by(cluster: &Cluster, group: &crate::model::Group, since: u64) -> bool {
    group.tasks.iter().all(|t| cluster.tasks.stamp(t.0) <= since)
}

/// Whether some pod of the gang has a share read through its node's devices (a `gpu-memory` request).
fn reads_devices(cluster: &Cluster, gang: &Gang) -> bool {
    gang.groups.iter().any(|g| {
        cluster.groups.get(g.0).is_some_and(|group| {
            group.tasks.iter().any(|t| {
                cluster
                    .tasks
                    .get(t.0)
                    .is_some_and(|task| matches!(task.gpu, crate::model::GpuRequest::Memory { .. }))
            })
        })
    })
}

/// PodGroups changed since `at` (by the change logs): stamped themselves, or holding a pod stamped
/// since. A pod that left its group stamped that group when it left. `None` when a log no longer
/// reaches back that far.
pub(crate) fn groups_changed_since(cluster: &Cluster, groups: u64, tasks: u64) -> Option<ChangedGroups> {
    let changed_groups = cluster.groups.changed_since(groups)?;
    let changed_tasks = cluster.tasks.changed_since(tasks)?;
    let mut by_slot = SlotBits::with_slots(cluster.groups.capacity());
    let mut slots = Vec::new();
    let mut mark = |g: usize| {
        if by_slot.insert(g)
            && let Ok(slot) = u32::try_from(g)
        {
            slots.push(slot);
        }
    };
    for g in changed_groups {
        mark(*g as usize);
    }
    for t in changed_tasks {
        if let Some(g) = cluster.tasks.get(*t).and_then(|task| task.group) {
            mark(g.index());
        }
    }
    slots.sort_unstable();
    Some(ChangedGroups { by_slot, slots })
}

/// The PodGroups [`groups_changed_since`] found: a mark per slot, and the changed slots in order (a
/// cycle changes a few of tens of thousands, and passes over them alone).
pub(crate) struct ChangedGroups {
    by_slot: SlotBits,
    slots: Vec<u32>,
}

impl ChangedGroups {
    /// Whether the group at `slot` changed (a slot beyond the arena's counts as changed).
    pub(crate) fn has(&self, slot: usize) -> bool {
        self.by_slot.get(slot).unwrap_or(true)
    }

    /// The changed slots, in order.
    pub(crate) fn slots(&self) -> &[u32] {
        &self.slots
    }
}

/// How many waiting gangs the last session kept in its backlog (`framework::backlog`).
#[must_use]
pub fn backlog_len(cluster: &Cluster) -> usize {
    cluster
        .session_carry
        .as_ref()
        .and_then(|c| c.downcast_ref::<Carry>())
        .and_then(|c| c.backlog.as_ref())
        .map_or(0, Backlog::len)
}

/// The PodGroups the last session kept in its backlog.
#[must_use]
pub fn backlog_groups(cluster: &Cluster) -> Vec<GroupId> {
    cluster
        .session_carry
        .as_ref()
        .and_then(|c| c.downcast_ref::<Carry>())
        .and_then(|c| c.backlog.as_ref())
        .map_or_else(Vec::new, Backlog::groups)
}

/// Gives `cluster` its own copy of the carry it shares with another copy of the model, if it shares
/// one. A scheduler owns its model's carry alone, and the next session takes its parts without copying
/// them; a benchmark that copies a model for each timed cycle calls this outside the timing, so the
/// cycle does what it does in the scheduler.
pub fn unshare_carry(cluster: &mut Cluster) {
    let Some(carry) = cluster.session_carry.take() else {
        return;
    };
    cluster.session_carry = Some(match Arc::downcast::<Carry>(carry) {
        Ok(own) => Arc::new(Arc::unwrap_or_clone(own)),
        Err(other) => other,
    });
}

impl Carry {
    /// What the last session left (empty after a crash, or in a model that never ran one). A model
    /// copied since shares it: each copy reads it and leaves its own.
    fn take(cluster: &mut Cluster) -> Arc<Self> {
        cluster
            .session_carry
            .take()
            .and_then(|c| Arc::downcast::<Self>(c).ok())
            .unwrap_or_default()
    }
}

/// One journal entry.
#[derive(Clone, Debug)]
enum Op {
    /// A pod's placement changed.
    Place {
        undo: PlacementUndo,
        /// Queue accounting change applied with it: (queue, share request, preemptible, +1/-1).
        share: Option<(QueueId, Resources, bool, i64)>,
    },
    /// Room held on a node for a pod that does not exist yet (a moved victim's replacement); only
    /// ever inside a scenario that is rolled back.
    Phantom { node: NodeId, request: Resources },
}

/// Why a pod was evicted, kept for the eviction decision.
#[derive(Clone, Debug)]
struct EvictionNote {
    cause: EvictionCause,
    for_gang: Option<GroupId>,
    message: String,
}

/// A gang's reasons in one cycle: almost always one, kept inline (every waiting gang is explained
/// every cycle; an allocation and a free each were 7% of the instructions of a backlog's replay,
/// Philly's first 1,500 jobs).
pub type Reasons = smallvec::SmallVec<[Why; 1]>;

/// What happened to a gang in this cycle.
#[derive(Clone, Debug, Default)]
pub struct GangOutcome {
    /// Why it is not (fully) placed, most important first.
    pub why: Reasons,
    /// The action that placed it in this cycle (bound or pipelined to satisfaction), if one did.
    pub placed_by: Option<ActionKind>,
}

impl GangOutcome {
    /// Whether this cycle placed it.
    #[must_use]
    pub fn placed(&self) -> bool {
        self.placed_by.is_some()
    }
}

/// Per-cycle state.
pub struct Session<'c> {
    /// The model.
    pub cluster: &'c mut Cluster,
    /// Configuration.
    pub config: &'c Config,
    /// Current time.
    pub now: Millis,
    /// Free-capacity indexes.
    pub index: NodeIndex,
    /// Placement settings.
    pub policy: PlacementPolicy,
    /// Queue accounting and fair share.
    pub fairness: Fairness,
    /// The scheduling units of this cycle (shared with the carry: a gang does not change during a
    /// session).
    pub gangs: Vec<Arc<Gang>>,
    /// Gang index by every PodGroup in it.
    pub gang_of: DenseMap<GroupId, usize>,
    /// The last session's carried-gang map, emptied, for this one's carry (see [`Carry::gang_roots`]).
    spare_gangs: Option<DenseMap<GroupId, CarriedGang>>,
    /// PodGroup hierarchy.
    pub children: ChildIndex,
    /// No PodGroup names a parent (every group is a root).
    flat_hierarchy: bool,
    /// Gang indexes by queue, ascending (gangs without a queue are not listed).
    gangs_by_queue: IdMap<QueueId, Vec<usize>>,
    /// Outcomes by gang index.
    pub outcomes: DenseMap<usize, GangOutcome>,
    journal: Vec<Op>,
    /// Assumed placement of each touched task at the start of the cycle.
    touched: IdMap<TaskId, Assumed>,
    evictions: IdMap<TaskId, EvictionNote>,
    /// Counters for metrics: binds, pipelines, evictions per action.
    pub stats: SessionStats,
    /// The model's capacity epoch when the session opened (memo key).
    pub epoch_at_open: u64,
    /// Gangs whose scheduler-owned annotations changed this cycle.
    pub annotations_changed: std::collections::HashSet<GroupId>,
    /// See [`SessionStats::next_deadline`]; a cell so rules reading the session can record theirs.
    deadline: std::cell::Cell<Option<Millis>>,
    /// See [`SessionStats::report_due`].
    report_due: std::cell::Cell<Option<Millis>>,
    /// When each group's report inputs were last fingerprinted (see [`Carry::reports`]; left for the
    /// next session).
    pub(crate) reports: DenseMap<GroupId, ReportStamp>,
    /// For each gang, what its pods counted against its queue at open (kept for the carry).
    usage: Vec<Arc<GangUsage>>,
    /// For each gang, whether a pod's share is read through its node's devices (kept for the carry).
    reads_devices: Vec<bool>,
    /// For each gang, whether it was carried: none of its PodGroups or pods changed since the last
    /// session opened.
    carried: Vec<bool>,
    /// For each gang, whether it had work at open ([`Gang::has_work`]; kept for the carry).
    work: Vec<bool>,
    /// For each gang, whether a pod of it changed placement in this session (placed, reserved, evicted
    /// or released, even if rolled back since): one that did not is as it was built.
    gangs_touched: Vec<bool>,
    /// Where the last status report left off, taken by this session's report, which leaves its own.
    pub(crate) report_carry: Option<status::ReportCarry>,
    /// What fair share divided, and what it was computed for (left for the next session).
    capacity: (Resources, (u64, usize)),
    /// What [`Self::fairness`]'s tree was built from (it is left for the next session with it).
    fairness_key: FairnessKey,
    /// The task arena's clock when the session opened.
    tasks_at_open: u64,
    /// The group arena's clock when the last session closed, if one left a carry: the reports of
    /// groups deleted since are forgotten (`leave_carry`).
    groups_at_last_close: Option<u64>,
    /// The node arena's clock when the node index was last up to date with every node (at open; any
    /// node changed later is updated again by the next session).
    nodes_synced: u64,
    /// Per resource, the most any node has (found at first use; nodes do not change in a session).
    largest_node: std::cell::OnceCell<Resources>,
    /// Waiting gangs kept out of the session (`framework::backlog`).
    pub(crate) backlog: Backlog,
    /// Whether this session keeps a backlog for the next.
    backlog_on: bool,
    /// The first gang of each class of the backlog, taken in at open.
    backlog_heads: Vec<(ClassKey, GroupId)>,
    /// Gangs answered as their class (allocate's doomed gangs and the failures that doomed them), with
    /// their class, and each class's answer for the kept gangs: what the session's end may keep.
    backlog_answered: Vec<BacklogAnswer>,
    /// The roots of a flat hierarchy in root order, but for the gangs the backlog kept when the
    /// session opened (the next session places only the groups changed since, `gang::roots_of_flat`,
    /// and those the backlog let go).
    roots: Vec<GroupId>,
}

/// What allocate told the backlog (see [`Session::backlog_answered`]).
#[derive(Clone, Debug)]
pub(crate) enum BacklogAnswer {
    /// Gang `0` was answered as its class `1`.
    Gang(usize, ClassKey),
    /// The answer for the class's kept gangs (`None`: the one they were given before).
    Class(ClassKey, Option<Why>),
}

/// Counts of what a session did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Gangs tried by allocate.
    pub gangs_tried: u64,
    /// Gangs skipped because nothing changed since they last failed.
    pub gangs_skipped_unchanged: u64,
    /// Of the gangs tried, those answered by a like gang's failure earlier in the cycle (same shape,
    /// nothing placed since).
    pub gangs_like_a_failed_one: u64,
    /// Placements attempted (pods).
    pub placements: u64,
    /// Nodes weighed by victim searches (preempt, reclaim, consolidation) for a waiting pod.
    pub victim_nodes_weighed: u64,
    /// Gangs left waiting with a reason at the end of the cycle.
    pub gangs_waiting: u64,
    /// The same gangs by the reason of their PodGroup's `Unschedulable` condition (their first reason).
    pub gangs_waiting_by_reason: BTreeMap<&'static str, u64>,
    /// Allocate stopped at its attempt budget (a defect if it ever happens; logged).
    pub attempt_budget_exhausted: bool,
    /// Some pod's placement differs from the start of the cycle (bound, evicted, reserved elsewhere or
    /// released), so the next cycle starts from a different model.
    pub placement_changed: bool,
    /// The earliest time a time-based rule seen in this cycle could decide otherwise (a gang's
    /// timeout, a grace period ending, a minimum runtime ending, a reservation lapsing).
    pub next_deadline: Option<Millis>,
    /// The earliest time a waiting gang's status, held back because only its live figures changed, is
    /// due to be written (`report::status::FIGURES_REFRESH_MS`). Apart from [`Self::next_deadline`]: no
    /// decision waits for it, so a replay with no statuses to write need not run a cycle then.
    pub report_due: Option<Millis>,
    /// Gangs taken as the last session built them (nothing in them changed since).
    pub gangs_carried: u64,
    /// The fair-share tree was the last session's, built from queues and settings unchanged since
    /// (`Fairness::reopen`).
    pub fairness_reused: bool,
}

/// The backlog as a session finds it (see `framework::backlog`): every gang goes when the session keeps
/// none, when the change logs do not reach back or when a rule about other pods exists; a gang goes when
/// it or its pods changed since the last
/// session (`changed`, by slot: `None` when the change logs do not reach back), when its status
/// changed without a stamp, or when its figures are due a refresh. Returns the first gang of each class,
/// taken out for the session to try.
fn open_backlog(
    cluster: &Cluster,
    backlog: &mut Backlog,
    on: bool,
    changed: Option<&ChangedGroups>,
    now: Millis,
) -> Vec<(ClassKey, GroupId)> {
    if backlog.is_empty() {
        return Vec::new();
    }
    let echoed = cluster.echoed.peek();
    let (Some(changed), Some(echoed)) = (changed.filter(|_| on), echoed) else {
        backlog.dissolve();
        return Vec::new();
    };
    // A rule about other pods makes no gang plain (`AttemptShape::of`).
    if cluster.rules.has_anti_affinity_terms() {
        backlog.dissolve();
        return Vec::new();
    }
    for &slot in changed.slots() {
        backlog.release(GroupId(slot));
    }
    for id in echoed {
        backlog.release(*id);
    }
    backlog.release_due(now);
    backlog.take_heads()
}

impl<'c> Session<'c> {
    /// Opens a session: resolves hierarchies, builds the gangs, the node index and queue accounting.
    pub fn open(cluster: &'c mut Cluster, config: &'c Config, now: Millis) -> Self {
        let flat_roots = cluster
            .session_carry
            .as_ref()
            .and_then(|c| c.downcast_ref::<Carry>())
            .and_then(|c| Some((c.flat_roots.as_deref()?, c.built?.groups)))
            .and_then(|(last, since)| gang::roots_of_flat(cluster, last, since));
        // Carried roots leave out the gangs the backlog kept: those it lets go are placed among them
        // once it has opened (`gang::with_released`).
        let roots_carried = flat_roots.is_some();
        let (children, roots, flat_hierarchy) = match flat_roots {
            Some(roots) => (ChildIndex::default(), roots, true),
            None => gang::index_hierarchy(cluster),
        };
        // Lapsed reservations go back to the pool.
        let lapsed: Vec<TaskId> = cluster
            .pipelined_tasks()
            .into_iter()
            .filter(|(_, until)| *until <= now)
            .map(|(t, _)| t)
            .collect();
        for t in lapsed {
            cluster.clear_assumed(t);
        }
        let mut last = Carry::take(cluster);
        let (room, eligibility, reports, summaries) = match Arc::get_mut(&mut last) {
            Some(own) => (
                own.index.take(),
                own.eligibility.take(),
                std::mem::take(&mut own.reports),
                own.summaries.take(),
            ),
            None => (
                last.index.clone(),
                last.eligibility.clone(),
                last.reports.clone(),
                last.summaries.clone(),
            ),
        };
        // The carried gangs, moved out of a carry this session owns (a clone and a drop of each gang's
        // pointer would touch every gang's memory once more per cycle).
        let mut owned_gangs = Arc::get_mut(&mut last).map(|own| std::mem::take(&mut own.gangs));
        let same_hierarchy = last.children == children;
        let tasks_at_open = cluster.tasks.clock();
        let mut gangs_carried = 0;
        // What changed since the carried gangs were built, from the change logs, so that a gang is
        // checked by its PodGroups alone rather than pod by pod (`None`: check each, `CarriedGang::holds`).
        let changed = last
            .built
            .filter(|_| same_hierarchy)
            .and_then(|at| groups_changed_since(cluster, at.groups, at.tasks));
        let backlog_on = flat_hierarchy && !cluster.without_backlog;
        let mut backlog = match Arc::get_mut(&mut last) {
            Some(own) => own.backlog.take(),
            None => last.backlog.clone(),
        }
        .unwrap_or_default();
        let backlog_heads = open_backlog(cluster, &mut backlog, backlog_on, changed.as_ref(), now);
        let released = backlog.take_released();
        let roots = if roots_carried {
            gang::with_released(cluster, roots, released, |g| backlog.holds(g))
        } else {
            let mut roots = roots;
            roots.retain(|g| !backlog.holds(*g));
            roots
        };
        // Debug builds (every test) index it all and compare; a flat hierarchy has no problem for the
        // full index to clear, so it writes nothing.
        #[cfg(debug_assertions)]
        if roots_carried {
            let clock = cluster.groups.clock();
            let (full_children, mut full, full_flat) = gang::index_hierarchy(cluster);
            full.retain(|g| !backlog.holds(*g));
            assert_eq!(
                (full_children, full, full_flat),
                (ChildIndex::default(), roots.clone(), true),
                "kept roots differ"
            );
            assert_eq!(
                cluster.groups.clock(),
                clock,
                "a flat hierarchy's index wrote a group"
            );
        }
        let mut gangs = Vec::with_capacity(roots.len());
        let mut usage = Vec::with_capacity(roots.len());
        let mut reads = Vec::with_capacity(roots.len());
        let mut carried_flags = Vec::with_capacity(roots.len());
        let mut work = Vec::with_capacity(roots.len());
        for r in &roots {
            debug_assert!(!backlog.holds(*r), "a kept gang among the session's roots");
            let kept = owned_gangs.as_ref().unwrap_or(&last.gangs);
            let carried = kept.get(r).zip(last.built).filter(|(c, built)| {
                same_hierarchy
                    && match &changed {
                        Some(changed) => {
                            let holds =
                                !c.reads_devices && c.gang.groups.iter().all(|g| !changed.has(g.index()));
                            debug_assert!(
                                !holds || c.holds(cluster, *built),
                                "the change logs missed a change to {r:?}"
                            );
                            holds
                        }
                        None => c.holds(cluster, *built),
                    }
            });
            let carried = carried.is_some();
            let taken = if carried {
                match owned_gangs.as_mut() {
                    Some(own) => own.remove(r),
                    None => last.gangs.get(r).cloned(),
                }
            } else {
                None
            };
            match taken {
                Some(c) => {
                    gangs_carried += 1;
                    carried_flags.push(true);
                    gangs.push(c.gang);
                    usage.push(c.usage);
                    reads.push(c.reads_devices);
                    work.push(c.has_work);
                }
                None => {
                    carried_flags.push(false);
                    let gang = Gang::build(cluster, &children, *r);
                    usage.push(Arc::new(GangUsage::of(cluster, &gang)));
                    reads.push(reads_devices(cluster, &gang));
                    work.push(gang.has_work(cluster));
                    gangs.push(Arc::new(gang));
                }
            }
        }
        // The gangs not carried (changed, deleted or held by the backlog) are dropped by key, and the
        // emptied map kept for this session's carry.
        let spare_gangs = owned_gangs.and_then(|mut own| {
            for r in &last.gang_roots {
                own.remove(r);
            }
            own.is_empty().then_some(own)
        });
        let spare_gang_of = Arc::get_mut(&mut last).and_then(|own| own.spare_gang_of.take());
        let last_capacity = last.capacity;
        let last_fairness = match Arc::get_mut(&mut last) {
            Some(own) => own.fairness.take().map(CarriedFairness::into_parts),
            None => last.fairness.as_ref().map(CarriedFairness::cloned),
        };
        let groups_at_last_close = last.built.map(|b| b.groups);
        let report_carry = if same_hierarchy {
            Arc::get_mut(&mut last)
                .and_then(|own| own.report.take())
                .or_else(|| last.report.clone())
        } else {
            None
        };
        drop(last);
        let mut gang_of = spare_gang_of.unwrap_or_else(|| DenseMap::with_slots(cluster.groups.capacity()));
        debug_assert!(gang_of.is_empty(), "the spare gang-by-group map holds entries");
        let gangs_len = gangs.len();
        let mut gangs_by_queue: IdMap<QueueId, Vec<usize>> = IdMap::default();
        for (i, g) in gangs.iter().enumerate() {
            for group in &g.groups {
                gang_of.insert(*group, i);
            }
            if let Some(q) = g.queue {
                gangs_by_queue.entry(q).or_default().push(i);
            }
        }
        let plugins = &config.plugins;
        let policy = PlacementPolicy {
            gpu: plugins.nodeplacement.gpu,
            cpu: plugins.nodeplacement.cpu,
            gpu_sharing: plugins.gpusharing.placement,
            gpu_sharing_enabled: plugins.gpusharing.enabled,
            seed: plugins.nodeplacement.seed,
        };
        cluster.rules.start_session();
        // Summaries hold while what their answers read holds: every node's static facts, the node
        // slots (a summary has an answer per slot) and the settings; changed nodes are brought up to
        // date as the index reopens.
        let summaries = summaries
            .filter(|c| {
                c.facts_version == cluster.node_facts_version
                    && c.node_slots == cluster.nodes.capacity()
                    && c.policy == policy
            })
            .map(|c| c.summaries);
        let mut index = match room {
            Some((room, since)) => NodeIndex::reopen(room, summaries, cluster, since),
            None => NodeIndex::build(cluster),
        };
        let nodes_synced = cluster.nodes.clock();
        if let Some((eligibility, version)) = eligibility
            && version == cluster.node_facts_version
        {
            index.eligibility = eligibility;
        }
        if policy.gpu == PlacementStrategy::Fragmentation || policy.cpu == PlacementStrategy::Fragmentation {
            index.set_mix(cluster.shapes.mix(MIX_COVERAGE));
        }
        // What fair share divides: a pass over every node and pod, so taken from the last session while
        // nothing it reads changed (`Cluster::capacity_version`, and the resource names, which say which
        // slots are MIG profiles counted as GPUs).
        let capacity_key = (cluster.capacity_version, cluster.names.len());
        let capacity = match last_capacity {
            Some((capacity, key)) if key == capacity_key => {
                debug_assert_eq!(
                    capacity,
                    fairness::capacity(cluster),
                    "capacity reused though changed"
                );
                capacity
            }
            _ => fairness::capacity(cluster),
        };
        let fairness_key = FairnessKey::of(cluster, &plugins.proportion);
        let backlog_pending = backlog.pending_by_queue();
        let afresh = || {
            Fairness::open(
                cluster,
                &gangs,
                &usage,
                &backlog_pending,
                &plugins.proportion,
                &capacity,
            )
        };
        let (fairness, fairness_reused) = match last_fairness {
            Some((last, key)) if key == fairness_key => {
                let fairness = last.reopen(cluster, &gangs, &usage, &backlog_pending, &capacity);
                debug_assert!(
                    fairness.same_as(&afresh()),
                    "a reused fair-share tree differs from one built afresh"
                );
                (fairness, true)
            }
            _ => (afresh(), false),
        };
        let epoch_at_open = cluster.epochs.capacity;
        Self {
            epoch_at_open,
            annotations_changed: std::collections::HashSet::new(),
            cluster,
            config,
            now,
            index,
            policy,
            fairness,
            gangs,
            gang_of,
            spare_gangs,
            children,
            flat_hierarchy,
            gangs_by_queue,
            outcomes: DenseMap::with_slots(gangs_len),
            journal: Vec::new(),
            touched: IdMap::default(),
            evictions: IdMap::default(),
            stats: SessionStats {
                gangs_carried,
                fairness_reused,
                ..SessionStats::default()
            },
            deadline: std::cell::Cell::new(None),
            report_due: std::cell::Cell::new(None),
            reports,
            usage,
            reads_devices: reads,
            carried: carried_flags,
            work,
            gangs_touched: vec![false; gangs_len],
            report_carry,
            capacity: (capacity, capacity_key),
            fairness_key,
            tasks_at_open,
            groups_at_last_close,
            nodes_synced,
            largest_node: std::cell::OnceCell::new(),
            backlog,
            backlog_on,
            backlog_heads,
            backlog_answered: Vec::new(),
            roots: if flat_hierarchy { roots } else { Vec::new() },
        }
    }

    /// A time-based rule would decide otherwise at `at` (a timeout, a grace period or a minimum runtime
    /// ending): a quiet cluster is scheduled again then, even if nothing else changes.
    pub fn wake_at(&self, at: Millis) {
        let earliest = self.deadline.get().map_or(at, |d| d.min(at));
        self.deadline.set(Some(earliest));
    }

    /// A status held back at this report is due to be written at `at`: the cycle then is not skipped.
    pub(crate) fn report_due_at(&self, at: Millis) {
        let earliest = self.report_due.get().map_or(at, |d| d.min(at));
        self.report_due.set(Some(earliest));
    }

    /// For each gang, whether it is as the last session saw it: carried (nothing of it changed since
    /// that session opened) and none of its pods changed in this session so far. A pass over every
    /// gang whose answer for such a gang is a function of what it read then (and found nothing to do)
    /// may skip it. All `false` when the change log does not reach back to this session's opening.
    #[must_use]
    pub fn unchanged_gangs(&self) -> Vec<bool> {
        let mut unchanged = self.carried.clone();
        match self.cluster.tasks.changed_since(self.tasks_at_open) {
            Some(changed) => {
                for t in changed {
                    if let Some(g) = self
                        .cluster
                        .tasks
                        .get(*t)
                        .and_then(|task| task.group)
                        .and_then(|group| self.gang_of.get(&group))
                        && let Some(u) = unchanged.get_mut(*g)
                    {
                        *u = false;
                    }
                }
            }
            None => unchanged.iter_mut().for_each(|u| *u = false),
        }
        unchanged
    }

    /// Whether gang `g` had work at open ([`Gang::has_work`]); one that had none has none now.
    #[must_use]
    pub fn had_work_at_open(&self, g: usize) -> bool {
        self.work.get(g).copied().unwrap_or(true)
    }

    /// Whether `request` fits in some node's allocatable resources, bounded per resource: a pod asking
    /// more of any resource than every node has fits nowhere, whatever is evicted (a victim search
    /// weighed every node for every such waiting pod, every cycle).
    #[must_use]
    pub fn fits_some_node(&self, request: &Resources) -> bool {
        self.beyond_every_node(request).is_none()
    }

    /// The first resource `request` asks more of than every node has, with the most any node has of
    /// it.
    #[must_use]
    pub fn beyond_every_node(&self, request: &Resources) -> Option<(usize, i64)> {
        let largest = self.largest_node.get_or_init(|| {
            self.cluster
                .nodes
                .iter()
                .fold(Resources::ZERO, |most, (_, n)| most.max(&n.allocatable))
        });
        let slot = request.shortfalls(largest).next()?;
        Some((slot, largest.0[slot]))
    }

    /// Whether gang `g` is satisfied now ([`Gang::is_satisfied`]), without counting its pods while none
    /// of them changed in this session: a backlog's every waiting gang is asked this several times a
    /// cycle (queue order, allocate, timeouts, status report).
    #[must_use]
    pub fn gang_satisfied(&self, g: usize) -> bool {
        let gang = &self.gangs[g];
        if self.gang_touched(g) {
            return gang.is_satisfied(self.cluster);
        }
        debug_assert_eq!(
            gang.satisfied_at_build,
            gang.is_satisfied(self.cluster),
            "gang {g} changed untouched"
        );
        gang.satisfied_at_build
    }

    /// Whether gang `g` has a pod of its own waiting ([`Gang::pending`]), without a look at its pods while
    /// none of them changed in this session.
    #[must_use]
    pub fn gang_has_pending(&self, g: usize) -> bool {
        let gang = &self.gangs[g];
        if self.gang_touched(g) {
            return gang.pending(self.cluster).next().is_some();
        }
        debug_assert_eq!(
            gang.pending_at_build,
            gang.pending(self.cluster).next().is_some(),
            "gang {g} changed untouched"
        );
        gang.pending_at_build
    }

    /// Whether a pod of gang `g` holds a node (bound, running or assumed), without a look at its pods
    /// while none of them changed in this session: the victim actions ask it of every gang of the
    /// session each time they list their candidates, and a pod's status is a read far from the gang's.
    #[must_use]
    pub fn gang_has_placed_pod(&self, g: usize) -> bool {
        let gang = &self.gangs[g];
        let placed = || gang.tasks().any(|t| self.cluster.task(t).status.is_allocated());
        if self.gang_touched(g) {
            return placed();
        }
        debug_assert_eq!(gang.placed_at_build, placed(), "gang {g} changed untouched");
        gang.placed_at_build
    }

    /// Whether gang `g` may be tried ([`Gang::ready`]), without a look at its pods while none of them
    /// changed in this session and it was ready when built.
    ///
    /// # Errors
    /// How many pods are missing.
    pub fn gang_ready(&self, g: usize) -> Result<(), crate::framework::gang::NotReady> {
        let gang = &self.gangs[g];
        if !self.gang_touched(g) && gang.coverable_as_built(self.cluster) {
            return Ok(());
        }
        gang.ready(self.cluster)
    }

    /// Whether a pod of gang `g` changed placement in this session (even if rolled back since).
    #[must_use]
    pub fn gang_touched(&self, g: usize) -> bool {
        self.gangs_touched.get(g).copied().unwrap_or(true)
    }

    /// Whether a pod of gang `g` has a share read through its node's devices.
    #[must_use]
    pub(crate) fn gang_reads_devices(&self, g: usize) -> bool {
        self.reads_devices.get(g).copied().unwrap_or(true)
    }

    /// Takes the next gang of a backlog class into the session (its class's last gang taken in was
    /// placed), as a gang of its own at the end; its index. What it asks already counted against its
    /// queue in fair share (`Backlog::pending_by_queue`).
    pub fn take_from_backlog(&mut self, key: &ClassKey) -> Option<usize> {
        if self.backlog.is_empty() {
            return None;
        }
        let root = self.backlog.take_first(key)?;
        Some(self.take_in(root))
    }

    /// Takes the first gang of a backlog class that comes after `place` in job order into the session
    /// (see [`Self::take_from_backlog`]).
    pub fn take_from_backlog_after(&mut self, key: &ClassKey, place: &JobPlace) -> Option<usize> {
        if self.backlog.is_empty() {
            return None;
        }
        let root = self.backlog.take_first_after(key, place)?;
        Some(self.take_in(root))
    }

    /// Takes the gang of a backlog class at `place` in job order into the session (see
    /// [`Self::take_from_backlog`]).
    pub fn take_from_backlog_at(&mut self, key: &ClassKey, place: &JobPlace) -> Option<usize> {
        let root = self.backlog.take_at(key, place)?;
        Some(self.take_in(root))
    }

    /// The classes allocate answered in this session that keep gangs out of it, with their answers
    /// (for the victim actions, which take some in: `actions::kept`).
    #[must_use]
    pub(crate) fn backlog_classes(&self) -> Vec<(ClassKey, Why)> {
        self.backlog_answered
            .iter()
            .filter_map(|a| match a {
                BacklogAnswer::Class(key, why) if self.backlog.has_class(key) => {
                    let why = why.clone().or_else(|| self.backlog.class_answer(key).cloned())?;
                    Some((key.clone(), why))
                }
                _ => None,
            })
            .collect()
    }

    /// Makes the gang rooted at `root` one of the session's, at the end; its index.
    fn take_in(&mut self, root: GroupId) -> usize {
        let gang = Gang::build(self.cluster, &self.children, root);
        let index = self.gangs.len();
        for group in &gang.groups {
            self.gang_of.insert(*group, index);
        }
        if let Some(q) = gang.queue {
            self.gangs_by_queue.entry(q).or_default().push(index);
        }
        self.usage.push(Arc::new(GangUsage::of(self.cluster, &gang)));
        self.reads_devices.push(reads_devices(self.cluster, &gang));
        self.carried.push(false);
        self.work.push(gang.has_work(self.cluster));
        self.gangs_touched.push(false);
        self.gangs.push(Arc::new(gang));
        index
    }

    /// The backlog's classes that keep gangs out of the session.
    #[must_use]
    pub fn backlog_class_keys(&self) -> Vec<ClassKey> {
        self.backlog.class_keys()
    }

    /// Whether any gang is kept in the backlog for `key`'s class.
    #[must_use]
    pub fn backlog_has(&self, key: &ClassKey) -> bool {
        self.backlog.has_class(key)
    }

    /// The classes whose first gang was taken in at open.
    #[must_use]
    pub(crate) fn backlog_heads(&self) -> &[(ClassKey, GroupId)] {
        &self.backlog_heads
    }

    /// Whether this session keeps a backlog for the next.
    #[must_use]
    pub fn keeps_backlog(&self) -> bool {
        self.backlog_on
    }

    /// Allocate's word to the backlog (see [`BacklogAnswer`]).
    pub(crate) fn tell_backlog(&mut self, answer: BacklogAnswer) {
        if self.backlog_on {
            self.backlog_answered.push(answer);
        }
    }

    /// The gangs of a queue, by ascending index (the same order as `0..gangs.len()` filtered on the
    /// queue, without scanning every gang).
    #[must_use]
    pub fn gangs_in_queue(&self, queue: QueueId) -> &[usize] {
        self.gangs_by_queue.get(&queue).map_or(&[], Vec::as_slice)
    }

    // -----------------------------------------------------------------------------------------
    // The journal
    // -----------------------------------------------------------------------------------------

    /// A point to roll back to.
    #[must_use]
    pub fn checkpoint(&self) -> usize {
        self.journal.len()
    }

    /// Undoes everything after `checkpoint`, newest first.
    pub fn rollback(&mut self, checkpoint: usize) {
        while self.journal.len() > checkpoint {
            let (undo, share) = match self.journal.pop().expect("invariant: length checked") {
                Op::Place { undo, share } => (undo, share),
                Op::Phantom { node, request } => {
                    if let Some(n) = self.cluster.nodes.get_mut(node.0) {
                        n.nominated.sub(&request);
                    }
                    self.index.update(self.cluster, node);
                    continue;
                }
            };
            let task = undo.task;
            let nodes = self.nodes_of(task);
            self.cluster.undo_placement(undo);
            if let Some((queue, share, preemptible, sign)) = share {
                self.fairness
                    .change(self.cluster, queue, &share, preemptible, -sign);
            }
            if self
                .cluster
                .tasks
                .get(task.0)
                .is_none_or(|t| t.assumed != Assumed::Evicting)
            {
                self.evictions.remove(&task);
            }
            self.reindex(nodes);
            self.reindex(self.nodes_of(task));
        }
    }

    fn nodes_of(&self, task: TaskId) -> Option<NodeId> {
        self.cluster.tasks.get(task.0).and_then(|t| t.node)
    }

    fn reindex(&mut self, node: Option<NodeId>) {
        if let Some(n) = node {
            self.index.update(self.cluster, n);
        }
    }

    /// Changes a task's assumed placement, journaled, keeping queue accounting and indexes current.
    fn change(&mut self, task: TaskId, assumed: Assumed, gpu_groups: Option<Vec<Arc<str>>>) {
        let before_node = self.nodes_of(task);
        let before_allocated = self.cluster.task(task).status.is_allocated();
        let first_change = !self.touched.contains_key(&task);
        if let Some(g) = self.cluster.task(task).group.and_then(|g| self.gang_of.get(&g))
            && let Some(touched) = self.gangs_touched.get_mut(*g)
        {
            *touched = true;
        }
        if first_change {
            self.touched.insert(task, self.cluster.task(task).assumed.clone());
        }
        let undo = self.cluster.set_assumed(task, assumed, gpu_groups);
        if first_change {
            // Kept in the model, so a cycle that panics can still be undone (model/cluster/crash.rs).
            self.cluster.record_first_change(undo.clone());
        }
        let after_allocated = self.cluster.task(task).status.is_allocated();
        let share = self.share_change(task, before_allocated, after_allocated);
        if let Some((queue, share_req, preemptible, sign)) = share {
            self.fairness
                .change(self.cluster, queue, &share_req, preemptible, sign);
        }
        self.journal.push(Op::Place { undo, share });
        self.reindex(before_node);
        let after = self.nodes_of(task);
        if after != before_node {
            self.reindex(after);
        }
    }

    fn share_change(
        &self,
        task: TaskId,
        before: bool,
        after: bool,
    ) -> Option<(QueueId, Resources, bool, i64)> {
        if before == after {
            return None;
        }
        let t = self.cluster.task(task);
        let g = t.group?;
        let gang = &self.gangs[*self.gang_of.get(&g)?];
        let queue = gang.queue?;
        let share = self.share_request(task);
        Some((queue, share, gang.preemptible, if after { 1 } else { -1 }))
    }

    /// What a task counts against its queue: its request with fractions as milli-GPUs.
    #[must_use]
    pub fn share_request(&self, task: TaskId) -> Resources {
        fairness::share_request(self.cluster, task)
    }

    /// Places a pod to be bound.
    pub fn allocate(&mut self, task: TaskId, node: NodeId, gpu_groups: Vec<Arc<str>>) {
        self.stats.placements += 1;
        self.change(task, Assumed::Binding { node }, Some(gpu_groups));
    }

    /// Reserves a pod on a node whose resources are still being freed.
    pub fn pipeline(&mut self, task: TaskId, node: NodeId, gpu_groups: Vec<Arc<str>>) {
        self.stats.placements += 1;
        let until = self.now
            + i64::try_from(self.config.plugins.pipelining.reservation_ttl.as_millis()).unwrap_or(i64::MAX);
        self.change(task, Assumed::Pipelined { node, until }, Some(gpu_groups));
    }

    /// Holds room on a node for a pod that does not exist yet. Must be rolled back before the session
    /// closes (it is not a decision).
    pub fn reserve_phantom(&mut self, node: NodeId, request: &Resources) {
        if let Some(n) = self.cluster.nodes.get_mut(node.0) {
            n.nominated.add(request);
        }
        self.index.update(self.cluster, node);
        self.journal.push(Op::Phantom {
            node,
            request: *request,
        });
    }

    /// Drops a pod's reservation (before its gang is tried again).
    pub fn unreserve(&mut self, task: TaskId) {
        self.change(task, Assumed::None, None);
    }

    /// Evicts a running pod.
    pub fn evict(&mut self, task: TaskId, cause: EvictionCause, for_gang: Option<GroupId>, message: String) {
        self.evictions.insert(
            task,
            EvictionNote {
                cause,
                for_gang,
                message,
            },
        );
        self.change(task, Assumed::Evicting, None);
    }

    /// Sets or clears when a gang was first seen running below its minimum.
    pub fn set_stale_since(&mut self, group: GroupId, since: Option<Millis>) {
        self.cluster.group_mut(group).stale_since = since;
        self.annotations_changed.insert(group);
    }

    /// Record why a gang is not placed.
    pub fn explain(&mut self, gang: usize, why: Why) {
        self.outcomes.get_or_default(gang).why.push(why);
    }

    /// Record that a gang was placed by an action.
    pub fn mark_placed(&mut self, gang: usize, action: ActionKind) {
        let o = self.outcomes.get_or_default(gang);
        o.placed_by = Some(action);
        o.why.clear();
    }

    /// Names gang `g` as the one the cycle works on now, so a panic can be pinned on it (the gang is
    /// then set aside; see `model/cluster/crash.rs`). Every loop over gangs calls it first.
    pub fn attempt(&mut self, g: usize) {
        self.cluster.attempting = self.gangs.get(g).map(|gang| gang.root);
    }

    // -----------------------------------------------------------------------------------------
    // Closing
    // -----------------------------------------------------------------------------------------

    /// Closes the session into decisions: binds and evictions that differ from the start of the
    /// cycle, and the statuses, conditions and events that changed.
    #[must_use]
    pub fn close(mut self) -> (Decisions, SessionStats) {
        let mut decisions = Decisions::default();
        let mut touched: Vec<(TaskId, Assumed)> = self.touched.drain().collect();
        touched.sort_by_key(|(t, _)| *t);
        let mut withdrawn = Vec::new();
        for (task, before) in touched {
            let Some(t) = self.cluster.tasks.get(task.0) else {
                continue;
            };
            // Placed in this session and taken by a later action: the pod never left its pending
            // state, so neither its bind nor an eviction (which would delete a pod that never ran) is
            // decided, and it ends the session pending (`withdraw`).
            let withdrawn_now = t.assumed == Assumed::Evicting
                && before != Assumed::Evicting
                && !matches!(before, Assumed::Binding { .. })
                && !t.api.status.holds_node();
            let after = if withdrawn_now { &Assumed::None } else { &t.assumed };
            if !same_placement(&before, after) {
                self.stats.placement_changed = true;
            }
            let group_key = t.group.map(|g| self.cluster.group(g).key.clone());
            match (&before, &t.assumed) {
                (b, Assumed::Binding { node }) if !matches!(b, Assumed::Binding { .. }) => {
                    let n = self.cluster.node(*node);
                    let devices = t
                        .gpu_groups
                        .iter()
                        .map(|g| n.shared_gpu(g).and_then(|i| n.shared_gpus[i].device.clone()))
                        .collect();
                    decisions.binds.push(Bind {
                        devices,
                        uid: t.uid.clone(),
                        namespace: t.namespace.clone(),
                        name: t.name.clone(),
                        node: self.cluster.node(*node).name.clone(),
                        gpu_groups: t.gpu_groups.clone(),
                        gpu: t.gpu,
                        gpu_memory_mib: n.gpu_memory_mib,
                        group: group_key,
                        name_group_on_pod: t.group_by_owner,
                        volumes: if t.claims.is_empty() {
                            Vec::new()
                        } else {
                            self.cluster.volumes.bindings(&t.namespace, &t.claims)
                        },
                    });
                }
                (b, Assumed::Evicting) if *b != Assumed::Evicting => {
                    let note = self.evictions.remove(&task);
                    let (cause, for_gang, message) = note
                        .map_or((EvictionCause::Preempt, None, String::new()), |n| {
                            (n.cause, n.for_gang, n.message)
                        });
                    if withdrawn_now {
                        withdrawn.push((task, cause, for_gang));
                        continue;
                    }
                    decisions.evictions.push(Evict {
                        uid: t.uid.clone(),
                        namespace: t.namespace.clone(),
                        name: t.name.clone(),
                        cause,
                        for_group: for_gang.map(|g| self.cluster.group(g).key.clone()),
                        group: group_key,
                        message,
                    });
                }
                _ => {}
            }
        }
        self.withdraw(withdrawn);
        // Counted in runs of one reason first (a backlog's gangs mostly wait for the same one): a map
        // entry per run, not per gang.
        let mut by_reason = BTreeMap::new();
        let mut run: Option<(&'static str, u64)> = None;
        for reason in self
            .outcomes
            .values()
            .filter_map(|o| o.why.first())
            .map(Why::reason)
        {
            match &mut run {
                Some((current, count)) if std::ptr::eq(*current, reason) || *current == reason => *count += 1,
                _ => {
                    if let Some((current, count)) = run.replace((reason, 1)) {
                        *by_reason.entry(current).or_insert(0) += count;
                    }
                }
            }
        }
        if let Some((current, count)) = run {
            *by_reason.entry(current).or_insert(0) += count;
        }
        // The kept gangs wait too, for their class's reason.
        self.answer_backlog();
        for (reason, count) in self.backlog.waiting_by_reason() {
            *by_reason.entry(reason).or_insert(0) += count;
        }
        self.stats.gangs_waiting = by_reason.values().sum();
        self.stats.gangs_waiting_by_reason = by_reason;
        status::report(&mut self, &mut decisions);
        self.keep_backlog();
        reservations::reconcile(&mut self, &mut decisions);
        for (_, until) in self.cluster.pipelined_tasks() {
            self.wake_at(until);
        }
        self.stats.next_deadline = self.deadline.get();
        self.stats.report_due = self.report_due.get();
        self.leave_carry();
        // Last: a panic anywhere before (status reports included) must still find the undo records.
        self.cluster.cycle_completed();
        (decisions, self.stats)
    }
}

impl Session<'_> {
    /// Pods placed in this session and then taken as victims by a later action (`close` decides
    /// nothing for them): they are pending again in the model, and a gang left below its minimum is
    /// not reported placed but waiting, with what took its room (an elastic gang that lost only pods
    /// above its minimum stays placed).
    fn withdraw(&mut self, withdrawn: Vec<(TaskId, EvictionCause, Option<GroupId>)>) {
        for (task, cause, for_gang) in withdrawn {
            // Not journaled: the session is closing, and a crash from here on restores every task's
            // state at the start of the cycle, as for any other change (its first change is recorded).
            // The room comes back, which a gang remembered as not fitting in this session (after the
            // pod took it) may fit in: the capacity epoch moves, as for any assumption dropped.
            self.cluster.clear_assumed(task);
            let Some(g) = self
                .cluster
                .task(task)
                .group
                .and_then(|g| self.gang_of.get(&g))
                .copied()
            else {
                continue;
            };
            if self.gangs[g].is_satisfied(self.cluster) {
                continue;
            }
            let why = Why::Withdrawn {
                cause,
                for_gang: for_gang.map(|f| self.cluster.group(f).key.to_string()),
            };
            let outcome = self.outcomes.get_or_default(g);
            outcome.placed_by = None;
            if !outcome.why.contains(&why) {
                outcome.why.insert(0, why);
            }
        }
    }

    /// Gives the backlog's classes the answers allocate found for them (a class not answered, or whose
    /// answer moved, lets its gangs go once they are counted: `keep_backlog`).
    fn answer_backlog(&mut self) {
        if !self.backlog_on {
            self.backlog.dissolve();
            return;
        }
        for a in &self.backlog_answered {
            if let BacklogAnswer::Class(key, why) = a {
                self.backlog.answer(key, why.clone());
            }
        }
    }

    /// Keeps in the backlog the gangs answered as their class this cycle that may be kept: they wait
    /// for that one reason alone, were told it (their status report is done), have no timeout to keep
    /// track of and nothing of them is read through a node.
    fn keep_backlog(&mut self) {
        let answered = std::mem::take(&mut self.backlog_answered);
        if !self.backlog_on {
            return;
        }
        self.backlog.release_unanswered_and_moved();
        let mut class_answers: crate::model::ids::WordMap<ClassKey, Why> =
            crate::model::ids::WordMap::default();
        for a in &answered {
            if let BacklogAnswer::Class(key, why) = a
                && let Some(why) = why.clone().or_else(|| self.backlog.class_answer(key).cloned())
            {
                class_answers.insert(key.clone(), why);
            }
        }
        for a in answered {
            let BacklogAnswer::Gang(g, key) = a else { continue };
            let Some(class_answer) = class_answers.get(&key) else {
                continue;
            };
            let Some(told) = self.keepable(g) else { continue };
            // Every kept gang was told what its class says (beyond figures): a gang told otherwise
            // stays in the session, where its own answer is worked out.
            if !super::backlog::same_gist(&told, class_answer) {
                continue;
            }
            let Some(pending) = self.usage[g].waiting_only() else {
                continue;
            };
            let request = super::policy::ordering::pending_request(self, g);
            let gang = &self.gangs[g];
            let root = gang.root;
            let group = self.cluster.group(root);
            let refresh_at = status::figures_refresh_at(group);
            let held_back = group.status_written.is_some_and(|w| w.newer_held_back);
            let kept = KeptGang {
                group: root,
                gang,
                key: &group.key,
                pending,
                request,
                told: (!held_back).then_some(told),
                refresh_at,
            };
            self.backlog.keep(key, class_answer, kept, self.now);
        }
        if let Some(carry) = self.report_carry.as_mut() {
            let backlog = &self.backlog;
            carry.forget_revisits(|g| backlog.holds(g));
        }
        if let Some(at) = self.backlog.next_refresh() {
            self.report_due_at(at);
        }
    }

    /// What gang `g`'s status says it waits for, if it may be kept in the backlog (see
    /// [`Self::keep_backlog`]).
    fn keepable(&self, g: usize) -> Option<Why> {
        let outcome = self.outcomes.get(&g)?;
        if outcome.placed() || outcome.why.len() != 1 {
            return None;
        }
        let why = outcome.why.first()?;
        if !matches!(why, Why::NoFit(_) | Why::Queue(_)) || self.gang_reads_devices(g) {
            return None;
        }
        let gang = &self.gangs[g];
        if gang.groups.len() != 1 {
            return None;
        }
        let group = self.cluster.group(gang.root);
        // What its status says: the reasons its last full report recorded (a report that held a
        // status back for its figures records nothing; the refresh compares with these).
        let recorded = group
            .report_why
            .as_ref()
            .and_then(|w| w.downcast_ref::<Vec<Why>>())
            .filter(|_| group.report_inputs != 0)?;
        let [told] = recorded.as_slice() else {
            return None;
        };
        (group.schedule_timeout_secs.is_none()
            && !group.timed_out
            && group.waiting_since.is_some()
            && group.parent_name.is_none())
        .then(|| told.clone())
    }

    /// Leaves the gangs as built (they do not change during a session) and the report stamps for the
    /// next session.
    fn leave_carry(&mut self) {
        let gangs = std::mem::take(&mut self.gangs);
        let usage = std::mem::take(&mut self.usage);
        let reads = std::mem::take(&mut self.reads_devices);
        let work = std::mem::take(&mut self.work);
        // Every gang of this session held when it opened (built then, or carried and checked).
        let built = BuiltAt {
            groups: self.cluster.groups.clock(),
            tasks: self.tasks_at_open,
        };
        // The kept gangs are left out (the backlog lists those it lets go for the next session).
        let flat_roots = self.flat_hierarchy.then(|| {
            let mut roots = std::mem::take(&mut self.roots);
            roots.retain(|g| !self.backlog.holds(*g));
            roots
        });
        let gang_roots: Vec<GroupId> = gangs.iter().map(|g| g.root).collect();
        // Every entry of the gang-by-group map is a group of one of the session's gangs.
        let mut gang_of = std::mem::take(&mut self.gang_of);
        for gang in &gangs {
            for group in &gang.groups {
                gang_of.remove(group);
            }
        }
        debug_assert!(gang_of.is_empty(), "a group maps to no gang of the session");
        let spare_gang_of = gang_of.is_empty().then_some(gang_of);
        let mut backlog = std::mem::take(&mut self.backlog);
        backlog.seal();
        let carry = Carry {
            children: std::mem::take(&mut self.children),
            flat_roots,
            gangs: {
                let mut carried = self
                    .spare_gangs
                    .take()
                    .unwrap_or_else(|| DenseMap::with_slots(self.cluster.groups.capacity()));
                for (((gang, usage), reads_devices), has_work) in
                    gangs.into_iter().zip(usage).zip(reads).zip(work)
                {
                    carried.insert(
                        gang.root,
                        CarriedGang {
                            gang,
                            usage,
                            has_work,
                            reads_devices,
                        },
                    );
                }
                carried
            },
            reports: {
                // Groups deleted since their last report leave no entry behind (a long-running
                // scheduler sees millions of PodGroups come and go); they are among the groups
                // changed since the last session closed, when every entry was of a live group.
                let mut reports = std::mem::take(&mut self.reports);
                let groups = &self.cluster.groups;
                match self.groups_at_last_close.and_then(|c| groups.changed_since(c)) {
                    Some(changed) => {
                        for &slot in changed {
                            if groups.get(slot).is_none() {
                                reports.remove(&GroupId(slot));
                            }
                        }
                    }
                    None => reports.retain(|id, _| groups.get(id.0).is_some()),
                }
                debug_assert!(
                    reports.keys().all(|id| groups.get(id.0).is_some()),
                    "a deleted group's report is kept"
                );
                reports
            },
            built: Some(built),
            capacity: Some(self.capacity),
            fairness: Some(CarriedFairness {
                fairness: std::sync::Mutex::new(std::mem::replace(&mut self.fairness, Fairness::empty())),
                key: self.fairness_key,
            }),
            report: self.report_carry.take(),
            backlog: (!backlog.is_empty() || backlog.has_released()).then_some(backlog),
            gang_roots,
            spare_gang_of,
            summaries: Some(CarriedSummaries {
                summaries: self.index.take_summaries(),
                facts_version: self.cluster.node_facts_version,
                node_slots: self.cluster.nodes.capacity(),
                policy: self.policy,
            }),
            index: Some((self.index.take_room(), self.nodes_synced)),
            eligibility: Some((
                std::mem::take(&mut self.index.eligibility),
                self.cluster.node_facts_version,
            )),
        };
        self.cluster.session_carry = Some(Arc::new(carry));
    }
}

/// Whether two assumed placements put a pod in the same place: a reservation renewed on the same node
/// is the same placement (only its lapse time moved, which the deadline covers).
fn same_placement(a: &Assumed, b: &Assumed) -> bool {
    match (a, b) {
        (Assumed::Pipelined { node: x, .. }, Assumed::Pipelined { node: y, .. }) => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{GangSpec, Sim};

    fn carry_of(sim: &Sim) -> &Carry {
        sim.cluster
            .session_carry
            .as_ref()
            .and_then(|c| c.downcast_ref::<Carry>())
            .expect("a session ran")
    }

    #[test]
    fn the_carry_keeps_nothing_of_deleted_groups() {
        let mut sim = Sim::new();
        sim.nodes("n", 2, 4);
        sim.queue("q", None, -1.0, -1.0, 1.0);
        // Two wait (too big), so their reports are remembered; one is placed.
        sim.gang(GangSpec::new("big-a", "q", 16));
        sim.gang(GangSpec::new("big-b", "q", 16));
        sim.gang(GangSpec::new("small", "q", 1));
        sim.rounds(2);
        assert_eq!(carry_of(&sim).reports.len(), 3);
        assert_eq!(carry_of(&sim).gangs.len(), 3);
        assert!(sim.remove_gang("ns", "big-a"));
        sim.round();
        let carry = carry_of(&sim);
        assert_eq!(carry.gangs.len(), 2);
        assert_eq!(
            carry.reports.len(),
            2,
            "{:?}",
            carry.reports.keys().collect::<Vec<_>>()
        );
    }
}
