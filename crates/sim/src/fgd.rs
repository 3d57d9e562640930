//! The FGD paper's static experiment (Weng et al., "Beware of Fragmentation", USENIX ATC 2023), run
//! through the scheduler's own decision core.
//!
//! As the paper's simulator (`hkust-adsl/kubernetes-scheduler-simulator`) runs it:
//! - the workload: the pod list sorted by name and shuffled with a seed; then, while its GPU request is
//!   below `ratio` x the cluster's GPUs, pods drawn with replacement from the list are appended (the
//!   first draw that would pass the target ends it), or while above, pods at random are dropped;
//! - the nodes: the list sorted by name, then in an order drawn with the seed (the paper's simulator
//!   prefixes each node's name with its place in a seeded permutation, and its scheduler sends a tie
//!   between equal scores to the name that sorts first, so ties go to the first node of a random but
//!   fixed order); here node ids follow that order ([`node_order`]), and the core's ties go to the
//!   lowest id;
//! - the mix of request shapes the core's `fragmentation` weighs: by default what it observed (each
//!   pod counted as it arrives, as on a live cluster); with [`Mix::Known`] the list's shapes are counted
//!   once before the first pod, the knowledge the paper's simulator gives FGD (its typical pods are
//!   taken from the whole list up front);
//! - each pod is offered once, in order: it arrives as a one-pod gang, one `cycle::run` of the core
//!   (action `allocate` only, the policy under test as `nodeplacement`) decides, a bind lands at once,
//!   and a pod that did not fit is deleted (no retry, no departure, no preemption). The policy
//!   `fragmentation-consolidate` adds the core's `consolidation` action: placed pods keep their gangs,
//!   and before the offered pod is refused, placed pods may be moved (evicted, recreated and placed
//!   again, as a controller would) to make room for it; moves are counted;
//! - after every pod: the GPU thousandths allocated and arrived, and FGD's fragmentation: for the
//!   "typical pods" (the most frequent request shapes, by CPU, GPU per device, GPUs and GPU models,
//!   covering 95 % of the list, weighted by frequency) the expected idle GPU thousandths a pod of the
//!   mix could not use (all of a node's idle GPU for a shape that lacks CPU, devices or model there, or
//!   that asks for no GPU; else its devices too small for the shape);
//! - a figure "at X % arrived" is the mean over the samples whose arrived GPU request, as a share of
//!   capacity, rounds to X (or to X +- 1 when none does).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use scheduler_core::config::{ActionKind, Config, PlacementStrategy};
use scheduler_core::cycle;
use scheduler_core::model::group_status::SeenStatus;
use scheduler_core::model::pod_rules::{Labels, RulesSpec};
use scheduler_core::model::{
    ApiView, Cluster, Group, GroupKey, GroupKind, Node, NodeId, PodUpdate, TaskStatus,
};
use scheduler_core::sim::{Sim, pod_update_of};

use crate::openb::{OpenbNode, OpenbPod};

/// Arrived loads (% of GPU capacity) the paper reports.
pub const REPORTED: [u32; 4] = [90, 95, 100, 130];

/// Share of pods the typical shapes cover.
const TYPICAL_COVERAGE: f64 = 0.95;

/// Namespace and queue of the replayed pods.
const NAMESPACE: &str = "openb";
const QUEUE: &str = "openb";

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// No node has a GPU.
    #[error("the node list has no GPU")]
    NoGpus,
    /// The pod list is empty or asks for no GPU.
    #[error("the pod list asks for no GPU")]
    NoGpuRequest,
    /// Two nodes share a name.
    #[error("node {0:?} appears twice")]
    DuplicateNode(String),
}

/// A placement policy under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Policy {
    /// The paper's Random baseline (core strategy `random`, an experiment policy).
    Random,
    /// The paper's BestFit baseline (core strategy `bestfit`, an experiment policy).
    BestFit,
    /// The core's default: fullest node first.
    Binpack,
    /// The core's spread: emptiest node first.
    Spread,
    /// The core's fragmentation-aware strategy.
    Fragmentation,
    /// The fragmentation-aware strategy, and the core's consolidation: before a pod is refused, placed
    /// pods may be moved to make room for it (what FGD cannot do).
    FragmentationConsolidate,
}

impl Policy {
    /// Every policy, in report order.
    pub const ALL: [Self; 6] = [
        Self::Random,
        Self::BestFit,
        Self::Binpack,
        Self::Spread,
        Self::Fragmentation,
        Self::FragmentationConsolidate,
    ];

    /// The core's `nodeplacement` strategy.
    #[must_use]
    pub fn strategy(self) -> PlacementStrategy {
        match self {
            Self::Random => PlacementStrategy::Random,
            Self::BestFit => PlacementStrategy::Bestfit,
            Self::Binpack => PlacementStrategy::Binpack,
            Self::Spread => PlacementStrategy::Spread,
            Self::Fragmentation | Self::FragmentationConsolidate => PlacementStrategy::Fragmentation,
        }
    }

    /// Name in tables and on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Random => "random",
            Self::BestFit => "bestfit",
            Self::Binpack => "binpack",
            Self::Spread => "spread",
            Self::Fragmentation => "fragmentation",
            Self::FragmentationConsolidate => "fragmentation-consolidate",
        }
    }

    /// The policy of a name.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The core configuration that runs this policy: allocate (and consolidation when it moves pods), GPU sharing on (no reservation
    /// pods: nothing runs them here), the policy for GPU and CPU pods, `seed` for its draws.
    #[must_use]
    pub fn config(self, seed: u64) -> Config {
        let actions = match self {
            Self::FragmentationConsolidate => vec![ActionKind::Allocate, ActionKind::Consolidation],
            _ => vec![ActionKind::Allocate],
        };
        let mut config = Config {
            actions,
            ..Config::default()
        };
        config.plugins.nodeplacement.gpu = self.strategy();
        config.plugins.nodeplacement.cpu = self.strategy();
        config.plugins.nodeplacement.seed = seed;
        config.plugins.gpusharing.enabled = true;
        config.plugins.gpusharing.reservation_pods = false;
        config
    }
}

/// GPU thousandths of the cluster.
#[must_use]
pub fn capacity_milli(nodes: &[OpenbNode]) -> i64 {
    nodes.iter().map(|n| i64::from(n.gpus) * 1000).sum()
}

/// The arrival order for one seed (indexes into `pods`), as the paper's simulator builds it.
#[must_use]
pub fn arrival_order(pods: &[OpenbPod], capacity_milli: i64, ratio: f64, seed: u64) -> Vec<usize> {
    let mut by_name: Vec<usize> = (0..pods.len()).collect();
    by_name.sort_by(|a, b| pods[*a].name.cmp(&pods[*b].name));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut order = by_name.clone();
    order.shuffle(&mut rng);
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    let target = (ratio * capacity_milli as f64) as i64;
    let mut total: i64 = order.iter().map(|i| pods[*i].gpu_milli_total()).sum();
    if pods.is_empty() {
        return order;
    }
    while total > target && !order.is_empty() {
        let k = rng.random_range(0..order.len());
        total -= pods[order.remove(k)].gpu_milli_total();
    }
    // Appending stops at the first draw that would pass the target (or, with a list asking for no
    // GPU, at once).
    let mut guard = 0usize;
    while total < target && guard < 10_000_000 {
        guard += 1;
        let i = by_name[rng.random_range(0..by_name.len())];
        let add = pods[i].gpu_milli_total();
        if add == 0 && total == 0 || total + add > target {
            break;
        }
        total += add;
        order.push(i);
    }
    order
}

/// The node order of a replay with `seed`: the list sorted by name, then shuffled with a generator
/// seeded from `seed` (independent of the arrival order's), as the paper's simulator orders nodes for
/// its ties.
#[must_use]
pub fn node_order(nodes: &[OpenbNode], seed: u64) -> Vec<OpenbNode> {
    let mut ordered = nodes.to_vec();
    ordered.sort_by(|a, b| a.name.cmp(&b.name));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ NODE_ORDER_STREAM);
    ordered.shuffle(&mut rng);
    ordered
}

/// Mixed into the seed of [`node_order`], so that its draws are not the arrival order's.
const NODE_ORDER_STREAM: u64 = 0x6e6f_6465_5f6f_7264;

/// What the core knows of the workload's request shapes when the replay starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mix {
    /// Nothing: shapes are counted as pods arrive, as on a live cluster.
    #[default]
    Observed,
    /// Every pod of the list counted once before the first arrives (arrivals still count), as FGD is
    /// given its typical pods.
    Known,
}

impl Mix {
    /// Name on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Observed => "observed",
            Self::Known => "known",
        }
    }

    /// The mix of a name.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Observed, Self::Known]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

/// Counts each pod of `pods` once in the cluster's mix of request shapes, as its arrival would.
fn know_mix(cluster: &mut Cluster, pods: &[OpenbPod]) {
    for pod in pods {
        let constraints = cluster.constraints.intern(pod.constraints());
        cluster
            .shapes
            .observe_pod(pod.request().cpu(), pod.gpu_request(), constraints);
    }
}

/// A request shape as FGD's typical pods key it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TypicalShape {
    /// CPU millicores.
    pub cpu_milli: i64,
    /// Thousandths per GPU.
    pub gpu_milli: u32,
    /// GPUs.
    pub num_gpu: u32,
    /// Allowed models (empty: any).
    pub gpu_spec: Vec<String>,
}

/// FGD's typical pods: shapes and their normalised frequencies.
#[derive(Clone, Debug, PartialEq)]
pub struct Typical(pub Vec<(TypicalShape, f64)>);

impl Typical {
    /// The most frequent shapes of `pods` covering 95 % of them, frequencies renormalised over those.
    #[must_use]
    pub fn of(pods: &[OpenbPod]) -> Self {
        let mut counts: HashMap<TypicalShape, u64> = HashMap::new();
        for p in pods {
            *counts
                .entry(TypicalShape {
                    cpu_milli: p.cpu_milli,
                    gpu_milli: p.gpu_milli,
                    num_gpu: p.num_gpu,
                    gpu_spec: p.gpu_spec.clone(),
                })
                .or_default() += 1;
        }
        let mut shapes: Vec<(TypicalShape, u64)> = counts.into_iter().collect();
        shapes.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
        #[allow(clippy::cast_precision_loss)]
        let total = pods.len() as f64;
        let mut kept = Vec::new();
        let mut covered = 0u64;
        for (shape, count) in shapes {
            #[allow(clippy::cast_precision_loss)]
            if covered as f64 >= TYPICAL_COVERAGE * total {
                break;
            }
            covered += count;
            kept.push((shape, count));
        }
        #[allow(clippy::cast_precision_loss)]
        let covered = covered as f64;
        Self(
            kept.into_iter()
                .map(|(s, c)| {
                    #[allow(clippy::cast_precision_loss)]
                    let f = c as f64 / covered;
                    (s, f)
                })
                .collect(),
        )
    }
}

/// A node's free room as FGD's measure sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRoom {
    /// Free CPU millicores.
    pub cpu_milli: i64,
    /// Free thousandths of each device (1000 for a free whole device).
    pub gpus: Vec<u32>,
}

impl NodeRoom {
    /// A node of the core's model: whole free devices and each shared device's free thousandths.
    #[must_use]
    pub fn of(node: &Node) -> Self {
        let free = node.allocatable.minus(&node.used).minus(&node.nominated);
        let whole = usize::try_from((free.gpu() / 1000).max(0)).unwrap_or(0);
        let mut gpus = vec![1000; whole];
        gpus.extend(node.shared_gpus.iter().map(|d| d.free_now()));
        Self {
            cpu_milli: free.cpu(),
            gpus,
        }
    }

    /// Idle GPU thousandths.
    #[must_use]
    pub fn idle(&self) -> i64 {
        self.gpus.iter().map(|m| i64::from(*m)).sum()
    }

    /// FGD's fragmentation of the node for the mix, given its GPU model.
    #[must_use]
    pub fn fragmentation(&self, model: &str, typical: &Typical) -> f64 {
        let idle = self.idle();
        let mut sum = 0.0;
        for (s, freq) in &typical.0 {
            let no_gpu = s.num_gpu == 0 || s.gpu_milli == 0;
            let no_access = !s.gpu_spec.is_empty() && !s.gpu_spec.iter().any(|m| m == model);
            let frag = if no_gpu || no_access {
                idle
            } else {
                let fitting = self.gpus.iter().filter(|m| **m >= s.gpu_milli).count();
                if fitting >= s.num_gpu as usize && self.cpu_milli >= s.cpu_milli {
                    self.gpus
                        .iter()
                        .filter(|m| **m < s.gpu_milli)
                        .map(|m| i64::from(*m))
                        .sum()
                } else {
                    idle
                }
            };
            #[allow(clippy::cast_precision_loss)]
            let frag = frag as f64;
            sum += freq * frag;
        }
        sum
    }
}

/// The cluster after one offered pod.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// GPU thousandths asked for by the pods offered so far.
    pub arrived_milli: i64,
    /// GPU thousandths allocated.
    pub allocated_milli: i64,
    /// FGD's fragmentation (expected unusable idle GPU thousandths).
    pub frag_milli: f64,
    /// Idle GPU thousandths.
    pub idle_milli: i64,
}

/// One replay.
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// GPU thousandths of the cluster.
    pub capacity_milli: i64,
    /// After each offered pod.
    pub samples: Vec<Sample>,
    /// Pods placed.
    pub placed: usize,
    /// Pods that fit nowhere.
    pub failed: usize,
    /// Placed pods moved by consolidation to make room for another (each move counted).
    pub moved: usize,
    /// Moved pods that found no place again.
    pub lost: usize,
}

impl Replay {
    /// Mean allocation (% of capacity) and fragmentation ratio (% of idle) over the samples whose
    /// arrived load rounds to `percent` (or to `percent` +- 1 when none does); `None` when no sample is
    /// that near.
    #[must_use]
    pub fn at(&self, percent: u32) -> Option<(f64, f64)> {
        #[allow(clippy::cast_precision_loss)]
        let cap = self.capacity_milli as f64;
        let bucket = |s: &Sample| {
            #[allow(clippy::cast_precision_loss)]
            let a = (s.arrived_milli as f64 / cap * 100.0).round_ties_even();
            a
        };
        let target = f64::from(percent);
        let mut chosen: Vec<&Sample> = self.samples.iter().filter(|s| bucket(s) == target).collect();
        if chosen.is_empty() {
            chosen = self
                .samples
                .iter()
                .filter(|s| (bucket(s) - target).abs() <= 1.0)
                .collect();
        }
        if chosen.is_empty() {
            return None;
        }
        #[allow(clippy::cast_precision_loss)]
        let n = chosen.len() as f64;
        #[allow(clippy::cast_precision_loss)]
        let alloc = chosen
            .iter()
            .map(|s| s.allocated_milli as f64 / cap * 100.0)
            .sum::<f64>()
            / n;
        #[allow(clippy::cast_precision_loss)]
        let frag = chosen
            .iter()
            .map(|s| {
                if s.idle_milli > 0 {
                    s.frag_milli / s.idle_milli as f64 * 100.0
                } else {
                    0.0
                }
            })
            .sum::<f64>()
            / n;
        Some((alloc, frag))
    }
}

/// The cluster of the node list, with one queue for the replayed pods.
///
/// # Errors
/// No GPU, or a node name twice.
pub fn cluster_of(nodes: &[OpenbNode]) -> Result<Cluster, ReplayError> {
    if capacity_milli(nodes) == 0 {
        return Err(ReplayError::NoGpus);
    }
    let mut sim = Sim::new();
    sim.queue(QUEUE, None, -1.0, -1.0, 1.0);
    let mut cluster = sim.cluster;
    for n in nodes {
        if cluster.node_id(&n.name).is_some() {
            return Err(ReplayError::DuplicateNode(n.name.clone()));
        }
        cluster.apply_node(n.update());
    }
    Ok(cluster)
}

/// Replays `order` (indexes into `pods`) on the nodes (node ids in the order given: see
/// [`node_order`]) with `config`, the core knowing `mix` of the shapes at the start, calling `progress`
/// with the pods offered so far every 256 pods.
///
/// # Errors
/// See [`cluster_of`]; a pod list asking for no GPU.
pub fn replay(
    nodes: &[OpenbNode],
    pods: &[OpenbPod],
    order: &[usize],
    config: &Config,
    mix: Mix,
    typical: &Typical,
    progress: &mut dyn FnMut(usize),
) -> Result<Replay, ReplayError> {
    replay_keeping_cluster(nodes, pods, order, config, mix, typical, progress).map(|(r, _)| r)
}

/// [`replay`], also returning the cluster as the replay left it (for checks).
///
/// # Errors
/// See [`replay`].
pub fn replay_keeping_cluster(
    nodes: &[OpenbNode],
    pods: &[OpenbPod],
    order: &[usize],
    config: &Config,
    mix: Mix,
    typical: &Typical,
    progress: &mut dyn FnMut(usize),
) -> Result<(Replay, Cluster), ReplayError> {
    let mut cluster = cluster_of(nodes)?;
    if pods.iter().all(|p| p.gpu_milli_total() == 0) {
        return Err(ReplayError::NoGpuRequest);
    }
    if mix == Mix::Known {
        know_mix(&mut cluster, pods);
    }
    let capacity = capacity_milli(nodes);
    // Per node (by id): model, idle and fragmentation, kept current as pods land.
    let mut model: HashMap<NodeId, &str> = HashMap::new();
    let mut state: HashMap<NodeId, (i64, f64)> = HashMap::new();
    let (mut idle, mut frag) = (0i64, 0.0f64);
    for n in nodes {
        if let Some(id) = cluster.node_id(&n.name) {
            model.insert(id, n.model.as_str());
            let room = NodeRoom::of(cluster.node(id));
            let s = (room.idle(), room.fragmentation(&n.model, typical));
            idle += s.0;
            frag += s.1;
            state.insert(id, s);
        }
    }
    let mut out = Replay {
        capacity_milli: capacity,
        samples: Vec::with_capacity(order.len()),
        placed: 0,
        failed: 0,
        moved: 0,
        lost: 0,
    };
    let moves = config.actions.contains(&ActionKind::Consolidation);
    let mut arrived = 0i64;
    let mut now = 1_000_000;
    for (k, &i) in order.iter().enumerate() {
        let Some(pod) = pods.get(i) else { continue };
        let name: Arc<str> = format!("{}-{k}", pod.name).into();
        let uid: Arc<str> = format!("uid-{k}").into();
        let key = GroupKey {
            kind: GroupKind::Kai,
            namespace: NAMESPACE.into(),
            name: name.clone(),
        };
        let mut group = Group::new(key.clone(), QUEUE, 1);
        group.uid = format!("group-{k}").into();
        group.created = now;
        cluster.apply_group(group);
        let update = PodUpdate {
            uid: uid.clone(),
            namespace: NAMESPACE.into(),
            name,
            ours: true,
            group_key: Some(key.clone()),
            subgroup: None,
            request: pod.request(),
            gpu: pod.gpu_request(),
            constraints: pod.constraints(),
            labels: Labels::new(),
            rules: RulesSpec::default(),
            api: ApiView {
                status: TaskStatus::Pending,
                node_name: None,
                bound_at: None,
            },
            gpu_groups: Vec::new(),
            task_order: 0,
            never_preempts: false,
            created: now,
            problem: None,
            claims: Vec::new(),
            reservation_for: None,
            gpu_device: None,
        };
        cluster.apply_pod(update);
        let settled = offer(&mut cluster, config, &mut now, &uid, k, moves);
        arrived += pod.gpu_milli_total();
        out.moved += settled.moved;
        out.lost += settled.lost;
        if settled.placed {
            out.placed += 1;
        } else {
            out.failed += 1;
        }
        // Without consolidation a placed pod stays bound but leaves its one-pod gang (`offer`):
        // nothing would move it, and a cycle then costs what the pending pod costs.
        if !settled.placed || !moves {
            cluster.remove_group(&key);
        }
        for id in settled.touched {
            let room = NodeRoom::of(cluster.node(id));
            let s = (
                room.idle(),
                room.fragmentation(model.get(&id).copied().unwrap_or(""), typical),
            );
            if let Some(old) = state.insert(id, s) {
                idle += s.0 - old.0;
                frag += s.1 - old.1;
            }
        }
        out.samples.push(Sample {
            arrived_milli: arrived,
            allocated_milli: capacity - idle,
            frag_milli: frag,
            idle_milli: idle,
        });
        if k % 256 == 255 {
            progress(k + 1);
        }
    }
    progress(order.len());
    Ok((out, cluster))
}

/// Cycles a consolidating replay may run for one offered pod: the one that decides, the one that
/// places the pods it moved and binds the offered pod on the room they left, and a spare.
const MAX_ROUNDS_PER_OFFER: usize = 4;

/// What offering one pod did.
struct Offered {
    /// The offered pod is bound.
    placed: bool,
    /// Pods moved (evicted and placed again) to make room for it.
    moved: usize,
    /// Moved pods that found no place again (removed, with their gangs).
    lost: usize,
    /// Nodes whose room changed.
    touched: Vec<NodeId>,
}

/// Runs the cycles that decide the pending pod `uid` (the `k`th offered) and lands their decisions as
/// the API server and kubelets would: binds run, evicted pods are recreated pending by their
/// controller and placed again. Without `moves` one cycle decides and a bound pod leaves its gang.
/// What is still pending at the end is deleted: the offered pod (refused), or a moved pod with
/// nowhere to go (lost).
fn offer(
    cluster: &mut Cluster,
    config: &Config,
    now: &mut i64,
    uid: &Arc<str>,
    k: usize,
    moves: bool,
) -> Offered {
    let mut out = Offered {
        placed: false,
        moved: 0,
        lost: 0,
        touched: Vec::new(),
    };
    let mut recreated: Vec<Arc<str>> = Vec::new();
    for _ in 0..MAX_ROUNDS_PER_OFFER {
        let result = cycle::run(cluster, config, *now);
        *now += 1000;
        for b in &result.decisions.binds {
            let Some(id) = cluster.task_id(&b.uid) else {
                continue;
            };
            let mut update = pod_update_of(cluster, id);
            update.api = ApiView {
                status: TaskStatus::Running,
                node_name: Some(b.node.clone()),
                bound_at: None,
            };
            update.gpu_groups.clone_from(&b.gpu_groups);
            if !moves {
                update.group_key = None;
            }
            cluster.apply_pod(update);
            out.placed |= b.uid == *uid;
            out.touched.extend(cluster.node_id(&b.node));
        }
        for e in &result.decisions.evictions {
            let Some(id) = cluster.task_id(&e.uid) else {
                continue;
            };
            out.touched.extend(cluster.task(id).node);
            let mut update = pod_update_of(cluster, id);
            cluster.remove_pod(&e.uid);
            update.uid = format!("uid-{k}-moved-{}", out.moved).into();
            update.api = ApiView {
                status: TaskStatus::Pending,
                node_name: None,
                bound_at: None,
            };
            update.gpu_groups.clear();
            recreated.push(update.uid.clone());
            cluster.apply_pod(update);
            out.moved += 1;
        }
        // Statuses land as the API server would take them, so the next cycle reports only changes.
        for s in &result.decisions.group_statuses {
            if let Some(g) = cluster.group_id(&s.key) {
                let mut group = cluster.group(g).clone();
                group.observed.status = Some(SeenStatus::Decided(s.status.clone()));
                group.observed.fingerprint = s.fingerprint;
                cluster.apply_group(group);
            }
        }
        if result.decisions.evictions.is_empty() {
            break;
        }
    }
    if !out.placed {
        cluster.remove_pod(uid);
    }
    for moved in recreated {
        let Some(id) = cluster.task_id(&moved) else {
            continue;
        };
        if cluster.task(id).status.is_allocated() {
            continue;
        }
        let group = cluster.task(id).group_key.clone();
        cluster.remove_pod(&moved);
        if let Some(key) = group {
            cluster.remove_group(&key);
        }
        out.lost += 1;
    }
    out.touched.sort_unstable();
    out.touched.dedup();
    out
}

/// Mean and sample standard deviation.
#[must_use]
pub fn mean_sd(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    #[allow(clippy::cast_precision_loss)]
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let sd = if values.len() > 1 {
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    (mean, sd)
}

/// The published figures (mean of seeds 42-51) for a workload and policy, from the authors' summary
/// (`published_fgd_atc23_summary.csv`): allocation at each reported load and the fragmentation ratio at
/// 90 %.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Published {
    /// Allocation (%) by arrived load (%).
    pub alloc: BTreeMap<u32, f64>,
    /// Fragmentation ratio (%) at 90 % arrived.
    pub frag_ratio_90: Option<f64>,
}

/// Reads the authors' summary: (workload, policy name as theirs, e.g. `05-BestFit`) -> figures.
///
/// # Errors
/// A malformed file.
pub fn read_published(
    reader: impl std::io::Read,
) -> Result<BTreeMap<(String, String), Published>, crate::openb::OpenbError> {
    let mut rdr = csv::ReaderBuilder::new().from_reader(reader);
    let headers = rdr
        .headers()
        .map_err(|source| crate::openb::OpenbError::Csv { line: 1, source })?
        .clone();
    let col = |name: &str| headers.iter().position(|h| h == name);
    let (Some(w), Some(p)) = (col("workload"), col("policy")) else {
        return Err(crate::openb::OpenbError::MissingColumn("workload/policy"));
    };
    let mut out = BTreeMap::new();
    for record in rdr.records() {
        let record = record.map_err(|source| crate::openb::OpenbError::Csv {
            line: source.position().map_or(0, csv::Position::line),
            source,
        })?;
        let mut fig = Published::default();
        for percent in [80, 90, 95, 100, 110, 120, 130] {
            if let Some(v) = col(&format!("alloc@{percent}_mean"))
                .and_then(|i| record.get(i))
                .and_then(|v| v.parse().ok())
            {
                fig.alloc.insert(percent, v);
            }
        }
        fig.frag_ratio_90 = col("frag_ratio@90_mean")
            .and_then(|i| record.get(i))
            .and_then(|v| v.parse().ok());
        out.insert(
            (
                record.get(w).unwrap_or("").to_owned(),
                record.get(p).unwrap_or("").to_owned(),
            ),
            fig,
        );
    }
    Ok(out)
}

/// The authors' name of a policy in their summary, when they ran it.
#[must_use]
pub fn published_name(policy: Policy) -> Option<&'static str> {
    match policy {
        Policy::Random => Some("01-Random"),
        Policy::BestFit => Some("05-BestFit"),
        Policy::Fragmentation => Some("06-FGD"),
        Policy::Binpack | Policy::Spread | Policy::FragmentationConsolidate => None,
    }
}

/// What one (workload, policy, seed) replay gave.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RunResult {
    /// Pod list name (file stem).
    pub workload: String,
    /// Policy.
    pub policy: &'static str,
    /// Seed of the order (and of the policy's draws).
    pub seed: u64,
    /// Pods offered.
    pub pods: usize,
    /// Pods placed.
    pub placed: usize,
    /// Pods that fit nowhere.
    pub failed: usize,
    /// Moves of placed pods by consolidation.
    pub moved: usize,
    /// Moved pods that found no place again.
    pub lost: usize,
    /// Allocation (% of GPU capacity) at each reported load.
    pub alloc: BTreeMap<u32, f64>,
    /// Fragmentation ratio (% of idle GPU) at 90 % arrived.
    pub frag_ratio_90: Option<f64>,
    /// Allocation (%) by arrived load (whole %), for charts.
    pub curve: Vec<(u32, f64)>,
}

impl RunResult {
    /// The figures of a replay.
    #[must_use]
    pub fn of(workload: &str, policy: Policy, seed: u64, replay: &Replay) -> Self {
        let alloc = REPORTED
            .iter()
            .filter_map(|p| replay.at(*p).map(|(a, _)| (*p, a)))
            .collect();
        let curve = (1..=130)
            .filter_map(|p| replay.at(p).map(|(a, _)| (p, a)))
            .collect();
        Self {
            workload: workload.to_owned(),
            policy: policy.name(),
            seed,
            pods: replay.samples.len(),
            placed: replay.placed,
            failed: replay.failed,
            moved: replay.moved,
            lost: replay.lost,
            alloc,
            frag_ratio_90: replay.at(90).map(|(_, f)| f),
            curve,
        }
    }
}

/// Mean and standard deviation over seeds.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Stat {
    /// Mean.
    pub mean: f64,
    /// Sample standard deviation.
    pub sd: f64,
}

/// One (workload, policy) line of the summary.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SummaryRow {
    /// Pod list name.
    pub workload: String,
    /// Policy.
    pub policy: &'static str,
    /// Seeds run.
    pub seeds: Vec<u64>,
    /// Allocation (%) by reported load.
    pub alloc: BTreeMap<u32, Stat>,
    /// Fragmentation ratio (%) at 90 % arrived.
    pub frag_ratio_90: Option<Stat>,
    /// Moves of placed pods by consolidation per replay.
    pub moved: Option<Stat>,
    /// The paper's figures for the same workload and policy, when it ran it.
    pub published: Option<Published>,
}

/// Means over seeds per (workload, policy), in the order first seen, with the published figures.
#[must_use]
pub fn summarize(runs: &[RunResult], published: &BTreeMap<(String, String), Published>) -> Vec<SummaryRow> {
    let mut keys: Vec<(String, &'static str)> = Vec::new();
    for r in runs {
        let k = (r.workload.clone(), r.policy);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .map(|(workload, policy)| {
            let mine: Vec<&RunResult> = runs
                .iter()
                .filter(|r| r.workload == workload && r.policy == policy)
                .collect();
            let stat = |values: Vec<f64>| {
                (!values.is_empty()).then(|| {
                    let (mean, sd) = mean_sd(&values);
                    Stat { mean, sd }
                })
            };
            let alloc = REPORTED
                .iter()
                .filter_map(|p| {
                    stat(mine.iter().filter_map(|r| r.alloc.get(p).copied()).collect()).map(|s| (*p, s))
                })
                .collect();
            let frag_ratio_90 = stat(mine.iter().filter_map(|r| r.frag_ratio_90).collect());
            #[allow(clippy::cast_precision_loss)]
            let moved = stat(mine.iter().map(|r| r.moved as f64).collect());
            let published = Policy::parse(policy)
                .and_then(published_name)
                .and_then(|name| published.get(&(workload.clone(), name.to_owned())).cloned());
            SummaryRow {
                seeds: mine.iter().map(|r| r.seed).collect(),
                workload,
                policy,
                alloc,
                frag_ratio_90,
                moved,
                published,
            }
        })
        .collect()
}

/// The summary as a text table: ours (mean +- sd over seeds), the published figure in brackets.
#[must_use]
pub fn render_table(rows: &[SummaryRow]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "GPU allocation (% of capacity) at 90/95/100/130 % of capacity arrived, mean +- sd over seeds; [published]"
    );
    let _ = writeln!(
        out,
        "{:<32} {:<25} {:>5} {:>21} {:>21} {:>21} {:>21} {:>17} {:>7}",
        "workload", "policy", "seeds", "90%", "95%", "100%", "130%", "frag ratio @90%", "moves"
    );
    for r in rows {
        let cell = |stat: Option<&Stat>, published: Option<f64>| {
            let ours = stat.map_or_else(|| "-".to_owned(), |s| format!("{:.2}+-{:.2}", s.mean, s.sd));
            match published {
                Some(p) => format!("{ours} [{p:.2}]"),
                None => ours,
            }
        };
        let published = |p: u32| r.published.as_ref().and_then(|x| x.alloc.get(&p).copied());
        let frag = {
            let ours = r
                .frag_ratio_90
                .map_or_else(|| "-".to_owned(), |s| format!("{:.1}", s.mean));
            match r.published.as_ref().and_then(|p| p.frag_ratio_90) {
                Some(p) => format!("{ours} [{p:.1}]"),
                None => ours,
            }
        };
        let _ = writeln!(
            out,
            "{:<32} {:<25} {:>5} {:>21} {:>21} {:>21} {:>21} {:>17} {:>7}",
            r.workload,
            r.policy,
            r.seeds.len(),
            cell(r.alloc.get(&90), published(90)),
            cell(r.alloc.get(&95), published(95)),
            cell(r.alloc.get(&100), published(100)),
            cell(r.alloc.get(&130), published(130)),
            frag,
            r.moved
                .map_or_else(|| "-".to_owned(), |m| format!("{:.0}", m.mean))
        );
    }
    out
}

/// Every run as CSV (one line per workload, policy and seed).
#[must_use]
pub fn runs_csv(runs: &[RunResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from(
        "workload,policy,seed,pods,placed,failed,alloc@90,alloc@95,alloc@100,alloc@130,frag_ratio@90,moved,lost\n",
    );
    let num = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.4}"));
    for r in runs {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.workload,
            r.policy,
            r.seed,
            r.pods,
            r.placed,
            r.failed,
            num(r.alloc.get(&90).copied()),
            num(r.alloc.get(&95).copied()),
            num(r.alloc.get(&100).copied()),
            num(r.alloc.get(&130).copied()),
            num(r.frag_ratio_90),
            r.moved,
            r.lost
        );
    }
    out
}

/// The summary as CSV: means, sds and published figures side by side.
#[must_use]
pub fn summary_csv(rows: &[SummaryRow]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("workload,policy,seeds");
    for p in REPORTED {
        let _ = write!(out, ",alloc@{p}_mean,alloc@{p}_sd,published_alloc@{p}");
    }
    out.push_str(",frag_ratio@90_mean,published_frag_ratio@90,moved_mean\n");
    let num = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.4}"));
    for r in rows {
        let _ = write!(out, "{},{},{}", r.workload, r.policy, r.seeds.len());
        for p in REPORTED {
            let s = r.alloc.get(&p);
            let published = r.published.as_ref().and_then(|x| x.alloc.get(&p).copied());
            let _ = write!(
                out,
                ",{},{},{}",
                num(s.map(|s| s.mean)),
                num(s.map(|s| s.sd)),
                num(published)
            );
        }
        let _ = writeln!(
            out,
            ",{},{},{}",
            num(r.frag_ratio_90.map(|s| s.mean)),
            num(r.published.as_ref().and_then(|p| p.frag_ratio_90)),
            num(r.moved.map(|s| s.mean))
        );
    }
    out
}

/// A chart of allocation against arrived load for one workload: one line per policy, the mean over
/// seeds at each whole percent.
#[must_use]
pub fn chart(workload: &str, runs: &[RunResult]) -> crate::plot::LineChart {
    let mut series = Vec::new();
    for policy in Policy::ALL {
        let mine: Vec<&RunResult> = runs
            .iter()
            .filter(|r| r.workload == workload && r.policy == policy.name())
            .collect();
        if mine.is_empty() {
            continue;
        }
        let mut points = Vec::new();
        for p in 1..=130u32 {
            let values: Vec<f64> = mine
                .iter()
                .filter_map(|r| r.curve.iter().find(|(x, _)| *x == p).map(|(_, a)| *a))
                .collect();
            if !values.is_empty() {
                points.push((f64::from(p), mean_sd(&values).0));
            }
        }
        series.push(crate::plot::Series {
            name: policy.name().to_owned(),
            points,
        });
    }
    crate::plot::LineChart {
        title: format!("{workload}: GPU allocation vs arrived load"),
        x_label: "GPU request arrived (% of capacity)".to_owned(),
        y_label: "GPU allocated (% of capacity)".to_owned(),
        series,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, gpus: u32, model: &str) -> OpenbNode {
        OpenbNode {
            name: name.into(),
            cpu_milli: 32_000,
            memory_mib: 131_072,
            gpus,
            model: model.into(),
        }
    }

    fn pod(name: &str, cpu: i64, num_gpu: u32, gpu_milli: u32, spec: &[&str]) -> OpenbPod {
        OpenbPod {
            name: name.into(),
            cpu_milli: cpu,
            memory_mib: 1024,
            num_gpu,
            gpu_milli,
            gpu_spec: spec.iter().map(|s| (*s).to_owned()).collect(),
            qos: "LS".into(),
        }
    }

    #[test]
    fn the_order_is_the_list_shuffled_then_topped_up_to_the_ratio() {
        let pods: Vec<OpenbPod> = (0..20)
            .map(|i| {
                pod(
                    &format!("p{i:02}"),
                    1000,
                    1,
                    if i % 2 == 0 { 1000 } else { 500 },
                    &[],
                )
            })
            .collect();
        let total: i64 = pods.iter().map(OpenbPod::gpu_milli_total).sum(); // 15,000
        let capacity = 20_000;
        let order = arrival_order(&pods, capacity, 1.3, 42);
        assert_eq!(
            order,
            arrival_order(&pods, capacity, 1.3, 42),
            "same seed, same order"
        );
        assert_ne!(order, arrival_order(&pods, capacity, 1.3, 43));
        let mut first: Vec<usize> = order[..20].to_vec();
        first.sort_unstable();
        assert_eq!(first, (0..20).collect::<Vec<_>>(), "the whole list comes first");
        let arrived: i64 = order.iter().map(|i| pods[*i].gpu_milli_total()).sum();
        assert!(arrived > total && arrived <= 26_000, "{arrived}");
        assert!(
            26_000 - arrived < 1000,
            "stops within one pod of the target: {arrived}"
        );
        // Above the ratio, pods are dropped instead.
        let fewer = arrival_order(&pods, 10_000, 1.0, 42);
        let arrived: i64 = fewer.iter().map(|i| pods[*i].gpu_milli_total()).sum();
        assert!(arrived <= 10_000 && fewer.len() < 20, "{arrived}");
    }

    #[test]
    fn the_node_order_is_a_seeded_shuffle_of_the_list_by_name() {
        let nodes: Vec<OpenbNode> = (0..40).map(|i| node(&format!("n-{i:02}"), 8, "T4")).collect();
        let names = |v: &[OpenbNode]| v.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        let a = node_order(&nodes, 42);
        let mut reversed = nodes.clone();
        reversed.reverse();
        assert_eq!(
            names(&a),
            names(&node_order(&reversed, 42)),
            "the list's own order does not matter"
        );
        assert_ne!(
            names(&a),
            names(&node_order(&nodes, 43)),
            "another seed, another order"
        );
        assert_ne!(names(&a), names(&nodes), "shuffled, not by name");
        let mut sorted = names(&a);
        sorted.sort();
        assert_eq!(sorted, names(&nodes), "every node once");
    }

    #[test]
    fn a_known_mix_counts_the_list_once_before_the_first_pod() {
        let nodes = vec![node("a", 8, "T4")];
        let pods = vec![
            pod("p0", 1000, 1, 1000, &[]),
            pod("p1", 2000, 1, 500, &[]),
            pod("p2", 4000, 0, 0, &[]),
        ];
        let typical = Typical::of(&pods);
        let config = Policy::Fragmentation.config(1);
        for (mix, counted) in [(Mix::Observed, 2), (Mix::Known, 5)] {
            let (_, cluster) =
                replay_keeping_cluster(&nodes, &pods, &[0, 1], &config, mix, &typical, &mut |_| {})
                    .expect("replays");
            assert_eq!(cluster.shapes.total(), counted, "{mix:?}");
        }
        assert_eq!(Mix::parse("known"), Some(Mix::Known));
        assert_eq!(Mix::parse(Mix::Observed.name()), Some(Mix::Observed));
    }

    #[test]
    fn typical_shapes_cover_95_percent_renormalised() {
        let mut pods = Vec::new();
        for i in 0..90 {
            pods.push(pod(&format!("a{i}"), 1000, 1, 1000, &[]));
        }
        for i in 0..6 {
            pods.push(pod(&format!("b{i}"), 2000, 1, 500, &[]));
        }
        for i in 0..4 {
            pods.push(pod(&format!("c{i}"), 3000, 0, 0, &[]));
        }
        let t = Typical::of(&pods);
        assert_eq!(t.0.len(), 2, "{t:?}");
        assert!((t.0[0].1 - 90.0 / 96.0).abs() < 1e-12);
        assert!((t.0.iter().map(|x| x.1).sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn fragmentation_follows_fgd_case_by_case() {
        let room = NodeRoom {
            cpu_milli: 4000,
            gpus: vec![1000, 300],
        };
        assert_eq!(room.idle(), 1300);
        let shape = |cpu, n, m, spec: &[&str]| TypicalShape {
            cpu_milli: cpu,
            gpu_milli: m,
            num_gpu: n,
            gpu_spec: spec.iter().map(|s| (*s).to_owned()).collect(),
        };
        let one = |s: TypicalShape| Typical(vec![(s, 1.0)]);
        // Fits: only the device too small for it counts.
        assert!((room.fragmentation("T4", &one(shape(1000, 1, 500, &[]))) - 300.0).abs() < 1e-9);
        // Too few devices, too little CPU, the wrong model, or no GPU at all: every idle thousandth.
        for s in [
            shape(1000, 2, 1000, &[]),
            shape(8000, 1, 500, &[]),
            shape(1000, 1, 500, &["V100M16"]),
            shape(1000, 0, 0, &[]),
        ] {
            assert!(
                (room.fragmentation("T4", &one(s.clone())) - 1300.0).abs() < 1e-9,
                "{s:?}"
            );
        }
        // The right model; and a mix weighs each shape by its share.
        assert!((room.fragmentation("T4", &one(shape(1000, 1, 200, &["T4", "P100"])))).abs() < 1e-9);
        let mix = Typical(vec![
            (shape(1000, 1, 500, &[]), 0.5),
            (shape(1000, 2, 1000, &[]), 0.5),
        ]);
        assert!((room.fragmentation("T4", &mix) - 800.0).abs() < 1e-9);
    }

    #[test]
    fn a_figure_at_a_load_is_the_mean_of_the_samples_that_round_to_it() {
        let sample = |arrived, allocated| Sample {
            arrived_milli: arrived,
            allocated_milli: allocated,
            frag_milli: 100.0,
            idle_milli: 1000 - allocated,
        };
        let r = Replay {
            capacity_milli: 1000,
            samples: vec![
                sample(890, 850),
                sample(900, 880),
                sample(904, 890),
                sample(990, 900),
            ],
            placed: 4,
            failed: 0,
            moved: 0,
            lost: 0,
        };
        let (alloc, frag) = r.at(90).expect("two samples round to 90 %");
        assert!((alloc - 88.5).abs() < 1e-9, "{alloc}");
        assert!(
            (frag - (100.0 / 120.0 + 100.0 / 110.0) / 2.0 * 100.0).abs() < 1e-9,
            "{frag}"
        );
        assert!(r.at(95).is_none(), "no sample within a point of 95 %");
        assert!((r.at(98).expect("99 is within a point").0 - 90.0).abs() < 1e-9);
    }

    #[test]
    fn a_tiny_replay_places_by_the_papers_bestfit_and_refuses_what_fits_nowhere() {
        // Two nodes of 2 and 4 GPUs. BestFit puts a 1-GPU pod where least would be left (the 2-GPU node),
        // a 0.5 fraction next to it there, a 4-GPU pod on the 4-GPU node; a second 4-GPU pod fits nowhere.
        let nodes = vec![node("small", 2, "T4"), node("big", 4, "T4")];
        let pods = vec![
            pod("p0", 1000, 1, 1000, &[]),
            pod("p1", 1000, 1, 500, &[]),
            pod("p2", 1000, 4, 1000, &[]),
            pod("p3", 1000, 4, 1000, &[]),
            pod("p4", 1000, 1, 1000, &["V100M32"]),
        ];
        let typical = Typical::of(&pods);
        let (r, cluster) = replay_keeping_cluster(
            &nodes,
            &pods,
            &[0, 1, 2, 3, 4],
            &Policy::BestFit.config(1),
            Mix::Observed,
            &typical,
            &mut |_| {},
        )
        .expect("replays");
        assert_eq!(
            (r.placed, r.failed),
            (3, 2),
            "the second 4-GPU pod and the V100 pod fit nowhere"
        );
        let arrived: Vec<i64> = r.samples.iter().map(|s| s.arrived_milli).collect();
        assert_eq!(arrived, vec![1000, 1500, 5500, 9500, 10_500]);
        let allocated: Vec<i64> = r.samples.iter().map(|s| s.allocated_milli).collect();
        assert_eq!(allocated, vec![1000, 1500, 5500, 5500, 5500]);
        let small = cluster.node(cluster.node_id("small").expect("small"));
        assert_eq!(
            small.shared_gpus.len(),
            1,
            "the fraction opened the small node's second device"
        );
        assert_eq!(small.used.gpu(), 2000);
        cluster.check_invariants().expect("accounting stays exact");
    }

    #[test]
    fn with_consolidation_a_placed_pod_moves_to_make_room_and_the_samples_follow() {
        // Binpack puts the 1-GPU pod on the first node, the only T4 node; the 2-GPU pod that needs a T4
        // fits nowhere then. Consolidation moves the first pod to the V100 node and the second takes
        // the T4 node; nothing is lost.
        let nodes = vec![node("t4", 2, "T4"), node("v100", 2, "V100M16")];
        let pods = vec![
            pod("any", 1000, 1, 1000, &[]),
            pod("t4-only", 1000, 2, 1000, &["T4"]),
        ];
        let typical = Typical::of(&pods);
        let run = |config: &Config| {
            replay_keeping_cluster(
                &nodes,
                &pods,
                &[0, 1],
                config,
                Mix::Observed,
                &typical,
                &mut |_| {},
            )
            .expect("replays")
        };
        let mut config = Policy::Binpack.config(1);
        let (r, _) = run(&config);
        assert_eq!(
            (r.placed, r.failed, r.moved),
            (1, 1, 0),
            "allocate alone refuses the T4 pod"
        );
        config.actions.push(ActionKind::Consolidation);
        let (r, cluster) = run(&config);
        assert_eq!((r.placed, r.failed, r.moved, r.lost), (2, 0, 1, 0));
        let allocated: Vec<i64> = r.samples.iter().map(|s| s.allocated_milli).collect();
        assert_eq!(allocated, vec![1000, 3000]);
        let on = |name: &str| cluster.node(cluster.node_id(name).expect("node")).used.gpu();
        assert_eq!((on("t4"), on("v100")), (2000, 1000));
        cluster.check_invariants().expect("accounting stays exact");
        assert_eq!(
            Policy::FragmentationConsolidate.config(1).actions,
            vec![ActionKind::Allocate, ActionKind::Consolidation]
        );
    }
}
