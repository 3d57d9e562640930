//! Scheduler metrics: cycle and action durations, decisions, gangs waiting (by reason), model size,
//! and the queues' fair-share figures under KAI's names (`queues`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use scheduler_core::cycle::CycleResult;
use scheduler_core::model::Cluster;

use crate::apply::ApplyMetrics;

pub mod queues;

pub use queues::QueueMetrics;

/// The scheduler's registry: KAI's queue metrics under `kai_` (KAI's default metrics namespace, so its
/// dashboards find them), everything else under `kai_scheduler_`.
#[must_use]
pub fn registry(cycle: &CycleMetrics, apply: &ApplyMetrics) -> Registry {
    let mut kai = Registry::with_prefix("kai");
    cycle.queues.register_kai(&mut kai);
    let scheduler = kai.sub_registry_with_prefix("scheduler");
    cycle.register(scheduler);
    apply.register(scheduler);
    kai
}

/// Every metric `registry` holds, with its registry's prefix, in registration order. Read from the
/// registry's descriptors (its `Debug` form: a registry's prefix comes before its metrics, its
/// sub-registries after them), since the text encoder leaves out labelled families without a child.
/// For the tests that hold the docs and the dashboard to the metrics served.
#[doc(hidden)]
#[must_use]
pub fn registered_names(registry: &Registry) -> Vec<String> {
    const PREFIX: &str = "prefix: Some(Prefix(\"";
    const NAME: &str = "Descriptor { name: \"";
    let debug = format!("{registry:?}");
    let mut rest = debug.as_str();
    let mut prefix = "";
    let mut names = Vec::new();
    loop {
        let (at, is_prefix) = match (rest.find(PREFIX), rest.find(NAME)) {
            (Some(p), Some(n)) => (p.min(n), p < n),
            (Some(p), None) => (p, true),
            (None, Some(n)) => (n, false),
            (None, None) => break,
        };
        let start = at + if is_prefix { PREFIX.len() } else { NAME.len() };
        let Some((value, tail)) = rest[start..].split_once('"') else {
            break;
        };
        if is_prefix {
            prefix = value;
        } else {
            names.push(format!("{prefix}_{value}"));
        }
        rest = tail;
    }
    names
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabel {
    action: &'static str,
}

/// Metrics of the scheduling loop.
#[derive(Clone, Debug)]
pub struct CycleMetrics {
    cycle: Histogram,
    open: Histogram,
    actions: Family<ActionLabel, Histogram>,
    cycles: Counter,
    cycles_skipped: Counter,
    cycles_crashed: Counter,
    binds_decided: Counter,
    evictions_decided: Family<ActionLabel, Counter>,
    gangs_waiting: Gauge,
    gangs_waiting_by_reason: Family<ReasonLabel, Gauge>,
    /// The reasons that have a series now.
    waiting_reasons: Arc<Mutex<BTreeSet<&'static str>>>,
    gangs_skipped_unchanged: Counter,
    victim_nodes_weighed: Counter,
    nodes: Gauge,
    pods: Gauge,
    podgroups: Gauge,
    queues: QueueMetrics,
}

impl Default for CycleMetrics {
    fn default() -> Self {
        Self {
            cycle: runtime::metrics::duration_histogram(),
            open: runtime::metrics::duration_histogram(),
            actions: Family::new_with_constructor(runtime::metrics::duration_histogram),
            cycles: Counter::default(),
            cycles_skipped: Counter::default(),
            cycles_crashed: Counter::default(),
            binds_decided: Counter::default(),
            evictions_decided: Family::default(),
            gangs_waiting: Gauge::default(),
            gangs_waiting_by_reason: Family::default(),
            waiting_reasons: Arc::default(),
            gangs_skipped_unchanged: Counter::default(),
            victim_nodes_weighed: Counter::default(),
            nodes: Gauge::default(),
            pods: Gauge::default(),
            podgroups: Gauge::default(),
            queues: QueueMetrics::default(),
        }
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl CycleMetrics {
    /// Registers every metric but KAI's queue metrics; `r` is the registry prefixed `kai_scheduler`
    /// (see [`registry`]).
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "cycle_duration_seconds",
            "Duration of a scheduling cycle",
            self.cycle.clone(),
        );
        r.register(
            "session_open_duration_seconds",
            "Duration of opening a session",
            self.open.clone(),
        );
        r.register(
            "action_duration_seconds",
            "Duration of each action in a cycle",
            self.actions.clone(),
        );
        r.register("cycles", "Scheduling cycles run", self.cycles.clone());
        r.register(
            "cycles_skipped",
            "Cycles skipped because nothing changed since a cycle that decided nothing",
            self.cycles_skipped.clone(),
        );
        r.register(
            "cycles_crashed",
            "Cycles that panicked and were contained (their gang set aside); each is a bug to report",
            self.cycles_crashed.clone(),
        );
        r.register(
            "binds_decided",
            "Pods the scheduler decided to bind",
            self.binds_decided.clone(),
        );
        r.register(
            "evictions_decided",
            "Pods the scheduler decided to evict, by action",
            self.evictions_decided.clone(),
        );
        r.register(
            "gangs_waiting",
            "Gangs with pods waiting and a reason",
            self.gangs_waiting.clone(),
        );
        r.register(
            "gangs_waiting_by_reason",
            "Gangs with pods waiting, by the reason of their PodGroup's Unschedulable condition",
            self.gangs_waiting_by_reason.clone(),
        );
        r.register(
            "gangs_skipped_unchanged",
            "Gang attempts skipped because nothing changed since they last failed",
            self.gangs_skipped_unchanged.clone(),
        );
        r.register(
            "victim_nodes_weighed",
            "Nodes weighed by victim searches (preempt, reclaim, consolidation) for waiting pods",
            self.victim_nodes_weighed.clone(),
        );
        r.register("nodes", "Nodes in the model", self.nodes.clone());
        r.register("pods", "Pods in the model", self.pods.clone());
        r.register("podgroups", "PodGroups in the model", self.podgroups.clone());
        self.queues.register_own(r);
    }

    /// Records a cycle that panicked and was contained.
    pub fn crashed(&self) {
        self.cycles_crashed.inc();
    }

    /// Records one cycle.
    pub fn observe(&self, result: &CycleResult, took: Duration, cluster: &Cluster) {
        if result.skipped {
            self.cycles_skipped.inc();
            return;
        }
        self.cycles.inc();
        self.cycle.observe(secs(took));
        self.open.observe(secs(result.open));
        for (action, d) in &result.actions {
            self.actions
                .get_or_create(&ActionLabel {
                    action: action.as_str(),
                })
                .observe(secs(*d));
        }
        self.binds_decided.inc_by(result.decisions.binds.len() as u64);
        for e in &result.decisions.evictions {
            self.evictions_decided
                .get_or_create(&ActionLabel {
                    action: e.cause.as_str(),
                })
                .inc();
        }
        self.gangs_waiting
            .set(i64::try_from(result.stats.gangs_waiting).unwrap_or(i64::MAX));
        self.waiting_by_reason(result);
        self.queues.update(&result.queues);
        self.gangs_skipped_unchanged
            .inc_by(result.stats.gangs_skipped_unchanged);
        self.victim_nodes_weighed
            .inc_by(result.stats.victim_nodes_weighed);
        self.nodes
            .set(i64::try_from(cluster.nodes.len()).unwrap_or(i64::MAX));
        self.pods
            .set(i64::try_from(cluster.tasks.len()).unwrap_or(i64::MAX));
        self.podgroups
            .set(i64::try_from(cluster.groups.len()).unwrap_or(i64::MAX));
    }

    fn waiting_by_reason(&self, result: &CycleResult) {
        let by_reason = &result.stats.gangs_waiting_by_reason;
        for (reason, n) in by_reason {
            self.gangs_waiting_by_reason
                .get_or_create(&ReasonLabel { reason })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        // A panic while the set was held leaves it as it was: still a set of exported reasons.
        let mut exported = self
            .waiting_reasons
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for gone in exported.iter().filter(|r| !by_reason.contains_key(*r)) {
            self.gangs_waiting_by_reason.remove(&ReasonLabel { reason: gone });
        }
        *exported = by_reason.keys().copied().collect();
    }
}

#[cfg(test)]
mod tests;
