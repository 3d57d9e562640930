//! `ray.io` RayCluster and RayJob (RayService is a wrapper: each of its clusters is grouped as a
//! RayCluster, so an upgrade's second cluster gets its own group and the old one goes with its cluster).
//!
//! A cluster is one gang: the head plus, per worker group that is not suspended, `minReplicas` (or
//! `replicas` when no minimum) × `numOfHosts` pods, with a sub-group per group (`headgroup`, then the
//! worker group's name) carrying the template's topology annotations. `scheduling.run.ai/gang-scheduling:
//! "false"` turns the gang off (minMember 1, no sub-groups). The queue may also come from the pod
//! templates' labels (seed 000 labels only the workers), read in a fixed order so head and workers agree.

use std::collections::BTreeMap;

use api::{SubGroup, keys};
use serde_json::Value;

use super::common::{gang_annotation, name, topology_from};
use super::generic::whole;
use super::json::{at, bool_at, clamp_i32, int_at, str_at, string_map_at};
use super::{GroupingError, Shape, Warning, Workload};

/// Ray reads KubeRay's priority label before the common one.
const PRIORITY_LABELS: &[&str] = &[keys::RAY_PRIORITY_CLASS_LABEL, keys::PRIORITY_CLASS_LABEL];
/// Sub-group name KubeRay gives the head (`ray.io/group` on the head pod).
const HEAD_GROUP: &str = "headgroup";

pub(crate) fn cluster(w: &Workload<'_>, warnings: &mut Vec<Warning>) -> Shape {
    let top = w.top.as_ref();
    let spec = at(&top.data, &["spec"]).cloned().unwrap_or(Value::Null);
    shape_from_cluster_spec(w, &spec, gang_annotation(top, warnings) != Some(false), warnings)
}

/// A RayJob's group: named after the RayJob, sized by its cluster (the cluster in the chain, else the
/// RayJob's own `rayClusterSpec`, else the cluster its status names).
pub(crate) fn job(w: &Workload<'_>, warnings: &mut Vec<Warning>) -> Result<Shape, GroupingError> {
    let top = w.top.as_ref();
    let in_chain = w
        .below
        .last()
        .filter(|o| super::json::group_kind(o) == ("ray.io", "RayCluster"));
    let spec = if let Some(cluster) = in_chain {
        at(&cluster.data, &["spec"]).cloned()
    } else if let Some(spec) = at(&top.data, &["spec", "rayClusterSpec"]) {
        Some(spec.clone())
    } else if let Some(cluster_name) = str_at(&top.data, &["status", "rayClusterName"]) {
        let namespace = top.metadata.namespace.as_deref().unwrap_or_default();
        let api_version = top.types.as_ref().map_or("ray.io/v1", |t| t.api_version.as_str());
        w.view
            .object(api_version, "RayCluster", namespace, cluster_name)
            .and_then(|c| at(&c.data, &["spec"]).cloned())
    } else {
        None
    };
    let Some(spec) = spec else {
        return Err(GroupingError::NotReady {
            kind: "RayJob".to_owned(),
            name: name(top).to_owned(),
            detail: "its RayCluster is not known yet (no rayClusterSpec, status.rayClusterName unset or not cached)".to_owned(),
        });
    };
    let gang = gang_annotation(top, warnings).or_else(|| in_chain.and_then(|c| gang_annotation(c, warnings)));
    Ok(shape_from_cluster_spec(w, &spec, gang != Some(false), warnings))
}

fn shape_from_cluster_spec(w: &Workload<'_>, spec: &Value, gang: bool, warnings: &mut Vec<Warning>) -> Shape {
    let head_template = at(spec, &["headGroupSpec", "template"])
        .cloned()
        .unwrap_or(Value::Null);
    let workers: &[Value] = at(spec, &["workerGroupSpecs"])
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let mut template_labels: Vec<BTreeMap<String, String>> =
        vec![string_map_at(&head_template, &["metadata", "labels"])];
    template_labels.extend(
        workers
            .iter()
            .map(|g| string_map_at(g, &["template", "metadata", "labels"])),
    );

    let mut shape = whole(w, 1, "train");
    shape.priority_label_keys = PRIORITY_LABELS;
    shape.template_labels = template_labels;
    if !gang {
        return shape;
    }
    let mut sub_groups = vec![SubGroup {
        name: HEAD_GROUP.to_owned(),
        min_member: Some(1),
        parent: None,
        topology_constraint: template_topology(&head_template, "the Ray head template", warnings),
    }];
    for (index, group) in workers.iter().enumerate() {
        if bool_at(group, &["suspended"]) == Some(true) {
            continue;
        }
        let replicas = int_at(group, &["replicas"]).unwrap_or(0).max(0);
        let min_replicas = int_at(group, &["minReplicas"]).unwrap_or(0).max(0);
        if replicas == 0 && min_replicas == 0 {
            continue;
        }
        let hosts = int_at(group, &["numOfHosts"]).filter(|h| *h > 0).unwrap_or(1);
        let pods = if min_replicas > 0 { min_replicas } else { replicas }.saturating_mul(hosts);
        let group_name =
            str_at(group, &["groupName"]).map_or_else(|| format!("worker-group-{index}"), str::to_owned);
        let template = at(group, &["template"]).cloned().unwrap_or(Value::Null);
        let what = format!("the Ray worker group {group_name}");
        sub_groups.push(SubGroup {
            name: group_name,
            min_member: Some(clamp_i32(pods)),
            parent: None,
            topology_constraint: template_topology(&template, &what, warnings),
        });
    }
    shape.min_member = sub_groups
        .iter()
        .filter_map(|s| s.min_member)
        .fold(0_i32, i32::saturating_add);
    shape.pod_sub_group = w
        .pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::RAY_GROUP))
        .filter(|g| sub_groups.iter().any(|s| &s.name == *g))
        .cloned();
    shape.sub_groups = sub_groups;
    shape.gang = true;
    shape
}

fn template_topology(
    template: &Value,
    what: &str,
    warnings: &mut Vec<Warning>,
) -> Option<api::podgroup::TopologyConstraint> {
    let a = string_map_at(template, &["metadata", "annotations"]);
    topology_from(
        a.get(keys::TOPOLOGY),
        a.get(keys::TOPOLOGY_REQUIRED),
        a.get(keys::TOPOLOGY_PREFERRED),
        warnings,
        what,
    )
}
