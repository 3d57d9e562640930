//! Queue order golden tests: KAI `queue_order_test.go` and the queue-order part of allocate
//! scenarios 5-9, 17 and 18 (reference §5.4).

use std::cmp::Ordering;

use super::*;

/// One side of a hand-set comparison (KAI's queue_order_test sets the numbers directly).
#[derive(Clone, Copy)]
struct Side {
    deserved: f64,
    fair_share: f64,
    allocated: f64,
    priority: i32,
}

fn hand_set(l: Side, r: Side, total: f64, config: FairShareConfig) -> (QueueTree, QueueId, QueueId) {
    let mut tree = build_with(
        vec![
            gpu_queue("lQueue", None, l.deserved, 1.0).with_priority(l.priority),
            gpu_queue("rQueue", None, r.deserved, 1.0).with_priority(r.priority),
        ],
        config,
    );
    tree.divide(&gpus(total));
    let (lq, rq) = (id(&tree, "lQueue"), id(&tree, "rQueue"));
    for (q, side) in [(lq, l), (rq, r)] {
        tree.set_fair_share(q, ShareVec::ZERO.with(GPU, side.fair_share));
        tree.set_usage_of(
            q,
            QueueUsage {
                allocated: gpus(side.allocated),
                ..QueueUsage::default()
            },
        );
    }
    (tree, lq, rq)
}

#[test]
fn queue_order_test_cases() {
    // KAI queue_order_test.go `TestGetQueueOrderResult`, expected result and deciding step.
    struct Row {
        name: &'static str,
        l: Side,
        r: Side,
        l_job: f64,
        r_job: f64,
        want: Ordering,
        step: OrderStep,
    }
    let starved_r = Side {
        deserved: 2.0,
        fair_share: 2.0,
        allocated: 0.0,
        priority: 0,
    };
    let busy_l = Side {
        deserved: 2.0,
        fair_share: 99.0,
        allocated: 20.0,
        priority: 0,
    };
    let half = Side {
        deserved: 50.0,
        fair_share: 50.0,
        allocated: 40.0,
        priority: 0,
    };
    let rows = [
        Row {
            name: "prioritization based on fair share starvation",
            l: busy_l,
            r: starved_r,
            l_job: 0.0,
            r_job: 0.0,
            want: Ordering::Greater,
            step: OrderStep::Starved,
        },
        Row {
            name: "quota starvation wins even if priority is different",
            l: Side {
                priority: 1,
                ..busy_l
            },
            r: starved_r,
            l_job: 0.0,
            r_job: 0.0,
            want: Ordering::Greater,
            step: OrderStep::Starved,
        },
        Row {
            // rQueue is over its GPU fair share (3 > 2) but not over-utilised: its CPU share is 0
            // and 0 >= 0 (KAI's all-resources rule).
            name: "queue priority decides when both are satisfied",
            l: Side {
                priority: 1,
                ..busy_l
            },
            r: Side {
                deserved: 2.0,
                fair_share: 2.0,
                allocated: 3.0,
                priority: 0,
            },
            l_job: 0.0,
            r_job: 0.0,
            want: Ordering::Less,
            step: OrderStep::Priority,
        },
        Row {
            name: "queue priority decides, quota < rQueue < fair share",
            l: Side {
                priority: 1,
                ..busy_l
            },
            r: Side {
                deserved: 2.0,
                fair_share: 80.0,
                allocated: 3.0,
                priority: 0,
            },
            l_job: 0.0,
            r_job: 0.0,
            want: Ordering::Less,
            step: OrderStep::Priority,
        },
        Row {
            // 2 devices x 5000 MiB vs 2 x 10000 MiB on 10000 MiB GPUs: 1 GPU vs 2 GPUs.
            name: "smaller gpu-memory request first",
            l: half,
            r: half,
            l_job: 1.0,
            r_job: 2.0,
            want: Ordering::Less,
            step: OrderStep::DominantShareWithJob,
        },
        Row {
            // 4 x 8000 MiB = 3.2 GPUs vs 4 x 2000 MiB = 0.8 GPUs.
            name: "larger gpu-memory request later",
            l: half,
            r: half,
            l_job: 3.2,
            r_job: 0.8,
            want: Ordering::Greater,
            step: OrderStep::DominantShareWithJob,
        },
    ];
    for row in rows {
        let (tree, lq, rq) = hand_set(row.l, row.r, 100.0, FairShareConfig::default());
        let (lj, rj) = (gpus(row.l_job), gpus(row.r_job));
        let got = tree.explain_order(
            &QueueCandidate::pending(lq, &lj),
            &QueueCandidate::pending(rq, &rj),
        );
        assert_eq!(got, (row.want, row.step), "{}", row.name);
        let reversed = tree.compare_victim_queues(
            &QueueCandidate::pending(lq, &lj),
            &QueueCandidate::pending(rq, &rj),
        );
        assert_eq!(
            reversed,
            row.want.reverse(),
            "{}: victim order is the reverse",
            row.name
        );
    }
}

#[test]
fn over_utilized_rules() {
    // KAI's rule needs every tracked resource over fair share; rQueue above (GPU 3 > 2, CPU 0 = 0)
    // is not over-utilised under it, but is under `AllHeld` and `Any`.
    let l = Side {
        deserved: 2.0,
        fair_share: 99.0,
        allocated: 20.0,
        priority: 1,
    };
    let r = Side {
        deserved: 2.0,
        fair_share: 2.0,
        allocated: 3.0,
        priority: 0,
    };
    for (rule, over, step) in [
        (OverUtilizedRule::AllTracked, false, OrderStep::Priority),
        (OverUtilizedRule::AllHeld, true, OrderStep::UnderUtilized),
        (OverUtilizedRule::Any, true, OrderStep::UnderUtilized),
    ] {
        let config = FairShareConfig {
            over_utilized: rule,
            ..FairShareConfig::default()
        };
        let (tree, lq, rq) = hand_set(l, r, 100.0, config);
        assert_eq!(tree.is_over_utilized(rq), over, "{rule:?}");
        let zero = Resources::ZERO;
        let got = tree.explain_order(
            &QueueCandidate::pending(lq, &zero),
            &QueueCandidate::pending(rq, &zero),
        );
        assert_eq!(got, (Ordering::Less, step), "{rule:?}");
    }
    // A queue holding nothing is never over-utilised under AllHeld.
    let idle = Side {
        deserved: 0.0,
        fair_share: 0.0,
        allocated: 0.0,
        priority: 0,
    };
    let config = FairShareConfig {
        over_utilized: OverUtilizedRule::AllHeld,
        ..FairShareConfig::default()
    };
    let (tree, lq, _) = hand_set(idle, idle, 1.0, config);
    assert!(!tree.is_over_utilized(lq));
}

/// Allocate scenarios: queues under an unlimited `default` department, weight 0 (the scenarios'
/// test default), jobs of whole GPUs.
struct Scenario {
    tree: QueueTree,
}

impl Scenario {
    fn new(queues: &[(&str, Option<&str>, f64)]) -> Self {
        let mut specs = vec![gpu_queue("default", None, UNLIMITED, 0.0)];
        specs.extend(queues.iter().map(|(name, parent, deserved)| {
            gpu_queue(name, Some(parent.unwrap_or("default")), *deserved, 0.0)
        }));
        Self { tree: build(specs) }
    }

    fn running(mut self, queue: &str, n: f64) -> Self {
        let q = id(&self.tree, queue);
        self.tree.record_running(q, &gpus(n), Preemptibility::Preemptible);
        self
    }

    fn pending(mut self, queue: &str, n: f64) -> Self {
        let q = id(&self.tree, queue);
        self.tree.record_pending(q, &gpus(n));
        self
    }

    fn divide(mut self, total: f64) -> Self {
        self.tree.divide(&gpus(total));
        self
    }

    /// Compares two sibling queues, each with its best job of `n` GPUs.
    fn order(&self, l: (&str, f64), r: (&str, f64)) -> (Ordering, OrderStep) {
        let (lj, rj) = (gpus(l.1), gpus(r.1));
        let (lq, rq) = (id(&self.tree, l.0), id(&self.tree, r.0));
        self.tree.explain_order(
            &QueueCandidate::pending(lq, &lj),
            &QueueCandidate::pending(rq, &rj),
        )
    }

    /// KAI's allocate loop at queue level: repeatedly serve the first of `queues` (each with
    /// pending 1-GPU jobs) while GPUs remain. Returns the number of jobs each queue got.
    fn serve_one_gpu_jobs(&mut self, queues: &[(&str, usize)], mut free: usize) -> Vec<usize> {
        let one = gpus(1.0);
        let mut left: Vec<usize> = queues.iter().map(|(_, n)| *n).collect();
        let mut got = vec![0; queues.len()];
        while free > 0 {
            let candidates: Vec<usize> = (0..queues.len()).filter(|&i| left[i] > 0).collect();
            let Some(best) = candidates.iter().copied().min_by(|&a, &b| {
                let (qa, qb) = (id(&self.tree, queues[a].0), id(&self.tree, queues[b].0));
                self.tree.compare_queues(
                    &QueueCandidate::pending(qa, &one),
                    &QueueCandidate::pending(qb, &one),
                )
            }) else {
                break;
            };
            let q = id(&self.tree, queues[best].0);
            self.tree.allocate(q, &one, Preemptibility::Preemptible);
            left[best] -= 1;
            got[best] += 1;
            free -= 1;
        }
        got
    }
}

#[test]
fn allocate_scenarios_queue_order() {
    // 5: node 1 GPU; q0 and q1 deserved 1, a 1-GPU job each: q0 wins the tie by age.
    let s = Scenario::new(&[("q0", None, 1.0), ("q1", None, 1.0)])
        .pending("q0", 1.0)
        .pending("q1", 1.0)
        .divide(1.0);
    assert_eq!(
        s.order(("q0", 1.0), ("q1", 1.0)),
        (Ordering::Less, OrderStep::Age),
        "scenario 5"
    );

    // 6: q0 deserved 1, q1 deserved 2: q1 first (dominant share 1/2 against 1/1).
    let s = Scenario::new(&[("q0", None, 1.0), ("q1", None, 2.0)])
        .pending("q0", 1.0)
        .pending("q1", 1.0)
        .divide(1.0);
    assert_eq!(
        s.order(("q0", 1.0), ("q1", 1.0)),
        (Ordering::Greater, OrderStep::DominantShareWithJob),
        "scenario 6"
    );

    // 9: d1 (1) {q0 (3), q1 (2)}, d2 (2) {q2 (1)}, node 1 GPU: at the top, d2 has the smaller ratio.
    let mut specs = vec![gpu_queue("d1", None, 1.0, 0.0), gpu_queue("d2", None, 2.0, 0.0)];
    specs.extend([
        gpu_queue("q0", Some("d1"), 3.0, 0.0),
        gpu_queue("q1", Some("d1"), 2.0, 0.0),
        gpu_queue("q2", Some("d2"), 1.0, 0.0),
    ]);
    let mut s = Scenario { tree: build(specs) };
    s = s
        .pending("q0", 1.0)
        .pending("q1", 1.0)
        .pending("q2", 1.0)
        .divide(1.0);
    assert_eq!((gpu_share(&s.tree, "d1"), gpu_share(&s.tree, "d2")), (1.0, 1.0));
    assert_eq!(
        s.order(("d1", 1.0), ("d2", 1.0)),
        (Ordering::Greater, OrderStep::DominantShareWithJob),
        "scenario 9"
    );

    // 17: node 5; q0 (4) runs 2, q1 (2) runs 1; pending q0 2 and q1 1: shares with the job tie
    // (4/4 and 2/2), without it too (2/4 and 1/2); q1's smaller allocatable share wins.
    let s = Scenario::new(&[("q0", None, 4.0), ("q1", None, 2.0)])
        .running("q0", 2.0)
        .running("q1", 1.0)
        .pending("q0", 2.0)
        .pending("q1", 1.0)
        .divide(5.0);
    assert_eq!(
        s.order(("q0", 2.0), ("q1", 1.0)),
        (Ordering::Greater, OrderStep::AllocatableShare),
        "scenario 17"
    );

    // 18: node 4; q0 and q1 (2) each run 1; pending q0 2 and q1 1: q1 is starved, q0 would exceed.
    let s = Scenario::new(&[("q0", None, 2.0), ("q1", None, 2.0)])
        .running("q0", 1.0)
        .running("q1", 1.0)
        .pending("q0", 2.0)
        .pending("q1", 1.0)
        .divide(4.0);
    assert_eq!(
        s.order(("q0", 2.0), ("q1", 1.0)),
        (Ordering::Greater, OrderStep::Starved),
        "scenario 18"
    );
}

#[test]
fn allocate_scenarios_interleave() {
    // 7: node 4; q0 and q1 (1) with three 1-GPU jobs each: two each, interleaved.
    let mut s = Scenario::new(&[("q0", None, 1.0), ("q1", None, 1.0)]);
    for _ in 0..3 {
        s = s.pending("q0", 1.0).pending("q1", 1.0);
    }
    let mut s = s.divide(4.0);
    assert_eq!(
        s.serve_one_gpu_jobs(&[("q0", 3), ("q1", 3)], 4),
        vec![2, 2],
        "scenario 7"
    );

    // 8: node 2; q0..q3 (1) over-subscribed; q0 and q1 with 2 jobs, q2 and q3 with 1: only the
    // first job of q0 and of q1 run.
    let mut s = Scenario::new(&[
        ("q0", None, 1.0),
        ("q1", None, 1.0),
        ("q2", None, 1.0),
        ("q3", None, 1.0),
    ])
    .pending("q0", 2.0)
    .pending("q1", 2.0)
    .pending("q2", 1.0)
    .pending("q3", 1.0)
    .divide(2.0);
    assert_eq!(
        s.serve_one_gpu_jobs(&[("q0", 2), ("q1", 2), ("q2", 1), ("q3", 1)], 2),
        vec![1, 1, 0, 0],
        "scenario 8"
    );
}

#[test]
fn victim_mode_subtracts_victims() {
    // Reclaim "fairness ratio": q0 runs 1, 3 and 4 GPUs with fair share 4; q1 runs nothing.
    // In victim mode q0's popped victims lower its share: with the 4-GPU job popped it is at
    // (8 - 4) / 4 = 1.
    let mut tree = build(vec![
        gpu_queue("q0", None, 1.0, 1.0),
        gpu_queue("q1", None, 1.0, 1.0),
    ]);
    let (q0, q1) = (id(&tree, "q0"), id(&tree, "q1"));
    tree.record_running(q0, &gpus(8.0), Preemptibility::Preemptible);
    tree.record_pending(q1, &gpus(8.0));
    tree.divide(&gpus(8.0));
    assert_eq!(tree.dominant_share(q0, &Resources::ZERO, &gpus(4.0)), 1.0);
    assert_eq!(tree.dominant_share(q0, &Resources::ZERO, &Resources::ZERO), 2.0);
    // q0 (over-utilised on GPU only, so not under KAI's rule) gives up first against q1.
    let none = Resources::ZERO;
    let popped = gpus(4.0);
    let order = tree.compare_victim_queues(
        &QueueCandidate::victims(q0, &popped),
        &QueueCandidate::victims(q1, &none),
    );
    assert_eq!(order, Ordering::Less);
}

#[test]
fn in_quota_priority_option() {
    // Newer KAI `queuePriorityInQuotaReclaim`: both queues stay within deserved with their job, the
    // higher-priority one is over its (over-subscribed) fair share. Off: the under-utilised queue
    // goes first; on: priority decides before that.
    let l = Side {
        deserved: 4.0,
        fair_share: 1.0,
        allocated: 2.0,
        priority: 2,
    };
    let r = Side {
        deserved: 4.0,
        fair_share: 4.0,
        allocated: 0.0,
        priority: 1,
    };
    let one = gpus(1.0);
    let any = FairShareConfig {
        over_utilized: OverUtilizedRule::Any,
        ..FairShareConfig::default()
    };
    let (tree, lq, rq) = hand_set(l, r, 8.0, any);
    assert_eq!(
        tree.explain_order(
            &QueueCandidate::pending(lq, &one),
            &QueueCandidate::pending(rq, &one)
        ),
        (Ordering::Greater, OrderStep::UnderUtilized)
    );
    let config = FairShareConfig {
        queue_priority_in_quota_reclaim: true,
        ..any
    };
    let (tree, lq, rq) = hand_set(l, r, 8.0, config);
    assert_eq!(
        tree.explain_order(
            &QueueCandidate::pending(lq, &one),
            &QueueCandidate::pending(rq, &one)
        ),
        (Ordering::Less, OrderStep::InQuotaPriority)
    );
}

#[test]
fn zero_share_penalty_and_same_queue() {
    // A queue with no allocatable GPU share holding GPUs goes after one that has a share.
    let mut tree = build(vec![
        gpu_queue("a", None, 0.0, 0.0),
        gpu_queue("b", None, 1.0, 0.0),
    ]);
    let (a, b) = (id(&tree, "a"), id(&tree, "b"));
    tree.record_running(a, &gpus(1.0), Preemptibility::Preemptible);
    tree.record_running(b, &gpus(2.0), Preemptibility::Preemptible);
    tree.divide(&gpus(4.0));
    let one = gpus(1.0);
    assert_eq!(
        tree.explain_order(
            &QueueCandidate::pending(a, &one),
            &QueueCandidate::pending(b, &one)
        ),
        (Ordering::Greater, OrderStep::ZeroSharePenalty)
    );
    assert_eq!(
        tree.compare_queues(
            &QueueCandidate::pending(a, &one),
            &QueueCandidate::pending(a, &one)
        ),
        Ordering::Equal
    );
}

#[test]
fn unlimited_allocatable_share_uses_the_cluster_total() {
    // KAI `GetAllocatableShare`: deserved -1 gives the limit; a limit of -1 makes the dominant
    // share use the cluster total (4 of 8 GPUs = 0.5), not the fair share (4 of 4 = 1).
    let mut tree = build(vec![
        gpu_queue("free", None, UNLIMITED, 1.0),
        QueueSpec::new("capped").with_resource(GPU, UNLIMITED, 2.0, 1.0),
    ]);
    let (free, capped) = (id(&tree, "free"), id(&tree, "capped"));
    tree.record_running(free, &gpus(4.0), Preemptibility::Preemptible);
    tree.record_running(capped, &gpus(1.0), Preemptibility::Preemptible);
    tree.divide(&gpus(8.0));
    assert_eq!(gpu_share(&tree, "free"), 4.0);
    assert_eq!(tree.allocatable_share(free, GPU), UNLIMITED);
    assert_eq!(tree.dominant_share(free, &Resources::ZERO, &Resources::ZERO), 0.5);
    assert_eq!(tree.allocatable_share(capped, GPU), 2.0);
    assert_eq!(
        tree.dominant_share(capped, &Resources::ZERO, &Resources::ZERO),
        0.5
    );
}

#[test]
fn order_key_is_the_steps_it_stands_for() {
    // The key's one pass over the slots gives, bit for bit, what each step computes on its own:
    // queues within and over deserved, with a limit, unlimited deserved or limit, no share at all.
    let mut tree = build(vec![
        gpu_queue("within", None, 4.0, 1.0),
        gpu_queue("over", None, 1.0, 1.0),
        QueueSpec::new("capped").with_resource(GPU, 2.0, 3.0, 1.0),
        gpu_queue("free", None, UNLIMITED, 1.0),
        QueueSpec::new("limited").with_resource(GPU, UNLIMITED, 2.0, 1.0),
        gpu_queue("none", None, 0.0, 0.0),
    ]);
    let names = ["within", "over", "capped", "free", "limited", "none"];
    for (i, name) in names.iter().enumerate() {
        let q = id(&tree, name);
        tree.record_running(q, &gpus(i as f64 * 0.75), Preemptibility::Preemptible);
    }
    tree.divide(&gpus(9.0));
    for name in names {
        let q = id(&tree, name);
        for job in [0.0, 0.5, 1.0, 3.0, 12.0] {
            let job = gpus(job);
            let (starved, zero_share, with_job, without) = tree.order_key(q, &job).parts();
            assert_eq!(starved, tree.within_deserved_with(q, &job), "{name}");
            assert_eq!(zero_share, tree.uses_zero_share(q, &job), "{name}");
            let zero = Resources::ZERO;
            assert_eq!(
                with_job.to_bits(),
                tree.dominant_share(q, &job, &zero).to_bits(),
                "{name}"
            );
            assert_eq!(
                without.to_bits(),
                tree.dominant_share(q, &zero, &zero).to_bits(),
                "{name}"
            );
        }
    }
}

#[test]
fn victim_keys_order_victim_queues_as_the_chain_does() {
    // Every pair of queues (within and over deserved, capped, unlimited, without share, under a parent)
    // giving up every amount: the two keys compared, reversed, decide what the chain decides.
    let mut tree = build(vec![
        gpu_queue("within", None, 4.0, 1.0),
        gpu_queue("over", None, 1.0, 1.0),
        QueueSpec::new("capped").with_resource(GPU, 2.0, 3.0, 1.0),
        gpu_queue("free", None, UNLIMITED, 1.0),
        gpu_queue("none", None, 0.0, 0.0),
        gpu_queue("parent", None, 3.0, 1.0),
        gpu_queue("child", Some("parent"), 2.0, 1.0),
    ]);
    let names = ["within", "over", "capped", "free", "none", "child"];
    for (i, name) in names.iter().enumerate() {
        let q = id(&tree, name);
        tree.record_running(q, &gpus(i as f64 * 0.75 + 0.5), Preemptibility::Preemptible);
    }
    tree.divide(&gpus(9.0));
    let amounts = [0.0, 0.5, 1.0, 2.5];
    let mut decided = [0usize; 2];
    for a in names {
        for b in names {
            let (x, y) = tree.levelled(id(&tree, a), id(&tree, b));
            for va in amounts {
                for vb in amounts {
                    let (va, vb) = (gpus(va), gpus(vb));
                    let want = tree.compare_victim_queues(
                        &QueueCandidate::victims(x, &va),
                        &QueueCandidate::victims(y, &vb),
                    );
                    let got = tree
                        .compare_keys(&tree.victim_key(x, &va), &tree.victim_key(y, &vb))
                        .reverse();
                    assert_eq!(got, want, "{a} giving {va:?} against {b} giving {vb:?}");
                    decided[usize::from(want == Ordering::Less)] += 1;
                }
            }
        }
    }
    // Both outcomes occur: the keys are not all alike.
    assert!(decided[0] > 0 && decided[1] > 0, "{decided:?}");
}
