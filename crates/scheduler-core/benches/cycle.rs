//! Statistical benchmarks of the pure core with divan (`cargo bench -p kai-scheduler-core --bench cycle`).
//!
//! Synthetic clusters of N nodes x 8 GPUs with 10 x N pending one-GPU pods in gangs of k across 100 leaf
//! queues (see `kai_scheduler_core::sim::Synthetic`). Every timed iteration works on its own copy of the
//! model; making the copy is not timed. `benches/scale.rs` prints the same cases as one table.

use divan::Bencher;
use kai_scheduler_core::config::{ActionKind, Config, PlacementStrategy};
use kai_scheduler_core::cycle;
use kai_scheduler_core::model::Cluster;
use kai_scheduler_core::sim::{self, Sim, Synthetic};

const NOW: i64 = 1_000_000;

fn main() {
    divan::main();
}

fn bench_cycle(bencher: Bencher<'_, '_>, base: &Cluster, config: &Config, now: i64) {
    bencher
        .with_inputs(|| base.clone())
        .bench_local_refs(|cluster| cycle::run(cluster, config, now));
}

/// The model after its first cycle's decisions were carried out and echoed back.
fn settled(spec: &Synthetic) -> (Cluster, i64) {
    let mut s = Sim::with_cluster(spec.cluster());
    s.now = NOW;
    s.settle_all(10);
    (s.cluster, s.now)
}

/// Applying every watch update of the cluster into a fresh model.
#[divan::bench(consts = [1, 8, 64], args = [500, 1000, 5000, 10_000], sample_count = 5, sample_size = 1)]
fn snapshot<const K: u32>(bencher: Bencher<'_, '_>, nodes: usize) {
    let updates = Synthetic::new(nodes, K).updates();
    bencher.with_inputs(|| updates.clone()).bench_local_values(|u| {
        let mut cluster = sim::empty_cluster();
        u.apply(&mut cluster);
        cluster
    });
}

/// One full cycle over a fresh model with everything pending.
#[divan::bench(consts = [1, 8, 64], args = [500, 1000, 5000], sample_count = 5, sample_size = 1)]
fn full_cycle<const K: u32>(bencher: Bencher<'_, '_>, nodes: usize) {
    let base = Synthetic::new(nodes, K).cluster();
    bench_cycle(bencher, &base, &Config::default(), NOW);
}

/// One full cycle at 5,000 nodes (50,000 pending one-GPU pods in gangs of 8) with each GPU placement
/// strategy: what `fragmentation`'s choice costs next to bin-packing's first fit (it is meant to stay
/// within 1.3 x `binpack`).
#[divan::bench(args = ["binpack", "fragmentation"], sample_count = 2, sample_size = 1)]
fn full_cycle_by_strategy(bencher: Bencher<'_, '_>, strategy: &str) {
    let base = Synthetic::new(5000, 8).cluster();
    let mut config = Config::default();
    config.plugins.nodeplacement.gpu = match strategy {
        "fragmentation" => PlacementStrategy::Fragmentation,
        _ => PlacementStrategy::Binpack,
    };
    bench_cycle(bencher, &base, &config, NOW);
}

/// The same at 10,000 nodes (fewer samples).
#[divan::bench(consts = [1, 8, 64], args = [10_000], sample_count = 2, sample_size = 1)]
fn full_cycle_10k<const K: u32>(bencher: Bencher<'_, '_>, nodes: usize) {
    let base = Synthetic::new(nodes, K).cluster();
    bench_cycle(bencher, &base, &Config::default(), NOW);
}

/// A cycle where nothing changed since the last one (the cluster settled): skipped.
#[divan::bench(consts = [8], args = [500, 1000, 5000, 10_000], sample_count = 5, sample_size = 1)]
fn unchanged<const K: u32>(bencher: Bencher<'_, '_>, nodes: usize) {
    let (base, now) = settled(&Synthetic::new(nodes, K));
    bench_cycle(bencher, &base, &Config::default(), now);
}

/// A cycle forced over the settled cluster (the quiet-cycle skip bypassed): what the smallest change
/// costs, since any change runs the whole cycle.
#[divan::bench(consts = [8], args = [500, 1000, 5000, 10_000], sample_count = 5, sample_size = 1)]
fn rerun<const K: u32>(bencher: Bencher<'_, '_>, nodes: usize) {
    let (mut base, now) = settled(&Synthetic::new(nodes, K));
    base.quiet = None;
    bench_cycle(bencher, &base, &Config::default(), now);
}

/// A cycle after 1% of the running pods completed and as many new pods arrived.
#[divan::bench(consts = [8], args = [500, 1000, 5000, 10_000], sample_count = 5, sample_size = 1)]
fn churn_1pct<const K: u32>(bencher: Bencher<'_, '_>, nodes: usize) {
    let spec = Synthetic::new(nodes, K);
    let (mut base, now) = settled(&spec);
    spec.churn(&mut base, 0.01, 0);
    bench_cycle(bencher, &base, &Config::default(), now);
}

/// Preempt on a full cluster: every GPU held by `train` gangs of 8, N/8 `build-preemptible` gangs of 8
/// pending across the queues.
#[divan::bench(args = [500, 1000, 5000], sample_count = 5, sample_size = 1)]
fn preempt_full(bencher: Bencher<'_, '_>, nodes: usize) {
    let mut spec = Synthetic::new(nodes, 8);
    spec.running_fraction = 1.0;
    spec.pending_pods = nodes;
    spec.pending_classes = &["build-preemptible"];
    let config = Config {
        actions: vec![ActionKind::Allocate, ActionKind::Preempt],
        ..Config::default()
    };
    bench_cycle(bencher, &spec.cluster(), &config, NOW);
}

/// Consolidation on a fragmented cluster: every node half used by one-pod gangs, N/100 gangs of one
/// 8-GPU pod pending (they fit only if others move).
#[divan::bench(args = [500, 1000, 5000], sample_count = 5, sample_size = 1)]
fn consolidation(bencher: Bencher<'_, '_>, nodes: usize) {
    let mut spec = Synthetic::new(nodes, 1);
    spec.running_fraction = 0.5;
    spec.running_spread = true;
    spec.pending_pods = (nodes / 100).max(1);
    spec.gpus_per_pod = 8;
    spec.pending_classes = &["train"];
    let config = Config {
        actions: vec![ActionKind::Allocate, ActionKind::Consolidation],
        ..Config::default()
    };
    bench_cycle(bencher, &spec.cluster(), &config, NOW);
}
