//! Reclaim across queues: KAI's worked examples and acceptance scenarios 32-35, end to end through the
//! cycle (allocate fails, reclaim evicts, the reclaimer is reserved, then bound once victims are gone),
//! then extra rounds to show nothing oscillates.

use kai_scheduler_core::framework::decisions::EventObject;
use kai_scheduler_core::model::TaskStatus;
use kai_scheduler_core::sim::{GangSpec, Sim};

fn queues(specs: &[(&str, f64, f64)]) -> Sim {
    let mut s = Sim::new();
    s.queue("default", None, -1.0, -1.0, 1.0);
    for (name, deserved, weight) in specs {
        s.queue(name, Some("default"), *deserved, -1.0, *weight);
    }
    s
}

fn train(name: &str, queue: &str, gpus: u32, created: i64) -> GangSpec {
    GangSpec::new(name, queue, 1)
        .gpus(gpus)
        .priority_class("train")
        .created(created)
}

fn stable(s: &mut Sim) {
    let evicted = s.evicted.len();
    s.rounds(5);
    assert_eq!(s.evicted.len(), evicted, "no further evictions: {:?}", s.evicted);
    s.cluster.check_invariants().expect("model invariants");
}

#[test]
fn s32_queue_below_its_share_takes_back_a_gpu() {
    let mut s = queues(&[("q0", 1.0, 1.0), ("q1", 1.0, 1.0)]);
    s.node("n0", 64_000, 256, 2);
    s.gang(train("big", "q0", 2, 0).running_on(&["n0"]));
    s.gang(train("small", "q1", 1, 10));
    s.rounds(3);
    assert_eq!(s.count("small", TaskStatus::Running), 1);
    assert_eq!(s.evicted, vec!["ns/big-0".to_owned()]);
    stable(&mut s);
}

#[test]
fn s33_s34_reclaim_only_when_the_reclaimer_is_below_its_share() {
    let setup = |q1_deserved: f64, q1_weight: f64| {
        let mut s = queues(&[("q0", 2.0, 2.0), ("q1", q1_deserved, q1_weight)]);
        s.node("node0", 64_000, 256, 2).node("node1", 64_000, 256, 2);
        s.gang(train("q0-one", "q0", 1, 0).running_on(&["node1"]));
        s.gang(train("q0-two", "q0", 2, 1).running_on(&["node0"]));
        s.gang(train("q1-one", "q1", 1, 2).running_on(&["node1"]));
        s.gang(train("q1-new", "q1", 1, 10));
        s.rounds(3);
        s
    };
    let mut s = setup(2.0, 2.0);
    assert_eq!(s.evicted, vec!["ns/q0-two-0".to_owned()]);
    assert_eq!(
        s.placement("q1-new").keys().cloned().collect::<Vec<_>>(),
        vec!["node0".to_owned()]
    );
    stable(&mut s);
    let s = setup(1.0, 1.0);
    assert!(s.evicted.is_empty(), "q1 is at its fair share: {:?}", s.evicted);
    assert_eq!(s.count("q1-new", TaskStatus::Running), 0);
}

#[test]
fn s35_large_reclaim() {
    let mut s = queues(&[("q0", 6.0, 6.0), ("q1", 5.0, 5.0)]);
    s.node("n0", 64_000, 256, 8);
    s.gang(train("eight", "q0", 8, 0).running_on(&["n0"]));
    s.gang(train("five", "q1", 5, 10));
    s.rounds(3);
    assert_eq!(s.count("five", TaskStatus::Running), 1);
    assert_eq!(s.evicted, vec!["ns/eight-0".to_owned()]);
    stable(&mut s);
}

#[test]
fn worked_example_fairness_ratio() {
    // 8 GPUs; q0 and q1 deserved 1, weight 1: fair shares 4 and 4. q0 runs 1, 3 and 4 GPUs; q1 waits
    // with two 4-GPU jobs. q0's newest (the 4-GPU job) goes, q1's first job runs, the second waits.
    let mut s = queues(&[("q0", 1.0, 1.0), ("q1", 1.0, 1.0)]);
    s.node("n0", 64_000, 256, 8);
    s.gang(train("q0-1", "q0", 1, 0).running_on(&["n0"]));
    s.gang(train("q0-3", "q0", 3, 1).running_on(&["n0"]));
    s.gang(train("q0-4", "q0", 4, 2).running_on(&["n0"]));
    s.gang(train("q1-a", "q1", 4, 10));
    s.gang(train("q1-b", "q1", 4, 11));
    s.rounds(3);
    assert_eq!(s.evicted, vec!["ns/q0-4-0".to_owned()]);
    assert_eq!(s.count("q1-a", TaskStatus::Running), 1);
    assert_eq!(s.count("q1-b", TaskStatus::Running), 0);
    stable(&mut s);
}

#[test]
fn worked_example_one_gpu_from_the_remainder() {
    // 7 GPUs; q0 deserved 2 weight 2 runs 4 with 1 more pending; q1 deserved 1 weight 1 runs 3.
    // Fair shares 5 and 2: q1's 3-GPU job goes, q0's pending job runs.
    let mut s = queues(&[("q0", 2.0, 2.0), ("q1", 1.0, 1.0)]);
    s.node("n0", 64_000, 256, 7);
    s.gang(train("q0-run", "q0", 4, 0).running_on(&["n0"]));
    s.gang(train("q1-run", "q1", 3, 1).running_on(&["n0"]));
    s.gang(train("q0-new", "q0", 1, 10));
    s.rounds(3);
    assert_eq!(s.evicted, vec!["ns/q1-run-0".to_owned()]);
    assert_eq!(s.count("q0-new", TaskStatus::Running), 1);
    stable(&mut s);
}

#[test]
fn worked_example_queue_priority() {
    // 8 GPUs; d1 -> {q0 deserved 1 weight 2 with 5x1 GPU, q1 deserved 1 weight 1 with 3x1, r
    // deserved 0 weight 1 priority 101 waiting with a 3-GPU job}: q0 keeps 3, q1 keeps 2, r runs.
    let mut s = Sim::new();
    s.queue("d1", None, -1.0, -1.0, 1.0);
    s.queue("q0", Some("d1"), 1.0, -1.0, 2.0);
    s.queue("q1", Some("d1"), 1.0, -1.0, 1.0);
    let mut r = kai_scheduler_core::model::Queue::new("r");
    r.parent_name = Some("d1".into());
    r.priority = 101;
    r.created = 5;
    r.resources[kai_scheduler_core::model::resources::GPU] =
        kai_scheduler_core::model::queue::QueueResourceSpec {
            quota: 0.0,
            limit: -1.0,
            weight: 1.0,
        };
    s.queue_spec(r);
    s.node("n0", 64_000, 256, 8);
    for i in 0..5 {
        s.gang(train(&format!("q0-{i}"), "q0", 1, i).running_on(&["n0"]));
    }
    for i in 0..3 {
        s.gang(train(&format!("q1-{i}"), "q1", 1, 10 + i).running_on(&["n0"]));
    }
    s.gang(train("r-job", "r", 3, 100));
    s.rounds(3);
    assert_eq!(s.count("r-job", TaskStatus::Running), 1);
    let from_q0 = s.evicted.iter().filter(|p| p.starts_with("ns/q0-")).count();
    let from_q1 = s.evicted.iter().filter(|p| p.starts_with("ns/q1-")).count();
    assert_eq!((from_q0, from_q1), (2, 1), "{:?}", s.evicted);
    stable(&mut s);
}

/// The reclaimer of s32 with `preemptionPolicy: Never` waits below its share instead of reclaiming.
#[test]
fn a_reclaimer_whose_pods_never_preempt_takes_nothing_back() {
    let mut s = queues(&[("q0", 1.0, 1.0), ("q1", 1.0, 1.0)]);
    s.node("n0", 64_000, 256, 2);
    s.gang(train("big", "q0", 2, 0).running_on(&["n0"]));
    s.gang(train("small", "q1", 1, 10).never_preempts());
    s.rounds(3);
    assert_eq!(s.count("small", TaskStatus::Running), 0);
    assert!(s.evicted.is_empty(), "{:?}", s.evicted);
    stable(&mut s);
}

/// Allocate places a gang of an over-quota queue in the last free GPUs; reclaim, later in the same
/// cycle, needs them for a queue below its share. The gang never left its pending state: no bind and
/// no eviction is decided for it (evicting a pod that never ran would delete it for nothing), its
/// status says what took its room, and it waits as any pending gang does.
#[test]
fn a_gang_placed_and_reclaimed_in_one_cycle_is_neither_bound_nor_evicted() {
    let mut s = queues(&[("q0", 2.0, 2.0), ("q1", 6.0, 6.0)]);
    s.node("n0", 64_000, 256, 8);
    s.gang(train("old", "q0", 4, 0).running_on(&["n0"]));
    s.gang(train("big", "q1", 6, 10));
    s.gang(train("late", "q0", 4, 20));
    let first = s.step();
    let d = &first.decisions;
    let names = |v: Vec<&str>| v.into_iter().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        names(d.evictions.iter().map(|e| &*e.name).collect()),
        names(vec!["old-0"])
    );
    assert!(d.binds.is_empty(), "{:?}", d.binds);
    let late: Vec<&str> = d
        .events
        .iter()
        .filter(|e| matches!(&e.object, EventObject::PodGroup { name, .. } if &**name == "late"))
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(
        late,
        vec![
            "placed in this cycle, then its room was given to ns/big by reclaim; nothing was bound, and \
             it is tried again in the next cycle"
        ]
    );
    let status = d
        .group_statuses
        .iter()
        .find(|g| &*g.key.name == "late")
        .expect("late's status");
    assert!(format!("{status:?}").contains("PlacementWithdrawn"), "{status:?}");
    // Pending again in the model, holding nothing.
    assert_eq!(s.count("late", TaskStatus::Pending), 1);
    s.cluster.check_invariants().expect("model invariants");
    s.rounds(3);
    assert_eq!(s.count("big", TaskStatus::Running), 1);
    assert_eq!(s.evicted, vec!["ns/old-0".to_owned()]);
    stable(&mut s);
}

/// Two reclaimers of two queues in one pass: the second finds its victim among what the first left,
/// not the gang the first already took (reclaim keeps its victim lists while nothing changes and lists
/// them again after an eviction; debug builds compare every kept list with a fresh one).
#[test]
fn a_second_reclaimer_in_the_same_pass_takes_the_next_victim() {
    let mut s = queues(&[("q0", 2.0, 2.0), ("q1", 1.0, 1.0), ("q2", 1.0, 1.0)]);
    s.node("n0", 64_000, 256, 4);
    for i in 0..4 {
        s.gang(train(&format!("q0-{i}"), "q0", 1, i).running_on(&["n0"]));
    }
    s.gang(train("q1-new", "q1", 1, 10));
    s.gang(train("q2-new", "q2", 1, 11));
    s.round();
    let mut evicted = s.evicted.clone();
    evicted.sort();
    assert_eq!(
        evicted,
        vec!["ns/q0-2-0".to_owned(), "ns/q0-3-0".to_owned()],
        "the newest two of the over-served queue, one per reclaimer"
    );
    s.rounds(3);
    assert_eq!(s.count("q1-new", TaskStatus::Running), 1);
    assert_eq!(s.count("q2-new", TaskStatus::Running), 1);
    stable(&mut s);
}
