//! `batch/v1` Job (CronJob is a wrapper: its Jobs follow these rules).
//!
//! KAI gives every pod of a Job its own group: a Job's pods are usually independent. Indexed Jobs are
//! the exception: their pods are the ranks of one distributed run, so they get one gang of
//! `min(parallelism, completions)`. Any Job opts in or out with `scheduling.run.ai/gang-scheduling`.

use super::common::{gang_annotation, uid};
use super::generic::{per_pod, whole};
use super::json::{clamp_i32, int_at, str_at};
use super::{Shape, Warning, Workload};

pub(crate) fn job(w: &Workload<'_>, warnings: &mut Vec<Warning>) -> Shape {
    let top = w.top.as_ref();
    let indexed = str_at(&top.data, &["spec", "completionMode"]) == Some("Indexed");
    if !gang_annotation(top, warnings).unwrap_or(indexed) {
        return per_pod(w, uid(top), top, "train");
    }
    let parallelism = int_at(&top.data, &["spec", "parallelism"]).unwrap_or(1).max(1);
    let completions = int_at(&top.data, &["spec", "completions"]).filter(|c| *c > 0);
    let min = completions.map_or(parallelism, |c| parallelism.min(c));
    let mut shape = whole(w, clamp_i32(min), "train");
    shape.gang = true;
    shape
}
