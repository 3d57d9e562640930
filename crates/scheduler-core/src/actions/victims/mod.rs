//! The victim search shared by preempt, reclaim and consolidation.
//!
//! A victim *unit* is what may be evicted at once: one surplus pod of an elastic gang (above its minimum),
//! or a whole gang (never a part that would leave it below its minimum). The solver places the waiting
//! gang pod by pod; for a pod that fits nowhere, it picks the node where the fewest units (earliest in
//! the caller's victim order) free enough room, evicts them, and reserves the pod there. Victims freed on
//! several nodes help the next pods too. The outcome is validated by the caller's rule (fair share, ...)
//! and then trimmed: units whose eviction turned out unnecessary are given back. When victims must move
//! (consolidation), units whose pods have nowhere else to go as the session stands are passed over, and
//! every chosen pod must find a new place once the gang has its room.

mod bounds;

use std::collections::HashMap;
use std::sync::Arc;

use crate::fairshare::ReclaimRejection;
use crate::framework::Session;
use crate::framework::decisions::EvictionCause;
use crate::framework::policy::placement::{Mode, Placement};
use crate::framework::policy::topology;
use crate::model::constraints::ConstraintsId;
use crate::model::resources::GPU;
use crate::model::volumes::{NodeRef, VolumeMiss};
use crate::model::{
    Assumed, Cluster, GpuRequest, GroupId, IdMap, Node, NodeId, Resources, Task, TaskId, TaskStatus,
};

/// Something that may be evicted at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    /// The victim gang (index into the session's gangs).
    pub gang: usize,
    /// The pods evicted together.
    pub tasks: Vec<TaskId>,
    /// Whether this takes the whole gang (rather than one surplus pod).
    pub whole: bool,
}

/// An action's rule on a chosen set of victims (reclaim's fair share).
pub type Validator<'a> = &'a dyn Fn(&Session<'_>, &[Unit]) -> Result<(), ReclaimRejection>;

/// Text for the eviction events of a victim unit.
pub type EvictionMessage<'a> = &'a dyn Fn(&Session<'_>, &Unit) -> String;

/// Why the victim search found no acceptable set of victims. A value, so that the search does not
/// format text nobody reads; [`NoVictims::explain`] makes the text where it is shown.
#[derive(Clone, Debug, PartialEq)]
pub enum NoVictims {
    /// A sub-group of the gang has its own topology constraint, which the search does not honour.
    SubGroupTopology,
    /// The gang's required topology level has no domain to search in.
    NoCandidateDomain,
    /// The gang fits without evicting anyone (allocate's business, which already tried).
    NoVictimNeeded,
    /// The gang has no pod left to place.
    NothingToPlace,
    /// No set of the allowed victims frees enough room on one node for this pod.
    NoRoomForPod(TaskId),
    /// The victims chosen on this node did not make room after all.
    VictimsDidNotMakeRoom(NodeId),
    /// A trimmed scenario that had been accepted could not be replayed (a bug, not a cluster state).
    ReplayFailed,
    /// The action's rule refused the victims.
    Refused(ReclaimRejection),
    /// Consolidation: these victim units (of the plan found) would have nowhere else to run.
    VictimsCannotMove(Vec<Unit>),
}

impl NoVictims {
    /// Human explanation.
    #[must_use]
    pub fn explain(&self, ssn: &Session<'_>) -> String {
        match self {
            Self::SubGroupTopology => {
                "sub-group topology constraints are not considered for eviction".to_owned()
            }
            Self::NoCandidateDomain => "no candidate domain".to_owned(),
            Self::NoVictimNeeded => "no victim needed".to_owned(),
            Self::NothingToPlace => "nothing to place".to_owned(),
            Self::NoRoomForPod(t) => format!(
                "no set of allowed victims makes room for pod {}",
                ssn.cluster.task(*t).key()
            ),
            Self::VictimsDidNotMakeRoom(n) => {
                format!("victims on {} did not make room", ssn.cluster.node(*n).name)
            }
            Self::ReplayFailed => "internal: replay of an accepted scenario failed".to_owned(),
            Self::Refused(r) => ssn.fairness.explain_rejection(r, ssn.cluster),
            Self::VictimsCannotMove(_) => {
                "the pods that would have to move have nowhere else to go".to_owned()
            }
        }
    }
}

/// A unit's place in the caller's victim order: its slot (one victim gang's units, or one unit of a
/// list given whole), then its place in the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct UnitKey {
    slot: u32,
    index: u32,
}

/// Victim units in the order they should go (least valuable first), found by the nodes they hold.
/// Preempt keeps one per queue across its preemptors and refills only the slots of the gangs a search
/// changed (a list built per preemptor made preempt quadratic in a queue's gangs); the other actions
/// give a list per search.
#[derive(Clone, Debug, Default)]
pub struct Candidates {
    slots: Vec<Vec<Unit>>,
    /// Per slot, the dense number of its first unit (numbers are never reused: a refilled slot's units
    /// get new ones), for side tables indexed by unit.
    first_number: Vec<u32>,
    numbers: u32,
    /// Per node, in order, the units that held one of its pods when their slot was filled. An entry
    /// outlives a refill of its slot; it is current while it carries the slot's first number.
    on_node: std::cell::OnceCell<IdMap<NodeId, Vec<Held>>>,
    /// Nodes whose units changed, in order, one entry per refill that reached them: what kept bounds
    /// must recompute ([`bounds::KeptBounds`]).
    refilled_nodes: Vec<NodeId>,
    /// The gangs with a slot (units of a waiting gang that has one must be left out of its search,
    /// which kept bounds do not know how to do).
    gangs: IdMap<usize, ()>,
    /// Consolidation's node bounds, kept from one search to the next.
    bounds: std::cell::RefCell<bounds::KeptBounds>,
}

/// A unit's hold on a node, as its slot was filled.
#[derive(Clone, Copy, Debug)]
struct Held {
    key: UnitKey,
    /// The slot's first unit number then (see [`Candidates::first_number`]).
    first: u32,
    gang: usize,
    /// What its pods hold there (their requests), which its eviction frees.
    freed: Resources,
}

impl Candidates {
    /// One slot per unit, in the order given.
    #[must_use]
    pub fn from_units(units: Vec<Unit>) -> Self {
        let numbers = u32::try_from(units.len()).unwrap_or(u32::MAX);
        Self {
            gangs: units.iter().map(|u| (u.gang, ())).collect(),
            slots: units.into_iter().map(|u| vec![u]).collect(),
            first_number: (0..numbers).collect(),
            numbers,
            ..Self::default()
        }
    }

    /// Adds a slot (a victim gang's units) after the others.
    pub fn push_slot(&mut self, cluster: &Cluster, units: Vec<Unit>) {
        let slot = self.slots.len();
        self.slots.push(Vec::new());
        self.first_number.push(0);
        self.refill(cluster, slot, units);
    }

    /// Replaces a slot's units (its gang changed).
    pub fn refill(&mut self, cluster: &Cluster, slot: usize, units: Vec<Unit>) {
        self.index(cluster);
        let (Some(s), Some(first)) = (self.slots.get_mut(slot), self.first_number.get_mut(slot)) else {
            return;
        };
        *first = self.numbers;
        self.numbers = self
            .numbers
            .saturating_add(u32::try_from(units.len()).unwrap_or(u32::MAX));
        if let Some(on_node) = self.on_node.get_mut() {
            index_slot(on_node, cluster, slot, *first, &units);
        }
        // The nodes its units held and hold now: their entries changed.
        for u in s.iter().chain(&units) {
            self.gangs.insert(u.gang, ());
            self.refilled_nodes
                .extend(u.tasks.iter().filter_map(|t| cluster.task(*t).node));
        }
        *s = units;
    }

    /// Every unit, in order (debug checks of a kept list).
    #[cfg(debug_assertions)]
    #[must_use]
    pub fn units(&self) -> Vec<Unit> {
        self.in_order(self.slots.len()).map(|(_, u)| u.clone()).collect()
    }

    /// Slots so far.
    #[must_use]
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    fn index(&self, cluster: &Cluster) -> &IdMap<NodeId, Vec<Held>> {
        self.on_node.get_or_init(|| {
            let mut on_node = IdMap::default();
            for (slot, units) in self.slots.iter().enumerate() {
                let first = self.first_number.get(slot).copied().unwrap_or(u32::MAX);
                index_slot(&mut on_node, cluster, slot, first, units);
            }
            on_node
        })
    }

    /// Whether an entry of the index is current (its slot not refilled since).
    fn current(&self, held: &Held) -> bool {
        self.first_number.get(held.key.slot as usize) == Some(&held.first)
    }

    /// The unit's dense number (below [`Candidates::numbers`]).
    fn number(&self, key: UnitKey) -> usize {
        self.first_number
            .get(key.slot as usize)
            .map_or(usize::MAX, |first| *first as usize + key.index as usize)
    }

    /// How many unit numbers were handed out.
    fn numbers(&self) -> usize {
        self.numbers as usize
    }

    fn unit(&self, key: UnitKey) -> Option<&Unit> {
        self.slots.get(key.slot as usize)?.get(key.index as usize)
    }

    /// Units of the first `slots` slots, in order.
    fn in_order(&self, slots: usize) -> impl Iterator<Item = (UnitKey, &Unit)> {
        self.slots
            .iter()
            .take(slots)
            .enumerate()
            .flat_map(|(slot, units)| {
                units
                    .iter()
                    .enumerate()
                    .map(move |(index, u)| (key(slot, index), u))
            })
    }
}

/// Victim gangs in victim order with their units, kept across one action's searches: each search
/// changes only the gangs it evicted from and its own gang, whose slots are refilled after it
/// ([`Pool::refill`]). Rebuilding the list for every waiting gang made victim searches quadratic.
pub struct Pool {
    gangs: Vec<usize>,
    /// Gang to slot, made at the first refill (most actions never refill).
    slot_of: Option<IdMap<usize, usize>>,
    /// Whether a gang may go whole (not only its surplus pods), asked when its units are listed.
    may_go_whole: WholeRule,
    candidates: Candidates,
}

/// Whether a victim gang may go whole (a gang its minimum runtime protects may lose only its surplus).
pub type WholeRule = fn(&Session<'_>, usize) -> bool;

impl Pool {
    /// `gangs` in victim order. Their units are listed when a search first reaches them
    /// ([`Pool::fill_to`]): preemptors of a queue often reach none.
    #[must_use]
    pub fn new(gangs: Vec<usize>, may_go_whole: WholeRule) -> Self {
        Self {
            gangs,
            slot_of: None,
            may_go_whole,
            candidates: Candidates::default(),
        }
    }

    /// Lists the units of the first `slots` gangs (those not listed yet).
    pub fn fill_to(&mut self, ssn: &Session<'_>, slots: usize) {
        for slot in self.candidates.slots()..slots.min(self.gangs.len()) {
            let v = self.gangs[slot];
            let units = units_of(ssn, v, (self.may_go_whole)(ssn, v));
            self.candidates.push_slot(ssn.cluster, units);
        }
    }

    /// Refreshes gang `v`'s units after it changed; false if it has no slot.
    pub fn refill(&mut self, ssn: &Session<'_>, v: usize) -> bool {
        let gangs = &self.gangs;
        let slot_of = self
            .slot_of
            .get_or_insert_with(|| gangs.iter().enumerate().map(|(slot, g)| (*g, slot)).collect());
        let Some(&slot) = slot_of.get(&v) else {
            return false;
        };
        // A slot not listed yet is listed fresh when reached.
        if slot < self.candidates.slots() {
            let units = units_of(ssn, v, (self.may_go_whole)(ssn, v));
            self.candidates.refill(ssn.cluster, slot, units);
        }
        true
    }

    /// Refreshes the gangs of `chosen` and gang `g` after `g` evicted `chosen` and took their room.
    pub fn refill_after(&mut self, ssn: &Session<'_>, g: usize, chosen: &[Unit]) {
        for u in chosen {
            self.refill(ssn, u.gang);
        }
        self.refill(ssn, g);
    }

    /// The victim gangs, in order (slot numbers).
    #[must_use]
    pub fn gangs(&self) -> &[usize] {
        &self.gangs
    }

    /// Their units (of the gangs listed so far).
    #[must_use]
    pub fn candidates(&self) -> &Candidates {
        &self.candidates
    }
}

fn key(slot: usize, index: usize) -> UnitKey {
    UnitKey {
        slot: u32::try_from(slot).unwrap_or(u32::MAX),
        index: u32::try_from(index).unwrap_or(u32::MAX),
    }
}

fn index_slot(
    on_node: &mut IdMap<NodeId, Vec<Held>>,
    cluster: &Cluster,
    slot: usize,
    first: u32,
    units: &[Unit],
) {
    for (index, u) in units.iter().enumerate() {
        let k = key(slot, index);
        for t in &u.tasks {
            let task = cluster.task(*t);
            let Some(n) = task.node else { continue };
            // As `unit_request_on` counts it when the search evicts the unit.
            let freed = if task.status.is_allocated() {
                task.request
            } else {
                Resources::ZERO
            };
            let list = on_node.entry(n).or_default();
            match list.binary_search_by_key(&k, |h| h.key) {
                Ok(at) if list[at].first == first => list[at].freed.add(&freed),
                Ok(at) => {
                    list[at] = Held {
                        key: k,
                        first,
                        gang: u.gang,
                        freed,
                    };
                }
                Err(at) => list.insert(
                    at,
                    Held {
                        key: k,
                        first,
                        gang: u.gang,
                        freed,
                    },
                ),
            }
        }
    }
}

/// What the solver needs from an action; built with [`Request::new`] (or [`Request::among`]) and the
/// few settings that differ between actions.
pub struct Request<'a> {
    /// The waiting gang.
    gang: usize,
    /// Victims, in the order they should go (least valuable first).
    candidates: std::borrow::Cow<'a, Candidates>,
    /// Only the units of the first this many slots may go.
    slots: usize,
    /// Units of this gang may not go (the waiting gang's own running pods, in a kept list).
    excluded_gang: Option<usize>,
    /// Units that may not go (consolidation's victims that could not move, when it plans again).
    excluded_units: &'a [Unit],
    /// Why they go (events).
    cause: EvictionCause,
    /// Text for the eviction events.
    message: EvictionMessage<'a>,
    /// Victims must find a new place (consolidation): a scenario that would kill one is rejected.
    victims_must_move: bool,
    /// At most this many victim gangs.
    max_victim_gangs: usize,
    /// The action's rule on the chosen victims, if it has one.
    validate: Option<Validator<'a>>,
}

impl<'a> Request<'a> {
    /// A search for room for `gang` among `candidates` (least valuable first): any number of victim
    /// gangs, victims evicted for good, no rule on the chosen set.
    #[must_use]
    pub fn new(
        gang: usize,
        candidates: Vec<Unit>,
        cause: EvictionCause,
        message: EvictionMessage<'a>,
    ) -> Self {
        Self::with(
            gang,
            std::borrow::Cow::Owned(Candidates::from_units(candidates)),
            cause,
            message,
        )
    }

    /// A search among kept candidates (see [`Candidates`]); narrow it with [`Request::first_slots`]
    /// and [`Request::excluding_gang`].
    #[must_use]
    pub fn among(
        gang: usize,
        candidates: &'a Candidates,
        cause: EvictionCause,
        message: EvictionMessage<'a>,
    ) -> Self {
        Self::with(gang, std::borrow::Cow::Borrowed(candidates), cause, message)
    }

    fn with(
        gang: usize,
        candidates: std::borrow::Cow<'a, Candidates>,
        cause: EvictionCause,
        message: EvictionMessage<'a>,
    ) -> Self {
        Self {
            gang,
            slots: candidates.slots(),
            candidates,
            excluded_gang: None,
            excluded_units: &[],
            cause,
            message,
            victims_must_move: false,
            max_victim_gangs: usize::MAX,
            validate: None,
        }
    }

    /// Only the units of the first `slots` slots may go.
    #[must_use]
    pub fn first_slots(mut self, slots: usize) -> Self {
        self.slots = slots.min(self.candidates.slots());
        self
    }

    /// Whether this search's candidates are every unit of the list (no slot cut, no unit left out but
    /// those of a gang without a slot), so bounds kept for the list hold for it.
    fn takes_every_unit(&self) -> bool {
        self.slots == self.candidates.slots()
            && self.excluded_units.is_empty()
            && self
                .excluded_gang
                .is_none_or(|g| !self.candidates.gangs.contains_key(&g))
    }

    /// Units of `gang` may not go.
    #[must_use]
    pub fn excluding_gang(mut self, gang: usize) -> Self {
        self.excluded_gang = Some(gang);
        self
    }

    /// `units` may not go.
    #[must_use]
    pub fn excluding_units(mut self, units: &'a [Unit]) -> Self {
        self.excluded_units = units;
        self
    }

    /// Accepts a scenario only if every victim pod has somewhere else to run (consolidation).
    #[must_use]
    pub fn victims_must_move(mut self) -> Self {
        self.victims_must_move = true;
        self
    }

    /// Takes victims from at most `max` gangs.
    #[must_use]
    pub fn max_victim_gangs(mut self, max: usize) -> Self {
        self.max_victim_gangs = max;
        self
    }

    /// Submits the chosen victims to the action's rule.
    #[must_use]
    pub fn validated_by(mut self, validate: Validator<'a>) -> Self {
        self.validate = Some(validate);
        self
    }

    /// How many units may go in this search.
    #[must_use]
    pub fn allowed_units(&self) -> usize {
        self.candidates
            .in_order(self.slots)
            .filter(|(k, u)| self.allows(*k, u))
            .count()
    }

    /// Whether the unit at `key` may go in this search.
    fn allows(&self, key: UnitKey, unit: &Unit) -> bool {
        (key.slot as usize) < self.slots
            && Some(unit.gang) != self.excluded_gang
            && !self.excluded_units.contains(unit)
    }

    /// The units that may go and held a pod on `node` when the search began, in order.
    fn units_on(&self, cluster: &Cluster, node: NodeId) -> Vec<UnitKey> {
        match self.candidates.index(cluster).get(&node) {
            Some(held) => self.may_go(held).map(|h| h.key).collect(),
            None => Vec::new(),
        }
    }

    /// The current entries of a node's index that may go in this search.
    fn may_go<'s>(&'s self, held: &'s [Held]) -> impl Iterator<Item = &'s Held> + 's {
        held.iter().filter(move |h| {
            self.candidates.current(h)
                && (h.key.slot as usize) < self.slots
                && Some(h.gang) != self.excluded_gang
                && (self.excluded_units.is_empty()
                    || self
                        .candidates
                        .unit(h.key)
                        .is_some_and(|u| !self.excluded_units.contains(u)))
        })
    }
}

/// Units of a victim gang: its surplus pods one by one (last in task order first), then the whole gang
/// (unless `allow_whole` is false, e.g. a gang protected by its minimum runtime).
#[must_use]
pub fn units_of(ssn: &Session<'_>, gang: usize, allow_whole: bool) -> Vec<Unit> {
    let g = &ssn.gangs[gang];
    let cluster = &*ssn.cluster;
    let mut units = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        if !node.children.is_empty() {
            continue;
        }
        let active = g.active(cluster, i);
        let surplus = active.saturating_sub(node.min) as usize;
        if surplus == 0 {
            continue;
        }
        let mut evictable: Vec<TaskId> = node
            .tasks
            .iter()
            .copied()
            .filter(|t| cluster.task(*t).status.is_allocated() && cluster.task(*t).ours)
            .collect();
        evictable.sort_by(|a, b| super::allocate::task_order(cluster, *b, *a));
        for t in evictable.into_iter().take(surplus) {
            units.push(Unit {
                gang,
                tasks: vec![t],
                whole: false,
            });
        }
    }
    if allow_whole {
        let all: Vec<TaskId> = g
            .tasks()
            .filter(|t| cluster.task(*t).status.is_allocated() && cluster.task(*t).ours)
            .collect();
        if !all.is_empty() {
            units.push(Unit {
                gang,
                tasks: all,
                whole: true,
            });
        }
    }
    units
}

/// Whether a victim gang is protected by its queue's minimum runtime for this kind of eviction; if so,
/// the session is woken when the protection ends.
#[must_use]
pub fn protected_by_min_runtime(ssn: &Session<'_>, gang: usize, reclaim: bool) -> bool {
    let end = min_runtime_end(ssn, gang, reclaim);
    if let Some(end) = end {
        ssn.wake_at(end);
    }
    end.is_some()
}

/// When a gang last started, as minimum runtimes count it: the earliest binding among its pods that
/// hold a node (the API server's record of it; a bind in flight counts as now). A gang whose pods were
/// all evicted starts again with new pods, so their bindings are its new start; a start annotation
/// (`kai.scheduler/last-start-timestamp`, written by KAI) counts when it is later. A running pod with no
/// binding time (a kubelet that reports no `PodScheduled` time) counts from its creation, the latest
/// time known to be no later than its binding. `None` when no pod holds a node.
#[must_use]
pub fn gang_start(ssn: &Session<'_>, gang: usize) -> Option<crate::model::Millis> {
    let g = &ssn.gangs[gang];
    let first_bind = g
        .tasks()
        .filter_map(|t| {
            let task = ssn.cluster.task(t);
            match task.assumed {
                Assumed::Binding { .. } => Some(ssn.now),
                _ if task.api.status.holds_node() => Some(task.api.bound_at.unwrap_or(task.created)),
                _ => None,
            }
        })
        .min();
    first_bind.max(ssn.cluster.group(g.root).last_start)
}

/// When a victim gang's minimum runtime for this kind of eviction ends, if it has not ended yet.
#[must_use]
pub fn min_runtime_end(ssn: &Session<'_>, gang: usize, reclaim: bool) -> Option<crate::model::Millis> {
    let g = &ssn.gangs[gang];
    let defaults = &ssn.config.plugins.minruntime;
    let default = if reclaim {
        defaults.default_reclaim_min_runtime
    } else {
        defaults.default_preempt_min_runtime
    };
    let mut min = None;
    let mut q = g.queue;
    while let (Some(id), None) = (q, min) {
        let queue = ssn.cluster.queue(id);
        min = if reclaim {
            queue.reclaim_min_runtime_ms
        } else {
            queue.preempt_min_runtime_ms
        };
        q = queue.parent;
    }
    let min = min.unwrap_or_else(|| i64::try_from(default.as_millis()).unwrap_or(i64::MAX));
    // No minimum (the default) needs no start: the gang's pods are not visited.
    if min <= 0 {
        return None;
    }
    let start = gang_start(ssn, gang)?;
    (ssn.now.saturating_sub(start) < min).then(|| start.saturating_add(min))
}

/// The sharers still holding each shared device of a node as victims are picked: a device whose last
/// active sharer is picked is freed whole (fractions are not in a pod's node-level request). A fraction
/// joins a device only with room free now, and is reserved only on whole devices (`shared_fit`), so a
/// device that victims leave partly is no room for it: only one they leave empty is.
struct SharersLeft(HashMap<Arc<str>, (u32, u32)>);

impl SharersLeft {
    fn on(node: &Node) -> Self {
        Self(
            node.shared_gpus
                .iter()
                .filter(|d| d.nominated_holders == 0)
                .map(|d| {
                    let active = d.holders - d.nominated_holders - d.releasing_holders;
                    (d.group.clone(), (active, d.free_now()))
                })
                .collect(),
        )
    }

    /// Milli-GPUs freed on `node` by evicting `unit` after the units counted before.
    fn freed_by(&mut self, cluster: &Cluster, unit: &Unit, node: NodeId) -> i64 {
        let mut freed = 0;
        for t in &unit.tasks {
            let task = cluster.task(*t);
            if task.node != Some(node) || !task.status.is_allocated() || !task.gpu.is_shared() {
                continue;
            }
            for group in &task.gpu_groups {
                if let Some((left, _)) = self.0.get_mut(group)
                    && *left > 0
                {
                    *left -= 1;
                    if *left == 0 {
                        freed += 1000;
                    }
                }
            }
        }
        freed
    }

    /// Whether a fractional request finds its devices: devices still shared with enough room now, and
    /// whole devices free later (`later`'s GPUs, which count those freed whole). Other requests are not
    /// judged here: the node-level sum covers whole GPUs, and the trial of the picked victims settles
    /// GPU memory requests.
    fn room_for(&self, gpu: GpuRequest, later: &Resources) -> bool {
        let GpuRequest::Fraction { milli, devices } = gpu else {
            return true;
        };
        let shared = self
            .0
            .values()
            .filter(|(left, free_now)| *left > 0 && *free_now >= milli)
            .count();
        let whole = usize::try_from(later.0[GPU].max(0) / 1000).unwrap_or(0);
        shared + whole >= devices as usize
    }
}

fn unit_request_on(ssn: &Session<'_>, unit: &Unit, node: NodeId) -> Resources {
    let mut r = Resources::ZERO;
    for t in &unit.tasks {
        let task = ssn.cluster.task(*t);
        if task.node == Some(node) && task.status.is_allocated() {
            r.add(&task.request);
        }
    }
    r
}

/// Tries to make room for a gang. On success the evictions and the gang's reservations stay in the
/// session and the chosen units are returned; on failure nothing changes.
///
/// # Errors
/// Why no acceptable set of victims was found.
pub fn solve(ssn: &mut Session<'_>, req: &Request<'_>) -> Result<Vec<Unit>, NoVictims> {
    // A required topology: victims are sought one domain at a time, freest first.
    let gang = &ssn.gangs[req.gang];
    if gang
        .nodes
        .iter()
        .skip(1)
        .any(|n| n.topology.as_ref().is_some_and(|t| t.required.is_some()))
    {
        return Err(NoVictims::SubGroupTopology);
    }
    let domains: Vec<Option<Vec<NodeId>>> = match gang.nodes[0].topology.as_ref() {
        Some(t) if t.required.is_some() => {
            let level = t.required.unwrap_or(0);
            let mut ds: Vec<(Resources, Vec<NodeId>)> = topology::domains(ssn.cluster, &t.levels, level)
                .into_iter()
                .map(|d| (topology::free(ssn.cluster, &d.nodes), d.nodes))
                .collect();
            ds.sort_by_key(|(free, _)| (-free.gpu(), -free.cpu()));
            ds.into_iter().map(|(_, nodes)| Some(nodes)).collect()
        }
        _ => vec![None],
    };
    let mut last = NoVictims::NoCandidateDomain;
    for domain in domains {
        match solve_in(ssn, req, domain.as_deref()) {
            Ok(chosen) => return Ok(chosen),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn solve_in(
    ssn: &mut Session<'_>,
    req: &Request<'_>,
    domain: Option<&[NodeId]>,
) -> Result<Vec<Unit>, NoVictims> {
    let start = ssn.checkpoint();
    let chosen = match place_with_victims(ssn, req, domain) {
        Ok(chosen) if chosen.is_empty() => {
            // Room without victims is allocate's business (it already tried and failed for a reason).
            ssn.rollback(start);
            return Err(NoVictims::NoVictimNeeded);
        }
        Ok(chosen) => chosen,
        Err(e) => {
            ssn.rollback(start);
            return Err(e);
        }
    };
    // Trim: replay without each unit (last chosen first) and keep the smaller set when it still works.
    // Every trial starts from the state before the search; then the chosen set is replayed. A replay
    // places the pods where the index prefers, which need not be where the search made room: when the
    // set the search found does not replay, the search is run again instead (leaving a failed replay's
    // evictions in place would evict for a gang that is not placed).
    let mut chosen = chosen;
    if chosen.len() > 1 && chosen.len() <= 32 {
        let mut trimmed = false;
        for i in (0..chosen.len()).rev() {
            let mut without = chosen.clone();
            without.remove(i);
            ssn.rollback(start);
            if replay(ssn, req, &without, domain).is_ok() {
                chosen = without;
                trimmed = true;
            }
        }
        ssn.rollback(start);
        let restored = replay(ssn, req, &chosen, domain).is_ok() || {
            ssn.rollback(start);
            !trimmed && place_with_victims(ssn, req, domain).is_ok_and(|again| again == chosen)
        };
        if !restored {
            ssn.rollback(start);
            return Err(NoVictims::ReplayFailed);
        }
    }
    if let Some(validate) = req.validate
        && let Err(rejection) = validate(ssn, &chosen)
    {
        ssn.rollback(start);
        return Err(NoVictims::Refused(rejection));
    }
    if req.victims_must_move {
        // Every unit is tried (not only up to the first that cannot move), so the caller can search
        // again without all of those that cannot.
        let before_moves = ssn.checkpoint();
        let mut promised = PromisedShares::new();
        let stuck: Vec<Unit> = chosen
            .iter()
            .filter(|u| !u.tasks.iter().all(|t| relocate(ssn, *t, &mut promised)))
            .cloned()
            .collect();
        ssn.rollback(before_moves);
        if !stuck.is_empty() {
            ssn.rollback(start);
            return Err(NoVictims::VictimsCannotMove(stuck));
        }
    }
    Ok(chosen)
}

/// Re-runs a scenario: evict exactly `units`, then place the gang (reservations only).
fn replay(
    ssn: &mut Session<'_>,
    req: &Request<'_>,
    units: &[Unit],
    domain: Option<&[NodeId]>,
) -> Result<(), ()> {
    release_own(ssn, req.gang);
    for u in units {
        evict_unit(ssn, req, u);
    }
    let tasks = tasks_to_place(ssn, req.gang);
    for t in tasks {
        let found = {
            let cluster = &*ssn.cluster;
            ssn.index
                .find(cluster, cluster.task(t), &ssn.policy, domain, None)
        };
        match found {
            Some(p) => ssn.pipeline(t, p.node, p.gpu_groups),
            None => return Err(()),
        }
    }
    Ok(())
}

fn release_own(ssn: &mut Session<'_>, gang: usize) {
    let reserved: Vec<TaskId> = ssn.gangs[gang]
        .tasks()
        .filter(|t| ssn.cluster.task(*t).status == TaskStatus::Pipelined)
        .collect();
    for t in reserved {
        ssn.unreserve(t);
    }
}

fn tasks_to_place(ssn: &Session<'_>, gang: usize) -> Vec<TaskId> {
    let cluster = &*ssn.cluster;
    ssn.gangs[gang].tasks_to_allocate(cluster, &|a, b| super::allocate::task_order(cluster, a, b))
}

fn evict_unit(ssn: &mut Session<'_>, req: &Request<'_>, unit: &Unit) {
    let message = (req.message)(ssn, unit);
    let for_gang: Option<GroupId> = Some(ssn.gangs[req.gang].root);
    for t in &unit.tasks {
        if ssn.cluster.task(*t).status.is_allocated() {
            ssn.evict(*t, req.cause, for_gang, message.clone());
        }
    }
}

fn place_with_victims(
    ssn: &mut Session<'_>,
    req: &Request<'_>,
    domain: Option<&[NodeId]>,
) -> Result<Vec<Unit>, NoVictims> {
    release_own(ssn, req.gang);
    let tasks = tasks_to_place(ssn, req.gang);
    if tasks.is_empty() {
        return Err(NoVictims::NothingToPlace);
    }
    let mut search = Search::new(req);
    let mut chosen: Vec<Unit> = Vec::new();
    let count = tasks.len();
    for (i, t) in tasks.into_iter().enumerate() {
        // Room already (idle, or freed by victims chosen for earlier pods)?
        let found = {
            let cluster = &*ssn.cluster;
            ssn.index
                .find(cluster, cluster.task(t), &ssn.policy, domain, None)
        };
        if let Some(p) = found {
            ssn.pipeline(t, p.node, p.gpu_groups);
            continue;
        }
        let last_pod = i + 1 == count;
        let Some(Choice { node, picked, .. }) = search.best_node(ssn, req, t, last_pod, domain) else {
            return Err(NoVictims::NoRoomForPod(t));
        };
        for k in picked {
            let Some(unit) = req.candidates.unit(k).cloned() else {
                continue;
            };
            search.taken.push(k);
            search.victim_gangs.insert(unit.gang, ());
            evict_unit(ssn, req, &unit);
            chosen.push(unit);
        }
        let placed = {
            let cluster = &*ssn.cluster;
            ssn.index.check(cluster, cluster.task(t), &ssn.policy, node)
        };
        match placed {
            Ok(p) => ssn.pipeline(t, p.node, p.gpu_groups),
            Err(_) => return Err(NoVictims::VictimsDidNotMakeRoom(node)),
        }
    }
    Ok(chosen)
}

/// A node where victims make room for a pod: the fewest units, then the earliest last one, then the
/// lowest node id.
struct Choice {
    rank: Rank,
    node: NodeId,
    picked: Vec<UnitKey>,
}

/// A node's rank for a pod: the units it takes, its last unit, the node.
type Rank = (usize, UnitKey, NodeId);

/// What [`Search::rank_bound`] reads of the pod, once per search.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct BoundPod {
    /// No rule puts blockers first, and the pod asks for whole GPUs.
    plain: bool,
    /// What it asks for (GPUs in milli).
    request: Resources,
    constraints: ConstraintsId,
}

/// What one gang's search keeps from pod to pod.
struct Search {
    /// Units chosen for earlier pods.
    taken: Vec<UnitKey>,
    /// Their gangs.
    victim_gangs: IdMap<usize, ()>,
    /// Consolidation: whether each unit has somewhere else to go as the cluster stands, asked the
    /// first time the unit could be picked. A unit that cannot move now would only fail the plan's
    /// final check, and picking units in order would otherwise keep choosing such pods (the whole-GPU
    /// pod beside the fractions that could move) until the replans run out. The answers are kept for
    /// this whole search (possibly stale after the victims chosen for a gang's first pods): they only
    /// steer the choice, and the plan's final check decides.
    /// By unit number.
    movable: Vec<Option<bool>>,
    copies: PlaceOfCopy,
    /// Scratch of [`Search::rank_bound`]: a node's units with the GPUs each frees there, and those GPUs.
    bound_units: Vec<(UnitKey, i64)>,
    bound_freed: Vec<i64>,
}

impl Search {
    fn new(req: &Request<'_>) -> Self {
        Self {
            taken: Vec::new(),
            victim_gangs: IdMap::default(),
            movable: if req.victims_must_move {
                vec![None; req.candidates.numbers()]
            } else {
                Vec::new()
            },
            copies: PlaceOfCopy::default(),
            bound_units: Vec::new(),
            bound_freed: Vec::new(),
        }
    }

    /// The node where the fewest (and earliest) units make room for `t`.
    ///
    /// Nodes are met through the units in order. A node's choice cannot end before the first unit
    /// that led to it, so once a single unit makes room somewhere, the units after it lead to no
    /// better node: the walk stops there, which keeps a preemptor's search short however many
    /// victims its queue holds. Consolidation's answers about who can move are asked as the session
    /// stands and kept for the gang's later pods, so it meets every node, as before, except for the
    /// gang's last pod, whose answers nobody reads again ([`Search::best_node_by_bound`]).
    fn best_node(
        &mut self,
        ssn: &mut Session<'_>,
        req: &Request<'_>,
        t: TaskId,
        last_pod: bool,
        domain: Option<&[NodeId]>,
    ) -> Option<Choice> {
        // No eviction makes room for a pod larger than every node (the search would weigh them all).
        if !ssn.fits_some_node(&ssn.cluster.task(t).request) {
            return None;
        }
        let mut best: Option<Choice> = None;
        if req.victims_must_move && last_pod {
            return self.best_node_by_bound(ssn, req, t, domain);
        }
        if req.victims_must_move {
            // Every node that held a candidate, in any order: the choice is the least rank.
            for node in req.candidates.index(ssn.cluster).keys() {
                self.weigh(ssn, req, t, *node, domain, &mut best);
            }
            return best;
        }
        let mut met: IdMap<NodeId, ()> = IdMap::default();
        for (k, unit) in req.candidates.in_order(req.slots) {
            if best.as_ref().is_some_and(|b| b.rank.0 == 1 && k > b.rank.1) {
                break;
            }
            if self.taken.contains(&k) || !req.allows(k, unit) {
                continue;
            }
            for v in &unit.tasks {
                let Some(node) = ssn.cluster.task(*v).node else {
                    continue;
                };
                if met.insert(node, ()).is_some() {
                    continue;
                }
                self.weigh(ssn, req, t, node, domain, &mut best);
            }
        }
        best
    }

    /// Weighs `node` for `t` and keeps it if its choice ranks before `best`.
    fn weigh(
        &mut self,
        ssn: &mut Session<'_>,
        req: &Request<'_>,
        t: TaskId,
        node: NodeId,
        domain: Option<&[NodeId]>,
        best: &mut Option<Choice>,
    ) {
        ssn.stats.victim_nodes_weighed += 1;
        if let Some(choice) = self.on_node(ssn, req, t, node, domain)
            && best.as_ref().is_none_or(|b| choice.rank < b.rank)
        {
            *best = Some(choice);
        }
    }

    /// Every node that held a candidate, met in order of a rank no node can beat ([`Search::rank_bound`]),
    /// until the next bound is above the best rank found. For a search whose choices leave nothing
    /// behind (consolidation's last pod): consolidation on a full cluster weighed every node for
    /// every waiting gang.
    fn best_node_by_bound(
        &mut self,
        ssn: &mut Session<'_>,
        req: &Request<'_>,
        t: TaskId,
        domain: Option<&[NodeId]>,
    ) -> Option<Choice> {
        let task = ssn.cluster.task(t);
        let pod = BoundPod {
            // Rules put blockers first and a fraction's devices are settled by trying: only the plain
            // bound holds for such a pod.
            plain: !ssn.index.rules.relevant(task) && !task.gpu.is_shared(),
            request: task.request,
            constraints: task.constraints,
        };
        let mut best: Option<Choice> = None;
        // Bounds depend on the nodes and the list alone when the search takes every unit of the list
        // and nothing is taken yet: they are kept from one waiting gang to the next, and only the nodes
        // changed since are bounded again (computing every node's bound per waiting gang made
        // consolidation on a full cluster quadratic).
        if domain.is_none() && self.taken.is_empty() && req.takes_every_unit() {
            let mut kept = req.candidates.bounds.borrow_mut();
            let ordered = kept.brought_up_to_date(self, ssn, req, &pod);
            for bound in ordered {
                if best.as_ref().is_some_and(|b| *bound > b.rank) {
                    break;
                }
                self.weigh(ssn, req, t, bound.2, domain, &mut best);
            }
            return best;
        }
        let mut bounds: std::collections::BinaryHeap<std::cmp::Reverse<Rank>> = req
            .candidates
            .index(ssn.cluster)
            .iter()
            .filter_map(|(node, held)| self.rank_bound(ssn, req, &pod, *node, held, domain))
            .map(std::cmp::Reverse)
            .collect();
        while let Some(std::cmp::Reverse(bound)) = bounds.pop() {
            if best.as_ref().is_some_and(|b| bound > b.rank) {
                break;
            }
            self.weigh(ssn, req, t, bound.2, domain, &mut best);
        }
        best
    }

    /// A rank no higher than the one [`Search::on_node`] gives `t` on `node`, or `None` where it gives
    /// none. The units there are taken in order, so whatever they are, the choice holds at least as many
    /// as the fewest of the largest it would take to free the GPUs missing, and its last unit comes no
    /// earlier than that many units in. Where a rule puts blockers first or shared devices free whole
    /// GPUs, only the plain bound holds: one unit, the first.
    fn rank_bound(
        &mut self,
        ssn: &mut Session<'_>,
        req: &Request<'_>,
        pod: &BoundPod,
        node: NodeId,
        held: &[Held],
        domain: Option<&[NodeId]>,
    ) -> Option<Rank> {
        if domain.is_some_and(|d| !d.contains(&node)) {
            return None;
        }
        // The units here in order, with the GPUs each frees here, and all they free together.
        let units = &mut self.bound_units;
        units.clear();
        let mut freed = Resources::ZERO;
        for h in req.may_go(held).filter(|h| !self.taken.contains(&h.key)) {
            units.push((h.key, h.freed.0[GPU]));
            freed.add(&h.freed);
        }
        let first = units.first()?.0;
        if !ssn.index.eligibility.check(ssn.cluster, pod.constraints, node) {
            return None;
        }
        let n = ssn.cluster.node(node);
        // Not even every unit here frees what the pod lacks of a resource besides GPUs (whose bound,
        // devices and sharers included, follows): the search ends with nothing fitting there.
        let (_, later) = n.available(&Resources::ZERO);
        let (mut most, mut need) = (later.plus(&freed), pod.request);
        (most.0[GPU], need.0[GPU]) = (0, 0);
        if !need.fits_in(&most) {
            return None;
        }
        // Shared devices here free whole GPUs when their last sharer goes.
        if !pod.plain || !n.shared_gpus.is_empty() {
            return Some((1, first, node));
        }
        let missing = pod.request.0[GPU].saturating_sub(n.gpu_later());
        if missing <= 0 {
            return Some((1, first, node));
        }
        let units = &self.bound_units;
        let freed = &mut self.bound_freed;
        freed.clear();
        freed.extend(units.iter().map(|(_, gpu)| *gpu));
        freed.sort_unstable_by(|a, b| b.cmp(a));
        let mut sum: i64 = 0;
        let mut fewest = 0;
        for f in freed.iter() {
            if sum >= missing {
                break;
            }
            sum = sum.saturating_add(*f);
            fewest += 1;
        }
        if sum < missing {
            // Not even every unit here frees the GPUs missing.
            return None;
        }
        let fewest = fewest.max(1);
        Some((fewest, units.get(fewest - 1)?.0, node))
    }

    /// The units (earliest first) whose eviction makes room for `t` on `node`, if any do.
    fn on_node(
        &mut self,
        ssn: &mut Session<'_>,
        req: &Request<'_>,
        t: TaskId,
        node: NodeId,
        domain: Option<&[NodeId]>,
    ) -> Option<Choice> {
        if domain.is_some_and(|d| !d.contains(&node)) {
            return None;
        }
        let units = req.units_on(ssn.cluster, node);
        if units.is_empty() {
            return None;
        }
        let task = ssn.cluster.task(t);
        if !ssn.index.eligibility.check(ssn.cluster, task.constraints, node) {
            return None;
        }
        // Storage that keeps the pod off this node is no matter of room (a volume elsewhere, none to
        // bind here): evicting would free nothing it needs.
        let volumes_matter = !task.claims.is_empty();
        if volumes_matter && volumes_exclude(ssn.cluster, task, node) {
            return None;
        }
        // Pods here that block this one by a rule (a host port, anti-affinity either way) go first,
        // whatever their place in the caller's order: no amount of other room makes up for them.
        let rules_matter = ssn.index.rules.relevant(task);
        let mut blockers = if rules_matter {
            blocking_pods(ssn.cluster, t, node)
        } else {
            Vec::new()
        };
        let unit_of = |k: &UnitKey| req.candidates.unit(*k);
        let (blocking, rest): (Vec<UnitKey>, Vec<UnitKey>) = if blockers.is_empty() {
            (Vec::new(), units)
        } else {
            units
                .iter()
                .partition(|k| unit_of(k).is_some_and(|u| u.tasks.iter().any(|v| blockers.contains(v))))
        };
        // The gang released its reservations above and those its earlier pods took in this attempt
        // are not room for this one: every reservation here counts against it.
        let (_, mut later) = ssn.cluster.node(node).available(&Resources::ZERO);
        let need = task.request;
        let gpu = task.gpu;
        let shared = gpu.is_shared();
        let mut sharers = SharersLeft::on(ssn.cluster.node(node));
        let mut picked = Vec::new();
        for k in blocking.into_iter().chain(rest) {
            if need.fits_in(&later) && blockers.is_empty() && sharers.room_for(gpu, &later) {
                break;
            }
            let Some(unit) = unit_of(&k) else { continue };
            if self.taken.contains(&k)
                || (!self.victim_gangs.contains_key(&unit.gang)
                    && self.victim_gangs.len() >= req.max_victim_gangs)
            {
                continue;
            }
            if req.victims_must_move {
                let number = req.candidates.number(k);
                let can = match self.movable.get(number).copied().flatten() {
                    Some(can) => can,
                    None => {
                        let can = could_move_now(ssn, &mut self.copies, unit);
                        if let Some(slot) = self.movable.get_mut(number) {
                            *slot = Some(can);
                        }
                        can
                    }
                };
                if !can {
                    continue;
                }
            }
            later.add(&unit_request_on(ssn, unit, node));
            later.0[GPU] += sharers.freed_by(ssn.cluster, unit, node);
            blockers.retain(|b| !unit.tasks.contains(b));
            picked.push(k);
        }
        let last = *picked.last()?;
        if !need.fits_in(&later) || !blockers.is_empty() || !sharers.room_for(gpu, &later) {
            return None;
        }
        // Rules over a domain wider than the node (zone anti-affinity, spread), and a fraction's
        // room on a device, are settled by trying: evict the picked units, ask the node, undo.
        if (rules_matter || volumes_matter || shared) && !fits_once_evicted(ssn, req, t, node, &picked) {
            return None;
        }
        Some(Choice {
            rank: (picked.len(), last, node),
            node,
            picked,
        })
    }
}

/// The pods on `node` that keep `t` off it by a rule: a conflicting host port, a pod its required
/// anti-affinity selects, or a pod whose required anti-affinity selects it. Terminating pods are on their
/// way out already and do not count.
fn blocking_pods(cluster: &Cluster, t: TaskId, node: NodeId) -> Vec<TaskId> {
    let task = cluster.task(t);
    let book = &cluster.rules;
    let rules = book.rules(task.rules);
    let n = cluster.node(node);
    let mut blockers: Vec<TaskId> = n
        .host_ports
        .iter()
        .filter(|u| !u.releasing && u.task != t && rules.host_ports.iter().any(|p| p.conflicts(&u.port)))
        .map(|u| u.task)
        .collect();
    for other in n.tasks.iter().copied().filter(|o| *o != t) {
        let o = cluster.task(other);
        if o.status == TaskStatus::Releasing {
            continue;
        }
        let repels = rules
            .anti_affinity
            .iter()
            .any(|term| book.selects(*term, &o.namespace, &o.labels));
        let repelled = book
            .rules(o.rules)
            .anti_affinity
            .iter()
            .any(|term| book.selects(*term, &task.namespace, &task.labels));
        if repels || repelled {
            blockers.push(other);
        }
    }
    blockers.sort_unstable();
    blockers.dedup();
    blockers
}

/// Whether the pod's volumes keep it off the node whatever is evicted there: a bound volume elsewhere,
/// no volume to bind here, or claims not usable yet. (Attach limits and a `ReadWriteOncePod` claim in
/// use may be freed by evictions; the trial in [`fits_once_evicted`] settles those.)
fn volumes_exclude(cluster: &Cluster, task: &Task, node: NodeId) -> bool {
    let n = cluster.node(node);
    let at = NodeRef {
        id: node,
        name: &n.name,
        labels: &n.labels,
    };
    matches!(
        cluster
            .volumes
            .check(&task.namespace, &task.claims, at, task.node == Some(node)),
        Err(VolumeMiss::NodeAffinity | VolumeMiss::Zone | VolumeMiss::NoVolumeToBind | VolumeMiss::Waiting)
    )
}

/// Whether `t` could be reserved on `node` once the picked units are evicted (tried, then undone).
fn fits_once_evicted(
    ssn: &mut Session<'_>,
    req: &Request<'_>,
    t: TaskId,
    node: NodeId,
    picked: &[UnitKey],
) -> bool {
    let trial = ssn.checkpoint();
    for k in picked {
        if let Some(unit) = req.candidates.unit(*k).cloned() {
            evict_unit(ssn, req, &unit);
        }
    }
    let fits = {
        let cluster = &*ssn.cluster;
        ssn.index
            .check(cluster, cluster.task(t), &ssn.policy, node)
            .is_ok()
    };
    ssn.rollback(trial);
    fits
}

/// Whether a place found for a copy of a victim pod is somewhere else to run: another node, or room
/// free now on its own node. Not the victim's own shared device: the room beside it there is the
/// device it leaves, which its eviction frees whole for the pod it makes room for.
fn is_a_move(task: &Task, p: &Placement) -> bool {
    Some(p.node) != task.node
        || (p.mode == Mode::Allocate && !p.gpu_groups.iter().any(|g| task.gpu_groups.contains(g)))
}

/// Where a copy of the pod, pending, would be placed as the session stands: where it fits now or once
/// victims are gone (its own room still counts as taken).
fn place_of_copy(ssn: &mut Session<'_>, t: TaskId) -> Option<Placement> {
    let mut probe = ssn.cluster.task(t).clone();
    probe.status = TaskStatus::Pending;
    probe.node = None;
    let cluster = &*ssn.cluster;
    ssn.index.find(cluster, &probe, &ssn.policy, None, None)
}

/// Where a copy of a pod would go as the session stands, asked once per pod shape: pods that ask for
/// the same room under the same constraints, with no pod rules or volumes, get the same answer (the
/// copy is placed as a new pod, wherever the original runs). A victim search on a full cluster asks
/// this for every candidate pod, and these are far fewer.
/// Keyed by shape, hashed a word at a time (SipHash over a 16-slot request was a tenth of a
/// consolidation cycle on a full cluster).
#[derive(Default)]
struct PlaceOfCopy(
    HashMap<
        (Resources, GpuRequest, ConstraintsId),
        Option<Placement>,
        std::hash::BuildHasherDefault<crate::model::ids::WordHasher>,
    >,
);

impl PlaceOfCopy {
    fn of(&mut self, ssn: &mut Session<'_>, t: TaskId) -> Option<Placement> {
        let task = ssn.cluster.task(t);
        let shaped = task.claims.is_empty() && !ssn.index.rules.relevant(task);
        let key = (task.request, task.gpu, task.constraints);
        if shaped && let Some(found) = self.0.get(&key) {
            return found.clone();
        }
        let found = place_of_copy(ssn, t);
        if shaped {
            self.0.insert(key, found.clone());
        }
        found
    }
}

/// Whether every pod of `unit` may find a place other than where it runs, as the session stands
/// (nothing reserved for it). A copy of a fraction that lands on the pod's own device proves nothing
/// (that device is its best place while the pod is on it, and the plan may free it): only a pod whose
/// copy finds no room at all, or room only where it runs, is passed over.
fn could_move_now(ssn: &mut Session<'_>, copies: &mut PlaceOfCopy, unit: &Unit) -> bool {
    unit.tasks.iter().all(|t| {
        copies.of(ssn, *t).is_some_and(|p| {
            let task = ssn.cluster.task(*t);
            is_a_move(task, &p) || p.gpu_groups.iter().any(|g| task.gpu_groups.contains(g))
        })
    })
}

/// Shares of shared devices already promised to moved pods while one plan is checked, by node and
/// device: the session's phantom reservations are node-level and do not see a device's share.
type PromisedShares = HashMap<(NodeId, Arc<str>), u32>;

/// Whether an evicted pod could run elsewhere (consolidation moves, never kills), reserving that room.
fn relocate(ssn: &mut Session<'_>, t: TaskId, promised: &mut PromisedShares) -> bool {
    let task = ssn.cluster.task(t).clone();
    let Some(p) = place_of_copy(ssn, t).filter(|p| is_a_move(&task, p)) else {
        return false;
    };
    // Reserve the room so two moved pods do not count on the same space: node-level room, a whole GPU
    // for each fresh device a fraction would open, and the fraction's share of each device it would
    // join (a device another moved pod was promised first may be too full now: the plan is refused).
    let mut room = task.request;
    if task.gpu.is_shared() {
        let node = ssn.cluster.node(p.node);
        let share = Cluster::share_milli(task.gpu, node);
        for g in &p.gpu_groups {
            match node.shared_gpu(g) {
                Some(i) => {
                    let taken = promised.entry((p.node, g.clone())).or_insert(0);
                    if node.shared_gpus[i].free_now() < *taken + share {
                        return false;
                    }
                    *taken += share;
                }
                None => room.0[GPU] += 1000,
            }
        }
    }
    ssn.reserve_phantom(p.node, &room);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::sim::{GangSpec, Sim};

    fn gang_named(ssn: &Session<'_>, name: &str) -> usize {
        ssn.gangs
            .iter()
            .position(|g| &*ssn.cluster.group(g.root).key.name == name)
            .expect("gang exists")
    }

    /// Consolidation's last pod meets nodes in order of a bound on their rank and stops early; it must
    /// choose what meeting every node chooses. Random small clusters: whole GPUs and fractions
    /// running, one- and two-pod victims, waiting pods of 1-8 GPUs.
    /// A small random cluster of running one- and two-pod gangs (whole GPUs and fractions) and
    /// `waiting` pending one-pod gangs `w0`, `w1`, ... of 1 to 8 GPUs.
    fn random_cluster(seed: u64, waiting: usize) -> Sim {
        let mut rng = crate::sim::SplitMix(seed);
        let mut s = Sim::new();
        s.queue("d", None, -1.0, -1.0, 1.0)
            .queue("q", Some("d"), -1.0, -1.0, 1.0);
        let nodes = 3 + rng.below(8);
        let mut free: Vec<u32> = Vec::new();
        for n in 0..nodes {
            let gpus = [2, 4, 8][rng.below(3)];
            s.node(&format!("n{n}"), 64_000, 256, gpus);
            free.push(u32::try_from(gpus).unwrap_or(0));
        }
        let mut created = 0;
        for _ in 0..nodes * 3 {
            let n = rng.below(nodes);
            let m = (n + 1) % nodes;
            created += 1;
            let name = format!("r{created}");
            let spec = match rng.below(5) {
                // A fraction, counted as a whole GPU of room.
                0 if free[n] >= 1 => {
                    free[n] -= 1;
                    GangSpec::new(&name, "q", 1)
                        .fraction([250, 500][rng.below(2)])
                        .running_on(&[&format!("n{n}")])
                }
                // Two pods on two nodes.
                1 if free[n] >= 1 && free[m] >= 1 && n != m => {
                    free[n] -= 1;
                    free[m] -= 1;
                    GangSpec::new(&name, "q", 2)
                        .gpus(1)
                        .running_on(&[&format!("n{n}"), &format!("n{m}")])
                }
                _ => {
                    let gpus = 1 + u32::try_from(rng.below(2)).unwrap_or(0);
                    if free[n] < gpus {
                        continue;
                    }
                    free[n] -= gpus;
                    GangSpec::new(&name, "q", 1)
                        .gpus(gpus)
                        .running_on(&[&format!("n{n}")])
                }
            };
            s.gang(spec.priority_class("train").created(i64::from(created)));
        }
        for w in 0..waiting {
            let gpus = [1, 2, 4, 8][rng.below(4)];
            s.gang(
                GangSpec::new(&format!("w{w}"), "q", 1)
                    .gpus(gpus)
                    .priority_class("train")
                    .created(1_000),
            );
        }
        s
    }

    #[test]
    fn the_bound_ordered_search_chooses_what_meeting_every_node_chooses() {
        let mut compared = 0;
        for seed in 0..150 {
            let mut s = random_cluster(seed, 3);
            let config = Config::default();
            let mut ssn = Session::open(&mut s.cluster, &config, 1_000_000);
            super::super::allocate::allocate(&mut ssn);
            let mut victims: Vec<usize> = (0..ssn.gangs.len())
                .filter(|v| {
                    ssn.gangs[*v]
                        .tasks()
                        .any(|t| ssn.cluster.task(t).status.is_allocated())
                })
                .collect();
            victims.sort_by_key(|v| (ssn.gangs[*v].priority, -ssn.gangs[*v].created));
            let count = victims.len();
            let mut pool = Pool::new(victims, |_, _| true);
            pool.fill_to(&ssn, count);
            let no_message = |_: &Session<'_>, _: &Unit| String::new();
            for w in 0..3 {
                let g = gang_named(&ssn, &format!("w{w}"));
                let Some(t) = tasks_to_place(&ssn, g).first().copied() else {
                    continue;
                };
                let req = Request::among(g, pool.candidates(), EvictionCause::Consolidation, &no_message)
                    .excluding_gang(g)
                    .victims_must_move();
                let every = Search::new(&req)
                    .best_node(&mut ssn, &req, t, false, None)
                    .map(|c| (c.rank, c.picked));
                let by_bound = Search::new(&req)
                    .best_node(&mut ssn, &req, t, true, None)
                    .map(|c| (c.rank, c.picked));
                assert_eq!(by_bound, every, "seed {seed}, gang w{w}");
                compared += usize::from(every.is_some());
            }
        }
        // Most of the searches found a node: the comparison is not of "none" with "none".
        assert!(compared > 100, "{compared} searches found a node");
    }

    /// The search's "no"s are values; their text is the one the search used to build eagerly.
    #[test]
    fn each_no_names_what_stopped_the_search() {
        let mut s = Sim::new();
        s.queue("d", None, -1.0, -1.0, 1.0)
            .queue("q", Some("d"), -1.0, -1.0, 1.0);
        s.node("n0", 64_000, 256, 2);
        // The victim could move to the node's free GPU now, not once the waiting pod holds both.
        s.gang(GangSpec::new("run", "q", 1).gpus(1).running_on(&["n0"]));
        s.gang(GangSpec::new("wait", "q", 1).gpus(2));
        let config = Config::default();
        let mut ssn = Session::open(&mut s.cluster, &config, 1_000_000);
        super::super::allocate::allocate(&mut ssn);
        let (wait, run) = (gang_named(&ssn, "wait"), gang_named(&ssn, "run"));
        let pod = ssn.gangs[wait].tasks().next().expect("a pod");
        let no_message = |_: &Session<'_>, _: &Unit| String::new();

        let nobody = Request::new(wait, Vec::new(), EvictionCause::Preempt, &no_message);
        let no = solve(&mut ssn, &nobody).expect_err("no candidates");
        assert_eq!(no, NoVictims::NoRoomForPod(pod));
        assert_eq!(
            no.explain(&ssn),
            "no set of allowed victims makes room for pod ns/wait-0"
        );

        let units = units_of(&ssn, run, true);
        let moving =
            Request::new(wait, units.clone(), EvictionCause::Consolidation, &no_message).victims_must_move();
        let no = solve(&mut ssn, &moving).expect_err("the victim cannot move once the gang has its room");
        assert_eq!(no, NoVictims::VictimsCannotMove(units.clone()));
        assert_eq!(
            no.explain(&ssn),
            "the pods that would have to move have nowhere else to go"
        );
        assert_eq!(
            NoVictims::VictimsDidNotMakeRoom(NodeId(0)).explain(&ssn),
            "victims on n0 did not make room"
        );

        let evicting = Request::new(wait, units.clone(), EvictionCause::Preempt, &no_message);
        assert_eq!(solve(&mut ssn, &evicting), Ok(units));
    }

    /// Consolidation keeps node bounds from one waiting gang's search to the next
    /// (`bounds::KeptBounds`), and in debug builds every search compares them with fresh ones. Over
    /// random clusters with eight waiting gangs each, many gangs get room by moving others, so the kept
    /// bounds are brought up to date after real moves, not only built.
    #[test]
    fn kept_bounds_stay_equal_to_fresh_ones_across_a_consolidation() {
        let mut gangs_given_room = 0;
        for seed in 0..200 {
            let mut s = random_cluster(seed, 8);
            s.config.actions = vec![
                crate::config::ActionKind::Allocate,
                crate::config::ActionKind::Consolidation,
            ];
            for _ in 0..2 {
                let moved_for: std::collections::HashSet<_> = s
                    .round()
                    .decisions
                    .evictions
                    .iter()
                    .filter(|e| e.cause == EvictionCause::Consolidation)
                    .filter_map(|e| e.for_group.clone())
                    .collect();
                gangs_given_room += moved_for.len();
            }
        }
        // And a cluster where every waiting gang needs moves: nodes half used by one-GPU pods, 8-GPU
        // pods waiting.
        let mut spec = crate::sim::Synthetic::new(200, 1);
        spec.running_fraction = 0.5;
        spec.running_spread = true;
        spec.pending_pods = 20;
        spec.gpus_per_pod = 8;
        spec.pending_classes = &["train"];
        let config = Config {
            actions: vec![
                crate::config::ActionKind::Allocate,
                crate::config::ActionKind::Consolidation,
            ],
            ..Config::default()
        };
        let mut cluster = spec.cluster();
        let result = crate::cycle::run(&mut cluster, &config, 1_000_000);
        let moved_for: std::collections::HashSet<_> = result
            .decisions
            .evictions
            .iter()
            .filter_map(|e| e.for_group.clone())
            .collect();
        assert_eq!(
            moved_for.len(),
            20,
            "every waiting pod given room in one consolidation"
        );
        assert!(
            gangs_given_room >= 30,
            "{gangs_given_room} gangs given room by moves"
        );
    }
}
