//! Quiet cycles: after a cycle that placed, evicted and reserved nothing, the next one is skipped until
//! the model changes or a time-based rule falls due. Skipping must never change a decision: each
//! scenario runs twice, once as the scheduler runs and once with every cycle forced, and the two must
//! decide exactly the same thing round by round, while the first skips rounds. The forced one also
//! forgets every status report memo (`Group::report_inputs`) and what the last session carried
//! (`Cluster::session_carry`) before each round.

use std::time::Duration;

use kai_scheduler::loop_state::{self, Feedback};
use scheduler_core::model::TaskStatus;
use scheduler_core::sim::{GangSpec, Sim, Synthetic};

/// Runs `rounds` rounds of the scenario `build` on two sims, `between(sim, round)` applied to both
/// before each round; the second has every cycle forced. Asserts equal decisions in every round and
/// returns how many rounds the first skipped, with the first sim.
fn same_decisions_with_skips(
    build: impl Fn(&mut Sim),
    rounds: usize,
    between: impl Fn(&mut Sim, usize),
) -> (usize, Sim) {
    let (mut quiet, mut forced) = (Sim::new(), Sim::new());
    build(&mut quiet);
    build(&mut forced);
    let mut skipped = 0;
    for round in 0..rounds {
        between(&mut quiet, round);
        between(&mut forced, round);
        if quiet.round().skipped {
            skipped += 1;
        }
        forced.cluster.quiet = None;
        // And every session and status report made from scratch: what a session carries to the next
        // and the report memo must not change a decision either.
        forced.cluster.session_carry = None;
        let groups: Vec<_> = forced.cluster.groups.iter().map(|(i, _)| i).collect();
        for i in groups {
            forced
                .cluster
                .group_mut(scheduler_core::model::GroupId(i))
                .report_inputs = 0;
        }
        assert!(!forced.round().skipped);
        assert_eq!(
            quiet.history.last(),
            forced.history.last(),
            "round {round}: skipping changed a decision"
        );
    }
    (skipped, quiet)
}

fn one_queue(s: &mut Sim) {
    s.queue("dept", None, -1.0, -1.0, 1.0);
    s.queue("q0", Some("dept"), 2.0, -1.0, 1.0);
}

fn train(name: &str, pods: u32) -> GangSpec {
    GangSpec::new(name, "q0", pods).gpus(1).priority_class("train")
}

#[test]
fn a_settled_cluster_is_skipped_until_a_pod_changes_or_a_write_fails() {
    let spec = Synthetic::new(20, 8);
    let mut s = Sim::with_cluster(spec.cluster());
    // The last settling round ran on the confirmed binds and decided nothing.
    s.settle_all(10);
    assert!(!s.last.as_ref().unwrap().skipped);
    assert!(
        s.round().skipped,
        "nothing changed since a cycle that decided nothing"
    );
    assert!(s.round().skipped);
    // A PodGroup status write failed: the next cycle runs and writes it again.
    let key = s
        .cluster
        .groups
        .iter()
        .next()
        .map(|(_, g)| g.key.clone())
        .unwrap();
    loop_state::feedback(&mut s.cluster, Feedback::StatusFailed { key: key.clone() }, s.now);
    let r = s.round();
    assert!(!r.skipped);
    assert!(
        r.decisions.group_statuses.iter().any(|g| g.key == key),
        "the failed status is written again"
    );
    assert!(s.round().skipped);
    // Pods complete: the cycle runs and places waiting gangs in the room they leave.
    spec.churn(&mut s.cluster, 0.05, 0);
    let r = s.round();
    assert!(!r.skipped);
    assert!(!r.decisions.binds.is_empty());
}

#[test]
fn an_echo_of_our_own_status_write_does_not_wake_the_scheduler() {
    let mut s = Sim::new();
    one_queue(&mut s);
    s.node("n0", 64_000, 256, 2);
    // Created just now: a fresh pod in a gang holds no deadline of its own.
    let now = s.now;
    s.gang(train("waits", 4).created(now));
    // Sim rounds echo every status written back into the model, as the watch does.
    let first = s.round();
    assert!(!first.skipped);
    assert!(
        !first.decisions.group_statuses.is_empty(),
        "why it waits is written"
    );
    // Past the 10 s an orphan pod would wait for its PodGroup: still nothing to wake for.
    for _ in 0..12 {
        assert!(s.round().skipped, "{:?}", s.history.last());
    }
}

#[test]
fn a_stale_gang_is_evicted_at_the_same_round_with_cycles_skipped_before() {
    let (skipped, s) = same_decisions_with_skips(
        |s| {
            one_queue(s);
            s.config.plugins.stalegangeviction.grace_period = Duration::from_secs(5);
            s.node("n0", 64_000, 256, 2);
            s.gang(train("other", 1).running_on(&["n0"]).created(0));
            s.gang(train("stuck", 2).running_on(&["n0"]).created(5));
        },
        12,
        |_, _| {},
    );
    assert_eq!(s.evicted, vec!["ns/stuck-0".to_owned()]);
    assert!(skipped >= 3, "skipped {skipped}");
}

#[test]
fn a_schedule_timeout_fires_at_the_same_round_with_cycles_skipped_before() {
    let (skipped, s) = same_decisions_with_skips(
        |s| {
            one_queue(s);
            s.node("n0", 64_000, 256, 1);
            let created = s.now;
            s.gang(train("too-big", 2).timeout(6).created(created));
        },
        12,
        |_, _| {},
    );
    let timed_out = |d: &scheduler_core::framework::decisions::Decisions| {
        d.group_statuses
            .iter()
            .any(|g| format!("{:?}", g.status).contains("TimedOut"))
    };
    let first = s.history.iter().position(timed_out);
    assert_eq!(first, Some(6), "reported 6 rounds (6 s) after it started waiting");
    assert!(skipped >= 3, "skipped {skipped}");
}

#[test]
fn a_preemption_held_by_a_minimum_runtime_happens_at_the_same_round() {
    let (skipped, s) = same_decisions_with_skips(
        |s| {
            one_queue(s);
            s.config.plugins.minruntime.default_preempt_min_runtime = Duration::from_secs(6);
            s.node("n0", 64_000, 256, 2);
            s.gang(train("train", 2).created(0));
        },
        14,
        |s, round| {
            if round == 2 {
                s.gang(
                    GangSpec::new("inference", "q0", 2)
                        .gpus(1)
                        .priority_class("inference")
                        .created(10),
                );
            }
        },
    );
    assert_eq!(
        s.evicted.len(),
        2,
        "the train gang is preempted once its runtime is up"
    );
    assert!(skipped >= 2, "skipped {skipped}");
}

#[test]
fn churn_and_idle_rounds_decide_the_same_with_skips() {
    let spec = Synthetic::new(16, 8);
    let (skipped, s) = same_decisions_with_skips(
        |s| {
            s.cluster = spec.cluster();
        },
        16,
        |s, round| {
            if round % 5 == 4 {
                spec.churn(&mut s.cluster, 0.1, round);
            }
        },
    );
    assert!(s.history.iter().any(|d| !d.binds.is_empty()));
    assert!(skipped >= 4, "skipped {skipped}");
    assert!(
        s.cluster
            .tasks
            .iter()
            .any(|(_, t)| t.status == TaskStatus::Running)
    );
}

#[test]
fn a_pod_whose_podgroup_never_comes_is_told_at_the_same_round() {
    use scheduler_core::model::{ApiView, GpuRequest, GroupKey, GroupKind, PodUpdate, Resources};
    let (skipped, s) = same_decisions_with_skips(
        |s| {
            one_queue(s);
            s.node("n0", 64_000, 256, 2);
            s.cluster.apply_pod(PodUpdate {
                uid: "orphan-uid".into(),
                namespace: "ns".into(),
                name: "orphan".into(),
                ours: true,
                group_key: Some(GroupKey {
                    kind: GroupKind::Kai,
                    namespace: "ns".into(),
                    name: "missing".into(),
                }),
                subgroup: None,
                request: Resources::new(1_000, 0, 0).with(3, 1),
                gpu: GpuRequest::None,
                constraints: Default::default(),
                labels: Default::default(),
                rules: Default::default(),
                api: ApiView {
                    status: TaskStatus::Pending,
                    node_name: None,
                    bound_at: None,
                },
                gpu_groups: Vec::new(),
                task_order: 0,
                never_preempts: false,
                created: s.now,
                problem: None,
                claims: Vec::new(),
                reservation_for: None,
                gpu_device: None,
            });
        },
        14,
        |_, _| {},
    );
    let told = s.history.iter().position(|d| !d.pod_conditions.is_empty());
    assert_eq!(told, Some(10), "after the 10 s grace for the podgrouper");
    assert!(skipped >= 5, "skipped {skipped}");
}
