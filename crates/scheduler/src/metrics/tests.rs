use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use scheduler_core::model::resources::{CPU, MEMORY};
use scheduler_core::sim::{GI, GangSpec, Sim};

use super::*;

fn encoded(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("encode");
    text
}

/// Every sample of the text format: `name{labels}` -> value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("a sample has a value");
            (series.to_owned(), value.parse().expect("a number"))
        })
        .collect()
}

fn queue_sample(samples: &BTreeMap<String, f64>, metric: &str, queue: &str) -> Option<f64> {
    samples
        .get(&format!("{metric}{{queue_name=\"{queue}\"}}"))
        .copied()
}

/// A department (3 GPUs deserved) over two teams, one 4-GPU node, and a two-pod gang in `team-a`.
fn small_tree() -> Sim {
    let mut sim = Sim::new();
    sim.node("n1", 64_000, 256, 4)
        .queue("dept", None, 3.0, -1.0, 1.0)
        .queue("team-a", Some("dept"), 2.0, 4.0, 1.0)
        .queue("team-b", Some("dept"), 1.0, -1.0, 1.0)
        .gang(GangSpec::new("train", "team-a", 2).cpu_mem(1500, 2));
    sim
}

/// Metrics and the registry `main` serves them from.
fn exported() -> (CycleMetrics, Registry) {
    let metrics = CycleMetrics::default();
    let registry = registry(&metrics, &ApplyMetrics::default());
    (metrics, registry)
}

/// One cycle over the simulator's model (the model keeps what it decided as assumed), observed.
fn observed(sim: &mut Sim, metrics: &CycleMetrics) -> CycleResult {
    let result = scheduler_core::cycle::run(&mut sim.cluster, &sim.config, sim.now);
    sim.now += 1000;
    metrics.observe(&result, Duration::from_millis(1), &sim.cluster);
    result
}

#[test]
fn queue_metrics_carry_kai_names_labels_and_units() {
    let mut sim = small_tree();
    let (metrics, registry) = exported();
    let result = observed(&mut sim, &metrics);
    assert_eq!(result.decisions.binds.len(), 2);
    let s = samples(&encoded(&registry));

    // The gang's two pods: 1 GPU, 1.5 cores and 2 GiB each, counted in the queue and its parent.
    for q in ["team-a", "dept"] {
        assert_eq!(queue_sample(&s, "kai_queue_allocated_gpus", q), Some(2.0), "{q}");
        assert_eq!(
            queue_sample(&s, "kai_queue_allocated_cpu_cores", q),
            Some(3.0),
            "{q}"
        );
        assert_eq!(
            queue_sample(&s, "kai_queue_allocated_memory_bytes", q),
            Some((4 * GI) as f64),
            "{q}"
        );
        assert_eq!(queue_sample(&s, "kai_queue_info", q), Some(1.0), "{q}");
    }
    assert_eq!(queue_sample(&s, "kai_queue_allocated_gpus", "team-b"), Some(0.0));
    // Deserved and quota from the spec: the sim's queues give GPUs only, the rest unlimited (-1).
    assert_eq!(queue_sample(&s, "kai_queue_deserved_gpus", "team-a"), Some(2.0));
    assert_eq!(queue_sample(&s, "kai_queue_deserved_gpus", "dept"), Some(3.0));
    assert_eq!(
        queue_sample(&s, "kai_queue_quota_cpu_cores", "team-a"),
        Some(-1.0)
    );
    assert_eq!(
        queue_sample(&s, "kai_queue_quota_memory_bytes", "team-a"),
        Some(-1.0)
    );
    assert_eq!(
        queue_sample(&s, "kai_scheduler_queue_limit_gpus", "team-a"),
        Some(4.0)
    );
    assert_eq!(
        queue_sample(&s, "kai_scheduler_queue_limit_gpus", "team-b"),
        Some(-1.0)
    );
    // Fair share: team-a asks for 2 GPUs and gets them; team-b asks for nothing.
    assert_eq!(queue_sample(&s, "kai_queue_fair_share_gpu", "team-a"), Some(2.0));
    assert_eq!(queue_sample(&s, "kai_queue_fair_share_gpu", "team-b"), Some(0.0));
    // CPU in cores and memory in GB (10^9 bytes), as the core's figures say.
    let figures = &result.queues;
    let a = figures.iter().find(|f| &*f.name == "team-a").expect("team-a");
    assert_eq!(
        queue_sample(&s, "kai_queue_fair_share_cpu_cores", "team-a"),
        Some(a.fair_share.get(CPU) / 1000.0)
    );
    assert_eq!(
        queue_sample(&s, "kai_queue_fair_share_memory_gb", "team-a"),
        Some(a.fair_share.get(MEMORY) / 1e9)
    );
    assert!(a.fair_share.get(CPU) >= 3000.0, "{a:?}");
    // Exactly one series per queue, labelled only `queue_name`.
    let fair_share: Vec<&String> = s
        .keys()
        .filter(|k| k.starts_with("kai_queue_fair_share_gpu"))
        .collect();
    assert_eq!(fair_share.len(), 3, "{fair_share:?}");
}

#[test]
fn a_removed_queue_loses_its_series() {
    let mut sim = small_tree();
    let (metrics, registry) = exported();
    observed(&mut sim, &metrics);
    let before = samples(&encoded(&registry));
    assert!(before.keys().any(|k| k.contains("queue_name=\"team-b\"")));

    sim.cluster.remove_queue("team-b");
    let result = observed(&mut sim, &metrics);
    assert!(!result.skipped, "removing a queue makes the next cycle run");
    let after = samples(&encoded(&registry));
    let stale: Vec<&String> = after
        .keys()
        .filter(|k| k.contains("queue_name=\"team-b\""))
        .collect();
    assert!(stale.is_empty(), "{stale:?}");
    assert_eq!(queue_sample(&after, "kai_queue_info", "team-a"), Some(1.0));
    // 13 families (10 of KAI's, 3 limits) for each of the two queues left.
    let queue_series = after.keys().filter(|k| k.contains("queue_name=")).count();
    assert_eq!(queue_series, 13 * 2);
}

#[test]
fn a_skipped_cycle_keeps_the_queue_series() {
    let mut sim = small_tree();
    let (metrics, registry) = exported();
    let skipped = (0..5).any(|_| observed(&mut sim, &metrics).skipped);
    assert!(skipped, "an unchanged model's cycles are skipped");
    let s = samples(&encoded(&registry));
    assert_eq!(queue_sample(&s, "kai_queue_allocated_gpus", "team-a"), Some(2.0));
}

#[test]
fn gangs_waiting_are_counted_by_reason_and_reasons_that_end_vanish() {
    let mut sim = small_tree();
    // Eight GPUs on a four-GPU node: fits nowhere.
    sim.gang(GangSpec::new("huge", "team-b", 8));
    let (metrics, registry) = exported();
    observed(&mut sim, &metrics);
    let s = samples(&encoded(&registry));
    let by_reason: BTreeMap<&String, f64> = s
        .iter()
        .filter(|(k, _)| k.starts_with("kai_scheduler_gangs_waiting_by_reason{"))
        .map(|(k, v)| (k, *v))
        .collect();
    assert_eq!(by_reason.len(), 1, "{by_reason:?}");
    assert_eq!(by_reason.values().sum::<f64>(), s["kai_scheduler_gangs_waiting"]);
    assert_eq!(s["kai_scheduler_gangs_waiting"], 1.0);

    sim.cluster.remove_queue("team-b");
    observed(&mut sim, &metrics);
    let s = samples(&encoded(&registry));
    let reasons: BTreeSet<&String> = s
        .keys()
        .filter(|k| k.starts_with("kai_scheduler_gangs_waiting_by_reason{"))
        .collect();
    // The gang now waits for its missing queue: one series, with the new reason only.
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(!by_reason.keys().any(|k| reasons.contains(k)), "{reasons:?}");
}
