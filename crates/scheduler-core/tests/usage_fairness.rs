//! Usage-based (time-based) fair share, KAI's `usageDBConfig` with `kValue`: a queue that used more
//! recently gets less of the contested over-quota resources, is ordered after one that used less, and
//! yields GPUs to it through reclaim; decay over half-lives restores equality; without `usageDBConfig`
//! everything is as before. The usage comes from a [`UsageRecord`] folded minute by minute, as the
//! scheduling loop folds each cycle's sample.

use std::sync::Arc;

use kai_scheduler_core::config::Config;
use kai_scheduler_core::fairshare::{UsageRecord, UsageSample};
use kai_scheduler_core::model::{Millis, TaskStatus};
use kai_scheduler_core::sim::{GangSpec, Sim};

const MINUTE: Millis = 60_000;

/// A usage history: how long `heavy` was busy, then how long nobody used anything.
type History = Option<(Millis, Millis)>;
const HOUR: Millis = 60 * MINUTE;

fn config(yaml: &str) -> Config {
    Config::from_yaml(yaml).expect("valid configuration")
}

/// Usage on, half-life 10 minutes, sliding window of a day, `kValue` as given.
fn usage_on(k: f64) -> Config {
    config(&format!(
        "plugins: {{proportion: {{kValue: {k}}}}}\n\
         usageDBConfig: {{clientType: scheduler, usageParams: {{halfLifePeriod: 10m, windowSize: 24h}}}}"
    ))
}

/// A record in which `heavy` held `gpus` of the 8 GPUs and `light` none, every minute for `busy`, then
/// nobody anything for `idle`; returns it with the time it ends at.
fn history(config: &Config, gpus: f64, busy: Millis, idle: Millis) -> (UsageRecord, Millis) {
    let params = config.usage().expect("valid").expect("on").params;
    let mut record = UsageRecord::default();
    let sample = |heavy: f64| UsageSample {
        capacity: [8.0, 64_000.0, 256e9],
        queues: vec![
            (Arc::from("heavy"), [heavy, 0.0, 0.0]),
            (Arc::from("light"), [0.0; 3]),
            (Arc::from("default"), [heavy, 0.0, 0.0]),
        ],
    };
    let mut t = 0;
    while t <= busy + idle {
        record.fold(&params, t, &sample(if t <= busy { gpus } else { 0.0 }));
        t += MINUTE;
    }
    (record, t - MINUTE)
}

/// Two queues of equal weight under one parent, no quota (everything is over quota), on 8 GPUs.
/// `heavy` is the older queue, so without usage it is served first on ties.
fn two_queues(config: Config, usage: History) -> Sim {
    two_queues_with(config, 8.0, usage)
}

fn two_queues_with(config: Config, gpus: f64, usage: History) -> Sim {
    let mut s = Sim::new();
    if let Some((busy, idle)) = usage {
        let (record, at) = history(&config, gpus, busy, idle);
        let params = config.usage().expect("valid").expect("on").params;
        s.cluster.set_historical_usage(record.normalized(&params, at));
    }
    s.config = config;
    s.queue("default", None, -1.0, -1.0, 1.0)
        .queue("heavy", Some("default"), 0.0, -1.0, 1.0)
        .queue("light", Some("default"), 0.0, -1.0, 1.0)
        .node("n0", 64_000, 256, 8);
    s
}

fn train(name: &str, queue: &str, gpus: u32, created: Millis) -> GangSpec {
    GangSpec::new(name, queue, 1)
        .gpus(gpus)
        .priority_class("train")
        .created(created)
}

fn fair_share_gpus(s: &Sim, queue: &str) -> String {
    s.history
        .iter()
        .rev()
        .flat_map(|d| d.queue_statuses.iter())
        .find(|q| q.name.as_ref() == queue)
        .and_then(|q| q.status.fair_share.get("nvidia.com/gpu"))
        .map_or_else(|| "0".to_owned(), |q| q.0.clone())
}

#[test]
fn fair_share_of_contested_gpus_follows_recent_usage() {
    // (name, config, heavy's GPUs in its history, (busy, idle), heavy's fair share, light's).
    type Case = (
        &'static str,
        Config,
        f64,
        Option<(Millis, Millis)>,
        &'static str,
        &'static str,
    );
    let cases: [Case; 6] = [
        ("off by default: equal", Config::default(), 0.0, None, "4", "4"),
        // On, but no history yet: today's division.
        ("on, no history: equal", usage_on(1.0), 0.0, None, "4", "4"),
        // Heavy held half the cluster all along (usage 0.5): share weights 0.5 + (0.5 - 0.5) and
        // 0.5 + 0.5, so 8/3 and 16/3, floored to 2 and 5, and the unit left goes to the larger
        // fraction (heavy's).
        (
            "heavy used half the GPUs: it gets less",
            usage_on(1.0),
            4.0,
            Some((HOUR, 0)),
            "3",
            "5",
        ),
        // Heavy held the whole cluster (usage 1): weight 0 while light wants more.
        (
            "heavy used every GPU: light first",
            usage_on(1.0),
            8.0,
            Some((HOUR, 0)),
            "0",
            "8",
        ),
        (
            "kValue 0: usage ignored",
            usage_on(0.0),
            8.0,
            Some((HOUR, 0)),
            "4",
            "4",
        ),
        // 40 half-lives later heavy's usage is below 2^-40 (and its buckets are dropped).
        (
            "decayed over half-lives: equal again",
            usage_on(1.0),
            8.0,
            Some((HOUR, 400 * MINUTE)),
            "4",
            "4",
        ),
    ];
    for (name, config, gpus, usage, heavy, light) in cases {
        let mut s = two_queues_with(config, gpus, usage);
        // Equal demand: 8 single-GPU gangs each, on 8 GPUs.
        for i in 0..8 {
            s.gang(train(&format!("h{i}"), "heavy", 1, i));
            s.gang(train(&format!("l{i}"), "light", 1, i));
        }
        s.round();
        assert_eq!(
            (fair_share_gpus(&s, "heavy"), fair_share_gpus(&s, "light")),
            (heavy.to_owned(), light.to_owned()),
            "{name}"
        );
    }
}

#[test]
fn the_queue_that_used_more_is_ordered_after_the_one_that_used_less() {
    // One 8-GPU gang per queue, created at the same time: only one fits. Without usage the older
    // queue (heavy) goes first; with heavy's recent usage, light does; decayed, heavy again.
    let cases: [(&str, Config, History, &str); 4] = [
        ("off by default", Config::default(), None, "heavy-job"),
        ("on, no history", usage_on(1.0), None, "heavy-job"),
        (
            "heavy used more recently",
            usage_on(1.0),
            Some((HOUR, 0)),
            "light-job",
        ),
        ("decayed", usage_on(1.0), Some((HOUR, 400 * MINUTE)), "heavy-job"),
    ];
    for (name, config, usage, placed) in cases {
        let mut s = two_queues(config, usage);
        s.gang(train("heavy-job", "heavy", 8, 0));
        s.gang(train("light-job", "light", 8, 0));
        s.rounds(2);
        assert_eq!(s.count(placed, TaskStatus::Running), 1, "{name}: {placed} runs");
        let other = if placed == "heavy-job" {
            "light-job"
        } else {
            "heavy-job"
        };
        assert_eq!(s.count(other, TaskStatus::Running), 0, "{name}: {other} waits");
    }
}

#[test]
fn the_queue_that_used_more_yields_gpus_to_the_one_that_used_less_through_reclaim() {
    // Each queue runs 4 single-GPU gangs and wants one more. Without usage both are at their fair
    // share (4) and nothing moves; with heavy's recent usage its fair share drops to 3 and light's
    // rises to 5, so light reclaims one of heavy's GPUs.
    let cases: [(&str, Config, History, usize); 3] = [
        ("off by default", Config::default(), None, 0),
        ("heavy used more recently", usage_on(1.0), Some((HOUR, 0)), 1),
        ("decayed", usage_on(1.0), Some((HOUR, 400 * MINUTE)), 0),
    ];
    for (name, config, usage, evictions) in cases {
        let mut s = two_queues(config, usage);
        for i in 0..4 {
            s.gang(train(&format!("h{i}"), "heavy", 1, i).running_on(&["n0"]));
            s.gang(train(&format!("l{i}"), "light", 1, i).running_on(&["n0"]));
        }
        s.gang(train("h-more", "heavy", 1, 10));
        s.gang(train("l-more", "light", 1, 10));
        s.rounds(4);
        assert_eq!(s.evicted.len(), evictions, "{name}: {:?}", s.evicted);
        assert!(
            s.evicted.iter().all(|e| e.starts_with("ns/h")),
            "{name}: only heavy yields: {:?}",
            s.evicted
        );
        if evictions > 0 {
            assert_eq!(s.count("l-more", TaskStatus::Running), 1, "{name}");
        }
        s.cluster.check_invariants().expect("model invariants");
    }
}

#[test]
fn a_cycle_samples_usage_only_when_it_is_on() {
    let mut off = two_queues(Config::default(), None);
    off.gang(train("job", "heavy", 2, 0));
    assert!(off.round().usage_sample.is_none());

    let mut on = two_queues(usage_on(1.0), None);
    on.gang(train("job", "heavy", 2, 0));
    on.round();
    let sample = on.round().usage_sample.clone().expect("sampled");
    assert_eq!(sample.capacity[0], 8.0);
    let held = |q: &str| {
        sample
            .queues
            .iter()
            .find(|(n, _)| n.as_ref() == q)
            .map(|(_, a)| a[0])
    };
    assert_eq!(held("heavy"), Some(2.0));
    assert_eq!(held("default"), Some(2.0), "parents include their children");
    assert_eq!(held("light"), Some(0.0));
}

#[test]
fn usage_configuration_keys_and_invalid_values() {
    // KAI's keys are accepted; what cannot be honoured is refused with the key's name.
    let ok = [
        "usageDBConfig: {clientType: prometheus}",
        "usageDBConfig: {clientType: fake, connectionString: 'http://prom:9090'}",
        "usageDBConfig:\n  clientType: scheduler\n  usageParams:\n    halfLifePeriod: 10m\n    windowSize: 1w\n    windowType: sliding\n    fetchInterval: 30s\n    stalenessPeriod: 5m\n    waitTimeout: 1m\n    extraParams: {gpuAllocationMetric: x}",
        "usageDBConfig: {clientType: scheduler, usageParams: {windowType: tumbling, windowSize: 7d, tumblingWindowStartTime: '2025-01-06T00:00:00Z'}}",
        "usageDBConfig: {clientType: scheduler, usageParams: {halfLifePeriod: 0s}}",
    ];
    for yaml in ok {
        let c = Config::from_yaml(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
        assert!(c.usage().expect("valid").is_some(), "{yaml}");
    }
    let defaults = config("usageDBConfig: {clientType: scheduler}")
        .usage()
        .expect("valid")
        .expect("on");
    assert_eq!(defaults.params.half_life, None, "no decay by default, as in KAI");
    assert_eq!(
        defaults.params.window.as_secs(),
        7 * 24 * 3600,
        "a week by default"
    );
    assert_eq!(defaults.fetch_interval.as_secs(), 60);
    assert_eq!(Config::default().usage().expect("valid"), None, "off by default");
    let tumbling = config(
        "usageDBConfig: {clientType: scheduler, usageParams: {windowType: tumbling, tumblingWindowStartTime: '2025-01-01T01:00:00.5+01:00'}}",
    )
    .usage()
    .expect("valid")
    .expect("on");
    assert_eq!(
        tumbling.params.kind,
        kai_scheduler_core::fairshare::WindowKind::Tumbling {
            origin: 1_735_689_600_500
        }
    );

    let bad = [
        ("usageDBConfig: {}", "clientType"),
        ("usageDBConfig: {clientType: influx}", "clientType"),
        ("usageDBConfig: {clientType: scheduler, surprise: 1}", "surprise"),
        (
            "usageDBConfig: {clientType: scheduler, usageParams: {halfLifePeriod: soon}}",
            "halfLifePeriod",
        ),
        (
            "usageDBConfig: {clientType: scheduler, usageParams: {halfLifePeriod: -1h}}",
            "halfLifePeriod",
        ),
        (
            "usageDBConfig: {clientType: scheduler, usageParams: {windowSize: 0s}}",
            "windowSize",
        ),
        (
            "usageDBConfig: {clientType: scheduler, usageParams: {windowSize: 99999999999999999999w}}",
            "windowSize",
        ),
        (
            "usageDBConfig: {clientType: scheduler, usageParams: {fetchInterval: 0s}}",
            "fetchInterval",
        ),
        (
            "usageDBConfig: {clientType: scheduler, usageParams: {waitTimeout: x}}",
            "waitTimeout",
        ),
        (
            "usageDBConfig: {clientType: scheduler, usageParams: {windowType: cron, cronString: '0 * * * *'}}",
            "cron",
        ),
        (
            "usageDBConfig: {clientType: scheduler, usageParams: {windowType: hopping}}",
            "windowType",
        ),
        (
            "usageDBConfig: {clientType: scheduler, usageParams: {windowType: tumbling, tumblingWindowStartTime: yesterday}}",
            "tumblingWindowStartTime",
        ),
        ("plugins: {proportion: {kValue: -1}}", "kValue"),
        ("plugins: {proportion: {kValue: .nan}}", "kValue"),
    ];
    for (yaml, key) in bad {
        let err = Config::from_yaml(yaml).expect_err(yaml).to_string();
        assert!(err.contains(key), "{yaml}: {err}");
    }
}
