//! `Queue` in `scheduling.run.ai/v2`: a node of the cluster-wide fair-share tree.
//!
//! Units follow KAI: GPU in devices (fractions allowed), CPU in millicores, memory in megabytes (10^6
//! bytes). `quota` is the deserved share (-1 unlimited), `limit` a hard cap (-1 none), and
//! `overQuotaWeight` the weight for surplus among queues of the same priority.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a queue.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.run.ai",
    version = "v2",
    kind = "Queue",
    plural = "queues",
    singular = "queue",
    shortname = "q",
    status = "QueueStatus",
    category = "kai",
    doc = "A node of the fair-share tree of queues.",
    printcolumn = r#"{"name":"Parent","type":"string","jsonPath":".spec.parentQueue"}"#,
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"GPU-Quota","type":"number","jsonPath":".spec.resources.gpu.quota"}"#,
    printcolumn = r#"{"name":"GPU-Limit","type":"number","jsonPath":".spec.resources.gpu.limit"}"#,
    printcolumn = r#"{"name":"GPU-Allocated","type":"string","jsonPath":".status.allocated.nvidia\\.com/gpu","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    /// Human-friendly name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Parent queue; absent for top-level queues. Only leaf queues take workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_queue: Option<String>,
    /// Queues of higher priority get surplus first and are reclaimed from last. Default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Minimum time a gang of this queue runs before preemption may evict it (e.g. `10m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_min_runtime: Option<String>,
    /// Minimum time a gang of this queue runs before reclaim may evict it (e.g. `10m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_min_runtime: Option<String>,
    /// Per-resource quota, limit and over-quota weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<QueueResources>,
}

/// Quota, limit and weight for each resource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueResources {
    /// CPU in millicores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<ResourceQuota>,
    /// GPUs in devices (fractions allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<ResourceQuota>,
    /// Memory in megabytes (10^6 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<ResourceQuota>,
    /// Any other extended resource, keyed by its resource name, in its own units.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended: BTreeMap<String, ResourceQuota>,
}

/// Quota, limit and over-quota weight of one resource. -1 means unlimited for quota and limit.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuota {
    /// Deserved amount; -1 unlimited; 0 or unset none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1.0))]
    pub quota: Option<f64>,
    /// Hard cap; -1 or unset none; 0 allows none of this resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1.0))]
    pub limit: Option<f64>,
    /// Weight for dividing surplus among queues of equal priority. Unset means 1; 0 takes no surplus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub over_quota_weight: Option<f64>,
}

/// Observed state of a queue, written by the scheduler.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// Conditions (`Valid`, `OverQuota`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<QueueCondition>,
    /// Names of child queues.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_queues: Vec<String>,
    /// Allocated to running work in this queue and its children.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocated: BTreeMap<String, Quantity>,
    /// Allocated to non-preemptible work.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocated_non_preemptible: BTreeMap<String, Quantity>,
    /// Requested by running and pending work.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requested: BTreeMap<String, Quantity>,
    /// Fair share computed in the last cycle.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fair_share: BTreeMap<String, Quantity>,
}

/// A condition on a queue.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When last probed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<String>,
    /// When the status last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// One-word CamelCase reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
