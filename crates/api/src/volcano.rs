//! Volcano's `scheduling.volcano.sh/v1beta1` PodGroup, honoured for users coming from Volcano.
//!
//! Its CRD is kept apart from ours (`crds/volcano/`) and installed only where Volcano is absent. Pods
//! join it with the `scheduling.k8s.io/group-name` annotation.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Volcano's gang.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.volcano.sh",
    version = "v1beta1",
    kind = "PodGroup",
    plural = "podgroups",
    singular = "podgroup",
    shortname = "podgroup-v1beta1",
    namespaced,
    doc = "Volcano's gang, honoured as a gang by this scheduler.",
    status = "VolcanoPodGroupStatus",
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"MinMember","type":"integer","jsonPath":".spec.minMember"}"#,
    printcolumn = r#"{"name":"Queue","type":"string","jsonPath":".spec.queue"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoPodGroupSpec {
    /// Minimal number of pods placed together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_member: Option<i32>,
    /// Minimal number of pods per task (role) name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub min_task_member: BTreeMap<String, i32>,
    /// Total resources the gang needs; checked against free capacity before placing pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub min_resources: BTreeMap<String, Quantity>,
    /// Queue name; mapped onto a `scheduling.run.ai` Queue of the same name, else the default queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// PriorityClass of the gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

/// Volcano's PodGroup status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoPodGroupStatus {
    /// `Pending`, `Inqueue`, `Running`, `Unknown` or `Completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<crate::podgroup::PodGroupCondition>,
    /// Running pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i32>,
    /// Succeeded pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    /// Failed pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
}
