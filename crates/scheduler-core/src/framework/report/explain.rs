//! Why a gang waits, as values first and text last. Every "no" in the core becomes one of these; the
//! status writer turns them into the PodGroup condition, the events and `kai explain`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::fairshare::Bound;
use crate::framework::decisions::EvictionCause;
use crate::framework::gang::NotReady;
use crate::framework::policy::placement::NodeMiss;
use crate::model::ids::WordHasher;
use crate::model::resources::{GPU, ResourceNames};
use crate::model::{GroupProblem, PodName, Resources};

/// A queue rule that stops a gang (KAI's capacity gates), from the fair-share tree.
pub use crate::fairshare::CapacityViolation as QueueGate;

/// A summary of how the nodes answered for one pod that fit nowhere: which pod, and the
/// [`FitSummary`] of the nodes' answers, which it reads through (`f.nodes`).
///
/// The summary is shared: a backlog's like gangs each name their own pod but answer with the summary
/// of the one attempt made for their shape, and the status report compares two reasons' summaries by
/// identity before it compares them field by field.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FitFailure {
    /// The pod that fit nowhere (`namespace/name`).
    pub failed_pod: PodName,
    /// Its id (to compute free room after the attempt is rolled back).
    pub failed_task: Option<crate::model::TaskId>,
    /// How the nodes answered.
    pub summary: Arc<FitSummary>,
}

/// How the nodes answered for one pod that fit nowhere, and what its gang needed.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FitSummary {
    /// Pods the gang needed in this attempt.
    pub pods_needed: u32,
    /// Pods placed before one failed.
    pub pods_placed: u32,
    /// Total request of the pods needed.
    pub request_total: Resources,
    /// The failed pod's request.
    pub pod_request: Resources,
    /// Nodes considered.
    pub nodes: usize,
    /// Why each node refused, by reason.
    pub misses: Arc<BTreeMap<NodeMiss, usize>>,
    /// Free now on nodes the pod may use (static predicates pass).
    pub free_on_eligible: Resources,
    /// Nodes the pod may use.
    pub eligible_nodes: usize,
    /// Of those, nodes with any of the scarcest resource ([`Self::scarce_slot`]) free.
    pub nodes_with_free: usize,
    /// Whether the gang's topology constraint narrowed the nodes.
    pub topology: Option<String>,
    /// A resource the failed pod asks more of than every node has, and the most any node has: it fits
    /// nowhere however much is freed, so its message says that instead of the free figures.
    pub beyond_every_node: Option<(usize, i64)>,
}

impl std::ops::Deref for FitFailure {
    type Target = FitSummary;

    fn deref(&self) -> &FitSummary {
        &self.summary
    }
}

/// Writing a field while the failure is built: the summary is copied first if it is shared already
/// (it is not, until the failure is given as a reason).
impl std::ops::DerefMut for FitFailure {
    fn deref_mut(&mut self) -> &mut FitSummary {
        Arc::make_mut(&mut self.summary)
    }
}

impl FitFailure {
    /// The same failure for another pod (a like gang's): the summary is shared, not copied.
    #[must_use]
    pub fn for_pod(&self, failed_pod: PodName, failed_task: crate::model::TaskId) -> Self {
        Self {
            failed_pod,
            failed_task: Some(failed_task),
            summary: Arc::clone(&self.summary),
        }
    }

    /// Whether `other` is the same failure, comparing summaries by identity first. `compared` keeps
    /// the answers for pairs of distinct summaries compared in full, by address (and holds both, so no
    /// address is reused while it is kept), so a backlog of like gangs compares one pair once.
    #[must_use]
    pub fn same_as(&self, other: &Self, compared: &mut ComparedSummaries) -> bool {
        if self.failed_pod != other.failed_pod || self.failed_task != other.failed_task {
            return false;
        }
        if Arc::ptr_eq(&self.summary, &other.summary) {
            return true;
        }
        let pair = (
            Arc::as_ptr(&self.summary) as usize,
            Arc::as_ptr(&other.summary) as usize,
        );
        compared
            .entry(pair)
            .or_insert_with(|| ComparedPair {
                same: self.summary == other.summary,
                _held: [Arc::clone(&self.summary), Arc::clone(&other.summary)],
            })
            .same
    }
}

/// Answers of [`FitFailure::same_as`] for pairs of distinct summaries, by their addresses.
pub type ComparedSummaries = std::collections::HashMap<
    (usize, usize),
    ComparedPair,
    std::hash::BuildHasherDefault<crate::model::ids::WordHasher>,
>;

/// One answer of [`FitFailure::same_as`], holding the two summaries it compared.
#[derive(Debug)]
pub struct ComparedPair {
    same: bool,
    _held: [Arc<FitSummary>; 2],
}

/// Why a gang is not placed in this cycle.
#[derive(Clone, Debug, PartialEq)]
pub enum Why {
    /// Its definition or a reference is broken.
    Problem(GroupProblem),
    /// Not all its pods exist yet.
    NotReady(NotReady),
    /// A queue rule.
    Queue(QueueGate),
    /// Volcano `minResources` exceed what is free.
    MinResources {
        /// Needed.
        needed: Box<Resources>,
        /// Free now in the cluster.
        free: Box<Resources>,
    },
    /// Some pod fits nowhere. Shared: a waiting gang's reason is kept across cycles (the no-fit memo,
    /// the last report) and compared each cycle, which a shared one makes a pointer comparison.
    NoFit(Arc<FitFailure>),
    /// `scheduleTimeoutSeconds` passed.
    TimedOut {
        /// The timeout.
        after_secs: i64,
        /// The last reason it could not be placed.
        last: String,
    },
    /// Waiting for resources being freed for it (evictions under way).
    Pipelined,
    /// Pods that name a sub-group that is missing or are beyond `maxMember`.
    Elastic(String),
    /// `schedulingBackoff`: found unschedulable on this node pool before, so not tried here again.
    SchedulingBackoff {
        /// The pool.
        node_pool: Arc<str>,
    },
    /// Placed in this cycle, then its room was taken by a later action (reclaim for a queue below its
    /// fair share, say): nothing was bound, and it is tried again in the next cycle.
    Withdrawn {
        /// The action that took the room.
        cause: EvictionCause,
        /// `namespace/name` of the gang the room went to, if one.
        for_gang: Option<String>,
    },
    /// A pod's bind failed; the gang is tried again after a back-off.
    BindFailed {
        /// `namespace/name` of the pod.
        pod: String,
        /// The binder's reason.
        reason: Arc<str>,
        /// Failures in a row.
        count: u32,
    },
}

impl Why {
    /// KAI-style reason code.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Problem(p) => p.reason(),
            Self::NotReady(_) => "NotReady",
            Self::Queue(gate) => gate.reason(),
            Self::MinResources { .. } => "InsufficientMinResources",
            Self::NoFit(_) => "PodSchedulingErrors",
            Self::TimedOut { .. } => "ScheduleTimeout",
            Self::Pipelined => "WaitingForEvictions",
            Self::Elastic(_) => "Elastic",
            Self::BindFailed { .. } => "BindFailed",
            Self::Withdrawn { .. } => "PlacementWithdrawn",
            Self::SchedulingBackoff { .. } => "SchedulingBackoff",
        }
    }

    /// One paragraph a user can act on.
    #[must_use]
    pub fn message(&self, names: &ResourceNames) -> String {
        match self {
            Self::Problem(p) => p.to_string(),
            Self::NotReady(n) => n.to_string(),
            Self::Queue(gate) => queue_message(gate, names),
            Self::MinResources { needed, free } => format!(
                "minResources ({}) exceed what is free in the cluster ({})",
                names.format(needed),
                names.format(free)
            ),
            Self::NoFit(f) => fit_message(f, names),
            Self::TimedOut { after_secs, last } => {
                format!("not scheduled within scheduleTimeoutSeconds ({after_secs}s); last reason: {last}")
            }
            Self::Pipelined => {
                "resources are being freed for this gang (evictions under way); it is bound once they are"
                    .to_owned()
            }
            Self::Elastic(m) => m.clone(),
            Self::SchedulingBackoff { node_pool } => format!(
                "not tried again on node pool {node_pool:?}: it was found unschedulable there and its PodGroup \
                 sets schedulingBackoff; its status keeps the reason found then. Remove that \
                 schedulingConditions entry, or move the PodGroup to another node pool, to try again"
            ),
            Self::Withdrawn { cause, for_gang } => {
                let cause = cause.as_str();
                let taken = match for_gang {
                    Some(g) => format!("its room was given to {g} by {cause}"),
                    None => format!("it was taken back by {cause}"),
                };
                format!(
                    "placed in this cycle, then {taken}; nothing was bound, and it is tried again in the \
                     next cycle"
                )
            }
            Self::BindFailed { pod, reason, count } => {
                let times = if *count > 1 {
                    format!(" ({count} times in a row)")
                } else {
                    String::new()
                };
                format!("binding pod {pod} failed{times}: {reason}; the gang is tried again after a back-off")
            }
        }
    }

    /// Hashes what the reason says, leaving out its live figures: what is free and on how many nodes,
    /// how many nodes answered which way, how many of the gang's pods found room, a queue's current use
    /// and fair share, the freest topology domain. What is left changes only when the reason itself
    /// does: another kind of reason, another request, a node refusing for another cause.
    fn hash_gist(&self, h: &mut WordHasher) {
        self.reason().hash(h);
        match self {
            Self::Problem(p) => p.hash(h),
            Self::NotReady(n) => n.hash(h),
            Self::Queue(gate) => {
                let s = gate.shortfall();
                (&s.queue_name, s.slot, s.bound_kind, s.requested.to_bits()).hash(h);
                // A limit or quota is configuration; a fair share moves with every queue's demand.
                if s.bound_kind != Bound::FairShare {
                    s.bound.to_bits().hash(h);
                }
            }
            Self::MinResources { needed, .. } => needed.hash(h),
            Self::NoFit(f) => {
                // Requests folded: a backlog's every waiting gang's gist is taken each cycle its
                // figures change.
                (
                    f.failed_pod.is_empty(),
                    f.pods_needed,
                    f.request_total.folded(),
                    f.pod_request.folded(),
                    f.scarce_slot(),
                    f.topology.is_some(),
                )
                    .hash(h);
                for miss in f.misses.keys() {
                    miss.hash(h);
                }
            }
            Self::TimedOut { after_secs, .. } => after_secs.hash(h),
            Self::Pipelined => {}
            Self::Elastic(m) => m.hash(h),
            Self::SchedulingBackoff { node_pool } => node_pool.hash(h),
            Self::BindFailed { pod, reason, count } => (pod, reason, count).hash(h),
            Self::Withdrawn { cause, for_gang } => (cause, for_gang).hash(h),
        }
    }
}

/// A fingerprint of why a gang waits without the live figures of its reasons ([`Why`]'s gist), never
/// 0: equal for "8 pods need 8 nvidia.com/gpu, 6 free on 3 nodes" and "..., 5 free on 3 nodes". The
/// status report emits an event only when it changes, and writes a status whose only change is in the
/// figures at a bounded rate.
#[must_use]
pub fn gist_fingerprint(whys: &[Why]) -> u64 {
    let mut h = WordHasher::default();
    whys.len().hash(&mut h);
    for why in whys {
        why.hash_gist(&mut h);
    }
    h.finish() | 1
}

fn queue_message(gate: &QueueGate, names: &ResourceNames) -> String {
    match gate {
        QueueGate::OverLimit(s) => s.explain(names),
        QueueGate::NonPreemptibleOverQuota(s) => format!(
            "{}; non-preemptible gangs may only use their queue's quota (a preemptible priority class such as train may run over quota)",
            s.explain(names)
        ),
    }
}

/// How one node refusing one pod reads in messages (`kai explain` counts nodes per reason with it).
#[must_use]
pub fn miss_text(miss: &NodeMiss, names: &ResourceNames) -> String {
    let mut text = String::new();
    push_miss_text(&mut text, miss, names);
    text
}

/// [`miss_text`], appended to `text`.
fn push_miss_text(text: &mut String, miss: &NodeMiss, names: &ResourceNames) {
    let _ = match miss {
        NodeMiss::Static(s) => write!(text, "{s}"),
        NodeMiss::Insufficient(slot) => write!(text, "insufficient {}", names.name(*slot)),
        NodeMiss::NoSharedGpuRoom => write!(text, "no GPU with room for the fraction"),
        NodeMiss::GpuSharingDisabled => write!(text, "GPU sharing is disabled (set global.gpuSharing=true)"),
        NodeMiss::GpuMemoryUnknown => write!(text, "GPU memory unknown (no nvidia.com/gpu.memory label)"),
        NodeMiss::OutsideDomain => write!(text, "outside the topology domain"),
        NodeMiss::Rule(rule) => write!(text, "{rule}"),
        NodeMiss::Volume(v) => write!(text, "{v}"),
    };
}

impl FitSummary {
    /// The scarcest resource, the one the message names: the one most nodes lack, GPUs first on ties.
    #[must_use]
    pub fn scarce_slot(&self) -> Option<usize> {
        self.misses
            .iter()
            .filter_map(|(m, n)| match m {
                NodeMiss::Insufficient(slot) => Some((*n, usize::from(*slot == GPU), *slot)),
                _ => None,
            })
            .max()
            .map(|(_, _, slot)| slot)
    }

    /// Whether the two would be told alike: every figure [`fit_message`] prints from them is equal
    /// (for any failed pod). Free room on a slot the message does not name (CPU and memory while GPUs
    /// are the scarce resource) moves with every bind; a waiting gang's status does not say it, so an
    /// answer that changes only there is no news to a backlog's gangs.
    #[must_use]
    pub fn says_same(&self, other: &Self) -> bool {
        if self.nodes != other.nodes
            || self.misses != other.misses
            || self.topology != other.topology
            || self.beyond_every_node != other.beyond_every_node
        {
            return false;
        }
        if let Some((slot, _)) = self.beyond_every_node {
            return self.pod_request.0.get(slot) == other.pod_request.0.get(slot);
        }
        // Equal misses: the same scarce slot.
        let scarce = self.scarce_slot();
        let free_figures = |slot: usize| {
            self.free_on_eligible.0.get(slot) == other.free_on_eligible.0.get(slot)
                && self.nodes_with_free == other.nodes_with_free
        };
        if (self.pods_needed > 1) != (other.pods_needed > 1) {
            return false;
        }
        if self.pods_needed > 1 {
            self.pods_needed == other.pods_needed
                && self.pods_placed == other.pods_placed
                && match scarce {
                    Some(slot) => {
                        self.request_total.0.get(slot) == other.request_total.0.get(slot)
                            && free_figures(slot)
                    }
                    None => self.request_total == other.request_total,
                }
        } else {
            scarce.is_none_or(|slot| {
                self.pod_request.0.get(slot) == other.pod_request.0.get(slot) && free_figures(slot)
            })
        }
    }
}

fn fit_message(f: &FitFailure, names: &ResourceNames) -> String {
    // Written into one buffer: every waiting gang of a full cycle gets one (`write!` to a `String`
    // cannot fail).
    let scarce = f.scarce_slot();
    let mut text = String::with_capacity(160);
    if let Some((slot, most)) = f.beyond_every_node {
        let needs = names.amount_of(slot, f.pod_request.0[slot]);
        let _ = if most <= 0 {
            write!(text, "pod needs {needs}, which no node has. ")
        } else {
            write!(
                text,
                "pod needs {needs}, more than any node has (at most {}). ",
                names.format_amount(slot, most)
            )
        };
    } else if f.pods_needed > 1 {
        let _ = write!(text, "{} pods need ", f.pods_needed);
        match scarce {
            Some(slot) => {
                let _ = write!(
                    text,
                    "{}, {} free on {} node{}",
                    names.amount_of(slot, f.request_total.0[slot]),
                    names.format_amount(slot, f.free_on_eligible.0[slot]),
                    f.nodes_with_free,
                    if f.nodes_with_free == 1 { "" } else { "s" }
                );
            }
            None => text.push_str(&names.format(&f.request_total)),
        }
        let _ = write!(
            text,
            ": room for {} of {} (gang scheduling places all or none). ",
            f.pods_placed, f.pods_needed
        );
    } else if let Some(slot) = scarce {
        let _ = write!(
            text,
            "pod needs {}, {} free on {} node{}. ",
            names.amount_of(slot, f.pod_request.0[slot]),
            names.format_amount(slot, f.free_on_eligible.0[slot]),
            f.nodes_with_free,
            if f.nodes_with_free == 1 { "" } else { "s" }
        );
    }
    if f.failed_pod.is_empty() {
        // Nothing was tried: the constraint alone rules every domain out.
        if let Some(t) = &f.topology {
            text.push_str(t);
            text.push('.');
        }
        return text;
    }
    let fits = f.nodes - f.misses.values().sum::<usize>().min(f.nodes);
    let _ = write!(text, "Pod {} fits {fits}/{} nodes", f.failed_pod, f.nodes);
    for (i, (m, n)) in f.misses.iter().enumerate() {
        text.push_str(if i == 0 { ": " } else { ", " });
        let _ = write!(text, "{n} ");
        push_miss_text(&mut text, m, names);
    }
    if let Some(t) = &f.topology {
        text.push_str("; ");
        text.push_str(t);
    }
    text.push('.');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::constraints::StaticMiss;
    use crate::model::resources::CPU;

    #[test]
    fn a_pod_larger_than_every_node_is_told_so_without_free_figures() {
        let names = ResourceNames::default();
        let summary = FitSummary {
            pods_needed: 1,
            pod_request: Resources::new(65_000, 0, 0),
            request_total: Resources::new(65_000, 0, 0),
            nodes: 100,
            misses: BTreeMap::from([(NodeMiss::Insufficient(CPU), 100)]).into(),
            beyond_every_node: Some((CPU, 64_000)),
            ..FitSummary::default()
        };
        let f = FitFailure {
            failed_pod: "ml/wide-0".into(),
            failed_task: None,
            summary: Arc::new(summary),
        };
        assert_eq!(
            Why::NoFit(Arc::new(f)).message(&names),
            "pod needs 65 cpu, more than any node has (at most 64). Pod ml/wide-0 fits 0/100 nodes: 100 insufficient cpu."
        );
    }

    #[test]
    fn seed_003_message_says_what_is_missing() {
        let names = ResourceNames::default();
        let summary = FitSummary {
            pods_needed: 8,
            pods_placed: 6,
            request_total: Resources::new(0, 0, 8000),
            pod_request: Resources::new(0, 0, 1000),
            nodes: 3,
            misses: BTreeMap::from([(NodeMiss::Insufficient(GPU), 3)]).into(),
            free_on_eligible: Resources::new(0, 0, 6000),
            eligible_nodes: 3,
            nodes_with_free: 3,
            topology: None,
            beyond_every_node: None,
        };
        let f = FitFailure {
            failed_pod: "ml/train-6".into(),
            failed_task: None,
            summary: Arc::new(summary),
        };
        assert_eq!(
            Why::NoFit(Arc::new(f)).message(&names),
            "8 pods need 8 nvidia.com/gpu, 6 free on 3 nodes: room for 6 of 8 (gang scheduling places all or none). \
             Pod ml/train-6 fits 0/3 nodes: 3 insufficient nvidia.com/gpu."
        );
    }

    #[test]
    fn each_pod_rule_counts_its_own_nodes() {
        use crate::framework::policy::pod_rules::RuleMiss;
        use crate::model::pod_rules::{HostPort, Protocol};
        let names = ResourceNames::default();
        let summary = FitSummary {
            pods_needed: 1,
            pods_placed: 0,
            nodes: 6,
            misses: BTreeMap::from([
                (NodeMiss::Rule(RuleMiss::PodAntiAffinity), 3),
                (
                    NodeMiss::Rule(RuleMiss::HostPort(HostPort {
                        ip: None,
                        protocol: Protocol::Tcp,
                        port: 8080,
                    })),
                    2,
                ),
                (NodeMiss::Rule(RuleMiss::TopologySpread("zone".into())), 1),
            ])
            .into(),
            ..FitSummary::default()
        };
        let f = FitFailure {
            failed_pod: "ns/web-2".into(),
            summary: Arc::new(summary),
            ..FitFailure::default()
        };
        assert_eq!(
            Why::NoFit(Arc::new(f)).message(&names),
            "Pod ns/web-2 fits 0/6 nodes: 3 pod anti-affinity, 1 topology spread (zone) would exceed maxSkew, \
             2 host port 8080/TCP in use."
        );
    }

    #[test]
    fn selector_and_queue_messages() {
        let names = ResourceNames::default();
        let summary = FitSummary {
            pods_needed: 1,
            pods_placed: 0,
            nodes: 4,
            misses: BTreeMap::from([
                (NodeMiss::Static(StaticMiss::NodeSelector("zone=b".into())), 3),
                (NodeMiss::Insufficient(GPU), 1),
            ])
            .into(),
            pod_request: Resources::new(0, 0, 1000),
            nodes_with_free: 0,
            ..FitSummary::default()
        };
        let f = FitFailure {
            failed_pod: "ns/p".into(),
            summary: Arc::new(summary),
            ..FitFailure::default()
        };
        let m = Why::NoFit(Arc::new(f)).message(&names);
        assert!(m.contains("3 node selector zone=b does not match"), "{m}");
        assert!(m.contains("1 insufficient nvidia.com/gpu"), "{m}");
    }

    #[test]
    fn like_failures_share_a_summary_and_compare_by_it() {
        let summary = FitSummary {
            pods_needed: 1,
            nodes: 4,
            misses: BTreeMap::from([(NodeMiss::Insufficient(GPU), 4)]).into(),
            ..FitSummary::default()
        };
        let first = FitFailure {
            failed_pod: "ns/a".into(),
            failed_task: Some(crate::model::TaskId(1)),
            summary: Arc::new(summary.clone()),
        };
        let like = first.for_pod("ns/b".into(), crate::model::TaskId(2));
        assert!(Arc::ptr_eq(&first.summary, &like.summary));
        assert_eq!(like.nodes, 4);
        assert_eq!(like.failed_pod.to_string(), "ns/b");

        // Last cycle's reason, an equal summary in another allocation.
        let recorded = FitFailure {
            failed_pod: "ns/b".into(),
            failed_task: Some(crate::model::TaskId(2)),
            summary: Arc::new(summary.clone()),
        };
        let mut compared = ComparedSummaries::default();
        assert!(recorded.same_as(&like, &mut compared));
        assert_eq!(compared.len(), 1, "a pair compared in full is kept");
        assert!(recorded.same_as(&like, &mut compared));
        assert_eq!(compared.len(), 1, "and answered again without a new entry");
        // Another pod is another reason, whatever the summary.
        assert!(!recorded.same_as(&first, &mut compared));
        // A changed summary is a changed reason.
        let mut changed = like.clone();
        changed.nodes = 5;
        assert!(!Arc::ptr_eq(&changed.summary, &like.summary), "written on a copy");
        assert_eq!(like.nodes, 4);
        assert!(!recorded.same_as(&changed, &mut compared));
        assert_eq!(recorded == changed, recorded.same_as(&changed, &mut compared));
    }

    /// `says_same` against the message itself: over summaries that differ from a base in one field
    /// (each field the message may print, and the free room on a slot it does not name), two
    /// summaries say the same exactly when their messages are equal.
    #[test]
    fn says_same_exactly_when_the_messages_are_equal() {
        use crate::model::resources::MEMORY;
        let names = ResourceNames::default();
        let gpu_gang = FitSummary {
            pods_needed: 8,
            pods_placed: 6,
            request_total: Resources::new(8000, 8 << 30, 8000),
            pod_request: Resources::new(1000, 1 << 30, 1000),
            nodes: 3,
            misses: BTreeMap::from([(NodeMiss::Insufficient(GPU), 3)]).into(),
            free_on_eligible: Resources::new(40_000, 64 << 30, 6000),
            eligible_nodes: 3,
            nodes_with_free: 3,
            topology: None,
            beyond_every_node: None,
        };
        let one_pod = FitSummary {
            pods_needed: 1,
            pods_placed: 0,
            request_total: gpu_gang.pod_request,
            ..gpu_gang.clone()
        };
        let cpu_gang = FitSummary {
            misses: BTreeMap::from([(NodeMiss::Insufficient(CPU), 3)]).into(),
            ..gpu_gang.clone()
        };
        let no_scarce = FitSummary {
            misses: BTreeMap::from([(NodeMiss::Static(StaticMiss::Unschedulable), 3)]).into(),
            ..gpu_gang.clone()
        };
        let too_wide = FitSummary {
            beyond_every_node: Some((GPU, 8000)),
            pod_request: Resources::new(1000, 1 << 30, 16_000),
            ..one_pod.clone()
        };
        let variants = |base: &FitSummary| -> Vec<FitSummary> {
            let with = |change: &dyn Fn(&mut FitSummary)| {
                let mut s = base.clone();
                change(&mut s);
                s
            };
            vec![
                base.clone(),
                with(&|s| s.free_on_eligible.0[CPU] -= 1000),
                with(&|s| s.free_on_eligible.0[MEMORY] -= 1 << 30),
                with(&|s| s.free_on_eligible.0[GPU] -= 1000),
                with(&|s| s.nodes_with_free -= 1),
                with(&|s| s.eligible_nodes -= 1),
                with(&|s| s.pods_placed += 1),
                with(&|s| s.pods_needed += 1),
                with(&|s| s.request_total.0[CPU] += 1000),
                with(&|s| s.request_total.0[GPU] += 1000),
                with(&|s| s.pod_request.0[MEMORY] += 1 << 30),
                with(&|s| s.pod_request.0[GPU] += 1000),
                with(&|s| s.nodes += 1),
                with(&|s| s.topology = Some("no rack has room".into())),
                with(&|s| s.misses = BTreeMap::from([(NodeMiss::Insufficient(MEMORY), 3)]).into()),
            ]
        };
        let message = |s: &FitSummary| {
            fit_message(
                &FitFailure {
                    failed_pod: "ml/train-6".into(),
                    failed_task: None,
                    summary: Arc::new(s.clone()),
                },
                &names,
            )
        };
        let mut unnamed_changes = 0;
        for base in [&gpu_gang, &one_pod, &cpu_gang, &no_scarce, &too_wide] {
            let all = variants(base);
            for a in &all {
                for b in &all {
                    let same_text = message(a) == message(b);
                    assert_eq!(a.says_same(b), same_text, "{a:?}\n{b:?}");
                    if same_text && a != b {
                        unnamed_changes += 1;
                    }
                }
            }
        }
        // The point of it: changes the message does not print (free CPU and memory while GPUs are
        // scarce, among others) are no news.
        assert!(unnamed_changes > 0);
        assert!(gpu_gang.says_same(&variants(&gpu_gang)[1]));
        assert!(!gpu_gang.says_same(&variants(&gpu_gang)[3]));
    }
}
