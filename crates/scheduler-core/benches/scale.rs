//! The scale curve of the pure core, printed as tables (`cargo bench -p kai-scheduler-core --bench scale`).
//!
//! For each cluster size N (8 GPUs per node) and gang size k, with 10 x N pending one-GPU pods across
//! 100 leaf queues under 10 departments:
//! - snapshot: applying every watch update into a fresh model (`Cluster::apply_*`);
//! - full cycle: `cycle::run` over that model, everything pending;
//! - rules 10%: the same with 10% of the gangs' pods carrying required hostname anti-affinity or a
//!   `DoNotSchedule` zone spread among themselves;
//! - unchanged: a cycle after the cluster settled (binds confirmed running, statuses echoed back): the
//!   quiet-cycle check skips it;
//! - rerun: the same cycle forced (the skip bypassed), as the smallest change would run it;
//! - 1% churn: a cycle after 1% of the running pods completed and as many new pods arrived.
//!
//! Then preempt and consolidation on a full (or fragmented) cluster. Each figure is the median of
//! `KAI_BENCH_RUNS` runs (default 3; 1 at 10,000 nodes). `KAI_BENCH_NODES=500,1000` and
//! `KAI_BENCH_GANGS=8` restrict the sizes.

use std::time::{Duration, Instant};

use kai_scheduler_core::config::{ActionKind, Config};
use kai_scheduler_core::cycle::{self, CycleResult};
use kai_scheduler_core::model::Cluster;
use kai_scheduler_core::sim::{self, Sim, Synthetic};

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(name)
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

fn runs_for(nodes: usize) -> usize {
    let default = if nodes >= 10_000 { 1 } else { 3 };
    std::env::var("KAI_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One timed cycle over a copy of `base`: (wall time, result, model after).
fn timed_cycle(base: &Cluster, config: &Config, now: i64) -> (Duration, CycleResult, Cluster) {
    let mut cluster = base.clone();
    // The copy shares the base's session carry; a scheduler owns its own (see `unshare_carry`).
    kai_scheduler_core::framework::session::unshare_carry(&mut cluster);
    let started = Instant::now();
    let result = measured_cycle(&mut cluster, config, now);
    (started.elapsed(), result, cluster)
}

/// The measured call, kept out of line so instruction counters can select it
/// (`valgrind --tool=callgrind --toggle-collect='*measured_cycle*'`).
#[inline(never)]
fn measured_cycle(cluster: &mut Cluster, config: &Config, now: i64) -> CycleResult {
    cycle::run(cluster, config, now)
}

/// Whether a case is selected by `KAI_BENCH_CASES` (comma-separated labels; all by default).
fn selected(label: &str) -> bool {
    std::env::var("KAI_BENCH_CASES").map_or(true, |v| {
        v.split(',')
            .any(|c| label.split_whitespace().next() == Some(c.trim()))
    })
}

/// Phase split of a cycle in ms: open, allocate, consolidation, preempt, other actions, close.
fn phases(total: Duration, r: &CycleResult) -> [f64; 6] {
    let of = |kind: ActionKind| -> Duration {
        r.actions
            .iter()
            .filter(|(a, _)| *a == kind)
            .map(|(_, d)| *d)
            .sum()
    };
    let actions: Duration = r.actions.iter().map(|(_, d)| *d).sum();
    let (allocate, consolidate, preempt) = (
        of(ActionKind::Allocate),
        of(ActionKind::Consolidation),
        of(ActionKind::Preempt),
    );
    let others = actions.saturating_sub(allocate + consolidate + preempt);
    let close = total.saturating_sub(r.open + actions);
    [
        ms(r.open),
        ms(allocate),
        ms(consolidate),
        ms(preempt),
        ms(others),
        ms(close),
    ]
}

struct Row {
    label: &'static str,
    nodes: usize,
    gang: u32,
    pods: usize,
    cycle_ms: f64,
    split: [f64; 6],
    binds: usize,
    evictions: usize,
    waiting: u64,
    fragmented: i64,
}

fn print_header() {
    println!(
        "{:<12} {:>6} {:>3} {:>7} {:>9} {:>7} {:>8} {:>7} {:>7} {:>7} {:>7} {:>8} {:>6} {:>6} {:>7} {:>6}",
        "case",
        "N",
        "k",
        "pods",
        "cycle ms",
        "open",
        "allocate",
        "consol",
        "preempt",
        "other",
        "close",
        "ms/1kpod",
        "binds",
        "evict",
        "waiting",
        "frag"
    );
}

fn print_row(r: &Row) {
    let s = r.split;
    println!(
        "{:<12} {:>6} {:>3} {:>7} {:>9.3} {:>7.1} {:>8.1} {:>7.1} {:>7.1} {:>7.1} {:>7.1} {:>8.2} {:>6} {:>6} {:>7} {:>6}",
        r.label,
        r.nodes,
        r.gang,
        r.pods,
        r.cycle_ms,
        s[0],
        s[1],
        s[2],
        s[3],
        s[4],
        s[5],
        r.cycle_ms / (r.pods.max(1) as f64 / 1000.0),
        r.binds,
        r.evictions,
        r.waiting,
        r.fragmented
    );
}

/// Times `runs` cycles over copies of `base` and returns the median row. Each run's results and model
/// are dropped before the next run starts, as a scheduler drops a cycle's decisions once applied and
/// keeps one model: the next cycle reuses that memory instead of faulting in fresh pages.
fn measure(
    label: &'static str,
    base: &Cluster,
    config: &Config,
    now: i64,
    spec: &Synthetic,
    pods: usize,
    runs: usize,
) -> Option<Row> {
    if !selected(label) {
        return None;
    }
    let mut rows: Vec<Row> = (0..runs.max(1))
        .map(|_| {
            let (t, r, after) = timed_cycle(base, config, now);
            Row {
                label,
                nodes: spec.nodes,
                gang: spec.gang_size,
                pods,
                cycle_ms: ms(t),
                split: phases(t, &r),
                binds: r.decisions.binds.len(),
                evictions: r.decisions.evictions.len(),
                waiting: r.stats.gangs_waiting,
                fragmented: sim::fragmented_gpus(&after),
            }
        })
        .collect();
    rows.sort_by(|a, b| a.cycle_ms.total_cmp(&b.cycle_ms));
    Some(rows.swap_remove(rows.len() / 2))
}

fn main() {
    let node_sizes = env_list("KAI_BENCH_NODES", &[500, 1000, 5000, 10_000]);
    let gang_sizes = env_list("KAI_BENCH_GANGS", &[1, 8, 64]);
    let config = Config::default();
    let now = 1_000_000;
    println!("# Snapshot: applying all watch updates into a fresh model (median)");
    println!(
        "{:>6} {:>3} {:>7} {:>12} {:>12}",
        "N", "k", "pods", "snapshot ms", "us/pod"
    );
    let mut snapshot_rows = Vec::new();
    let mut rows = Vec::new();
    for &n in &node_sizes {
        for &k in &gang_sizes {
            let spec = Synthetic::new(n, u32::try_from(k).unwrap_or(1));
            let runs = runs_for(n);
            let updates = spec.updates();
            let pods = updates.pod_count();
            let mut snap = Vec::new();
            let mut base = None;
            for _ in 0..runs {
                let u = updates.clone();
                let mut cluster = sim::empty_cluster();
                let t = Instant::now();
                u.apply(&mut cluster);
                snap.push(ms(t.elapsed()));
                base = Some(cluster);
            }
            let base = base.expect("invariant: at least one run");
            let snap = median(snap);
            println!(
                "{:>6} {:>3} {:>7} {:>12.1} {:>12.2}",
                n,
                k,
                pods,
                snap,
                snap * 1000.0 / pods as f64
            );
            snapshot_rows.push((n, k, pods, snap));
            rows.extend(measure("full", &base, &config, now, &spec, pods, runs));
            if selected("rules") {
                // The same cluster with 10% of the gangs carrying anti-affinity or a spread constraint.
                let mut with_rules = spec.clone();
                with_rules.rules_fraction = 0.1;
                let ruled = with_rules.cluster();
                rows.extend(measure(
                    "rules 10%",
                    &ruled,
                    &config,
                    now,
                    &with_rules,
                    pods,
                    runs,
                ));
            }
            if !selected("unchanged") && !selected("rerun") && !selected("churn") {
                continue;
            }
            // Settle: binds confirmed, statuses echoed; then a cycle where nothing changed.
            let mut s = Sim::with_cluster(base);
            s.now = now;
            s.settle_all(10);
            let settled = s.cluster;
            rows.extend(measure("unchanged", &settled, &config, s.now, &spec, pods, runs));
            let mut forced = settled.clone();
            forced.quiet = None;
            rows.extend(measure("rerun", &forced, &config, s.now, &spec, pods, runs));
            // 1% churn.
            let mut churned = settled.clone();
            let (done, added) = spec.churn(&mut churned, 0.01, 0);
            let _ = done;
            rows.extend(measure(
                "churn 1%",
                &churned,
                &config,
                s.now,
                &spec,
                pods + added,
                runs,
            ));
        }
    }
    println!();
    println!(
        "# Cycles: time split in ms (open, actions, close = statuses); frag = free GPUs on partly used nodes after the cycle"
    );
    print_header();
    for r in &rows {
        print_row(r);
    }
    // Preempt: every GPU held by low-priority gangs, a batch of higher-priority gangs (1 pod per node).
    println!();
    println!("# Preempt (full cluster of train gangs, N/8 build-preemptible gangs of 8 pending)");
    println!("# Consolidation (each node half used by 1-pod gangs, N/100 gangs of one 8-GPU pod pending)");
    print_header();
    for &n in &node_sizes {
        let runs = runs_for(n);
        let mut spec = Synthetic::new(n, 8);
        spec.running_fraction = 1.0;
        spec.pending_pods = n;
        spec.pending_classes = &["build-preemptible"];
        let base = spec.cluster();
        let config = Config {
            actions: vec![ActionKind::Allocate, ActionKind::Preempt],
            ..Config::default()
        };
        if let Some(row) = measure("preempt", &base, &config, now, &spec, spec.pending_pods, runs) {
            print_row(&row);
        }
        let mut spec = Synthetic::new(n, 1);
        spec.running_fraction = 0.5;
        spec.running_spread = true;
        spec.pending_pods = (n / 100).max(1);
        spec.gpus_per_pod = 8;
        spec.pending_classes = &["train"];
        let base = spec.cluster();
        let config = Config {
            actions: vec![ActionKind::Allocate, ActionKind::Consolidation],
            ..Config::default()
        };
        if let Some(row) = measure("consolidate", &base, &config, now, &spec, spec.pending_pods, runs) {
            print_row(&row);
        }
    }
}
