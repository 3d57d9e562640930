//! What a cycle decided, as plain data: the only output of the pure core. `apply` executes it.

use std::sync::Arc;

use crate::model::volumes::ClaimBinding;
use crate::model::{GpuRequest, GroupKey};

/// Bind a pod to a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    /// Pod UID (the bind is refused if the pod was recreated).
    pub uid: Arc<str>,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
    /// Target node.
    pub node: Arc<str>,
    /// Shared-GPU groups to label the pod with (fractions).
    pub gpu_groups: Vec<Arc<str>>,
    /// For each group, the device its reservation pod holds, when already known.
    pub devices: Vec<Option<Arc<str>>>,
    /// GPU request kind (decides the `received-resource-type` annotation).
    pub gpu: GpuRequest,
    /// The target node's memory per GPU in MiB (`nvidia.com/gpu.memory`): a `gpu-memory` request's
    /// portion of each device is its memory over this ([`GpuRequest::portion_text`]).
    pub gpu_memory_mib: Option<u32>,
    /// Gang.
    pub group: Option<GroupKey>,
    /// The pod names no gang: it joined the PodGroup made for it, whose name the binding writes onto
    /// the pod (`pod-group-name`), so a bound pod names its group as an annotated one does.
    pub name_group_on_pod: bool,
    /// Claims to bind before the pod (unbound claims waiting for their first consumer), each with the
    /// volume or node chosen; the pod is bound only once they are bound.
    pub volumes: Vec<ClaimBinding>,
}

/// Which action evicted a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EvictionCause {
    /// Same-queue, higher priority.
    Preempt,
    /// Another queue below its fair share.
    Reclaim,
    /// Moved to make room (defragmentation).
    Consolidation,
    /// Gang ran below its minimum too long.
    StaleGang,
}

impl EvictionCause {
    /// Name used in events and metrics.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Preempt => "preempt",
            Self::Reclaim => "reclaim",
            Self::Consolidation => "consolidation",
            Self::StaleGang => "stalegangeviction",
        }
    }
}

/// Evict a pod (through the Eviction API, so PodDisruptionBudgets hold).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evict {
    /// Pod UID.
    pub uid: Arc<str>,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
    /// Why.
    pub cause: EvictionCause,
    /// The gang it is evicted for, if any.
    pub for_group: Option<GroupKey>,
    /// The victim's gang.
    pub group: Option<GroupKey>,
    /// Human explanation (event text).
    pub message: String,
}

/// Event severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Normal.
    Normal,
    /// Warning.
    Warning,
}

/// The object an event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventObject {
    /// A KAI PodGroup.
    PodGroup {
        /// Namespace.
        namespace: Arc<str>,
        /// Name.
        name: Arc<str>,
        /// UID.
        uid: Arc<str>,
        /// Volcano's PodGroup rather than KAI's.
        volcano: bool,
    },
    /// A pod.
    Pod {
        /// Namespace.
        namespace: Arc<str>,
        /// Name.
        name: Arc<str>,
        /// UID.
        uid: Arc<str>,
    },
    /// A queue (cluster-scoped).
    Queue {
        /// Name.
        name: Arc<str>,
    },
}

/// An event to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Object.
    pub object: EventObject,
    /// Severity.
    pub type_: EventType,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Message.
    pub message: String,
}

/// The status a gang should have; written only when it differs from what was last written.
#[derive(Clone, PartialEq)]
pub struct GroupStatus {
    /// Gang.
    pub key: GroupKey,
    /// The full status to apply (shared with the model's observed status), rendered as the API object
    /// where it is written.
    pub status: std::sync::Arc<crate::model::group_status::DecidedStatus>,
    /// Fingerprint to remember once written.
    pub fingerprint: u64,
}

impl GroupStatus {
    /// The status as the API object.
    #[must_use]
    pub fn render(&self) -> api::PodGroupStatus {
        self.status.render()
    }
}

/// Shows the status as it is written.
impl std::fmt::Debug for GroupStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupStatus")
            .field("key", &self.key)
            .field("status", &self.render())
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

/// A pod's `PodScheduled` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodCondition {
    /// UID.
    pub uid: Arc<str>,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
    /// `PodScheduled=False` with reason `Unschedulable` and this message.
    pub message: String,
}

/// A queue's status.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueStatus {
    /// Queue.
    pub name: Arc<str>,
    /// The full status to apply.
    pub status: api::QueueStatus,
    /// Fingerprint to remember once written.
    pub fingerprint: u64,
}

/// A GPU reservation pod to create or delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReservationChange {
    /// Hold a physical device on `node` for shared-GPU group `group`.
    Create {
        /// Node.
        node: Arc<str>,
        /// Group id.
        group: Arc<str>,
    },
    /// The group has no sharer any more: release the device.
    Delete {
        /// Pod UID (precondition).
        uid: Arc<str>,
        /// Pod name.
        name: Arc<str>,
    },
}

/// The reservation pod's name for a group on a node: stable, so a retried creation finds the pod it
/// created before, and within the 253-character limit.
#[must_use]
pub fn reservation_pod_name(node: &str, group: &str) -> String {
    let short: String = group
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(12)
        .collect::<String>()
        .to_lowercase();
    let name = format!("gpu-reservation-{node}-{short}");
    if name.len() <= 253 {
        return name;
    }
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    node.hash(&mut h);
    format!("gpu-reservation-{:016x}-{short}", h.finish())
}

/// Everything a cycle decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decisions {
    /// Binds, in decision order.
    pub binds: Vec<Bind>,
    /// Evictions.
    pub evictions: Vec<Evict>,
    /// Gang statuses that changed.
    pub group_statuses: Vec<GroupStatus>,
    /// Pod conditions that changed.
    pub pod_conditions: Vec<PodCondition>,
    /// Events.
    pub events: Vec<Event>,
    /// Queue statuses that changed.
    pub queue_statuses: Vec<QueueStatus>,
    /// GPU reservation pods to create or delete.
    pub reservations: Vec<ReservationChange>,
}

impl Decisions {
    /// True when nothing is to be done.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}
