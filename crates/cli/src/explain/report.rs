//! The report `kai explain pg` shows, as plain serializable values (its JSON output is these structs).

use std::collections::BTreeMap;

use serde::Serialize;

/// Resource amounts by resource name, in Kubernetes notation (`8`, `500m`, `8Gi`).
pub type Amounts = BTreeMap<String, String>;

/// A reason code and its message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reason {
    /// CamelCase code (`PodSchedulingErrors`, `OverLimit`, ...).
    pub reason: String,
    /// What a user can act on.
    pub message: String,
}

/// The PodGroup's pods by state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStates {
    /// All pods naming the PodGroup.
    pub total: u32,
    /// Running.
    pub running: u32,
    /// Bound, not yet running.
    pub bound: u32,
    /// Reserved on a node being freed for it.
    pub reserved: u32,
    /// Waiting for a node.
    pub pending: u32,
    /// Held by scheduling gates.
    pub gated: u32,
    /// Being deleted.
    pub releasing: u32,
    /// Finished successfully.
    pub succeeded: u32,
    /// Finished with an error.
    pub failed: u32,
}

/// A condition as written on the PodGroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WrittenCondition {
    /// Type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True` / `False`.
    pub status: String,
    /// Reason.
    pub reason: Option<String>,
    /// Message.
    pub message: Option<String>,
    /// Last transition.
    pub since: Option<String>,
}

/// What the scheduler wrote in the PodGroup's status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WrittenStatus {
    /// Phase.
    pub phase: Option<String>,
    /// Conditions.
    pub conditions: Vec<WrittenCondition>,
    /// KAI's `schedulingConditions` reasons.
    pub scheduling_reasons: Vec<Reason>,
}

/// Where the gang stands in the simulated cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Its minimum is placed.
    Placed,
    /// The scheduler would place it (or reserve room for it) in its next cycle.
    WouldBePlaced,
    /// It waits.
    Waiting,
}

/// What the gang asks for now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangRequest {
    /// Pods the scheduler would try to place now.
    pub pods: u32,
    /// Their total request.
    pub total: Amounts,
    /// The largest of them, whose node fit is shown.
    pub largest_pod: String,
    /// Its request.
    pub largest_pod_request: Amounts,
}

/// Nodes that refuse one pod for one reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCount {
    /// The reason.
    pub reason: String,
    /// Nodes.
    pub nodes: usize,
}

/// How every node answers for the largest pod to place.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFit {
    /// The pod (`namespace/name`).
    pub pod: String,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Nodes passing its placement rules (readiness, cordon, selector, affinity, taints).
    pub eligible: usize,
    /// Free now on the eligible nodes.
    pub free_on_eligible: Amounts,
    /// Nodes it fits on now.
    pub fits_now: usize,
    /// Nodes it fits on once pods being deleted are gone.
    pub fits_after_releases: usize,
    /// Nodes refusing it, by reason.
    pub refused: Vec<NodeCount>,
}

/// One resource of a queue on the gang's path, in the Queue spec's units (GPU devices, CPU millicores,
/// memory MB).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueResourceState {
    /// Resource name.
    pub resource: String,
    /// Quota; -1 unlimited.
    pub quota: f64,
    /// Limit; -1 none.
    pub limit: f64,
    /// Allocated (queue and children).
    pub allocated: f64,
    /// Requested (queue and children).
    pub requested: f64,
    /// Fair share, as the scheduler's division computes it over the snapshot.
    pub fair_share: f64,
}

/// A queue on the path from the gang's queue to the root.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueState {
    /// Name.
    pub name: String,
    /// The resources the gang asks for.
    pub resources: Vec<QueueResourceState>,
}

/// A gang that holds resources and could be evicted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Victim {
    /// `namespace/name` of its PodGroup.
    pub gang: String,
    /// Its queue.
    pub queue: String,
    /// Its priority.
    pub priority: i32,
    /// Pods concerned.
    pub pods: usize,
    /// What they hold.
    pub resources: Amounts,
    /// The action that would evict them, for evictions the scheduler would make.
    pub action: Option<String>,
}

/// What kind of change would let the gang fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FitKind {
    /// Resources held by other pods must free on nodes the pods may use.
    FreeRoom,
    /// The nodes the pods may use are too small in all: capacity must be added (or the gang shrunk).
    AddCapacity,
    /// A queue rule: the queue must free part of its allocation, or its limit or quota change.
    QueueRoom,
    /// No node passes the pods' placement rules; freeing resources does not help.
    FixPlacementRules,
    /// No topology domain can hold the gang.
    TopologyDomain,
    /// Volcano `minResources` exceed what is free.
    MinResources,
}

/// What would have to free for the gang to fit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToFit {
    /// What kind of change.
    pub kind: FitKind,
    /// One sentence.
    pub summary: String,
    /// The least that would have to free, by resource.
    pub free: Amounts,
    /// The queue whose rules matter (the gang's, or the one at its limit).
    pub queue: Option<String>,
    /// Running lower-priority preemptible gangs in that queue (the pool preemption takes from).
    pub preemptible_lower_priority: Vec<Victim>,
    /// The fewest running gangs (any queue, any priority) whose eviction would let the gang fit, found
    /// by the scheduler's victim search; `None` when it was not searched (not a matter of room), empty
    /// when no set of gangs suffices.
    pub smallest_eviction: Option<Vec<Victim>>,
}

/// The fresh analysis.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Analysis {
    /// When the snapshot was taken.
    pub snapshot_time: String,
    /// Outcome of the simulated cycle.
    pub verdict: Verdict,
    /// The action that would place it.
    pub placed_by: Option<String>,
    /// Why it waits (most important first).
    pub reasons: Vec<Reason>,
    /// What it asks for now.
    pub request: Option<GangRequest>,
    /// Node fit of its largest pod.
    pub nodes: Option<NodeFit>,
    /// Its queue and the queues above it.
    pub queues: Vec<QueueState>,
    /// The queue rule its request breaks, if any.
    pub queue_gate: Option<Reason>,
    /// Evictions the scheduler would make for it in this cycle.
    pub evictions: Vec<Victim>,
    /// What would have to free.
    pub to_fit: Option<ToFit>,
}

/// Everything `kai explain pg` shows.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `PodGroup` or `PodGroup (volcano)`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The root PodGroup when this one is part of a larger gang (`parentPodGroup`).
    pub part_of: Option<String>,
    /// Queue as written.
    pub queue: String,
    /// Effective priority.
    pub priority: i32,
    /// Priority class, if named.
    pub priority_class: Option<String>,
    /// Effective preemptibility.
    pub preemptible: bool,
    /// minMember.
    pub min_member: u32,
    /// maxMember.
    pub max_member: Option<u32>,
    /// Its pods.
    pub pods: PodStates,
    /// Problems with its definition or references.
    pub problems: Vec<Reason>,
    /// Its status as written; `None` when the scheduler has written none.
    pub written: Option<WrittenStatus>,
    /// The fresh analysis.
    pub analysis: Analysis,
}
