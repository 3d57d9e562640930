//! Kubernetes objects to model updates: pure functions, so every rule about reading pods, nodes,
//! PodGroups and queues is unit-tested without a cluster. Malformed input never panics: it becomes a
//! problem on the object that the status writer reports.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use api::keys;
use api::quantity;
use k8s_openapi::api::core::v1::{
    Container, Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use scheduler_core::model::constraints::{
    Constraints, Operator, Requirement, Taint, TaintEffect, Toleration,
};
use scheduler_core::model::group::{GroupProblem, MinResourceFault, SubGroupDecl};
use scheduler_core::model::queue::{QueueProblem, QueueResourceSpec};
use scheduler_core::model::resources::{CPU, GPU, MAX_RESOURCES, MEMORY, PODS, ResourceNames};
use scheduler_core::model::volumes::PodClaim;
use scheduler_core::model::{
    ApiView, GpuRequest, Group, GroupKey, GroupKind, Millis, NodeUpdate, PodUpdate, Queue, Resources,
    TaskStatus,
};

/// Milliseconds of a Kubernetes timestamp.
#[must_use]
pub fn millis(t: Option<&Time>) -> Millis {
    t.map_or(0, |t| t.0.as_millisecond())
}

/// Parses an RFC 3339 timestamp (scheduler-owned annotations).
#[must_use]
pub fn parse_rfc3339(s: &str) -> Option<Millis> {
    s.parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

/// Bonus that puts Ray heads and Kubeflow masters/launchers first in their gang.
const LEADER_ORDER: i32 = 1_000_000;

/// Which annotation named the gang, for conflict messages.
fn group_key_of(pod: &Pod, namespace: &Arc<str>) -> (Option<GroupKey>, Option<String>) {
    let ann = pod.metadata.annotations.as_ref();
    let get = |k: &str| {
        ann.and_then(|a| a.get(k))
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    };
    let kai = get(keys::POD_GROUP_NAME);
    let seed = get(keys::POD_GROUP_SEED);
    let volcano = get(keys::VOLCANO_GROUP_NAME);
    let key = |kind, name: &str| GroupKey {
        kind,
        namespace: namespace.clone(),
        name: name.into(),
    };
    let mut problem = None;
    if let (Some(a), Some(b)) = (kai, seed)
        && a != b
    {
        problem = Some(format!(
            "conflicting group annotations: {}={a} and {}={b}; remove one",
            keys::POD_GROUP_NAME,
            keys::POD_GROUP_SEED
        ));
    }
    if let Some(v) = volcano {
        if let Some(k) = kai.or(seed).filter(|k| *k != v) {
            problem = Some(format!(
                "conflicting group annotations: {}={k} and {}={v}; remove one",
                keys::POD_GROUP_NAME,
                keys::VOLCANO_GROUP_NAME
            ));
        }
        return (Some(key(GroupKind::Volcano, v)), problem);
    }
    (kai.or(seed).map(|n| key(GroupKind::Kai, n)), problem)
}

/// Adds each positive quantity of `list` (minus the names in `skip`) to `total`. A zero quantity is not
/// counted and takes no slot, as kube-scheduler skips zero requests; one the model cannot count (not a
/// quantity, negative, or a resource past the last slot) becomes a problem.
fn add_quantities(
    names: &mut ResourceNames,
    total: &mut Resources,
    list: Option<&BTreeMap<String, Quantity>>,
    skip: &HashSet<String>,
    problems: &mut Vec<String>,
) {
    for (name, q) in list.into_iter().flatten() {
        if skip.contains(name) {
            continue;
        }
        let v = match amount_of(name, &q.0) {
            Ok(0) => continue,
            Ok(v) if v > 0 => v,
            Ok(_) => {
                problems.push(format!("negative quantity for {name}: {}", q.0));
                continue;
            }
            Err(e) => {
                problems.push(format!("resource {name}: {e}"));
                continue;
            }
        };
        let Some(slot) = names.slot(name) else {
            problems.push(format!(
                "too many distinct resource kinds (at most {}); cannot track {name}",
                MAX_RESOURCES
            ));
            continue;
        };
        match total.0[slot].checked_add(v) {
            Some(sum) => total.0[slot] = sum,
            None => {
                // Counted as unbounded, so a pod already bound fills its node rather than freeing it.
                total.0[slot] = i64::MAX;
                problems.push(overflow(name));
            }
        }
    }
}

/// The problem of a request sum past what the scheduler can count (about 8 Ei of any unit).
fn overflow(resource: &str) -> String {
    format!("the requests for {resource} add up to more than can be counted")
}

/// A quantity in the unit of its slot: milli-units for CPU and GPU, units for the rest.
fn amount_in(slot: usize, quantity: &str) -> Result<i64, quantity::QuantityError> {
    match slot {
        CPU | GPU => quantity::milli_value(quantity),
        _ => quantity::value(quantity),
    }
}

/// A quantity of a named resource in the unit the model counts it in (see [`amount_in`]).
fn amount_of(resource: &str, quantity: &str) -> Result<i64, quantity::QuantityError> {
    if resource == "cpu" || resource == keys::GPU_RESOURCE {
        quantity::milli_value(quantity)
    } else {
        quantity::value(quantity)
    }
}

/// `a + b` slot by slot. A slot past what an `i64` counts saturates and becomes a problem (which refuses
/// the pod; saturated, it counts as unbounded, never as a wrapped negative that would fit anywhere).
fn checked_sum(names: &ResourceNames, a: &Resources, b: &Resources, problems: &mut Vec<String>) -> Resources {
    let mut sum = *a;
    for slot in 0..MAX_RESOURCES {
        sum.0[slot] = a.0[slot].checked_add(b.0[slot]).unwrap_or_else(|| {
            problems.push(overflow(names.name(slot)));
            i64::MAX
        });
    }
    sum
}

/// A container's effective request: requests, with limits standing in where a request is missing (as
/// the API server defaults them when it admits the pod, so this matters only for objects it did not).
fn container_request(names: &mut ResourceNames, c: &Container, problems: &mut Vec<String>) -> Resources {
    let mut r = Resources::ZERO;
    let res = c.resources.as_ref();
    let requests = res.and_then(|r| r.requests.as_ref());
    let limits = res.and_then(|r| r.limits.as_ref());
    add_quantities(names, &mut r, requests, &HashSet::new(), problems);
    let requested: HashSet<String> = requests.map(|m| m.keys().cloned().collect()).unwrap_or_default();
    add_quantities(names, &mut r, limits, &requested, problems);
    r
}

/// Whether an init container is a sidecar (a restartable init container: `restartPolicy: Always`).
fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Which requests of a container are read: what its spec asks for, or, while the kubelet resizes a running
/// pod in place (Kubernetes 1.27+), what it has allocated or actually applied (its container status).
#[derive(Clone, Copy)]
enum View {
    Spec,
    Allocated,
    Actuated,
}

/// A container's request in one [`View`]. A status that does not say falls back to the next source
/// (applied, then allocated, then the spec), except that the spec of a resize the kubelet found
/// infeasible counts for nothing (kube-scheduler's `PodRequests` with status resources).
fn container_view(
    names: &mut ResourceNames,
    c: &Container,
    status: Option<&PodStatus>,
    view: View,
    problems: &mut Vec<String>,
) -> Resources {
    let container_status = status.and_then(|s| {
        s.container_statuses
            .iter()
            .flatten()
            .chain(s.init_container_statuses.iter().flatten())
            .find(|cs| cs.name == c.name)
    });
    let allocated = container_status.and_then(|cs| cs.allocated_resources.as_ref());
    let applied = container_status
        .and_then(|cs| cs.resources.as_ref())
        .and_then(|r| r.requests.as_ref());
    let from_status = match view {
        View::Spec => return container_request(names, c, problems),
        View::Allocated => allocated,
        View::Actuated => applied.or(allocated),
    };
    let mut r = Resources::ZERO;
    if let Some(list) = from_status {
        add_quantities(names, &mut r, Some(list), &HashSet::new(), problems);
    } else if !resize_infeasible(status) {
        r = container_request(names, c, problems);
    }
    r
}

/// Whether the kubelet declared the pod's pending resize infeasible (`PodResizePending` with reason
/// `Infeasible`, Kubernetes 1.33+).
fn resize_infeasible(status: Option<&PodStatus>) -> bool {
    status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodResizePending")
        .is_some_and(|c| c.reason.as_deref() == Some("Infeasible"))
}

/// What the containers need at the busiest moment of the pod's life (kube-scheduler's and the kubelet's
/// rule, KEP 753), in one [`View`]: the larger of
/// - the running phase: every app container plus every sidecar, all running together;
/// - each init step: an init container runs next to the sidecars started before it (a sidecar's own step
///   is the sidecars so far, itself included).
fn containers_view(
    names: &mut ResourceNames,
    spec: &PodSpec,
    status: Option<&PodStatus>,
    view: View,
    problems: &mut Vec<String>,
) -> Resources {
    let mut running = Resources::ZERO;
    for c in &spec.containers {
        let own = container_view(names, c, status, view, problems);
        running = checked_sum(names, &running, &own, problems);
    }
    let mut sidecars = Resources::ZERO;
    let mut init_peak = Resources::ZERO;
    for c in spec.init_containers.iter().flatten() {
        let own = container_view(names, c, status, view, problems);
        let step = if is_sidecar(c) {
            running = checked_sum(names, &running, &own, problems);
            sidecars = checked_sum(names, &sidecars, &own, problems);
            sidecars
        } else {
            checked_sum(names, &own, &sidecars, problems)
        };
        init_peak = init_peak.max(&step);
    }
    running.max(&init_peak)
}

/// The containers' request: their spec, or for a pod the kubelet reports container statuses of, the
/// largest of what the spec asks, what the kubelet allocated and what it applied (a pod being resized in
/// place holds whichever is larger until the resize is done); the spec is left out while the kubelet
/// calls the resize infeasible.
fn containers_request(
    names: &mut ResourceNames,
    spec: &PodSpec,
    status: Option<&PodStatus>,
    problems: &mut Vec<String>,
) -> Resources {
    let reported = status.is_some_and(|s| {
        s.container_statuses.as_ref().is_some_and(|c| !c.is_empty())
            || s.init_container_statuses.as_ref().is_some_and(|c| !c.is_empty())
    });
    if !reported {
        return containers_view(names, spec, status, View::Spec, problems);
    }
    let allocated = containers_view(names, spec, status, View::Allocated, problems);
    let actuated = containers_view(names, spec, status, View::Actuated, problems);
    let held = allocated.max(&actuated);
    if resize_infeasible(status) {
        held
    } else {
        held.max(&containers_view(names, spec, status, View::Spec, problems))
    }
}

/// Resources a pod-level request (`spec.resources`, Kubernetes 1.32+) may set: CPU, memory, hugepages.
fn pod_level_resource(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

/// A pod's request on its node, as kube-scheduler's `NodeResourcesFit` counts it: the containers'
/// busiest moment ([`containers_request`]), replaced by the pod-level request for each resource that
/// names one, plus the RuntimeClass overhead (`spec.overhead`). The pod slot is not in it.
fn pod_request(
    names: &mut ResourceNames,
    spec: &PodSpec,
    status: Option<&PodStatus>,
    problems: &mut Vec<String>,
) -> Resources {
    let mut request = containers_request(names, spec, status, problems);
    let pod_level: BTreeMap<String, Quantity> = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .into_iter()
        .flatten()
        .filter(|(name, _)| pod_level_resource(name))
        .map(|(name, q)| (name.clone(), q.clone()))
        .collect();
    if !pod_level.is_empty() {
        let mut level = Resources::ZERO;
        add_quantities(names, &mut level, Some(&pod_level), &HashSet::new(), problems);
        for name in pod_level.keys() {
            if let Some(slot) = names.get(name) {
                request.0[slot] = level.0[slot];
            }
        }
    }
    let mut overhead = Resources::ZERO;
    add_quantities(
        names,
        &mut overhead,
        spec.overhead.as_ref(),
        &HashSet::new(),
        problems,
    );
    checked_sum(names, &request, &overhead, problems)
}

/// Dynamic resource allocation is not implemented: a pod naming resource claims (`spec.resourceClaims`,
/// or a container's `resources.claims`) is refused rather than bound without its devices.
fn resource_claims_problem(spec: &PodSpec) -> Option<String> {
    let mut claims: Vec<&str> = spec
        .resource_claims
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in containers {
        let named = c.resources.as_ref().and_then(|r| r.claims.as_ref());
        claims.extend(named.into_iter().flatten().map(|c| c.name.as_str()));
    }
    claims.sort_unstable();
    claims.dedup();
    (!claims.is_empty()).then(|| {
        format!(
            "the pod uses dynamic resource allocation (resource claims {}), which this scheduler does not \
             support; remove the claims or use a scheduler with DRA",
            claims.join(", ")
        )
    })
}

/// What the scheduler reads from a pod.
#[must_use]
pub fn pod(names: &mut ResourceNames, pod: &Pod, scheduler_name: &str) -> PodUpdate {
    let meta = &pod.metadata;
    let namespace: Arc<str> = meta.namespace.as_deref().unwrap_or("default").into();
    let spec = pod.spec.as_ref();
    let mut problems = Vec::new();
    let (group_key, conflict) = group_key_of(pod, &namespace);
    problems.extend(conflict);
    // Requests as kube-scheduler counts them; the pod also takes one of its node's pod slots.
    let mut request = spec.map_or(Resources::ZERO, |s| {
        pod_request(names, s, pod.status.as_ref(), &mut problems)
    });
    problems.extend(spec.and_then(resource_claims_problem));
    request.0[PODS] = 1;
    // GPUs: whole devices from the resource, fractions and memory from annotations.
    let ann = meta.annotations.as_ref();
    let get = |k: &str| ann.and_then(|a| a.get(k)).map(String::as_str);
    let whole = request.0[GPU];
    let devices = match get(keys::GPU_FRACTION_NUM_DEVICES)
        .map(|v| quantity::positive_count("gpu-fraction-num-devices", v))
    {
        None => 1,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            problems.push(e.to_string());
            1
        }
    };
    let mut gpu = if whole > 0 {
        if whole % 1000 != 0 {
            problems.push(format!(
                "{} must be a whole number, got {}",
                keys::GPU_RESOURCE,
                whole as f64 / 1000.0
            ));
        }
        GpuRequest::Whole(u32::try_from(whole / 1000).unwrap_or(u32::MAX))
    } else {
        GpuRequest::None
    };
    if let Some(f) = get(keys::GPU_FRACTION) {
        match quantity::gpu_fraction_milli(f) {
            Ok(1000) if devices == 1 && whole == 0 => {
                // A fraction of 1 is a whole GPU.
                request.0[GPU] = 1000;
                gpu = GpuRequest::Whole(1);
            }
            Ok(milli) if whole == 0 => gpu = GpuRequest::Fraction { milli, devices },
            Ok(_) => problems.push(format!(
                "pod asks for both {} and the {} annotation; use one",
                keys::GPU_RESOURCE,
                keys::GPU_FRACTION
            )),
            Err(e) => problems.push(e.to_string()),
        }
    } else if let Some(m) = get(keys::GPU_MEMORY) {
        match quantity::positive_count("gpu-memory", m) {
            Ok(mib) if whole == 0 => gpu = GpuRequest::Memory { mib, devices },
            Ok(_) => problems.push(format!(
                "pod asks for both {} and the {} annotation; use one",
                keys::GPU_RESOURCE,
                keys::GPU_MEMORY
            )),
            Err(e) => problems.push(e.to_string()),
        }
    }
    let labels = meta.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    let mut gpu_groups: Vec<Arc<str>> = Vec::new();
    if let Some(g) = label(keys::GPU_GROUP).filter(|g| !g.is_empty()) {
        gpu_groups.push(g.into());
    }
    for (k, v) in labels.into_iter().flatten() {
        if k.starts_with(&format!("{}/", keys::GPU_GROUP))
            && !v.is_empty()
            && !gpu_groups.iter().any(|g| &**g == v)
        {
            gpu_groups.push(v.as_str().into());
        }
    }
    let mut task_order = match label(keys::TASK_PRIORITY_LABEL).map(str::parse::<i32>) {
        None => 0,
        Some(Ok(v)) => v.clamp(-LEADER_ORDER + 1, LEADER_ORDER - 1),
        Some(Err(_)) => {
            problems.push(format!("label {} must be an integer", keys::TASK_PRIORITY_LABEL));
            0
        }
    };
    if label("ray.io/node-type") == Some("head")
        || matches!(
            label("training.kubeflow.org/job-role"),
            Some("master" | "launcher")
        )
        || matches!(
            label("training.kubeflow.org/replica-type"),
            Some("master" | "launcher")
        )
    {
        task_order += LEADER_ORDER;
    }
    let node_name: Option<Arc<str>> = spec
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
        .map(Into::into);
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    // The binding sets `PodScheduled=True` with its time, and kubelets keep that time.
    let bound_at = node_name.as_ref().and_then(|_| {
        pod.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled" && c.status == "True"))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0.as_millisecond())
    });
    let deleting = meta.deletion_timestamp.is_some();
    let gated = spec
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty());
    let status = match (phase, deleting, node_name.is_some()) {
        ("Succeeded", _, _) => TaskStatus::Succeeded,
        ("Failed", _, _) => TaskStatus::Failed,
        (_, true, _) => TaskStatus::Releasing,
        ("Running" | "Unknown", false, true) => TaskStatus::Running,
        (_, false, true) => TaskStatus::Bound,
        _ if gated => TaskStatus::Gated,
        _ => TaskStatus::Pending,
    };
    let pod_labels: BTreeMap<String, String> = labels.cloned().unwrap_or_default();
    let rules = spec
        .map(|s| super::pod_rules::rules(s, &namespace, &pod_labels, &mut problems))
        .unwrap_or_default();
    problems.sort();
    problems.dedup();
    // GPU reservation pods hold a device for the pods sharing it.
    let reservation =
        namespace.as_ref() == keys::RESERVATION_NAMESPACE && label("app") == Some(keys::RESERVATION_APP);
    let reservation_for: Option<Arc<str>> = if reservation {
        gpu_groups.first().cloned()
    } else {
        None
    };
    let gpu_device: Option<Arc<str>> = if reservation {
        get(keys::RESERVED_GPU_INDEX)
            .filter(|d| !d.is_empty())
            .map(Into::into)
    } else {
        None
    };
    if reservation {
        gpu_groups.clear();
    }
    PodUpdate {
        uid: meta.uid.as_deref().unwrap_or_default().into(),
        namespace,
        name: meta.name.as_deref().unwrap_or_default().into(),
        ours: spec.and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler_name),
        group_key,
        subgroup: label(keys::SUBGROUP_NAME)
            .filter(|s| !s.is_empty())
            .map(Into::into),
        request,
        gpu,
        constraints: constraints(spec),
        labels: pod_labels,
        rules,
        api: ApiView {
            status,
            node_name,
            bound_at,
        },
        gpu_groups,
        task_order,
        never_preempts: spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never"),
        created: millis(meta.creation_timestamp.as_ref()),
        problem: (!problems.is_empty()).then(|| problems.join("; ").into()),
        claims: pod_claims(meta.name.as_deref().unwrap_or_default(), spec),
        reservation_for,
        gpu_device,
    }
}

/// The claims a pod's volumes use: `persistentVolumeClaim` volumes by claim name, generic `ephemeral`
/// volumes by the claim the ephemeral volume controller makes for them (`<pod>-<volume>`).
fn pod_claims(pod_name: &str, spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> Vec<PodClaim> {
    let Some(volumes) = spec.and_then(|s| s.volumes.as_ref()) else {
        return Vec::new();
    };
    volumes
        .iter()
        .filter_map(|v| {
            if let Some(pvc) = &v.persistent_volume_claim {
                Some(PodClaim {
                    name: pvc.claim_name.as_str().into(),
                    ephemeral: false,
                })
            } else {
                v.ephemeral.as_ref().map(|_| PodClaim {
                    name: format!("{pod_name}-{}", v.name).into(),
                    ephemeral: true,
                })
            }
        })
        .collect()
}

fn requirement(r: &NodeSelectorRequirement, field: bool) -> Requirement {
    let values = r.values.clone().unwrap_or_default();
    let first_int = values.first().and_then(|v| v.parse::<i64>().ok());
    let op = match r.operator.as_str() {
        "In" => Operator::In(values),
        "NotIn" => Operator::NotIn(values),
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => first_int.map_or(Operator::In(Vec::new()), Operator::Gt),
        "Lt" => first_int.map_or(Operator::In(Vec::new()), Operator::Lt),
        // An operator we do not know matches nothing, as the API server would reject it anyway.
        _ => Operator::In(Vec::new()),
    };
    Requirement {
        key: r.key.clone(),
        field,
        op,
    }
}

/// A node selector term as an AND of requirements: its label expressions, then its field expressions.
pub(super) fn term_requirements(t: &NodeSelectorTerm) -> Vec<Requirement> {
    let mut reqs: Vec<Requirement> = t
        .match_expressions
        .iter()
        .flatten()
        .map(|r| requirement(r, false))
        .collect();
    reqs.extend(t.match_fields.iter().flatten().map(|r| requirement(r, true)));
    reqs
}

fn constraints(spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> Constraints {
    let Some(spec) = spec else {
        return Constraints::default();
    };
    let mut node_selector: Vec<(String, String)> = spec
        .node_selector
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    node_selector.sort();
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|s| s.node_selector_terms.clone())
        .unwrap_or_default();
    let affinity_terms = terms.iter().map(term_requirements).collect();
    let preferred = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.preferred_during_scheduling_ignored_during_execution.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let reqs = term_requirements(&p.preference);
            // An empty preference term matches nothing worth a weight (kube-scheduler gives it none).
            (!reqs.is_empty()).then_some((p.weight, reqs))
        })
        .collect();
    let tolerations = spec
        .tolerations
        .iter()
        .flatten()
        .map(|t| Toleration {
            key: t.key.clone().unwrap_or_default(),
            exists: t.operator.as_deref() == Some("Exists"),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.as_deref().and_then(effect),
        })
        .collect();
    Constraints {
        node_selector,
        affinity_terms,
        tolerations,
        preferred,
    }
}

fn effect(s: &str) -> Option<TaintEffect> {
    match s {
        "NoSchedule" => Some(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
        "NoExecute" => Some(TaintEffect::NoExecute),
        _ => None,
    }
}

/// Whether a pod of another scheduler matters to the model (it holds node resources).
#[must_use]
pub fn foreign_pod_holds_node(update: &PodUpdate) -> bool {
    update.api.node_name.is_some() && !update.api.status.is_finished()
}

/// What the scheduler reads from a node.
#[must_use]
pub fn node(names: &mut ResourceNames, node: &Node) -> NodeUpdate {
    node_with_faults(names, node).0
}

/// [`node`], and what of its allocatable the model cannot count (a value that is not a quantity, or a
/// resource past the last slot). Such a resource counts as absent: no pod asking for it goes there, and
/// a pod asking for a resource past the last slot is refused with that reason anyway.
#[must_use]
pub fn node_with_faults(names: &mut ResourceNames, node: &Node) -> (NodeUpdate, Vec<String>) {
    let meta = &node.metadata;
    let spec = node.spec.as_ref();
    let status = node.status.as_ref();
    let mut allocatable = Resources::ZERO;
    let mut faults = Vec::new();
    add_quantities(
        names,
        &mut allocatable,
        status.and_then(|s| s.allocatable.as_ref()),
        &HashSet::new(),
        &mut faults,
    );
    // Whole devices only.
    allocatable.0[GPU] = allocatable.0[GPU] / 1000 * 1000;
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let taints = spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some(Taint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect: effect(&t.effect)?,
            })
        })
        .collect();
    let labels: BTreeMap<String, String> = meta.labels.clone().unwrap_or_default();
    let gpu_memory_mib = labels
        .get(keys::NODE_GPU_MEMORY)
        .and_then(|v| v.parse::<u64>().ok())
        .map(|v| {
            // Values above 1 TiB are bytes (some exporters), as KAI reads them.
            let mib = if v > 1 << 20 { v >> 20 } else { v };
            u32::try_from(mib).unwrap_or(u32::MAX)
        });
    let update = NodeUpdate {
        name: meta.name.as_deref().unwrap_or_default().into(),
        labels,
        taints,
        ready,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        allocatable,
        gpu_memory_mib,
    };
    (update, faults)
}

fn annotation_time(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<Millis> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .and_then(|v| parse_rfc3339(v))
}

fn non_empty(s: Option<&String>) -> Option<String> {
    s.filter(|s| !s.is_empty()).cloned()
}

/// What the scheduler reads from a KAI PodGroup.
#[must_use]
pub fn pod_group(pg: &api::PodGroup, default_queue: &str) -> Group {
    let meta = &pg.metadata;
    let key = GroupKey {
        kind: GroupKind::Kai,
        namespace: meta.namespace.as_deref().unwrap_or("default").into(),
        name: meta.name.as_deref().unwrap_or_default().into(),
    };
    let spec = &pg.spec;
    let queue = non_empty(spec.queue.as_ref()).unwrap_or_else(|| default_queue.to_owned());
    let min = spec.effective_min_member();
    let mut group = Group::new(key, &queue, min);
    group.uid = meta.uid.as_deref().unwrap_or_default().into();
    group.priority_class = non_empty(spec.priority_class_name.as_ref()).map(Into::into);
    group.explicit_priority = spec.priority;
    group.explicit_preemptible = spec.preemptibility.map(|p| p == api::Preemptibility::Preemptible);
    group.max_member = spec.max_member.and_then(|m| u32::try_from(m).ok());
    group.parent_name = non_empty(spec.parent_pod_group.as_ref()).map(Into::into);
    group.schedule_timeout_secs = spec.schedule_timeout_seconds.filter(|s| *s > 0);
    group.mark_unschedulable = spec.mark_unschedulable.unwrap_or(true);
    // KAI backs off on any value but -1 (its default); the CRD allows -1 and up.
    group.scheduling_backoff = spec.scheduling_backoff.is_some_and(|b| b != -1);
    group.created = millis(meta.creation_timestamp.as_ref());
    group.owner_pod = api::podgroup::made_for_pod(
        meta.owner_references.as_deref().unwrap_or_default(),
        meta.annotations.as_ref(),
    )
    .map(Into::into);
    group.last_start = annotation_time(meta, keys::LAST_START_TIMESTAMP);
    group.stale_annotation = annotation_time(meta, keys::STALE_TIMESTAMP);
    // What the model starts from when it first sees the group (`Cluster::apply_group` keeps its own
    // value across later updates).
    group.stale_since = group.stale_annotation;
    if let Some(max) = group.max_member
        && max < min
    {
        group.problems.push(GroupProblem::MaxBelowMin { min, max });
    }
    group.topology_spec = spec.topology_constraint.as_ref().and_then(topology_spec);
    // Sub-groups: names unique, parents declared, no cycles.
    let mut seen = HashSet::new();
    for s in &spec.sub_groups {
        if !seen.insert(s.name.clone()) {
            group
                .problems
                .push(GroupProblem::DuplicateSubGroup(s.name.clone()));
        }
    }
    for s in &spec.sub_groups {
        let parent = s.parent.as_ref().filter(|p| !p.is_empty());
        let parent_index = parent.and_then(|p| spec.sub_groups.iter().position(|x| &x.name == p));
        if let (Some(p), None) = (parent, parent_index) {
            group.problems.push(GroupProblem::UnknownSubGroupParent {
                subgroup: s.name.clone(),
                parent: p.clone(),
            });
        }
        group.subgroups.push(SubGroupDecl {
            name: s.name.as_str().into(),
            min_member: s.min_member.and_then(|m| u32::try_from(m).ok()).unwrap_or(0),
            parent: parent_index,
            topology: None,
        });
        group
            .subgroup_topology_specs
            .push(s.topology_constraint.as_ref().and_then(topology_spec));
    }
    for (i, _) in group.subgroups.iter().enumerate() {
        let mut path = vec![i];
        let mut cur = group.subgroups[i].parent;
        while let Some(p) = cur {
            if path.contains(&p) {
                let names: Vec<&str> = path.iter().map(|x| &*group.subgroups[*x].name).collect();
                group.problems.push(GroupProblem::SubGroupCycle(format!(
                    "sub-groups {} -> {}",
                    names.join(" -> "),
                    group.subgroups[p].name
                )));
                break;
            }
            path.push(p);
            cur = group.subgroups[p].parent;
        }
    }
    if group
        .problems
        .iter()
        .any(|p| matches!(p, GroupProblem::SubGroupCycle(_)))
    {
        // Break the cycle so the tree can still be built (the gang waits on the problem anyway).
        for s in &mut group.subgroups {
            s.parent = None;
        }
    }
    if let Some(status) = &pg.status {
        group.observed.fingerprint = scheduler_core::framework::report::status::status_fingerprint(status);
        group.observed.status = Some(scheduler_core::model::group_status::SeenStatus::Api(
            std::sync::Arc::new(status.clone()),
        ));
    }
    group.problems.sort();
    group.problems.dedup();
    group
}

fn topology_spec(
    t: &api::podgroup::TopologyConstraint,
) -> Option<scheduler_core::model::group::TopologySpec> {
    if t.is_empty() {
        return None;
    }
    Some((
        t.topology.clone().unwrap_or_default(),
        non_empty(t.required_topology_level.as_ref()),
        non_empty(t.preferred_topology_level.as_ref()),
    ))
}

/// What the scheduler reads from a Volcano PodGroup. Volcano's default queue `default` maps to ours.
#[must_use]
pub fn volcano_pod_group(names: &mut ResourceNames, pg: &api::VolcanoPodGroup, default_queue: &str) -> Group {
    let meta = &pg.metadata;
    let key = GroupKey {
        kind: GroupKind::Volcano,
        namespace: meta.namespace.as_deref().unwrap_or("default").into(),
        name: meta.name.as_deref().unwrap_or_default().into(),
    };
    let spec = &pg.spec;
    let queue = match spec.queue.as_deref() {
        None | Some("" | "default") => default_queue.to_owned(),
        Some(q) => q.to_owned(),
    };
    let min = spec
        .min_member
        .and_then(|m| u32::try_from(m).ok())
        .unwrap_or(1)
        .max(1);
    let mut group = Group::new(key, &queue, min);
    group.uid = meta.uid.as_deref().unwrap_or_default().into();
    group.priority_class = non_empty(spec.priority_class_name.as_ref()).map(Into::into);
    group.created = millis(meta.creation_timestamp.as_ref());
    if !spec.min_resources.is_empty() {
        // An entry that cannot be counted is a blocking problem, never skipped: skipping it would gate
        // the gang on less than the user asked for.
        let mut total = Resources::ZERO;
        for (resource, q) in &spec.min_resources {
            let counted = names
                .slot(resource)
                .ok_or(MinResourceFault::TooManyKinds)
                .and_then(|slot| match amount_in(slot, &q.0) {
                    Ok(v) if v >= 0 => Ok((slot, v)),
                    Ok(_) => Err(MinResourceFault::Negative),
                    Err(quantity::QuantityError::Overflow(_)) => Err(MinResourceFault::TooLarge),
                    Err(_) => Err(MinResourceFault::NotAQuantity),
                });
            match counted {
                Ok((slot, v)) => total.0[slot] = total.0[slot].saturating_add(v),
                Err(fault) => group.problems.push(GroupProblem::InvalidMinResource {
                    resource: resource.clone(),
                    value: q.0.clone(),
                    fault,
                }),
            }
        }
        group.min_resources = Some(total);
    }
    group
}

/// What the scheduler reads from a Queue.
#[must_use]
pub fn queue(names: &mut ResourceNames, q: &api::Queue) -> Queue {
    let meta = &q.metadata;
    let mut queue = Queue::new(meta.name.as_deref().unwrap_or_default());
    let spec = &q.spec;
    queue.parent_name = non_empty(spec.parent_queue.as_ref()).map(Into::into);
    queue.priority = spec.priority.unwrap_or(100);
    queue.created = millis(meta.creation_timestamp.as_ref());
    let read = |r: Option<&api::ResourceQuota>| {
        let r = r.copied().unwrap_or_default();
        QueueResourceSpec {
            quota: r.quota.unwrap_or(0.0),
            limit: r.limit.unwrap_or(-1.0),
            weight: r.over_quota_weight.unwrap_or(1.0).max(0.0),
        }
    };
    // Slots the queue does not mention: no quota, no limit, weight 1.
    for slot in 0..queue.resources.len() {
        queue.resources[slot] = QueueResourceSpec::default();
    }
    if let Some(res) = &spec.resources {
        queue.resources[CPU] = read(res.cpu.as_ref());
        queue.resources[GPU] = read(res.gpu.as_ref());
        queue.resources[MEMORY] = read(res.memory.as_ref());
        for (name, r) in &res.extended {
            if let Some(slot) = names.slot(name) {
                queue.resources[slot] = read(Some(r));
            }
        }
    }
    let runtime = |v: Option<&String>, field: &str, problems: &mut Vec<QueueProblem>| {
        v.filter(|s| !s.is_empty())
            .and_then(|s| match scheduler_core::config::parse_duration(s) {
                Ok(d) => Some(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
                Err(e) => {
                    problems.push(QueueProblem::BadDuration(format!("{field}: {e}")));
                    None
                }
            })
    };
    let mut problems = Vec::new();
    queue.preempt_min_runtime_ms = runtime(
        spec.preempt_min_runtime.as_ref(),
        "preemptMinRuntime",
        &mut problems,
    );
    queue.reclaim_min_runtime_ms = runtime(
        spec.reclaim_min_runtime.as_ref(),
        "reclaimMinRuntime",
        &mut problems,
    );
    queue.problems = problems;
    queue
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_yaml(y: &str) -> Pod {
        serde_yaml::from_str(y).expect("pod yaml")
    }

    #[test]
    fn reads_requests_gpus_and_group_annotations() {
        let mut names = ResourceNames::default();
        let p = pod_yaml(
            r#"
metadata:
  name: w-0
  namespace: ml
  uid: u1
  annotations: {scheduling.run.ai/pod-group: pytorch-ddp-training}
  labels: {kai.scheduler/subgroup-name: worker}
spec:
  schedulerName: kai-scheduler
  initContainers:
  - {name: init, image: x, resources: {requests: {cpu: "8"}}}
  containers:
  - {name: a, image: x, resources: {limits: {nvidia.com/gpu: 2, cpu: "2"}, requests: {cpu: "1", memory: 1Gi}}}
  - {name: b, image: x, resources: {requests: {cpu: 500m, example.com/fpga: "1"}}}
"#,
        );
        let u = pod(&mut names, &p, "kai-scheduler");
        assert!(u.ours);
        assert_eq!(
            u.group_key.as_ref().map(|k| (&*k.name, k.kind)),
            Some(("pytorch-ddp-training", GroupKind::Kai))
        );
        assert_eq!(u.subgroup.as_deref(), Some("worker"));
        // cpu: max(1 + 0.5, init 8) = 8; gpu from limits; memory from requests.
        assert_eq!(u.request.cpu(), 8000);
        assert_eq!(u.request.gpu(), 2000);
        assert_eq!(u.request.memory(), 1 << 30);
        assert_eq!(u.gpu, GpuRequest::Whole(2));
        assert_eq!(u.request.0[names.get("example.com/fpga").unwrap()], 1);
        assert_eq!(u.api.status, TaskStatus::Pending);
        assert!(u.problem.is_none());
    }

    /// Minimum runtimes count from the binding's `PodScheduled=True` time; an unbound pod has none,
    /// whatever its conditions say.
    #[test]
    fn reads_when_a_bound_pod_was_bound() {
        let mut names = ResourceNames::default();
        let bound = pod_yaml(
            r#"
metadata: {name: p, uid: u}
spec: {schedulerName: kai-scheduler, nodeName: n0, containers: [{name: a, image: x}]}
status:
  phase: Running
  conditions:
  - {type: Ready, status: "True", lastTransitionTime: "2026-01-01T00:00:09Z"}
  - {type: PodScheduled, status: "True", lastTransitionTime: "2026-01-01T00:00:00Z"}
"#,
        );
        let u = pod(&mut names, &bound, "kai-scheduler");
        assert_eq!(u.api.bound_at, Some(1_767_225_600_000));
        let unbound = pod_yaml(
            r#"
metadata: {name: p, uid: u}
spec: {schedulerName: kai-scheduler, containers: [{name: a, image: x}]}
status:
  conditions:
  - {type: PodScheduled, status: "False", lastTransitionTime: "2026-01-01T00:00:00Z"}
"#,
        );
        assert_eq!(pod(&mut names, &unbound, "kai-scheduler").api.bound_at, None);
        let by_name = pod_yaml(
            r#"
metadata: {name: p, uid: u}
spec: {schedulerName: kai-scheduler, nodeName: n0, containers: [{name: a, image: x}]}
"#,
        );
        assert_eq!(pod(&mut names, &by_name, "kai-scheduler").api.bound_at, None);
    }

    #[test]
    fn requests_past_what_can_be_counted_are_a_problem_not_a_panic_or_a_wrap() {
        let mut names = ResourceNames::default();
        // The API server accepts each of these; their sums do not fit in 64 bits.
        let p = pod_yaml(
            r#"
metadata: {name: big, uid: u, annotations: {pod-group-name: g}}
spec:
  overhead: {cpu: "9223372036854775"}
  containers:
  - {name: a, image: x, resources: {requests: {memory: 5Ei, cpu: "9223372036854775"}}}
  - {name: b, image: x, resources: {requests: {memory: 5Ei}, limits: {example.com/x: "9223372036854775807"}}}
  - {name: c, image: x, resources: {requests: {example.com/x: "1"}}}
"#,
        );
        let u = pod(&mut names, &p, "kai-scheduler");
        let problem = u.problem.expect("refused with a reason");
        for resource in ["memory", "example.com/x", "cpu"] {
            assert!(
                problem.contains(&format!(
                    "the requests for {resource} add up to more than can be counted"
                )),
                "{resource}: {problem}"
            );
        }
        // Counted as unbounded: never negative, so it never "fits" where it does not.
        assert_eq!(u.request.memory(), i64::MAX);
        assert_eq!(u.request.cpu(), i64::MAX);
    }

    /// The pod's request and problem for a pod spec given as YAML flow-mapping entries.
    fn request_of(names: &mut ResourceNames, spec: &str) -> (Resources, Option<String>) {
        let p = pod_yaml(&format!(
            "metadata: {{name: p, uid: u, annotations: {{pod-group-name: g}}}}\nspec: {{{spec}}}"
        ));
        let u = pod(names, &p, "kai-scheduler");
        (u.request, u.problem.map(|p| p.to_string()))
    }

    /// The vector with these (resource, amount) entries and the pod's own slot.
    fn expected(names: &mut ResourceNames, amounts: &[(&str, i64)]) -> Resources {
        let mut r = Resources::ZERO.with(PODS, 1);
        for (name, v) in amounts {
            r.0[names.slot(name).expect("a free slot")] = *v;
        }
        r
    }

    const GI: i64 = 1 << 30;
    const MI: i64 = 1 << 20;

    /// A request case: what it shows, the pod spec, and the expected (resource, amount) entries.
    type Case = (&'static str, &'static str, &'static [(&'static str, i64)]);

    #[test]
    fn pod_request_follows_kube_scheduler() {
        // (case, spec, expected request): CPU in millicores, bytes otherwise.
        let cases: &[Case] = &[
            (
                "app containers add up",
                "containers: [{name: a, resources: {requests: {cpu: 1, memory: 1Gi}}}, {name: b, resources: {requests: {cpu: 500m, memory: 2Gi}}}]",
                &[("cpu", 1500), ("memory", 3 * GI)],
            ),
            (
                "the largest init container wins, per resource",
                "initContainers: [{name: i1, resources: {requests: {cpu: 4, memory: 1Gi}}}, {name: i2, resources: {requests: {cpu: 2, memory: 6Gi}}}], containers: [{name: a, resources: {requests: {cpu: 1, memory: 4Gi}}}]",
                &[("cpu", 4000), ("memory", 6 * GI)],
            ),
            (
                "a missing request is the limit; an explicit zero request stays zero",
                "containers: [{name: a, resources: {limits: {cpu: 2, memory: 1Gi}}}, {name: b, resources: {requests: {cpu: 0}, limits: {cpu: 3}}}, {name: c, resources: {requests: {cpu: 100m}, limits: {cpu: 8}}}]",
                &[("cpu", 2100), ("memory", GI)],
            ),
            (
                "a sidecar runs with the app containers",
                "initContainers: [{name: s, restartPolicy: Always, resources: {requests: {cpu: 1}}}], containers: [{name: a, resources: {requests: {cpu: 2}}}]",
                &[("cpu", 3000)],
            ),
            (
                "an init container after a sidecar runs next to it",
                "initContainers: [{name: s, restartPolicy: Always, resources: {requests: {cpu: 1}}}, {name: i, resources: {requests: {cpu: 3}}}], containers: [{name: a, resources: {requests: {cpu: 1}}}]",
                &[("cpu", 4000)],
            ),
            (
                "an init container before a sidecar runs alone",
                "initContainers: [{name: i, resources: {requests: {cpu: 3}}}, {name: s, restartPolicy: Always, resources: {requests: {cpu: 1}}}], containers: [{name: a, resources: {requests: {cpu: 1}}}]",
                &[("cpu", 3000)],
            ),
            (
                "the running phase can outweigh every init step",
                "initContainers: [{name: i, resources: {requests: {cpu: 2}}}, {name: s, restartPolicy: Always, resources: {requests: {cpu: 1}}}], containers: [{name: a, resources: {requests: {cpu: 2}}}]",
                &[("cpu", 3000)],
            ),
            (
                "sidecars accumulate: each init step sees those started before it",
                "initContainers: [{name: s1, restartPolicy: Always, resources: {requests: {cpu: 1, memory: 1Gi}}}, {name: i1, resources: {requests: {cpu: 5, memory: 1Gi}}}, {name: s2, restartPolicy: Always, resources: {requests: {cpu: 2, memory: 1Gi}}}, {name: i2, resources: {requests: {cpu: 1, memory: 8Gi}}}], containers: [{name: a, resources: {requests: {cpu: 1, memory: 1Gi}}}]",
                // cpu: steps 1, 5+1, 1+2, 1+3 and running 1+1+2 -> 6; memory: steps 1, 2, 2, 8+2, running 3 -> 10.
                &[("cpu", 6000), ("memory", 10 * GI)],
            ),
            (
                "restartPolicy other than Always is a plain init container",
                "initContainers: [{name: i, restartPolicy: Never, resources: {requests: {cpu: 1}}}], containers: [{name: a, resources: {requests: {cpu: 2}}}]",
                &[("cpu", 2000)],
            ),
            (
                "overhead is added to the sum",
                "overhead: {cpu: 250m, memory: 120Mi}, containers: [{name: a, resources: {requests: {cpu: 1, memory: 1Gi}}}]",
                &[("cpu", 1250), ("memory", GI + 120 * MI)],
            ),
            (
                "overhead is added after the init maximum",
                "overhead: {cpu: 250m}, initContainers: [{name: i, resources: {requests: {cpu: 4}}}], containers: [{name: a, resources: {requests: {cpu: 1}}}]",
                &[("cpu", 4250)],
            ),
            (
                "pod-level requests replace the containers' sum for what they name, overhead on top",
                "resources: {requests: {cpu: 4, example.com/ignored: 9}}, overhead: {cpu: 100m}, containers: [{name: a, resources: {requests: {cpu: 1, memory: 1Gi}}}, {name: b, resources: {requests: {cpu: 1, memory: 1Gi}}}]",
                &[("cpu", 4100), ("memory", 2 * GI)],
            ),
            (
                "extended resources, hugepages and ephemeral storage are counted like the rest",
                "initContainers: [{name: i, resources: {requests: {ephemeral-storage: 10Gi}}}], containers: [{name: a, resources: {requests: {example.com/fpga: 1, ephemeral-storage: 1Gi, hugepages-2Mi: 4Mi}, limits: {hugepages-2Mi: 4Mi}}}, {name: b, resources: {limits: {example.com/fpga: 2, hugepages-1Gi: 1Gi}}}]",
                &[
                    ("example.com/fpga", 3),
                    ("ephemeral-storage", 10 * GI),
                    ("hugepages-2Mi", 4 * MI),
                    ("hugepages-1Gi", GI),
                ],
            ),
            (
                "zero requests count for nothing",
                "containers: [{name: a, resources: {requests: {cpu: 1, nvidia.com/gpu: 0, example.com/zero: 0}}}]",
                &[("cpu", 1000)],
            ),
        ];
        for (case, spec, amounts) in cases {
            let mut names = ResourceNames::default();
            let (request, problem) = request_of(&mut names, spec);
            assert_eq!(problem, None, "{case}");
            assert_eq!(request, expected(&mut names, amounts), "{case}");
        }
    }

    #[test]
    fn a_pod_resized_in_place_holds_the_larger_of_its_spec_and_what_the_kubelet_allocated() {
        // (case, pod status, expected CPU millicores) for a bound pod whose spec now asks 1 CPU for `a`
        // and 1 for the sidecar `s`.
        let cases = [
            ("no container statuses: the spec", "{phase: Pending}", 2000),
            (
                "statuses without resources (before 1.27): the spec",
                "{phase: Running, containerStatuses: [{name: a, ready: true, restartCount: 0, image: x, imageID: x}]}",
                2000,
            ),
            (
                "shrinking: the kubelet still holds 3 CPUs for a",
                "{phase: Running, containerStatuses: [{name: a, ready: true, restartCount: 0, image: x, imageID: x, allocatedResources: {cpu: 3}, resources: {requests: {cpu: 3}}}]}",
                4000,
            ),
            (
                "allocated but not yet applied: the larger counts",
                "{phase: Running, containerStatuses: [{name: a, ready: true, restartCount: 0, image: x, imageID: x, allocatedResources: {cpu: 500m}, resources: {requests: {cpu: 2}}}]}",
                3000,
            ),
            (
                "the sidecar's status is an init container status",
                "{phase: Running, initContainerStatuses: [{name: s, ready: true, restartCount: 0, image: x, imageID: x, allocatedResources: {cpu: 2}}]}",
                3000,
            ),
            (
                "growing beyond what the node has (infeasible): the spec does not count",
                "{phase: Running, conditions: [{type: PodResizePending, status: \"True\", reason: Infeasible}], containerStatuses: [{name: a, ready: true, restartCount: 0, image: x, imageID: x, allocatedResources: {cpu: 500m}}]}",
                // a: 500m allocated; s: no status and an infeasible resize, so nothing.
                500,
            ),
        ];
        for (case, status, cpu) in cases {
            let mut names = ResourceNames::default();
            let p = pod_yaml(&format!(
                "metadata: {{name: p, uid: u}}\nspec: {{nodeName: n, initContainers: [{{name: s, restartPolicy: Always, resources: {{requests: {{cpu: 1}}}}}}], containers: [{{name: a, resources: {{requests: {{cpu: 1}}}}}}]}}\nstatus: {status}"
            ));
            let u = pod(&mut names, &p, "kai-scheduler");
            assert_eq!((u.request.cpu(), u.problem), (cpu, None), "{case}");
        }
    }

    #[test]
    fn a_zero_request_takes_no_slot() {
        let mut names = ResourceNames::default();
        let (_, problem) = request_of(
            &mut names,
            "containers: [{name: a, resources: {requests: {example.com/zero: 0}, limits: {example.com/zero: 0}}}]",
        );
        assert_eq!(problem, None);
        assert_eq!(names.get("example.com/zero"), None);
    }

    #[test]
    fn resources_past_the_last_slot_refuse_the_pod_and_are_ignored_on_nodes() {
        let mut names = ResourceNames::default();
        let free = MAX_RESOURCES - names.len();
        // A node with more kinds than slots: the first ones are counted, the rest reported and absent.
        let allocatable: Vec<String> = (0..free + 2)
            .map(|i| format!("example.com/r{i:02}: \"1\""))
            .collect();
        let n: Node = serde_yaml::from_str(&format!(
            "metadata: {{name: n}}\nstatus: {{allocatable: {{cpu: \"4\", {}}}}}",
            allocatable.join(", ")
        ))
        .unwrap();
        let (update, faults) = node_with_faults(&mut names, &n);
        assert_eq!(update.allocatable.cpu(), 4000);
        assert_eq!(names.len(), MAX_RESOURCES);
        assert_eq!(faults.len(), 2, "{faults:?}");
        assert!(faults[0].contains("cannot track example.com/r"), "{faults:?}");
        // A pod asking for one that could not be tracked is refused and says why; a tracked one is fine.
        let last = format!("example.com/r{:02}", free + 1);
        let (_, problem) = request_of(
            &mut names,
            &format!("containers: [{{name: a, resources: {{requests: {{{last}: 1}}}}}}]"),
        );
        assert_eq!(
            problem.as_deref(),
            Some(
                format!("too many distinct resource kinds (at most {MAX_RESOURCES}); cannot track {last}")
                    .as_str()
            )
        );
        let (request, problem) = request_of(
            &mut names,
            "containers: [{name: a, resources: {requests: {example.com/r00: 1}}}]",
        );
        let slot = names.get("example.com/r00").expect("tracked");
        assert_eq!((request.0[slot], problem), (1, None));
    }

    #[test]
    fn sidecar_and_overhead_sums_past_what_can_be_counted_are_problems() {
        let mut names = ResourceNames::default();
        for spec in [
            "initContainers: [{name: s, restartPolicy: Always, resources: {requests: {memory: 5Ei}}}], containers: [{name: a, resources: {requests: {memory: 5Ei}}}]",
            "initContainers: [{name: s, restartPolicy: Always, resources: {requests: {memory: 5Ei}}}, {name: i, resources: {requests: {memory: 5Ei}}}], containers: [{name: a}]",
            "overhead: {memory: 5Ei}, containers: [{name: a, resources: {requests: {memory: 5Ei}}}]",
            "overhead: {memory: 5Ei}, resources: {requests: {memory: 5Ei}}, containers: [{name: a}]",
        ] {
            let (request, problem) = request_of(&mut names, spec);
            assert_eq!(
                problem.as_deref(),
                Some("the requests for memory add up to more than can be counted"),
                "{spec}"
            );
            assert_eq!(request.memory(), i64::MAX, "{spec}");
        }
    }

    #[test]
    fn resource_claims_are_refused_with_a_reason() {
        let mut names = ResourceNames::default();
        for (spec, claims) in [
            (
                "resourceClaims: [{name: gpu, resourceClaimName: c}], containers: [{name: a, resources: {claims: [{name: gpu}]}}]",
                "gpu",
            ),
            (
                "containers: [{name: a, resources: {claims: [{name: x}]}}], initContainers: [{name: i, resources: {claims: [{name: y}]}}]",
                "x, y",
            ),
        ] {
            let (_, problem) = request_of(&mut names, spec);
            assert_eq!(
                problem.as_deref(),
                Some(
                    format!(
                        "the pod uses dynamic resource allocation (resource claims {claims}), which this \
                         scheduler does not support; remove the claims or use a scheduler with DRA"
                    )
                    .as_str()
                ),
                "{spec}"
            );
        }
    }

    #[test]
    fn bad_annotations_become_problems_not_panics() {
        let mut names = ResourceNames::default();
        for (fraction, expected) in [
            (
                "abc",
                "gpu-fraction \"abc\" must be a number greater than 0 and at most 1",
            ),
            ("0", "gpu-fraction \"0\" must be"),
            ("1.5", "gpu-fraction \"1.5\" must be"),
            ("-1", "gpu-fraction \"-1\" must be"),
        ] {
            let p = pod_yaml(&format!(
                "metadata: {{name: p, uid: u, annotations: {{gpu-fraction: \"{fraction}\", pod-group-name: g}}}}\nspec: {{containers: [{{name: a, image: x}}]}}"
            ));
            let u = pod(&mut names, &p, "kai-scheduler");
            let problem = u.problem.expect("problem");
            assert!(problem.starts_with(expected), "{fraction}: {problem}");
        }
        let p = pod_yaml(
            "metadata: {name: p, uid: u, annotations: {pod-group-name: a, scheduling.run.ai/pod-group: b}}\nspec: {containers: [{name: a, image: x}]}",
        );
        let u = pod(&mut names, &p, "kai-scheduler");
        assert!(u.problem.unwrap().contains("conflicting group annotations"));
        let p = pod_yaml(
            "metadata: {name: p, uid: u, annotations: {gpu-fraction: \"0.5\", gpu-fraction-num-devices: \"2\"}}\nspec: {containers: [{name: a, image: x}]}",
        );
        assert_eq!(
            pod(&mut names, &p, "kai-scheduler").gpu,
            GpuRequest::Fraction {
                milli: 500,
                devices: 2
            }
        );
    }

    #[test]
    fn preemption_policy_never_is_read() {
        let mut names = ResourceNames::default();
        let read = |names: &mut ResourceNames, policy: &str| {
            let p: Pod = serde_yaml::from_str(&format!(
                "metadata: {{name: p, namespace: n, uid: u}}\nspec: {{schedulerName: kai-scheduler, containers: []{policy}}}"
            ))
            .unwrap();
            pod(names, &p, "kai-scheduler").never_preempts
        };
        assert!(read(&mut names, ", preemptionPolicy: Never"));
        assert!(!read(&mut names, ", preemptionPolicy: PreemptLowerPriority"));
        assert!(!read(&mut names, ""));
    }

    #[test]
    fn pod_status_mapping() {
        let mut names = ResourceNames::default();
        let cases = [
            ("{nodeName: n1}", "{phase: Running}", false, TaskStatus::Running),
            ("{nodeName: n1}", "{phase: Pending}", false, TaskStatus::Bound),
            ("{nodeName: n1}", "{phase: Running}", true, TaskStatus::Releasing),
            ("{}", "{phase: Pending}", false, TaskStatus::Pending),
            (
                "{schedulingGates: [{name: wait}]}",
                "{phase: Pending}",
                false,
                TaskStatus::Gated,
            ),
            (
                "{nodeName: n1}",
                "{phase: Succeeded}",
                false,
                TaskStatus::Succeeded,
            ),
        ];
        for (spec_extra, status, deleting, expected) in cases {
            let deletion = if deleting {
                ", deletionTimestamp: \"2026-01-01T00:00:00Z\""
            } else {
                ""
            };
            let spec = spec_extra.trim_start_matches('{').trim_end_matches('}');
            let sep = if spec.is_empty() { "" } else { ", " };
            let y = format!(
                "metadata: {{name: p, uid: u{deletion}}}\nspec: {{containers: [{{name: a, image: x}}]{sep}{spec}}}\nstatus: {status}"
            );
            assert_eq!(
                pod(&mut names, &pod_yaml(&y), "kai-scheduler").api.status,
                expected,
                "{y}"
            );
        }
    }

    #[test]
    fn volcano_annotation_wins_and_conflicts_are_reported() {
        let mut names = ResourceNames::default();
        let p = pod_yaml(
            "metadata: {name: p, uid: u, namespace: n, annotations: {scheduling.k8s.io/group-name: vg, pod-group-name: vg}}\nspec: {containers: [{name: a, image: x}]}",
        );
        let u = pod(&mut names, &p, "kai-scheduler");
        assert_eq!(u.group_key.map(|k| k.kind), Some(GroupKind::Volcano));
        assert!(u.problem.is_none());
    }

    #[test]
    fn reads_nodes() {
        let mut names = ResourceNames::default();
        let n: Node = serde_yaml::from_str(
            r#"
metadata: {name: n1, labels: {nvidia.com/gpu.memory: "81920", zone: a}}
spec: {unschedulable: true, taints: [{key: k, value: v, effect: NoSchedule}]}
status:
  allocatable: {cpu: "64", memory: 256Gi, nvidia.com/gpu: "8", pods: "110"}
  conditions: [{type: Ready, status: "True"}]
"#,
        )
        .unwrap();
        let u = node(&mut names, &n);
        assert_eq!(u.allocatable.cpu(), 64_000);
        assert_eq!(u.allocatable.gpu(), 8000);
        assert_eq!(u.allocatable.pods(), 110);
        assert!(u.ready && u.unschedulable);
        assert_eq!(u.gpu_memory_mib, Some(81920));
        assert_eq!(u.taints.len(), 1);
    }

    #[test]
    fn volcano_min_resources_that_cannot_be_counted_are_reported_and_block_the_gang() {
        let mut names = ResourceNames::default();
        let pg: api::VolcanoPodGroup = serde_yaml::from_str(
            r#"
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: vg, namespace: n, uid: u}
spec:
  minMember: 2
  minResources: {cpu: "2", gpu: abc, memory: "-1Gi", nvidia.com/gpu: "1e999"}
"#,
        )
        .unwrap();
        let g = volcano_pod_group(&mut names, &pg, "default-queue");
        let reasons: Vec<String> = g.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            reasons,
            [
                r#"minResources "gpu": "abc" is not a quantity"#,
                r#"minResources "memory": "-1Gi" is negative"#,
                r#"minResources "nvidia.com/gpu": "1e999" is too large to count"#,
            ],
        );
        // Like any other invalid definition, the gang waits until it is fixed rather than being gated
        // on less than the user asked for.
        assert_eq!(
            g.blocking_problem().map(GroupProblem::reason),
            Some("InvalidMinResources")
        );
        // What can be read is still read.
        assert_eq!(g.min_resources.map(|r| r.cpu()), Some(2000));
    }

    /// One cycle over a queue, a roomy node, one pod and a Volcano PodGroup with `min_resources`.
    fn cycle_with_volcano_min_resources(
        min_resources: &str,
    ) -> scheduler_core::framework::decisions::Decisions {
        let mut names = ResourceNames::default();
        let mut cluster = scheduler_core::model::Cluster::default();
        let q: api::Queue = serde_yaml::from_str("metadata: {name: q}\nspec: {}").unwrap();
        cluster.apply_queue(queue(&mut names, &q));
        let n: Node = serde_yaml::from_str(
            "metadata: {name: n1}\nstatus: {allocatable: {cpu: \"8\", memory: 8Gi, pods: \"10\"}, conditions: [{type: Ready, status: \"True\"}]}",
        )
        .unwrap();
        cluster.apply_node(node(&mut names, &n));
        let pg: api::VolcanoPodGroup = serde_yaml::from_str(&format!(
            "metadata: {{name: vg, namespace: n, uid: u}}\nspec: {{queue: q, minMember: 1, minResources: {min_resources}}}"
        ))
        .unwrap();
        cluster.apply_group(volcano_pod_group(&mut names, &pg, "default-queue"));
        let p = pod_yaml(
            "metadata: {name: p, uid: up, namespace: n, annotations: {scheduling.k8s.io/group-name: vg}}\nspec: {schedulerName: kai-scheduler, containers: [{name: a, image: x, resources: {requests: {cpu: \"1\"}}}]}",
        );
        cluster.apply_pod(pod(&mut names, &p, "kai-scheduler"));
        let config = scheduler_core::config::Config::default();
        scheduler_core::cycle::run(&mut cluster, &config, 1_767_225_600_000).decisions
    }

    #[test]
    fn a_volcano_gang_with_an_uncountable_min_resource_waits_and_says_why() {
        // Control: countable minResources that fit, the pod is bound.
        let fine = cycle_with_volcano_min_resources(r#"{cpu: "1"}"#);
        assert_eq!(fine.binds.len(), 1, "{:?}", fine.group_statuses);

        let bad = cycle_with_volcano_min_resources(r#"{cpu: "1", gpu: abc}"#);
        assert!(bad.binds.is_empty(), "{:?}", bad.binds);
        let status = &bad
            .group_statuses
            .iter()
            .find(|s| &*s.key.name == "vg")
            .expect("a status for the gang")
            .render();
        let invalid = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Invalid")
            .expect("an Invalid condition");
        assert_eq!(invalid.reason.as_deref(), Some("InvalidMinResources"));
        assert_eq!(
            invalid.message.as_deref(),
            Some(r#"minResources "gpu": "abc" is not a quantity"#)
        );
        let waiting = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Unschedulable")
            .expect("an Unschedulable condition");
        assert_eq!(waiting.reason.as_deref(), Some("InvalidMinResources"));
    }

    #[test]
    fn reads_podgroups_and_reports_definition_problems() {
        let pg: api::PodGroup = serde_yaml::from_str(
            r#"
apiVersion: scheduling.run.ai/v2
kind: PodGroup
metadata: {name: g, namespace: n, annotations: {kai.scheduler/last-start-timestamp: "2026-01-01T00:00:00Z"}}
spec:
  minMember: 4
  maxMember: 2
  subGroups:
  - {name: a, parent: b}
  - {name: b, parent: a}
  - {name: c, parent: missing}
  - {name: c}
"#,
        )
        .unwrap();
        let g = pod_group(&pg, "default-queue");
        assert_eq!(&*g.queue_name, "default-queue");
        assert_eq!(g.last_start, Some(1_767_225_600_000));
        let reasons: Vec<String> = g.problems.iter().map(ToString::to_string).collect();
        assert!(
            reasons.iter().any(|r| r == "maxMember 2 is below minMember 4"),
            "{reasons:?}"
        );
        assert!(
            reasons.iter().any(|r| r.contains("declared twice")),
            "{reasons:?}"
        );
        assert!(
            reasons.iter().any(|r| r.contains("names parent \"missing\"")),
            "{reasons:?}"
        );
        assert!(
            reasons
                .iter()
                .any(|r| r.starts_with("cycle: sub-groups a -> b -> a")),
            "{reasons:?}"
        );
    }

    #[test]
    fn scheduling_backoff_is_on_for_any_value_but_minus_one_and_reads_the_recorded_pool() {
        let read = |backoff: &str| {
            let pg: api::PodGroup = serde_yaml::from_str(&format!(
                r#"
metadata: {{name: g, namespace: n}}
spec: {{minMember: 1{backoff}}}
status:
  schedulingConditions:
  - {{type: UnschedulableOnNodePool, nodePool: pool-a, transitionID: "3", status: "True"}}
"#
            ))
            .unwrap();
            pod_group(&pg, "default-queue")
        };
        assert!(!read("").scheduling_backoff, "KAI's default is -1: no back-off");
        assert!(!read(", schedulingBackoff: -1").scheduling_backoff);
        for on in ["1", "0", "2"] {
            let g = read(&format!(", schedulingBackoff: {on}"));
            assert!(g.scheduling_backoff, "{on}");
            assert!(g.backed_off_on("pool-a") && !g.backed_off_on("default"), "{on}");
        }
    }

    #[test]
    fn reads_queues_with_kai_units_and_defaults() {
        let mut names = ResourceNames::default();
        let q: api::Queue = serde_yaml::from_str(
            "metadata: {name: team-a}\nspec: {parentQueue: department-1, resources: {gpu: {quota: 2, limit: 4}, cpu: {quota: -1, limit: -1, overQuotaWeight: 1}}, preemptMinRuntime: soon}",
        )
        .unwrap();
        let m = queue(&mut names, &q);
        assert_eq!(m.parent_name.as_deref(), Some("department-1"));
        assert_eq!(m.priority, 100);
        assert_eq!(
            m.resources[GPU],
            QueueResourceSpec {
                quota: 2.0,
                limit: 4.0,
                weight: 1.0
            }
        );
        assert_eq!(
            m.resources[MEMORY],
            QueueResourceSpec {
                quota: 0.0,
                limit: -1.0,
                weight: 1.0
            }
        );
        assert!(matches!(&m.problems[0], QueueProblem::BadDuration(d) if d.contains("preemptMinRuntime")));
    }

    #[test]
    fn queue_min_runtimes_beyond_any_duration_are_problems_not_panics() {
        let mut names = ResourceNames::default();
        for (text, field) in [
            (
                "{preemptMinRuntime: 99999999999999999999999h}",
                "preemptMinRuntime",
            ),
            (
                "{reclaimMinRuntime: 18446744073709551615s1s}",
                "reclaimMinRuntime",
            ),
        ] {
            let q: api::Queue =
                serde_yaml::from_str(&format!("metadata: {{name: q}}\nspec: {text}")).unwrap();
            let m = queue(&mut names, &q);
            assert!(
                matches!(&m.problems[..], [QueueProblem::BadDuration(d)] if d.starts_with(field) && d.contains("is not a duration")),
                "{:?}",
                m.problems
            );
            assert_eq!((m.preempt_min_runtime_ms, m.reclaim_min_runtime_ms), (None, None));
        }
        // A duration that fits is kept, in milliseconds.
        let q: api::Queue =
            serde_yaml::from_str("metadata: {name: q}\nspec: {preemptMinRuntime: 1h30m}").unwrap();
        assert_eq!(queue(&mut names, &q).preempt_min_runtime_ms, Some(5_400_000));
    }
}
