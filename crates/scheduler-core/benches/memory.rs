//! Resident memory of the model and of a cycle at scale (`cargo bench -p kai-scheduler-core --bench memory`).
//!
//! Builds the synthetic cluster (default 5,000 nodes x 8 GPUs, 50,000 pending pods in gangs of 8;
//! `KAI_BENCH_NODES` and `KAI_BENCH_GANGS` override) through the watch-update API, runs a full cycle,
//! settles the cluster and runs another, reading `VmRSS` and `VmHWM` from `/proc/self/status` after
//! each step. Linux only.

use kai_scheduler_core::config::Config;
use kai_scheduler_core::cycle;
use kai_scheduler_core::sim::{self, Sim, Synthetic};

fn status_kib(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    text.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn report(step: &str) {
    let mib = |v: Option<u64>| v.map_or_else(|| "?".to_owned(), |k| format!("{:.1}", k as f64 / 1024.0));
    println!(
        "{step:<44} VmRSS {:>8} MiB   VmHWM (peak) {:>8} MiB",
        mib(status_kib("VmRSS:")),
        mib(status_kib("VmHWM:"))
    );
}

fn main() {
    let nodes = std::env::var("KAI_BENCH_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let gang = std::env::var("KAI_BENCH_GANGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let spec = Synthetic::new(nodes, gang);
    println!(
        "# Memory: {nodes} nodes x 8 GPUs, {} pending pods in gangs of {gang}",
        spec.pending_pods
    );
    report("start");
    let updates = spec.updates();
    report("watch updates generated");
    let mut cluster = sim::empty_cluster();
    updates.apply(&mut cluster);
    report("model built (updates consumed)");
    let config = Config::default();
    let result = cycle::run(&mut cluster, &config, 1_000_000);
    report(&format!(
        "after a full cycle ({} binds)",
        result.decisions.binds.len()
    ));
    drop(result);
    let mut s = Sim::with_cluster(cluster);
    s.now = 1_000_000;
    s.settle_all(10);
    s.history.clear();
    s.last = None;
    report("after settling (rounds until no binds)");
    let r = cycle::run(&mut s.cluster, &config, s.now);
    report(&format!(
        "after an unchanged cycle ({} binds)",
        r.decisions.binds.len()
    ));
}
