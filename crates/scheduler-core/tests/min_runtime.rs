//! Minimum runtimes count from when a gang last started: the API server's record of its pods'
//! bindings (`PodScheduled=True`'s time), or a later start annotation (KAI's). Nothing is written for
//! it: the decisions carry no annotation.

use std::time::Duration;

use kai_scheduler_core::model::GroupId;
use kai_scheduler_core::model::Millis;
use kai_scheduler_core::sim::{GangSpec, Sim, pod_update_of};

const MIN_RUNTIME: Duration = Duration::from_secs(5);
const MIN_RUNTIME_MS: Millis = 5_000;

/// One node of 2 GPUs, a queue, and preemption held for `MIN_RUNTIME` by default.
fn sim() -> Sim {
    let mut s = Sim::new();
    s.queue("dept", None, -1.0, -1.0, 1.0);
    s.queue("q0", Some("dept"), 2.0, -1.0, 1.0);
    s.config.plugins.minruntime.default_preempt_min_runtime = MIN_RUNTIME;
    s.node("n0", 64_000, 256, 2);
    s
}

fn train() -> GangSpec {
    GangSpec::new("train", "q0", 2).gpus(1).priority_class("train")
}

/// A gang that needs the node's GPUs and may preempt `train` for them.
fn inference(s: &Sim) -> GangSpec {
    GangSpec::new("inference", "q0", 2)
        .gpus(1)
        .priority_class("inference")
        .created(s.now)
}

fn group(s: &Sim, name: &str) -> GroupId {
    s.cluster
        .groups
        .iter()
        .find(|(_, g)| &*g.key.name == name)
        .map(|(i, _)| GroupId(i))
        .expect("the group exists")
}

/// Sets the binding time of every pod of `name`, as the API server would have recorded it.
fn bound_at(s: &mut Sim, name: &str, at: Option<Millis>) {
    let g = group(s, name);
    for t in s.cluster.group(g).tasks.clone() {
        let mut update = pod_update_of(&s.cluster, t);
        update.api.bound_at = at;
        s.cluster.apply_pod(update);
    }
}

/// The rounds run until `train` is evicted, at most `limit`; `None` if it never is.
fn rounds_until_evicted(s: &mut Sim, limit: usize) -> Option<usize> {
    (1..=limit).find(|_| {
        s.round();
        !s.evicted.is_empty()
    })
}

#[test]
fn a_gang_placed_here_is_held_for_its_minimum_runtime_from_its_bindings_with_no_annotation() {
    let mut s = sim();
    s.gang(train());
    s.round();
    assert_eq!(s.placement("train").values().sum::<usize>(), 2);
    let started = s.now - 1000;
    s.gang(inference(&s));
    // A round per second: evicted at the first round at or past the start plus the minimum runtime.
    let evicted_after = rounds_until_evicted(&mut s, 10).expect("evicted once its runtime is up");
    let at = s.now - 1000;
    assert_eq!(at, started + MIN_RUNTIME_MS, "after {evicted_after} rounds");
    assert_eq!(s.evicted.len(), 2);
}

#[test]
fn running_pods_count_from_their_recorded_bindings() {
    let mut s = sim();
    s.gang(train().running_on(&["n0", "n0"]));
    let bound = s.now - 2_000;
    bound_at(&mut s, "train", Some(bound));
    s.gang(inference(&s));
    rounds_until_evicted(&mut s, 10).expect("evicted once its runtime is up");
    assert_eq!(s.now - 1000, bound + MIN_RUNTIME_MS);
}

/// A gang restarted after its pods were evicted counts from its new pods' bindings, not from an
/// earlier start annotation (KAI's, or written before the restart).
#[test]
fn a_restarted_gang_counts_from_its_new_bindings_not_an_older_annotation() {
    let mut s = sim();
    s.gang(train().running_on(&["n0", "n0"]));
    let bound = s.now - 1_000;
    bound_at(&mut s, "train", Some(bound));
    let g = group(&s, "train");
    s.cluster.group_mut(g).last_start = Some(bound - 3_600_000);
    s.gang(inference(&s));
    rounds_until_evicted(&mut s, 10).expect("evicted once its runtime is up");
    assert_eq!(s.now - 1000, bound + MIN_RUNTIME_MS);
}

/// A start annotation later than the bindings (KAI wrote one) counts from itself.
#[test]
fn a_later_start_annotation_counts() {
    let mut s = sim();
    s.gang(train().running_on(&["n0", "n0"]));
    let long_ago = s.now - 3_600_000;
    bound_at(&mut s, "train", Some(long_ago));
    let annotated = s.now - 1_000;
    let g = group(&s, "train");
    s.cluster.group_mut(g).last_start = Some(annotated);
    s.gang(inference(&s));
    rounds_until_evicted(&mut s, 10).expect("evicted once its runtime is up");
    assert_eq!(s.now - 1000, annotated + MIN_RUNTIME_MS);
}

/// Pods bound long ago are not protected: the inference gang preempts at once.
#[test]
fn a_gang_past_its_minimum_runtime_is_preempted_at_once() {
    let mut s = sim();
    s.gang(train().running_on(&["n0", "n0"]));
    let long_ago = s.now - 3_600_000;
    bound_at(&mut s, "train", Some(long_ago));
    s.gang(inference(&s));
    assert_eq!(rounds_until_evicted(&mut s, 10), Some(1));
}

/// Running with no binding time (a kubelet that reports no `PodScheduled` time): the gang counts from
/// its pods' creation, the latest time known to be no later than their binding.
#[test]
fn a_running_gang_with_no_binding_time_counts_from_its_pods_creation() {
    let mut s = sim();
    let created = s.now - 2_000;
    s.gang(train().running_on(&["n0", "n0"]).created(created));
    bound_at(&mut s, "train", None);
    s.gang(inference(&s));
    rounds_until_evicted(&mut s, 10).expect("evicted once its runtime is up");
    assert_eq!(s.now - 1000, created + MIN_RUNTIME_MS);
}
