//! Speed work must not change a decision: seeded synthetic scenarios (the benchmark's shapes, small)
//! run for a few rounds with churn in between, and every round's decisions are compared, by digest,
//! with the ones recorded before the speed work (`core-speed`: key-based queue order, id hashing,
//! kept session indexes). A digest changes when any bind, eviction, status, condition, event or
//! queue status changes, or their order (status fingerprints, internal bookkeeping, are left out).

use std::hash::{Hash, Hasher};

use kai_scheduler_core::config::{ActionKind, Config, PlacementStrategy};
use kai_scheduler_core::sim::{Sim, Synthetic};

/// Digest of the rounds' decisions (their `Debug` text, hashed with a fixed-key hasher).
fn digest(sim: &mut Sim, spec: &Synthetic, rounds: usize, churn_every: usize) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for round in 0..rounds {
        if churn_every > 0 && round > 0 && round % churn_every == 0 {
            spec.churn(&mut sim.cluster, 0.05, round);
        }
        // Status fingerprints are the scheduler's own bookkeeping (how it compares statuses), not a
        // decision: left out, so a different fingerprint function keeps the digests.
        let mut decisions = sim.round().decisions.clone();
        for s in &mut decisions.group_statuses {
            s.fingerprint = 0;
        }
        // Queue status fingerprints too (re-recorded with them left out on e5b4c5b, the commit before
        // queue fingerprints were taken from the figures instead of the text: the same digests after).
        for s in &mut decisions.queue_statuses {
            s.fingerprint = 0;
        }
        // A bind's claim bindings and its node's GPU memory came later; these scenarios have no claims,
        // and the text without either is the one the digests were recorded from.
        // Annotations left the decisions (no start or stale annotation is written); the digests were
        // recorded with none kept, an empty list in the text.
        without_gpu_memory(
            &format!("{decisions:?}")
                .replace(", pod_conditions: ", ", group_annotations: [], pod_conditions: ")
                .replace(", volumes: []", "")
                .replace(", name_group_on_pod: false", ""),
        )
        .hash(&mut h);
        sim.cluster.check_invariants().expect("model invariants");
    }
    h.finish()
}

/// `text` without the `, gpu_memory_mib: ...` of each bind.
fn without_gpu_memory(text: &str) -> String {
    const FIELD: &str = ", gpu_memory_mib: ";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(FIELD) {
        out.push_str(&rest[..at]);
        let value = &rest[at + FIELD.len()..];
        let end = if value.starts_with("None") {
            "None".len()
        } else {
            value.find(')').map_or(value.len(), |i| i + 1)
        };
        rest = &value[end..];
    }
    out.push_str(rest);
    out
}

/// The actions of the preempt scenarios.
fn allocate_and_preempt() -> Config {
    Config {
        actions: vec![ActionKind::Allocate, ActionKind::Preempt],
        ..Config::default()
    }
}

fn run(spec: &Synthetic, config: Config, rounds: usize, churn_every: usize) -> u64 {
    let mut sim = Sim::with_cluster(spec.cluster());
    sim.config = config;
    sim.now = 1_000_000;
    digest(&mut sim, spec, rounds, churn_every)
}

#[test]
fn one_pod_gangs_decide_as_before() {
    let spec = Synthetic::new(60, 1);
    assert_eq!(run(&spec, Config::default(), 5, 2), ONE_POD);
}

#[test]
fn gangs_of_8_with_pod_rules_decide_as_before() {
    let mut spec = Synthetic::new(60, 8);
    spec.rules_fraction = 0.1;
    assert_eq!(run(&spec, Config::default(), 5, 2), GANGS_RULES);
}

#[test]
fn preempt_on_a_full_cluster_decides_as_before() {
    let mut spec = Synthetic::new(160, 8);
    spec.running_fraction = 1.0;
    spec.pending_pods = 160;
    spec.pending_classes = &["build-preemptible"];
    let config = allocate_and_preempt();
    assert_eq!(run(&spec, config, 3, 0), PREEMPT);
}

#[test]
fn consolidation_decides_as_before() {
    let mut spec = Synthetic::new(400, 1);
    spec.running_fraction = 0.5;
    spec.running_spread = true;
    spec.pending_pods = 4;
    spec.gpus_per_pod = 8;
    spec.pending_classes = &["train"];
    let config = Config {
        actions: vec![ActionKind::Allocate, ActionKind::Consolidation],
        ..Config::default()
    };
    assert_eq!(run(&spec, config, 3, 0), CONSOLIDATE);
}

#[test]
fn fragmentation_gangs_with_pod_rules_decide_as_before() {
    // The `fragmentation` strategy, recorded before its search was narrowed to classes of nodes.
    let mut spec = Synthetic::new(60, 4);
    spec.rules_fraction = 0.1;
    let mut config = Config::default();
    config.plugins.nodeplacement.gpu = PlacementStrategy::Fragmentation;
    config.plugins.nodeplacement.cpu = PlacementStrategy::Fragmentation;
    assert_eq!(run(&spec, config, 5, 2), FRAGMENTATION_RULES);
}

/// Victim searches with more than one way to choose: mixed priorities (some preemptors below the
/// victims), gangs spread over nodes (several victims per pod), surplus and pod rules, and churn
/// between rounds; recorded before the victim search kept its candidates across preemptors.
fn victim_search_spec(nodes: usize, gang: u32, spread: bool, rules: f64, gpus: u32) -> Synthetic {
    let mut spec = Synthetic::new(nodes, gang);
    spec.running_fraction = 1.0;
    spec.running_spread = spread;
    spec.pending_pods = nodes;
    spec.pending_classes = &kai_scheduler_core::sim::MIXED_PRIORITIES;
    spec.rules_fraction = rules;
    spec.gpus_per_pod = gpus;
    spec
}

#[test]
fn preempt_with_spread_victims_and_mixed_priorities_decides_as_before() {
    let spec = victim_search_spec(120, 4, true, 0.0, 1);
    assert_eq!(run(&spec, allocate_and_preempt(), 4, 2), PREEMPT_SPREAD);
}

#[test]
fn preempt_with_pod_rules_and_two_gpu_pods_decides_as_before() {
    let spec = victim_search_spec(100, 3, true, 0.3, 2);
    assert_eq!(run(&spec, allocate_and_preempt(), 4, 2), PREEMPT_RULES);
}

#[test]
fn every_action_on_a_busy_cluster_decides_as_before() {
    let mut spec = victim_search_spec(120, 2, true, 0.1, 1);
    spec.running_fraction = 0.9;
    assert_eq!(run(&spec, Config::default(), 5, 1), EVERY_ACTION);
}

const ONE_POD: u64 = 6413380310554836532;
const GANGS_RULES: u64 = 4793317923400766327;
const PREEMPT: u64 = 4382342950778472555;
const CONSOLIDATE: u64 = 13517960684756271234;
const FRAGMENTATION_RULES: u64 = 12810671263265075139;
const PREEMPT_SPREAD: u64 = 8133165991709395356;
/// Re-recorded when statuses that change only in live figures began to wait for the refresh
/// (`FIGURES_REFRESH_MS`): the last round no longer rewrites the statuses (33), events (33) and pod
/// conditions (99) of waiting gangs whose only change was what is free; every bind, eviction and
/// reservation is the same.
const PREEMPT_RULES: u64 = 10065880077330160034;
const EVERY_ACTION: u64 = 6236639224859236727;
