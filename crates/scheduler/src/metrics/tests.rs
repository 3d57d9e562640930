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

fn registered(registry: &Registry) -> BTreeSet<String> {
    super::registered_names(registry).into_iter().collect()
}

/// Every sample name the registry can produce: its `# TYPE` lines with the suffixes of their type.
/// Checks that every registered metric has one (the encoder leaves out labelled families without a
/// child, so the caller fills them first).
fn exported_names(registry: &Registry) -> BTreeSet<String> {
    let text = encoded(registry);
    let mut families = BTreeSet::new();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
        families.insert(name.to_owned());
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_owned());
            }
        }
    }
    let unseen: Vec<String> = registered(registry).difference(&families).cloned().collect();
    assert!(
        unseen.is_empty(),
        "families left empty, so their type is unknown: {unseen:?}"
    );
    names
}

/// Every PromQL expression of the dashboard: panel targets' `expr`, anywhere, and the queries of its
/// template variables of type `query`.
fn queries(dashboard: &serde_json::Value) -> Vec<String> {
    fn exprs(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    match (k.as_str(), v) {
                        ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                        _ => exprs(v, out),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| exprs(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    exprs(dashboard, &mut out);
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list");
    for v in variables.iter().filter(|v| v["type"] == "query") {
        let query = v["query"]["query"].as_str().or_else(|| v["query"].as_str());
        out.push(query.expect("a query variable has a query").to_owned());
    }
    out
}

/// The metric names a PromQL expression uses: every identifier starting `kai_` (all of ours do).
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut word = String::new();
    for c in expr.chars().chain([' ']) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
        } else {
            if word.starts_with("kai_") {
                names.push(std::mem::take(&mut word));
            }
            word.clear();
        }
    }
    names
}

#[test]
fn the_dashboard_uses_only_exported_metrics() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/chart/kai-scheduler/dashboards/kai-scheduler.json"
    );
    let text = std::fs::read_to_string(path).expect("the dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let exprs = queries(&dashboard);
    assert!(exprs.len() >= 8, "{exprs:?}");

    // One cycle with a gang waiting and one eviction, and every write counter touched: every family
    // has a series.
    let mut sim = small_tree();
    sim.gang(GangSpec::new("huge", "team-b", 8));
    let metrics = CycleMetrics::default();
    let apply = ApplyMetrics::default();
    apply.touch_every_family();
    let registry = registry(&metrics, &apply);
    let mut result = observed(&mut sim, &metrics);
    assert!(result.stats.gangs_waiting > 0);
    result
        .decisions
        .evictions
        .push(scheduler_core::framework::decisions::Evict {
            uid: "u".into(),
            namespace: "ns".into(),
            name: "p".into(),
            cause: scheduler_core::framework::decisions::EvictionCause::Reclaim,
            for_group: None,
            group: None,
            message: String::new(),
        });
    metrics.observe(&result, Duration::from_millis(1), &sim.cluster);
    let registered = exported_names(&registry);
    let mut used = BTreeSet::new();
    for expr in &exprs {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "no metric in {expr:?}");
        for name in names {
            assert!(
                registered.contains(&name),
                "{name} (in {expr:?}) is not exported: {registered:?}"
            );
            used.insert(name);
        }
    }
    // The panels the dashboard promises.
    for name in [
        "kai_queue_allocated_gpus",
        "kai_queue_deserved_gpus",
        "kai_queue_fair_share_gpu",
        "kai_queue_allocated_cpu_cores",
        "kai_queue_fair_share_cpu_cores",
        "kai_queue_allocated_memory_bytes",
        "kai_queue_fair_share_memory_gb",
        "kai_scheduler_gangs_waiting_by_reason",
        "kai_scheduler_cycle_duration_seconds_bucket",
        "kai_scheduler_binds_total",
    ] {
        assert!(used.contains(name), "the dashboard does not use {name}");
    }
}

#[test]
fn registered_names_carry_their_registry_prefix() {
    let names = registered(&registry(&CycleMetrics::default(), &ApplyMetrics::default()));
    for name in [
        "kai_queue_info",
        "kai_queue_fair_share_gpu",
        "kai_scheduler_cycle_duration_seconds",
        "kai_scheduler_queue_limit_gpus",
        "kai_scheduler_binds",
    ] {
        assert!(names.contains(name), "{name}: {names:?}");
    }
    assert!(names.iter().all(|n| n.starts_with("kai_")), "{names:?}");
}

#[test]
fn metric_names_are_read_from_promql() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.99, sum by (le) (rate(kai_scheduler_cycle_duration_seconds_bucket{job=~"$job"}[5m])))"#
        ),
        ["kai_scheduler_cycle_duration_seconds_bucket"]
    );
    assert_eq!(
        metric_names("kai_queue_allocated_gpus / on(queue_name) kai_queue_fair_share_gpu"),
        ["kai_queue_allocated_gpus", "kai_queue_fair_share_gpu"]
    );
}
