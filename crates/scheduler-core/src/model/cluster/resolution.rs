//! Resolution of references: a gang's queue, priority class and topology, and a queue's parent, are
//! names that may point nowhere (yet). They are re-resolved whenever what they name changes, and what
//! does not resolve is recorded as a problem on the gang or queue.

use super::Cluster;
use crate::model::group::{GroupProblem, TopologyRequirement, TopologySpec};
use crate::model::ids::{GroupId, QueueId};
use crate::model::queue::QueueProblem;

impl Cluster {
    pub(super) fn resolve_queues(&mut self) {
        self.epochs.capacity_changed();
        let ids: Vec<QueueId> = self.queues.iter().map(|(i, _)| QueueId(i)).collect();
        for id in &ids {
            let q = self.queues.get_mut(id.0).expect("invariant");
            q.children.clear();
            q.parent = None;
            q.problems.retain(|p| matches!(p, QueueProblem::BadDuration(_)));
        }
        for id in &ids {
            let parent_name = self.queue(*id).parent_name.clone();
            if let Some(parent_name) = parent_name.filter(|p| !p.is_empty()) {
                match self.queue_id(&parent_name) {
                    Some(p) if p != *id => {
                        self.queues.get_mut(id.0).expect("invariant").parent = Some(p);
                    }
                    _ => self
                        .queues
                        .get_mut(id.0)
                        .expect("invariant")
                        .problems
                        .push(QueueProblem::ParentNotFound(parent_name.to_string())),
                }
            }
        }
        // Cycles: walk up from each queue; a queue whose chain revisits a queue is in or under a cycle.
        for id in &ids {
            let mut path = vec![*id];
            let mut cur = self.queue(*id).parent;
            while let Some(p) = cur {
                if path.contains(&p) {
                    let names: Vec<String> = path.iter().map(|q| self.queue(*q).name.to_string()).collect();
                    let cycle = format!("{} -> {}", names.join(" -> "), self.queue(p).name);
                    self.queues
                        .get_mut(id.0)
                        .expect("invariant")
                        .problems
                        .push(QueueProblem::Cycle(cycle));
                    break;
                }
                path.push(p);
                cur = self.queue(p).parent;
            }
        }
        for id in &ids {
            let q = self.queue(*id);
            if q.problems.is_empty()
                && let Some(p) = q.parent
                && self.queue(p).problems.is_empty()
            {
                self.queues.get_mut(p.0).expect("invariant").children.push(*id);
            }
        }
        // A queue under an invalid ancestor is invalid too.
        for id in &ids {
            let mut cur = self.queue(*id).parent;
            let mut hops = 0;
            while let Some(p) = cur {
                hops += 1;
                if hops > ids.len() {
                    break;
                }
                if !self.queue(p).problems.is_empty() && self.queue(*id).problems.is_empty() {
                    let why = format!("ancestor queue {:?} is invalid", self.queue(p).name);
                    self.queues
                        .get_mut(id.0)
                        .expect("invariant")
                        .problems
                        .push(QueueProblem::ParentNotFound(why));
                    break;
                }
                cur = self.queue(p).parent;
            }
        }
        self.resolve_all_groups();
    }

    pub(super) fn resolve_all_groups(&mut self) {
        self.epochs.capacity_changed();
        let ids: Vec<GroupId> = self.groups.iter().map(|(i, _)| GroupId(i)).collect();
        for id in ids {
            self.resolve_group(id);
        }
    }

    /// Resolves a gang's queue, priority and topology against the current objects, recording problems.
    pub(super) fn resolve_group(&mut self, id: GroupId) {
        let group = self.group(id);
        let mut problems: Vec<GroupProblem> = group
            .problems
            .iter()
            .filter(|p| {
                !matches!(
                    p,
                    GroupProblem::QueueNotFound(_)
                        | GroupProblem::QueueNotLeaf(_)
                        | GroupProblem::QueueInvalid(_)
                        | GroupProblem::PriorityClassNotFound(_)
                        | GroupProblem::Topology(_)
                )
            })
            .cloned()
            .collect();
        // (ParentNotFound and Cycle are re-derived by every session's hierarchy index.)
        let queue = match self.queue_id(&group.queue_name) {
            None => {
                problems.push(GroupProblem::QueueNotFound(group.queue_name.to_string()));
                None
            }
            Some(q) if !self.queue(q).problems.is_empty() => {
                let why = self
                    .queue(q)
                    .problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                problems.push(GroupProblem::QueueInvalid(format!(
                    "{:?}: {why}",
                    group.queue_name
                )));
                None
            }
            Some(q) if !self.queue(q).is_leaf() => {
                problems.push(GroupProblem::QueueNotLeaf(group.queue_name.to_string()));
                None
            }
            Some(q) => Some(q),
        };
        let default_priority = self
            .global_default_priority
            .as_ref()
            .map_or(api::keys::DEFAULT_PRIORITY, |d| d.1);
        let priority = match (&group.priority_class, group.explicit_priority) {
            (Some(pc), explicit) => match self.priority_class(pc) {
                Some(v) => v,
                None => {
                    problems.push(GroupProblem::PriorityClassNotFound(pc.to_string()));
                    explicit.unwrap_or(default_priority)
                }
            },
            (None, Some(p)) => p,
            (None, None) => default_priority,
        };
        let preemptible = group
            .explicit_preemptible
            .unwrap_or(priority < api::keys::NON_PREEMPTIBLE_PRIORITY);
        let topology = group
            .topology_spec
            .as_ref()
            .map(|spec| self.resolve_topology(spec));
        let subgroup_topologies: Vec<Option<Result<TopologyRequirement, String>>> = group
            .subgroup_topology_specs
            .iter()
            .map(|spec| spec.as_ref().map(|s| self.resolve_topology(s)))
            .collect();
        let group = self.group_mut(id);
        group.queue = queue;
        group.priority = priority;
        group.preemptible = preemptible;
        group.topology = match topology {
            Some(Ok(t)) => Some(t),
            Some(Err(why)) => {
                problems.push(GroupProblem::Topology(why));
                None
            }
            None => None,
        };
        for (i, t) in subgroup_topologies.into_iter().enumerate() {
            if let Some(sub) = group.subgroups.get_mut(i) {
                sub.topology = match t {
                    Some(Ok(t)) => Some(t),
                    Some(Err(why)) => {
                        problems.push(GroupProblem::Topology(format!("sub-group {:?}: {why}", sub.name)));
                        None
                    }
                    None => None,
                };
            }
        }
        problems.sort();
        problems.dedup();
        group.problems = problems;
        group.version += 1;
    }

    /// Resolves (topology name, required level, preferred level). A level may be given as a level's
    /// node label key or as its last path segment (`rack` for `example.com/rack`).
    fn resolve_topology(&self, spec: &TopologySpec) -> Result<TopologyRequirement, String> {
        let (name, required, preferred) = spec;
        let levels = self
            .topology(name)
            .ok_or_else(|| format!("topology {name:?} does not exist"))?
            .to_vec();
        let find = |level: &Option<String>| -> Result<Option<usize>, String> {
            let Some(level) = level.as_deref().filter(|l| !l.is_empty()) else {
                return Ok(None);
            };
            levels
                .iter()
                .position(|l| l == level || l.rsplit(['/', '.']).next() == Some(level))
                .map(Some)
                .ok_or_else(|| {
                    format!(
                        "level {level:?} is not a level of topology {name:?} ({})",
                        levels.join(", ")
                    )
                })
        };
        Ok(TopologyRequirement {
            topology: name.as_str().into(),
            required: find(required)?,
            preferred: find(preferred)?,
            levels,
        })
    }
}
