//! What a cycle keeps from earlier cycles (the status report memo, `Group::report_inputs`) must not
//! change a decision: each scenario runs twice, once as the scheduler runs it and once with every
//! memo forgotten before each round (a from-scratch report), and the decisions must be the same
//! round by round, while pods complete and arrive, gangs wait, get preempted and time out.

use kai_scheduler_core::config::{ActionKind, Config};
use kai_scheduler_core::model::GroupId;
use kai_scheduler_core::sim::{Sim, Synthetic};

fn forget_memos(sim: &mut Sim) {
    let ids: Vec<GroupId> = sim.cluster.groups.iter().map(|(i, _)| GroupId(i)).collect();
    for id in ids {
        sim.cluster.group_mut(id).report_inputs = 0;
    }
}

/// The decisions of each round, as text.
fn rounds(spec: &Synthetic, config: &Config, forget: bool) -> Vec<String> {
    let mut sim = Sim::with_cluster(spec.cluster());
    sim.config = config.clone();
    sim.now = 1_000_000;
    let mut out = Vec::new();
    for round in 0..8 {
        if round % 2 == 1 {
            spec.churn(&mut sim.cluster, 0.05, round);
        }
        if forget {
            forget_memos(&mut sim);
        }
        let result = sim.round();
        out.push(format!("{:?}", result.decisions));
    }
    if !forget {
        // Not vacuous: most groups carry a memo the next round would use.
        let memos = sim
            .cluster
            .groups
            .iter()
            .filter(|(_, g)| g.report_inputs != 0)
            .count();
        assert!(memos * 2 > sim.cluster.groups.len(), "{memos} memos");
    }
    out
}

fn same_as_from_scratch(spec: &Synthetic, config: &Config) {
    let kept = rounds(spec, config, false);
    let scratch = rounds(spec, config, true);
    for (round, (k, s)) in kept.iter().zip(&scratch).enumerate() {
        assert_eq!(k, s, "round {round}");
    }
}

#[test]
fn one_pod_gangs_with_churn() {
    same_as_from_scratch(&Synthetic::new(40, 1), &Config::default());
}

#[test]
fn gangs_of_8_with_rules_and_churn() {
    let mut spec = Synthetic::new(40, 8);
    spec.rules_fraction = 0.2;
    same_as_from_scratch(&spec, &Config::default());
}

#[test]
fn preempt_with_churn() {
    let mut spec = Synthetic::new(80, 8);
    spec.running_fraction = 1.0;
    spec.pending_pods = 80;
    spec.pending_classes = &["build-preemptible"];
    let config = Config {
        actions: vec![ActionKind::Allocate, ActionKind::Preempt],
        ..Config::default()
    };
    same_as_from_scratch(&spec, &config);
}
