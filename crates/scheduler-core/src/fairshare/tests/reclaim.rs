//! Reclaim golden tests: KAI `reclaimable_test.go` (hand-set queue states), the three reclaim
//! worked examples of reference §2.5, and reclaim scenarios 32-44 of §5.4 at the level of "is this
//! victim set acceptable for this reclaimer".

use super::*;
use crate::model::resources::{CPU, MEMORY};

use Preemptibility::{NonPreemptible, Preemptible};

/// GPU, CPU and memory amounts in KAI's test order (GPU devices, millicores, bytes).
fn share3(gpu: f64, cpu: f64, mem: f64) -> ShareVec {
    ShareVec::ZERO.with(GPU, gpu).with(CPU, cpu).with(MEMORY, mem)
}

fn res3(gpu: f64, cpu: i64, mem: i64) -> Resources {
    Resources::new(cpu, mem, (gpu * 1000.0).round() as i64)
}

/// A queue state set by hand, GPU only unless stated (KAI `queuesTestData`).
#[derive(Clone, Copy)]
struct Hand {
    parent: Option<&'static str>,
    deserved: ShareVec,
    fair_share: ShareVec,
    allocated: Resources,
    allocated_np: Resources,
}

fn gpu_hand(parent: Option<&'static str>, deserved: f64, fair_share: f64, allocated: f64) -> Hand {
    Hand {
        parent,
        deserved: ShareVec::ZERO.with(GPU, deserved),
        fair_share: ShareVec::ZERO.with(GPU, fair_share),
        allocated: gpus(allocated),
        allocated_np: Resources::ZERO,
    }
}

fn hand_tree(queues: &[(&str, Hand)], config: FairShareConfig) -> QueueTree {
    let specs = queues
        .iter()
        .map(|(name, h)| {
            let mut spec = QueueSpec::new(*name);
            spec.deserved = h.deserved;
            spec.parent = h.parent.map(str::to_owned);
            spec
        })
        .collect();
    let mut tree = build_with(specs, config);
    tree.divide(&Resources::ZERO);
    for (name, h) in queues {
        let q = id(&tree, name);
        tree.set_fair_share(q, h.fair_share);
        tree.set_usage_of(
            q,
            QueueUsage {
                allocated: h.allocated,
                allocated_non_preemptible: h.allocated_np,
                requested: h.allocated,
            },
        );
    }
    tree
}

fn validate(
    tree: &QueueTree,
    reclaimer: &str,
    request: &Resources,
    preemptibility: Preemptibility,
    victims: &[(&str, Resources)],
) -> Result<(), ReclaimRejection> {
    let chunks: Vec<VictimChunk> = victims
        .iter()
        .map(|(q, r)| VictimChunk {
            queue: id(tree, q),
            resources: *r,
        })
        .collect();
    let reclaimer = Reclaimer {
        queue: id(tree, reclaimer),
        request,
        preemptibility,
    };
    tree.validate_reclaim(
        tree.accounting(),
        &reclaimer,
        &chunks,
        &mut ReclaimScratch::default(),
    )
}

fn can_reclaim(
    tree: &QueueTree,
    queue: &str,
    request: &Resources,
    preemptibility: Preemptibility,
) -> Result<(), ReclaimRejection> {
    tree.can_reclaim(&Reclaimer {
        queue: id(tree, queue),
        request,
        preemptibility,
    })
}

#[test]
fn can_reclaim_resources() {
    // KAI reclaimable_test "Can Reclaim Resources": (name, request, deserved, fair share,
    // allocated, allocated non-preemptible, preemptible, expected).
    struct Row {
        name: &'static str,
        request: Resources,
        deserved: ShareVec,
        fair_share: ShareVec,
        allocated: Resources,
        allocated_np: Resources,
        preemptibility: Preemptibility,
        ok: bool,
    }
    let base = Row {
        name: "",
        request: res3(1.0, 1000, 1000),
        deserved: ShareVec::ZERO,
        fair_share: share3(2.0, 2000.0, 2000.0),
        allocated: Resources::ZERO,
        allocated_np: Resources::ZERO,
        preemptibility: Preemptible,
        ok: true,
    };
    let big = res3(1000.0, 1, 1000);
    let rows = [
        Row {
            name: "no allocation, below fair share",
            ..base
        },
        Row {
            name: "some allocated, below fair share",
            fair_share: share3(3.0, 3000.0, 3000.0),
            allocated: res3(1.0, 1000, 1000),
            ..base
        },
        Row {
            name: "one resource reaches fair share with the job",
            request: res3(0.0, 500, 1000),
            allocated: res3(1.0, 1000, 1000),
            ..base
        },
        Row {
            name: "exactly at fair share with the job",
            allocated: res3(1.0, 1000, 1000),
            ..base
        },
        Row {
            name: "partially above fair share",
            request: big,
            fair_share: share3(1.0, 1500.0, 3000.0),
            allocated: res3(1.0, 1000, 1000),
            ok: false,
            ..base
        },
        Row {
            name: "fully above fair share",
            request: big,
            fair_share: share3(1.0, 1500.0, 1500.0),
            allocated: res3(1.0, 1000, 1000),
            ok: false,
            ..base
        },
        Row {
            name: "queue partially above fair share without the job",
            request: big,
            fair_share: share3(0.0, 3000.0, 3000.0),
            allocated: res3(1.0, 2000, 1000),
            ok: false,
            ..base
        },
        // Non-preemptible reclaimers.
        Row {
            name: "np: no allocation, below quota",
            deserved: share3(2.0, 2000.0, 2000.0),
            preemptibility: NonPreemptible,
            ..base
        },
        Row {
            name: "np: no allocation, exactly at quota",
            deserved: share3(1.0, 1000.0, 1000.0),
            preemptibility: NonPreemptible,
            ..base
        },
        Row {
            name: "np: fractional GPU exactly at quota (0.1 + 0.2 <= 0.3)",
            request: res3(0.2, 1, 1),
            deserved: share3(0.3, 2.0, 2.0),
            fair_share: share3(0.3, 2.0, 2.0),
            allocated: res3(0.1, 1, 1),
            allocated_np: res3(0.1, 1, 1),
            preemptibility: NonPreemptible,
            ..base
        },
        Row {
            name: "np: no allocation, partially above quota",
            request: big,
            deserved: share3(0.0, 1000.0, 500.0),
            preemptibility: NonPreemptible,
            ok: false,
            ..base
        },
        Row {
            name: "np: some allocated, below quota",
            deserved: share3(3.0, 3000.0, 3000.0),
            fair_share: share3(3.0, 3000.0, 3000.0),
            allocated: res3(1.0, 1000, 1000),
            allocated_np: res3(1.0, 1000, 1000),
            preemptibility: NonPreemptible,
            ..base
        },
        Row {
            name: "np: preemptible allocation, zero quota",
            request: big,
            fair_share: share3(3.0, 3000.0, 3000.0),
            allocated: res3(1.0, 1000, 1000),
            preemptibility: NonPreemptible,
            ok: false,
            ..base
        },
        Row {
            name: "np: partially above quota",
            request: big,
            deserved: share3(0.0, 1500.0, 3000.0),
            fair_share: share3(3.0, 3000.0, 3000.0),
            allocated: res3(1.0, 1000, 1000),
            allocated_np: res3(1.0, 1000, 1000),
            preemptibility: NonPreemptible,
            ok: false,
        },
        Row {
            name: "np: fully above quota",
            request: big,
            deserved: share3(1.0, 1500.0, 1500.0),
            fair_share: share3(3.0, 3000.0, 3000.0),
            allocated: res3(1.0, 1000, 1000),
            allocated_np: res3(1.0, 1000, 1000),
            preemptibility: NonPreemptible,
            ok: false,
        },
    ];
    for row in rows {
        let hand = Hand {
            parent: None,
            deserved: row.deserved,
            fair_share: row.fair_share,
            allocated: row.allocated,
            allocated_np: row.allocated_np,
        };
        let tree = hand_tree(&[("queue1", hand)], FairShareConfig::default());
        assert_eq!(
            can_reclaim(&tree, "queue1", &row.request, row.preemptibility).is_ok(),
            row.ok,
            "{}",
            row.name
        );
    }
    // The fractional case on a quota below the sum fails with a named shortfall.
    let hand = Hand {
        parent: None,
        deserved: share3(0.25, 2.0, 2.0),
        fair_share: share3(0.3, 2.0, 2.0),
        allocated: res3(0.1, 1, 1),
        allocated_np: res3(0.1, 1, 1),
    };
    let tree = hand_tree(&[("queue1", hand)], FairShareConfig::default());
    match can_reclaim(&tree, "queue1", &res3(0.2, 1, 1), NonPreemptible) {
        Err(ReclaimRejection::ReclaimerNonPreemptibleOverQuota(s)) => {
            assert_eq!((s.slot, s.bound, s.requested), (GPU, 0.25, 0.2))
        }
        other => panic!("expected a non-preemptible quota rejection, got {other:?}"),
    }
}

/// KAI reclaimable_test "Single department": p1 (reclaimer) and p2 (reclaimee) under `default`.
fn single_department(p1: Hand, p2: Hand, default: Hand) -> QueueTree {
    hand_tree(
        &[("default", default), ("p1", p1), ("p2", p2)],
        FairShareConfig::default(),
    )
}

#[test]
fn reclaimable_single_department() {
    let p1 = gpu_hand(Some("default"), 3.0, 3.0, 2.0);
    let p2 = gpu_hand(Some("default"), 2.0, 2.0, 3.0);
    let default = gpu_hand(None, 5.0, 5.0, 5.0);
    let one = gpus(1.0);
    let victim = [("p2", gpus(1.0))];
    let with_np = |mut h: Hand, np: f64| {
        h.allocated_np = gpus(np);
        h
    };
    let with_deserved = |mut h: Hand, d: f64| {
        h.deserved = ShareVec::ZERO.with(GPU, d);
        h
    };
    let cases: [(&str, Hand, Hand, Hand, Preemptibility, bool); 10] = [
        (
            "reclaimer below fair share, reclaimee above",
            p1,
            p2,
            default,
            Preemptible,
            true,
        ),
        (
            "reclaimee exactly at fair share",
            p1,
            gpu_hand(Some("default"), 2.0, 2.0, 2.0),
            gpu_hand(None, 5.0, 5.0, 4.0),
            Preemptible,
            false,
        ),
        (
            "both below fair share",
            p1,
            gpu_hand(Some("default"), 2.0, 2.0, 1.0),
            gpu_hand(None, 5.0, 5.0, 3.0),
            Preemptible,
            false,
        ),
        (
            "reclaimee above deserved, within fair share",
            p1,
            gpu_hand(Some("default"), 2.0, 3.0, 3.0),
            default,
            Preemptible,
            true,
        ),
        (
            "reclaimer at fair share, department below its fair share",
            gpu_hand(Some("default"), 3.0, 3.0, 3.0),
            p2,
            gpu_hand(None, 7.0, 10.0, 6.0),
            Preemptible,
            false,
        ),
        (
            "reclaimer at fair share, department above",
            gpu_hand(Some("default"), 3.0, 3.0, 3.0),
            p2,
            gpu_hand(None, 5.0, 5.0, 6.0),
            Preemptible,
            false,
        ),
        (
            "non-preemptible reclaimer above deserved",
            with_deserved(p1, 2.0),
            p2,
            default,
            NonPreemptible,
            true,
        ),
        (
            "non-preemptible, department preemptible above deserved",
            with_deserved(p1, 2.0),
            p2,
            with_deserved(default, 3.0),
            NonPreemptible,
            true,
        ),
        (
            "non-preemptible, department non-preemptible at deserved",
            with_deserved(p1, 2.0),
            p2,
            with_np(with_deserved(default, 3.0), 3.0),
            NonPreemptible,
            false,
        ),
        (
            "department above its fair share",
            with_deserved(p1, 2.0),
            p2,
            gpu_hand(None, 1.0, 1.0, 3.0),
            Preemptible,
            true,
        ),
    ];
    for (name, p1, p2, default, preemptibility, ok) in cases {
        let tree = single_department(p1, p2, default);
        assert_eq!(
            validate(&tree, "p1", &one, preemptibility, &victim).is_ok(),
            ok,
            "{name}"
        );
    }
}

#[test]
fn reclaimable_multiple_departments() {
    // KAI reclaimable_test "Multiple departments": p1 under d1 reclaims 1 GPU from p2 under d2.
    let tree_of = |p1: Hand, d1: Hand, p2: Hand, d2: Hand| {
        hand_tree(
            &[("d1", d1), ("d2", d2), ("p1", p1), ("p2", p2)],
            FairShareConfig::default(),
        )
    };
    let one = gpus(1.0);
    let victim = [("p2", gpus(1.0))];
    let cases = [
        (
            "sanity",
            tree_of(
                gpu_hand(Some("d1"), 3.0, 3.0, 2.0),
                gpu_hand(None, 3.0, 3.0, 2.0),
                gpu_hand(Some("d2"), 2.0, 2.0, 3.0),
                gpu_hand(None, 2.0, 2.0, 3.0),
            ),
            true,
        ),
        (
            "reclaimee department would go below fair share",
            tree_of(
                gpu_hand(Some("d1"), 3.0, 3.0, 2.0),
                gpu_hand(None, 3.0, 3.0, 2.0),
                gpu_hand(Some("d2"), 2.0, 2.0, 2.0),
                gpu_hand(None, 2.0, 2.0, 2.0),
            ),
            false,
        ),
        (
            "reclaimer department below deserved, reclaimee department above deserved within fair share",
            tree_of(
                gpu_hand(Some("d1"), 3.0, 3.0, 1.0),
                gpu_hand(None, 3.0, 3.0, 1.0),
                gpu_hand(Some("d2"), 2.0, 4.0, 3.0),
                gpu_hand(None, 2.0, 4.0, 3.0),
            ),
            true,
        ),
    ];
    for (name, tree, ok) in cases {
        assert_eq!(
            validate(&tree, "p1", &one, Preemptible, &victim).is_ok(),
            ok,
            "{name}"
        );
    }
}

#[test]
fn reclaimable_multiple_levels() {
    // KAI reclaimable_test "Multiple hierarchy levels" (parent, deserved, fair share, allocated).
    let h = gpu_hand;
    let deep_right = [
        ("right-top", h(None, 1.0, 1.0, 2.0)),
        ("right-mid", h(Some("right-top"), 1.0, 1.0, 2.0)),
        ("right-leaf", h(Some("right-mid"), 1.0, 1.0, 2.0)),
    ];
    let mut sanity = vec![
        ("left-top", h(None, 1.0, 1.0, 0.0)),
        ("left-mid", h(Some("left-top"), 1.0, 1.0, 0.0)),
        ("left-leaf", h(Some("left-mid"), 1.0, 1.0, 0.0)),
    ];
    sanity.extend(deep_right);
    let tree = hand_tree(&sanity, FairShareConfig::default());
    assert_eq!(
        validate(
            &tree,
            "left-leaf",
            &gpus(1.0),
            Preemptible,
            &[("right-leaf", gpus(2.0))]
        ),
        Ok(()),
        "sanity"
    );

    let mut over = vec![
        ("left-top", h(None, 1.0, 1.0, 1.0)),
        ("left-top-oq-leaf", h(Some("left-top"), 0.0, 0.0, 1.0)),
        ("left-mid", h(Some("left-top"), 1.0, 1.0, 0.0)),
        ("left-leaf", h(Some("left-mid"), 1.0, 1.0, 0.0)),
    ];
    over.extend(deep_right);
    let tree = hand_tree(&over, FairShareConfig::default());
    let got = validate(
        &tree,
        "left-leaf",
        &gpus(1.0),
        Preemptible,
        &[("right-leaf", gpus(2.0))],
    );
    assert!(
        matches!(got, Err(ReclaimRejection::SaturationNotLower { queue, sibling, .. }) if queue == id(&tree, "left-top") && sibling == id(&tree, "right-top")),
        "reclaimer top queue would go over its fair share: {got:?}"
    );

    let branch = [
        ("top", h(None, 2.0, 2.0, 2.0)),
        ("mid1", h(Some("top"), 1.0, 1.0, 0.5)),
        ("mid2", h(Some("top"), 1.0, 1.0, 1.5)),
        ("left-leaf1", h(Some("mid1"), 1.0, 1.0, 0.0)),
        ("left-leaf2", h(Some("mid1"), 0.0, 0.0, 0.5)),
        ("right-leaf", h(Some("mid2"), 1.0, 1.0, 1.5)),
    ];
    let tree = hand_tree(&branch, FairShareConfig::default());
    assert!(
        validate(
            &tree,
            "left-leaf1",
            &gpus(1.0),
            Preemptible,
            &[("right-leaf", gpus(1.5))]
        )
        .is_err(),
        "same branch: mid1 would go over its fair share"
    );
    for victims in [
        [("right-leaf", gpus(1.5)), ("left-leaf2", gpus(0.5))],
        [("left-leaf2", gpus(0.5)), ("right-leaf", gpus(1.5))],
    ] {
        assert_eq!(
            validate(&tree, "left-leaf1", &gpus(1.0), Preemptible, &victims),
            Ok(()),
            "same branch, reclaim from both"
        );
    }

    let ratio = [
        ("d1", h(None, 4.0, 4.0, 4.0)),
        ("d1-project-1", h(Some("d1"), 3.0, 1.0, 0.0)),
        ("d1-project-2", h(Some("d1"), 1.0, 3.0, 4.0)),
        ("d2", h(None, 3.0, 3.0, 7.0)),
        ("d2-project-1", h(Some("d2"), 3.0, 3.0, 7.0)),
    ];
    let tree = hand_tree(&ratio, FairShareConfig::default());
    assert_eq!(
        validate(
            &tree,
            "d1-project-1",
            &gpus(1.0),
            Preemptible,
            &[("d2-project-1", gpus(1.0))]
        ),
        Ok(()),
        "reclaimer ratio 1.25 stays below the reclaimee's 2"
    );
    // With a saturation multiplier of 2, 1.25 x 2 >= 2: refused.
    let strict = FairShareConfig {
        reclaimer_saturation_multiplier: 2.0,
        ..FairShareConfig::default()
    };
    let tree = hand_tree(&ratio, strict);
    assert!(
        validate(
            &tree,
            "d1-project-1",
            &gpus(1.0),
            Preemptible,
            &[("d2-project-1", gpus(1.0))]
        )
        .is_err()
    );

    // Uninvolved resources: d1's CPU ratio (3) is worse than d2's (1), but neither the reclaimer
    // nor the victims use CPU, so it is not compared.
    let mut uninvolved = vec![
        ("d1", h(None, 4.0, 4.0, 4.0)),
        ("d1-project-1", h(Some("d1"), 1.0, 1.0, 1.0)),
        ("d2", h(None, 3.0, 3.0, 7.0)),
        ("d2-project-1", h(Some("d2"), 3.0, 3.0, 7.0)),
    ];
    uninvolved[0].1.allocated = uninvolved[0].1.allocated.with(CPU, 3000);
    uninvolved[0].1.fair_share = uninvolved[0].1.fair_share.with(CPU, 1000.0);
    uninvolved[2].1.allocated = uninvolved[2].1.allocated.with(CPU, 1000);
    uninvolved[2].1.fair_share = uninvolved[2].1.fair_share.with(CPU, 1000.0);
    let tree = hand_tree(&uninvolved, FairShareConfig::default());
    assert_eq!(
        validate(
            &tree,
            "d1-project-1",
            &gpus(1.0),
            Preemptible,
            &[("d2-project-1", gpus(1.0))]
        ),
        Ok(())
    );
}

#[test]
fn filter_victim_queues() {
    // KAI reclaimable_test "FilterVictim": a 2-GPU reclaimer against one victim queue.
    let h = gpu_hand;
    let cases = [
        (
            "victim strictly under deserved",
            h(None, 4.0, 4.0, 0.0),
            h(None, 4.0, 4.0, 2.0),
            false,
        ),
        (
            "victim over deserved",
            h(None, 4.0, 4.0, 0.0),
            h(None, 0.0, 4.0, 4.0),
            true,
        ),
        (
            "victim exactly at deserved",
            h(None, 4.0, 4.0, 0.0),
            h(None, 2.0, 4.0, 2.0),
            true,
        ),
        (
            "reclaimer over deserved, victim within allocatable",
            h(None, 1.0, 4.0, 0.0),
            h(None, 2.0, 4.0, 3.0),
            false,
        ),
        (
            "reclaimer over deserved, victim over allocatable",
            h(None, 1.0, 4.0, 0.0),
            h(None, 2.0, 4.0, 5.0),
            true,
        ),
    ];
    for (name, reclaimer, victim, keep) in cases {
        let tree = hand_tree(
            &[("reclaimer", reclaimer), ("victim", victim)],
            FairShareConfig::default(),
        );
        let request = gpus(2.0);
        let r = Reclaimer {
            queue: id(&tree, "reclaimer"),
            request: &request,
            preemptibility: Preemptible,
        };
        assert_eq!(tree.may_reclaim_from(&r, id(&tree, "victim")), keep, "{name}");
    }
}

/// Trees as KAI's integration harness builds them: GPU quota and weight per queue, CPU and memory
/// unlimited with weight 1, departments weighted by their deserved GPUs, and an unlimited
/// `default` department when none is given.
struct Harness {
    tree: QueueTree,
}

fn harness_queue(name: &str, parent: Option<&str>, deserved: f64, weight: f64) -> QueueSpec {
    gpu_queue(name, parent, deserved, weight)
        .with_resource(CPU, UNLIMITED, UNLIMITED, 1.0)
        .with_resource(MEMORY, UNLIMITED, UNLIMITED, 1.0)
}

impl Harness {
    /// `departments`: (name, deserved GPUs); `queues`: (name, department, deserved GPUs, weight).
    fn new(departments: &[(&str, f64)], queues: &[(&str, &str, f64, f64)]) -> Self {
        let mut specs: Vec<QueueSpec> = if departments.is_empty() {
            vec![harness_queue("default", None, UNLIMITED, 1.0)]
        } else {
            departments
                .iter()
                .map(|(name, deserved)| harness_queue(name, None, *deserved, *deserved))
                .collect()
        };
        specs.extend(
            queues
                .iter()
                .map(|(name, dept, deserved, weight)| harness_queue(name, Some(dept), *deserved, *weight)),
        );
        Self { tree: build(specs) }
    }

    fn running(mut self, queue: &str, r: Resources, p: Preemptibility) -> Self {
        let q = id(&self.tree, queue);
        self.tree.record_running(q, &r, p);
        self
    }

    fn pending(mut self, queue: &str, r: Resources) -> Self {
        let q = id(&self.tree, queue);
        self.tree.record_pending(q, &r);
        self
    }

    fn divide(mut self, capacity: Resources) -> Self {
        self.tree.divide(&capacity);
        self
    }

    fn share(&self, queue: &str) -> f64 {
        gpu_share(&self.tree, queue)
    }
}

#[test]
fn worked_example_fairness_ratio() {
    // Reference §2.5: 8 GPUs; q0 (1, w1) runs 1, 3 and 4; q1 (1, w1) has two pending 4-GPU jobs.
    let s = Harness::new(&[], &[("q0", "default", 1.0, 1.0), ("q1", "default", 1.0, 1.0)])
        .running("q0", gpus(1.0), Preemptible)
        .running("q0", gpus(3.0), Preemptible)
        .running("q0", gpus(4.0), Preemptible)
        .pending("q1", gpus(4.0))
        .pending("q1", gpus(4.0))
        .divide(gpus(8.0));
    assert_eq!((s.share("q0"), s.share("q1")), (4.0, 4.0));
    let four = gpus(4.0);
    assert_eq!(
        can_reclaim(&s.tree, "q1", &four, Preemptible),
        Ok(()),
        "0 + 4 <= 4"
    );
    assert_eq!(
        validate(&s.tree, "q1", &four, Preemptible, &[("q0", gpus(4.0))]),
        Ok(()),
        "q0 at 8 exceeds 4"
    );
    // Taking the 3-GPU job as well would push q0 below its fair share.
    assert!(matches!(
        validate(
            &s.tree,
            "q1",
            &four,
            Preemptible,
            &[("q0", gpus(4.0)), ("q0", gpus(3.0))]
        ),
        Err(ReclaimRejection::NoStrategy { .. })
    ));
    // After the first reclaim q1 holds 4: its second job may not reclaim (8 > 4).
    let mut tree = s.tree;
    let (q0, q1) = (id(&tree, "q0"), id(&tree, "q1"));
    tree.deallocate(q0, &four, Preemptible);
    tree.allocate(q1, &four, Preemptible);
    assert!(matches!(
        can_reclaim(&tree, "q1", &four, Preemptible),
        Err(ReclaimRejection::ReclaimerOverFairShare(_))
    ));
}

#[test]
fn worked_example_one_gpu_from_remaining() {
    // Reference §2.5: 7 GPUs; q0 (2, w2) runs 4 with 1 pending; q1 (1, w1) runs 3: shares 5 and 2;
    // q0 may reclaim (4 + 1 <= 5) and q1's 3-GPU job is taken (3 > 2).
    let s = Harness::new(&[], &[("q0", "default", 2.0, 2.0), ("q1", "default", 1.0, 1.0)])
        .running("q0", gpus(4.0), Preemptible)
        .pending("q0", gpus(1.0))
        .running("q1", gpus(3.0), Preemptible)
        .divide(gpus(7.0));
    assert_eq!((s.share("q0"), s.share("q1")), (5.0, 2.0));
    let one = gpus(1.0);
    assert_eq!(can_reclaim(&s.tree, "q0", &one, Preemptible), Ok(()));
    assert_eq!(
        validate(&s.tree, "q0", &one, Preemptible, &[("q1", gpus(3.0))]),
        Ok(())
    );
}

#[test]
fn worked_example_queue_priority() {
    // Reference §2.5 and scenario 39: 8 GPUs; q0 (1, w2) 5x1, q1 (1, w1) 3x1, reclaimer (0, w1,
    // priority 101) pending 3. Shares 3, 3, 2: q0 gives 2 jobs, q1 one; a third from q0 is refused.
    let specs = vec![
        harness_queue("default", None, UNLIMITED, 1.0),
        harness_queue("q0", Some("default"), 1.0, 2.0),
        harness_queue("q1", Some("default"), 1.0, 1.0),
        harness_queue("reclaimer", Some("default"), 0.0, 1.0).with_priority(101),
    ];
    let mut s = Harness { tree: build(specs) };
    for _ in 0..5 {
        s = s.running("q0", gpus(1.0), Preemptible);
    }
    for _ in 0..3 {
        s = s.running("q1", gpus(1.0), Preemptible);
    }
    let s = s.pending("reclaimer", gpus(3.0)).divide(gpus(8.0));
    assert_eq!(
        (s.share("reclaimer"), s.share("q0"), s.share("q1")),
        (3.0, 3.0, 2.0)
    );
    let three = gpus(3.0);
    let one = gpus(1.0);
    assert_eq!(can_reclaim(&s.tree, "reclaimer", &three, Preemptible), Ok(()));
    assert_eq!(
        validate(
            &s.tree,
            "reclaimer",
            &three,
            Preemptible,
            &[("q0", one), ("q0", one), ("q1", one)]
        ),
        Ok(())
    );
    assert!(
        validate(
            &s.tree,
            "reclaimer",
            &three,
            Preemptible,
            &[("q0", one), ("q0", one), ("q0", one)]
        )
        .is_err()
    );
}

#[test]
fn reclaim_scenarios_between_queues() {
    let one = gpus(1.0);

    // 32: node 2; q0 and q1 (1, w1); q0 runs a 2-GPU train; q1's 1-GPU train takes it.
    let s = Harness::new(&[], &[("q0", "default", 1.0, 1.0), ("q1", "default", 1.0, 1.0)])
        .running("q0", gpus(2.0), Preemptible)
        .pending("q1", one)
        .divide(gpus(2.0));
    assert_eq!(
        can_reclaim(&s.tree, "q1", &one, Preemptible),
        Ok(()),
        "scenario 32"
    );
    assert_eq!(
        validate(&s.tree, "q1", &one, Preemptible, &[("q0", gpus(2.0))]),
        Ok(()),
        "scenario 32"
    );

    // 33: 2 x 2 GPUs; q0 and q1 (2, w2); q0 runs 1 and 2, q1 runs 1 and wants 1: q0's 2-GPU job.
    let s = Harness::new(&[], &[("q0", "default", 2.0, 2.0), ("q1", "default", 2.0, 2.0)])
        .running("q0", one, Preemptible)
        .running("q0", gpus(2.0), Preemptible)
        .running("q1", one, Preemptible)
        .pending("q1", one)
        .divide(gpus(4.0));
    assert_eq!(
        can_reclaim(&s.tree, "q1", &one, Preemptible),
        Ok(()),
        "scenario 33"
    );
    assert_eq!(
        validate(&s.tree, "q1", &one, Preemptible, &[("q0", gpus(2.0))]),
        Ok(()),
        "scenario 33"
    );

    // 34: as 33 with q1 (1, w1): q1's fair share is 1 (q0 takes the remainder), so no reclaim.
    let s = Harness::new(&[], &[("q0", "default", 2.0, 2.0), ("q1", "default", 1.0, 1.0)])
        .running("q0", one, Preemptible)
        .running("q0", gpus(2.0), Preemptible)
        .running("q1", one, Preemptible)
        .pending("q1", one)
        .divide(gpus(4.0));
    assert_eq!((s.share("q0"), s.share("q1")), (3.0, 1.0), "scenario 34");
    assert!(
        matches!(
            can_reclaim(&s.tree, "q1", &one, Preemptible),
            Err(ReclaimRejection::ReclaimerOverFairShare(_))
        ),
        "scenario 34"
    );

    // 35: node 8; q0 (6, w6) runs 8; q1 (5, w5) wants 5: over-subscribed shares 6 and 5.
    let five = gpus(5.0);
    let s = Harness::new(&[], &[("q0", "default", 6.0, 6.0), ("q1", "default", 5.0, 5.0)])
        .running("q0", gpus(8.0), Preemptible)
        .pending("q1", five)
        .divide(gpus(8.0));
    assert_eq!((s.share("q0"), s.share("q1")), (6.0, 5.0), "scenario 35");
    assert_eq!(
        can_reclaim(&s.tree, "q1", &five, Preemptible),
        Ok(()),
        "scenario 35"
    );
    assert_eq!(
        validate(&s.tree, "q1", &five, Preemptible, &[("q0", gpus(8.0))]),
        Ok(()),
        "scenario 35"
    );
}

#[test]
fn unlimited_deserved_is_never_reclaimed_from() {
    // KAI reclaim_test "unlimited GPU quota, should not reclaim": q0 (deserved -1) runs 4 on a
    // 4-GPU node; q1 (deserved 2) wants 2. q1 may try (0 + 2 <= 2) but no strategy takes from a
    // queue whose allocatable share is unlimited and which cannot be above an unlimited quota.
    let two = gpus(2.0);
    let s = Harness::new(
        &[],
        &[("q0", "default", UNLIMITED, 0.0), ("q1", "default", 2.0, 0.0)],
    )
    .running("q0", gpus(4.0), Preemptible)
    .pending("q1", two)
    .divide(gpus(4.0));
    assert_eq!((s.share("q0"), s.share("q1")), (4.0, 2.0));
    assert_eq!(can_reclaim(&s.tree, "q1", &two, Preemptible), Ok(()));
    assert!(matches!(
        validate(&s.tree, "q1", &two, Preemptible, &[("q0", gpus(4.0))]),
        Err(ReclaimRejection::NoStrategy { .. })
    ));
    let r = Reclaimer {
        queue: id(&s.tree, "q1"),
        request: &two,
        preemptibility: Preemptible,
    };
    // KAI's cheap victim filter skips unlimited quotas and keeps the queue; the validator decides.
    assert!(s.tree.may_reclaim_from(&r, id(&s.tree, "q0")));
}

#[test]
fn reclaim_scenarios_between_departments() {
    let one = gpus(1.0);

    // 36: node 2; d1 (1) -> q0 (1) runs a train and a build; d2 (1) -> q1 (1) wants 1 (train or
    // build): the train is taken.
    let s = Harness::new(
        &[("d1", 1.0), ("d2", 1.0)],
        &[("q0", "d1", 1.0, 0.0), ("q1", "d2", 1.0, 0.0)],
    )
    .running("q0", one, Preemptible)
    .running("q0", one, NonPreemptible)
    .pending("q1", one)
    .divide(gpus(2.0));
    for p in [Preemptible, NonPreemptible] {
        assert_eq!(can_reclaim(&s.tree, "q1", &one, p), Ok(()), "scenario 36 {p:?}");
        assert_eq!(
            validate(&s.tree, "q1", &one, p, &[("q0", one)]),
            Ok(()),
            "scenario 36 {p:?}"
        );
    }

    // 37: node 4; d1 (2) -> q0 (1, w1) runs 3; d2 (2) -> {q1 (1, w1) running a 1-GPU build and
    // wanting 2, q2 (1, w1)}: refused, d2 would exceed its fair share.
    let s = Harness::new(
        &[("d1", 2.0), ("d2", 2.0)],
        &[
            ("q0", "d1", 1.0, 1.0),
            ("q1", "d2", 1.0, 1.0),
            ("q2", "d2", 1.0, 1.0),
        ],
    )
    .running("q0", gpus(3.0), Preemptible)
    .running("q1", one, NonPreemptible)
    .pending("q1", gpus(2.0))
    .divide(gpus(4.0));
    let two = gpus(2.0);
    assert!(
        matches!(
            can_reclaim(&s.tree, "q1", &two, Preemptible),
            Err(ReclaimRejection::ReclaimerOverFairShare(_))
        ),
        "scenario 37"
    );
    let (d1, d2) = (id(&s.tree, "d1"), id(&s.tree, "d2"));
    assert!(
        matches!(validate(&s.tree, "q1", &two, Preemptible, &[("q0", gpus(3.0))]),
            Err(ReclaimRejection::SaturationNotLower { queue, sibling, .. }) if queue == d2 && sibling == d1),
        "scenario 37: the validator refuses as well"
    );

    // 38: node 8; d1 (1) -> q0 (1, w1) runs 4 and 1; d2 (1) -> q1 (1, w1) wants 4: shares 4/4; the
    // 1-GPU train alone is enough, taking both jobs is refused.
    let four = gpus(4.0);
    let s = Harness::new(
        &[("d1", 1.0), ("d2", 1.0)],
        &[("q0", "d1", 1.0, 1.0), ("q1", "d2", 1.0, 1.0)],
    )
    .running("q0", four, Preemptible)
    .running("q0", one, Preemptible)
    .pending("q1", four)
    .divide(gpus(8.0));
    assert_eq!(
        (s.share("d1"), s.share("d2"), s.share("q0"), s.share("q1")),
        (4.0, 4.0, 4.0, 4.0),
        "scenario 38"
    );
    assert_eq!(
        can_reclaim(&s.tree, "q1", &four, Preemptible),
        Ok(()),
        "scenario 38"
    );
    assert_eq!(
        validate(&s.tree, "q1", &four, Preemptible, &[("q0", one)]),
        Ok(()),
        "scenario 38"
    );
    assert!(
        validate(&s.tree, "q1", &four, Preemptible, &[("q0", one), ("q0", four)]).is_err(),
        "scenario 38"
    );

    // 40: node 4; d1 (0) -> q0 (1, w1) runs 2; d2 (4) -> {q1 (0, w0) runs 2, q2 (4, w4) wants 4}:
    // both running jobs go (one from another department, one from a sibling).
    let s = Harness::new(
        &[("d1", 0.0), ("d2", 4.0)],
        &[
            ("q0", "d1", 1.0, 1.0),
            ("q1", "d2", 0.0, 0.0),
            ("q2", "d2", 4.0, 4.0),
        ],
    )
    .running("q0", gpus(2.0), Preemptible)
    .running("q1", gpus(2.0), Preemptible)
    .pending("q2", four)
    .divide(gpus(4.0));
    assert_eq!(
        (
            s.share("d1"),
            s.share("d2"),
            s.share("q0"),
            s.share("q1"),
            s.share("q2")
        ),
        (0.0, 4.0, 1.0, 0.0, 4.0),
        "scenario 40"
    );
    assert_eq!(
        can_reclaim(&s.tree, "q2", &four, Preemptible),
        Ok(()),
        "scenario 40"
    );
    for victims in [
        [("q0", gpus(2.0)), ("q1", gpus(2.0))],
        [("q1", gpus(2.0)), ("q0", gpus(2.0))],
    ] {
        assert_eq!(
            validate(&s.tree, "q2", &four, Preemptible, &victims),
            Ok(()),
            "scenario 40 {victims:?}"
        );
    }
}

#[test]
fn reclaim_scenario_drf() {
    // 44 ("DRF - reclaim from queue that has one resource over fair share"): node 8000m CPU and
    // 3e10 bytes; q0 and q1 deserve 1500m CPU and 1500 MB. q0 runs (1500m, 1.5e10) and (500m,
    // 7.5e9): memory over its share; q1 runs (100m, 7.5e9) and wants the same again.
    let job = |cpu: i64, mem: i64| Resources::new(cpu, mem, 0);
    let queue = |name: &str| {
        QueueSpec::new(name)
            .with_parent("default")
            .with_resource(GPU, 0.0, UNLIMITED, 0.0)
            .with_resource(CPU, 1500.0, UNLIMITED, 1.0)
            .with_resource(MEMORY, 1500.0 * 1e6, UNLIMITED, 1.0)
    };
    let specs = vec![
        harness_queue("default", None, UNLIMITED, 1.0),
        queue("queue0"),
        queue("queue1"),
    ];
    let mut s = Harness { tree: build(specs) };
    s = s
        .running("queue0", job(1500, 15_000_000_000), Preemptible)
        .running("queue0", job(500, 7_500_000_000), Preemptible)
        .running("queue1", job(100, 7_500_000_000), Preemptible)
        .pending("queue1", job(100, 7_500_000_000))
        .divide(job(8000, 30_000_000_000));
    let (q0, q1) = (id(&s.tree, "queue0"), id(&s.tree, "queue1"));
    assert_eq!(
        (s.tree.fair_share(q0).get(CPU), s.tree.fair_share(q0).get(MEMORY)),
        (2000.0, 1.5e10)
    );
    assert_eq!(
        (s.tree.fair_share(q1).get(CPU), s.tree.fair_share(q1).get(MEMORY)),
        (200.0, 1.5e10)
    );
    let request = job(100, 7_500_000_000);
    assert_eq!(can_reclaim(&s.tree, "queue1", &request, Preemptible), Ok(()));
    assert_eq!(
        validate(
            &s.tree,
            "queue1",
            &request,
            Preemptible,
            &[("queue0", job(500, 7_500_000_000))]
        ),
        Ok(())
    );

    // "DRF - queue cannot reclaim if one of its resources is over fair share": q1 already holds
    // more memory than its (limited) fair share.
    let limited = |name: &str| {
        QueueSpec::new(name)
            .with_parent("default")
            .with_resource(GPU, 0.0, UNLIMITED, 0.0)
            .with_resource(CPU, 2000.0, 3000.0, 1.0)
            .with_resource(MEMORY, 2000.0 * 1e6, 3000.0 * 1e6, 1.0)
    };
    let specs = vec![
        harness_queue("default", None, UNLIMITED, 1.0),
        limited("queue0"),
        limited("queue1"),
    ];
    let mut s = Harness { tree: build(specs) };
    s = s
        .running("queue0", job(2500, 10_000_000_000), Preemptible)
        .pending("queue0", job(400, 4_000_000_000))
        .running("queue0", job(500, 20_000_000_000), Preemptible)
        .running("queue1", job(500, 10_000_000_000), Preemptible)
        .pending("queue1", job(1000, 10_000_000_000))
        .divide(job(4000, 40_000_000_000));
    match can_reclaim(&s.tree, "queue1", &job(1000, 10_000_000_000), Preemptible) {
        Err(ReclaimRejection::ReclaimerOverFairShare(short)) => {
            assert_eq!((short.slot, short.bound), (MEMORY, 3e9))
        }
        other => panic!("expected an over-fair-share rejection, got {other:?}"),
    }
}

#[test]
fn elastic_chunks_and_moved_victims() {
    let one = gpus(1.0);
    let task = |moved| VictimTask {
        resources: one,
        moved,
    };

    // KAI proportion_test "getVictimResources": minAvailable vs task count.
    let tree = build(vec![gpu_queue("q0", None, 1.0, 1.0)]);
    let q0 = id(&tree, "q0");
    let chunk_sizes = |min_available: usize, tasks: &[VictimTask], ignore_moved: bool| {
        let mut out = Vec::new();
        push_victim_chunks(
            q0,
            &[VictimPodSet { min_available, tasks }],
            ignore_moved,
            &mut out,
        );
        out.iter().map(|c| c.resources.gpu()).collect::<Vec<_>>()
    };
    assert_eq!(
        chunk_sizes(2, &[task(false)], true),
        vec![1000],
        "minAvailable above the task count: one core chunk"
    );
    assert_eq!(
        chunk_sizes(1, &[task(false); 3], true),
        vec![1000, 1000, 1000],
        "two elastic tasks and a core of one"
    );
    assert_eq!(
        chunk_sizes(2, &[task(false); 2], true),
        vec![2000],
        "all core: one lump"
    );
    assert_eq!(
        chunk_sizes(0, &[task(false); 2], true),
        vec![1000, 1000],
        "minAvailable 0: all elastic"
    );
    assert_eq!(
        chunk_sizes(1, &[task(false), task(true), task(false)], true),
        vec![1000, 1000],
        "a moved elastic task counts nothing"
    );
    assert_eq!(
        chunk_sizes(1, &[task(true), task(true)], true),
        Vec::<i64>::new(),
        "everything moved: no chunk"
    );
    assert_eq!(
        chunk_sizes(1, &[task(true), task(true)], false),
        vec![1000, 1000],
        "without consolidating reclaim moved tasks count"
    );

    // Elastic granularity matters: q0 holds 3 GPUs with a fair share of 1. Taking an elastic job
    // (minAvailable 1) entirely is refused at the core chunk (q0 would be at its share), while a
    // rigid gang of 3 is one lump taken while q0 is still over its share.
    let s = Harness::new(&[], &[("q0", "default", 1.0, 0.0), ("q1", "default", 1.0, 0.0)])
        .running("q0", gpus(3.0), Preemptible)
        .pending("q1", one)
        .divide(gpus(3.0));
    let tree = &s.tree;
    let q0 = id(tree, "q0");
    let reclaimer = Reclaimer {
        queue: id(tree, "q1"),
        request: &one,
        preemptibility: Preemptible,
    };
    let tasks = [task(false); 3];
    for (min_available, ok) in [(1, false), (3, true)] {
        let mut chunks = Vec::new();
        push_victim_chunks(
            q0,
            &[VictimPodSet {
                min_available,
                tasks: &tasks,
            }],
            true,
            &mut chunks,
        );
        let got = tree.validate_reclaim(
            tree.accounting(),
            &reclaimer,
            &chunks,
            &mut ReclaimScratch::default(),
        );
        assert_eq!(got.is_ok(), ok, "minAvailable {min_available}: {got:?}");
    }

    // Scenario 41: q0 (1, w0) runs an elastic job of 2 pods; q1 (2, w1) got one pod from idle
    // capacity and wants a second: q0's extra pod is taken; a third pod for q1 is refused.
    let s = Harness::new(&[], &[("q0", "default", 1.0, 0.0), ("q1", "default", 2.0, 1.0)])
        .running("q0", one, Preemptible)
        .running("q0", one, Preemptible)
        .running("q1", one, Preemptible)
        .pending("q1", one)
        .pending("q1", one)
        .divide(gpus(3.0));
    assert_eq!((s.share("q0"), s.share("q1")), (1.0, 2.0));
    assert_eq!(can_reclaim(&s.tree, "q1", &one, Preemptible), Ok(()));
    let mut chunks = Vec::new();
    push_victim_chunks(
        id(&s.tree, "q0"),
        &[VictimPodSet {
            min_available: 1,
            tasks: &[task(false)],
        }],
        true,
        &mut chunks,
    );
    let reclaimer = Reclaimer {
        queue: id(&s.tree, "q1"),
        request: &one,
        preemptibility: Preemptible,
    };
    assert_eq!(
        s.tree.validate_reclaim(
            s.tree.accounting(),
            &reclaimer,
            &chunks,
            &mut ReclaimScratch::default()
        ),
        Ok(())
    );
    let mut tree = s.tree;
    let (q0, q1) = (id(&tree, "q0"), id(&tree, "q1"));
    tree.deallocate(q0, &one, Preemptible);
    tree.allocate(q1, &one, Preemptible);
    assert!(
        can_reclaim(&tree, "q1", &one, Preemptible).is_err(),
        "scenario 41: the third pod stays pending"
    );

    // Scenarios 42/43: q1 (deserved 1) within its share runs 0.5. If the simulation moved that pod
    // (consolidation), it counts nothing and the reclaim is fine; evicted for real, it is refused.
    let half = gpus(0.5);
    let s = Harness::new(
        &[],
        &[
            ("q0", "default", 0.0, 0.0),
            ("q1", "default", 1.0, 0.0),
            ("q2", "default", 2.0, 0.0),
        ],
    )
    .running("q0", half, Preemptible)
    .running("q1", half, Preemptible)
    .pending("q2", one)
    .divide(gpus(2.0));
    let q1 = id(&s.tree, "q1");
    let reclaimer = Reclaimer {
        queue: id(&s.tree, "q2"),
        request: &one,
        preemptibility: Preemptible,
    };
    for (moved, ok) in [(true, true), (false, false)] {
        let mut chunks = Vec::new();
        let tasks = [VictimTask {
            resources: half,
            moved,
        }];
        push_victim_chunks(
            q1,
            &[VictimPodSet {
                min_available: 1,
                tasks: &tasks,
            }],
            true,
            &mut chunks,
        );
        let got = s.tree.validate_reclaim(
            s.tree.accounting(),
            &reclaimer,
            &chunks,
            &mut ReclaimScratch::default(),
        );
        assert_eq!(got.is_ok(), ok, "moved {moved}: {got:?}");
    }
    // Scenario 43: q0's 0.7 pod (no deserved) evicted for real is acceptable.
    let s = Harness::new(
        &[],
        &[
            ("q0", "default", 0.0, 0.0),
            ("q1", "default", 0.0, 0.0),
            ("q2", "default", 2.0, 0.0),
        ],
    )
    .running("q0", gpus(0.7), Preemptible)
    .running("q1", gpus(0.7), Preemptible)
    .pending("q2", one)
    .divide(gpus(2.0));
    assert_eq!(
        validate(&s.tree, "q2", &one, Preemptible, &[("q1", gpus(0.7))]),
        Ok(()),
        "scenario 43"
    );
}

#[test]
fn rejection_explanations() {
    let s = Harness::new(
        &[("d1", 2.0), ("d2", 2.0)],
        &[
            ("q0", "d1", 1.0, 1.0),
            ("q1", "d2", 1.0, 1.0),
            ("q2", "d2", 1.0, 1.0),
        ],
    )
    .running("q0", gpus(3.0), Preemptible)
    .running("q1", gpus(1.0), NonPreemptible)
    .pending("q1", gpus(2.0))
    .divide(gpus(4.0));
    let names = crate::model::resources::ResourceNames::default();
    let two = gpus(2.0);
    let err = validate(&s.tree, "q1", &two, Preemptible, &[("q0", gpus(3.0))]).expect_err("scenario 37");
    assert_eq!(
        err.explain(&s.tree, &names),
        "queue d2 would use 1.50x its fair share of nvidia.com/gpu, not less than queue d1 at 0.00x"
    );
    let err = can_reclaim(&s.tree, "q1", &two, Preemptible).expect_err("over fair share");
    assert_eq!(
        err.explain(&s.tree, &names),
        "queue q1 at its nvidia.com/gpu fair share 2: allocated 1, gang needs 2"
    );
}
