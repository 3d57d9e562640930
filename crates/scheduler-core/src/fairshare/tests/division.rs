//! Division golden tests: KAI `resource_division_test.go`, `proportion_test.go` and the fair
//! shares of the reclaim worked examples (reference §2.5).

use super::*;
use crate::fairshare::division::{DivisionEntry, DivisionScratch, divide_over_quota, divide_resource};
use crate::model::resources::{CPU, MEMORY};

/// An entry: deserved, weight, limit, request. Rank = position (set by `run`).
fn q(deserved: f64, weight: f64, limit: f64, request: f64) -> DivisionEntry {
    DivisionEntry {
        weight,
        limit,
        ..DivisionEntry::new(deserved, request, 0)
    }
}

fn with_priority(mut e: DivisionEntry, priority: i32) -> DivisionEntry {
    e.priority = priority;
    e
}

fn with_share(mut e: DivisionEntry, fair_share: f64) -> DivisionEntry {
    e.fair_share = fair_share;
    e
}

enum Phase {
    /// `setResourceShare`: deserved phase then over quota.
    Full,
    /// `divideOverQuotaResource` alone, on preset fair shares.
    OverQuota,
}

struct Case {
    name: &'static str,
    phase: Phase,
    total: f64,
    k_value: f64,
    queues: Vec<DivisionEntry>,
    remaining: f64,
    shares: Vec<f64>,
}

fn run(case: &Case) -> (f64, Vec<f64>) {
    let mut entries: Vec<DivisionEntry> = case.queues.clone();
    for (i, e) in entries.iter_mut().enumerate() {
        e.rank = i as u32;
    }
    let mut scratch = DivisionScratch::default();
    let remaining = match case.phase {
        Phase::Full => divide_resource(case.total, case.k_value, &mut entries, &mut scratch),
        Phase::OverQuota => divide_over_quota(case.total, case.k_value, &mut entries, &mut scratch),
    };
    (remaining, entries.iter().map(|e| e.fair_share).collect())
}

fn check(cases: &[Case]) {
    for case in cases {
        let (remaining, shares) = run(case);
        assert_eq!(remaining, case.remaining, "{}: remaining", case.name);
        assert_eq!(shares, case.shares, "{}: fair shares", case.name);
    }
}

const NO_LIMIT: f64 = UNLIMITED;

#[test]
fn resource_division_single_queue_within_quota() {
    // KAI: "setResourceShare - GPU / single queue within quota (sanity)", kValue 0.
    let base = q(3.0, 0.0, NO_LIMIT, 2.0);
    let full = |name, total, queue, remaining, share| Case {
        name,
        phase: Phase::Full,
        total,
        k_value: 0.0,
        queues: vec![queue],
        remaining,
        shares: vec![share],
    };
    check(&[
        full("gives requested GPUs - no remaining", 2.0, base, 0.0, 2.0),
        full("gives requested GPUs with remaining", 3.0, base, 1.0, 2.0),
        full(
            "doesn't give more GPUs than allowed",
            3.0,
            q(3.0, 0.0, 2.0, 2.0),
            1.0,
            2.0,
        ),
        full("gives up to deserved when over subscribed", 1.0, base, 0.0, 2.0),
        full(
            "gives up to full quota",
            7.0,
            q(3.0, 0.0, NO_LIMIT, 5.0),
            4.0,
            3.0,
        ),
        full(
            "gives with fraction, if stated in deserved",
            2.0,
            q(1.5, 0.0, NO_LIMIT, 2.0),
            0.5,
            1.5,
        ),
        full(
            "gives with fraction, if stated in request",
            2.0,
            q(3.0, 0.0, NO_LIMIT, 1.5),
            0.5,
            1.5,
        ),
        full(
            "doesn't give if deserved is zero",
            2.0,
            q(0.0, 0.0, NO_LIMIT, 2.0),
            2.0,
            0.0,
        ),
    ]);
}

#[test]
fn resource_division_single_queue_over_quota() {
    // KAI: "single queue over quota (sanity)": divideOverQuotaResource on fair share 3, request 5.
    let base = with_share(q(3.0, 1.0, NO_LIMIT, 5.0), 3.0);
    let over = |name, total, queue, remaining, share| Case {
        name,
        phase: Phase::OverQuota,
        total,
        k_value: 0.0,
        queues: vec![queue],
        remaining,
        shares: vec![share],
    };
    check(&[
        over("gives requested GPUs no remaining", 2.0, base, 0.0, 5.0),
        over("gives requested GPUs with remaining", 3.0, base, 1.0, 5.0),
        over(
            "doesn't give more GPUs than allowed",
            2.0,
            DivisionEntry { limit: 4.0, ..base },
            1.0,
            4.0,
        ),
        over(
            "doesn't give when over quota weight is zero",
            2.0,
            DivisionEntry { weight: 0.0, ..base },
            2.0,
            3.0,
        ),
        over(
            "gives with fraction if requested",
            2.0,
            DivisionEntry { request: 4.5, ..base },
            0.5,
            4.5,
        ),
        over("gives remainder fraction", 0.5, base, 0.0, 3.5),
        over(
            "gives when deserved is zero",
            6.0,
            with_share(q(0.0, 1.0, NO_LIMIT, 5.0), 0.0),
            1.0,
            5.0,
        ),
        over(
            "doesn't break when there are zero resources to divide",
            0.0,
            base,
            0.0,
            3.0,
        ),
        over(
            "doesn't give when over quota weight is zero (10)",
            10.0,
            DivisionEntry { weight: 0.0, ..base },
            10.0,
            3.0,
        ),
    ]);
    // "two queues over quota (sanity)": queue 1 with weight 0 gets nothing of 10.
    check(&[Case {
        name: "two queues over quota: weight zero",
        phase: Phase::OverQuota,
        total: 10.0,
        k_value: 0.0,
        queues: vec![
            with_share(q(3.0, 0.0, NO_LIMIT, 5.0), 3.0),
            with_share(q(3.0, 1.0, NO_LIMIT, 3.0), 3.0),
        ],
        remaining: 10.0,
        shares: vec![3.0, 3.0],
    }]);
}

#[test]
fn resource_division_two_queues() {
    // KAI: DescribeTable "two queues" (reference §2.5 first list): both deserved 2, weight 2,
    // request 6, no limit; queue 1 is the older.
    struct Row {
        name: &'static str,
        total: f64,
        weights: [f64; 2],
        requests: [f64; 2],
        limits: [f64; 2],
        priorities: [i32; 2],
        remaining: f64,
        shares: [f64; 2],
    }
    let base = Row {
        name: "",
        total: 0.0,
        weights: [2.0, 2.0],
        requests: [6.0, 6.0],
        limits: [NO_LIMIT, NO_LIMIT],
        priorities: [0, 0],
        remaining: 0.0,
        shares: [0.0, 0.0],
    };
    let rows = [
        Row {
            name: "allocates many available gpus",
            total: 15.0,
            remaining: 3.0,
            shares: [6.0, 6.0],
            ..base
        },
        Row {
            name: "allocates exact requested amount gpus",
            total: 12.0,
            shares: [6.0, 6.0],
            ..base
        },
        Row {
            name: "allocates GPUs proportionally",
            total: 8.0,
            weights: [1.0, 3.0],
            shares: [3.0, 5.0],
            ..base
        },
        Row {
            name: "doesn't allocate more than allowed",
            total: 12.0,
            limits: [5.0, NO_LIMIT],
            remaining: 1.0,
            shares: [5.0, 6.0],
            ..base
        },
        Row {
            name: "distributes remainder based on largest remaining (1.4/5.6 -> 3 and 8)",
            total: 11.0,
            weights: [1.0, 4.0],
            requests: [10.0, 10.0],
            shares: [3.0, 8.0],
            ..base
        },
        Row {
            name: "distributes remainder based on creation time (6 and 5)",
            total: 11.0,
            shares: [6.0, 5.0],
            ..base
        },
        Row {
            name: "priority doesn't affect deserved",
            total: 4.0,
            priorities: [1, 2],
            shares: [2.0, 2.0],
            ..base
        },
        Row {
            name: "priority does affect over-quota",
            total: 6.0,
            priorities: [1, 2],
            shares: [2.0, 4.0],
            ..base
        },
        Row {
            name: "priority does affect over-quota, even when overQuotaWeight is set",
            total: 6.0,
            weights: [100.0, 1.0],
            priorities: [1, 2],
            shares: [2.0, 4.0],
            ..base
        },
    ];
    for k_value in [0.0, 1.0] {
        let cases: Vec<Case> = rows
            .iter()
            .map(|r| Case {
                name: r.name,
                phase: Phase::Full,
                total: r.total,
                k_value,
                queues: (0..2)
                    .map(|i| with_priority(q(2.0, r.weights[i], r.limits[i], r.requests[i]), r.priorities[i]))
                    .collect(),
                remaining: r.remaining,
                shares: r.shares.to_vec(),
            })
            .collect();
        check(&cases);
    }
}

#[test]
fn resource_division_priorities_and_remainder() {
    check(&[
        // KAI: "divides the remainder even when using priorities".
        Case {
            name: "remainder within the top bucket goes to the older queue",
            phase: Phase::Full,
            total: 5.0,
            k_value: 0.0,
            queues: vec![
                with_priority(q(2.0, 2.0, NO_LIMIT, 5.0), 2),
                with_priority(q(2.0, 2.0, NO_LIMIT, 5.0), 2),
                with_priority(q(1.0, 2.0, NO_LIMIT, 0.0), 1),
            ],
            remaining: 0.0,
            shares: vec![3.0, 2.0, 0.0],
        },
        // KAI: "does not give rounding remainder to lower-priority queues while higher-priority
        // queues are unsatisfied".
        Case {
            name: "no remainder to a lower bucket",
            phase: Phase::OverQuota,
            total: 3.0,
            k_value: 0.0,
            queues: vec![
                with_share(with_priority(q(1.0, 1.0, NO_LIMIT, 5.0), 2), 1.0),
                with_share(with_priority(q(1.0, 1.0, NO_LIMIT, 5.0), 2), 1.0),
                with_share(with_priority(q(1.0, 1.0, NO_LIMIT, 5.0), 1), 1.0),
            ],
            remaining: 0.0,
            shares: vec![3.0, 2.0, 1.0],
        },
        // The remainder pass hands out at most one unit per queue: offers of 5/3 floor to 1 each,
        // the 2 left go one each to the two oldest of the three equal fractions.
        Case {
            name: "remainder one unit per queue",
            phase: Phase::Full,
            total: 5.0,
            k_value: 1.0,
            queues: vec![q(0.0, 1.0, NO_LIMIT, 10.0); 3],
            remaining: 0.0,
            shares: vec![2.0, 2.0, 1.0],
        },
        // KAI quirk, kept: the remainder pass ignores how much a queue still needs. Four queues
        // are offered 1.25 each and floored to 1; the first needs only 0.5 more, yet the leftover
        // unit goes to it (oldest among equal fractions), giving it 2 for a request of 1.5.
        Case {
            name: "remainder may exceed the request",
            phase: Phase::Full,
            total: 5.0,
            k_value: 1.0,
            queues: vec![
                q(0.0, 1.0, NO_LIMIT, 1.5),
                q(0.0, 1.0, NO_LIMIT, 10.0),
                q(0.0, 1.0, NO_LIMIT, 10.0),
                q(0.0, 1.0, NO_LIMIT, 10.0),
            ],
            remaining: 0.0,
            shares: vec![2.0, 1.0, 1.0, 1.0],
        },
        // Deserved -1 means "the whole total" in the deserved phase, before any weight applies.
        Case {
            name: "unlimited deserved",
            phase: Phase::Full,
            total: 6.0,
            k_value: 1.0,
            queues: vec![q(UNLIMITED, 0.0, NO_LIMIT, 5.0), q(0.0, 1.0, NO_LIMIT, 5.0)],
            remaining: 0.0,
            shares: vec![5.0, 1.0],
        },
        // Reference §2.5: "One queue with deserved 3, request 2 and total 1 gets 2".
        Case {
            name: "deserved phase over-subscribes",
            phase: Phase::Full,
            total: 1.0,
            k_value: 1.0,
            queues: vec![q(3.0, 1.0, NO_LIMIT, 2.0)],
            remaining: 0.0,
            shares: vec![2.0],
        },
    ]);
}

#[test]
fn resource_division_cpu_and_memory() {
    // KAI: "setResourceShare - CPU" and "- memory" (identical numbers; units are millicores and
    // bytes, and nothing here depends on which).
    let three = |requests: [f64; 3], limit1: f64| {
        vec![
            q(5000.0, 5000.0, limit1, requests[0]),
            q(5000.0, 5000.0, NO_LIMIT, requests[1]),
            q(5000.0, 5000.0, NO_LIMIT, requests[2]),
        ]
    };
    let full = |name, total, queues, shares: Vec<f64>, remaining| Case {
        name,
        phase: Phase::Full,
        total,
        k_value: 0.0,
        queues,
        remaining,
        shares,
    };
    check(&[
        full(
            "one queue: gives requested",
            3000.0,
            vec![q(3000.0, 3000.0, NO_LIMIT, 2000.0)],
            vec![2000.0],
            1000.0,
        ),
        full(
            "one queue: deserved in over subscription",
            1000.0,
            vec![q(3000.0, 3000.0, NO_LIMIT, 2000.0)],
            vec![2000.0],
            0.0,
        ),
        full(
            "two queues: queue 2 without deserved gets nothing",
            10000.0,
            vec![
                q(5000.0, 5000.0, NO_LIMIT, 10000.0),
                q(0.0, 0.0, NO_LIMIT, 5000.0),
            ],
            vec![10000.0, 0.0],
            0.0,
        ),
        full(
            "three queues: over subscription",
            10000.0,
            three([5000.0; 3], NO_LIMIT),
            vec![5000.0; 3],
            0.0,
        ),
        full(
            "three queues: over quota",
            18000.0,
            three([6000.0; 3], NO_LIMIT),
            vec![6000.0; 3],
            0.0,
        ),
        full(
            "one queue requests more than it deserves",
            10000.0,
            three([7000.0, 2000.0, 2000.0], NO_LIMIT),
            vec![6000.0, 2000.0, 2000.0],
            0.0,
        ),
        full(
            "two queues request their deserved",
            10000.0,
            three([7000.0, 5000.0, 2000.0], NO_LIMIT),
            vec![5000.0, 5000.0, 2000.0],
            0.0,
        ),
        full(
            "one queue requests more than it deserves and allowed",
            10000.0,
            three([7000.0, 2000.0, 2000.0], 7000.0),
            vec![6000.0, 2000.0, 2000.0],
            0.0,
        ),
        full(
            "q2 without deserved but allowed over quota",
            10000.0,
            vec![
                q(5000.0, 5000.0, NO_LIMIT, 5000.0),
                q(0.0, 5000.0, NO_LIMIT, 5000.0),
                q(5000.0, 5000.0, NO_LIMIT, 5000.0),
            ],
            vec![5000.0, 0.0, 5000.0],
            0.0,
        ),
        full(
            "q1 and q3 request more, q2 without deserved",
            10000.0,
            vec![
                q(5000.0, 5000.0, NO_LIMIT, 10000.0),
                q(0.0, 5000.0, NO_LIMIT, 5000.0),
                q(5000.0, 5000.0, NO_LIMIT, 10000.0),
            ],
            vec![5000.0, 0.0, 5000.0],
            0.0,
        ),
    ]);
}

#[test]
fn set_resources_share_multi_resource() {
    // KAI: Describe "SetResourcesShare", every resource divided independently. Per queue:
    // (deserved, weight, limit, request) for GPU, CPU, memory; total per resource; expected shares.
    type Triple = [(f64, f64, f64, f64); 3];
    struct Row {
        name: &'static str,
        totals: [f64; 3],
        queues: Vec<Triple>,
        shares: Vec<[f64; 3]>,
    }
    let same = |x: (f64, f64, f64, f64)| [x, x, x];
    let rows = vec![
        Row {
            name: "one queue: enough resources",
            totals: [10.0, 2500.0, 1000.0],
            queues: vec![[
                (1.0, 1.0, NO_LIMIT, 1.0),
                (200.0, 1.0, NO_LIMIT, 500.0),
                (1000.0, 1.0, NO_LIMIT, 500.0),
            ]],
            shares: vec![[1.0, 500.0, 500.0]],
        },
        Row {
            name: "one queue: not enough resources",
            totals: [1.0, 1000.0, 3000.0],
            queues: vec![[
                (2.0, 1.0, NO_LIMIT, 3.0),
                (20000.0, 1.0, NO_LIMIT, 2500.0),
                (1000.0, 1.0, NO_LIMIT, 5000.0),
            ]],
            shares: vec![[2.0, 2500.0, 3000.0]],
        },
        Row {
            name: "two queues: enough resources",
            totals: [10.0, 2500.0, 1000.0],
            queues: vec![
                [
                    (1.0, 1.0, NO_LIMIT, 1.0),
                    (200.0, 1.0, NO_LIMIT, 500.0),
                    (1000.0, 1.0, NO_LIMIT, 500.0)
                ];
                2
            ],
            shares: vec![[1.0, 500.0, 500.0]; 2],
        },
        Row {
            name: "two queues: request more than total, same weight and deserved",
            totals: [10.0, 3000.0, 1000.0],
            queues: vec![
                [
                    (1.0, 1.0, NO_LIMIT, 8.0),
                    (2000.0, 1.0, NO_LIMIT, 3000.0),
                    (1000.0, 1.0, NO_LIMIT, 5000.0)
                ];
                2
            ],
            shares: vec![[5.0, 2000.0, 1000.0]; 2],
        },
        Row {
            name: "two queues: different weights (450 / 550)",
            totals: [1000.0; 3],
            queues: vec![
                same((250.0, 1.0, NO_LIMIT, 5000.0)),
                same((150.0, 2.0, NO_LIMIT, 5000.0)),
            ],
            shares: vec![[450.0; 3], [550.0; 3]],
        },
        Row {
            name: "two queues: different weights and a limit (600 / 400)",
            totals: [1000.0; 3],
            queues: vec![
                same((250.0, 1.0, NO_LIMIT, 5000.0)),
                same((150.0, 2.0, 400.0, 5000.0)),
            ],
            shares: vec![[600.0; 3], [400.0; 3]],
        },
        Row {
            name: "three queues: 9999 divided evenly",
            totals: [9999.0; 3],
            queues: vec![same((1000.0, 1.0, NO_LIMIT, 10000.0)); 3],
            shares: vec![[3333.0; 3]; 3],
        },
        Row {
            name: "three queues: weights 6, 2, 1",
            totals: [9999.0; 3],
            queues: vec![
                same((0.0, 6.0, NO_LIMIT, 10000.0)),
                same((0.0, 2.0, NO_LIMIT, 10000.0)),
                same((0.0, 1.0, NO_LIMIT, 10000.0)),
            ],
            shares: vec![[6666.0; 3], [2222.0; 3], [1111.0; 3]],
        },
        Row {
            name: "divide last remaining GPU between similar queues (3 / 2)",
            totals: [5.0, 0.0, 0.0],
            queues: vec![
                [
                    (2.0, 2.0, NO_LIMIT, 3.0),
                    (0.0, 0.0, NO_LIMIT, 0.0),
                    (0.0, 0.0, NO_LIMIT, 0.0)
                ];
                2
            ],
            shares: vec![[3.0, 0.0, 0.0], [2.0, 0.0, 0.0]],
        },
    ];
    for row in rows {
        for resource in 0..3 {
            let case = Case {
                name: row.name,
                phase: Phase::Full,
                total: row.totals[resource],
                k_value: 0.0,
                queues: row
                    .queues
                    .iter()
                    .map(|t| q(t[resource].0, t[resource].1, t[resource].2, t[resource].3))
                    .collect(),
                remaining: f64::NAN,
                shares: row.shares.iter().map(|s| s[resource]).collect(),
            };
            let (_, shares) = run(&case);
            assert_eq!(shares, case.shares, "{} (resource {resource})", row.name);
        }
    }
}

#[test]
fn fractional_fair_share_is_bit_exact() {
    // KAI: "advanced scenarios / fractional fair share": request 32.54999999999996 (a float sum in
    // KAI) must come back as exactly that fair share.
    let case = Case {
        name: "fractional fair share",
        phase: Phase::Full,
        total: 45.0,
        k_value: 0.0,
        queues: vec![
            q(12.0, 12.0, NO_LIMIT, 32.549_999_999_999_96),
            q(7.0, 7.0, NO_LIMIT, 9.5),
            q(2.0, 2.0, 2.0, 1.65),
        ],
        remaining: f64::NAN,
        shares: vec![32.549_999_999_999_96, 9.5, 1.65],
    };
    let (_, shares) = run(&case);
    assert_eq!(shares, case.shares);
}

#[test]
fn usage_shrinks_over_quota_share() {
    // Reference §2.3: shareWeight = max(0, n + k (n - usage)). Two equal queues, 10 to divide; the
    // one that used 60% of the cluster gets 3, the other 7:
    // n = 0.5; weights 0.5 + (0.5 - 0.6) = 0.4 and 0.5 + 0.5 = 1.0; offers 10 * 0.4/1.4 = 2.857
    // (floor 2) and 7.142 (floor 7); the remainder 1 goes to the larger fraction (0.857).
    let mut used = q(0.0, 1.0, NO_LIMIT, 20.0);
    used.usage = 0.6;
    let fresh = q(0.0, 1.0, NO_LIMIT, 20.0);
    check(&[Case {
        name: "usage",
        phase: Phase::Full,
        total: 10.0,
        k_value: 1.0,
        queues: vec![used, fresh],
        remaining: 0.0,
        shares: vec![3.0, 7.0],
    }]);
    // With kValue 0 usage has no effect: 5 and 5.
    check(&[Case {
        name: "usage ignored with kValue 0",
        phase: Phase::Full,
        total: 10.0,
        k_value: 0.0,
        queues: vec![used, fresh],
        remaining: 0.0,
        shares: vec![5.0, 5.0],
    }]);
}

/// Proportion test trees: GPU totals and per-queue request are given through accounting.
fn department_tree(deserved: [f64; 4], weights: [f64; 4], priorities: [i32; 4]) -> QueueTree {
    let names = ["d1", "q1", "d2", "q2"];
    let parents = [None, Some("d1"), None, Some("d2")];
    let specs = (0..4)
        .map(|i| gpu_queue(names[i], parents[i], deserved[i], weights[i]).with_priority(priorities[i]))
        .collect();
    let mut tree = QueueTree::new(specs, FairShareConfig::default());
    for leaf in ["q1", "q2"] {
        let leaf = id(&tree, leaf);
        tree.record_pending(leaf, &gpus(100.0));
    }
    tree
}

#[test]
fn proportion_two_departments() {
    // KAI proportion_test "Set fair share for 2 hierarchy queues - simplified" (reference §2.5):
    // d1 -> q1, d2 -> q2, deserved 2, weight 1, request 100. Shares of [d1, q1, d2, q2].
    struct Row {
        name: &'static str,
        total: f64,
        deserved: [f64; 4],
        weights: [f64; 4],
        priorities: [i32; 4],
        shares: [f64; 4],
    }
    let base = Row {
        name: "",
        total: 4.0,
        deserved: [2.0; 4],
        weights: [1.0; 4],
        priorities: [100; 4],
        shares: [0.0; 4],
    };
    let rows = [
        Row {
            name: "sanity",
            shares: [2.0, 2.0, 2.0, 2.0],
            ..base
        },
        Row {
            name: "deserved department quota: q2 keeps its own deserved 2 (child over-subscription)",
            deserved: [3.0, 2.0, 1.0, 2.0],
            shares: [3.0, 3.0, 1.0, 2.0],
            ..base
        },
        Row {
            name: "over-quota: 7 and 5",
            total: 12.0,
            deserved: [3.0, 2.0, 1.0, 2.0],
            shares: [7.0, 7.0, 5.0, 5.0],
            ..base
        },
        Row {
            name: "over-quota weight 1:7 -> 4 and 8",
            total: 12.0,
            deserved: [3.0, 2.0, 1.0, 2.0],
            weights: [1.0, 1.0, 7.0, 1.0],
            shares: [4.0, 4.0, 8.0, 8.0],
            ..base
        },
        Row {
            name: "over-quota weight 7:1 -> 10 and 2",
            total: 12.0,
            deserved: [3.0, 2.0, 1.0, 2.0],
            weights: [7.0, 1.0, 1.0, 1.0],
            shares: [10.0, 10.0, 2.0, 2.0],
            ..base
        },
        Row {
            name: "priority: d2 at priority 2 -> 1 and 11",
            total: 12.0,
            deserved: [1.0; 4],
            weights: [7.0, 1.0, 1.0, 1.0],
            priorities: [1, 100, 2, 100],
            shares: [1.0, 1.0, 11.0, 11.0],
        },
        Row {
            name: "priority reversed: d1 at priority 2 -> 11 and 1",
            total: 12.0,
            deserved: [1.0; 4],
            weights: [1.0, 1.0, 7.0, 1.0],
            priorities: [2, 100, 1, 100],
            shares: [11.0, 11.0, 1.0, 1.0],
        },
    ];
    for row in rows {
        let mut tree = department_tree(row.deserved, row.weights, row.priorities);
        tree.divide(&gpus(row.total));
        let got: Vec<f64> = ["d1", "q1", "d2", "q2"]
            .iter()
            .map(|n| gpu_share(&tree, n))
            .collect();
        assert_eq!(got, row.shares.to_vec(), "{}", row.name);
    }
}

#[test]
fn proportion_multi_level() {
    // KAI proportion_test "Set fair share for multi hierarchy queues" (weights 0 as in the test).
    let mut tree = build(vec![
        gpu_queue("top-queue", None, 3.0, 0.0),
        gpu_queue("mid-queue", Some("top-queue"), 3.0, 0.0),
        gpu_queue("leaf-queue-1", Some("mid-queue"), 2.0, 0.0),
        gpu_queue("leaf-queue-2", Some("mid-queue"), 1.0, 0.0),
    ]);
    let (l1, l2) = (id(&tree, "leaf-queue-1"), id(&tree, "leaf-queue-2"));
    tree.record_pending(l1, &gpus(2.0));
    tree.record_pending(l2, &gpus(1.0));
    tree.divide(&gpus(3.0));
    for (name, want) in [
        ("top-queue", 3.0),
        ("mid-queue", 3.0),
        ("leaf-queue-1", 2.0),
        ("leaf-queue-2", 1.0),
    ] {
        assert_eq!(gpu_share(&tree, name), want, "{name}");
    }

    let mut tree = build(vec![
        gpu_queue("top-queue-1", None, 2.0, 0.0),
        gpu_queue("child-queue-1", Some("top-queue-1"), 1.0, 0.0),
        gpu_queue("child-queue-2", Some("top-queue-1"), 1.0, 0.0),
        gpu_queue("top-queue-2", None, 2.0, 0.0),
        gpu_queue("child-queue-3", Some("top-queue-2"), 0.0, 0.0),
        gpu_queue("child-queue-4", Some("top-queue-2"), 1.0, 1.0),
    ]);
    for (leaf, request) in [
        ("child-queue-1", 1.0),
        ("child-queue-2", 1.0),
        ("child-queue-4", 2.0),
    ] {
        let leaf = id(&tree, leaf);
        tree.record_pending(leaf, &gpus(request));
    }
    tree.divide(&gpus(4.0));
    let want = [
        ("top-queue-1", 2.0),
        ("child-queue-1", 1.0),
        ("child-queue-2", 1.0),
        ("top-queue-2", 2.0),
        ("child-queue-3", 0.0),
        ("child-queue-4", 2.0),
    ];
    for (name, want) in want {
        assert_eq!(gpu_share(&tree, name), want, "{name}");
    }
}

/// The reclaim worked examples' trees: queues under an unlimited `default` department.
fn under_default(queues: &[(&str, f64, f64)]) -> QueueTree {
    let mut specs = vec![gpu_queue("default", None, UNLIMITED, 1.0)];
    specs.extend(
        queues
            .iter()
            .map(|(name, deserved, weight)| gpu_queue(name, Some("default"), *deserved, *weight)),
    );
    build(specs)
}

#[test]
fn reclaim_examples_fair_shares() {
    // Reference §2.5 "fairness ratio": 8 GPUs; q0 and q1 deserved 1, weight 1; q0 runs 1+3+4,
    // q1 has two pending 4-GPU jobs. 1+1 deserved, 6 split 3/3: 4 and 4.
    let mut tree = under_default(&[("q0", 1.0, 1.0), ("q1", 1.0, 1.0)]);
    let (q0, q1) = (id(&tree, "q0"), id(&tree, "q1"));
    for n in [1.0, 3.0, 4.0] {
        tree.record_running(q0, &gpus(n), Preemptibility::Preemptible);
    }
    tree.record_pending(q1, &gpus(4.0));
    tree.record_pending(q1, &gpus(4.0));
    tree.divide(&gpus(8.0));
    assert_eq!((gpu_share(&tree, "q0"), gpu_share(&tree, "q1")), (4.0, 4.0));

    // "queue0 has 1 GPU from remaining": 7 GPUs; q0 (2, w2) runs 4 with 1 pending; q1 (1, w1)
    // runs 3. Over quota 4 -> 2.67 / 1.33 -> 2 / 1, remainder to q0: 5 and 2.
    let mut tree = under_default(&[("q0", 2.0, 2.0), ("q1", 1.0, 1.0)]);
    let (q0, q1) = (id(&tree, "q0"), id(&tree, "q1"));
    tree.record_running(q0, &gpus(4.0), Preemptibility::Preemptible);
    tree.record_pending(q0, &gpus(1.0));
    tree.record_running(q1, &gpus(3.0), Preemptibility::Preemptible);
    tree.divide(&gpus(7.0));
    assert_eq!((gpu_share(&tree, "q0"), gpu_share(&tree, "q1")), (5.0, 2.0));

    // "Reclaim with queue priority": 8 GPUs, d1 -> {q0 (1, w2) 5x1 running, q1 (1, w1) 3x1
    // running, reclaimer (0, w1, priority 101) pending 3}: reclaimer 3 first, then 3 split 2:1 on
    // top of deserved: q0 3, q1 2.
    let mut tree = build(vec![
        gpu_queue("d1", None, UNLIMITED, 1.0),
        gpu_queue("q0", Some("d1"), 1.0, 2.0),
        gpu_queue("q1", Some("d1"), 1.0, 1.0),
        gpu_queue("reclaimer", Some("d1"), 0.0, 1.0).with_priority(101),
    ]);
    let (q0, q1, r) = (id(&tree, "q0"), id(&tree, "q1"), id(&tree, "reclaimer"));
    for _ in 0..5 {
        tree.record_running(q0, &gpus(1.0), Preemptibility::Preemptible);
    }
    for _ in 0..3 {
        tree.record_running(q1, &gpus(1.0), Preemptibility::Preemptible);
    }
    tree.record_pending(r, &gpus(3.0));
    tree.divide(&gpus(8.0));
    assert_eq!(
        (
            gpu_share(&tree, "reclaimer"),
            gpu_share(&tree, "q0"),
            gpu_share(&tree, "q1")
        ),
        (3.0, 3.0, 2.0)
    );
}

#[test]
fn memory_divides_in_bytes_and_extended_slots_are_opt_in() {
    use crate::model::resources::FIRST_EXTENDED;
    let fpga = FIRST_EXTENDED;
    let mut tree = build(vec![
        QueueSpec::new("a")
            .with_resource(MEMORY, 1e9, UNLIMITED, 1.0)
            .with_resource(CPU, UNLIMITED, UNLIMITED, 1.0),
        QueueSpec::new("b")
            .with_resource(MEMORY, 0.0, UNLIMITED, 1.0)
            .with_resource(fpga, 2.0, UNLIMITED, 1.0),
    ]);
    let (a, b) = (id(&tree, "a"), id(&tree, "b"));
    tree.record_pending(a, &Resources::new(500, 3_000_000_001, 0));
    tree.record_pending(b, &Resources::new(0, 3_000_000_000, 0).with(fpga, 3));
    tree.divide(&Resources::new(4000, 4_000_000_001, 0).with(fpga, 4));
    assert!(
        tree.mask().contains(fpga),
        "an extended slot with a quota is tracked"
    );
    // Memory: a gets 1e9 deserved, then 3e9 + 1 over quota split 1:1 = 1.5e9 + 0.5 each, floored
    // in bytes; the odd byte goes to the older queue in the remainder pass.
    assert_eq!(tree.fair_share(a).get(MEMORY), 2_500_000_001.0);
    assert_eq!(tree.fair_share(b).get(MEMORY), 1_500_000_000.0);
    assert_eq!(tree.fair_share(a).get(CPU), 500.0);
    assert_eq!(tree.fair_share(b).get(fpga), 3.0);

    // Without any queue configuring it, the slot is invisible.
    let mut tree = build(vec![QueueSpec::new("a")]);
    let a = id(&tree, "a");
    tree.record_pending(a, &Resources::ZERO.with(fpga, 3));
    tree.divide(&Resources::ZERO.with(fpga, 4));
    assert!(!tree.mask().contains(fpga));
    assert_eq!(tree.fair_share(a).get(fpga), 0.0);
}
