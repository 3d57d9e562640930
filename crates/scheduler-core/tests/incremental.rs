//! What a cycle keeps from earlier cycles (the status report memo, `Group::report_inputs`, and the
//! session's carry: gangs as built, their queue usage, report stamps) must not change a decision: each
//! scenario runs twice, once as the scheduler runs it and once with every memo forgotten before each
//! round (a from-scratch session and report), and the decisions must be the same round by round, while
//! pods complete and arrive, gangs wait, get preempted and time out.

use kai_scheduler_core::config::{ActionKind, Config};
use kai_scheduler_core::model::{GroupId, NodeUpdate};
use kai_scheduler_core::sim::{GangSpec, Sim, Synthetic};

fn forget_memos(sim: &mut Sim) {
    sim.cluster.session_carry = None;
    let ids: Vec<GroupId> = sim.cluster.groups.iter().map(|(i, _)| GroupId(i)).collect();
    for id in ids {
        sim.cluster.group_mut(id).report_inputs = 0;
    }
}

/// How a scenario's rounds are spaced: how many, the clock's step between them, and the rounds before
/// which pods churn (every other one below this).
#[derive(Clone, Copy)]
struct Pace {
    rounds: usize,
    step_ms: i64,
    churn_before: usize,
}

/// Eight rounds a second apart, churning before every other one.
const BRISK: Pace = Pace {
    rounds: 8,
    step_ms: 1000,
    churn_before: 8,
};

/// The decisions of each round, as text, and how many rounds held a status back for its figures'
/// refresh.
fn rounds(spec: &Synthetic, config: &Config, forget: bool, pace: Pace) -> (Vec<String>, usize) {
    let mut sim = Sim::with_cluster(spec.cluster());
    sim.config = config.clone();
    sim.now = 1_000_000;
    let mut out = Vec::new();
    let mut most_carried = 0;
    let mut fairness_reused = 0;
    let mut ran = 0;
    let mut held = 0;
    for round in 0..pace.rounds {
        if round % 2 == 1 && round < pace.churn_before {
            spec.churn(&mut sim.cluster, 0.05, round);
        }
        if forget {
            forget_memos(&mut sim);
        }
        let start = sim.now;
        let result = sim.round();
        out.push(format!("{:?}", result.decisions));
        most_carried = most_carried.max(result.stats.gangs_carried);
        fairness_reused += usize::from(result.stats.fairness_reused);
        ran += usize::from(!result.skipped);
        held += usize::from(result.stats.report_due.is_some());
        sim.now = start + pace.step_ms;
    }
    if forget {
        assert_eq!(most_carried, 0, "a forgotten carry was used");
        assert_eq!(fairness_reused, 0, "a forgotten fair-share tree was used");
    } else {
        // Not vacuous: the queues do not change, so every session after the first reuses the
        // fair-share tree.
        assert_eq!(
            fairness_reused,
            ran - 1,
            "of {ran} sessions, {fairness_reused} reused the fair-share tree"
        );
        // Not vacuous: after a churn round, most gangs are taken as the last session built them.
        let groups = sim.cluster.groups.len();
        assert!(
            most_carried * 2 > u64::try_from(groups).expect("fewer than 2^64 groups"),
            "{most_carried} of {groups} gangs carried"
        );
        // Not vacuous: most groups carry a memo the next round would use.
        let memos = sim
            .cluster
            .groups
            .iter()
            .filter(|(_, g)| g.report_inputs != 0)
            .count();
        assert!(memos * 2 > sim.cluster.groups.len(), "{memos} memos");
    }
    (out, held)
}

/// Runs the scenario both ways; returns how many rounds held a status back.
fn same_as_from_scratch_at(spec: &Synthetic, config: &Config, pace: Pace) -> usize {
    let (kept, held) = rounds(spec, config, false, pace);
    let (scratch, scratch_held) = rounds(spec, config, true, pace);
    for (round, (k, s)) in kept.iter().zip(&scratch).enumerate() {
        assert_eq!(k, s, "round {round}");
    }
    assert_eq!(held, scratch_held, "rounds holding a status back");
    held
}

fn same_as_from_scratch(spec: &Synthetic, config: &Config) {
    same_as_from_scratch_at(spec, config, BRISK);
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

/// Statuses held back because only their figures changed, and written at the refresh: rounds 7 s apart,
/// churn before the first few, then quiet rounds past every refresh; the same decisions as reports
/// that remember nothing.
#[test]
fn figures_held_back_and_refreshed_with_churn() {
    let mut spec = Synthetic::new(80, 3);
    spec.running_fraction = 1.0;
    spec.running_spread = true;
    spec.pending_pods = 80;
    spec.pending_classes = &kai_scheduler_core::sim::MIXED_PRIORITIES;
    spec.gpus_per_pod = 2;
    let config = Config {
        actions: vec![ActionKind::Allocate, ActionKind::Preempt],
        ..Config::default()
    };
    let pace = Pace {
        rounds: 16,
        step_ms: 7_000,
        churn_before: 6,
    };
    let held = same_as_from_scratch_at(&spec, &config, pace);
    // Not vacuous: some rounds held a status back.
    assert!(held > 0, "no status held back");
}

fn group_named(sim: &Sim, name: &str) -> GroupId {
    sim.cluster
        .groups
        .iter()
        .find(|(_, g)| &*g.key.name == name)
        .map(|(i, _)| GroupId(i))
        .unwrap_or_else(|| panic!("{name} exists"))
}

/// PodGroups under a parent, sub-groups, fractions and a timeout, while pods complete and come back,
/// a gang goes and another arrives, a gang's definition changes, someone else writes a PodGroup's
/// status (an update the model takes without a change stamp: the report must still notice it), and a
/// node is labelled for a waiting gang's selector.
fn hierarchy_and_changes(sim: &mut Sim, round: usize) {
    match round {
        0 => {
            sim.nodes("n", 4, 4);
            sim.queue("dept", None, -1.0, -1.0, 1.0);
            sim.queue("q0", Some("dept"), 8.0, -1.0, 1.0);
            sim.queue("q1", Some("dept"), 8.0, -1.0, 1.0);
            sim.gang(GangSpec::new("top", "q0", 0).min(2));
            sim.gang(GangSpec::new("top-a", "q0", 2).parent("top"));
            sim.gang(GangSpec::new("top-b", "q0", 2).parent("top"));
            sim.gang(
                GangSpec::new("subs", "q1", 0)
                    .subgroup("leaders", 1, None, 1)
                    .subgroup("workers", 2, None, 3),
            );
            sim.gang(GangSpec::new("frac", "q1", 3).fraction(500));
            sim.gang(GangSpec::new("big", "q0", 16).timeout(2));
        }
        2 => {
            sim.complete("ns", "top-a-0");
            sim.complete("ns", "frac-1");
        }
        3 => {
            sim.recreate("ns", "top-a-0", "top-a-0b");
            sim.gang(GangSpec::new("late", "q1", 2).fraction(250));
        }
        4 => {
            sim.remove_gang("ns", "subs");
        }
        5 => {
            // Someone else's status on a PodGroup: same definition, another status.
            let mut group = sim.cluster.group(group_named(sim, "frac")).clone();
            group.observed.fingerprint ^= 0x5a5a;
            group.observed.status = None;
            sim.cluster.apply_group(group);
        }
        6 => {
            // A definition change: the gang needs fewer pods now.
            let mut group = sim.cluster.group(group_named(sim, "big")).clone();
            group.min_member = 4;
            sim.cluster.apply_group(group);
        }
        7 => {
            // A gang for nodes no node is labelled for yet.
            sim.gang(GangSpec::new("zoned", "q1", 1).selector("zone", "a"));
        }
        8 => {
            // Now one is: static eligibility carried from earlier sessions must not hide it.
            let id = sim.cluster.node_id("n-3").expect("n-3 exists");
            let mut update = NodeUpdate::of(sim.cluster.node(id));
            update.labels.insert("zone".to_owned(), "a".to_owned());
            sim.cluster.apply_node(update);
        }
        _ => {}
    }
}

fn hand_built_rounds(forget: bool) -> Vec<String> {
    let mut sim = Sim::new();
    let mut out = Vec::new();
    let mut carried = 0;
    for round in 0..11 {
        hierarchy_and_changes(&mut sim, round);
        if forget {
            forget_memos(&mut sim);
        }
        let result = sim.round();
        carried += result.stats.gangs_carried;
        out.push(format!("{:?}", result.decisions));
    }
    assert_eq!(carried > 0, !forget, "{carried} gangs carried");
    out
}

#[test]
fn hierarchy_sub_groups_fractions_and_foreign_status_writes() {
    let kept = hand_built_rounds(false);
    let scratch = hand_built_rounds(true);
    for (round, (k, s)) in kept.iter().zip(&scratch).enumerate() {
        assert_eq!(k, s, "round {round}");
    }
}

/// The fair-share tree is the last session's while the queues stay as they were (whatever their
/// status reports wrote), and a change to a queue builds it again: the fair shares follow the new
/// quota in that very cycle. Debug builds also compare every reused tree with one built afresh.
#[test]
fn the_fair_share_tree_is_reused_until_a_queue_changes() {
    use kai_scheduler_core::model::resources::GPU;
    let mut sim = Sim::new();
    sim.nodes("n", 2, 8);
    sim.queue("dept", None, -1.0, -1.0, 1.0);
    sim.queue("a", Some("dept"), 4.0, -1.0, 1.0);
    sim.queue("b", Some("dept"), 4.0, -1.0, 1.0);
    // Each asks for 12 of the 16 GPUs: the 8 beyond the quotas are divided by weight.
    sim.gang(GangSpec::new("a-0", "a", 12).gpus(1));
    sim.gang(GangSpec::new("b-0", "b", 12).gpus(1));
    let fair_share_of = |result: &kai_scheduler_core::cycle::CycleResult, queue: &str| {
        let figures = result.queues.iter().find(|q| &*q.name == queue);
        figures.map(|q| (q.deserved.0[GPU], q.fair_share.0[GPU]))
    };
    let first = sim.round();
    assert!(!first.skipped);
    assert!(!first.stats.fairness_reused, "no earlier session");
    assert_eq!(fair_share_of(first, "a"), Some((4.0, 8.0)));
    // A new gang (no queue changed) makes the next cycle run.
    sim.gang(GangSpec::new("a-1", "a", 1).gpus(1));
    let second = sim.round();
    assert!(!second.skipped);
    assert!(
        second.stats.fairness_reused,
        "queues unchanged since the last session"
    );
    assert_eq!(fair_share_of(second, "a"), Some((4.0, 8.0)));
    // Queue a's quota grows to 12: built again, and divided with it.
    let id = sim.cluster.queue_id("a").expect("queue a");
    let mut a = sim.cluster.queue(id).clone();
    a.resources[GPU].quota = 12.0;
    sim.queue_spec(a);
    let third = sim.round();
    assert!(!third.skipped);
    assert!(!third.stats.fairness_reused, "queue a changed");
    assert_eq!(fair_share_of(third, "a"), Some((12.0, 12.0)));
    assert_eq!(fair_share_of(third, "b").map(|(_, share)| share), Some(4.0));
    sim.gang(GangSpec::new("b-1", "b", 1).gpus(1));
    let fourth = sim.round();
    assert!(
        fourth.stats.fairness_reused,
        "no queue changed since the third session"
    );
    assert_eq!(fair_share_of(fourth, "a"), Some((12.0, 12.0)));
}
