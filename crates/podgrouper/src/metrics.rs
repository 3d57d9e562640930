//! The podgrouper's Prometheus metrics (the binary registers them under the prefix `kai_podgrouper_`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Label set with one stable, low-cardinality category.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Category {
    /// The category.
    pub category: &'static str,
}

/// Label set of a warning reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    /// The reason.
    pub reason: &'static str,
}

/// All metrics of the podgrouper.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Reconciles run.
    pub reconciles: Counter,
    /// Reconciles failed, by error category.
    pub failures: Family<Category, Counter>,
    /// Reconcile duration in seconds.
    pub duration: Histogram,
    /// PodGroups applied (server-side apply sent).
    pub pod_groups_applied: Counter,
    /// PodGroup applies skipped because the PodGroup was already up to date.
    pub pod_groups_unchanged: Counter,
    /// Pods annotated or relabelled.
    pub pods_patched: Counter,
    /// Warnings found, by reason.
    pub warnings: Family<Reason, Counter>,
}

impl Metrics {
    /// Metrics registered in `registry` (made with `Registry::with_prefix("kai_podgrouper")`).
    #[must_use]
    pub fn register(r: &mut Registry) -> Self {
        let m = Self {
            reconciles: Counter::default(),
            failures: Family::default(),
            duration: runtime::metrics::duration_histogram(),
            pod_groups_applied: Counter::default(),
            pod_groups_unchanged: Counter::default(),
            pods_patched: Counter::default(),
            warnings: Family::default(),
        };
        r.register("reconciles", "Reconciles run", m.reconciles.clone());
        r.register(
            "reconcile_failures",
            "Reconciles failed, by error category",
            m.failures.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Reconcile duration",
            m.duration.clone(),
        );
        r.register(
            "podgroups_applied",
            "PodGroups applied with server-side apply",
            m.pod_groups_applied.clone(),
        );
        r.register(
            "podgroups_unchanged",
            "PodGroup applies skipped: already up to date",
            m.pod_groups_unchanged.clone(),
        );
        r.register(
            "pods_patched",
            "Pods given their group annotation or sub-group label",
            m.pods_patched.clone(),
        );
        r.register(
            "warnings",
            "Grouping warnings reported, by reason",
            m.warnings.clone(),
        );
        m
    }
}
