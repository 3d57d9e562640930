//! Placement quality against an exact search on tiny clusters (`cargo bench -p kai-scheduler-core --bench
//! quality`).
//!
//! Each instance: a few nodes of 8 GPUs, some GPUs already held by pods of another scheduler, and a few
//! dozen gangs (1-4 pods of 1, 2, 4 or 8 GPUs each, all in one queue, oldest first). The scheduler runs
//! rounds until it decides nothing more. An exhaustive search (dynamic programming over the multiset of
//! free GPUs per node) then finds:
//! - the most pods any all-or-nothing choice of gangs can place, and the fewest GPUs left fragmented
//!   (free on partly used nodes) among the choices placing that many;
//! - the fewest fragmented GPUs for exactly the gangs the scheduler placed (same work, best packing).
//!
//! GPUs are the only scarce resource by construction (CPU and memory always fit). 16 instances by default;
//! `KAI_BENCH_QUALITY_LARGE=1` adds 8 larger ones (12-16 nodes, 40 gangs), which take many minutes.

use std::collections::HashMap;

use kai_scheduler_core::model::TaskStatus;
use kai_scheduler_core::sim::{self, GangSpec, Sim, SplitMix};

const GPUS: u8 = 8;

#[derive(Clone, Debug)]
struct Instance {
    /// GPUs already used per node (by another scheduler's pods).
    used: Vec<u8>,
    /// Gangs: GPUs per pod, in order.
    gangs: Vec<Vec<u8>>,
}

fn instance(rng: &mut SplitMix, nodes: usize, gangs: usize) -> Instance {
    let used = (0..nodes)
        .map(|_| match rng.below(4) {
            0 => 0,
            1 => 1,
            2 => 2,
            _ => 3,
        })
        .collect();
    let gangs = (0..gangs)
        .map(|_| {
            let pods = [1, 1, 2, 4][rng.below(4)];
            let gpus = [1, 1, 2, 2, 4, 8][rng.below(6)];
            vec![gpus; pods]
        })
        .collect();
    Instance { used, gangs }
}

/// What the scheduler did: (pods placed, gangs placed mask, fragmented GPUs).
fn schedule(inst: &Instance) -> (u32, Vec<bool>, i64) {
    let mut s = Sim::new();
    s.queue("dept", None, -1.0, -1.0, 1.0);
    s.queue("q", Some("dept"), -1.0, -1.0, 1.0);
    for (i, used) in inst.used.iter().enumerate() {
        let name = format!("n{i}");
        s.node(&name, 256_000, 2048, i64::from(GPUS));
        if *used > 0 {
            s.foreign_pod(&format!("other-{i}"), &name, 1000, i64::from(*used));
        }
    }
    for (i, pods) in inst.gangs.iter().enumerate() {
        let n = u32::try_from(pods.len()).unwrap_or(1);
        s.gang(
            GangSpec::new(&format!("g{i}"), "q", n)
                .gpus(u32::from(pods[0]))
                .cpu_mem(1000, 1)
                .priority_class("train")
                .created(i64::try_from(i).unwrap_or_default()),
        );
    }
    s.settle_all(20);
    let mut placed = Vec::new();
    let mut pods = 0;
    for (i, g) in inst.gangs.iter().enumerate() {
        let running = s.count(&format!("g{i}"), TaskStatus::Running);
        placed.push(running == g.len());
        if running == g.len() {
            pods += u32::try_from(running).unwrap_or(0);
        }
    }
    (pods, placed, sim::fragmented_gpus(&s.cluster))
}

fn fragmented(free: &[u8]) -> i64 {
    free.iter().filter(|f| **f < GPUS).map(|f| i64::from(*f)).sum()
}

/// Best results already found, by (gang index, sorted free GPUs per node).
type ExactMemo = HashMap<(usize, Vec<u8>), Option<(u32, i64)>>;

/// Exhaustive search with memoisation over (gang index, sorted free GPUs per node).
struct Exact<'a> {
    gangs: &'a [Vec<u8>],
    /// Per gang: None = free choice, Some(true) = must place, Some(false) = must skip.
    forced: Option<&'a [bool]>,
    memo: ExactMemo,
}

impl Exact<'_> {
    /// Best (pods placed, -fragmented) from gang `i` on; None when forced gangs cannot all be placed.
    fn best(&mut self, i: usize, free: Vec<u8>) -> Option<(u32, i64)> {
        if i == self.gangs.len() {
            return Some((0, -fragmented(&free)));
        }
        if let Some(v) = self.memo.get(&(i, free.clone())) {
            return *v;
        }
        let force = self.forced.map(|f| f[i]);
        let mut best: Option<(u32, i64)> = None;
        if force != Some(true) {
            best = self.best(i + 1, free.clone());
        }
        if force != Some(false) {
            let mut outcomes = Vec::new();
            place(&self.gangs[i], 0, &mut free.clone(), &mut outcomes);
            outcomes.sort();
            outcomes.dedup();
            let pods = u32::try_from(self.gangs[i].len()).unwrap_or(0);
            for next in outcomes {
                if let Some((p, f)) = self.best(i + 1, next) {
                    let v = (p + pods, f);
                    if best.is_none_or(|b| v > b) {
                        best = Some(v);
                    }
                }
            }
        }
        self.memo.insert((i, free), best);
        best
    }
}

/// Every distinct way to put the pods from `p` on into `free` (nodes with equal free room are
/// interchangeable, so only one of each is tried); pushes sorted outcomes.
fn place(pods: &[u8], p: usize, free: &mut Vec<u8>, out: &mut Vec<Vec<u8>>) {
    if p == pods.len() {
        let mut s = free.clone();
        s.sort_unstable();
        out.push(s);
        return;
    }
    let mut tried = [false; GPUS as usize + 1];
    for n in 0..free.len() {
        let f = free[n];
        if f < pods[p] || tried[f as usize] {
            continue;
        }
        tried[f as usize] = true;
        free[n] -= pods[p];
        place(pods, p + 1, free, out);
        free[n] += pods[p];
    }
}

fn main() {
    let mut rng = SplitMix(42);
    println!("# Placement quality: scheduler vs exact search (frag = free GPUs on partly used nodes)");
    println!(
        "{:>4} {:>5} {:>5} {:>6} | {:>10} {:>10} | {:>10} {:>10} | {:>14}",
        "case",
        "nodes",
        "gangs",
        "pods",
        "sched pods",
        "sched frag",
        "best pods",
        "best frag",
        "best frag same"
    );
    let mut totals = (0u32, 0i64, 0u32, 0i64, 0i64);
    // The exact search grows exponentially: the two largest shapes take many minutes on 2 cores, so
    // they run only with KAI_BENCH_QUALITY_LARGE=1.
    let large = std::env::var("KAI_BENCH_QUALITY_LARGE").is_ok_and(|v| v == "1");
    let all = [(8, 24), (8, 30), (10, 30), (12, 36), (12, 40), (16, 40)];
    let cases = if large { &all[..] } else { &all[..4] };
    let mut case = 0;
    for &(nodes, gangs) in cases {
        for _ in 0..4 {
            case += 1;
            let inst = instance(&mut rng, nodes, gangs);
            let pods: usize = inst.gangs.iter().map(Vec::len).sum();
            let (sched_pods, placed, sched_frag) = schedule(&inst);
            let mut free: Vec<u8> = inst.used.iter().map(|u| GPUS - u).collect();
            free.sort_unstable();
            let mut exact = Exact {
                gangs: &inst.gangs,
                forced: None,
                memo: HashMap::new(),
            };
            let (best_pods, best_frag) = exact.best(0, free.clone()).unwrap_or((0, 0));
            let mut same = Exact {
                gangs: &inst.gangs,
                forced: Some(&placed),
                memo: HashMap::new(),
            };
            let same_frag = same.best(0, free).map_or(-1, |(_, f)| -f);
            println!(
                "{:>4} {:>5} {:>5} {:>6} | {:>10} {:>10} | {:>10} {:>10} | {:>14}",
                case, nodes, gangs, pods, sched_pods, sched_frag, best_pods, -best_frag, same_frag
            );
            totals.0 += sched_pods;
            totals.1 += sched_frag;
            totals.2 += best_pods;
            totals.3 += -best_frag;
            totals.4 += same_frag;
        }
    }
    println!(
        "total: scheduler {} pods placed, {} GPUs fragmented; exact best {} pods, {} fragmented; \
         exact packing of the scheduler's gangs {} fragmented",
        totals.0, totals.1, totals.2, totals.3, totals.4
    );
}
