//! Capacity gates: allocate scenarios 1-4, 10-13 and preempt scenarios 26-27 (reference §5.4),
//! reduced to "does this request pass the queue's limit / non-preemptible quota".

use super::*;
use crate::model::resources::{CPU, ResourceNames};

use Preemptibility::{NonPreemptible, Preemptible};

fn dept_tree(dept: QueueSpec, leaves: Vec<QueueSpec>) -> QueueTree {
    let mut specs = vec![dept];
    specs.extend(leaves);
    build(specs)
}

#[test]
fn limit_on_leaf_or_department() {
    // Scenario 1: dept-a (2) -> q0 (deserved 2, weight 2, limit 2); two pending 2-GPU trains:
    // the first fits, the second is OverLimit at q0.
    // Scenario 2: the same with the limit on dept-a: OverLimit at dept-a.
    let cases = [
        (
            "limit on q0",
            gpu_queue("dept-a", None, 2.0, 1.0),
            QueueSpec::new("q0")
                .with_parent("dept-a")
                .with_resource(GPU, 2.0, 2.0, 2.0),
            "q0",
        ),
        (
            "limit on dept-a",
            QueueSpec::new("dept-a").with_resource(GPU, 2.0, 2.0, 1.0),
            gpu_queue("q0", Some("dept-a"), 2.0, 2.0),
            "dept-a",
        ),
    ];
    let names = ResourceNames::default();
    for (name, dept, leaf, blocked_at) in cases {
        let mut tree = dept_tree(dept, vec![leaf]);
        let q0 = id(&tree, "q0");
        tree.record_pending(q0, &gpus(4.0));
        tree.divide(&gpus(4.0));
        let job = gpus(2.0);
        assert_eq!(
            tree.check_capacity(q0, &job, Preemptible),
            Ok(()),
            "{name}: first job"
        );
        tree.allocate(q0, &job, Preemptible);
        let violation = tree
            .check_capacity(q0, &job, Preemptible)
            .expect_err("second job is over the limit");
        assert_eq!(violation.reason(), "OverLimit", "{name}");
        let s = violation.shortfall();
        assert_eq!(
            (&*s.queue_name, s.slot, s.bound, s.used, s.requested),
            (blocked_at, GPU, 2.0, 2.0, 2.0),
            "{name}"
        );
        assert_eq!(
            s.explain(&names),
            format!("queue {blocked_at} at its nvidia.com/gpu limit 2: allocated 2, gang needs 2")
        );
    }
}

#[test]
fn non_preemptible_quota() {
    // Scenario 3: q0 and q1 deserved 1, node 2: q0's 1-GPU build fits its quota, and a 1-GPU train
    // may then go over quota.
    let mut tree = build(vec![
        gpu_queue("q0", None, 1.0, 1.0),
        gpu_queue("q1", None, 1.0, 1.0),
    ]);
    let q0 = id(&tree, "q0");
    tree.divide(&gpus(2.0));
    assert_eq!(tree.check_capacity(q0, &gpus(1.0), NonPreemptible), Ok(()));
    tree.allocate(q0, &gpus(1.0), NonPreemptible);
    assert_eq!(
        tree.check_capacity(q0, &gpus(1.0), Preemptible),
        Ok(()),
        "scenario 3: the train goes over quota"
    );
    assert!(
        tree.check_capacity(q0, &gpus(1.0), NonPreemptible).is_err(),
        "a second build would not fit"
    );

    // Scenario 4: q0 deserved 1, a 2-GPU build: NonPreemptibleOverQuota despite idle GPUs.
    let mut tree = build(vec![gpu_queue("q0", None, 1.0, 1.0)]);
    let q0 = id(&tree, "q0");
    tree.divide(&gpus(4.0));
    let violation = tree
        .check_capacity(q0, &gpus(2.0), NonPreemptible)
        .expect_err("scenario 4");
    assert_eq!(violation.reason(), "NonPreemptibleOverQuota");
    assert_eq!(
        violation.shortfall().explain(&ResourceNames::default()),
        "queue q0 at its nvidia.com/gpu deserved quota 1: allocated to non-preemptible jobs 0, gang needs 2"
    );

    // Scenario 10: d1 and d2 deserved 1; q0 (deserved 2) under d1 with a 2-GPU build: the
    // department would go over its deserved quota.
    let mut tree = build(vec![
        gpu_queue("d1", None, 1.0, 1.0),
        gpu_queue("d2", None, 1.0, 1.0),
        gpu_queue("q0", Some("d1"), 2.0, 1.0),
    ]);
    let q0 = id(&tree, "q0");
    tree.divide(&gpus(4.0));
    let s = tree
        .non_preemptible_over_quota(q0, &gpus(2.0))
        .expect("scenario 10");
    assert_eq!((&*s.queue_name, s.bound, s.requested), ("d1", 1.0, 2.0));
}

#[test]
fn preempt_gates() {
    // Scenario 11: q0 deserved 1, limit 1, running a 1-GPU train; a pending 1-GPU build: allocate
    // refuses (OverLimit) but preempt's only gate, the non-preemptible quota, passes.
    let mut tree = build(vec![QueueSpec::new("q0").with_resource(GPU, 1.0, 1.0, 1.0)]);
    let q0 = id(&tree, "q0");
    tree.record_running(q0, &gpus(1.0), Preemptible);
    tree.record_pending(q0, &gpus(1.0));
    tree.divide(&gpus(2.0));
    assert!(matches!(
        tree.check_capacity(q0, &gpus(1.0), NonPreemptible),
        Err(CapacityViolation::OverLimit(_))
    ));
    assert_eq!(
        tree.non_preemptible_over_quota(q0, &gpus(1.0)),
        None,
        "scenario 11: preempt may proceed"
    );

    // Scenario 12: the same queue running a build; a pending train is OverLimit for allocate.
    let mut tree = build(vec![QueueSpec::new("q0").with_resource(GPU, 1.0, 1.0, 1.0)]);
    let q0 = id(&tree, "q0");
    tree.record_running(q0, &gpus(1.0), NonPreemptible);
    tree.divide(&gpus(2.0));
    assert!(tree.over_limit(q0, &gpus(1.0)).is_some(), "scenario 12");

    // Scenarios 26 and 27: a 4-GPU build in q0 deserved 4 passes, deserved 3 does not.
    for (deserved, passes) in [(4.0, true), (3.0, false)] {
        let mut tree = build(vec![gpu_queue("q0", None, deserved, 1.0)]);
        let q0 = id(&tree, "q0");
        tree.record_running(q0, &gpus(4.0), Preemptible);
        tree.divide(&gpus(4.0));
        assert_eq!(
            tree.non_preemptible_over_quota(q0, &gpus(4.0)).is_none(),
            passes,
            "deserved {deserved}"
        );
    }
}

#[test]
fn cpu_limit() {
    // Scenario 13: node 4 GPUs and 5000 CPU; a CPU limit of 2500 on q0 (or on its department);
    // two jobs of 1 GPU and 2000 CPU: one fits, the other is OverLimit on CPU.
    let job = gpus(1.0).with(CPU, 2000);
    let limited = |spec: QueueSpec| spec.with_resource(CPU, UNLIMITED, 2500.0, 1.0);
    let cases = [
        (
            "on q0",
            gpu_queue("dept", None, UNLIMITED, 1.0),
            limited(gpu_queue("q0", Some("dept"), 1.0, 1.0)),
            "q0",
        ),
        (
            "on dept",
            limited(gpu_queue("dept", None, UNLIMITED, 1.0)),
            gpu_queue("q0", Some("dept"), 1.0, 1.0),
            "dept",
        ),
    ];
    for (name, dept, leaf, at) in cases {
        let mut tree = dept_tree(dept, vec![leaf]);
        let q0 = id(&tree, "q0");
        tree.divide(&gpus(4.0).with(CPU, 5000));
        assert_eq!(tree.check_capacity(q0, &job, Preemptible), Ok(()), "{name}");
        tree.allocate(q0, &job, Preemptible);
        let s = tree.over_limit(q0, &job).expect("second job over the CPU limit");
        assert_eq!(
            (&*s.queue_name, s.slot, s.bound, s.used, s.requested),
            (at, CPU, 2500.0, 2000.0, 2000.0),
            "{name}"
        );
        assert_eq!(
            s.explain(&ResourceNames::default()),
            format!("queue {at} at its cpu limit 2500m: allocated 2, gang needs 2")
        );
    }
}

#[test]
fn zero_limit_blocks_only_requested_resources() {
    // An explicit limit of 0 blocks any request that uses the resource, and nothing else.
    let mut tree = build(vec![QueueSpec::new("q").with_resource(GPU, 0.0, 0.0, 1.0)]);
    let q = id(&tree, "q");
    tree.divide(&gpus(4.0).with(CPU, 4000));
    assert!(tree.over_limit(q, &gpus(0.5)).is_some());
    assert_eq!(tree.over_limit(q, &Resources::ZERO.with(CPU, 1000)), None);
}
