//! `apps/v1` Deployment, ReplicaSet and StatefulSet.
//!
//! A Deployment's replicas are independent serving pods: one group per pod, owned by the pod, at
//! `inference` priority (KAI). A standalone ReplicaSet or StatefulSet gets one group of minMember 1
//! (the rest are elastic). `scheduling.run.ai/gang-scheduling: "true"` makes any of them one gang of
//! `spec.replicas`.

use super::common::{gang_annotation, uid};
use super::generic::{per_pod, whole};
use super::json::{clamp_i32, int_at};
use super::names::pod_as_object;
use super::{Shape, Warning, Workload};

pub(crate) fn deployment(w: &Workload<'_>, warnings: &mut Vec<Warning>) -> Shape {
    let top = w.top.as_ref();
    if gang_annotation(top, warnings) == Some(true) {
        return gang(w, "inference");
    }
    let pod = pod_as_object(w.pod);
    per_pod(w, uid(&pod), &pod, "inference")
}

pub(crate) fn set(w: &Workload<'_>, warnings: &mut Vec<Warning>) -> Shape {
    if gang_annotation(w.top.as_ref(), warnings) == Some(true) {
        return gang(w, "train");
    }
    whole(w, 1, "train")
}

fn gang(w: &Workload<'_>, default_priority: &'static str) -> Shape {
    let replicas = int_at(&w.top.data, &["spec", "replicas"]).unwrap_or(1).max(1);
    let mut shape = whole(w, clamp_i32(replicas), default_priority);
    shape.gang = true;
    shape
}
