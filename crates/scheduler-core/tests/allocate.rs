//! Scenario tests of allocate: clusters, queues and gangs in, placements and explanations out, over
//! several rounds to show decisions are stable.

use kai_scheduler_core::config::PlacementStrategy;
use kai_scheduler_core::model::resources::{CPU, GPU};
use kai_scheduler_core::model::{Resources, TaskStatus};
use kai_scheduler_core::sim::{GangSpec, Sim};

fn sim() -> Sim {
    let mut s = Sim::new();
    s.queue("default-parent-queue", None, 0.0, -1.0, 1.0);
    s.queue("q", Some("default-parent-queue"), -1.0, -1.0, 1.0);
    s
}

/// After the cluster settles, more rounds decide nothing new (no oscillation).
fn assert_stable(s: &mut Sim) {
    for _ in 0..5 {
        let r = s.round();
        assert!(
            r.decisions.binds.is_empty(),
            "unexpected binds: {:?}",
            r.decisions.binds
        );
        assert!(
            r.decisions.evictions.is_empty(),
            "unexpected evictions: {:?}",
            r.decisions.evictions
        );
    }
    s.cluster.check_invariants().expect("model invariants");
}

#[test]
fn seed_003_no_partial_gang_then_all_when_room_appears() {
    let mut s = sim();
    s.nodes("gpu", 3, 2);
    s.gang(GangSpec::new("train", "q", 8));
    s.rounds(3);
    assert_eq!(
        s.count("train", TaskStatus::Running),
        0,
        "no pod of the gang may start"
    );
    let why = s.why("train").expect("an Unschedulable condition");
    assert!(
        why.starts_with("8 pods need 8 nvidia.com/gpu, 6 free on 3 nodes"),
        "{why}"
    );
    assert!(s.history.iter().all(|d| d.binds.is_empty()));
    // Two more GPUs join: the whole gang is bound in the next cycle.
    s.node("gpu-3", 64_000, 256, 2);
    let r = s.round();
    assert_eq!(r.decisions.binds.len(), 8);
    assert!(
        r.decisions.events.iter().any(|e| e.reason == "PodGroupScheduled"),
        "{:?}",
        r.decisions.events
    );
    assert_eq!(s.count("train", TaskStatus::Running), 8);
    assert_eq!(
        s.status("train").unwrap().phase,
        Some(api::PodGroupPhase::Scheduled),
        "bound, not yet seen running"
    );
    s.round();
    assert_eq!(
        s.status("train").unwrap().phase,
        Some(api::PodGroupPhase::Running)
    );
    assert_stable(&mut s);
}

#[test]
fn failed_gang_leaves_resources_to_the_next() {
    let mut s = sim();
    s.nodes("gpu", 2, 4);
    s.gang(GangSpec::new("big", "q", 10).created(0));
    s.gang(GangSpec::new("small", "q", 4).created(10));
    s.round();
    assert_eq!(s.count("big", TaskStatus::Running), 0);
    assert_eq!(s.count("small", TaskStatus::Running), 4);
    assert_stable(&mut s);
}

#[test]
fn elastic_gang_starts_at_min_and_grows_to_max() {
    let mut s = sim();
    s.nodes("gpu", 1, 4);
    s.gang(GangSpec::new("elastic", "q", 8).min(2).max(8));
    s.round();
    assert_eq!(
        s.count("elastic", TaskStatus::Running),
        4,
        "min 2, grows into the 4 free GPUs"
    );
    s.node("gpu-1", 64_000, 256, 4);
    s.round();
    assert_eq!(s.count("elastic", TaskStatus::Running), 8);
    assert_stable(&mut s);
}

#[test]
fn binpack_and_spread() {
    // KAI scenario 15: one 1-GPU pod already on node-1; a new one goes next to it (binpack) or away (spread).
    for (strategy, expected) in [
        (PlacementStrategy::Binpack, "n1"),
        (PlacementStrategy::Spread, "n0"),
    ] {
        let mut s = sim();
        s.config.plugins.nodeplacement.gpu = strategy;
        s.node("n0", 64_000, 256, 2).node("n1", 64_000, 256, 2);
        s.gang(GangSpec::new("old", "q", 1).running_on(&["n1"]));
        s.gang(GangSpec::new("new", "q", 1));
        s.round();
        assert_eq!(
            s.placement("new").keys().cloned().collect::<Vec<_>>(),
            vec![expected.to_owned()],
            "{strategy:?}"
        );
    }
}

#[test]
fn cpu_pods_prefer_cpu_nodes_and_foreign_pods_use_capacity() {
    let mut s = sim();
    s.node("gpu-node", 64_000, 256, 8).node("cpu-node", 8_000, 32, 0);
    s.foreign_pod("other", "cpu-node", 6_000, 0);
    s.gang(GangSpec::new("cpu", "q", 2).gpus(0).cpu_mem(1_000, 1));
    s.round();
    // 2 CPUs free on the CPU node: both fit there, the GPU node stays for GPU work.
    assert_eq!(s.placement("cpu").get("cpu-node"), Some(&2));
    s.gang(GangSpec::new("cpu2", "q", 1).gpus(0).cpu_mem(1_000, 1));
    s.round();
    assert_eq!(
        s.placement("cpu2").get("gpu-node"),
        Some(&1),
        "CPU node full, falls back to a GPU node"
    );
}

#[test]
fn selectors_and_taints_are_respected_and_explained() {
    let mut s = sim();
    s.node_with("a", 64_000, 256, 4, &[("zone", "a")], &[]);
    s.node_with("b", 64_000, 256, 4, &[("zone", "b")], &["dedicated"]);
    s.gang(GangSpec::new("wants-b", "q", 2).selector("zone", "b"));
    s.round();
    assert_eq!(s.count("wants-b", TaskStatus::Running), 0);
    let why = s.why("wants-b").unwrap();
    assert!(why.contains("1 node selector zone=b does not match"), "{why}");
    assert!(why.contains("1 untolerated taint dedicated:NoSchedule"), "{why}");
    s.gang(
        GangSpec::new("tolerant", "q", 2)
            .selector("zone", "b")
            .tolerate("dedicated"),
    );
    s.round();
    assert_eq!(s.placement("tolerant").get("b"), Some(&2));
}

#[test]
fn hierarchical_podgroups_are_placed_whole_or_not_at_all() {
    // Seed 000 step 5: ml-pipeline needs both children (2 preprocessors on CPU, 4 GPU trainers).
    let mut s = sim();
    s.node("cpu", 16_000, 64, 0).node("gpu", 64_000, 256, 2);
    s.gang(GangSpec::new("ml-pipeline", "q", 0).min(2));
    s.gang(
        GangSpec::new("data-preprocessors", "q", 2)
            .gpus(0)
            .cpu_mem(2_000, 8)
            .parent("ml-pipeline"),
    );
    s.gang(GangSpec::new("model-trainers", "q", 4).parent("ml-pipeline"));
    s.rounds(2);
    assert_eq!(
        s.count("data-preprocessors", TaskStatus::Running),
        0,
        "preprocessors wait for the trainers"
    );
    assert_eq!(s.count("model-trainers", TaskStatus::Running), 0);
    let why = s.why("ml-pipeline").unwrap();
    assert!(why.contains("nvidia.com/gpu"), "{why}");
    s.node("gpu-2", 64_000, 256, 2);
    s.round();
    assert_eq!(s.count("data-preprocessors", TaskStatus::Running), 2);
    assert_eq!(s.count("model-trainers", TaskStatus::Running), 4);
    assert_stable(&mut s);
}

#[test]
fn subgroups_each_need_their_minimum() {
    // A RayCluster-like gang: head (1) + workers (min 4); 4 GPUs only: nothing starts.
    let mut s = sim();
    s.node("gpu", 64_000, 256, 4);
    s.gang(
        GangSpec::new("ray", "q", 0)
            .subgroup("headgroup", 1, None, 1)
            .subgroup("workers", 4, None, 4),
    );
    s.round();
    assert_eq!(s.count("ray", TaskStatus::Running), 0);
    s.node("gpu-2", 64_000, 256, 1);
    s.round();
    assert_eq!(s.count("ray", TaskStatus::Running), 5);
    assert_stable(&mut s);
}

#[test]
fn schedule_timeout_moves_the_gang_to_failed_with_a_reason() {
    let mut s = sim();
    s.nodes("gpu", 1, 2);
    s.gang(GangSpec::new("slow", "q", 8).timeout(3).created(s.now));
    s.rounds(2);
    assert_eq!(s.status("slow").unwrap().phase, Some(api::PodGroupPhase::Pending));
    s.rounds(3);
    let status = s.status("slow").unwrap();
    assert_eq!(status.phase, Some(api::PodGroupPhase::Failed));
    let timed_out = status
        .conditions
        .iter()
        .find(|c| c.type_ == "TimedOut")
        .expect("TimedOut condition");
    assert_eq!(timed_out.reason.as_deref(), Some("ScheduleTimeout"));
    assert!(s.why("slow").unwrap().contains("scheduleTimeoutSeconds (3s)"));
}

#[test]
fn queue_limit_waits_with_a_clear_condition() {
    let mut s = Sim::new();
    s.queue("dept", None, -1.0, -1.0, 1.0);
    s.queue("team-a", Some("dept"), 2.0, 2.0, 1.0);
    s.nodes("gpu", 1, 8);
    s.gang(GangSpec::new("first", "team-a", 2).created(0));
    s.gang(GangSpec::new("second", "team-a", 2).created(1));
    s.round();
    assert_eq!(s.count("first", TaskStatus::Running), 2);
    assert_eq!(s.count("second", TaskStatus::Running), 0);
    let why = s.why("second").unwrap();
    assert_eq!(
        why,
        "queue team-a at its nvidia.com/gpu limit 2: allocated 2, gang needs 2"
    );
    let status = s.status("second").unwrap();
    assert_eq!(
        status.scheduling_conditions[0].reasons[0].reason.as_deref(),
        Some("OverLimit")
    );
}

#[test]
fn missing_queue_and_missing_pods_wait_with_conditions() {
    let mut s = sim();
    s.nodes("gpu", 1, 8);
    s.gang(GangSpec::new("lost", "no-such-queue", 1));
    s.gang(GangSpec::new("partial", "q", 2).min(4));
    s.round();
    assert_eq!(s.count("lost", TaskStatus::Running), 0);
    let lost = s.status("lost").unwrap();
    let invalid = lost.conditions.iter().find(|c| c.type_ == "Invalid").unwrap();
    assert_eq!(invalid.reason.as_deref(), Some("QueueDoesNotExist"));
    assert!(
        s.why("lost")
            .unwrap()
            .contains("queue \"no-such-queue\" does not exist")
    );
    assert_eq!(
        s.why("partial").unwrap(),
        "waiting for pods: the gang needs 4, 2 exist so far"
    );
    // The queue appears: the gang runs.
    s.queue("no-such-queue", Some("default-parent-queue"), -1.0, -1.0, 1.0);
    s.round();
    assert_eq!(s.count("lost", TaskStatus::Running), 1);
}

#[test]
fn volcano_min_resources_are_checked_against_free_capacity() {
    let mut s = sim();
    s.nodes("gpu", 1, 8);
    let min = Resources::new(16_000, 64 << 30, 1000);
    s.gang(
        GangSpec::new("vc", "q", 8)
            .gpus(0)
            .cpu_mem(1_000, 1)
            .volcano(Some(min.with(GPU, 10_000))),
    );
    s.round();
    assert_eq!(s.count("vc", TaskStatus::Running), 0);
    assert!(
        s.why("vc").unwrap().starts_with("minResources ("),
        "{:?}",
        s.why("vc")
    );
    s.gang(
        GangSpec::new("vc2", "q", 8)
            .gpus(0)
            .cpu_mem(1_000, 1)
            .volcano(Some(min.with(CPU, 8_000))),
    );
    s.round();
    assert_eq!(s.count("vc2", TaskStatus::Running), 8);
}

#[test]
fn a_bind_already_in_flight_is_not_decided_twice() {
    let mut s = sim();
    s.nodes("gpu", 1, 8);
    s.gang(GangSpec::new("g", "q", 4));
    // Run the cycle without letting the simulated API server confirm the binds.
    let first = kai_scheduler_core::cycle::run(&mut s.cluster, &s.config, s.now);
    assert_eq!(first.decisions.binds.len(), 4);
    let second = kai_scheduler_core::cycle::run(&mut s.cluster, &s.config, s.now + 1000);
    assert!(
        second.decisions.binds.is_empty(),
        "assumed binds are not decided again"
    );
    s.cluster.check_invariants().expect("model invariants");
}

/// A backlog of gangs asking alike, none of which fits: one attempt finds why, and every later gang of
/// the same shape is answered from it (debug builds check each answer against a real attempt), naming
/// its own pod.
#[test]
fn a_backlog_of_like_gangs_costs_one_attempt_per_shape() {
    let mut s = sim();
    s.nodes("gpu", 2, 8);
    s.gang(
        GangSpec::new("running", "q", 2)
            .gpus(5)
            .running_on(&["gpu-0", "gpu-1"]),
    );
    for i in 0..6 {
        s.gang(
            GangSpec::new(&format!("wait-{i}"), "q", 1)
                .gpus(4)
                .created(10 + i),
        );
    }
    s.gang(GangSpec::new("pair", "q", 2).gpus(4).created(20));
    let stats = s.round().stats.clone();
    // The six one-pod gangs share a shape (one attempt), the two-pod gang has its own.
    assert_eq!(stats.gangs_tried, 2);
    assert_eq!(stats.gangs_like_a_failed_one, 5);
    for i in 0..6 {
        let why = s.why(&format!("wait-{i}")).expect("waits with a reason");
        assert!(why.contains(&format!("ns/wait-{i}-0")), "{why}");
    }
}

/// A backlog that fails the same way cycle after cycle keeps its reasons: room appears where the
/// backlog cannot go, every waiting gang is tried again (or answered like the first), and each is told
/// the very reason it was told before, shared rather than made again (the status report and the no-fit
/// memo compare reasons by identity first), one summary for all.
#[test]
fn a_backlog_failing_the_same_way_keeps_its_reasons() {
    use kai_scheduler_core::framework::report::explain::{FitFailure, Why};
    use std::sync::Arc;
    let mut s = sim();
    s.node_with("gpu-a", 64_000, 256, 8, &[("zone", "a")], &[]);
    s.node_with("gpu-b", 64_000, 256, 8, &[("zone", "b")], &[]);
    s.gang(
        GangSpec::new("full", "q", 1)
            .gpus(8)
            .selector("zone", "a")
            .running_on(&["gpu-a"]),
    );
    s.gang(
        GangSpec::new("other", "q", 1)
            .gpus(8)
            .selector("zone", "b")
            .running_on(&["gpu-b"]),
    );
    for i in 0..4 {
        s.gang(
            GangSpec::new(&format!("wait-{i}"), "q", 1)
                .gpus(4)
                .selector("zone", "a")
                .created(10 + i),
        );
    }
    let reasons = |s: &Sim| -> Vec<Arc<FitFailure>> {
        (0..4)
            .map(|i| {
                let name = format!("wait-{i}");
                let (root, _) = s
                    .cluster
                    .groups
                    .iter()
                    .find(|(_, g)| *g.key.name == *name)
                    .expect("the gang's group");
                match s
                    .cluster
                    .no_fit_memo
                    .last::<Why>(kai_scheduler_core::model::GroupId(root))
                {
                    Some(Why::NoFit(f)) => Arc::clone(f),
                    other => panic!("{name}: {other:?}"),
                }
            })
            .collect()
    };
    let first = s.round().stats.clone();
    assert_eq!((first.gangs_tried, first.gangs_like_a_failed_one), (1, 3));
    let before = reasons(&s);
    assert!(
        before
            .windows(2)
            .all(|w| Arc::ptr_eq(&w[0].summary, &w[1].summary)),
        "like gangs share the first one's summary"
    );
    // Room where the backlog cannot go: every gang is looked at again.
    s.complete("ns", "other-0");
    let second = s.round().stats.clone();
    assert_eq!(second.gangs_skipped_unchanged, 0);
    assert_eq!((second.gangs_tried, second.gangs_like_a_failed_one), (1, 3));
    let after = reasons(&s);
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(Arc::ptr_eq(b, a), "wait-{i}: {a:?} made again");
    }
    for i in 0..4 {
        let why = s.why(&format!("wait-{i}")).expect("waits with a reason");
        assert!(why.contains(&format!("ns/wait-{i}-0")), "{why}");
    }
}

/// Something placed between two like gangs does not make the later one try again: placing only takes
/// room, so the shape that found no place finds none later in the pass (debug builds check the answer
/// against a real attempt).
#[test]
fn a_placement_between_like_gangs_leaves_the_later_one_answered_alike() {
    for with_placement in [false, true] {
        let mut s = sim();
        s.nodes("gpu", 1, 8);
        s.gang(GangSpec::new("running", "q", 1).gpus(5).running_on(&["gpu-0"]));
        s.gang(GangSpec::new("big-a", "q", 1).gpus(4).created(10));
        // Fits when it asks one GPU; too big for anything when it asks 16.
        let middle = if with_placement { 1 } else { 16 };
        s.gang(GangSpec::new("middle", "q", 1).gpus(middle).created(11));
        s.gang(GangSpec::new("big-b", "q", 1).gpus(4).created(12));
        let stats = s.round().stats.clone();
        assert_eq!(stats.gangs_tried, 2, "placement between: {with_placement}");
        assert_eq!(
            stats.gangs_like_a_failed_one, 1,
            "placement between: {with_placement}"
        );
        assert_eq!(
            s.count("middle", TaskStatus::Running),
            usize::from(with_placement)
        );
        assert_eq!(s.count("big-b", TaskStatus::Running), 0);
        let why = s.why("big-b").expect("waits with a reason");
        assert!(why.contains("ns/big-b-0"), "{why}");
    }
}

/// A like gang in another queue is stopped by its own queue's rule first, as its own attempt would be.
#[test]
fn a_like_gang_of_a_capped_queue_is_told_its_queue_rule() {
    let mut s = sim();
    s.queue("capped", Some("default-parent-queue"), 0.0, 2.0, 1.0);
    s.nodes("gpu", 1, 8);
    s.gang(GangSpec::new("running", "q", 1).gpus(5).running_on(&["gpu-0"]));
    s.gang(GangSpec::new("in-q", "q", 1).gpus(4).created(10));
    s.gang(GangSpec::new("in-capped", "capped", 1).gpus(4).created(11));
    let stats = s.round().stats.clone();
    assert_eq!(stats.gangs_like_a_failed_one, 1);
    let capped = s.status("in-capped").expect("a status");
    let reasons: Vec<String> = capped
        .conditions
        .iter()
        .filter_map(|c| c.reason.clone())
        .collect();
    assert!(reasons.iter().any(|r| r == "OverLimit"), "{reasons:?}");
    let why = s.why("in-q").expect("a reason");
    assert!(why.contains("ns/in-q-0"), "{why}");
}

/// Like gangs are answered from one attempt and share its fit summary: each message still names its own
/// pod, word for word as an attempt of its own would read.
#[test]
fn like_gangs_waiting_each_name_their_own_pod() {
    let mut s = sim();
    // 4 GPUs, 2 of them taken: the 4-GPU pods fit an empty node, not this one now.
    s.nodes("gpu", 1, 4);
    s.gang(GangSpec::new("filler", "q", 1).gpus(2).running_on(&["gpu-0"]));
    for name in ["big-a", "big-b", "big-c"] {
        s.gang(GangSpec::new(name, "q", 1).gpus(4));
    }
    s.gang(GangSpec::new("pair", "q", 2).gpus(4));
    s.rounds(2);
    for name in ["big-a", "big-b", "big-c"] {
        let pod = s.pods(name).into_keys().next().expect("a pod");
        assert_eq!(
            s.why(name).expect("an Unschedulable condition"),
            format!(
                "pod needs 4 nvidia.com/gpu, 2 free on 1 node. Pod ns/{pod} fits 0/1 nodes: 1 insufficient nvidia.com/gpu."
            )
        );
    }
    let pod = s.pods("pair").into_keys().next().expect("a pod");
    assert_eq!(
        s.why("pair").expect("an Unschedulable condition"),
        format!(
            "2 pods need 8 nvidia.com/gpu, 2 free on 1 node: room for 0 of 2 (gang scheduling places all or none). \
             Pod ns/{pod} fits 0/1 nodes: 1 insufficient nvidia.com/gpu."
        )
    );
}
