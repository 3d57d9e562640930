//! A gang: a KAI PodGroup or a Volcano PodGroup, with its sub-groups, members and what is wrong with it.

use std::any::Any;
use std::sync::Arc;

use super::ids::{QueueId, TaskId};
use super::resources::Resources;
use super::time::Millis;

/// Which API a gang comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupKind {
    /// `scheduling.run.ai` PodGroup.
    Kai,
    /// `scheduling.volcano.sh` PodGroup.
    Volcano,
}

/// Identity of a gang: pods name it by namespace and name, per API.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// API it comes from.
    pub kind: GroupKind,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl std::fmt::Display for GroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Topology placement of a gang or sub-group, resolved to node label keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct TopologyRequirement {
    /// Topology object name (for messages).
    pub topology: Arc<str>,
    /// Label keys of the levels, widest first.
    pub levels: Vec<String>,
    /// Index into `levels` all pods must share, if required.
    pub required: Option<usize>,
    /// Index into `levels` pods should share, if preferred.
    pub preferred: Option<usize>,
}

/// A topology constraint as written: topology name, required level, preferred level.
pub type TopologySpec = (String, Option<String>, Option<String>);

/// A sub-group as declared on the PodGroup (`spec.subGroups`), validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubGroupDecl {
    /// Name.
    pub name: Arc<str>,
    /// Minimum: pods for a leaf, satisfied children for an inner sub-group.
    pub min_member: u32,
    /// Index of the parent in the PodGroup's list.
    pub parent: Option<usize>,
    /// Placement.
    pub topology: Option<TopologyRequirement>,
}

/// A problem with a gang's definition or references that the schema could not stop. Each becomes a
/// condition and an event on the PodGroup.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupProblem {
    /// `spec.queue` names no Queue.
    QueueNotFound(String),
    /// `spec.queue` names a Queue that has children; only leaf queues take work.
    QueueNotLeaf(String),
    /// The queue or one of its ancestors is invalid (cycle, missing parent).
    QueueInvalid(String),
    /// `spec.priorityClassName` names no PriorityClass (the default priority is used meanwhile).
    PriorityClassNotFound(String),
    /// `maxMember` below `minMember`.
    MaxBelowMin {
        /// minMember.
        min: u32,
        /// maxMember.
        max: u32,
    },
    /// Sub-groups with the same name.
    DuplicateSubGroup(String),
    /// A sub-group's parent that does not exist.
    UnknownSubGroupParent {
        /// Sub-group.
        subgroup: String,
        /// Its parent.
        parent: String,
    },
    /// A cycle among `parentPodGroup` links.
    Cycle(String),
    /// A cycle among sub-group `parent` links.
    SubGroupCycle(String),
    /// `parentPodGroup` names no PodGroup in the namespace.
    ParentNotFound(String),
    /// A topology constraint that cannot be resolved.
    Topology(String),
    /// `minMember` exceeds the members the gang can ever have (`maxMember`).
    MinMemberUnreachable {
        /// minMember.
        min: u32,
        /// The most members it can have.
        possible: u32,
    },
    /// A Volcano `minResources` entry that cannot be counted. Blocking, like any invalid definition:
    /// dropping it would gate the gang on less than the user asked for.
    InvalidMinResource {
        /// The resource name.
        resource: String,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        fault: MinResourceFault,
    },
    /// Scheduling this gang hit an internal error (a panic the cycle survived). Blocking until the
    /// PodGroup's definition changes, so one gang cannot stop scheduling for everyone.
    SchedulingCrashed(String),
}

/// What is wrong with a `minResources` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MinResourceFault {
    /// Not a number with an optional suffix.
    NotAQuantity,
    /// Below zero.
    Negative,
    /// Too large for the scheduler's counters.
    TooLarge,
    /// A resource kind beyond the most the scheduler tracks.
    TooManyKinds,
}

impl GroupProblem {
    /// Whether the problem comes from resolving references against other objects (queues, priority
    /// classes, topologies, parent PodGroups) rather than from the gang's own definition.
    #[must_use]
    pub fn is_resolution(&self) -> bool {
        matches!(
            self,
            Self::QueueNotFound(_)
                | Self::QueueNotLeaf(_)
                | Self::QueueInvalid(_)
                | Self::PriorityClassNotFound(_)
                | Self::Topology(_)
                | Self::ParentNotFound(_)
                | Self::Cycle(_)
        )
    }

    /// Whether the gang can still be scheduled (with a warning) despite the problem.
    #[must_use]
    pub fn is_blocking(&self) -> bool {
        !matches!(self, Self::PriorityClassNotFound(_))
    }

    /// CamelCase reason for conditions and events.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::QueueNotFound(_) => "QueueDoesNotExist",
            Self::QueueNotLeaf(_) => "QueueNotLeaf",
            Self::QueueInvalid(_) => "QueueInvalid",
            Self::PriorityClassNotFound(_) => "PriorityClassNotFound",
            Self::MaxBelowMin { .. } | Self::MinMemberUnreachable { .. } => "InvalidMinMember",
            Self::DuplicateSubGroup(_) | Self::UnknownSubGroupParent { .. } => "InvalidSubGroups",
            Self::Cycle(_) => "ParentPodGroupCycle",
            Self::SubGroupCycle(_) => "InvalidSubGroups",
            Self::ParentNotFound(_) => "ParentPodGroupNotFound",
            Self::Topology(_) => "InvalidTopology",
            Self::InvalidMinResource { .. } => "InvalidMinResources",
            Self::SchedulingCrashed(_) => "SchedulingError",
        }
    }
}

impl std::fmt::Display for GroupProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::QueueNotFound(q) => write!(
                f,
                "queue {q:?} does not exist; create it or set spec.queue to an existing leaf queue"
            ),
            Self::QueueNotLeaf(q) => {
                write!(f, "queue {q:?} has child queues; only leaf queues take workloads")
            }
            Self::QueueInvalid(why) => write!(f, "queue is invalid: {why}"),
            Self::PriorityClassNotFound(p) => {
                write!(
                    f,
                    "priority class {p:?} does not exist; scheduling with the default priority"
                )
            }
            Self::MaxBelowMin { min, max } => write!(f, "maxMember {max} is below minMember {min}"),
            Self::DuplicateSubGroup(s) => write!(f, "sub-group {s:?} is declared twice"),
            Self::UnknownSubGroupParent { subgroup, parent } => {
                write!(
                    f,
                    "sub-group {subgroup:?} names parent {parent:?}, which is not declared"
                )
            }
            Self::Cycle(path) | Self::SubGroupCycle(path) => write!(f, "cycle: {path}"),
            Self::ParentNotFound(p) => write!(f, "parentPodGroup {p:?} does not exist in this namespace"),
            Self::Topology(why) => write!(f, "topology constraint: {why}"),
            Self::MinMemberUnreachable { min, possible } => {
                write!(
                    f,
                    "minMember {min} can never be met: the gang can have at most {possible} pods"
                )
            }
            Self::InvalidMinResource {
                resource,
                value,
                fault,
            } => {
                let what = match fault {
                    MinResourceFault::NotAQuantity => "is not a quantity",
                    MinResourceFault::Negative => "is negative",
                    MinResourceFault::TooLarge => "is too large to count",
                    MinResourceFault::TooManyKinds => {
                        "names a resource kind beyond the most the scheduler can track"
                    }
                };
                write!(f, "minResources {resource:?}: {value:?} {what}")
            }
            Self::SchedulingCrashed(why) => write!(
                f,
                "scheduling this gang hit an internal error ({why}); it is set aside until its PodGroup \
                 changes, and the rest of the cluster is scheduled as usual. Please report this with the \
                 scheduler's logs"
            ),
        }
    }
}

/// What the API says the gang's status is, to write only what changes.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ObservedStatus {
    /// The status as last seen (or as last written, until the write is seen).
    pub status: Option<super::group_status::SeenStatus>,
    /// Fingerprint of that status, timestamps excluded.
    pub fingerprint: u64,
    /// Gist of the reason the last Unschedulable event gave (`explain::gist_fingerprint` of the first
    /// reason: a new event when the reason changes, not its figures; in memory only).
    pub event_fingerprint: u64,
}

/// A status the scheduler decided for a group: when, its fingerprint, and its gist (the fingerprint with
/// every live figure of the reasons left out, so two statuses that differ only in "5 free on 3 nodes"
/// against "6 free on 3 nodes" have the same gist).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusWritten {
    /// When it was decided.
    pub at: Millis,
    /// [`crate::model::group_status::DecidedStatus::fingerprint`].
    pub fingerprint: u64,
    /// [`crate::model::group_status::DecidedStatus::gist`].
    pub gist: u64,
    /// How long after `at` a status differing from it only in live figures may replace it: doubled at
    /// each such refresh, from the first wait again when anything else changes.
    pub refresh_ms: Millis,
    /// A later status, differing from it only in live figures, is held back until the refresh.
    pub newer_held_back: bool,
}

/// A gang in the model.
#[derive(Clone, Debug)]
pub struct Group {
    /// Identity.
    pub key: GroupKey,
    /// Object UID (for owner references of events).
    pub uid: Arc<str>,
    /// Queue name as written (default queue when empty).
    pub queue_name: Arc<str>,
    /// Resolved queue, when it exists and is a leaf.
    pub queue: Option<QueueId>,
    /// Priority class name, if any.
    pub priority_class: Option<Arc<str>>,
    /// Explicit integer priority (seed documents' `spec.priority`).
    pub explicit_priority: Option<i32>,
    /// Explicit preemptibility (`spec.preemptibility`).
    pub explicit_preemptible: Option<bool>,
    /// Effective priority (resolved each time priority classes change).
    pub priority: i32,
    /// Effective preemptibility.
    pub preemptible: bool,
    /// Gang minimum (pods; or satisfied children for a parent of other PodGroups).
    pub min_member: u32,
    /// Elastic maximum.
    pub max_member: Option<u32>,
    /// Declared sub-groups.
    pub subgroups: Vec<SubGroupDecl>,
    /// Seed `parentPodGroup`.
    pub parent_name: Option<Arc<str>>,
    /// Gang-level topology.
    pub topology: Option<TopologyRequirement>,
    /// Topology as written (name, required level, preferred level), resolved against Topology objects.
    pub topology_spec: Option<TopologySpec>,
    /// Sub-group topology as written, by sub-group index.
    pub subgroup_topology_specs: Vec<Option<TopologySpec>>,
    /// Seconds it may wait unplaced before it fails.
    pub schedule_timeout_secs: Option<i64>,
    /// Whether pods get Unschedulable conditions.
    pub mark_unschedulable: bool,
    /// `spec.schedulingBackoff` other than -1 (KAI: 1): once found unschedulable on a node pool, the
    /// gang is not tried there again while that pool's `schedulingConditions` entry is its last.
    pub scheduling_backoff: bool,
    /// Volcano `minResources`, checked against free capacity before placing.
    pub min_resources: Option<Resources>,
    /// Creation time.
    pub created: Millis,
    /// The UID of the pod this PodGroup was made for, when a podgrouper made it for that pod alone
    /// (it is owned by the pod): a pod that names no gang joins the one made for it.
    pub owner_pod: Option<Arc<str>>,
    /// When its gang last started (`kai.scheduler/last-start-timestamp`, KAI's annotation; read only).
    pub last_start: Option<Millis>,
    /// When it was first seen running below its minimum. Kept in memory by stale-gang eviction; taken
    /// from the annotation below only when that first appears or changes ([`Cluster::apply_group`]), so
    /// an update of anything else (our own status echo) does not restart the grace period.
    ///
    /// [`Cluster::apply_group`]: crate::model::Cluster::apply_group
    pub stale_since: Option<Millis>,
    /// The `kai.scheduler/stale-podgroup-timestamp` annotation as last seen (KAI writes it, so a switch
    /// from KAI keeps a running grace period; this scheduler never does).
    pub stale_annotation: Option<Millis>,
    /// Members.
    pub tasks: Vec<TaskId>,
    /// Problems found in the definition.
    pub problems: Vec<GroupProblem>,
    /// Status as last observed.
    pub observed: ObservedStatus,
    /// When it first became schedulable-but-unplaced (for the timeout); reset when placed.
    pub waiting_since: Option<Millis>,
    /// Whether it timed out (`scheduleTimeoutSeconds`) and is now Failed.
    pub timed_out: bool,
    /// The last status decided for it (in memory only), which paces rewrites that change nothing but
    /// live figures (`framework::report::status::FIGURES_REFRESH_MS`, `FIGURES_REFRESH_MAX_MS`).
    pub status_written: Option<StatusWritten>,
    /// Bumped whenever its definition or members change (memo key for "still does not fit").
    pub version: u64,
    /// Fingerprint of everything its last status report read, taken after that report's writes
    /// (`framework::report::status`): while it is unchanged the report would decide nothing, and is
    /// skipped. 0 when none.
    pub report_inputs: u64,
    /// The reasons that report gave, as the framework stored them (type-erased like
    /// [`crate::model::NoFitMemo`]'s: the model must not name the framework's explanation type). Part
    /// of the inputs above; compared rather than hashed, which would mean formatting them.
    pub report_why: Option<Arc<dyn Any + Send + Sync>>,
}

impl Group {
    /// A gang with defaults, for builders and tests.
    #[must_use]
    pub fn new(key: GroupKey, queue: &str, min_member: u32) -> Self {
        Self {
            key,
            uid: "".into(),
            queue_name: queue.into(),
            queue: None,
            priority_class: None,
            explicit_priority: None,
            explicit_preemptible: None,
            priority: api::keys::DEFAULT_PRIORITY,
            preemptible: true,
            min_member,
            max_member: None,
            subgroups: Vec::new(),
            parent_name: None,
            topology: None,
            topology_spec: None,
            subgroup_topology_specs: Vec::new(),
            schedule_timeout_secs: None,
            mark_unschedulable: true,
            scheduling_backoff: false,
            min_resources: None,
            created: 0,
            owner_pod: None,
            last_start: None,
            stale_since: None,
            stale_annotation: None,
            tasks: Vec::new(),
            problems: Vec::new(),
            observed: ObservedStatus::default(),
            waiting_since: None,
            status_written: None,
            timed_out: false,
            version: 0,
            report_inputs: 0,
            report_why: None,
        }
    }

    /// Whether two versions declare the same gang (status and scheduler-owned annotations aside).
    #[must_use]
    pub fn same_definition(&self, other: &Self) -> bool {
        self.key == other.key
            && self.uid == other.uid
            && self.queue_name == other.queue_name
            && self.priority_class == other.priority_class
            && self.explicit_priority == other.explicit_priority
            && self.explicit_preemptible == other.explicit_preemptible
            && self.min_member == other.min_member
            && self.max_member == other.max_member
            && self.subgroups == other.subgroups
            && self.parent_name == other.parent_name
            && self.topology_spec == other.topology_spec
            && self.subgroup_topology_specs == other.subgroup_topology_specs
            && self.schedule_timeout_secs == other.schedule_timeout_secs
            && self.mark_unschedulable == other.mark_unschedulable
            && self.scheduling_backoff == other.scheduling_backoff
            && self.min_resources == other.min_resources
            && self.created == other.created
            && self.owner_pod == other.owner_pod
            && self
                .problems
                .iter()
                .filter(|p| !p.is_resolution())
                .eq(other.problems.iter().filter(|p| !p.is_resolution()))
    }

    /// Whether `schedulingBackoff` keeps the gang from being tried on `node_pool`: it asks for back-off
    /// and the last of its `schedulingConditions` (highest `transitionID`; one that does not parse
    /// counts as -1, the first of equals wins, as KAI reads them) is about that pool.
    #[must_use]
    pub fn backed_off_on(&self, node_pool: &str) -> bool {
        if !self.scheduling_backoff {
            return false;
        }
        self.observed
            .status
            .as_ref()
            .and_then(super::group_status::SeenStatus::last_scheduling_pool)
            .is_some_and(|pool| pool == node_pool)
    }

    /// The first problem that stops scheduling, if any.
    #[must_use]
    pub fn blocking_problem(&self) -> Option<&GroupProblem> {
        self.problems.iter().find(|p| p.is_blocking())
    }
}
