//! A queue of the fair-share tree, as declared. The fair-share arithmetic lives in `crate::fairshare`.

use std::sync::Arc;

use super::ids::QueueId;
use super::resources::MAX_RESOURCES;
use super::time::Millis;

/// Quota, limit and over-quota weight of one resource, in share units (GPU devices, CPU millicores,
/// memory megabytes, extended resources in their own units). `-1` means unlimited.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QueueResourceSpec {
    /// Deserved amount; -1 unlimited.
    pub quota: f64,
    /// Hard cap; -1 none.
    pub limit: f64,
    /// Weight for surplus.
    pub weight: f64,
}

impl Default for QueueResourceSpec {
    /// Unset: no quota, no limit, weight 1.
    fn default() -> Self {
        Self {
            quota: 0.0,
            limit: -1.0,
            weight: 1.0,
        }
    }
}

/// A problem with a queue's definition.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum QueueProblem {
    /// `parentQueue` names no queue.
    ParentNotFound(String),
    /// The parent chain loops.
    Cycle(String),
    /// A min-runtime that is not a duration.
    BadDuration(String),
}

impl std::fmt::Display for QueueProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ParentNotFound(p) => write!(f, "parent queue {p:?} does not exist"),
            Self::Cycle(path) => write!(f, "parent queues form a cycle: {path}"),
            Self::BadDuration(d) => write!(f, "{d}"),
        }
    }
}

/// A queue in the model.
#[derive(Clone, Debug)]
pub struct Queue {
    /// Name.
    pub name: Arc<str>,
    /// Parent name as written.
    pub parent_name: Option<Arc<str>>,
    /// Resolved parent.
    pub parent: Option<QueueId>,
    /// Resolved children.
    pub children: Vec<QueueId>,
    /// Priority (default 100).
    pub priority: i32,
    /// Creation time (older wins ties).
    pub created: Millis,
    /// Per resource slot quota/limit/weight; slots the queue does not mention use the default.
    pub resources: [QueueResourceSpec; MAX_RESOURCES],
    /// Minimum runtime before preemption may evict its gangs.
    pub preempt_min_runtime_ms: Option<i64>,
    /// Minimum runtime before reclaim may evict its gangs.
    pub reclaim_min_runtime_ms: Option<i64>,
    /// Problems with its definition.
    pub problems: Vec<QueueProblem>,
    /// Fingerprint of the status last written.
    pub observed_fingerprint: u64,
}

impl Queue {
    /// A queue with defaults (unlimited, weight 1, priority 100).
    #[must_use]
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            parent_name: None,
            parent: None,
            children: Vec::new(),
            priority: 100,
            created: 0,
            resources: [QueueResourceSpec {
                quota: -1.0,
                limit: -1.0,
                weight: 1.0,
            }; MAX_RESOURCES],
            preempt_min_runtime_ms: None,
            reclaim_min_runtime_ms: None,
            problems: Vec::new(),
            observed_fingerprint: 0,
        }
    }

    /// Only leaf queues take workloads.
    #[must_use]
    pub fn is_leaf(&self) -> bool {
        self.children.is_empty()
    }
}
