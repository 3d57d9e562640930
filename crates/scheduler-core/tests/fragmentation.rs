//! The `fragmentation` placement strategy: the node (and device) where the expected GPU capacity that
//! the observed mix of request shapes cannot use grows least, where bin-packing chooses otherwise; and
//! the experiment strategies (`bestfit`, `random`) stay inside what allocate allows.

use kai_scheduler_core::config::PlacementStrategy;
use kai_scheduler_core::model::TaskStatus;
use kai_scheduler_core::sim::{GangSpec, Sim};

fn sim(strategy: PlacementStrategy) -> Sim {
    let mut s = Sim::new();
    s.queue("default-parent-queue", None, 0.0, -1.0, 1.0);
    s.queue("q", Some("default-parent-queue"), -1.0, -1.0, 1.0);
    s.config.plugins.nodeplacement.gpu = strategy;
    s.config.plugins.nodeplacement.cpu = strategy;
    s.config.plugins.gpusharing.enabled = true;
    s.config.plugins.gpusharing.reservation_pods = false;
    s
}

fn node_of(s: &Sim, gang: &str) -> Vec<String> {
    s.placement(gang).keys().cloned().collect()
}

#[test]
fn a_one_gpu_pod_keeps_a_pair_of_free_gpus_whole_where_binpack_breaks_it() {
    // Node a has 3 GPUs free, b has 2. The mix is mostly 2-GPU pods. Bin-packing takes b (fewest free),
    // leaving it one GPU no 2-GPU pod can use; taking a leaves 2 + 2.
    for (strategy, expected) in [
        (PlacementStrategy::Binpack, "b"),
        (PlacementStrategy::Fragmentation, "a"),
    ] {
        let mut s = sim(strategy);
        s.node("a", 64_000, 256, 3)
            .node("b", 64_000, 256, 2)
            .node("c", 64_000, 256, 8);
        s.gang(
            GangSpec::new("pairs", "q", 4)
                .gpus(2)
                .running_on(&["c", "c", "c", "c"]),
        );
        s.gang(GangSpec::new("one", "q", 1).gpus(1));
        s.round();
        assert_eq!(node_of(&s, "one"), vec![expected.to_owned()], "{strategy:?}");
    }
}

#[test]
fn a_fraction_goes_where_the_mix_loses_least() {
    // Node a has a shared device with 0.7 free, node b one with 0.6 free, node c six with 0.5 free
    // each (the halves); the mix is mostly halves. Bin-packing takes the fullest device with room (one
    // of c's), leaving 0.3 there that no half can use; b's would leave 0.4, as useless. On a it leaves
    // 0.5, exactly a half.
    for (strategy, expected) in [
        (PlacementStrategy::Binpack, "c"),
        (PlacementStrategy::Fragmentation, "a"),
    ] {
        let mut s = sim(strategy);
        s.node("a", 64_000, 256, 1)
            .node("b", 64_000, 256, 1)
            .node("c", 64_000, 256, 8);
        s.gang(GangSpec::new("on-a", "q", 1).fraction(300).running_on(&["a"]));
        s.gang(GangSpec::new("on-b", "q", 1).fraction(400).running_on(&["b"]));
        s.gang(
            GangSpec::new("halves", "q", 6)
                .fraction(500)
                .running_on(&["c"; 6]),
        );
        s.gang(GangSpec::new("new", "q", 1).fraction(200));
        s.round();
        assert_eq!(node_of(&s, "new"), vec![expected.to_owned()], "{strategy:?}");
        s.cluster.check_invariants().expect("accounting stays exact");
    }
}

#[test]
fn scored_strategies_respect_node_rules_and_room() {
    // A selector and room rule out every node but one; each strategy must find that one, and a gang that
    // fits nowhere stays pending whole.
    for strategy in [
        PlacementStrategy::Fragmentation,
        PlacementStrategy::Bestfit,
        PlacementStrategy::Random,
    ] {
        let mut s = sim(strategy);
        s.node_with("x", 64_000, 256, 4, &[("pool", "x")], &[])
            .node_with("y", 64_000, 256, 4, &[("pool", "y")], &[])
            .node_with("tainted", 64_000, 256, 8, &[("pool", "y")], &["dedicated"]);
        s.gang(GangSpec::new("pinned", "q", 2).gpus(2).selector("pool", "y"));
        s.gang(GangSpec::new("big", "q", 2).gpus(4).selector("pool", "x"));
        s.round();
        assert_eq!(
            s.placement("pinned").into_iter().collect::<Vec<_>>(),
            vec![("y".to_owned(), 2)],
            "{strategy:?}"
        );
        assert_eq!(
            s.count("big", TaskStatus::Running),
            0,
            "{strategy:?}: all or nothing"
        );
        s.cluster.check_invariants().expect("accounting stays exact");
    }
}

#[test]
fn random_and_bestfit_are_deterministic_for_a_seed() {
    let place = |strategy, seed| {
        let mut s = sim(strategy);
        s.config.plugins.nodeplacement.seed = seed;
        s.nodes("n", 16, 8);
        for i in 0..12 {
            s.gang(GangSpec::new(&format!("g{i}"), "q", 1).gpus(1 + i % 3));
        }
        s.round();
        (0..12).map(|i| node_of(&s, &format!("g{i}"))).collect::<Vec<_>>()
    };
    for strategy in [PlacementStrategy::Random, PlacementStrategy::Bestfit] {
        assert_eq!(place(strategy, 7), place(strategy, 7), "{strategy:?}");
    }
    assert_ne!(
        place(PlacementStrategy::Random, 7),
        place(PlacementStrategy::Random, 8),
        "another seed draws other nodes"
    );
}

/// Binds and evictions of a seeded mixed workload under `fragmentation`, round after round, hashed:
/// nodes of several sizes, pools, GPU memories and soft taints; gangs of fractions, whole and multi-GPU
/// pods and CPU-only pods, some pinned to a pool, memory-heavy or tolerating the taints; some gangs
/// complete between rounds.
fn mixed_workload_digest(seed: u64, reservation_pods: bool) -> u64 {
    use std::collections::BTreeMap;
    use std::hash::{Hash, Hasher};

    use kai_scheduler_core::model::constraints::{Taint, TaintEffect};
    use kai_scheduler_core::model::resources::PODS;
    use kai_scheduler_core::model::{NodeUpdate, Resources};
    use kai_scheduler_core::sim::{GI, SplitMix};

    let mut rng = SplitMix(seed);
    let mut s = sim(PlacementStrategy::Fragmentation);
    s.config.plugins.gpusharing.reservation_pods = reservation_pods;
    for i in 0..40 {
        let name = format!("n{i}");
        let gpus = [0, 2, 4, 8, 8][rng.below(5)];
        let cpu = [16_000, 32_000, 64_000][rng.below(3)];
        let mem = [64, 128, 256][rng.below(3)];
        let pool = ["a", "b"][rng.below(2)];
        let mut taints = Vec::new();
        if rng.below(5) == 0 {
            taints.push(Taint {
                key: "soft".to_owned(),
                value: String::new(),
                effect: TaintEffect::PreferNoSchedule,
            });
        }
        s.cluster.apply_node(NodeUpdate {
            name: name.as_str().into(),
            labels: BTreeMap::from([
                ("pool".to_owned(), pool.to_owned()),
                ("kubernetes.io/hostname".to_owned(), name.clone()),
            ]),
            taints,
            ready: true,
            unschedulable: false,
            allocatable: Resources::new(cpu, mem * GI, gpus * 1000).with(PODS, 110),
            gpu_memory_mib: Some([40_000, 80_000][rng.below(2)]),
        });
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut gangs: Vec<(String, u32)> = Vec::new();
    let mut bound = std::collections::HashSet::new();
    for _ in 0..10 {
        for _ in 0..10 {
            let name = format!("g{}", gangs.len());
            let pods = 1 + u32::try_from(rng.below(4)).unwrap_or(0);
            let mut spec = GangSpec::new(&name, "q", pods)
                .cpu_mem([500, 2_000, 8_000][rng.below(3)], [1, 8, 32][rng.below(3)]);
            spec = match rng.below(7) {
                0 | 1 => spec.fraction([250, 500, 700][rng.below(3)]),
                2 => spec.gpus(1),
                3 => spec.gpus(2),
                4 => spec.gpus(4),
                5 => spec.gpus(8),
                _ => spec.gpus(0),
            };
            if rng.below(4) == 0 {
                spec = spec.selector("pool", "a");
            }
            if rng.below(3) == 0 {
                spec = spec.tolerate("soft");
            }
            s.gang(spec);
            gangs.push((name, pods));
        }
        let decisions = s.round().decisions.clone();
        for b in &decisions.binds {
            (&b.name, &b.node, &b.gpu_groups).hash(&mut h);
            bound.insert(b.name.to_string());
        }
        for e in &decisions.evictions {
            e.name.hash(&mut h);
            // Only a pod that holds a node is evicted (one placed and taken back in the same cycle is
            // neither bound nor evicted).
            assert!(bound.remove(&*e.name), "{} was evicted but never bound", e.name);
            // Nothing is evicted for a gang that is not placed (pods reserved or bound) by then.
            if let Some(for_group) = &e.for_group {
                let placed = s
                    .cluster
                    .groups
                    .iter()
                    .filter(|(_, g)| &g.key == for_group)
                    .flat_map(|(_, g)| g.tasks.iter())
                    .any(|t| {
                        matches!(
                            s.cluster.task(*t).status,
                            TaskStatus::Pipelined | TaskStatus::Binding
                        )
                    });
                assert!(
                    placed,
                    "{} was evicted for {for_group:?}, which is not placed",
                    e.name
                );
            }
        }
        s.cluster.check_invariants().expect("accounting stays exact");
        for _ in 0..3 {
            let (name, pods) = gangs[rng.below(gangs.len())].clone();
            for i in 0..pods {
                s.complete("ns", &format!("{name}-{i}"));
                bound.remove(&format!("{name}-{i}"));
            }
        }
    }
    h.finish()
}

#[test]
fn seeded_mixed_workloads_decide_as_recorded() {
    // Recorded before the strategy's search was narrowed to classes of alike nodes: the narrowing must
    // not change a decision. Re-recorded when consolidation learnt to pass over victims with nowhere to
    // go, to free whole devices for fractions and to promise moved fractions their device shares. Over
    // the three seeds it then evicted 84 pods instead of 216, and binds less evictions came to 439
    // instead of 352. Re-recorded when a victim search whose chosen set did not replay stopped leaving
    // that replay's evictions behind (it evicted for a gang it did not place): seed 2 changed, and over
    // the three seeds 25 pods are evicted instead of 84, binds less evictions 449 instead of 439.
    // Re-recorded when a pod placed and taken as a victim in the same cycle stopped being "evicted"
    // (it never held its node): seed 3 changed, 21 evictions instead of 25, the same 474 binds.
    let digests: Vec<u64> = [(1, false), (2, true), (3, false)]
        .into_iter()
        .map(|(seed, reservation_pods)| mixed_workload_digest(seed, reservation_pods))
        .collect();
    assert_eq!(
        digests,
        vec![
            8_818_298_590_942_965_990,
            14_846_624_015_305_161_738,
            96_687_275_014_986_699
        ]
    );
}
