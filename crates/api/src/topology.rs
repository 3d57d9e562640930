//! `Topology` in `kai.scheduler/v1alpha1`: the levels of the physical layout, from widest to narrowest
//! (for example zone, rack, host), each a node label. PodGroups name one in `topologyConstraint.topology`.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Levels of a topology, widest first.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "kai.scheduler",
    version = "v1alpha1",
    kind = "Topology",
    plural = "topologies",
    singular = "topology",
    category = "kai",
    doc = "The levels of a physical layout, widest first.",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TopologySpec {
    /// Levels from the widest (e.g. zone) to the narrowest (e.g. host).
    #[schemars(length(min = 1))]
    pub levels: Vec<TopologyLevel>,
}

/// One level of a topology.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyLevel {
    /// Node label whose value names the domain at this level.
    #[schemars(length(min = 1))]
    pub node_label: String,
}
