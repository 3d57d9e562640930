//! Rules shared by every family: queue, priority class, preemptibility, the PodGroup's labels and
//! annotations, group-level topology, the `min-member` override, and the helpers families use.

use std::collections::BTreeMap;

use api::keys;
use api::{Preemptibility, podgroup::TopologyConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;

use super::names::{MAX_LABEL_VALUE, bounded_label_value, bounded_name};
use super::{Grouping, MAX_SUB_GROUPS, Shape, Warning, Workload};

/// Annotations never copied from the top owner: bulky, or owned by the scheduler.
const NOT_COPIED: [&str; 4] = [
    keys::LAST_APPLIED_CONFIGURATION,
    keys::LAST_START_TIMESTAMP,
    keys::STALE_TIMESTAMP,
    keys::TOP_OWNER_METADATA,
];
/// Annotation values longer than this are not copied (they would bloat every PodGroup read).
const MAX_COPIED_VALUE: usize = 4096;

/// Labels of an object (empty when none).
pub(crate) fn labels(obj: &DynamicObject) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    obj.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// Annotations of an object (empty when none).
pub(crate) fn annotations(obj: &DynamicObject) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    obj.metadata.annotations.as_ref().unwrap_or(&EMPTY)
}

/// Name of an object.
pub(crate) fn name(obj: &DynamicObject) -> &str {
    obj.metadata.name.as_deref().unwrap_or_default()
}

/// Uid of an object.
pub(crate) fn uid(obj: &DynamicObject) -> &str {
    obj.metadata.uid.as_deref().unwrap_or_default()
}

/// An owner reference to `obj` (no `controller`, no `blockOwnerDeletion`: the PodGroup only rides on
/// the object's lifetime).
pub(crate) fn owner_ref(obj: &DynamicObject) -> OwnerReference {
    let (api_version, kind) = obj
        .types
        .as_ref()
        .map(|t| (t.api_version.clone(), t.kind.clone()))
        .unwrap_or_default();
    OwnerReference {
        api_version,
        kind,
        name: name(obj).to_owned(),
        uid: uid(obj).to_owned(),
        ..OwnerReference::default()
    }
}

/// Adds the wrapper's labels and annotations to `inner` where it lacks the key (TrainJob's queue label
/// reaches its JobSet's group this way). In memory only.
pub(crate) fn inherit_metadata(inner: &mut DynamicObject, wrapper: &DynamicObject) {
    let dst = inner.metadata.labels.get_or_insert_with(BTreeMap::new);
    for (k, v) in labels(wrapper) {
        dst.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let dst = inner.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in annotations(wrapper) {
        dst.entry(k.clone()).or_insert_with(|| v.clone());
    }
}

/// The `scheduling.run.ai/gang-scheduling` opt-in/out: `Some(true|false)` when set validly.
pub(crate) fn gang_annotation(obj: &DynamicObject, warnings: &mut Vec<Warning>) -> Option<bool> {
    let value = annotations(obj).get(keys::GANG_SCHEDULING)?;
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => {
            warnings.push(Warning::InvalidValue {
                key: keys::GANG_SCHEDULING.to_owned(),
                value: value.clone(),
                detail: "expected \"true\" or \"false\"; ignored".to_owned(),
            });
            None
        }
    }
}

/// Whether a PodGroup of `requested` sub-groups stays within [`MAX_SUB_GROUPS`]. When it does not, the
/// user hears that `what` was not cut up and what was done `instead`; the caller must then not build
/// them.
pub(crate) fn sub_groups_within_cap(
    requested: u64,
    what: impl FnOnce() -> String,
    instead: &str,
    warnings: &mut Vec<Warning>,
) -> bool {
    if usize::try_from(requested).is_ok_and(|n| n <= MAX_SUB_GROUPS) {
        return true;
    }
    warnings.push(Warning::TooManySubGroups {
        what: what(),
        requested,
        detail: instead.to_owned(),
    });
    false
}

/// A topology constraint from `kai.scheduler/topology*`-style annotations: present only when a
/// required or preferred level is set; without a topology name it is dropped with a warning.
pub(crate) fn topology_from(
    topology: Option<&String>,
    required: Option<&String>,
    preferred: Option<&String>,
    warnings: &mut Vec<Warning>,
    what: &str,
) -> Option<TopologyConstraint> {
    let non_empty = |v: Option<&String>| v.filter(|s| !s.is_empty()).cloned();
    let (required, preferred) = (non_empty(required), non_empty(preferred));
    if required.is_none() && preferred.is_none() {
        return None;
    }
    let Some(topology) = non_empty(topology) else {
        warnings.push(Warning::Workload {
            detail: format!(
                "{what} sets a topology placement but no {} annotation; placement ignored",
                keys::TOPOLOGY
            ),
        });
        return None;
    };
    Some(TopologyConstraint {
        topology: Some(topology),
        required_topology_level: required,
        preferred_topology_level: preferred,
    })
}

/// Completes a family's shape into the PodGroup: names bounded, queue, priority, preemptibility,
/// labels, annotations, topology and the `min-member` override.
pub(crate) fn finish(w: &Workload<'_>, mut shape: Shape, warnings: &mut Vec<Warning>) -> Grouping {
    let top = w.top.as_ref();
    // The families that cut by a number check before building; this catches the ones whose sub-groups
    // come from lists in the spec (Ray worker groups, JobSet replicated jobs).
    let requested = u64::try_from(shape.sub_groups.len()).unwrap_or(u64::MAX);
    let what = || format!("{} {}", kind(top), name(top));
    if !sub_groups_within_cap(requested, what, "the group has no sub-groups", warnings) {
        shape.sub_groups = Vec::new();
        shape.pod_sub_group = None;
    }
    let name = bounded_name(&shape.name);
    min_member_override(top, &mut shape, warnings);
    for sg in &mut shape.sub_groups {
        sg.name = bounded_label_value(&sg.name);
        sg.parent = sg.parent.as_deref().map(bounded_label_value);
    }
    let pod_sub_group = shape.pod_sub_group.as_deref().map(bounded_label_value);
    let namespace = w.pod.metadata.namespace.as_deref().unwrap_or_default();
    let queue = queue(w, &shape, &name, namespace, warnings);
    let priority_class_name = priority_class(w, &shape, warnings);
    let preemptibility = preemptibility(w, warnings);
    let top_annotations = annotations(top);
    let topology = match shape.topology.take() {
        // The spec's constraint, its unset levels from the annotations (as KAI fills them for Grove).
        Some(mut constraint) => {
            let level = |key: &str| top_annotations.get(key).filter(|l| !l.is_empty()).cloned();
            if constraint.required_topology_level.is_none() {
                constraint.required_topology_level = level(keys::TOPOLOGY_REQUIRED);
            }
            if constraint.preferred_topology_level.is_none() {
                constraint.preferred_topology_level = level(keys::TOPOLOGY_PREFERRED);
            }
            Some(constraint)
        }
        None => topology_from(
            top_annotations.get(keys::TOPOLOGY),
            top_annotations.get(keys::TOPOLOGY_REQUIRED),
            top_annotations.get(keys::TOPOLOGY_PREFERRED),
            warnings,
            "the workload",
        ),
    };
    let mut labels = labels(top).clone();
    // The pod's node pool, under the key the scheduler filters PodGroups by (`--node-pool-label`).
    let pool_key = &w.settings.node_pool_label_key;
    if let Some(pool) = w.pod.metadata.labels.as_ref().and_then(|l| l.get(pool_key)) {
        labels.entry(pool_key.clone()).or_insert_with(|| pool.clone());
    }
    // Label values the API server would reject are dropped rather than failing the apply.
    labels.retain(|_, v| v.len() <= MAX_LABEL_VALUE);
    // A pod grouped on its own carries the group annotation the podgrouper writes on it: copied, it
    // would change the PodGroup after the pod's patch and cost every such pod a second apply. (A
    // user's own group annotation never gets here: the pod joins that group instead.)
    let own_pod = kind(top) == "Pod" && uid(top) == w.pod.metadata.uid.as_deref().unwrap_or_default();
    let mut annotations: BTreeMap<String, String> = top_annotations
        .iter()
        .filter(|(k, v)| !NOT_COPIED.contains(&k.as_str()) && v.len() <= MAX_COPIED_VALUE)
        .filter(|(k, _)| !(own_pod && k.as_str() == keys::POD_GROUP_NAME))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    annotations.insert(keys::TOP_OWNER_METADATA.to_owned(), top_owner_metadata(top));
    Grouping {
        name,
        owner: shape.owner,
        min_member: shape.min_member.max(1),
        sub_groups: shape.sub_groups,
        pod_sub_group,
        queue,
        priority_class_name,
        preemptibility,
        topology,
        labels,
        annotations,
    }
}

fn min_member_override(top: &DynamicObject, shape: &mut Shape, warnings: &mut Vec<Warning>) {
    let Some(value) = annotations(top).get(keys::MIN_MEMBER_OVERRIDE) else {
        return;
    };
    let invalid = |detail: &str| Warning::InvalidValue {
        key: keys::MIN_MEMBER_OVERRIDE.to_owned(),
        value: value.clone(),
        detail: detail.to_owned(),
    };
    match value.trim().parse::<i32>() {
        Ok(n) if n >= 1 && shape.gang => shape.min_member = n,
        Ok(n) if n >= 1 => warnings.push(invalid("this workload gets one group per pod; ignored")),
        _ => warnings.push(invalid("expected a positive integer; ignored")),
    }
}

/// Queue: the existing PodGroup's (fixed at creation); else the top owner's queue label (the configured
/// key, then `runai/queue`), the templates', the pod's; else the default queue.
/// KAI's project rule, for a workload without a queue label: the `project` label of the top owner, else
/// of the pod, names the queue, suffixed with the pod's node pool when it has one.
fn project_queue(w: &Workload<'_>) -> Option<String> {
    let pod_labels = w.pod.metadata.labels.as_ref();
    let project = std::iter::once(labels(&w.top))
        .chain(pod_labels)
        .filter_map(|l| l.get(keys::PROJECT_LABEL))
        .find(|v| !v.is_empty())?;
    let pool = pod_labels
        .and_then(|l| l.get(&w.settings.node_pool_label_key))
        .filter(|p| !p.is_empty());
    Some(match pool {
        Some(pool) => format!("{project}-{pool}"),
        None => project.clone(),
    })
}

fn queue(
    w: &Workload<'_>,
    shape: &Shape,
    pg_name: &str,
    namespace: &str,
    warnings: &mut Vec<Warning>,
) -> String {
    let keys_in_order: Vec<&str> = if w.settings.queue_label_key == keys::QUEUE_LABEL_LEGACY {
        vec![keys::QUEUE_LABEL_LEGACY]
    } else {
        vec![w.settings.queue_label_key.as_str(), keys::QUEUE_LABEL_LEGACY]
    };
    let pod_labels = w.pod.metadata.labels.as_ref();
    let sources = std::iter::once(labels(&w.top))
        .chain(shape.template_labels.iter())
        .chain(pod_labels);
    let requested = sources
        .flat_map(|l| keys_in_order.iter().filter_map(move |k| l.get(*k)))
        .find(|v| !v.is_empty())
        .cloned()
        .or_else(|| project_queue(w))
        .unwrap_or_else(|| w.settings.default_queue.clone());
    let existing = w
        .view
        .pod_group(namespace, pg_name)
        .and_then(|pg| pg.spec.queue.clone())
        .filter(|q| !q.is_empty());
    let queue = match existing {
        Some(current) if current != requested => {
            warnings.push(Warning::QueueFixed {
                current: current.clone(),
                requested,
            });
            current
        }
        Some(current) => current,
        None => requested,
    };
    if w.view.queue_exists(&queue) == Some(false) {
        warnings.push(Warning::QueueNotFound { queue: queue.clone() });
    }
    queue
}

/// Priority class: the top owner's label(s), the class the workload's spec names, labels of the owners
/// below it (outermost first), the pod's label, the pod's `priorityClassName`; a named class that does
/// not exist is skipped with a warning. Else the family's default.
fn priority_class(w: &Workload<'_>, shape: &Shape, warnings: &mut Vec<Warning>) -> String {
    let mut candidates: Vec<(String, String)> = Vec::new();
    let top = w.top.as_ref();
    for key in shape.priority_label_keys {
        if let Some(v) = labels(top).get(*key) {
            candidates.push((v.clone(), format!("label {key} on {} {}", kind(top), name(top))));
        }
    }
    candidates.extend(shape.spec_priority_class.clone());
    for owner in w.below.iter().rev() {
        if let Some(v) = labels(owner).get(keys::PRIORITY_CLASS_LABEL) {
            candidates.push((
                v.clone(),
                format!(
                    "label {} on {} {}",
                    keys::PRIORITY_CLASS_LABEL,
                    kind(owner),
                    name(owner)
                ),
            ));
        }
    }
    if let Some(v) = w
        .pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::PRIORITY_CLASS_LABEL))
    {
        candidates.push((
            v.clone(),
            format!("label {} on the pod", keys::PRIORITY_CLASS_LABEL),
        ));
    }
    if let Some(v) = w.pod.spec.as_ref().and_then(|s| s.priority_class_name.as_ref()) {
        candidates.push((v.clone(), "the pod's priorityClassName".to_owned()));
    }
    for (class, source) in candidates {
        if class.is_empty() {
            continue;
        }
        if w.view.priority_class_exists(&class) == Some(false) {
            warnings.push(Warning::PriorityClassNotFound { name: class, source });
            continue;
        }
        return class;
    }
    // KAI's per-kind defaults ConfigMap, nearest owner first, before the kind's built-in default.
    if let Some(defaults) = w.view.kind_defaults() {
        for owner in chain_nearest_first(w) {
            let (group, kind) = super::json::group_kind(owner);
            let Some(class) = defaults.get(group, kind).and_then(|d| d.priority_class.as_ref()) else {
                continue;
            };
            if w.view.priority_class_exists(class) == Some(false) {
                warnings.push(Warning::PriorityClassNotFound {
                    name: class.clone(),
                    source: format!("the defaults ConfigMap's entry for {kind}"),
                });
                continue;
            }
            return class.clone();
        }
    }
    let default = shape.default_priority.to_owned();
    if w.view.priority_class_exists(&default) == Some(false) {
        warnings.push(Warning::PriorityClassNotFound {
            name: default.clone(),
            source: "default for this kind".to_owned(),
        });
    }
    default
}

/// Preemptibility: `kai.scheduler/preemptibility` on the top owner, the owners below it, the pod.
fn preemptibility(w: &Workload<'_>, warnings: &mut Vec<Warning>) -> Option<Preemptibility> {
    let pod_labels = w.pod.metadata.labels.as_ref();
    let sources = std::iter::once(labels(&w.top))
        .chain(w.below.iter().rev().map(|o| labels(o)))
        .chain(pod_labels);
    for value in sources.filter_map(|l| l.get(keys::PREEMPTIBILITY_LABEL)) {
        match value.as_str() {
            "preemptible" => return Some(Preemptibility::Preemptible),
            "non-preemptible" => return Some(Preemptibility::NonPreemptible),
            "" => {}
            other => warnings.push(Warning::InvalidValue {
                key: keys::PREEMPTIBILITY_LABEL.to_owned(),
                value: other.to_owned(),
                detail: "expected preemptible or non-preemptible; ignored".to_owned(),
            }),
        }
    }
    // KAI's per-kind defaults ConfigMap, nearest owner first.
    let defaults = w.view.kind_defaults()?;
    chain_nearest_first(w).find_map(|owner| {
        let (group, kind) = super::json::group_kind(owner);
        defaults.get(group, kind).and_then(|d| d.preemptibility)
    })
}

/// The owners the per-kind defaults are looked up for, as KAI does: the pod's owner first, up to the top
/// owner (the pod itself for a bare pod).
fn chain_nearest_first<'w>(w: &'w Workload<'_>) -> impl Iterator<Item = &'w DynamicObject> {
    w.below
        .iter()
        .map(|owner| &**owner)
        .chain(std::iter::once(w.top.as_ref()))
}

fn kind(obj: &DynamicObject) -> &str {
    obj.types.as_ref().map_or("", |t| t.kind.as_str())
}

/// KAI's `kai.scheduler/top-owner-metadata`: YAML with name, uid, group, version and kind.
fn top_owner_metadata(top: &DynamicObject) -> String {
    #[derive(serde::Serialize)]
    struct Meta<'a> {
        name: &'a str,
        uid: &'a str,
        group: &'a str,
        version: &'a str,
        kind: &'a str,
    }
    let api_version = top.types.as_ref().map_or("", |t| t.api_version.as_str());
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let meta = Meta {
        name: name(top),
        uid: uid(top),
        group,
        version,
        kind: kind(top),
    };
    serde_yaml::to_string(&meta).unwrap_or_default()
}
