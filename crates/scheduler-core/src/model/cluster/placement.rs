//! The placement primitive: a task's effective status and node (its API view with the assumed
//! placement on top) and its contribution to its node's accounting. Every change of placement goes
//! through [`Cluster::set_assumed`] so the accounting stays exact.

use std::sync::Arc;

use super::Cluster;
use crate::model::ids::{NodeId, TaskId};
use crate::model::node::PortUse;
use crate::model::pod_rules::PodFacts;
use crate::model::task::{Assumed, BindFailure, Task, TaskStatus};
use crate::model::time::Millis;
use crate::model::volumes::NodeRef;

/// The previous placement of a task, returned by [`Cluster::set_assumed`] so it can be undone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementUndo {
    /// Task.
    pub task: TaskId,
    /// Assumed placement before.
    pub assumed: Assumed,
    /// Shared-GPU groups before.
    pub gpu_groups: Vec<Arc<str>>,
}

impl Cluster {
    /// The effective status and node of a task from its API view and assumption.
    pub(super) fn effective(&self, task: &Task) -> (TaskStatus, Option<NodeId>) {
        let api_node = task.api.node_name.as_deref().and_then(|n| self.node_id(n));
        match task.assumed {
            Assumed::None => {
                let node = if task.api.status.holds_node() {
                    api_node
                } else {
                    None
                };
                (task.api.status, node)
            }
            Assumed::Binding { node } => (TaskStatus::Binding, Some(node)),
            Assumed::Pipelined { node, .. } => (TaskStatus::Pipelined, Some(node)),
            Assumed::Evicting => (TaskStatus::Releasing, api_node),
        }
    }

    /// Adds (`sign = 1`) or removes (`-1`) a task's contribution to its node.
    pub(super) fn contribute(&mut self, id: TaskId, sign: i64) {
        let task = self.tasks.get(id.0).expect("invariant: live task");
        let (Some(node_id), status) = (task.node, task.status) else {
            return;
        };
        let request = task.request.times(sign);
        let gpu = task.gpu;
        let groups = Self::device_groups(task);
        let reservation = task.reservation_for.clone();
        let (uid, device) = (task.uid.clone(), task.gpu_device.clone());
        let (namespace, labels, rules_id) = (task.namespace.clone(), task.labels.clone(), task.rules);
        let node = self
            .nodes
            .get_mut(node_id.0)
            .expect("invariant: task nodes are live");
        match status {
            TaskStatus::Pipelined => node.nominated.add(&request),
            s if s.holds_node() => {
                node.used.add(&request);
                if s == TaskStatus::Releasing {
                    node.releasing.add(&request);
                }
            }
            _ => return,
        }
        if sign > 0 {
            node.tasks.push(id);
        } else if let Some(pos) = node.tasks.iter().position(|t| *t == id) {
            node.tasks.swap_remove(pos);
        }
        let releasing = status == TaskStatus::Releasing;
        let rules = self.rules.rules(rules_id);
        if sign > 0 {
            node.host_ports
                .extend(rules.host_ports.iter().map(|port| PortUse {
                    port: port.clone(),
                    task: id,
                    releasing,
                }));
        } else if !rules.host_ports.is_empty() {
            node.host_ports.retain(|p| p.task != id);
        }
        let facts = PodFacts {
            namespace: &namespace,
            labels: &labels,
            rules: rules_id,
        };
        let sign32 = if sign > 0 { 1 } else { -1 };
        if self
            .rules
            .contribute(facts, node_id, &node.labels, releasing, sign32)
            && sign > 0
        {
            // A pod some term selects arrived: a pod waiting for its affinity may fit now, so gangs
            // remembered as not fitting are tried again.
            self.epochs.capacity_changed();
        }
        if gpu.is_shared() {
            let milli = Self::share_milli(gpu, node);
            for group in &groups {
                Self::contribute_shared(node, group, milli, status, sign);
            }
        }
        if let Some(group) = reservation {
            Self::contribute_reservation(node, &group, uid, device, status.holds_node() && sign > 0);
        }
        let task = self.tasks.get(id.0).expect("invariant: live task");
        if !task.claims.is_empty() {
            let node = self.nodes.get(node_id.0).expect("invariant: task nodes are live");
            let at = NodeRef {
                id: node_id,
                name: &node.name,
                labels: &node.labels,
            };
            self.volumes.contribute(&task.namespace, &task.claims, at, sign32);
        }
    }

    /// Recomputes a task's effective placement after its API view or assumption changed.
    pub(super) fn refresh(&mut self, id: TaskId) {
        self.contribute(id, -1);
        let task = self.tasks.get(id.0).expect("invariant: live task");
        let (status, node) = self.effective(task);
        let released = task.status.holds_node() && !status.holds_node()
            || (task.status != TaskStatus::Releasing && status == TaskStatus::Releasing);
        let task = self.tasks.get_mut(id.0).expect("invariant: live task");
        task.status = status;
        task.node = node;
        self.contribute(id, 1);
        if released {
            self.epochs.capacity_changed();
        }
    }

    /// Sets a task's assumed placement (and shared-GPU groups), keeping node accounting exact.
    /// Returns what to pass to [`Self::undo_placement`].
    pub fn set_assumed(
        &mut self,
        id: TaskId,
        assumed: Assumed,
        gpu_groups: Option<Vec<Arc<str>>>,
    ) -> PlacementUndo {
        self.contribute(id, -1);
        let task = self.tasks.get_mut(id.0).expect("invariant: live task");
        let undo = PlacementUndo {
            task: id,
            assumed: task.assumed.clone(),
            gpu_groups: task.gpu_groups.clone(),
        };
        task.assumed = assumed;
        if let Some(groups) = gpu_groups {
            task.gpu_groups = groups;
        }
        let task = self.tasks.get(id.0).expect("invariant: live task");
        let (status, node) = self.effective(task);
        let task = self.tasks.get_mut(id.0).expect("invariant: live task");
        task.status = status;
        task.node = node;
        self.contribute(id, 1);
        undo
    }

    /// Restores a placement saved by [`Self::set_assumed`].
    pub fn undo_placement(&mut self, undo: PlacementUndo) {
        if self.tasks.get(undo.task.0).is_none() {
            return;
        }
        let _ = self.set_assumed(undo.task, undo.assumed, Some(undo.gpu_groups));
    }

    /// Drops the assumption on a task (a bind or eviction failed, or a reservation lapsed).
    pub fn clear_assumed(&mut self, id: TaskId) {
        if self.tasks.get(id.0).is_some_and(|t| t.assumed != Assumed::None) {
            let groups = self.tasks.get(id.0).map(|t| t.gpu_groups.clone());
            let _ = self.set_assumed(id, Assumed::None, groups);
            self.epochs.capacity_changed();
        }
    }

    /// A bind failed: the assumption goes, and the pod (with its gang) is not tried again before its
    /// back-off ends; the reason is kept for its gang's status.
    pub fn bind_failed(&mut self, id: TaskId, reason: Arc<str>, now: Millis) {
        self.clear_assumed(id);
        let Some(task) = self.tasks.get_mut(id.0) else {
            return;
        };
        task.bind_failure = Some(BindFailure::after(task.bind_failure.as_ref(), reason, now));
        let group = task.group;
        self.epochs.changed();
        if let Some(g) = group {
            self.group_mut(g).version += 1;
        }
    }

    /// Drops every assumption (after losing leadership: a new term starts from what the API says).
    pub fn clear_all_assumed(&mut self) {
        let ids: Vec<TaskId> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.assumed != Assumed::None)
            .map(|(i, _)| TaskId(i))
            .collect();
        for t in ids {
            self.clear_assumed(t);
        }
        self.no_fit_memo.clear();
        self.quiet = None;
    }
}
