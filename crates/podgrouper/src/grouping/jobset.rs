//! `jobset.x-k8s.io` JobSet (and Kubeflow TrainJob, whose JobSet this groups).
//!
//! Replicated jobs started one after another (`startupPolicyOrder: InOrder`, KAI's reading of an absent
//! policy, or any `dependsOn`) cannot form one gang: each gets its own group
//! `pg-<jobset>-<uid>-<replicatedJob>`. With `AnyOrder` and no dependencies all pods exist together:
//! one group `pg-<jobset>-<uid>` with a sub-group per replicated job. A replicated job counts
//! `replicas × min(parallelism, completions)` pods.

use api::{SubGroup, keys};
use serde_json::Value;

use super::common::{name, uid};
use super::generic::whole;
use super::json::{at, clamp_i32, int_at, str_at};
use super::names::pg_name;
use super::{Shape, Warning, Workload};

pub(crate) fn jobset(w: &Workload<'_>, warnings: &mut Vec<Warning>) -> Shape {
    let top = w.top.as_ref();
    let jobs: &[Value] = at(&top.data, &["spec", "replicatedJobs"])
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let any_order = str_at(&top.data, &["spec", "startupPolicy", "startupPolicyOrder"]) == Some("AnyOrder");
    let depends = jobs.iter().any(|j| {
        at(j, &["dependsOn"])
            .and_then(Value::as_array)
            .is_some_and(|d| !d.is_empty())
    });
    let pod_job = w
        .pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::JOBSET_REPLICATED_JOB));

    if any_order && !depends {
        // Saturating: each count is the user's, and a sum past i64 must not panic.
        let total: i64 = jobs.iter().map(pods_of).fold(0, i64::saturating_add);
        let mut shape = whole(w, clamp_i32(total.max(1)), "train");
        shape.gang = true;
        shape.sub_groups = jobs
            .iter()
            .filter_map(|j| {
                Some(SubGroup {
                    name: str_at(j, &["name"])?.to_owned(),
                    min_member: Some(clamp_i32(pods_of(j))),
                    ..SubGroup::default()
                })
            })
            .collect();
        shape.pod_sub_group = pod_job
            .filter(|p| shape.sub_groups.iter().any(|s| &s.name == *p))
            .cloned();
        return shape;
    }

    let Some(job_name) = pod_job else {
        warnings.push(Warning::Workload {
            detail: format!(
                "pod of JobSet {} lacks the {} label; grouped with the whole JobSet, minMember 1",
                name(top),
                keys::JOBSET_REPLICATED_JOB
            ),
        });
        return whole(w, 1, "train");
    };
    let min = jobs
        .iter()
        .find(|j| str_at(j, &["name"]) == Some(job_name.as_str()))
        .map_or(1, pods_of);
    let mut shape = whole(w, clamp_i32(min.max(1)), "train");
    shape.name = pg_name(name(top), uid(top), Some(job_name));
    shape.gang = true;
    shape
}

/// Pods a replicated job runs at once: `replicas × min(parallelism, completions)`, each at least 1.
fn pods_of(job: &Value) -> i64 {
    let replicas = int_at(job, &["replicas"]).filter(|r| *r > 0).unwrap_or(1);
    let parallelism = int_at(job, &["template", "spec", "parallelism"])
        .filter(|p| *p > 0)
        .unwrap_or(1);
    let per_job = match int_at(job, &["template", "spec", "completions"]) {
        Some(c) if c > 0 && c < parallelism => c,
        _ => parallelism,
    };
    replicas.saturating_mul(per_job)
}
