//! Scenario tests of preempt, consolidation and stale-gang eviction (KAI's acceptance scenarios 24-31,
//! 45-47), over several rounds with the simulated cluster in between.

use kai_scheduler_core::model::TaskStatus;
use kai_scheduler_core::sim::{GangSpec, Sim};

fn one_queue(deserved_gpus: f64) -> Sim {
    let mut s = Sim::new();
    s.queue("dept", None, -1.0, -1.0, 1.0);
    s.queue("q0", Some("dept"), deserved_gpus, -1.0, 1.0);
    s
}

fn train(name: &str, pods: u32, gpus: u32) -> GangSpec {
    GangSpec::new(name, "q0", pods).gpus(gpus).priority_class("train")
}

fn build(name: &str, pods: u32, gpus: u32) -> GangSpec {
    GangSpec::new(name, "q0", pods).gpus(gpus).priority_class("build")
}

fn settle(s: &mut Sim, rounds: usize) {
    s.rounds(rounds);
    s.cluster.check_invariants().expect("model invariants");
}

#[test]
fn s24_build_preempts_a_running_train() {
    let mut s = one_queue(1.0);
    s.node("n0", 64_000, 256, 2);
    s.gang(train("train", 1, 2).running_on(&["n0"]).created(0));
    s.gang(build("build", 1, 1).created(10));
    settle(&mut s, 3);
    assert_eq!(s.count("build", TaskStatus::Running), 1);
    assert_eq!(s.count("train", TaskStatus::Running), 0);
    assert_eq!(s.evicted, vec!["ns/train-0".to_owned()]);
    // No oscillation afterwards.
    let evictions = s.evicted.len();
    settle(&mut s, 5);
    assert_eq!(s.evicted.len(), evictions);
}

/// Preemptors of one queue share its victim list: the second one must see the first one's victims
/// gone. Stale, the newest train (evicted) would still count as a victim on n0 and make n0 cost two
/// units, so the second build would evict the oldest train on n1 instead of the next newest on n0.
#[test]
fn a_second_preemptor_sees_the_first_ones_victims_gone() {
    let mut s = one_queue(4.0);
    s.node("n0", 64_000, 256, 2).node("n1", 64_000, 256, 1);
    s.gang(train("oldest", 1, 1).running_on(&["n1"]).created(0));
    s.gang(train("middle", 1, 1).running_on(&["n0"]).created(1));
    s.gang(train("newest", 1, 1).running_on(&["n0"]).created(2));
    s.gang(build("b1", 1, 1).created(10));
    s.gang(build("b2", 1, 1).created(11));
    settle(&mut s, 3);
    assert_eq!(s.count("b1", TaskStatus::Running), 1);
    assert_eq!(s.count("b2", TaskStatus::Running), 1);
    let mut evicted = s.evicted.clone();
    evicted.sort();
    assert_eq!(evicted, vec!["ns/middle-0".to_owned(), "ns/newest-0".to_owned()]);
    assert_eq!(s.count("oldest", TaskStatus::Running), 1);
}

#[test]
fn s26_all_three_trains_go_for_a_four_gpu_build() {
    let mut s = one_queue(4.0);
    s.node("n0", 64_000, 256, 4);
    s.gang(train("t1", 1, 1).running_on(&["n0"]).created(0));
    s.gang(train("t2", 1, 2).running_on(&["n0"]).created(1));
    s.gang(train("t3", 1, 1).running_on(&["n0"]).created(2));
    s.gang(build("build", 1, 4).created(10));
    settle(&mut s, 3);
    assert_eq!(s.count("build", TaskStatus::Running), 1);
    assert_eq!(s.evicted.len(), 3);
}

#[test]
fn s27_s28_no_preemption_when_it_cannot_help() {
    // Over quota: a non-preemptible build may only use its queue's quota.
    let mut s = one_queue(3.0);
    s.node("n0", 64_000, 256, 4);
    s.gang(train("t1", 1, 1).running_on(&["n0"]).created(0));
    s.gang(train("t2", 1, 2).running_on(&["n0"]).created(1));
    s.gang(train("t3", 1, 1).running_on(&["n0"]).created(2));
    s.gang(build("build", 1, 4).created(10));
    settle(&mut s, 3);
    assert!(s.evicted.is_empty());
    assert!(
        s.why("build").unwrap().contains("non-preemptible"),
        "{:?}",
        s.why("build")
    );
    // No node can ever hold 4 GPUs.
    let mut s = one_queue(4.0);
    s.node("n0", 64_000, 256, 2).node("n1", 64_000, 256, 2);
    s.gang(train("t1", 1, 2).running_on(&["n0"]).created(0));
    s.gang(train("t2", 1, 2).running_on(&["n1"]).created(1));
    s.gang(build("build", 1, 4).created(10));
    settle(&mut s, 3);
    assert!(s.evicted.is_empty());
}

#[test]
fn s29_a_running_gang_goes_whole() {
    let mut s = one_queue(1.0);
    s.node("n0", 64_000, 256, 2);
    s.gang(train("gang", 2, 1).running_on(&["n0", "n0"]).created(0));
    s.gang(build("build", 1, 1).created(10));
    settle(&mut s, 3);
    assert_eq!(s.count("build", TaskStatus::Running), 1);
    assert_eq!(s.evicted.len(), 2, "the whole gang, never half of it");
    assert_eq!(s.count("gang", TaskStatus::Running), 0);
}

#[test]
fn s30_fewest_victims_complete_a_gang() {
    let mut s = one_queue(2.0);
    s.node("n0", 64_000, 256, 3);
    s.gang(train("t1", 1, 1).running_on(&["n0"]).created(0));
    s.gang(train("t2", 1, 1).running_on(&["n0"]).created(1));
    s.gang(build("bgang", 2, 1).running_on(&["n0"]).created(10));
    settle(&mut s, 3);
    assert_eq!(s.count("bgang", TaskStatus::Running), 2);
    assert_eq!(
        s.evicted,
        vec!["ns/t2-0".to_owned()],
        "exactly one train, the newest"
    );
}

#[test]
fn s31_never_preempt_up_across_queues_or_between_non_preemptibles() {
    let mut s = Sim::new();
    s.queue("dept", None, -1.0, -1.0, 1.0);
    s.queue("q0", Some("dept"), 2.0, -1.0, 1.0);
    s.queue("q1", Some("dept"), 2.0, -1.0, 1.0);
    s.node("n0", 64_000, 256, 2);
    s.gang(
        GangSpec::new("inference", "q0", 1)
            .gpus(1)
            .priority_class("inference")
            .running_on(&["n0"]),
    );
    s.gang(
        GangSpec::new("other-queue-train", "q1", 1)
            .gpus(1)
            .priority_class("train")
            .running_on(&["n0"]),
    );
    s.gang(
        GangSpec::new("build", "q0", 1)
            .gpus(1)
            .priority_class("build")
            .created(10),
    );
    s.gang(
        GangSpec::new("low", "q0", 1)
            .gpus(1)
            .priority_class("train")
            .created(11),
    );
    settle(&mut s, 3);
    assert!(s.evicted.is_empty(), "{:?}", s.evicted);
}

#[test]
fn s45_consolidation_moves_a_train_to_make_room() {
    let mut s = one_queue(1.0);
    s.node("n0", 64_000, 256, 2).node("n1", 64_000, 256, 2);
    s.gang(train("a", 1, 1).running_on(&["n0"]).created(0));
    s.gang(train("b", 1, 1).running_on(&["n1"]).created(1));
    s.gang(train("big", 1, 2).created(10));
    settle(&mut s, 4);
    assert_eq!(s.count("big", TaskStatus::Running), 1);
    assert_eq!(s.evicted.len(), 1, "one move: {:?}", s.evicted);
    assert_eq!(
        s.count("a", TaskStatus::Running) + s.count("b", TaskStatus::Running),
        2,
        "nothing killed for good"
    );
}

/// The first victim in order (the newest, a 2-GPU job) has nowhere to go; the older 1-GPU job beside
/// it does. Consolidation searches again without the victim that cannot move and moves the one that can.
#[test]
fn consolidation_moves_the_victim_that_can_move_not_the_first_in_order() {
    let mut s = one_queue(1.0);
    s.node("n0", 64_000, 256, 4).node("n1", 64_000, 256, 1);
    s.gang(train("small", 1, 1).running_on(&["n0"]).created(0));
    s.gang(train("mid", 1, 2).running_on(&["n0"]).created(1));
    s.gang(train("big", 1, 2).created(10));
    settle(&mut s, 4);
    assert_eq!(s.count("big", TaskStatus::Running), 1, "{:?}", s.why("big"));
    assert_eq!(s.evicted, vec!["ns/small-0".to_owned()]);
    assert_eq!(s.placement("small").keys().collect::<Vec<_>>(), ["n1"]);
    assert_eq!(s.count("mid", TaskStatus::Running), 1);
}

/// More victims first in order have nowhere to go (seven 2-GPU jobs) than consolidation would search
/// again without them; the oldest, a 1-GPU job that can go to n1, is found at once.
#[test]
fn consolidation_passes_over_every_victim_that_cannot_move() {
    let mut s = one_queue(1.0);
    s.node("n0", 64_000, 256, 16).node("n1", 64_000, 256, 1);
    s.gang(train("old", 1, 1).running_on(&["n0"]).created(0));
    for i in 1..=7 {
        s.gang(train(&format!("x{i}"), 1, 2).running_on(&["n0"]).created(i));
    }
    s.gang(train("big", 1, 2).created(10));
    settle(&mut s, 4);
    assert_eq!(s.count("big", TaskStatus::Running), 1, "{:?}", s.why("big"));
    assert_eq!(s.evicted, vec!["ns/old-0".to_owned()]);
    assert_eq!(s.placement("old").keys().collect::<Vec<_>>(), ["n1"]);
}

#[test]
fn s46_builds_are_not_moved() {
    let mut s = one_queue(1.0);
    s.node("n0", 64_000, 256, 2).node("n1", 64_000, 256, 2);
    s.gang(build("a", 1, 1).running_on(&["n0"]).created(0));
    s.gang(build("b", 1, 1).running_on(&["n1"]).created(1));
    s.gang(train("big", 1, 2).created(10));
    settle(&mut s, 4);
    assert!(s.evicted.is_empty());
    assert_eq!(s.count("big", TaskStatus::Running), 0);
}

/// A 2-GPU node and a 2 s grace period: `other` runs one pod, and `stuck` runs one of its two (the other
/// cannot fit), below its minimum.
fn a_stuck_gang() -> Sim {
    let mut s = one_queue(2.0);
    s.config.plugins.stalegangeviction.grace_period = std::time::Duration::from_secs(2);
    s.node("n0", 64_000, 256, 2);
    s.gang(train("other", 1, 1).running_on(&["n0"]).created(0));
    s.gang(train("stuck", 2, 1).running_on(&["n0"]).created(5));
    s
}

#[test]
fn s47_a_gang_stuck_below_its_minimum_is_evicted_whole_after_the_grace_period() {
    let mut s = a_stuck_gang();
    s.round();
    assert!(s.evicted.is_empty(), "not before the grace period");
    settle(&mut s, 4);
    assert_eq!(s.evicted, vec!["ns/stuck-0".to_owned()]);
    assert_eq!(
        s.count("other", TaskStatus::Running),
        1,
        "the other job keeps running"
    );
}

/// The PodGroup `name` as a watch delivers it after a write of its status: the same definition, with
/// the stale-podgroup-timestamp annotation `annotation` (this scheduler never writes one).
fn podgroup_echo(s: &Sim, name: &str, annotation: Option<i64>) -> kai_scheduler_core::model::Group {
    let (_, group) = s
        .cluster
        .groups
        .iter()
        .find(|(_, g)| &*g.key.name == name)
        .expect("the group exists");
    let mut echo = group.clone();
    echo.tasks.clear();
    echo.stale_since = annotation;
    echo.stale_annotation = annotation;
    echo
}

/// The grace period is kept in memory across updates of the PodGroup that leave its stale annotation
/// as it was: our own status echo, arriving every round, must not restart it (it did, when every
/// update replaced the stale time with the absent annotation).
#[test]
fn status_echoes_do_not_restart_the_grace_period() {
    let mut s = a_stuck_gang();
    for round in 0..6 {
        let echo = podgroup_echo(&s, "stuck", None);
        s.cluster.apply_group(echo);
        s.round();
        if !s.evicted.is_empty() {
            assert_eq!(round, 2, "evicted once the 2 s grace period is up");
            break;
        }
    }
    assert_eq!(s.evicted, vec!["ns/stuck-0".to_owned()]);
}

/// A stale time written by someone else (KAI, before a switch) counts when it appears: a gang stale
/// for longer than the grace period by that record is evicted at once.
#[test]
fn a_stale_annotation_that_appears_counts() {
    let mut s = a_stuck_gang();
    s.round();
    assert!(s.evicted.is_empty(), "not before the grace period");
    let echo = podgroup_echo(&s, "stuck", Some(s.now - 60_000));
    s.cluster.apply_group(echo);
    s.round();
    assert_eq!(s.evicted, vec!["ns/stuck-0".to_owned()]);
}

/// A gang whose members finish at different times is finishing, not stale: with 2 of its 4 pods
/// Succeeded and 2 still running (below minMember 4) long past the grace period, nothing is evicted.
/// A control gang in the same cluster, below its minimum with no pod Succeeded, is evicted in the same
/// rounds, so the rounds do outlast the grace period.
#[test]
fn a_finishing_gang_with_succeeded_pods_is_not_stale() {
    let mut s = one_queue(-1.0);
    s.config.plugins.stalegangeviction.grace_period = std::time::Duration::from_secs(2);
    s.node("n0", 64_000, 256, 4).node("n1", 64_000, 256, 3);
    s.gang(train("finishing", 4, 1).min(4).running_on(&["n0"; 4]).created(0));
    s.complete("ns", "finishing-0").complete("ns", "finishing-1");
    // Control: one of two 3-GPU members runs; the other fits nowhere (n0 has 2 GPUs free).
    s.gang(train("stuck", 2, 3).running_on(&["n1"]).created(5));
    settle(&mut s, 8);
    assert_eq!(
        s.evicted,
        vec!["ns/stuck-0".to_owned()],
        "only the control gang is stale"
    );
    assert_eq!(s.count("finishing", TaskStatus::Succeeded), 2);
    assert_eq!(
        s.count("finishing", TaskStatus::Running),
        2,
        "the finishing gang's last pods keep running"
    );
    assert_eq!(s.placement("finishing"), [("n0".to_owned(), 2)].into());
}

#[test]
fn a_gangs_reservations_are_not_counted_twice() {
    // One GPU is taken by another scheduler's pod; evicting the low-priority 1-GPU gang frees one GPU,
    // which cannot hold a 2x1 GPU gang: nothing must be evicted for nothing.
    let mut s = one_queue(2.0);
    s.node("n0", 64_000, 256, 2);
    s.foreign_pod("other", "n0", 1_000, 1);
    s.gang(train("low", 1, 1).running_on(&["n0"]).created(0));
    s.gang(build("high", 2, 1).created(10));
    settle(&mut s, 3);
    assert!(s.evicted.is_empty(), "{:?}", s.evicted);
    assert_eq!(s.count("low", TaskStatus::Running), 1);
    assert_eq!(s.count("high", TaskStatus::Pipelined), 0);
}

#[test]
fn a_reserved_gang_waiting_for_evictions_is_tried_once_per_cycle() {
    // The victim's eviction is in flight (the simulated API server is not told): the preemptor stays
    // reserved across cycles, and each cycle tries it a bounded number of times.
    let mut s = one_queue(1.0);
    s.node("n0", 64_000, 256, 2);
    s.gang(train("train", 1, 2).running_on(&["n0"]).created(0));
    s.gang(build("build", 1, 1).created(10));
    let first = kai_scheduler_core::cycle::run(&mut s.cluster, &s.config, s.now);
    assert_eq!(first.decisions.evictions.len(), 1);
    for i in 1..4 {
        let r = kai_scheduler_core::cycle::run(&mut s.cluster, &s.config, s.now + i * 1000);
        assert!(
            r.stats.gangs_tried <= 2,
            "cycle {i} tried {} gangs",
            r.stats.gangs_tried
        );
        assert!(r.decisions.binds.is_empty() && r.decisions.evictions.is_empty());
    }
    assert_eq!(s.count("build", TaskStatus::Pipelined), 1);
    s.cluster.check_invariants().expect("invariants");
}

#[test]
fn an_elastic_gang_at_its_maximum_is_not_tried_again_and_again() {
    let mut s = one_queue(8.0);
    s.node("n0", 64_000, 256, 8);
    s.gang(train("elastic", 6, 1).min(2).max(4).created(0));
    let r = kai_scheduler_core::cycle::run(&mut s.cluster, &s.config, s.now);
    assert_eq!(r.decisions.binds.len(), 4, "grows to maxMember, no further");
    assert!(r.stats.gangs_tried <= 4, "tried {} times", r.stats.gangs_tried);
}

/// Found by the e2e tier (e2e/tests/queues.rs): after an inference gang preempted a 4-pod train gang,
/// the Job controller's first replacement pod was bound alone while the evicted pods were still being
/// deleted, because readiness counted the pods being deleted as members. Only alive pods (KAI: pending,
/// gated or placed) count; the replacements wait until the whole gang can start.
#[test]
fn replacement_pods_of_an_evicted_gang_wait_for_the_whole_gang() {
    let mut s = one_queue(-1.0);
    s.node("n0", 64_000, 256, 4).node("n1", 64_000, 256, 4);
    s.gang(train("train", 4, 1).min(4).running_on(&["n0", "n0", "n1", "n1"]));
    for i in 0..4 {
        s.deleting("ns", &format!("train-{i}"));
    }
    // One replacement exists so far; 4 GPUs are free, so nothing but the gang rule stops it.
    s.recreate("ns", "train-0", "train-new-0");
    settle(&mut s, 2);
    assert_eq!(s.count("train", TaskStatus::Binding), 0);
    assert_eq!(s.count("train", TaskStatus::Running), 0);
    let why = s.why("train").unwrap_or_default();
    assert!(why.contains("the gang needs 4, 1 exist so far"), "{why}");
    // The other three arrive: the gang is placed whole.
    for i in 1..4 {
        s.recreate("ns", &format!("train-{i}"), &format!("train-new-{i}"));
    }
    settle(&mut s, 2);
    assert_eq!(s.count("train", TaskStatus::Running), 4);
}

/// `preemptionPolicy: Never` (kube-scheduler's rule): the build still waits ahead of lower priorities but
/// evicts no one, by preempt, reclaim or consolidation; the same build without it preempts (s24).
#[test]
fn a_gang_whose_pods_never_preempt_waits_without_evicting() {
    let mut s = one_queue(1.0);
    s.node("n0", 64_000, 256, 2);
    s.gang(train("train", 1, 2).running_on(&["n0"]).created(0));
    s.gang(build("build", 1, 1).never_preempts().created(10));
    settle(&mut s, 4);
    assert_eq!(s.count("build", TaskStatus::Running), 0);
    assert_eq!(s.count("train", TaskStatus::Running), 1);
    assert!(s.evicted.is_empty(), "{:?}", s.evicted);
    let why = s.why("build").expect("waits with a reason");
    assert!(why.contains("nvidia.com/gpu"), "{why}");
    // Room appears without evictions: it is placed as usual.
    s.complete("ns", "train-0");
    settle(&mut s, 2);
    assert_eq!(s.count("build", TaskStatus::Running), 1);
}

/// A backlog of pods each asking more CPU than any node has, beside running pods that preempt,
/// reclaim or consolidation could take: no eviction makes room for them, so no victim search weighs a
/// node for them (a search per waiting pod over every node grew with the backlog times the running
/// pods, every cycle), and nothing is evicted.
#[test]
fn pods_larger_than_every_node_weigh_no_node_for_victims() {
    let mut s = one_queue(1.0);
    s.node("n0", 64_000, 256, 2).node("n1", 64_000, 256, 2);
    s.gang(train("a", 1, 1).running_on(&["n0"]).created(0));
    s.gang(train("b", 1, 1).running_on(&["n1"]).created(1));
    for i in 0..20 {
        s.gang(
            build(&format!("huge-{i}"), 1, 0)
                .cpu_mem(65_000, 1)
                .created(10 + i),
        );
        s.gang(
            train(&format!("wide-{i}"), 1, 0)
                .cpu_mem(65_000, 1)
                .created(40 + i),
        );
    }
    let result = s.step();
    assert_eq!(result.stats.victim_nodes_weighed, 0);
    assert!(result.decisions.evictions.is_empty());
    assert_eq!(result.stats.gangs_waiting, 40);
    // Their reason says so, and quotes no free figure that would change with every bind elsewhere.
    let why = s.why("wide-0").expect("a reason");
    assert!(
        why.starts_with(
            "pod needs 65 cpu, more than any node has (at most 64). Pod ns/wide-0-0 fits 0/2 nodes"
        ),
        "{why}"
    );
    assert_eq!(
        s.count("a", TaskStatus::Running) + s.count("b", TaskStatus::Running),
        2
    );
    // The same pods asking what a node has are searched for (and the build preempts).
    let mut s = one_queue(1.0);
    s.node("n0", 64_000, 256, 2);
    s.gang(train("a", 1, 1).cpu_mem(10_000, 1).running_on(&["n0"]).created(0));
    s.gang(build("fits", 1, 0).cpu_mem(60_000, 1).created(10));
    let result = s.step();
    assert!(result.stats.victim_nodes_weighed > 0);
    assert_eq!(result.decisions.evictions.len(), 1);
}

/// Pods that fit an empty node but not beside what may not move there: consolidation's node bounds
/// count every resource, not only GPUs, so no node is weighed for them and nothing moves; a pod that
/// moving the small train would make room for is still searched for.
#[test]
fn consolidation_weighs_no_node_where_moving_all_it_may_frees_too_little_cpu() {
    let busy = || {
        let mut s = one_queue(2.0);
        s.node("n0", 64_000, 256, 2).node("n1", 64_000, 256, 2);
        for (i, node) in ["n0", "n1"].into_iter().enumerate() {
            let i = i64::try_from(i).expect("small");
            s.gang(
                build(&format!("keep-{node}"), 1, 0)
                    .cpu_mem(10_000, 1)
                    .running_on(&[node])
                    .created(i),
            );
            s.gang(
                train(&format!("small-{node}"), 1, 0)
                    .cpu_mem(2_000, 1)
                    .running_on(&[node])
                    .created(2 + i),
            );
        }
        s
    };
    let mut s = busy();
    for i in 0..10 {
        s.gang(
            train(&format!("wide-{i}"), 1, 0)
                .cpu_mem(60_000, 1)
                .created(10 + i),
        );
    }
    let result = s.step();
    assert_eq!(result.stats.victim_nodes_weighed, 0);
    assert!(result.decisions.evictions.is_empty());
    assert_eq!(result.stats.gangs_waiting, 10);
    let mut s = busy();
    s.gang(train("fits-once-moved", 1, 0).cpu_mem(53_000, 1).created(10));
    let result = s.step();
    assert!(result.stats.victim_nodes_weighed > 0);
}
