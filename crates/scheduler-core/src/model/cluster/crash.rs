//! What a scheduling cycle that panicked leaves behind, and how the model recovers from it.
//!
//! Defence in depth: no input should make a cycle panic, but if one does, scheduling must go on for
//! everyone else. A cycle records which gang it works on ([`Cluster::attempting`]) and the placement
//! each task had before the cycle first changed it ([`Cluster::crash_undo`]); both live in the model,
//! so they survive the unwind. Recovery puts those placements back, recounts every node from the tasks
//! alone (the panic may have struck half way through an update) and sets the gang aside with a
//! blocking problem until its PodGroup changes.

use super::Cluster;
use super::placement::PlacementUndo;
use crate::model::group::GroupProblem;
use crate::model::ids::{GroupId, TaskId};
use crate::model::resources::Resources;

impl Cluster {
    /// Remembers a task's placement from before the running cycle first changed it.
    pub fn record_first_change(&mut self, undo: PlacementUndo) {
        self.crash_undo.push(undo);
    }

    /// Forgets what [`Self::record_first_change`] kept: the cycle completed.
    pub fn cycle_completed(&mut self) {
        self.crash_undo.clear();
        self.attempting = None;
    }

    /// Undoes what a cycle that panicked changed, recounts node accounting and sets aside the gang it
    /// was working on (returned) with [`GroupProblem::SchedulingCrashed`].
    pub fn recover_from_crash(&mut self, message: &str) -> Option<GroupId> {
        let undo = std::mem::take(&mut self.crash_undo);
        for u in undo.into_iter().rev() {
            if let Some(task) = self.tasks.get_mut(u.task.0) {
                // Directly, not through `set_assumed`: the accounting it would adjust is recounted below.
                task.assumed = u.assumed;
                task.gpu_groups = u.gpu_groups;
            }
        }
        self.recount();
        self.no_fit_memo.clear();
        self.quiet = None;
        self.epochs.changed();
        self.epochs.capacity_changed();
        let culprit = self
            .attempting
            .take()
            .filter(|g| self.groups.get(g.0).is_some())?;
        let problem = GroupProblem::SchedulingCrashed(message.to_owned());
        let group = self.group_mut(culprit);
        if !group.problems.contains(&problem) {
            group.problems.push(problem);
            group.problems.sort();
        }
        Some(culprit)
    }

    /// Rebuilds every node's accounting (used, releasing, nominated, its task list and shared devices)
    /// from the tasks alone.
    pub fn recount(&mut self) {
        self.rules.clear_counts();
        self.volumes.clear_counts();
        let node_ids: Vec<u32> = self.nodes.iter().map(|(i, _)| i).collect();
        for i in node_ids {
            if let Some(node) = self.nodes.get_mut(i) {
                node.used = Resources::ZERO;
                node.releasing = Resources::ZERO;
                node.nominated = Resources::ZERO;
                node.tasks.clear();
                node.shared_gpus.clear();
                node.host_ports.clear();
            }
        }
        let task_ids: Vec<TaskId> = self.tasks.iter().map(|(i, _)| TaskId(i)).collect();
        for id in task_ids {
            let Some(task) = self.tasks.get(id.0) else {
                continue;
            };
            let (status, node) = self.effective(task);
            if let Some(task) = self.tasks.get_mut(id.0) {
                task.status = status;
                task.node = node;
            }
            self.contribute(id, 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::model::task::Assumed;
    use crate::model::{GroupId, NodeId, TaskId, TaskStatus};
    use crate::sim::{GangSpec, Sim};

    fn sim() -> Sim {
        let mut s = Sim::new();
        s.queue("default-parent-queue", None, 0.0, -1.0, 1.0);
        s.queue("q", Some("default-parent-queue"), -1.0, -1.0, 1.0);
        s.nodes("gpu", 2, 2);
        s
    }

    #[test]
    fn recount_rebuilds_accounting_that_a_crash_left_half_updated() {
        let mut s = sim();
        s.gang(GangSpec::new("a", "q", 2).gpus(1));
        s.rounds(2);
        assert_eq!(s.count("a", TaskStatus::Running), 2);
        s.cluster.check_invariants().expect("consistent before");
        let node = s.cluster.nodes.iter().map(|(i, _)| i).next().expect("a node");
        // What a panic between two accounting steps could leave.
        if let Some(n) = s.cluster.nodes.get_mut(node) {
            n.used.0[0] += 12_345;
            n.tasks.clear();
        }
        assert!(s.cluster.check_invariants().is_err());
        s.cluster.recount();
        s.cluster.check_invariants().expect("consistent after a recount");
    }

    #[test]
    fn recovery_restores_placements_from_before_the_cycle_and_sets_the_gang_aside() {
        let mut s = sim();
        s.gang(GangSpec::new("a", "q", 1).gpus(1));
        let root = GroupId(s.cluster.groups.iter().map(|(i, _)| i).next().expect("group"));
        let task = TaskId(s.cluster.tasks.iter().map(|(i, _)| i).next().expect("task"));
        let node = NodeId(s.cluster.nodes.iter().map(|(i, _)| i).next().expect("node"));
        // A cycle's first change, then a panic before it closed.
        let undo = s.cluster.set_assumed(task, Assumed::Binding { node }, None);
        s.cluster.record_first_change(undo);
        s.cluster.attempting = Some(root);
        let culprit = s.cluster.recover_from_crash("index out of bounds");
        assert_eq!(culprit, Some(root));
        assert_eq!(
            s.cluster.task(task).assumed,
            Assumed::None,
            "the decision that was never sent is gone"
        );
        s.cluster.check_invariants().expect("consistent");
        let problems = &s.cluster.group(root).problems;
        assert!(
            problems
                .iter()
                .any(|p| p.is_blocking() && p.to_string().contains("index out of bounds")),
            "{problems:?}"
        );
    }
}
