//! `PodGroup` in `scheduling.run.ai`: a gang of pods placed all together or not at all.
//!
//! One Rust type serves both API versions: `v2alpha2` (KAI's, the storage version) and `v2` (the version
//! the seed documents use). The CRD lists both with the same schema, so objects convert by renaming
//! `apiVersion` only (no conversion webhook). See [`crd`].

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The UID of the pod a podgrouper made a PodGroup for alone: the group's one owner reference to a
/// Pod, on a group carrying the podgrouper's `kai.scheduler/top-owner-metadata` annotation (KAI's
/// podgrouper writes it too), so a group someone else hung on a pod does not count. The scheduler
/// links a pod that names no group to such a group, and the podgrouper leaves such a pod unpatched
/// until it is needed; both read the rule here.
#[must_use]
pub fn made_for_pod<'a>(
    owners: &'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    annotations: Option<&BTreeMap<String, String>>,
) -> Option<&'a str> {
    annotations?.get(crate::keys::TOP_OWNER_METADATA)?;
    let mut pods = owners
        .iter()
        .filter(|o| o.kind == "Pod" && o.api_version == "v1" && !o.uid.is_empty());
    match (pods.next(), pods.next()) {
        (Some(o), None) => Some(o.uid.as_str()),
        _ => None,
    }
}

/// The version KAI serves and stores.
pub const STORAGE_VERSION: &str = "v2alpha2";
/// The version the seed documents write.
pub const SEED_VERSION: &str = "v2";

/// Desired state of a gang.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.run.ai",
    version = "v2alpha2",
    kind = "PodGroup",
    plural = "podgroups",
    singular = "podgroup",
    shortname = "pg",
    namespaced,
    status = "PodGroupStatus",
    category = "kai",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"MinMember","type":"integer","jsonPath":".spec.minMember"}"#,
    printcolumn = r#"{"name":"Queue","type":"string","jsonPath":".spec.queue"}"#,
    printcolumn = r#"{"name":"Running","type":"integer","jsonPath":".status.running","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "A gang of pods placed all together or not at all.",
    // CEL runs only on servers from 1.25; older servers ignore it and the scheduler reports the same
    // problem in the PodGroup's status instead.
    validation = kube::core::Rule::new(
        "!has(self.spec.maxMember) || !has(self.spec.minMember) || self.spec.maxMember >= self.spec.minMember"
    )
    .message("spec.maxMember must be at least spec.minMember"),
)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// Minimal number of pods that must be placed together; none starts unless this many fit.
    /// Absent means 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_member: Option<i32>,

    /// Elastic upper bound (seed 000): members beyond `minMember` are placed as room allows, up to this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_member: Option<i32>,

    /// Leaf queue the gang's resources are accounted to. Empty means the default queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,

    /// Name of a PriorityClass giving the gang's priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,

    /// Priority as a plain integer (seed documents). Used when no `priorityClassName` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,

    /// Whether higher-priority work may evict this gang. Unset: preemptible when priority < 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptibility: Option<Preemptibility>,

    /// Whether pods get `PodScheduled=False` conditions and events while waiting. Unset means true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark_unschedulable: Option<bool>,

    /// Cycles before the gang is marked unschedulable for its node pool: -1 (no backoff) or 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub scheduling_backoff: Option<i32>,

    /// Seconds a gang may wait unplaced before it moves to phase `Failed` (seed 000, step 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub schedule_timeout_seconds: Option<i64>,

    /// Name of a parent PodGroup in the same namespace (seed 000, step 5): the parent is placed only
    /// when every child meets its own minimum, and the whole tree is placed at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_pod_group: Option<String>,

    /// Gang-level topology placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_constraint: Option<TopologyConstraint>,

    /// Sub-gangs with their own minimums, nested through `parent`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub sub_groups: Vec<SubGroup>,

    /// Legacy KAI field; not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<i32>,
    /// Legacy KAI field; not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<i32>,
    /// Legacy KAI field; not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
}

/// Preemptibility of a gang.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Preemptibility {
    /// May be evicted by higher-priority work in its queue and by reclaim from other queues.
    Preemptible,
    /// Never evicted; must stay within its queue's quota.
    NonPreemptible,
}

/// Topology placement of a gang or sub-group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyConstraint {
    /// Name of the `Topology` object describing the levels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<String>,
    /// Level all pods must share one domain of (e.g. `rack`); a node label key or a level name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_topology_level: Option<String>,
    /// Level pods should share when possible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_topology_level: Option<String>,
}

impl TopologyConstraint {
    /// True when neither a required nor a preferred level is set.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        non_empty(self.required_topology_level.as_deref()).is_none()
            && non_empty(self.preferred_topology_level.as_deref()).is_none()
    }
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}

/// A sub-gang inside a PodGroup. Pods join it through the `kai.scheduler/subgroup-name` label.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubGroup {
    /// Unique name within the PodGroup.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Minimal number of pods of this sub-group (leaf) or of satisfied children (inner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_member: Option<i32>,
    /// Name of the enclosing sub-group; absent for top-level sub-groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Placement of this sub-group's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_constraint: Option<TopologyConstraint>,
}

/// Observed state of a gang, written by the scheduler.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// Lifecycle phase: Pending, PreScheduling, Scheduled, Running, Failed or Finished. A plain string in
    /// the schema, as in KAI's CRD, so phases other tools write are accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub phase: Option<PodGroupPhase>,
    /// Conditions (`Scheduled`, `Unschedulable`, `Invalid`, `TimedOut`, the podgrouper's warnings).
    /// A map keyed by type, so each writer's server-side apply keeps the others' conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<PodGroupCondition>,
    /// KAI's per-node-pool scheduling conditions, with structured reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scheduling_conditions: Vec<SchedulingCondition>,
    /// Pods running (bound and not finished).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i32>,
    /// Pods that succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    /// Pods that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    /// Pods waiting to be placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<i32>,
    /// Resources allocated to and requested by the gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_status: Option<PodGroupResourcesStatus>,
}

/// Lifecycle phase of a PodGroup, as the seed documents describe it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum PodGroupPhase {
    /// Waiting for room for `minMember` pods (or for its pods to exist).
    Pending,
    /// Placement found; resources are being freed for it (evictions under way).
    PreScheduling,
    /// At least `minMember` pods are bound.
    Scheduled,
    /// At least `minMember` pods are running.
    Running,
    /// Timed out waiting (`scheduleTimeoutSeconds`) or invalid.
    Failed,
    /// All pods finished.
    Finished,
    /// A phase written by another tool.
    #[serde(other)]
    Unknown,
}

impl PodGroupPhase {
    /// The name as written in `status.phase`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::PreScheduling => "PreScheduling",
            Self::Scheduled => "Scheduled",
            Self::Running => "Running",
            Self::Failed => "Failed",
            Self::Finished => "Finished",
            Self::Unknown => "Unknown",
        }
    }
}

/// A condition on a PodGroup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Monotonic id of the transition (KAI's field).
    #[serde(default, rename = "transitionID", skip_serializing_if = "Option::is_none")]
    pub transition_id: Option<String>,
    /// When the condition last changed status (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// One-word CamelCase reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// KAI's `schedulingConditions[]` entry.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingCondition {
    /// `UnschedulableOnNodePool`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Node pool the condition is about (`default` without pools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    /// Deprecated in KAI in favour of `reasons`; still filled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Deprecated in KAI in favour of `reasons`; still filled with the full explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Structured reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<UnschedulableExplanation>,
    /// Monotonic id of the transition.
    #[serde(default, rename = "transitionID", skip_serializing_if = "Option::is_none")]
    pub transition_id: Option<String>,
    /// When the condition last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// `True` while unschedulable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// One reason a gang cannot be placed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnschedulableExplanation {
    /// Reason code: `OverLimit`, `NonPreemptibleOverQuota`, `QueueDoesNotExist`, `PodSchedulingErrors`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Structured details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<UnschedulableDetails>,
}

/// Structured details of an unschedulable reason.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnschedulableDetails {
    /// The queue's accounting at the time of the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_details: Option<QueueDetails>,
}

/// A queue's accounting as reported on a waiting gang.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueDetails {
    /// Queue name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Requested by all jobs of the queue.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub queue_requested_resources: BTreeMap<String, Quantity>,
    /// Deserved (quota).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub queue_deserved_resources: BTreeMap<String, Quantity>,
    /// Allocated.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub queue_allocated_resources: BTreeMap<String, Quantity>,
    /// Allocated to non-preemptible work.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub queue_allocated_non_preemptible_resources: BTreeMap<String, Quantity>,
    /// Limits.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub queue_resource_limits: BTreeMap<String, Quantity>,
    /// What the gang asks for.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_group_requested_resources: BTreeMap<String, Quantity>,
    /// What the gang asks for, non-preemptible part.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_group_requested_non_preemptible_resources: BTreeMap<String, Quantity>,
}

/// Resources of a gang.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupResourcesStatus {
    /// Allocated to its bound pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocated: BTreeMap<String, Quantity>,
    /// Allocated, counting only non-preemptible gangs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocated_non_preemptible: BTreeMap<String, Quantity>,
    /// Requested by all its pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requested: BTreeMap<String, Quantity>,
}

impl PodGroupSpec {
    /// The effective gang minimum (KAI: `max(minMember, 1)`).
    #[must_use]
    pub fn effective_min_member(&self) -> u32 {
        self.min_member
            .map_or(1, |m| u32::try_from(m).unwrap_or(0).max(1))
    }
}

/// The PodGroup CRD with both served versions (`v2alpha2` stored, `v2` for the seed documents).
#[must_use]
pub fn crd() -> CustomResourceDefinition {
    let mut crd = crate::tidy(PodGroup::crd());
    let mut seed: CustomResourceDefinitionVersion = crd.spec.versions[0].clone();
    seed.name = SEED_VERSION.to_owned();
    seed.storage = false;
    seed.served = true;
    crd.spec.versions.push(seed);
    crd
}
