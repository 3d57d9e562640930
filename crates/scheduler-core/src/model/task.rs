//! A task is one pod as the scheduler sees it: what it asks for, where it may go, and where it is.

use std::sync::Arc;

use super::constraints::ConstraintsId;
use super::group::GroupKey;
use super::ids::{GroupId, NodeId};
use super::pod_rules::{Labels, PodRulesId};
use super::resources::Resources;
use super::time::Millis;
use super::volumes::PodClaim;

/// Where a task stands. The statuses that hold node resources are [`Self::holds_node`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// Waiting for a node.
    Pending,
    /// Has scheduling gates; not a candidate until they are removed.
    Gated,
    /// Reserved on a node whose resources are still being freed; bound in a later cycle.
    Pipelined,
    /// A bind was issued and is not yet confirmed by the API server (assumed placement).
    Binding,
    /// Bound (`spec.nodeName` set), not yet running.
    Bound,
    /// Running.
    Running,
    /// Being deleted or evicted; still holds its node's resources until it is gone.
    Releasing,
    /// Finished successfully; holds nothing.
    Succeeded,
    /// Finished with an error; holds nothing.
    Failed,
}

impl TaskStatus {
    /// Holds resources on its node as used (not as a reservation).
    #[must_use]
    pub fn holds_node(self) -> bool {
        matches!(
            self,
            Self::Binding | Self::Bound | Self::Running | Self::Releasing
        )
    }

    /// Counts towards its gang's minimum (KAI's "active allocated").
    #[must_use]
    pub fn is_active_allocated(self) -> bool {
        matches!(
            self,
            Self::Pipelined | Self::Binding | Self::Bound | Self::Running
        )
    }

    /// Placed and not going away (allocated against queue quota).
    #[must_use]
    pub fn is_allocated(self) -> bool {
        matches!(self, Self::Binding | Self::Bound | Self::Running)
    }

    /// Waiting to be placed.
    #[must_use]
    pub fn is_pending(self) -> bool {
        matches!(self, Self::Pending)
    }

    /// Finished.
    #[must_use]
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

/// How a pod asks for GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum GpuRequest {
    /// No GPU.
    #[default]
    None,
    /// Whole devices through `nvidia.com/gpu`.
    Whole(u32),
    /// A part of each of `devices` GPUs, in thousandths (`gpu-fraction`).
    Fraction {
        /// Thousandths of one device, 1..=1000.
        milli: u32,
        /// Devices the fraction is taken on.
        devices: u32,
    },
    /// GPU memory in MiB on each of `devices` GPUs (`gpu-memory`).
    Memory {
        /// MiB per device.
        mib: u32,
        /// Devices.
        devices: u32,
    },
}

impl GpuRequest {
    /// True for shared (fractional or memory) requests.
    #[must_use]
    pub fn is_shared(self) -> bool {
        matches!(self, Self::Fraction { .. } | Self::Memory { .. })
    }

    /// The part of each device a shared request receives, as KAI writes it into `GPU_PORTION`: two
    /// decimals, rounded to the nearest hundredth ("0.50", "0.25"). A `gpu-memory` request's portion is
    /// its memory over the node's memory per GPU (`device_mib`, the `nvidia.com/gpu.memory` label), at most
    /// one device; `None` for a request that shares nothing, or for memory on a node without the label.
    #[must_use]
    pub fn portion_text(self, device_mib: Option<u32>) -> Option<String> {
        let hundredths = match self {
            Self::Fraction { milli, .. } => (u64::from(milli) + 5) / 10,
            Self::Memory { mib, .. } => {
                let device = u64::from(device_mib.filter(|d| *d > 0)?);
                ((u64::from(mib) * 200 + device) / (2 * device)).min(100)
            }
            Self::None | Self::Whole(_) => return None,
        };
        Some(format!("{}.{:02}", hundredths / 100, hundredths % 100))
    }
}

/// What the API server says about a pod's placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiView {
    /// Status per the API.
    pub status: TaskStatus,
    /// `spec.nodeName`.
    pub node_name: Option<Arc<str>>,
    /// When the API server recorded the pod's binding: the `PodScheduled=True` condition's transition
    /// time, which the binding sets and kubelets keep. Minimum runtimes count from it
    /// (`actions::victims::gang_start`), so no start annotation is written.
    pub bound_at: Option<Millis>,
}

/// A placement this scheduler decided and the API does not show yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Assumed {
    /// Nothing assumed: the API view is the truth.
    None,
    /// A bind to this node is in flight (or about to be issued).
    Binding {
        /// Target node.
        node: NodeId,
    },
    /// Reserved on this node until `until`, waiting for resources being freed.
    Pipelined {
        /// Node.
        node: NodeId,
        /// When the reservation lapses.
        until: Millis,
    },
    /// An eviction is in flight.
    Evicting,
}

/// The last bind of a pod that failed, and when the pod may be tried again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindFailure {
    /// Why (the binder's words: the API's refusal, claims not bound in time, ...).
    pub reason: Arc<str>,
    /// Failures in a row (the back-off doubles with each).
    pub count: u32,
    /// Not tried again before.
    pub retry_at: Millis,
}

/// Back-off after a pod's first failed bind; doubled per failure in a row, up to [`BIND_BACKOFF_MAX_MS`].
pub const BIND_BACKOFF_MS: Millis = 5_000;
/// Longest back-off after failed binds.
pub const BIND_BACKOFF_MAX_MS: Millis = 300_000;

impl BindFailure {
    /// The failure after `previous` (if any) at `now`.
    #[must_use]
    pub fn after(previous: Option<&Self>, reason: Arc<str>, now: Millis) -> Self {
        let count = previous.map_or(1, |p| p.count.saturating_add(1));
        let backoff = BIND_BACKOFF_MS
            .saturating_mul(1_i64 << count.saturating_sub(1).min(16))
            .min(BIND_BACKOFF_MAX_MS);
        Self {
            reason,
            count,
            retry_at: now.saturating_add(backoff),
        }
    }
}

/// A pod in the model.
#[derive(Clone, Debug)]
pub struct Task {
    /// Pod UID.
    pub uid: Arc<str>,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
    /// Whether this scheduler schedules it (`spec.schedulerName`); other pods only use capacity.
    pub ours: bool,
    /// The gang the pod names (annotation), or else the PodGroup a podgrouper made for it alone
    /// (`group_by_owner`); resolved or not.
    pub group_key: Option<GroupKey>,
    /// The pod names no gang and `group_key` is the PodGroup a podgrouper made for it (owned by the
    /// pod): the bind writes the group's name onto the pod.
    pub group_by_owner: bool,
    /// Gang this pod belongs to, once resolved.
    pub group: Option<GroupId>,
    /// Sub-group name (`kai.scheduler/subgroup-name`).
    pub subgroup: Option<Arc<str>>,
    /// Node-level request (CPU, memory, pods = 1, whole GPUs, extended). Fractional GPUs are not in it:
    /// the GPU-sharing model accounts for them per device.
    pub request: Resources,
    /// GPU request kind.
    pub gpu: GpuRequest,
    /// Where the pod may go (interned node selector, affinity, tolerations).
    pub constraints: ConstraintsId,
    /// What it asks of the pods around it (interned pod affinity, anti-affinity, spread, host ports).
    pub rules: PodRulesId,
    /// Labels (what other pods' affinity and spread terms select).
    pub labels: Arc<Labels>,
    /// Effective status: the API view with the assumed placement on top.
    pub status: TaskStatus,
    /// Node while it holds or reserves resources there (effective).
    pub node: Option<NodeId>,
    /// What the API says.
    pub api: ApiView,
    /// What this scheduler assumes on top.
    pub assumed: Assumed,
    /// Shared-GPU groups the pod uses (`runai-gpu-group`), one per device for fractions.
    pub gpu_groups: Vec<Arc<str>>,
    /// Order inside its gang (`kai.scheduler/task-priority` label, Ray head / Kubeflow master first).
    pub task_order: i32,
    /// `spec.preemptionPolicy: Never` (from its PriorityClass): placed ahead of lower priorities as
    /// usual, but its gang never evicts other pods to make room (kube-scheduler's rule).
    pub never_preempts: bool,
    /// Creation time.
    pub created: Millis,
    /// What stops the pod from being scheduled anywhere: its own definition's problem (bad annotation,
    /// ...) or else its claims' (`spec_problem`, then the volume book's wait reason).
    pub problem: Option<Arc<str>>,
    /// The problem with the pod's own definition, as converted.
    pub spec_problem: Option<Arc<str>>,
    /// The PersistentVolumeClaims it uses (empty for most pods: no allocation).
    pub claims: Vec<PodClaim>,
    /// Its last bind failed (kept until it is bound, so failures in a row back off longer).
    pub bind_failure: Option<BindFailure>,
    /// Fingerprint of the `PodScheduled` message last written (in memory only).
    pub condition_fingerprint: u64,
    /// For a GPU reservation pod: the shared-GPU group it holds the device for.
    pub reservation_for: Option<Arc<str>>,
    /// For a GPU reservation pod: the device it reported (`run.ai/reserve_for_gpu_index`).
    pub gpu_device: Option<Arc<str>>,
}

impl Task {
    /// `namespace/name`.
    #[must_use]
    pub fn key(&self) -> String {
        // Built directly: a waiting pod's key is made on every failed attempt, and `format!` costs
        // several times this.
        let mut key = String::with_capacity(self.namespace.len() + 1 + self.name.len());
        key.push_str(&self.namespace);
        key.push('/');
        key.push_str(&self.name);
        key
    }

    /// Its `namespace/name` sharing the task's strings (no text is built until it is shown).
    #[must_use]
    pub fn pod_name(&self) -> PodName {
        PodName {
            namespace: Arc::clone(&self.namespace),
            name: Arc::clone(&self.name),
        }
    }
}

/// A pod's namespace and name, shown as `namespace/name`; empty when no pod is meant.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PodName {
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl PodName {
    /// Whether no pod is named.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.namespace.is_empty() && self.name.is_empty()
    }

    /// Whether this is `task`'s name.
    #[must_use]
    pub fn names(&self, task: &Task) -> bool {
        // A reason names its pod with the pod's own texts, shared: compared by address first.
        (Arc::ptr_eq(&self.namespace, &task.namespace) || *self.namespace == *task.namespace)
            && (Arc::ptr_eq(&self.name, &task.name) || *self.name == *task.name)
    }
}

impl std::fmt::Display for PodName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return Ok(());
        }
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// `namespace/name` (a name without a namespace has an empty one).
impl From<&str> for PodName {
    fn from(key: &str) -> Self {
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{GpuRequest, PodName};

    #[test]
    fn a_pod_name_shows_as_its_key() {
        let name = PodName::from("ml/train-6");
        assert_eq!(name.to_string(), "ml/train-6");
        assert!(!name.is_empty());
        assert!(PodName::default().is_empty());
        assert_eq!(PodName::default().to_string(), "");
        assert_eq!(PodName::from("solo").to_string(), "/solo");
    }

    #[test]
    fn portions_are_written_as_kai_writes_them() {
        let fraction = |milli| GpuRequest::Fraction { milli, devices: 1 };
        assert_eq!(fraction(500).portion_text(None).as_deref(), Some("0.50"));
        assert_eq!(fraction(333).portion_text(None).as_deref(), Some("0.33"));
        assert_eq!(fraction(335).portion_text(None).as_deref(), Some("0.34"));
        assert_eq!(fraction(1000).portion_text(None).as_deref(), Some("1.00"));
        let two = GpuRequest::Fraction {
            milli: 250,
            devices: 2,
        };
        assert_eq!(two.portion_text(None).as_deref(), Some("0.25"), "per device");
        let memory = |mib| GpuRequest::Memory { mib, devices: 1 };
        assert_eq!(memory(10_000).portion_text(Some(40_000)).as_deref(), Some("0.25"));
        assert_eq!(memory(2_000).portion_text(Some(81_920)).as_deref(), Some("0.02"));
        assert_eq!(
            memory(90_000).portion_text(Some(80_000)).as_deref(),
            Some("1.00"),
            "at most a device"
        );
        assert_eq!(memory(2_000).portion_text(None), None, "no memory label");
        assert_eq!(memory(2_000).portion_text(Some(0)), None);
        assert_eq!(GpuRequest::Whole(1).portion_text(Some(80_000)), None);
        assert_eq!(GpuRequest::None.portion_text(None), None);
    }
}
