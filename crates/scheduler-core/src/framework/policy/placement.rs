//! Choosing a node for one pod, fast: ordered indexes of free capacity instead of scoring every node.
//!
//! The order is lexicographic, KAI's score bands made explicit (highest first):
//! 1. the pod's own reservation (nominated node) from an earlier cycle;
//! 2. for a GPU fraction, a node with a shared device it fits on (fullest device first when bin-packing);
//! 3. fits in free resources now before fits only once releasing pods are gone (then it is pipelined);
//! 4. CPU-only pods on CPU-only nodes before GPU nodes;
//! 5. bin-pack (least free first) or spread (most free first) on the pod's main resource (GPU for GPU
//!    pods, CPU otherwise);
//! 6. node id, for determinism.
//!
//! Free capacity sits in `BTreeSet`s keyed by (free amount, node), kept current as the session places
//! and undoes pods, so a search is a range walk that usually stops at the first node.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

mod classes;
mod scored;

use super::pod_rules::{RuleFit, RuleLookups, RuleMiss};
use crate::config::PlacementStrategy;
use crate::model::constraints::{ConstraintsId, StaticMiss};
use crate::model::node::SharedGpu;
use crate::model::resources::{CPU, GPU, MAX_RESOURCES};
use crate::model::volumes::{NodeRef, VolumeMiss};
use crate::model::{Cluster, GpuRequest, Node, NodeId, Resources, Task, TaskId};

/// How a pod would hold the node it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Fits in free resources: bind it.
    Allocate,
    /// Fits only once releasing pods are gone: reserve (pipeline) it.
    Pipeline,
}

/// A chosen node for a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Node.
    pub node: NodeId,
    /// Bind now or reserve.
    pub mode: Mode,
    /// Shared-GPU groups for fractional pods (existing ids, or new ones to create).
    pub gpu_groups: Vec<Arc<str>>,
}

/// Why one node cannot take one pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeMiss {
    /// A static predicate.
    Static(StaticMiss),
    /// Not enough of a resource (slot).
    Insufficient(usize),
    /// No GPU device with room for the fraction.
    NoSharedGpuRoom,
    /// GPU sharing is disabled.
    GpuSharingDisabled,
    /// The node's GPU memory is unknown, so a `gpu-memory` request cannot be sized.
    GpuMemoryUnknown,
    /// Outside the topology domain being tried.
    OutsideDomain,
    /// A rule about other pods (affinity, anti-affinity, spread, host ports).
    Rule(RuleMiss),
    /// Its volumes (node affinity, zone, no volume to bind, attach limit, ReadWriteOncePod).
    Volume(VolumeMiss),
}

/// Placement settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlacementPolicy {
    /// GPU pods.
    pub gpu: PlacementStrategy,
    /// CPU-only pods.
    pub cpu: PlacementStrategy,
    /// Fraction placement among shared devices.
    pub gpu_sharing: PlacementStrategy,
    /// Whether fractions may be scheduled.
    pub gpu_sharing_enabled: bool,
    /// Seed of the scored experiment strategies' draws.
    pub seed: u64,
}

/// Free-capacity indexes over the nodes, kept current through [`NodeIndex::update`].
#[derive(Clone, Debug, Default)]
pub struct NodeIndex {
    /// The nodes by free room (carried across sessions, see [`Room`]).
    room: Room,
    /// Static eligibility cache.
    pub eligibility: Eligibility,
    /// Pod-rule lookups (anti-affinity terms per pod, spread views).
    pub rules: RuleLookups,
    /// Explanation summaries.
    summaries: Summaries,
    /// The request shapes the `fragmentation` strategy weighs (empty unless it is in use).
    mix: Vec<crate::model::shapes::WeightedShape>,
    /// The `fragmentation` strategy searches by classes of alike nodes (set with the mix).
    narrow: bool,
    /// Its searches so far: the first scans every node, as building the classes costs about as much
    /// and a session often places a single pod (`kai sim` replays one pod a cycle).
    fragmentation_searches: u32,
    /// Those classes, built at the second search and then kept current by [`Self::update`].
    classes: Option<classes::Classes>,
}

/// The free-capacity indexes proper. Each node's entries are a function of that node alone (set by
/// [`NodeIndex::update`]), so they are carried to the next session and brought up to date there by
/// updating only the nodes changed since ([`NodeIndex::reopen`]); everything else in the index is
/// per session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Room {
    /// GPU nodes by free whole-GPU milli.
    gpu_nodes: BTreeSet<(i64, NodeId)>,
    /// GPU nodes by free CPU.
    gpu_nodes_cpu: BTreeSet<(i64, NodeId)>,
    /// CPU-only nodes by free CPU.
    cpu_nodes: BTreeSet<(i64, NodeId)>,
    /// Current keys: (free gpu, free cpu, has gpus), by node index.
    keys: Vec<Option<(i64, i64, bool)>>,
    /// Nodes with shared devices.
    shared: BTreeSet<NodeId>,
    /// Nodes with releasing or reserved resources (only they can give more later than now).
    later: BTreeSet<NodeId>,
    /// The same nodes by their GPU room once released (milli, reservations of others set aside), so a
    /// whole-GPU pod walks only those that could take it, not every node with something in flight.
    later_gpu: BTreeSet<(i64, NodeId)>,
    /// Each `later` node's key in `later_gpu`, by node index.
    later_keys: Vec<Option<i64>>,
    /// Each ready, schedulable node's free room (now, later), negatives as zero, by node index.
    free_parts: Vec<Option<(Resources, Resources)>>,
    /// Sums of `free_parts`.
    free_now_total: Resources,
    free_later_total: Resources,
}

/// Static eligibility per constraints, one bit per node index, computed once per distinct pod template
/// and kept across sessions while no node comes, goes or changes its static facts
/// (`Cluster::node_facts_version`, see `framework::session::Carry`). Indexed by the dense constraints id (a vector, not a map: this is the innermost check).
#[derive(Clone, Debug, Default)]
pub struct Eligibility {
    bits: Vec<Option<Vec<u64>>>,
}

impl Eligibility {
    /// Whether a node passes the static predicates for these constraints.
    pub fn check(&mut self, cluster: &Cluster, constraints: ConstraintsId, node: NodeId) -> bool {
        let slot = constraints.0 as usize;
        if self.bits.len() <= slot {
            self.bits.resize(slot + 1, None);
        }
        let bits = self.bits[slot].get_or_insert_with(|| {
            let words = cluster.nodes.capacity().div_ceil(64);
            let c = cluster.constraints.get(constraints);
            let mut bits = vec![0u64; words];
            for (i, n) in cluster.nodes.iter() {
                if c.check(n.facts()).is_ok() {
                    bits[i as usize / 64] |= 1 << (i % 64);
                }
            }
            bits
        });
        bits.get(node.index() / 64)
            .is_some_and(|w| w & (1 << (node.index() % 64)) != 0)
    }

    /// Forgets everything (nodes changed).
    pub fn clear(&mut self) {
        self.bits.clear();
    }
}

/// What a pod shape's node rules and room depend on besides the node: request, GPU request,
/// constraints (the placement policy is fixed for a session).
type Shape = (Resources, GpuRequest, ConstraintsId);

/// One node's answer for a shape, as counted in explanations: `None` when it fits now, else why not
/// (fitting only once releasing pods are gone counts as insufficient room of the pod's main resource).
type Verdict = Option<NodeMiss>;

/// How every node answers for one pod shape, kept current lazily from the index's change log: a
/// session explains many failed gangs of the same shape, and between two explanations few nodes change.
#[derive(Clone, Debug, Default)]
struct MissSummary {
    /// Position in the change log this summary has caught up to.
    seen: usize,
    /// Sessions since it was last asked for (see [`Summaries::asked`]).
    idle: u32,
    /// Answer by node index (`None` for slots without a node).
    verdicts: Vec<Option<Verdict>>,
    /// Counts of the misses over all nodes (no zero entries).
    misses: BTreeMap<NodeMiss, usize>,
    /// Nodes answered.
    nodes: usize,
}

/// Free room now on the nodes one set of constraints admits, kept current like [`MissSummary`].
#[derive(Clone, Debug, Default)]
struct FreeSummary {
    seen: usize,
    /// Sessions since it was last asked for (see [`Summaries::asked`]).
    idle: u32,
    /// Free now (never negative) by node index, for admitted nodes.
    free: Vec<Option<Resources>>,
    total: Resources,
    eligible: usize,
    /// Admitted nodes with some of each resource free.
    with_free: [usize; MAX_RESOURCES],
}

/// How many sessions a summary nobody asks for is still carried (its catching up is lazy: meanwhile it
/// costs only the log of changed nodes).
const SUMMARY_IDLE_SESSIONS: u32 = 16;

/// Lazily maintained summaries over all nodes, for explanations. Carried to the next session (see
/// `framework::session::Carry`) with the nodes' facts version, the node slots and the placement
/// settings they were computed under, and brought up to date there by the nodes changed since, as
/// within a session: only those asked for in the last [`SUMMARY_IDLE_SESSIONS`] sessions are carried.
#[derive(Clone, Debug, Default)]
pub(crate) struct Summaries {
    /// Nodes whose accounting changed, in order (only recorded once a summary exists).
    changes: Vec<NodeId>,
    misses: HashMap<Shape, MissSummary>,
    free: HashMap<ConstraintsId, FreeSummary>,
}

impl Summaries {
    fn active(&self) -> bool {
        !self.misses.is_empty() || !self.free.is_empty()
    }

    /// Nodes changed since `seen`, each once.
    fn changed_since(&self, seen: usize) -> Vec<NodeId> {
        let mut nodes = self.changes[seen.min(self.changes.len())..].to_vec();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// The summaries asked for in the last [`SUMMARY_IDLE_SESSIONS`] sessions, to carry to the next
    /// one (a cycle whose waiting gangs are all answered by their no-fit memo asks for none, and the
    /// next refusal should not pay a scan of every node for that).
    fn asked(mut self) -> Self {
        let keep = |idle: &mut u32| {
            *idle += 1;
            *idle <= SUMMARY_IDLE_SESSIONS
        };
        self.misses.retain(|_, m| keep(&mut m.idle));
        self.free.retain(|_, f| keep(&mut f.idle));
        if !self.active() {
            self.changes.clear();
        }
        self
    }

    /// Drops a summary that more node changes than half its node slots have passed by: answering them
    /// again one by one (after sorting the log) costs more than a new summary's scan.
    fn drop_if_stale(&mut self, shape: Option<&Shape>, constraints: Option<ConstraintsId>) {
        let end = self.changes.len();
        let stale = |seen: usize, slots: usize| end.saturating_sub(seen) > slots / 2;
        if let Some(shape) = shape
            && self
                .misses
                .get(shape)
                .is_some_and(|m| stale(m.seen, m.verdicts.len()))
        {
            self.misses.remove(shape);
        }
        if let Some(c) = constraints
            && self.free.get(&c).is_some_and(|f| stale(f.seen, f.free.len()))
        {
            self.free.remove(&c);
        }
    }

    /// Drops the log once every summary has caught up with it.
    fn compact(&mut self) {
        let end = self.changes.len();
        if self.misses.values().all(|m| m.seen == end) && self.free.values().all(|f| f.seen == end) {
            self.changes.clear();
            for m in self.misses.values_mut() {
                m.seen = 0;
            }
            for f in self.free.values_mut() {
                f.seen = 0;
            }
        }
    }
}

fn count_in(misses: &mut BTreeMap<NodeMiss, usize>, verdict: &Verdict, sign: isize) {
    let Some(miss) = verdict else { return };
    if sign > 0 {
        *misses.entry(miss.clone()).or_default() += 1;
    } else if let Some(n) = misses.get_mut(miss) {
        *n -= 1;
        if *n == 0 {
            misses.remove(miss);
        }
    }
}

/// The main resource of a pod: GPU for GPU pods, CPU otherwise.
#[must_use]
pub fn main_slot(gpu: GpuRequest) -> usize {
    if matches!(gpu, GpuRequest::None) { CPU } else { GPU }
}

fn free_now(node: &Node) -> Resources {
    node.allocatable.minus(&node.used).minus(&node.nominated)
}

impl NodeIndex {
    /// Builds the index over every node.
    #[must_use]
    pub fn build(cluster: &Cluster) -> Self {
        let mut index = Self {
            room: Room {
                keys: vec![None; cluster.nodes.capacity()],
                ..Room::default()
            },
            rules: RuleLookups::new(cluster),
            ..Self::default()
        };
        for (i, _) in cluster.nodes.iter() {
            index.update(cluster, NodeId(i));
        }
        index
    }

    /// Takes the explanation summaries this session asked for out (for the next session:
    /// [`Self::reopen`]).
    pub(crate) fn take_summaries(&mut self) -> Summaries {
        std::mem::take(&mut self.summaries).asked()
    }

    /// Takes the free-capacity indexes out (for the next session: [`Self::reopen`]).
    #[must_use]
    pub fn take_room(&mut self) -> Room {
        std::mem::take(&mut self.room)
    }

    /// The index for a new session from the last session's free-capacity indexes, with every node
    /// whose arena stamp is above `since` (changed or removed since, see `Arena::stamp`) updated: the
    /// same as [`Self::build`] gives, for a fraction of its cost when few nodes changed. Everything
    /// else starts afresh, as in a built index.
    #[must_use]
    pub(crate) fn reopen(room: Room, summaries: Option<Summaries>, cluster: &Cluster, since: u64) -> Self {
        let mut index = Self {
            room,
            rules: RuleLookups::new(cluster),
            summaries: summaries.unwrap_or_default(),
            ..Self::default()
        };
        for i in 0..cluster.nodes.capacity() {
            let i = u32::try_from(i).expect("invariant: fewer than 2^32 nodes");
            if cluster.nodes.stamp(i) > since {
                index.update(cluster, NodeId(i));
            }
        }
        index
    }

    /// Sets the request shapes the `fragmentation` strategy weighs.
    pub fn set_mix(&mut self, mix: Vec<crate::model::shapes::WeightedShape>) {
        self.mix = mix;
        self.narrow = true;
        self.fragmentation_searches = 0;
        self.classes = None;
    }

    /// Refreshes one node's entries after its accounting changed.
    pub fn update(&mut self, cluster: &Cluster, id: NodeId) {
        if let Some(classes) = &mut self.classes {
            classes.update(cluster, &mut self.eligibility, &self.mix, id);
        }
        if self.room.keys.len() <= id.index() {
            self.room.keys.resize(id.index() + 1, None);
        }
        if let Some((gpu, cpu, has_gpu)) = self.room.keys[id.index()].take() {
            if has_gpu {
                self.room.gpu_nodes.remove(&(gpu, id));
                self.room.gpu_nodes_cpu.remove(&(cpu, id));
            } else {
                self.room.cpu_nodes.remove(&(cpu, id));
            }
        }
        self.room.shared.remove(&id);
        self.room.later.remove(&id);
        if self.room.later_keys.len() <= id.index() {
            self.room.later_keys.resize(id.index() + 1, None);
        }
        if let Some(gpu) = self.room.later_keys[id.index()].take() {
            self.room.later_gpu.remove(&(gpu, id));
        }
        if self.summaries.active() {
            self.summaries.changes.push(id);
        }
        if self.room.free_parts.len() <= id.index() {
            self.room.free_parts.resize(id.index() + 1, None);
        }
        if let Some((now, later)) = self.room.free_parts[id.index()].take() {
            self.room.free_now_total.sub(&now);
            self.room.free_later_total.sub(&later);
        }
        let Some(node) = cluster.nodes.get(id.0) else {
            return;
        };
        if node.ready && !node.unschedulable {
            let (now, later) = node.available(&Resources::ZERO);
            let (now, later) = (now.max(&Resources::ZERO), later.max(&Resources::ZERO));
            self.room.free_now_total.add(&now);
            self.room.free_later_total.add(&later);
            self.room.free_parts[id.index()] = Some((now, later));
        }
        let free = free_now(node);
        let has_gpu = node.allocatable.gpu() > 0;
        let key = (free.gpu() / 1000 * 1000, free.cpu(), has_gpu);
        if has_gpu {
            self.room.gpu_nodes.insert((key.0, id));
            self.room.gpu_nodes_cpu.insert((key.1, id));
        } else {
            self.room.cpu_nodes.insert((key.1, id));
        }
        self.room.keys[id.index()] = Some(key);
        if !node.shared_gpus.is_empty() {
            self.room.shared.insert(id);
        }
        if !node.releasing.is_zero() || !node.nominated.is_zero() {
            self.room.later.insert(id);
            let gpu = node.available(&Resources::ZERO).1.gpu();
            self.room.later_gpu.insert((gpu, id));
            self.room.later_keys[id.index()] = Some(gpu);
        }
    }

    /// Finds a node for `task` among all nodes (or only `domain` when given), or `None`. Reservations
    /// on a node are someone else's and off limits.
    pub fn find(
        &mut self,
        cluster: &Cluster,
        task: &Task,
        policy: &PlacementPolicy,
        domain: Option<&[NodeId]>,
        nominated_node: Option<NodeId>,
    ) -> Option<Placement> {
        if task.gpu.is_shared() && !policy.gpu_sharing_enabled {
            return None;
        }
        let subject = rule_subject(&self.rules, cluster, task);
        let mut caches = Caches {
            eligibility: &mut self.eligibility,
            rules: &mut self.rules,
            task: subject,
        };
        let c = &mut caches;
        // 1. Its own reservation.
        if let Some(n) = nominated_node.filter(|n| domain.is_none_or(|d| d.contains(n)))
            && let Ok(p) = check(c, cluster, task, policy, n)
        {
            return Some(p);
        }
        // A pod with preferences (preferred affinity, soft spread, preferred node affinity) is scored
        // over every candidate: the first fit in capacity order would ignore them.
        let scored = cluster.rules.rules(task.rules).has_preferences()
            || !cluster.constraints.get(task.constraints).preferred.is_empty();
        if let Some(domain) = domain {
            return find_in(c, cluster, task, policy, domain.iter().copied(), scored);
        }
        if scored {
            let all: Vec<NodeId> = cluster.nodes.iter().map(|(i, _)| NodeId(i)).collect();
            return find_in(c, cluster, task, policy, all.into_iter(), true);
        }
        let wants_gpu = !matches!(task.gpu, GpuRequest::None);
        let strategy = if wants_gpu { policy.gpu } else { policy.cpu };
        let passes: &[bool] = if c.rules.soft_taints {
            &[true, false]
        } else {
            &[false]
        };
        // 2-5 for the scored strategies: every node with room, best by the strategy's key.
        if strategy.is_scored() {
            let narrowed = strategy == PlacementStrategy::Fragmentation && self.narrow && {
                self.fragmentation_searches = self.fragmentation_searches.saturating_add(1);
                self.fragmentation_searches > 1
            };
            let mut candidates: Option<Vec<NodeId>> = None;
            for &avoid_soft_taints in passes {
                if narrowed {
                    let classes = self
                        .classes
                        .get_or_insert_with(|| classes::Classes::build(cluster, c.eligibility, &self.mix));
                    match classes.best(c, cluster, task, policy, &self.mix, avoid_soft_taints) {
                        classes::Search::Found(p) => return Some(p),
                        classes::Search::NoNode => continue,
                        classes::Search::Stale => {}
                    }
                }
                let candidates = candidates.get_or_insert_with(|| {
                    if let Some(need) = scored_gpu_need(task.gpu) {
                        self.room
                            .gpu_nodes
                            .range((need, NodeId(0))..)
                            .map(|(_, n)| *n)
                            .filter(|n| {
                                let node = cluster.node(*n);
                                fraction_room(
                                    task.gpu,
                                    free_now(node).gpu(),
                                    node.shared_gpus.iter().map(SharedGpu::free_now),
                                )
                            })
                            .collect()
                    } else {
                        let cpu = task.request.cpu();
                        self.room
                            .cpu_nodes
                            .range((cpu, NodeId(0))..)
                            .chain(self.room.gpu_nodes_cpu.range((cpu, NodeId(0))..))
                            .map(|(_, n)| *n)
                            .collect()
                    }
                });
                let constraints = cluster.constraints.get(task.constraints);
                let nodes = candidates.iter().copied().filter(|n| {
                    !avoid_soft_taints || constraints.untolerated_soft_taints(&cluster.node(*n).taints) == 0
                });
                if let Some(p) = scored::best(c, cluster, task, policy, strategy, &self.mix, nodes) {
                    return Some(p);
                }
            }
        }
        // 2. A shared device with room for the fraction.
        if !strategy.is_scored()
            && task.gpu.is_shared()
            && let Some(p) = find_shared(c, cluster, task, policy, self.room.shared.iter().copied())
        {
            return Some(p);
        }
        // 3-5. Free now, in strategy order: a range walk that usually stops at the first node. Where
        // some node has a `PreferNoSchedule` taint, a first walk skips the nodes whose such taints the
        // pod does not tolerate (kube-scheduler's preference), a second takes them.
        for &avoid_soft_taints in passes.iter().filter(|_| !strategy.is_scored()) {
            let fit = FirstFit {
                avoid_soft_taints,
                strategy: if wants_gpu { policy.gpu } else { policy.cpu },
            };
            if wants_gpu {
                let need = match task.gpu {
                    GpuRequest::Whole(n) => i64::from(n) * 1000,
                    GpuRequest::Fraction { devices, .. } | GpuRequest::Memory { devices, .. } => {
                        (i64::from(devices) - 1).max(0) * 1000
                    }
                    GpuRequest::None => 0,
                };
                let range = self.room.gpu_nodes.range((need, NodeId(0))..).map(|(_, n)| *n);
                if let Some(p) = fit.walk(c, cluster, task, policy, range) {
                    return Some(p);
                }
            } else {
                let need = task.request.cpu();
                for set in [&self.room.cpu_nodes, &self.room.gpu_nodes_cpu] {
                    let range = set.range((need, NodeId(0))..).map(|(_, n)| *n);
                    if let Some(p) = fit.walk(c, cluster, task, policy, range) {
                        return Some(p);
                    }
                }
            }
        }
        // 3. Free later: only nodes with releasing or reserved resources can offer more than now. A pod
        // without shared GPUs fits only where its request fits once released (`check_room`), so its GPUs
        // at least: the other nodes cannot answer, and the best is the same without them.
        if !task.gpu.is_shared() {
            let need = task.request.gpu();
            let range = self.room.later_gpu.range((need, NodeId(0))..).map(|(_, n)| *n);
            return find_in(c, cluster, task, policy, range, false).filter(|p| p.mode == Mode::Pipeline);
        }
        find_in(c, cluster, task, policy, self.room.later.iter().copied(), false)
            .filter(|p| p.mode == Mode::Pipeline)
    }

    /// Whether a node can take the pod, and how.
    ///
    /// # Errors
    /// Why not.
    pub fn check(
        &mut self,
        cluster: &Cluster,
        task: &Task,
        policy: &PlacementPolicy,
        n: NodeId,
    ) -> Result<Placement, NodeMiss> {
        let subject = rule_subject(&self.rules, cluster, task);
        let mut caches = Caches {
            eligibility: &mut self.eligibility,
            rules: &mut self.rules,
            task: subject,
        };
        check(&mut caches, cluster, task, policy, n)
    }

    /// How every node answers for `task`: (nodes answered, misses by reason), counting a node that fits
    /// only later as short of the pod's main resource.
    ///
    /// Equivalent to checking every node, but incremental: only nodes changed since the last call for the
    /// same pod shape are checked again.
    pub fn summarize(
        &mut self,
        cluster: &Cluster,
        task: &Task,
        policy: &PlacementPolicy,
    ) -> (usize, BTreeMap<NodeMiss, usize>) {
        // Node rules and room, summarised incrementally per pod shape; the rules about other pods (whose
        // answer on one node depends on pods elsewhere) are then asked only of the nodes with room.
        let verdict = |elig: &mut Eligibility, n: NodeId| -> Verdict {
            match check_room(elig, cluster, task, policy, n) {
                Ok(p) if p.mode == Mode::Allocate => None,
                Ok(_) => Some(NodeMiss::Insufficient(main_slot(task.gpu))),
                Err(miss) => Some(miss),
            }
        };
        let elig = &mut self.eligibility;
        let shape = (task.request, task.gpu, task.constraints);
        self.summaries.drop_if_stale(Some(&shape), None);
        let log = &self.summaries.changes;
        let summary = match self.summaries.misses.entry(shape) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let summary = e.into_mut();
                summary.idle = 0;
                let mut changed = log[summary.seen.min(log.len())..].to_vec();
                changed.sort_unstable();
                changed.dedup();
                for n in changed {
                    let Some(slot) = summary.verdicts.get_mut(n.index()) else {
                        continue;
                    };
                    if let Some(old) = slot.take() {
                        count_in(&mut summary.misses, &old, -1);
                        summary.nodes -= 1;
                    }
                    if cluster.nodes.get(n.0).is_some() {
                        let v = verdict(elig, n);
                        count_in(&mut summary.misses, &v, 1);
                        summary.nodes += 1;
                        *slot = Some(v);
                    }
                }
                summary.seen = log.len();
                summary
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                let mut summary = MissSummary {
                    seen: log.len(),
                    idle: 0,
                    verdicts: vec![None; cluster.nodes.capacity()],
                    ..MissSummary::default()
                };
                for (i, _) in cluster.nodes.iter() {
                    let v = verdict(elig, NodeId(i));
                    count_in(&mut summary.misses, &v, 1);
                    summary.nodes += 1;
                    summary.verdicts[i as usize] = Some(v);
                }
                e.insert(summary)
            }
        };
        let mut misses = summary.misses.clone();
        let nodes = summary.nodes;
        let with_room = nodes - misses.values().sum::<usize>().min(nodes);
        let subject = rule_subject(&self.rules, cluster, task);
        let rules_subject = subject.filter(|_| self.rules.relevant(task));
        if with_room > 0 && (rules_subject.is_some() || !task.claims.is_empty()) {
            let roomy: Vec<NodeId> = summary
                .verdicts
                .iter()
                .enumerate()
                .filter(|(_, v)| matches!(v, Some(None)))
                .filter_map(|(i, _)| u32::try_from(i).ok().map(NodeId))
                .collect();
            for n in roomy {
                let miss = if let Err(miss) = check_volumes(cluster, task, n) {
                    miss
                } else if let Some(id) = rules_subject {
                    match self.rules.check(cluster, id, task, n) {
                        RuleFit::Now => continue,
                        RuleFit::Later => NodeMiss::Insufficient(main_slot(task.gpu)),
                        RuleFit::No(miss) => NodeMiss::Rule(miss),
                    }
                } else {
                    continue;
                };
                count_in(&mut misses, &Some(miss), 1);
            }
        }
        self.summaries.compact();
        (nodes, misses)
    }

    /// Free room now on the nodes `constraints` admit: (admitted nodes, admitted nodes with some of each
    /// resource free, total free). Incremental like [`Self::summarize`].
    pub fn free_on_eligible(
        &mut self,
        cluster: &Cluster,
        constraints: ConstraintsId,
    ) -> (usize, [usize; MAX_RESOURCES], Resources) {
        let free_of = |n: &Node| n.available(&Resources::ZERO).0.max(&Resources::ZERO);
        let add = |s: &mut FreeSummary, free: &Resources, sign: i64| {
            s.total.add(&free.times(sign));
            for (slot, count) in s.with_free.iter_mut().enumerate() {
                if free.0[slot] > 0 {
                    *count = if sign > 0 { *count + 1 } else { *count - 1 };
                }
            }
        };
        self.summaries.drop_if_stale(None, Some(constraints));
        let elig = &mut self.eligibility;
        let changed = self
            .summaries
            .free
            .get(&constraints)
            .map(|s| self.summaries.changed_since(s.seen));
        let end = self.summaries.changes.len();
        let summary = self.summaries.free.entry(constraints).or_insert_with(|| {
            let mut s = FreeSummary {
                seen: end,
                idle: 0,
                free: vec![None; cluster.nodes.capacity()],
                ..FreeSummary::default()
            };
            for (i, n) in cluster.nodes.iter() {
                if elig.check(cluster, constraints, NodeId(i)) {
                    let free = free_of(n);
                    add(&mut s, &free, 1);
                    s.eligible += 1;
                    s.free[i as usize] = Some(free);
                }
            }
            s
        });
        summary.idle = 0;
        for n in changed.unwrap_or_default() {
            let Some(slot) = summary.free.get(n.index()).copied() else {
                continue;
            };
            if let Some(old) = slot {
                add(summary, &old, -1);
                summary.eligible -= 1;
                summary.free[n.index()] = None;
            }
            if let Some(node) = cluster.nodes.get(n.0)
                && elig.check(cluster, constraints, n)
            {
                let free = free_of(node);
                add(summary, &free, 1);
                summary.eligible += 1;
                summary.free[n.index()] = Some(free);
            }
        }
        summary.seen = end;
        let out = (summary.eligible, summary.with_free, summary.total);
        self.summaries.compact();
        out
    }

    /// Free room over all ready, schedulable nodes, each node's shortfalls counted as zero: (free now,
    /// free once releasing pods are gone), as if no gang held reservations. Kept current by
    /// [`Self::update`], so it costs nothing to ask.
    #[must_use]
    pub fn free_totals(&self) -> (Resources, Resources) {
        (self.room.free_now_total, self.room.free_later_total)
    }

    /// Milli-GPUs free inside shared devices (room a fraction could take, once releasing sharers are
    /// gone): fragments that moving fractions together could turn into whole devices.
    #[must_use]
    pub fn shared_fragments_milli(&self, cluster: &Cluster) -> i64 {
        self.room
            .shared
            .iter()
            .filter_map(|n| cluster.nodes.get(n.0))
            .flat_map(|node| node.shared_gpus.iter())
            .map(|d| i64::from(d.free_later()))
            .sum()
    }

    /// Nodes currently in the index (for summaries).
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.room
            .gpu_nodes
            .iter()
            .chain(self.room.cpu_nodes.iter())
            .map(|(_, n)| *n)
    }
}

/// The id of a pod whose placement rules about other pods or preferences apply (looked up once per
/// search, not per node); `None` when nothing but its own node rules and room matter.
fn rule_subject(rules: &RuleLookups, cluster: &Cluster, task: &Task) -> Option<TaskId> {
    let concerned = rules.relevant(task) || !cluster.constraints.get(task.constraints).preferred.is_empty();
    if concerned {
        cluster.task_id(&task.uid)
    } else {
        None
    }
}

/// The session's caches a node check reads besides the model.
struct Caches<'a> {
    eligibility: &'a mut Eligibility,
    rules: &'a mut RuleLookups,
    /// The pod being placed, known by its UID (a copy probing where a pod could move shares it); `None`
    /// for a pod the model does not hold, which no rule about other pods can concern.
    task: Option<TaskId>,
}

fn find_shared(
    c: &mut Caches<'_>,
    cluster: &Cluster,
    task: &Task,
    policy: &PlacementPolicy,
    candidates: impl Iterator<Item = NodeId>,
) -> Option<Placement> {
    let mut best: Option<(i64, NodeId, Placement)> = None;
    for n in candidates {
        let Ok(p) = check(c, cluster, task, policy, n) else {
            continue;
        };
        if p.mode != Mode::Allocate {
            continue;
        }
        let node = cluster.node(n);
        // Only nodes where the fraction joins existing devices; among them the fullest (binpack).
        let fullness: i64 = p
            .gpu_groups
            .iter()
            .filter_map(|g| node.shared_gpu(g).map(|i| &node.shared_gpus[i]))
            .map(|d| i64::from(d.used_milli + d.nominated_milli))
            .sum();
        if fullness == 0 {
            continue;
        }
        let score = match policy.gpu_sharing {
            PlacementStrategy::Spread => -fullness,
            _ => fullness,
        };
        if best
            .as_ref()
            .is_none_or(|(s, id, _)| score > *s || (score == *s && n < *id))
        {
            best = Some((score, n, p));
        }
    }
    best.map(|(_, _, p)| p)
}

/// A walk over nodes in capacity order that takes the first that fits now.
struct FirstFit {
    /// Skip nodes with `PreferNoSchedule` taints the pod does not tolerate.
    avoid_soft_taints: bool,
    /// Bin-pack walks the order forwards, spread backwards.
    strategy: PlacementStrategy,
}

impl FirstFit {
    fn walk(
        &self,
        c: &mut Caches<'_>,
        cluster: &Cluster,
        task: &Task,
        policy: &PlacementPolicy,
        order: impl DoubleEndedIterator<Item = NodeId>,
    ) -> Option<Placement> {
        let order: Box<dyn Iterator<Item = NodeId>> = match self.strategy {
            PlacementStrategy::Spread => Box::new(order.rev()),
            _ => Box::new(order),
        };
        let constraints = cluster.constraints.get(task.constraints);
        for n in order {
            if !c.eligibility.check(cluster, task.constraints, n) {
                continue;
            }
            if self.avoid_soft_taints && constraints.untolerated_soft_taints(&cluster.node(n).taints) > 0 {
                continue;
            }
            if let Ok(p) = check(c, cluster, task, policy, n)
                && p.mode == Mode::Allocate
            {
                return Some(p);
            }
        }
        None
    }
}

/// How candidates compare, smallest first: (fits only later, minus the preference score, a CPU pod on
/// a GPU node, the strategy's free-capacity order, node id).
type CandidateKey = (u8, i64, u8, i64, NodeId);

/// The best node among a given set: now before later, then (when `scored`) the pod's preferences,
/// then strategy order.
fn find_in(
    c: &mut Caches<'_>,
    cluster: &Cluster,
    task: &Task,
    policy: &PlacementPolicy,
    nodes: impl Iterator<Item = NodeId>,
    scored: bool,
) -> Option<Placement> {
    let wants_gpu = !matches!(task.gpu, GpuRequest::None);
    let strategy = if wants_gpu { policy.gpu } else { policy.cpu };
    let fits: Vec<Placement> = nodes
        .filter_map(|n| check(c, cluster, task, policy, n).ok())
        .collect();
    let scores = if scored && fits.len() > 1 {
        let ids: Vec<NodeId> = fits.iter().map(|p| p.node).collect();
        c.task
            .map(|id| c.rules.scores(cluster, id, task, &ids))
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let mut best: Option<(CandidateKey, Placement)> = None;
    for (i, p) in fits.into_iter().enumerate() {
        let n = p.node;
        let node = cluster.node(n);
        let free = free_now(node);
        let amount = if wants_gpu { free.gpu() / 1000 } else { free.cpu() };
        let amount = match strategy {
            PlacementStrategy::Spread => -amount,
            _ => amount,
        };
        let later = u8::from(p.mode == Mode::Pipeline);
        let preference = -scores.get(i).copied().unwrap_or(0);
        let type_mismatch = u8::from(!wants_gpu && node.allocatable.gpu() > 0);
        let key = (later, preference, type_mismatch, amount, n);
        if best.as_ref().is_none_or(|(k, _)| key < *k) {
            best = Some((key, p));
        }
    }
    best.map(|(_, p)| p)
}

/// Free whole-GPU milli a GPU pod's node must have to be a candidate of the scored strategies (`None`
/// for a CPU-only pod).
fn scored_gpu_need(gpu: GpuRequest) -> Option<i64> {
    match gpu {
        GpuRequest::Whole(n) => Some(i64::from(n) * 1000),
        GpuRequest::Fraction { devices, .. } | GpuRequest::Memory { devices, .. } => {
            Some((i64::from(devices) - 1).max(0) * 1000)
        }
        GpuRequest::None => None,
    }
}

/// Whether a one-device fraction has a free device or a shared one with room on a node (as `check`
/// asks); true for every other request.
fn fraction_room(gpu: GpuRequest, free_gpu: i64, mut shared_free: impl Iterator<Item = u32>) -> bool {
    match gpu {
        GpuRequest::Fraction { milli, devices: 1 } => free_gpu >= 1000 || shared_free.any(|m| m >= milli),
        _ => true,
    }
}

/// Whether a node can take the pod, and how: static predicates, room, then the rules about other pods.
fn check(
    c: &mut Caches<'_>,
    cluster: &Cluster,
    task: &Task,
    policy: &PlacementPolicy,
    n: NodeId,
) -> Result<Placement, NodeMiss> {
    let mut placement = check_room(c.eligibility, cluster, task, policy, n)?;
    check_volumes(cluster, task, n)?;
    if !c.rules.relevant(task) {
        return Ok(placement);
    }
    let Some(id) = c.task else {
        return Ok(placement);
    };
    match c.rules.check(cluster, id, task, n) {
        RuleFit::Now => Ok(placement),
        RuleFit::Later => {
            placement.mode = Mode::Pipeline;
            Ok(placement)
        }
        RuleFit::No(miss) => Err(NodeMiss::Rule(miss)),
    }
}

/// A pod's claims on a node (nothing to ask for a pod without claims).
fn check_volumes(cluster: &Cluster, task: &Task, n: NodeId) -> Result<(), NodeMiss> {
    if task.claims.is_empty() {
        return Ok(());
    }
    let node = cluster.node(n);
    let at = NodeRef {
        id: n,
        name: &node.name,
        labels: &node.labels,
    };
    // A task already placed on this node (a copy probing a move) does not count as another user.
    let placed_here = task.node == Some(n);
    cluster
        .volumes
        .check(&task.namespace, &task.claims, at, placed_here)
        .map_err(NodeMiss::Volume)
}

/// Static predicates and room.
fn check_room(
    elig: &mut Eligibility,
    cluster: &Cluster,
    task: &Task,
    policy: &PlacementPolicy,
    n: NodeId,
) -> Result<Placement, NodeMiss> {
    let node = cluster.node(n);
    if !elig.check(cluster, task.constraints, n) {
        let miss = cluster
            .constraints
            .get(task.constraints)
            .check(node.facts())
            .err();
        return Err(NodeMiss::Static(miss.unwrap_or(StaticMiss::NotReady)));
    }
    // Every reservation on the node is someone else's: a gang gives back its reservations before it is
    // placed again (allocate and the victim search both do), and those its own earlier pods took in this
    // attempt must not count as free room twice.
    let (now, later) = node.available(&Resources::ZERO);
    match task.gpu {
        GpuRequest::Fraction { .. } | GpuRequest::Memory { .. } => {
            if !policy.gpu_sharing_enabled {
                return Err(NodeMiss::GpuSharingDisabled);
            }
            if matches!(task.gpu, GpuRequest::Memory { .. }) && node.gpu_memory_mib.is_none() {
                return Err(NodeMiss::GpuMemoryUnknown);
            }
            shared_fit(cluster, task, policy, n, &now, &later)
        }
        _ => {
            if task.request.fits_in(&now) {
                Ok(Placement {
                    node: n,
                    mode: Mode::Allocate,
                    gpu_groups: Vec::new(),
                })
            } else if task.request.fits_in(&later) {
                Ok(Placement {
                    node: n,
                    mode: Mode::Pipeline,
                    gpu_groups: Vec::new(),
                })
            } else {
                let slot = task.request.shortfalls(&later).next().unwrap_or(CPU);
                Err(NodeMiss::Insufficient(slot))
            }
        }
    }
}

/// Fit of a fractional pod: existing shared devices with room first, then fresh whole devices.
fn shared_fit(
    cluster: &Cluster,
    task: &Task,
    policy: &PlacementPolicy,
    n: NodeId,
    now: &Resources,
    later: &Resources,
) -> Result<Placement, NodeMiss> {
    let node = cluster.node(n);
    let (mut groups, fresh) = shared_groups(cluster, task, policy, n);
    let mut need = task.request;
    need.0[GPU] += i64::try_from(fresh).unwrap_or(i64::MAX) * 1000;
    let mode = if need.fits_in(now) {
        Mode::Allocate
    } else if need.fits_in(later) && groups.is_empty() {
        Mode::Pipeline
    } else if !task.request.fits_in(later) {
        let slot = task.request.shortfalls(later).next().unwrap_or(CPU);
        return Err(NodeMiss::Insufficient(slot));
    } else {
        return Err(NodeMiss::NoSharedGpuRoom);
    };
    for i in 0..fresh {
        groups.push(new_group_id(&node.name, task, i));
    }
    Ok(Placement {
        node: n,
        mode,
        gpu_groups: groups,
    })
}

/// The devices a fraction takes on node `n`: existing devices with room, fullest first (binpack) or
/// emptiest first (spread); then how many fresh whole devices it needs besides.
fn shared_groups(
    cluster: &Cluster,
    task: &Task,
    policy: &PlacementPolicy,
    n: NodeId,
) -> (Vec<Arc<str>>, usize) {
    let node = cluster.node(n);
    let devices = match task.gpu {
        GpuRequest::Fraction { devices, .. } | GpuRequest::Memory { devices, .. } => devices.max(1) as usize,
        _ => 1,
    };
    let milli = Cluster::share_milli(task.gpu, node);
    // A device whose sharers are all leaving is counted as freed whole, room a waiting gang may hold: a
    // new sharer keeps it from being freed, so it joins only while the node has a whole GPU to spare
    // later besides.
    let spare_later = node.available(&Resources::ZERO).1.0[GPU] >= 1000;
    let mut fitting: Vec<(u32, &Arc<str>)> = node
        .shared_gpus
        .iter()
        .filter(|d| d.free_now() >= milli && (spare_later || !d.leaving()))
        .map(|d| (d.used_milli + d.nominated_milli, &d.group))
        .collect();
    match policy.gpu_sharing {
        PlacementStrategy::Spread => fitting.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1))),
        _ => fitting.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1))),
    }
    let groups: Vec<Arc<str>> = fitting.iter().take(devices).map(|(_, g)| (*g).clone()).collect();
    let fresh = devices - groups.len();
    (groups, fresh)
}

/// A new shared-GPU group id: stable for the same pod and node (so a retried decision reuses it), and
/// unique across pods.
fn new_group_id(node: &str, task: &Task, device: usize) -> Arc<str> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    node.hash(&mut h);
    task.uid.hash(&mut h);
    device.hash(&mut h);
    let a = h.finish();
    a.rotate_left(17).hash(&mut h);
    let b = h.finish();
    // UUID-shaped, like KAI's group ids.
    let s = format!("{a:016x}{b:016x}");
    format!(
        "{}-{}-{}-{}-{}",
        &s[0..8],
        &s[8..12],
        &s[12..16],
        &s[16..20],
        &s[20..32]
    )
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PlacementStrategy;
    use crate::model::{Assumed, TaskId};
    use crate::sim::{GangSpec, Sim};

    const POLICY: PlacementPolicy = PlacementPolicy {
        gpu: PlacementStrategy::Binpack,
        cpu: PlacementStrategy::Binpack,
        gpu_sharing: PlacementStrategy::Binpack,
        gpu_sharing_enabled: true,
        seed: 0,
    };

    /// The summary by checking every node, as explanations did before summaries were incremental.
    fn full_scan(
        index: &mut NodeIndex,
        cluster: &Cluster,
        task: &Task,
    ) -> (usize, BTreeMap<NodeMiss, usize>) {
        let mut misses = BTreeMap::new();
        let mut nodes = 0;
        for (i, _) in cluster.nodes.iter() {
            nodes += 1;
            match index.check(cluster, task, &POLICY, NodeId(i)) {
                Ok(p) if p.mode == Mode::Allocate => {}
                Ok(_) => {
                    *misses
                        .entry(NodeMiss::Insufficient(main_slot(task.gpu)))
                        .or_default() += 1
                }
                Err(m) => *misses.entry(m).or_default() += 1,
            }
        }
        (nodes, misses)
    }

    fn free_scan(index: &mut NodeIndex, cluster: &Cluster, c: ConstraintsId) -> (usize, usize, Resources) {
        let (mut eligible, mut with_gpu, mut total) = (0, 0, Resources::ZERO);
        for (i, n) in cluster.nodes.iter() {
            if index.eligibility.check(cluster, c, NodeId(i)) {
                eligible += 1;
                let free = n.available(&Resources::ZERO).0.max(&Resources::ZERO);
                with_gpu += usize::from(free.gpu() > 0);
                total.add(&free);
            }
        }
        (eligible, with_gpu, total)
    }

    fn task_of(s: &Sim, name: &str) -> TaskId {
        s.cluster
            .tasks
            .iter()
            .find(|(_, t)| &*t.name == name)
            .map(|(i, _)| TaskId(i))
            .expect("task exists")
    }

    #[test]
    fn incremental_summaries_match_a_full_scan_through_placements_and_undos() {
        let mut s = Sim::new();
        s.queue("d", None, -1.0, -1.0, 1.0)
            .queue("q", Some("d"), -1.0, -1.0, 1.0);
        s.nodes("n", 5, 4);
        s.node_with("tainted", 64_000, 256, 8, &[], &["dedicated"]);
        s.gang(GangSpec::new("run", "q", 2).gpus(3).running_on(&["n-0", "n-1"]));
        s.gang(GangSpec::new("wait", "q", 3).gpus(2));
        s.gang(GangSpec::new("other", "q", 2).gpus(1));
        let mut index = NodeIndex::build(&s.cluster);
        let probe = task_of(&s, "wait-0");
        let compare = |index: &mut NodeIndex, cluster: &Cluster| {
            let task = cluster.task(probe).clone();
            let fast = index.summarize(cluster, &task, &POLICY);
            assert_eq!(fast, full_scan(index, cluster, &task));
            let (eligible, with_free, total) = index.free_on_eligible(cluster, task.constraints);
            assert_eq!(
                (eligible, with_free[GPU], total),
                free_scan(index, cluster, task.constraints)
            );
        };
        compare(&mut index, &s.cluster);
        // Bind another gang's pods, reserve one of the probe's gang, evict a running pod; the index
        // hears of each node change as a session would tell it.
        let steps: Vec<(TaskId, Assumed)> = vec![
            (task_of(&s, "other-0"), Assumed::Binding { node: NodeId(2) }),
            (task_of(&s, "other-1"), Assumed::Binding { node: NodeId(2) }),
            (
                task_of(&s, "wait-1"),
                Assumed::Pipelined {
                    node: NodeId(3),
                    until: i64::MAX,
                },
            ),
            (task_of(&s, "run-0"), Assumed::Evicting),
        ];
        let mut undo = Vec::new();
        for (t, assumed) in steps {
            let before = s.cluster.task(t).node;
            undo.push(s.cluster.set_assumed(t, assumed, None));
            for n in [before, s.cluster.task(t).node].into_iter().flatten() {
                index.update(&s.cluster, n);
            }
            compare(&mut index, &s.cluster);
        }
        // Undo everything, newest first.
        while let Some(u) = undo.pop() {
            let t = u.task;
            let before = s.cluster.task(t).node;
            s.cluster.undo_placement(u);
            for n in [before, s.cluster.task(t).node].into_iter().flatten() {
                index.update(&s.cluster, n);
            }
            compare(&mut index, &s.cluster);
        }
        // The tainted node always answers with its taint.
        let task = s.cluster.task(probe).clone();
        let (_, misses) = index.summarize(&s.cluster, &task, &POLICY);
        assert!(
            misses.keys().any(|m| matches!(m, NodeMiss::Static(_))),
            "{misses:?}"
        );
    }

    #[test]
    fn a_reopened_index_equals_a_built_one_after_nodes_and_pods_change() {
        let mut s = Sim::new();
        s.queue("d", None, -1.0, -1.0, 1.0)
            .queue("q", Some("d"), -1.0, -1.0, 1.0);
        s.nodes("n", 6, 4);
        s.gang(GangSpec::new("run", "q", 2).gpus(3).running_on(&["n-0", "n-1"]));
        s.gang(
            GangSpec::new("frac", "q", 2)
                .fraction(500)
                .running_on(&["n-2", "n-2"]),
        );
        s.gang(GangSpec::new("wait", "q", 3).gpus(2));
        let mut index = NodeIndex::build(&s.cluster);
        let since = s.cluster.nodes.clock();
        // Pods placed, reserved and evicted, a node cordoned, one removed, one added.
        s.cluster
            .set_assumed(task_of(&s, "wait-0"), Assumed::Binding { node: NodeId(3) }, None);
        s.cluster.set_assumed(
            task_of(&s, "wait-1"),
            Assumed::Pipelined {
                node: NodeId(4),
                until: i64::MAX,
            },
            None,
        );
        s.cluster
            .set_assumed(task_of(&s, "run-0"), Assumed::Evicting, None);
        let mut cordoned = crate::model::NodeUpdate::of(s.cluster.node(NodeId(5)));
        cordoned.unschedulable = true;
        s.cluster.apply_node(cordoned);
        s.cluster.remove_node("n-1");
        s.node("late", 32_000, 128, 8);
        let reopened = NodeIndex::reopen(index.take_room(), None, &s.cluster, since);
        assert_eq!(reopened.room, NodeIndex::build(&s.cluster).room);
        // Not vacuous: the changes moved the index.
        assert_ne!(
            reopened.room,
            NodeIndex::reopen(Room::default(), None, &s.cluster, u64::MAX).room
        );
    }
}
