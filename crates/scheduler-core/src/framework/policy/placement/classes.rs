//! The `fragmentation` strategy's search, narrowed to classes of alike nodes.
//!
//! FGD's points for a pod on a node depend only on the node's free room (every resource; the free
//! thousandths of its shared devices, in any order), its GPU memory (the share of a `gpu-memory`
//! request) and which shapes of the mix may go there. Nodes alike in all of these form a class, and the
//! points are worked out once per class and pod shape. A search then walks the classes from the most
//! points down and, among the nodes of the classes of equal points, takes the lowest node id that passes
//! `check`: the exhaustive scan's answer (`scored::best`: most points, ties to the first node, on it the
//! first of its best ways) without scoring every node.

use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasherDefault;
use std::ops::Bound;
use std::sync::Arc;

use super::scored::fragmentation_choice;
use super::{
    Caches, Eligibility, Mode, Placement, PlacementPolicy, check, free_now, new_group_id, shared_groups,
};
use crate::config::PlacementStrategy;
use crate::model::constraints::{Taint, TaintEffect};
use crate::model::ids::WordHasher;
use crate::model::shapes::WeightedShape;
use crate::model::{Cluster, GpuRequest, Node, NodeId, Resources, Task};

/// What FGD's points on a node depend on that stays as it is through a session.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Fixed {
    /// GPU pods are offered only nodes with GPUs.
    has_gpu: bool,
    /// Memory per GPU (sizes a `gpu-memory` request).
    gpu_memory_mib: Option<u32>,
    /// Whether each shape of the mix may go there, in mix order.
    eligible: Vec<bool>,
    /// `PreferNoSchedule` taints (the first soft-taint pass skips the nodes with untolerated ones).
    soft_taints: Vec<Taint>,
}

impl Fixed {
    fn of(
        node: &Node,
        id: NodeId,
        cluster: &Cluster,
        eligibility: &mut Eligibility,
        mix: &[WeightedShape],
    ) -> Self {
        Self {
            has_gpu: node.allocatable.gpu() > 0,
            gpu_memory_mib: node.gpu_memory_mib,
            eligible: mix
                .iter()
                .map(|w| eligibility.check(cluster, w.shape.constraints, id))
                .collect(),
            soft_taints: node
                .taints
                .iter()
                .filter(|t| t.effect == TaintEffect::PreferNoSchedule)
                .cloned()
                .collect(),
        }
    }
}

/// What FGD's points on a node depend on, besides the pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ClassKey {
    /// Free now (`free_now`), every resource.
    free: Resources,
    /// Free thousandths of each shared device, ascending.
    shared: Vec<u32>,
    /// Its [`Fixed`] part, by number.
    fixed: usize,
}

impl ClassKey {
    /// Whether a node of this class is among the pod's candidates: the filters `NodeIndex::find` puts
    /// before the scored strategies (room for its whole GPUs; for a one-device fraction, a free device
    /// or a shared one with room; CPU for a CPU-only pod).
    fn admits(&self, fixed: &Fixed, task: &Task) -> bool {
        let Some(need) = super::scored_gpu_need(task.gpu) else {
            return self.free.cpu() >= task.request.cpu();
        };
        fixed.has_gpu
            && self.free.gpu() / 1000 * 1000 >= need
            && super::fraction_room(task.gpu, self.free.gpu(), self.shared.iter().copied())
    }
}

/// Nodes alike for FGD's points.
#[derive(Clone, Debug)]
struct Class {
    key: ClassKey,
    members: BTreeSet<NodeId>,
    /// Position in [`Classes::live`] while it has members.
    live_at: Option<usize>,
}

/// A pod as its points see it: request, GPU request, and whether fractions take the emptiest device.
type PodShape = (Resources, GpuRequest, bool);

/// Best points of a pod shape on a class: `None` not worked out yet; `Some(None)` no way to go there.
type Memo = Option<Option<i32>>;

/// The nodes by class, kept current through [`Classes::update`], and the points worked out so far.
#[derive(Clone, Debug, Default)]
pub(super) struct Classes {
    /// The fixed parts seen, numbered.
    fixed: Vec<Fixed>,
    fixed_numbers: HashMap<Fixed, usize>,
    /// Each node's fixed part by node index, with the name of the node it was worked out for.
    fixed_of_node: Vec<Option<(Arc<str>, usize)>>,
    by_key: HashMap<ClassKey, usize, BuildHasherDefault<WordHasher>>,
    classes: Vec<Class>,
    /// Classes with members.
    live: Vec<usize>,
    /// Each node's class, by node index.
    of_node: Vec<Option<usize>>,
    /// Pod shapes seen, numbered.
    pod_shapes: HashMap<PodShape, usize>,
    /// The last pod shape looked up (gangs ask for one shape many times in a row).
    last_shape: Option<(PodShape, usize)>,
    /// Points by pod shape number, then class. Classes never change key, so an entry stays true for
    /// as long as the mix and the eligibility cache do (the session).
    points: Vec<Vec<Memo>>,
    /// Scratch for a search: (points, first node, class).
    ranked: Vec<(i32, NodeId, usize)>,
}

/// How a narrowed search ended.
pub(super) enum Search {
    Found(Placement),
    NoNode,
    /// The chosen node scores otherwise than its class (its entry was not kept current): the caller
    /// scans every node instead. Seen only where the node's ways are scored: for one-device fractions,
    /// and for every pod in debug builds.
    Stale,
}

impl Classes {
    /// Every node of the cluster by class.
    pub(super) fn build(cluster: &Cluster, eligibility: &mut Eligibility, mix: &[WeightedShape]) -> Self {
        let mut classes = Self::default();
        for (i, _) in cluster.nodes.iter() {
            classes.update(cluster, eligibility, mix, NodeId(i));
        }
        classes
    }

    /// Moves a node to the class of its room now (or out, when it is gone).
    pub(super) fn update(
        &mut self,
        cluster: &Cluster,
        eligibility: &mut Eligibility,
        mix: &[WeightedShape],
        id: NodeId,
    ) {
        if self.of_node.len() <= id.index() {
            self.of_node.resize(id.index() + 1, None);
            self.fixed_of_node.resize(id.index() + 1, None);
        }
        let key = cluster.nodes.get(id.0).map(|node| {
            let mut shared: Vec<u32> = node.shared_gpus.iter().map(|d| d.free_now()).collect();
            shared.sort_unstable();
            ClassKey {
                free: free_now(node),
                shared,
                fixed: self.fixed_number(cluster, eligibility, mix, id, node),
            }
        });
        let old = self.of_node[id.index()];
        if let (Some(k), Some(key)) = (old, &key)
            && self.classes[k].key == *key
        {
            return;
        }
        if let Some(k) = old {
            self.leave(k, id);
        }
        self.of_node[id.index()] = None;
        if let Some(key) = key {
            let k = self.class_of(key);
            self.join(k, id);
            self.of_node[id.index()] = Some(k);
        }
    }

    /// The number of a node's fixed part, worked out at its first update (again should another node
    /// take its slot).
    fn fixed_number(
        &mut self,
        cluster: &Cluster,
        eligibility: &mut Eligibility,
        mix: &[WeightedShape],
        id: NodeId,
        node: &Node,
    ) -> usize {
        if let Some((name, number)) = &self.fixed_of_node[id.index()]
            && Arc::ptr_eq(name, &node.name)
        {
            return *number;
        }
        let fixed = Fixed::of(node, id, cluster, eligibility, mix);
        let next = self.fixed.len();
        let number = *self.fixed_numbers.entry(fixed.clone()).or_insert(next);
        if number == next {
            self.fixed.push(fixed);
        }
        self.fixed_of_node[id.index()] = Some((node.name.clone(), number));
        number
    }

    fn class_of(&mut self, key: ClassKey) -> usize {
        if let Some(k) = self.by_key.get(&key) {
            return *k;
        }
        let k = self.classes.len();
        self.by_key.insert(key.clone(), k);
        self.classes.push(Class {
            key,
            members: BTreeSet::new(),
            live_at: None,
        });
        k
    }

    fn join(&mut self, k: usize, id: NodeId) {
        let class = &mut self.classes[k];
        class.members.insert(id);
        if class.live_at.is_none() {
            class.live_at = Some(self.live.len());
            self.live.push(k);
        }
    }

    fn leave(&mut self, k: usize, id: NodeId) {
        let class = &mut self.classes[k];
        class.members.remove(&id);
        if class.members.is_empty()
            && let Some(at) = class.live_at.take()
        {
            self.live.swap_remove(at);
            if let Some(&moved) = self.live.get(at) {
                self.classes[moved].live_at = Some(at);
            }
        }
    }

    fn shape_number(&mut self, task: &Task, policy: &PlacementPolicy) -> usize {
        let shape = (
            task.request,
            task.gpu,
            policy.gpu_sharing == PlacementStrategy::Spread,
        );
        if let Some((last, number)) = &self.last_shape
            && *last == shape
        {
            return *number;
        }
        let next = self.pod_shapes.len();
        let number = *self.pod_shapes.entry(shape).or_insert(next);
        if number == self.points.len() {
            self.points.push(Vec::new());
        }
        self.last_shape = Some((shape, number));
        number
    }

    /// The node (and way) with the most points for `task` among those it may take now, ties to the
    /// lowest node id; with `avoid_soft_taints`, only nodes without `PreferNoSchedule` taints it does not
    /// tolerate.
    pub(super) fn best(
        &mut self,
        c: &mut Caches<'_>,
        cluster: &Cluster,
        task: &Task,
        policy: &PlacementPolicy,
        mix: &[WeightedShape],
        avoid_soft_taints: bool,
    ) -> Search {
        let shape = self.shape_number(task, policy);
        // A mix shape with the pod's constraints gives its eligibility per class.
        let eligible_bit = mix.iter().position(|w| w.shape.constraints == task.constraints);
        let constraints = cluster.constraints.get(task.constraints);
        let mut ranked = std::mem::take(&mut self.ranked);
        ranked.clear();
        for &k in &self.live {
            let class = &self.classes[k];
            let fixed = &self.fixed[class.key.fixed];
            if !class.key.admits(fixed, task)
                || eligible_bit.is_some_and(|b| !fixed.eligible[b])
                || (avoid_soft_taints && constraints.untolerated_soft_taints(&fixed.soft_taints) > 0)
            {
                continue;
            }
            let Some(&first) = class.members.first() else {
                continue;
            };
            let memo = &mut self.points[shape];
            if memo.len() <= k {
                memo.resize(k + 1, None);
            }
            let points = *memo[k].get_or_insert_with(|| class_points(c, cluster, task, policy, mix, first));
            if let Some(points) = points {
                ranked.push((points, first, k));
            }
        }
        ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut outcome = Search::NoNode;
        for tier in ranked.chunk_by(|a, b| a.0 == b.0) {
            let mut winner: Option<Placement> = None;
            // Classes by their first node: once that is past the winner, so is every later node.
            for &(_, first, k) in tier {
                let upper = match &winner {
                    Some(w) if first >= w.node => break,
                    Some(w) => Bound::Excluded(w.node),
                    None => Bound::Unbounded,
                };
                for &n in self.classes[k].members.range((Bound::Unbounded, upper)) {
                    if let Ok(p) = check(c, cluster, task, policy, n)
                        && p.mode == Mode::Allocate
                    {
                        winner = Some(p);
                        break;
                    }
                }
            }
            if let Some(p) = winner {
                // Only a one-device fraction has more than one way to go on a node; any other pod goes
                // as `check` placed it (tests still score it, to catch a class gone stale).
                let one_way = !matches!(task.gpu, GpuRequest::Fraction { devices, .. } if devices <= 1);
                if one_way && !cfg!(debug_assertions) {
                    outcome = Search::Found(p);
                    break;
                }
                let choice = fragmentation_choice(c, cluster, task, mix, p);
                let tier_points = tier[0].0;
                debug_assert_eq!(
                    choice.as_ref().map(|(points, _)| *points),
                    Some(tier_points),
                    "a node scores otherwise than its class"
                );
                outcome = match choice {
                    Some((points, chosen)) if points == tier_points => Search::Found(chosen),
                    _ => Search::Stale,
                };
                break;
            }
        }
        self.ranked = ranked;
        outcome
    }
}

/// The best points of `task` on any node of the class of node `member`.
fn class_points(
    c: &mut Caches<'_>,
    cluster: &Cluster,
    task: &Task,
    policy: &PlacementPolicy,
    mix: &[WeightedShape],
    member: NodeId,
) -> Option<i32> {
    // The devices `check` would give it there (its answer on the node itself does not matter: only
    // nodes that pass it are taken).
    let gpu_groups: Vec<Arc<str>> = match task.gpu {
        GpuRequest::Fraction { .. } | GpuRequest::Memory { .. } => {
            let (mut groups, fresh) = shared_groups(cluster, task, policy, member);
            let name = &cluster.node(member).name;
            groups.extend((0..fresh).map(|i| new_group_id(name, task, i)));
            groups
        }
        GpuRequest::None | GpuRequest::Whole(_) => Vec::new(),
    };
    let placement = Placement {
        node: member,
        mode: Mode::Allocate,
        gpu_groups,
    };
    fragmentation_choice(c, cluster, task, mix, placement).map(|(points, _)| points)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::{Mode, NodeIndex, PlacementPolicy};
    use crate::config::PlacementStrategy;
    use crate::model::constraints::{Taint, TaintEffect};
    use crate::model::pod_rules::{
        HOSTNAME_KEY, LabelSelector, NamespaceScope, PodTerm, RulesSpec, SelectorRequirement,
    };
    use crate::model::resources::PODS;
    use crate::model::{
        ApiView, Assumed, Cluster, GpuRequest, NodeId, NodeUpdate, Resources, TaskId, TaskStatus,
    };
    use crate::sim::{GI, GangSpec, Sim, SplitMix, pod_update_of};

    fn taint(key: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.to_owned(),
            value: String::new(),
            effect,
        }
    }

    /// A node of one of a few kinds (so that many are alike), in one of two pools, with one of two GPU
    /// memories, now and then tainted, not ready or cordoned.
    fn add_node(s: &mut Sim, rng: &mut SplitMix, name: &str) {
        // (GPUs, CPU, memory GiB): the second runs out of CPU and memory before GPUs.
        let (gpus, cpu, mem) = [
            (8, 64_000, 256),
            (8, 16_000, 32),
            (4, 32_000, 128),
            (0, 32_000, 64),
        ][rng.below(4)];
        let taints = match rng.below(10) {
            0 => vec![taint("soft", TaintEffect::PreferNoSchedule)],
            1 => vec![taint("other", TaintEffect::PreferNoSchedule)],
            2 => vec![taint("dedicated", TaintEffect::NoSchedule)],
            _ => Vec::new(),
        };
        s.cluster.apply_node(NodeUpdate {
            name: name.into(),
            labels: BTreeMap::from([
                ("pool".to_owned(), ["a", "b"][rng.below(2)].to_owned()),
                (HOSTNAME_KEY.to_owned(), name.to_owned()),
            ]),
            taints,
            ready: rng.below(20) != 0,
            unschedulable: rng.below(20) == 0,
            allocatable: Resources::new(cpu, mem * GI, gpus * 1000).with(PODS, 110),
            gpu_memory_mib: [Some(40_000), Some(80_000)][rng.below(2)],
        });
    }

    /// Random nodes and gangs of every request kind: fractions (on one device or two), `gpu-memory`,
    /// whole and multi-GPU, CPU-only; some pinned to a pool, tolerating soft taints, memory-heavy or
    /// keeping their pods on different nodes.
    fn random_sim(rng: &mut SplitMix) -> Sim {
        let mut s = Sim::new();
        s.queue("d", None, -1.0, -1.0, 1.0)
            .queue("q", Some("d"), -1.0, -1.0, 1.0);
        for i in 0..10 + rng.below(50) {
            add_node(&mut s, rng, &format!("n{i}"));
        }
        for g in 0..20 + rng.below(40) {
            let name = format!("g{g}");
            let pods = 1 + u32::try_from(rng.below(4)).unwrap_or(0);
            let mut spec = GangSpec::new(&name, "q", pods)
                .cpu_mem([500, 2_000, 8_000][rng.below(3)], [1, 4, 12][rng.below(3)]);
            spec = match rng.below(8) {
                0 | 1 => spec.fraction([100, 250, 500, 700][rng.below(4)]),
                2 => spec.gpus(1),
                3 => spec.gpus(2),
                4 => spec.gpus(4),
                5 => spec.gpus(8),
                _ => spec.gpus(0),
            };
            if rng.below(4) == 0 {
                spec = spec.selector("pool", "a");
            }
            if rng.below(3) == 0 {
                spec = spec.tolerate("soft");
            }
            if rng.below(6) == 0 {
                let term = PodTerm::new(
                    Some(LabelSelector::new(vec![SelectorRequirement::equals(
                        "job", &name,
                    )])),
                    NamespaceScope::only("ns"),
                    HOSTNAME_KEY,
                );
                spec = spec.labels(&[("job", &name)]).rules(RulesSpec {
                    anti_affinity: vec![term],
                    ..RulesSpec::default()
                });
            }
            s.gang(spec);
        }
        // Requests the gang builder has no word for: fractions of two devices and GPU memory.
        let ids: Vec<TaskId> = s.cluster.tasks.iter().map(|(i, _)| TaskId(i)).collect();
        for id in ids {
            let gpu = match rng.below(12) {
                0 => GpuRequest::Fraction {
                    milli: [300, 500][rng.below(2)],
                    devices: 2,
                },
                1 => GpuRequest::Memory {
                    mib: [10_000, 20_000, 40_000][rng.below(3)],
                    devices: 1,
                },
                _ => continue,
            };
            let mut update = pod_update_of(&s.cluster, id);
            update.request.0[crate::model::resources::GPU] = 0;
            update.gpu = gpu;
            s.cluster.apply_pod(update);
        }
        s
    }

    /// Places the first `share` of the pending pods by bin-packing and lets them run (every fifth as
    /// terminating), so the compared search starts from partly used nodes and shared devices.
    fn warm_up(s: &mut Sim, rng: &mut SplitMix, pending: &[TaskId]) {
        let binpack = PlacementPolicy {
            gpu: PlacementStrategy::Binpack,
            cpu: PlacementStrategy::Binpack,
            gpu_sharing: PlacementStrategy::Binpack,
            gpu_sharing_enabled: true,
            seed: 0,
        };
        let mut index = NodeIndex::build(&s.cluster);
        for &t in pending {
            let task = s.cluster.task(t).clone();
            let Some(p) = index.find(&s.cluster, &task, &binpack, None, None) else {
                continue;
            };
            if p.mode != Mode::Allocate {
                continue;
            }
            let mut update = pod_update_of(&s.cluster, t);
            update.api = ApiView {
                status: if rng.below(5) == 0 {
                    TaskStatus::Releasing
                } else {
                    TaskStatus::Running
                },
                node_name: Some(s.cluster.node(p.node).name.clone()),
                bound_at: None,
            };
            update.gpu_groups = p.gpu_groups;
            s.cluster.apply_pod(update);
            index.update(&s.cluster, p.node);
        }
    }

    #[test]
    fn the_narrowed_search_places_every_pod_where_the_exhaustive_scan_does() {
        let mut compared = 0;
        let mut placed = 0;
        for seed in 0..200 {
            let mut rng = SplitMix(seed);
            let mut s = random_sim(&mut rng);
            let mut pending: Vec<TaskId> = s.cluster.tasks.iter().map(|(i, _)| TaskId(i)).collect();
            // Shuffled, so gangs interleave.
            for i in (1..pending.len()).rev() {
                pending.swap(i, rng.below(i + 1));
            }
            let warm = pending.len() * rng.below(3) / 4;
            warm_up(&mut s, &mut rng, &pending[..warm]);
            let policy = PlacementPolicy {
                gpu: PlacementStrategy::Fragmentation,
                cpu: PlacementStrategy::Fragmentation,
                gpu_sharing: [PlacementStrategy::Binpack, PlacementStrategy::Spread][rng.below(2)],
                gpu_sharing_enabled: true,
                seed: 0,
            };
            s.cluster.rules.start_session();
            // The whole mix, or only its most frequent shapes (pods outside it are judged node by node).
            let mut mix = s.cluster.shapes.mix(0.95);
            mix.truncate(1 + rng.below(mix.len().max(1) * 2));
            let session = |cluster: &Cluster| {
                let mut narrowed = NodeIndex::build(cluster);
                narrowed.set_mix(mix.clone());
                let mut exhaustive = NodeIndex::build(cluster);
                exhaustive.mix.clone_from(&mix);
                // Eligibility is worked out once a session, over the nodes there then: both searches
                // see a node added later as fitting nothing (sessions never see nodes come).
                for (_, t) in cluster.tasks.iter() {
                    narrowed.eligibility.check(cluster, t.constraints, NodeId(0));
                    exhaustive.eligibility.check(cluster, t.constraints, NodeId(0));
                }
                (narrowed, exhaustive)
            };
            let (mut narrowed, mut exhaustive) = session(&s.cluster);
            let mut undo = Vec::new();
            for (k, &t) in pending[warm..].iter().enumerate() {
                let Some(task) = s.cluster.tasks.get(t.0).cloned() else {
                    continue;
                };
                let fast = narrowed.find(&s.cluster, &task, &policy, None, None);
                let slow = exhaustive.find(&s.cluster, &task, &policy, None, None);
                assert_eq!(fast, slow, "seed {seed}, pod {}", task.name);
                compared += 1;
                if let Some(p) = fast {
                    placed += 1;
                    let assumed = match p.mode {
                        Mode::Allocate => Assumed::Binding { node: p.node },
                        Mode::Pipeline => Assumed::Pipelined {
                            node: p.node,
                            until: i64::MAX,
                        },
                    };
                    undo.push(s.cluster.set_assumed(t, assumed, Some(p.gpu_groups)));
                    narrowed.update(&s.cluster, p.node);
                    exhaustive.update(&s.cluster, p.node);
                }
                // Now and then a placement is taken back (a gang that did not fit is rolled back).
                if rng.below(6) == 0
                    && let Some(u) = undo.pop()
                {
                    let node = s.cluster.task(u.task).node;
                    s.cluster.undo_placement(u);
                    if let Some(n) = node {
                        narrowed.update(&s.cluster, n);
                        exhaustive.update(&s.cluster, n);
                    }
                }
                // Nodes come and go, and a new session sees them.
                if k == 20 {
                    s.cluster.rules.start_session();
                    (narrowed, exhaustive) = session(&s.cluster);
                }
                if k == 5 {
                    let name = "late";
                    add_node(&mut s, &mut rng, name);
                    let id = s.cluster.node_id(name).expect("just added");
                    narrowed.update(&s.cluster, id);
                    exhaustive.update(&s.cluster, id);
                }
                if k == 9 {
                    let empty = s
                        .cluster
                        .nodes
                        .iter()
                        .find(|(_, n)| n.tasks.is_empty())
                        .map(|(i, n)| (NodeId(i), n.name.clone()));
                    if let Some((id, name)) = empty {
                        s.cluster.remove_node(&name);
                        narrowed.update(&s.cluster, id);
                        exhaustive.update(&s.cluster, id);
                    }
                }
            }
        }
        assert!(
            compared > 2_000 && placed > 1_000,
            "{compared} compared, {placed} placed"
        );
    }
}
