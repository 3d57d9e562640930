//! Pure grouping: a pod, its owner chain and a read-only view of the cluster in, the PodGroup the pod
//! belongs to out (or the group the user named), plus warnings worth telling the user.
//!
//! Owns the rules per workload family (one module each), the naming and the shared metadata rules
//! (queue, priority class, preemptibility, labels, topology).
//!
//! Must not: do I/O, read clocks, or depend on which pod of a workload triggered the computation
//! (every pod of a group must compute the same PodGroup, or applies would flip-flop).

mod apps;
mod batch;
mod common;
mod explicit;
mod generic;
mod grove;
mod jobset;
mod json;
pub mod kind_defaults;
mod knative;
mod kubeflow;
mod lws;
mod manifest;
mod names;
mod ray;
#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use api::{PodGroup, Preemptibility, SubGroup, podgroup::TopologyConstraint};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;

pub use explicit::{managed_by, managed_keys};
pub use manifest::{
    NAMING_DELAY_MS, PodPatch, naming_wait_ms, pod_group_manifest, pod_group_up_to_date, pod_patch,
};
pub use names::{bounded_label_value, bounded_name, pod_as_object};

/// Most sub-groups one PodGroup may have (KAI's cap). Sizes and counts on a workload are the user's:
/// a workload that would fan out into more is not cut up, and the user is told, so one hostile object
/// cannot make the podgrouper build (or the API server store) millions of sub-groups.
pub const MAX_SUB_GROUPS: usize = 10_000;

/// An object of the owner chain as the caches hold it: full for kinds whose spec matters, metadata only
/// (`data` is `null`) for the others. `types` is always set.
pub type Object = Arc<DynamicObject>;

/// Tunables of the rules; the binary's flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Label naming the queue on a workload or pod.
    pub queue_label_key: String,
    /// Queue of workloads that name none.
    pub default_queue: String,
    /// Label naming a pod's node pool: a workload's `project` label names the queue
    /// `<project>-<pool>` when its pod carries this label.
    pub node_pool_label_key: String,
    /// Knative revisions get one gang per revision (`min-scale` pods) rather than one group per pod.
    pub knative_gang: bool,
    /// Field manager of the podgrouper: a `pod-group-name` annotation it owns is its own, not the user's.
    pub field_manager: String,
    /// How long a pod its group is made for alone may go unnamed while it waits unbound and unreported
    /// (milliseconds; see [`naming_wait_ms`]). Zero names every pod at once.
    pub naming_delay_ms: i64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            queue_label_key: api::keys::QUEUE_LABEL.to_owned(),
            default_queue: api::keys::DEFAULT_QUEUE.to_owned(),
            node_pool_label_key: api::keys::NODE_POOL.to_owned(),
            knative_gang: true,
            field_manager: api::keys::FIELD_MANAGER_PODGROUPER.to_owned(),
            naming_delay_ms: NAMING_DELAY_MS,
        }
    }
}

/// What the rules may look up besides the chain: read-only cached state, never a request.
pub trait ClusterView {
    /// A workload object from the caches (for example the RayCluster a RayJob names in its status).
    fn object(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Object>;
    /// Pods of the scheduler in `namespace` carrying every one of `labels`.
    fn pods(&self, namespace: &str, labels: &[(&str, &str)]) -> Vec<Arc<Pod>>;
    /// Whether a PriorityClass exists; `None` when unknown (cache not synced, no permission).
    fn priority_class_exists(&self, name: &str) -> Option<bool>;
    /// Whether a Queue exists; `None` when unknown.
    fn queue_exists(&self, name: &str) -> Option<bool>;
    /// An existing PodGroup.
    fn pod_group(&self, namespace: &str, name: &str) -> Option<Arc<PodGroup>>;
    /// The per-kind defaults ConfigMap, when one is configured and readable.
    fn kind_defaults(&self) -> Option<Arc<kind_defaults::KindDefaults>> {
        None
    }
}

/// An object the rules read through [`ClusterView::object`] besides the owner chain (Grove's PodGang,
/// which is no owner of its pods). The controller keeps its kind cached, reads it past the cache when
/// the watch has not delivered it yet, and re-groups the pod when it appears or changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Related {
    /// `apiVersion` of the object.
    pub api_version: &'static str,
    /// Kind of the object.
    pub kind: &'static str,
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object.
    pub name: String,
}

/// The objects [`group`] will look up for this pod besides its owner chain.
#[must_use]
pub fn related(input: &Input<'_>) -> Vec<Related> {
    let (top, _) = effective_top(input);
    grove::related(input.pod, &top).into_iter().collect()
}

/// Why the owner chain stops below its real top.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakReason {
    /// The podgrouper may not read the owner's kind (RBAC).
    Forbidden,
    /// The owner does not exist (deleted, or recreated with another uid).
    Missing,
    /// The owner's kind is not served by the API server (its CRD is not installed).
    NotServed,
}

/// The first owner reference that could not be followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainBreak {
    /// `apiVersion` of the reference.
    pub api_version: String,
    /// Kind of the reference.
    pub kind: String,
    /// Name of the reference.
    pub name: String,
    /// Why it could not be followed.
    pub reason: BreakReason,
}

/// Everything the rules read about one pod.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// Its owners as far as they could be read, nearest first; empty for a bare pod.
    pub owners: &'a [Object],
    /// Why the chain stops early, if it does; the rules then group by the last owner read (or the pod).
    pub chain_break: Option<&'a ChainBreak>,
}

/// The result: a decision and what the user should hear about.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Join a named group, or apply a computed PodGroup.
    pub decision: Decision,
    /// Problems that did not stop grouping; reported as events on the pod and a condition on the group.
    pub warnings: Vec<Warning>,
}

/// What to do with the pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The pod names its group itself; no PodGroup is made.
    Join(Join),
    /// Apply this PodGroup and put the pod in it.
    Apply(Box<Grouping>),
}

/// A group the user named on the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Join {
    /// The group's name.
    pub group: String,
    /// The annotation it came from.
    pub key: &'static str,
    /// Whether the pod should carry `pod-group-name: <group>` (false for Volcano's groups, which the
    /// scheduler reads under Volcano's own key).
    pub annotate: bool,
}

/// A computed PodGroup.
#[derive(Debug, Clone, PartialEq)]
pub struct Grouping {
    /// Object name (at most 253 characters).
    pub name: String,
    /// The PodGroup's only owner reference: it is garbage-collected with this object.
    pub owner: OwnerReference,
    /// Gang minimum.
    pub min_member: i32,
    /// Sub-groups; names are valid label values.
    pub sub_groups: Vec<SubGroup>,
    /// The sub-group this pod belongs to, if any.
    pub pod_sub_group: Option<String>,
    /// Queue.
    pub queue: String,
    /// Priority class.
    pub priority_class_name: String,
    /// Preemptibility override, if a label asks for one.
    pub preemptibility: Option<Preemptibility>,
    /// Group-level topology constraint.
    pub topology: Option<TopologyConstraint>,
    /// Labels of the PodGroup.
    pub labels: BTreeMap<String, String>,
    /// Annotations of the PodGroup.
    pub annotations: BTreeMap<String, String>,
}

/// A problem that did not stop grouping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// An owner could not be read; the group was made from the last owner that could.
    ChainBroken(ChainBreak),
    /// The pod names several different groups; the first key in precedence order won.
    ConflictingGroupNames {
        /// `(key, group)` pairs as found, the chosen one first.
        names: Vec<(&'static str, String)>,
    },
    /// The pod names a PodGroup that does not exist.
    NamedGroupMissing {
        /// The group.
        group: String,
    },
    /// The queue does not exist; the group waits until it does.
    QueueNotFound {
        /// The queue.
        queue: String,
    },
    /// The workload asks for another queue than the existing PodGroup's; a PodGroup keeps its queue.
    QueueFixed {
        /// The PodGroup's queue.
        current: String,
        /// The queue the labels name now.
        requested: String,
    },
    /// A priority class named by a label does not exist; the next candidate was used.
    PriorityClassNotFound {
        /// The class.
        name: String,
        /// Where it was named.
        source: String,
    },
    /// An annotation or label has a value the rules cannot use; it was ignored.
    InvalidValue {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// What was done instead.
        detail: String,
    },
    /// The workload's shape is odd in a way the user should fix; the rules fell back as described.
    Workload {
        /// What is odd and what was done.
        detail: String,
    },
    /// The workload would fan out into more than [`MAX_SUB_GROUPS`] sub-groups; it was not cut up.
    TooManySubGroups {
        /// What would have been cut up ("the PyTorch workers of PyTorchJob train").
        what: String,
        /// How many sub-groups that would have made.
        requested: u64,
        /// What was done instead.
        detail: String,
    },
}

impl Warning {
    /// Stable, low-cardinality reason (event `action`, condition reason, metric label).
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ChainBroken(b) => match b.reason {
                BreakReason::Forbidden => "OwnerForbidden",
                BreakReason::Missing => "OwnerMissing",
                BreakReason::NotServed => "OwnerKindNotServed",
            },
            Self::ConflictingGroupNames { .. } => "ConflictingGroupNames",
            Self::NamedGroupMissing { .. } => "PodGroupNotFound",
            Self::QueueNotFound { .. } => "QueueNotFound",
            Self::QueueFixed { .. } => "QueueFixed",
            Self::PriorityClassNotFound { .. } => "PriorityClassNotFound",
            Self::InvalidValue { .. } => "InvalidValue",
            Self::Workload { .. } => "WorkloadShape",
            Self::TooManySubGroups { .. } => "TooManySubGroups",
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ChainBroken(b) => {
                let why = match b.reason {
                    BreakReason::Forbidden => "the podgrouper may not read it (RBAC)",
                    BreakReason::Missing => "it does not exist",
                    BreakReason::NotServed => "its kind is not served (CRD not installed)",
                };
                write!(
                    f,
                    "owner {} {} ({}) cannot be followed: {why}; grouped by the last readable owner",
                    b.kind, b.name, b.api_version
                )
            }
            Self::ConflictingGroupNames { names } => {
                let list: Vec<String> = names.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(
                    f,
                    "pod names different groups ({}); using the first",
                    list.join(", ")
                )
            }
            Self::NamedGroupMissing { group } => {
                write!(f, "pod names PodGroup {group}, which does not exist")
            }
            Self::QueueNotFound { queue } => {
                write!(
                    f,
                    "queue {queue} does not exist; the group waits until it is created"
                )
            }
            Self::QueueFixed { current, requested } => write!(
                f,
                "labels now name queue {requested} but the PodGroup keeps queue {current} (a PodGroup's queue is fixed at creation)"
            ),
            Self::PriorityClassNotFound { name, source } => {
                write!(f, "priority class {name} ({source}) does not exist; ignored")
            }
            Self::InvalidValue { key, value, detail } => write!(f, "{key}={value:?} is not valid: {detail}"),
            Self::Workload { detail } => f.write_str(detail),
            Self::TooManySubGroups {
                what,
                requested,
                detail,
            } => write!(
                f,
                "{what} would make {requested} sub-groups, more than the {MAX_SUB_GROUPS} a PodGroup may have; {detail}"
            ),
        }
    }
}

/// Grouping could not finish; the pod is retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupingError {
    /// The workload is not far enough along to be grouped (for example a RayJob whose cluster is not
    /// known yet). Retried quietly.
    #[error("{kind} {name} is not ready to be grouped: {detail}")]
    NotReady {
        /// Kind of the workload.
        kind: String,
        /// Name of the workload.
        name: String,
        /// What is missing.
        detail: String,
    },
}

impl GroupingError {
    /// Stable, low-cardinality category for metrics.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::NotReady { .. } => "not_ready",
        }
    }
}

/// What a family's rule decides; the shared rules then add queue, priority and metadata.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    /// Unbounded name; bounded afterwards.
    pub name: String,
    /// Owner of the PodGroup.
    pub owner: OwnerReference,
    pub min_member: i32,
    pub sub_groups: Vec<SubGroup>,
    pub pod_sub_group: Option<String>,
    /// Priority class when no label or pod spec names one.
    pub default_priority: &'static str,
    /// Labels on the top owner naming a priority class, in order (Ray reads its own key first).
    pub priority_label_keys: &'static [&'static str],
    /// A priority class the workload's spec names, read after the top owner's labels, with where it is
    /// named (a PodGang's `spec.priorityClassName`).
    pub spec_priority_class: Option<(String, String)>,
    /// Group-level placement from the workload's spec (a PodGang's pack constraint); the top owner's
    /// topology annotations fill in the levels it leaves unset. `None`: from the annotations alone.
    pub topology: Option<TopologyConstraint>,
    /// Whether this is a gang over several pods (`kai.scheduler/min-member` applies).
    pub gang: bool,
    /// Label sets of pod templates consulted for the queue after the top owner's labels, so all pods
    /// of one group agree (Ray: head, then worker templates).
    pub template_labels: Vec<BTreeMap<String, String>>,
}

/// The workload being grouped, as the family rules see it.
pub(crate) struct Workload<'a> {
    pub pod: &'a Pod,
    /// The top owner after skipping wrappers (TrainJob, CronJob, ...), with the wrappers' labels and
    /// annotations added where it lacks them. The pod itself for a bare pod.
    pub top: Cow<'a, DynamicObject>,
    /// Owners below `top`, nearest first (excludes `top` and skipped wrappers).
    pub below: &'a [Object],
    pub settings: &'a Settings,
    pub view: &'a dyn ClusterView,
}

/// Groups one pod.
///
/// # Errors
/// [`GroupingError::NotReady`] when the workload cannot be grouped yet.
pub fn group(
    input: &Input<'_>,
    settings: &Settings,
    view: &dyn ClusterView,
) -> Result<Outcome, GroupingError> {
    let named = explicit::named_groups(input.pod, settings);
    let mut computed_warnings = Vec::new();
    let computed = compute(input, settings, view, &mut computed_warnings);
    let mut warnings = Vec::new();
    if let Some(b) = input.chain_break {
        warnings.push(Warning::ChainBroken(b.clone()));
    }
    if let Some(join) = explicit::choose(input.pod, &named, computed.as_ref().ok(), view, &mut warnings) {
        // The user's group wins; problems computing a group of our own do not concern them.
        return Ok(Outcome {
            decision: Decision::Join(join),
            warnings,
        });
    }
    warnings.extend(computed_warnings);
    let grouping = computed?;
    Ok(Outcome {
        decision: Decision::Apply(Box::new(grouping)),
        warnings,
    })
}

fn compute(
    input: &Input<'_>,
    settings: &Settings,
    view: &dyn ClusterView,
    warnings: &mut Vec<Warning>,
) -> Result<Grouping, GroupingError> {
    let (top, below) = effective_top(input);
    let workload = Workload {
        pod: input.pod,
        top,
        below,
        settings,
        view,
    };
    let mut local = Vec::new();
    // A Grove set is grouped by the PodGang its pod names, which is no owner of the pod.
    let workload = grove::retarget(workload, &mut local)?;
    let shape = shape_for(&workload, &mut local)?;
    warnings.extend(local);
    Ok(common::finish(&workload, shape, warnings))
}

/// The family rule for the top owner's kind.
fn shape_for(w: &Workload<'_>, warnings: &mut Vec<Warning>) -> Result<Shape, GroupingError> {
    let (group, kind) = json::group_kind(&w.top);
    Ok(match (group, kind) {
        ("", "Pod") => generic::pod(w),
        ("batch", "Job") => batch::job(w, warnings),
        ("apps", "Deployment") => apps::deployment(w, warnings),
        ("apps", "ReplicaSet" | "StatefulSet") => apps::set(w, warnings),
        ("jobset.x-k8s.io", "JobSet") => jobset::jobset(w, warnings),
        ("ray.io", "RayCluster") => ray::cluster(w, warnings),
        ("ray.io", "RayJob") => ray::job(w, warnings)?,
        ("kubeflow.org", k) if kubeflow::is_training_job(k) => kubeflow::training_job(w, warnings),
        ("kubeflow.org", "Notebook") => generic::whole(w, 1, "build"),
        ("leaderworkerset.x-k8s.io", "LeaderWorkerSet") => lws::lws(w, warnings),
        ("serving.knative.dev", _) => knative::knative(w, warnings),
        ("amlarc.azureml.com", "AmlJob") => generic::aml_job(w, warnings),
        ("run.ai", "RunaiJob") => generic::runai_job(w),
        // KAI's SPOTRequest grouper: one group, inference by default.
        ("egx.nvidia.io", "SPOTRequest") => generic::whole(w, 1, "inference"),
        ("scheduler.grove.io", "PodGang") => grove::podgang(w, warnings),
        _ => generic::whole(w, 1, "train"),
    })
}

/// Top owners that only wrap the workload that matters: grouping happens one level below them.
fn is_wrapper(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("batch", "CronJob")
            | ("trainer.kubeflow.org", "TrainJob")
            | ("argoproj.io", "Workflow")
            | ("ray.io", "RayService")
            | ("nvidia.com", "DynamoGraphDeployment")
            | (
                "run.ai",
                "TrainingWorkload"
                    | "InteractiveWorkload"
                    | "DistributedWorkload"
                    | "InferenceWorkload"
                    | "DistributedInferenceWorkload"
            )
    )
}

/// The top owner to group by, and the owners below it.
fn effective_top<'a>(input: &Input<'a>) -> (Cow<'a, DynamicObject>, &'a [Object]) {
    let mut owners = input.owners;
    let Some(mut top) = owners.last().map(|o| Cow::Borrowed(o.as_ref())) else {
        return (Cow::Owned(pod_as_object(input.pod)), owners);
    };
    loop {
        let (group, kind) = json::group_kind(&top);
        if !is_wrapper(group, kind) {
            return (top, &owners[..owners.len() - 1]);
        }
        let wrapper = top;
        owners = &owners[..owners.len() - 1];
        let mut next = match owners.last() {
            Some(o) => o.as_ref().clone(),
            None => pod_as_object(input.pod),
        };
        common::inherit_metadata(&mut next, &wrapper);
        top = Cow::Owned(next);
        if owners.is_empty() {
            return (top, owners);
        }
    }
}
