//! Tree building, accounting (exact inverses, checkpoints), reports, configuration and the CRD
//! conversion.

use super::*;
use crate::model::resources::{CPU, FIRST_EXTENDED, MEMORY, ResourceNames};

use Preemptibility::{NonPreemptible, Preemptible};

fn org() -> QueueTree {
    build(vec![
        gpu_queue("org", None, 4.0, 1.0),
        gpu_queue("dept1", Some("org"), 2.0, 1.0),
        gpu_queue("team1", Some("dept1"), 1.0, 1.0),
        gpu_queue("team2", Some("dept1"), 1.0, 1.0),
        gpu_queue("dept2", Some("org"), 2.0, 1.0),
    ])
}

#[test]
fn accounting_rolls_up_and_inverts_exactly() {
    let mut tree = org();
    let (team1, team2) = (id(&tree, "team1"), id(&tree, "team2"));
    tree.record_running(team1, &gpus(1.0), NonPreemptible);
    tree.record_pending(team2, &gpus(2.0));
    let usage = |tree: &QueueTree, name: &str| *tree.usage_of(id(tree, name));
    assert_eq!(usage(&tree, "org").allocated, gpus(1.0));
    assert_eq!(usage(&tree, "org").allocated_non_preemptible, gpus(1.0));
    assert_eq!(usage(&tree, "org").requested, gpus(3.0));
    assert_eq!(usage(&tree, "dept2"), QueueUsage::default());

    // A long pseudo-random journal of fractional allocations, undone by replaying inverses in
    // reverse, restores the accounting bit for bit (0.1 + 0.2 is exact in milli-GPUs).
    let before = tree.snapshot();
    let mut journal = Vec::new();
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..500 {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let queue = if seed >> 63 == 0 { team1 } else { team2 };
        let amount = Resources::new(
            ((seed >> 20) % 4000) as i64,
            ((seed >> 30) % 1_000_000) as i64,
            [100, 200, 700, 1000][((seed >> 8) % 4) as usize],
        );
        let p = if (seed >> 40).is_multiple_of(3) {
            NonPreemptible
        } else {
            Preemptible
        };
        if (seed >> 50).is_multiple_of(4) {
            tree.deallocate(queue, &amount, p);
            journal.push((queue, amount, p, false));
        } else {
            tree.allocate(queue, &amount, p);
            journal.push((queue, amount, p, true));
        }
    }
    assert_ne!(tree.accounting(), &before);
    for (queue, amount, p, allocated) in journal.into_iter().rev() {
        if allocated {
            tree.deallocate(queue, &amount, p);
        } else {
            tree.allocate(queue, &amount, p);
        }
    }
    assert_eq!(tree.accounting(), &before);

    // Checkpoint and restore.
    let checkpoint = tree.snapshot();
    tree.allocate(team2, &gpus(0.3), Preemptible);
    assert_eq!(usage(&tree, "dept1").allocated, gpus(1.3));
    assert_eq!(
        usage(&tree, "dept1").requested,
        gpus(3.0),
        "allocate leaves requested alone"
    );
    tree.restore(&checkpoint);
    assert_eq!(tree.accounting(), &checkpoint);
}

#[test]
fn tree_shape_and_problems() {
    let tree = build(vec![
        gpu_queue("org", None, 4.0, 1.0),
        gpu_queue("team", Some("org"), 1.0, 1.0),
        gpu_queue("team", None, 1.0, 1.0),
        gpu_queue("orphan", Some("missing"), 1.0, 1.0),
        gpu_queue("orphan-child", Some("orphan"), 1.0, 1.0),
        gpu_queue("a", Some("b"), 1.0, 1.0),
        gpu_queue("b", Some("a"), 1.0, 1.0),
        gpu_queue("under-cycle", Some("a"), 1.0, 1.0),
    ]);
    assert_eq!(
        tree.problems(),
        &[
            TreeProblem::DuplicateName("team".into()),
            TreeProblem::UnknownParent {
                queue: "orphan".into(),
                parent: "missing".into()
            },
            TreeProblem::Cycle("a".into()),
            TreeProblem::Cycle("b".into()),
        ]
    );
    assert_eq!(tree.len(), 7);
    let org = id(&tree, "org");
    let team = id(&tree, "team");
    assert_eq!(tree.roots(), &[org]);
    assert_eq!(tree.children(org), &[team]);
    assert_eq!(tree.parent(team), Some(org));
    assert!(tree.is_schedulable_leaf(team));
    assert!(!tree.is_schedulable_leaf(org), "jobs only run in leaf queues");
    for detached in ["orphan", "orphan-child", "a", "b", "under-cycle"] {
        assert!(!tree.is_attached(id(&tree, detached)), "{detached}");
    }
    // Accounting walks stop at detached queues instead of looping.
    let mut tree = tree;
    let under = id(&tree, "under-cycle");
    tree.record_running(under, &gpus(1.0), Preemptible);
    assert_eq!(tree.usage_of(id(&tree, "a")).allocated, gpus(1.0));
    assert_eq!(tree.usage_of(id(&tree, "b")).allocated, Resources::ZERO);
    // Detached queues get no fair share.
    tree.divide(&gpus(8.0));
    assert_eq!(gpu_share(&tree, "a"), 0.0);
    assert_eq!(gpu_share(&tree, "org"), 0.0, "org requests nothing");
}

#[test]
fn levelled_queues() {
    let tree = org();
    let (team1, team2, dept1, dept2) = (
        id(&tree, "team1"),
        id(&tree, "team2"),
        id(&tree, "dept1"),
        id(&tree, "dept2"),
    );
    assert_eq!(tree.levelled(team1, team2), (team1, team2), "siblings");
    assert_eq!(
        tree.levelled(team1, dept2),
        (dept1, dept2),
        "different depths: dept1's subtree vs dept2"
    );
    assert_eq!(tree.levelled(dept2, team2), (dept2, dept1));
    let two_roots = build(vec![
        gpu_queue("r1", None, 1.0, 1.0),
        gpu_queue("x", Some("r1"), 1.0, 1.0),
        gpu_queue("r2", None, 1.0, 1.0),
        gpu_queue("y", Some("r2"), 1.0, 1.0),
    ]);
    let (x, y) = (id(&two_roots, "x"), id(&two_roots, "y"));
    assert_eq!(
        two_roots.levelled(x, y),
        (id(&two_roots, "r1"), id(&two_roots, "r2"))
    );
}

#[test]
fn age_orders_by_creation_then_uid_then_name() {
    let specs = vec![
        gpu_queue("late", None, 1.0, 1.0).with_created(20, "a"),
        gpu_queue("early-b", None, 1.0, 1.0).with_created(10, "b"),
        gpu_queue("early-a", None, 1.0, 1.0).with_created(10, "a"),
    ];
    let tree = QueueTree::new(specs, FairShareConfig::default());
    let names: Vec<&str> = tree.roots().iter().map(|q| tree.name(*q)).collect();
    assert_eq!(names, vec!["early-a", "early-b", "late"]);
}

#[test]
fn report_numbers() {
    let mut tree = build(vec![QueueSpec::new("q").with_resource(GPU, 2.0, 4.0, 1.0)]);
    let q = id(&tree, "q");
    tree.record_running(q, &gpus(1.5), NonPreemptible);
    tree.record_pending(q, &gpus(3.0));
    tree.divide(&gpus(8.0));
    let report = tree.report(q);
    assert_eq!(report.allocated, gpus(1.5));
    assert_eq!(report.allocated_non_preemptible, gpus(1.5));
    assert_eq!(report.requested, gpus(4.5));
    assert_eq!(
        (
            report.deserved.get(GPU),
            report.limit.get(GPU),
            report.fair_share.get(GPU)
        ),
        (2.0, 4.0, 4.0)
    );
    assert_eq!(report.fair_share.to_resources().gpu(), 4000);
    assert_eq!(report.limit.get(CPU), UNLIMITED);
}

#[test]
fn plugin_arguments() {
    let parse = |args: &[(&str, &str)]| FairShareConfig::from_arguments(args.iter().copied());
    assert_eq!(parse(&[]), Ok(FairShareConfig::default()));
    let config = parse(&[
        ("kValue", "0.5"),
        ("relcaimerSaturationMultiplier", "1.5"),
        ("queuePriorityInQuotaReclaim", "True"),
    ])
    .unwrap();
    assert_eq!(
        (
            config.k_value,
            config.reclaimer_saturation_multiplier,
            config.queue_priority_in_quota_reclaim
        ),
        (0.5, 1.5, true)
    );
    assert_eq!(
        parse(&[("reclaimerSaturationMultiplier", "2")])
            .unwrap()
            .reclaimer_saturation_multiplier,
        2.0
    );
    assert_eq!(
        parse(&[("reclaimerUtilizationMultiplier", "3")])
            .unwrap()
            .reclaimer_saturation_multiplier,
        3.0
    );
    // KAI's clamps.
    assert_eq!(
        parse(&[("relcaimerSaturationMultiplier", "0.5")])
            .unwrap()
            .reclaimer_saturation_multiplier,
        1.0
    );
    assert_eq!(parse(&[("kValue", "-2")]).unwrap().k_value, 0.0);
    assert_eq!(
        parse(&[("overUtilizedRule", "allHeld")]).unwrap().over_utilized,
        OverUtilizedRule::AllHeld
    );
    // Errors.
    assert!(matches!(
        parse(&[("kValue", "wrong")]),
        Err(FairShareError::InvalidArgument { .. })
    ));
    assert!(matches!(
        parse(&[("queuePriorityInQuotaReclaim", "yes")]),
        Err(FairShareError::InvalidArgument { .. })
    ));
    assert_eq!(
        parse(&[("kvalue", "1")]),
        Err(FairShareError::UnknownArgument("kvalue".into()))
    );
    assert!(matches!(
        parse(&[
            ("reclaimerSaturationMultiplier", "2"),
            ("relcaimerSaturationMultiplier", "3")
        ]),
        Err(FairShareError::ConflictingArguments { .. })
    ));
    assert!(
        parse(&[
            ("reclaimerSaturationMultiplier", "2"),
            ("relcaimerSaturationMultiplier", "2.0")
        ])
        .is_ok()
    );
    // The tree applies the clamps to a hand-made config too.
    let tree = QueueTree::new(
        vec![],
        FairShareConfig {
            k_value: -1.0,
            reclaimer_saturation_multiplier: 0.1,
            ..FairShareConfig::default()
        },
    );
    assert_eq!(
        (
            tree.config().k_value,
            tree.config().reclaimer_saturation_multiplier
        ),
        (0.0, 1.0)
    );
    assert!(tree.is_empty());
}

#[test]
fn queue_spec_from_crd() {
    use api::queue::{QueueResources, QueueSpec as Crd, ResourceQuota};
    let quota = |q: Option<f64>, l: Option<f64>, w: Option<f64>| ResourceQuota {
        quota: q,
        limit: l,
        over_quota_weight: w,
    };
    let mut extended = std::collections::BTreeMap::new();
    extended.insert("example.com/fpga".to_owned(), quota(Some(2.0), None, None));
    extended.insert("pods".to_owned(), quota(Some(2.0), None, None));
    let crd = Crd {
        parent_queue: Some("dept".into()),
        priority: None,
        resources: Some(QueueResources {
            cpu: Some(quota(Some(-1.0), Some(-1.0), Some(2.0))),
            gpu: Some(quota(Some(2.5), Some(0.0), None)),
            memory: Some(quota(Some(1500.0), None, Some(0.0))),
            extended,
        }),
        ..Crd::default()
    };
    let mut names = ResourceNames::default();
    let (spec, ignored) = QueueSpec::from_api("team", 7, "uid-1", &crd, &mut names);
    assert_eq!(ignored, vec!["pods".to_owned()]);
    assert_eq!(
        (
            spec.parent.as_deref(),
            spec.priority,
            spec.created,
            spec.uid.as_str()
        ),
        (Some("dept"), 100, 7, "uid-1")
    );
    assert_eq!(
        (
            spec.deserved.get(CPU),
            spec.limit.get(CPU),
            spec.over_quota_weight.get(CPU)
        ),
        (UNLIMITED, UNLIMITED, 2.0)
    );
    assert_eq!(
        (
            spec.deserved.get(GPU),
            spec.limit.get(GPU),
            spec.over_quota_weight.get(GPU)
        ),
        (2.5, 0.0, 1.0)
    );
    assert_eq!(
        (
            spec.deserved.get(MEMORY),
            spec.limit.get(MEMORY),
            spec.over_quota_weight.get(MEMORY)
        ),
        (1.5e9, UNLIMITED, 0.0)
    );
    let fpga = names.get("example.com/fpga").expect("interned");
    assert_eq!(fpga, FIRST_EXTENDED);
    assert_eq!((spec.deserved.get(fpga), spec.limit.get(fpga)), (2.0, UNLIMITED));

    // No resources at all: quota 0, no limit, weight 1 everywhere.
    let (bare, _) = QueueSpec::from_api("bare", 0, "", &Crd::default(), &mut names);
    assert_eq!(bare, QueueSpec::new("bare"));
}

#[test]
fn queue_spec_from_model() {
    use crate::model::queue::{Queue, QueueResourceSpec};
    let mut model = Queue::new("team");
    model.parent_name = Some("dept".into());
    model.priority = 7;
    model.created = 1_700_000_000_000;
    model.resources[MEMORY] = QueueResourceSpec {
        quota: 1500.0,
        limit: 3000.0,
        weight: 2.0,
    };
    model.resources[GPU] = QueueResourceSpec {
        quota: 2.5,
        limit: 0.0,
        weight: -1.0,
    };
    let spec = QueueSpec::from_model(&model);
    assert_eq!(
        (&*spec.name, spec.parent.as_deref(), spec.priority, spec.created),
        ("team", Some("dept"), 7, 1_700_000_000_000)
    );
    assert_eq!(
        (
            spec.deserved.get(MEMORY),
            spec.limit.get(MEMORY),
            spec.over_quota_weight.get(MEMORY)
        ),
        (1.5e9, 3e9, 2.0)
    );
    assert_eq!(
        (
            spec.deserved.get(GPU),
            spec.limit.get(GPU),
            spec.over_quota_weight.get(GPU)
        ),
        (2.5, 0.0, 0.0)
    );
    // Queue::new's defaults are unlimited.
    assert_eq!(
        (spec.deserved.get(CPU), spec.limit.get(CPU)),
        (UNLIMITED, UNLIMITED)
    );
}
