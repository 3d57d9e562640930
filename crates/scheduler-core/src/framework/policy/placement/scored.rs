//! The scored strategies: every node that fits is looked at, and for a fraction every device it could
//! take; the best by the strategy's key wins.
//!
//! - `fragmentation`: least growth of the expected GPU capacity that the observed mix of request shapes
//!   could not use (FGD's fragmentation measure, Weng et al., USENIX ATC 2023), scored as FGD scores it
//!   (whole points of 100 x sigmoid(-growth / 1000)), ties to the first node in node order. The coarse
//!   points matter: growths within a few tens of thousandths tie, and the ties then fill nodes in one
//!   order (first fit), which on the openb trace allocates about a point more than ranking by the exact
//!   growth (`docs/quality.md`).
//! - `bestfit` and `random`: the FGD paper's baselines, for `kai sim` (experiment policies); BestFit's
//!   ties, like the paper's simulator's, go to the first node in node order.
//!
//! The candidates pass the same checks as every other placement (`check`: static predicates, room,
//! volumes, the rules about other pods); only the choice among them differs.
//!
//! [`best`] scores every candidate. In a session, `fragmentation` reaches the same choice through
//! classes of alike nodes (`classes`), scoring each class once; [`best`] stays the reference for it
//! (and its fallback), and the only search of `bestfit` and `random`.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::{Caches, Mode, Placement, PlacementPolicy, check, free_now, new_group_id};
use crate::config::PlacementStrategy;
use crate::model::shapes::WeightedShape;
use crate::model::{Cluster, GpuRequest, Node, NodeId, Task};

/// FGD's BestFit normalisers: 128 cores and 8 GPUs, in thousandths.
const BESTFIT_CPU: f64 = 128_000.0;
const BESTFIT_GPU: f64 = 8_000.0;

/// A node's free room as the fragmentation measure sees it: CPU, whole free GPUs, and the free
/// thousandths of each shared device.
#[derive(Clone, Debug, PartialEq)]
struct GpuView {
    /// Free CPU (millicores).
    cpu: i64,
    /// Free whole devices.
    whole: u32,
    /// Free thousandths of each shared device.
    shared: Vec<u32>,
}

impl GpuView {
    /// The node's free room now.
    fn of(node: &Node) -> Self {
        let free = free_now(node);
        Self {
            cpu: free.cpu(),
            whole: u32::try_from((free.gpu() / 1000).max(0)).unwrap_or(u32::MAX),
            shared: node.shared_gpus.iter().map(|d| d.free_now()).collect(),
        }
    }

    /// Free thousandths over all devices.
    fn gpu_left(&self) -> i64 {
        i64::from(self.whole) * 1000 + self.shared.iter().map(|m| i64::from(*m)).sum::<i64>()
    }

    /// FGD's fragmentation of this node for one shape: the free GPU thousandths the shape cannot use
    /// here. All of it when the shape may not come here, lacks CPU or lacks devices with room; else the
    /// devices too small for it. A CPU-only shape counts nothing (its share of idle GPUs is the same
    /// wherever a pod goes, so it cannot tell nodes apart).
    fn fragmentation(&self, shape_cpu: i64, milli: u32, gpus: u32, eligible: bool) -> i64 {
        if gpus == 0 {
            return 0;
        }
        let left = self.gpu_left();
        if !eligible || self.cpu < shape_cpu {
            return left;
        }
        let fitting = self.whole + self.shared.iter().filter(|m| **m >= milli).count() as u32;
        if fitting < gpus {
            return left;
        }
        self.shared
            .iter()
            .filter(|m| **m < milli)
            .map(|m| i64::from(*m))
            .sum()
    }
}

/// One way to place the pod on a node: the placement and the node's free room after it.
struct Option_ {
    placement: Placement,
    after: GpuView,
}

/// The ways a pod can go on node `n` given the placement `check` chose: for a one-device fraction,
/// each shared device with room and a fresh device (when one is free); otherwise that placement.
fn options(cluster: &Cluster, task: &Task, placement: Placement) -> Vec<Option_> {
    let node = cluster.node(placement.node);
    let before = GpuView::of(node);
    let cpu = task.request.cpu();
    match task.gpu {
        GpuRequest::Fraction { milli, devices } if devices <= 1 => {
            let mut out = Vec::new();
            for (i, d) in node.shared_gpus.iter().enumerate() {
                if d.free_now() >= milli && task.request.fits_in(&free_now(node)) {
                    let mut after = before.clone();
                    after.cpu -= cpu;
                    after.shared[i] -= milli;
                    out.push(Option_ {
                        placement: Placement {
                            node: placement.node,
                            mode: Mode::Allocate,
                            gpu_groups: vec![d.group.clone()],
                        },
                        after,
                    });
                }
            }
            let mut need = task.request;
            need.0[crate::model::resources::GPU] += 1000;
            if before.whole > 0 && need.fits_in(&free_now(node)) {
                let mut after = before.clone();
                after.cpu -= cpu;
                after.whole -= 1;
                after.shared.push(1000 - milli.min(1000));
                let group: Arc<str> = placement
                    .gpu_groups
                    .iter()
                    .find(|g| node.shared_gpu(g).is_none())
                    .cloned()
                    .unwrap_or_else(|| new_group_id(&node.name, task, 0));
                out.push(Option_ {
                    placement: Placement {
                        node: placement.node,
                        mode: Mode::Allocate,
                        gpu_groups: vec![group],
                    },
                    after,
                });
            }
            out
        }
        _ => {
            let mut after = before;
            after.cpu -= cpu;
            match task.gpu {
                GpuRequest::Whole(n) => after.whole = after.whole.saturating_sub(n),
                GpuRequest::Fraction { .. } | GpuRequest::Memory { .. } => {
                    let milli = Cluster::share_milli(task.gpu, node);
                    for g in &placement.gpu_groups {
                        match node.shared_gpu(g) {
                            Some(i) => after.shared[i] = after.shared[i].saturating_sub(milli),
                            None => {
                                after.whole = after.whole.saturating_sub(1);
                                after.shared.push(1000u32.saturating_sub(milli));
                            }
                        }
                    }
                }
                GpuRequest::None => {}
            }
            vec![Option_ { placement, after }]
        }
    }
}

/// A deterministic draw in `u64` for (seed, pod, node, option): the `random` choice.
fn draw(seed: u64, task: &Task, node: NodeId, option: usize) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    seed.hash(&mut h);
    task.uid.hash(&mut h);
    node.hash(&mut h);
    option.hash(&mut h);
    h.finish()
}

/// The expected fragmentation of a node's room over the mix (eligibility per shape from the cache).
fn expected_fragmentation(
    c: &mut Caches<'_>,
    cluster: &Cluster,
    node: NodeId,
    view: &GpuView,
    mix: &[WeightedShape],
) -> f64 {
    let mut sum = 0.0;
    for w in mix {
        let s = w.shape;
        if s.gpus == 0 {
            continue;
        }
        let eligible = c.eligibility.check(cluster, s.constraints, node);
        #[allow(clippy::cast_precision_loss)]
        let frag = view.fragmentation(s.cpu_milli, s.gpu_milli, s.gpus, eligible) as f64;
        sum += w.weight * frag;
    }
    sum
}

/// The best placement among `nodes` by `strategy` (one of the scored ones), among those that fit now.
pub(super) fn best(
    c: &mut Caches<'_>,
    cluster: &Cluster,
    task: &Task,
    policy: &PlacementPolicy,
    strategy: PlacementStrategy,
    mix: &[WeightedShape],
    nodes: impl Iterator<Item = NodeId>,
) -> Option<Placement> {
    // Smallest key wins: (primary, secondary, node).
    let mut best: Option<((f64, i64, u64), Placement)> = None;
    let gpu_request: i64 = match task.gpu {
        GpuRequest::Whole(n) => i64::from(n) * 1000,
        GpuRequest::Fraction { milli, devices } => i64::from(milli) * i64::from(devices.max(1)),
        _ => task.request.gpu(),
    };
    for n in nodes {
        let Ok(p) = check(c, cluster, task, policy, n) else {
            continue;
        };
        if p.mode != Mode::Allocate {
            continue;
        }
        let opts = options(cluster, task, p);
        if opts.is_empty() {
            continue;
        }
        let chosen: Vec<(usize, (f64, i64, u64))> = match strategy {
            PlacementStrategy::Random => {
                // One draw picks the node; a second the device among the devices with room (each free
                // whole device counting once), as the paper's Random picks a node, then a device.
                let node_key = draw(policy.seed, task, n, usize::MAX);
                let slots: Vec<usize> = opts
                    .iter()
                    .enumerate()
                    .flat_map(|(i, o)| {
                        let fresh = o.placement.gpu_groups.len() == 1
                            && cluster.node(n).shared_gpu(&o.placement.gpu_groups[0]).is_none();
                        let weight = if fresh {
                            GpuView::of(cluster.node(n)).whole.max(1) as usize
                        } else {
                            1
                        };
                        std::iter::repeat_n(i, weight)
                    })
                    .collect();
                let pick =
                    usize::try_from(draw(policy.seed, task, n, 0) % slots.len().max(1) as u64).unwrap_or(0);
                let i = slots.get(pick).copied().unwrap_or(0);
                vec![(i, (0.0, 0, node_key))]
            }
            PlacementStrategy::Bestfit => {
                // The paper's formula, truncated to whole points as its scheduler scores are; the device
                // of a fraction is the fullest that fits (its "best" GPU selection).
                let view = GpuView::of(cluster.node(n));
                #[allow(clippy::cast_precision_loss)]
                let waste = 0.5 * (view.cpu - task.request.cpu()) as f64 / BESTFIT_CPU
                    + 0.5 * (view.gpu_left() - gpu_request) as f64 / BESTFIT_GPU;
                #[allow(clippy::cast_possible_truncation)]
                let points = ((1.0 - waste) * 100.0) as i64;
                let i = opts
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, o)| device_fullness_key(cluster, n, o))
                    .map_or(0, |(i, _)| i);
                vec![(i, (0.0, -points, u64::from(n.0)))]
            }
            _ => best_option(c, cluster, n, mix, &opts)
                .map(|(points, i)| vec![(i, (-f64::from(points), 0, u64::from(n.0)))])
                .unwrap_or_default(),
        };
        for (i, key) in chosen {
            let better = best.as_ref().is_none_or(|(k, _)| {
                key.0
                    .total_cmp(&k.0)
                    .then(key.1.cmp(&k.1))
                    .then(key.2.cmp(&k.2))
                    .is_lt()
            });
            if better && let Some(o) = opts.get(i) {
                best = Some((key, o.placement.clone()));
            }
        }
    }
    best.map(|(_, p)| p)
}

/// The way the pod goes on `placement.node` that FGD scores best, with its points (the first of equal
/// points, as [`best`] takes it); `None` when it has no way there.
pub(super) fn fragmentation_choice(
    c: &mut Caches<'_>,
    cluster: &Cluster,
    task: &Task,
    mix: &[WeightedShape],
    placement: Placement,
) -> Option<(i32, Placement)> {
    let n = placement.node;
    let opts = options(cluster, task, placement);
    let (points, i) = best_option(c, cluster, n, mix, &opts)?;
    opts.into_iter().nth(i).map(|o| (points, o.placement))
}

/// FGD's best of the ways `opts` onto node `n`: its points and index, the first of equal points.
fn best_option(
    c: &mut Caches<'_>,
    cluster: &Cluster,
    n: NodeId,
    mix: &[WeightedShape],
    opts: &[Option_],
) -> Option<(i32, usize)> {
    if opts.is_empty() {
        return None;
    }
    let before = expected_fragmentation(c, cluster, n, &GpuView::of(cluster.node(n)), mix);
    let mut chosen: Option<(i32, usize)> = None;
    for (i, o) in opts.iter().enumerate() {
        let points = fragmentation_points(expected_fragmentation(c, cluster, n, &o.after, mix) - before);
        if chosen.is_none_or(|(best, _)| points > best) {
            chosen = Some((points, i));
        }
    }
    chosen
}

/// FGD's score of a placement whose expected fragmentation grows by `growth` (GPU thousandths):
/// 100 x sigmoid(-growth / 1000), truncated to whole points.
fn fragmentation_points(growth: f64) -> i32 {
    let points = 100.0 / (1.0 + (growth / 1000.0).exp());
    #[allow(clippy::cast_possible_truncation)]
    let points = points as i32;
    points
}

/// For a fraction joining an existing device, that device's free thousandths (smaller is fuller);
/// a fresh device counts as 1000.
fn device_fullness_key(cluster: &Cluster, n: NodeId, o: &Option_) -> i64 {
    let node = cluster.node(n);
    o.placement
        .gpu_groups
        .first()
        .and_then(|g| node.shared_gpu(g))
        .map_or(1000, |i| i64::from(node.shared_gpus[i].free_now()))
}
