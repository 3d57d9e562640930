//! `leaderworkerset.x-k8s.io` LeaderWorkerSet: one gang per replica group,
//! `pg-<lws>-<uid>-group-<index>`, of `size` pods with sub-groups `leader` (1) and `workers`
//! (size − 1).
//!
//! With `startupPolicy: LeaderReady` the workers are created only once the leader runs, so until the
//! group's leader is bound the gang is the leader alone. That is decided from the leader pod's state,
//! not from which pod triggered the computation, so all pods of a group agree.
//!
//! Segments (`subGroupPolicy.subGroupSize`, else `kai.scheduler/segment-size` on the set or the worker
//! template) cut a group into `segment-<k>` sub-groups of that many pods carrying the segment topology;
//! with the `LeaderWorker` policy the leader belongs to `segment-0` (children `leader` and `workers`), with
//! `LeaderExcluded` it stands alone. More segments than [`MAX_SUB_GROUPS`](super::MAX_SUB_GROUPS) allows
//! are reported and not made.

use api::{SubGroup, keys, podgroup::TopologyConstraint};
use serde_json::Value;

use super::common::{annotations, name, sub_groups_within_cap, topology_from, uid};
use super::generic::whole;
use super::json::{at, clamp_i32, int_at, str_at, string_map_at};
use super::names::pg_name;
use super::{Shape, Warning, Workload};

pub(crate) fn lws(w: &Workload<'_>, warnings: &mut Vec<Warning>) -> Shape {
    let top = w.top.as_ref();
    let size = match int_at(&top.data, &["spec", "leaderWorkerTemplate", "size"]) {
        Some(s) if s >= 1 => clamp_i32(s),
        None => 1,
        Some(other) => {
            warnings.push(Warning::Workload {
                detail: format!("LeaderWorkerSet {} has size {other}; using 1", name(top)),
            });
            1
        }
    };
    let pod_labels = w.pod.metadata.labels.clone().unwrap_or_default();
    let group_index = pod_labels
        .get(keys::LWS_GROUP_INDEX)
        .filter(|g| g.parse::<u32>().is_ok());
    let worker_index = pod_labels
        .get(keys::LWS_WORKER_INDEX)
        .and_then(|i| i.parse::<i32>().ok());

    let mut shape = whole(w, size, "train");
    shape.gang = true;
    shape.name = pg_name(
        name(top),
        uid(top),
        group_index.map(|g| format!("group-{g}")).as_deref(),
    );

    let leader_ready = str_at(&top.data, &["spec", "startupPolicy"]) == Some("LeaderReady");
    if leader_ready && size > 1 && !leader_bound(w, group_index.map(String::as_str)) {
        shape.min_member = 1;
        shape.sub_groups = vec![sub("leader", 1, None, None)];
        shape.pod_sub_group = (worker_index == Some(0)).then(|| "leader".to_owned());
        return shape;
    }

    let is_leader = worker_index == Some(0);
    match segmentation(w, size, warnings) {
        None => {
            shape.sub_groups.push(sub("leader", 1, None, None));
            if size > 1 {
                shape.sub_groups.push(sub("workers", size - 1, None, None));
            }
            shape.pod_sub_group = worker_index.map(|i| if i == 0 { "leader" } else { "workers" }.to_owned());
        }
        Some(seg) => {
            let (sub_groups, pod_sub_group) = seg.build(size, worker_index, is_leader);
            shape.sub_groups = sub_groups;
            shape.pod_sub_group = pod_sub_group;
        }
    }
    shape
}

/// Whether the leader pod of this group is bound to a node.
fn leader_bound(w: &Workload<'_>, group_index: Option<&str>) -> bool {
    let pod_labels = w.pod.metadata.labels.clone().unwrap_or_default();
    if pod_labels.get(keys::LWS_WORKER_INDEX).map(String::as_str) == Some("0") {
        return w.pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
    }
    let top = w.top.as_ref();
    let namespace = top.metadata.namespace.as_deref().unwrap_or_default();
    let mut selector = vec![(keys::LWS_NAME, name(top)), (keys::LWS_WORKER_INDEX, "0")];
    if let Some(g) = group_index {
        selector.push((keys::LWS_GROUP_INDEX, g));
    }
    let leaders = w.view.pods(namespace, &selector);
    // A worker exists only once its leader ran; with no leader in the cache, trust the worker.
    leaders.is_empty()
        || leaders
            .iter()
            .any(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
}

struct Segmentation {
    size: i32,
    leader_excluded: bool,
    constraint: Option<TopologyConstraint>,
}

fn segmentation(w: &Workload<'_>, group_size: i32, warnings: &mut Vec<Warning>) -> Option<Segmentation> {
    let top = w.top.as_ref();
    let template = at(&top.data, &["spec", "leaderWorkerTemplate", "workerTemplate"])
        .cloned()
        .unwrap_or(Value::Null);
    let template_annotations = string_map_at(&template, &["metadata", "annotations"]);
    let set_annotations = annotations(top);
    let pick = |key: &str| {
        set_annotations
            .get(key)
            .or_else(|| template_annotations.get(key))
            .cloned()
    };
    let policy = at(&top.data, &["spec", "leaderWorkerTemplate", "subGroupPolicy"]);
    let size = match policy.and_then(|p| int_at(p, &["subGroupSize"])) {
        Some(s) => s,
        None => {
            let raw = pick(keys::SEGMENT_SIZE)?;
            if let Ok(s) = raw.trim().parse::<i64>() {
                s
            } else {
                warnings.push(Warning::InvalidValue {
                    key: keys::SEGMENT_SIZE.to_owned(),
                    value: raw,
                    detail: "expected an integer; no segments".to_owned(),
                });
                return None;
            }
        }
    };
    if size <= 1 || size > i64::from(group_size) {
        warnings.push(Warning::Workload {
            detail: format!(
                "segment size {size} must be above 1 and at most the group size {group_size}; no segments"
            ),
        });
        return None;
    }
    let size = clamp_i32(size);
    let leader_excluded = policy.and_then(|p| str_at(p, &["subGroupPolicyType"])) == Some("LeaderExcluded");
    if leader_excluded && (group_size - 1) % size != 0 {
        warnings.push(Warning::Workload {
            detail: format!("LeaderExcluded needs the {} workers to be a multiple of the segment size {size}; no segments", group_size - 1),
        });
        return None;
    }
    let segmentation = Segmentation {
        size,
        leader_excluded,
        constraint: None,
    };
    // Besides the segments: `leader`, and with LeaderWorker also `workers` (segment 0 always has one).
    let others = if leader_excluded { 1 } else { 2 };
    let requested = segmentation.segment_count(group_size).saturating_add(others);
    let what = || {
        format!(
            "segments of {size} in LeaderWorkerSet {} of size {group_size}",
            name(top)
        )
    };
    if !sub_groups_within_cap(requested, what, "no segments", warnings) {
        return None;
    }
    let constraint = topology_from(
        pick(keys::TOPOLOGY).as_ref(),
        pick(keys::SEGMENT_TOPOLOGY_REQUIRED).as_ref(),
        pick(keys::SEGMENT_TOPOLOGY_PREFERRED).as_ref(),
        warnings,
        "the LeaderWorkerSet segments",
    );
    Some(Segmentation {
        constraint,
        ..segmentation
    })
}

impl Segmentation {
    /// 1 when segment 0 keeps a place for the leader (LeaderWorker with workers not a multiple of the
    /// segment size), else 0: worker `index` sits at position `index - 1 + shift`, `size` per segment.
    fn leader_shift(&self, group_size: i32) -> i32 {
        let divisible = (group_size - 1) % self.size == 0;
        i32::from(!self.leader_excluded && !divisible)
    }

    /// How many segments the workers of a group of `group_size` (at least 2) fill, computed rather
    /// than counted: the size is the user's and may be i32::MAX.
    fn segment_count(&self, group_size: i32) -> u64 {
        // In i64 nothing here can overflow: every operand is a non-negative i32.
        let last_position = i64::from(group_size) - 2 + i64::from(self.leader_shift(group_size));
        u64::try_from(last_position / i64::from(self.size) + 1).unwrap_or(0)
    }

    /// Segment of pod `index` (0 is the leader).
    fn segment_of(&self, group_size: i32, index: i32) -> i32 {
        if self.leader_excluded {
            return (index - 1).max(0) / self.size;
        }
        let divisible = (group_size - 1) % self.size == 0;
        match index {
            0 => 0,
            i if divisible => (i - 1) / self.size,
            i => i / self.size,
        }
    }

    fn build(
        &self,
        group_size: i32,
        worker_index: Option<i32>,
        is_leader: bool,
    ) -> (Vec<SubGroup>, Option<String>) {
        // Workers per segment, segment by segment (never worker by worker): the caller checked the
        // segment count against the cap.
        let mut counts: Vec<i32> = Vec::new();
        let mut unplaced = group_size - 1;
        let mut room = self.size - self.leader_shift(group_size);
        while unplaced > 0 {
            let members = unplaced.min(room);
            counts.push(members);
            unplaced -= members;
            room = self.size;
        }
        let segment = |k: usize| format!("segment-{k}");
        let mut groups = Vec::new();
        if self.leader_excluded {
            groups.push(sub("leader", 1, None, None));
            for (k, n) in counts.iter().enumerate() {
                groups.push(sub(&segment(k), *n, None, self.constraint.clone()));
            }
        } else {
            for (k, n) in counts.iter().enumerate() {
                let members = if k == 0 { n.saturating_add(1) } else { *n };
                groups.push(sub(&segment(k), members, None, self.constraint.clone()));
            }
            groups.push(sub("leader", 1, Some("segment-0"), None));
            if counts.first().copied().unwrap_or(0) > 0 {
                groups.push(sub("workers", counts[0], Some("segment-0"), None));
            }
        }
        let pod = match worker_index {
            _ if is_leader => Some("leader".to_owned()),
            Some(i) if i > 0 => {
                let k = self.segment_of(group_size, i);
                Some(if k == 0 && !self.leader_excluded {
                    "workers".to_owned()
                } else {
                    format!("segment-{k}")
                })
            }
            _ => None,
        };
        (groups, pod)
    }
}

fn sub(name: &str, min: i32, parent: Option<&str>, constraint: Option<TopologyConstraint>) -> SubGroup {
    SubGroup {
        name: name.to_owned(),
        min_member: Some(min),
        parent: parent.map(str::to_owned),
        topology_constraint: constraint,
    }
}

#[cfg(test)]
mod tests {
    use super::Segmentation;

    /// The segments computed in one step hold exactly the workers `segment_of` puts in them one by one.
    #[test]
    fn computed_segments_agree_with_segment_of_every_worker() {
        for group_size in 2..=24 {
            for size in 2..=group_size {
                for leader_excluded in [false, true] {
                    if leader_excluded && (group_size - 1) % size != 0 {
                        continue;
                    }
                    let seg = Segmentation {
                        size,
                        leader_excluded,
                        constraint: None,
                    };
                    let mut by_worker: Vec<i32> = Vec::new();
                    for index in 1..group_size {
                        let k = usize::try_from(seg.segment_of(group_size, index)).expect("non-negative");
                        if by_worker.len() <= k {
                            by_worker.resize(k + 1, 0);
                        }
                        by_worker[k] += 1;
                    }
                    let case = format!("group {group_size}, segments of {size}, excluded {leader_excluded}");
                    let (groups, _) = seg.build(group_size, None, false);
                    let mut computed: Vec<i32> = groups
                        .iter()
                        .filter(|g| g.name.starts_with("segment-"))
                        .filter_map(|g| g.min_member)
                        .collect();
                    if !leader_excluded {
                        computed[0] -= 1; // segment-0 counts the leader too
                    }
                    assert_eq!(computed, by_worker, "{case}");
                    assert_eq!(
                        seg.segment_count(group_size),
                        u64::try_from(by_worker.len()).expect("small"),
                        "{case}"
                    );
                }
            }
        }
    }
}
