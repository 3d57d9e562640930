//! Kubeflow training-operator jobs (`kubeflow.org`: PyTorchJob, TFJob, MPIJob, XGBoostJob, JAXJob,
//! PaddleJob): one gang per job.
//!
//! minMember is `runPolicy.schedulingPolicy.minAvailable` when set, else (PyTorch) the elastic
//! `minReplicas`, else the sum of the replica specs' `replicas` (absent counts 1, as the operator
//! defaults it). An MPIJob that creates its launcher only once the workers run
//! (`launcherCreationPolicy: WaitForWorkersReady`) does not count the launcher until it exists.
//! PyTorch jobs get `master` and `worker` sub-groups, the workers optionally cut into segments of
//! `kai.scheduler/segment-size` pods (`worker-0`, `worker-1`, ...), unless that would pass
//! [`MAX_SUB_GROUPS`](super::MAX_SUB_GROUPS) or overflow the count (then reported, not segmented).

use std::collections::BTreeMap;

use api::{SubGroup, keys};
use serde_json::{Map, Value};

use super::common::{annotations, name, sub_groups_within_cap, topology_from};
use super::generic::whole;
use super::json::{at, clamp_i32, int_at, str_at, string_map_at};
use super::{Shape, Warning, Workload};

/// The replica-spec field of each training-job kind.
fn replica_specs_field(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "PyTorchJob" => "pytorchReplicaSpecs",
        "TFJob" => "tfReplicaSpecs",
        "MPIJob" => "mpiReplicaSpecs",
        "XGBoostJob" => "xgbReplicaSpecs",
        "JAXJob" => "jaxReplicaSpecs",
        "PaddleJob" => "paddleReplicaSpecs",
        _ => return None,
    })
}

pub(crate) fn is_training_job(kind: &str) -> bool {
    replica_specs_field(kind).is_some()
}

pub(crate) fn training_job(w: &Workload<'_>, warnings: &mut Vec<Warning>) -> Shape {
    let top = w.top.as_ref();
    let kind = top.types.as_ref().map_or("", |t| t.kind.as_str());
    let empty = Map::new();
    let specs = replica_specs_field(kind)
        .and_then(|f| at(&top.data, &["spec", f]))
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let replicas = |spec: &Value| int_at(spec, &["replicas"]).unwrap_or(1).max(0);
    // Saturating: each count is the user's, and a sum past i64 must not panic.
    let total: i64 = specs.values().map(replicas).fold(0, i64::saturating_add);

    let min_available = int_at(
        &top.data,
        &["spec", "runPolicy", "schedulingPolicy", "minAvailable"],
    )
    .filter(|m| *m > 0);
    let elastic_min = (kind == "PyTorchJob")
        .then(|| int_at(&top.data, &["spec", "elasticPolicy", "minReplicas"]))
        .flatten()
        .filter(|m| *m > 0);
    let mut min = min_available.or(elastic_min).unwrap_or(total);

    if kind == "MPIJob"
        && str_at(&top.data, &["spec", "launcherCreationPolicy"]) == Some("WaitForWorkersReady")
        && !launcher_exists(w)
    {
        min = min.saturating_sub(specs.get("Launcher").map_or(0, replicas));
    }
    let min = clamp_i32(min.max(1));
    if i64::from(min) > total && total > 0 {
        warnings.push(Warning::Workload {
            detail: format!(
                "{kind} {} asks for at least {min} pods but specifies only {total}; it cannot start",
                name(top)
            ),
        });
    }
    let mut shape = whole(w, min, "train");
    shape.gang = true;
    if kind == "PyTorchJob" {
        pytorch_sub_groups(w, specs, min, &mut shape, warnings);
    }
    shape
}

/// An MPI launcher pod of this job exists and is not terminating.
fn launcher_exists(w: &Workload<'_>) -> bool {
    let top = w.top.as_ref();
    let namespace = top.metadata.namespace.as_deref().unwrap_or_default();
    let selector = [
        (keys::KUBEFLOW_JOB_NAME, name(top)),
        (keys::KUBEFLOW_JOB_ROLE, "launcher"),
    ];
    w.view
        .pods(namespace, &selector)
        .iter()
        .any(|p| p.metadata.deletion_timestamp.is_none())
}

fn pytorch_sub_groups(
    w: &Workload<'_>,
    specs: &Map<String, Value>,
    min: i32,
    shape: &mut Shape,
    warnings: &mut Vec<Warning>,
) {
    let master = specs.get("Master");
    let worker = specs.get("Worker");
    let master_count = master.map_or(0, |m| clamp_i32(int_at(m, &["replicas"]).unwrap_or(1).max(0)));
    let worker_min = min.saturating_sub(master_count).max(0);
    if master_count > 0 {
        shape.sub_groups.push(SubGroup {
            name: "master".to_owned(),
            min_member: Some(master_count),
            ..SubGroup::default()
        });
    }
    let pod_labels = w.pod.metadata.labels.clone().unwrap_or_default();
    let pod_type = pod_labels
        .get(keys::KUBEFLOW_REPLICA_TYPE)
        .map(|t| t.to_ascii_lowercase());
    if pod_type.as_deref() == Some("master") && master_count > 0 {
        shape.pod_sub_group = Some("master".to_owned());
    }
    let Some(worker) = worker else { return };
    shape.sub_groups.push(SubGroup {
        name: "worker".to_owned(),
        min_member: Some(worker_min),
        ..SubGroup::default()
    });
    let is_worker_pod = pod_type.as_deref() == Some("worker");
    if is_worker_pod {
        shape.pod_sub_group = Some("worker".to_owned());
    }

    let template_annotations = string_map_at(worker, &["template", "metadata", "annotations"]);
    let pod_annotations = w.pod.metadata.annotations.clone().unwrap_or_default();
    let pick = |key: &str| {
        pod_annotations
            .get(key)
            .or_else(|| template_annotations.get(key))
            .cloned()
    };
    let Some(raw_size) = pick(keys::SEGMENT_SIZE) else {
        return;
    };
    let size = match raw_size.trim().parse::<i32>() {
        Ok(s) if s >= 1 => s,
        _ => {
            warnings.push(Warning::InvalidValue {
                key: keys::SEGMENT_SIZE.to_owned(),
                value: raw_size,
                detail: "expected a positive integer; workers are not segmented".to_owned(),
            });
            return;
        }
    };
    let top_annotations: &BTreeMap<String, String> = annotations(w.top.as_ref());
    let topology = pick(keys::TOPOLOGY).or_else(|| top_annotations.get(keys::TOPOLOGY).cloned());
    let constraint = topology_from(
        topology.as_ref(),
        pick(keys::SEGMENT_TOPOLOGY_REQUIRED).as_ref(),
        pick(keys::SEGMENT_TOPOLOGY_PREFERRED).as_ref(),
        warnings,
        "the PyTorch worker segments",
    );
    // Both numbers are the user's: their sum can pass i32::MAX.
    let Some(segments) = worker_min.checked_add(size - 1).map(|n| n / size) else {
        warnings.push(Warning::InvalidValue {
            key: keys::SEGMENT_SIZE.to_owned(),
            value: raw_size,
            detail: format!(
                "segments of {size} over {worker_min} workers overflow the segment count; workers are not segmented"
            ),
        });
        return;
    };
    let requested = u64::try_from(shape.sub_groups.len())
        .ok()
        .zip(u64::try_from(segments).ok())
        .and_then(|(existing, segments)| existing.checked_add(segments))
        .unwrap_or(u64::MAX);
    let what = || {
        format!(
            "segments of {size} over the {worker_min} workers of PyTorchJob {}",
            name(w.top.as_ref())
        )
    };
    if !sub_groups_within_cap(requested, what, "workers are not segmented", warnings) {
        return;
    }
    let mut unplaced = worker_min;
    for k in 0..segments {
        let members = unplaced.min(size);
        unplaced -= members;
        shape.sub_groups.push(SubGroup {
            name: format!("worker-{k}"),
            min_member: Some(members),
            parent: Some("worker".to_owned()),
            topology_constraint: constraint.clone(),
        });
    }
    if !is_worker_pod {
        return;
    }
    match pod_labels
        .get(keys::KUBEFLOW_REPLICA_INDEX)
        .and_then(|i| i.parse::<i32>().ok())
    {
        Some(index) if index >= 0 => {
            // Workers above the minimum (elastic) join the last segment's parent, not a segment.
            let k = index / size;
            if k < segments {
                shape.pod_sub_group = Some(format!("worker-{k}"));
            }
        }
        _ => warnings.push(Warning::Workload {
            detail: format!(
                "worker pod lacks a valid {} label; placed in the worker sub-group",
                keys::KUBEFLOW_REPLICA_INDEX
            ),
        }),
    }
}
