//! Invariants: node accounting recomputed from scratch, from the tasks alone, and compared with the
//! incrementally kept one.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::Cluster;
use crate::model::ids::{GroupId, NodeId, TaskId};
use crate::model::node::Node;
use crate::model::resources::{GPU, Resources};
use crate::model::task::TaskStatus;
use crate::model::volumes::ClaimKey;

impl Cluster {
    /// Recomputes node accounting from the tasks and compares. Used by tests and debug checks.
    ///
    /// # Errors
    /// A description of the first mismatch.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut expected: HashMap<NodeId, (Resources, Resources, Resources)> = HashMap::new();
        // Shared devices recounted on one empty scratch node per node, through the same device
        // accounting the model uses, then summed device by device below.
        let mut devices: HashMap<NodeId, Node> = HashMap::new();
        for (i, task) in self.tasks.iter() {
            let (status, node) = self.effective(task);
            if (status, node) != (task.status, task.node) {
                return Err(format!(
                    "task {} effective {:?}/{:?} stored {:?}/{:?}",
                    task.key(),
                    status,
                    node,
                    task.status,
                    task.node
                ));
            }
            let Some(node) = task.node else { continue };
            let e = expected.entry(node).or_default();
            match status {
                TaskStatus::Pipelined => e.2.add(&task.request),
                s if s.holds_node() => {
                    e.0.add(&task.request);
                    if s == TaskStatus::Releasing {
                        e.1.add(&task.request);
                    }
                }
                _ => continue,
            }
            if !self.node(node).tasks.contains(&TaskId(i)) {
                return Err(format!(
                    "task {} missing from node {}",
                    task.key(),
                    self.node(node).name
                ));
            }
            if task.gpu.is_shared() {
                let milli = Self::share_milli(task.gpu, self.node(node));
                let scratch = devices.entry(node).or_insert_with(scratch_node);
                for g in &Self::device_groups(task) {
                    Self::contribute_shared(scratch, g, milli, status, 1);
                }
            }
        }
        for (_, task) in self.tasks.iter() {
            let (Some(node), Some(group)) = (task.node, task.reservation_for.clone()) else {
                continue;
            };
            if !task.status.holds_node() {
                continue;
            }
            Self::contribute_reservation(
                devices.entry(node).or_insert_with(scratch_node),
                &group,
                task.uid.clone(),
                task.gpu_device.clone(),
                true,
            );
        }
        for (node, scratch) in &devices {
            for d in &scratch.shared_gpus {
                let (u, r, n) = d.device_contribution();
                let e = expected.entry(*node).or_default();
                e.0.0[GPU] = e.0.0[GPU].saturating_add(u);
                e.1.0[GPU] = e.1.0[GPU].saturating_add(r);
                e.2.0[GPU] = e.2.0[GPU].saturating_add(n);
            }
        }
        for (i, node) in self.nodes.iter() {
            let e = expected.remove(&NodeId(i)).unwrap_or_default();
            if (node.used, node.releasing, node.nominated) != e {
                return Err(format!(
                    "node {}: used/releasing/nominated {:?}/{:?}/{:?}, tasks say {:?}/{:?}/{:?}",
                    node.name, node.used, node.releasing, node.nominated, e.0, e.1, e.2
                ));
            }
        }
        self.check_rule_counts()?;
        self.check_volume_counts()?;
        self.check_labels()?;
        for (i, group) in self.groups.iter() {
            for t in &group.tasks {
                if self.task(*t).group != Some(GroupId(i)) {
                    return Err(format!(
                        "group {} lists task {} that points elsewhere",
                        group.key,
                        self.task(*t).key()
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Cluster {
    /// Every pod's labels are the label book's shared copy, and the book holds no set no pod carries.
    fn check_labels(&self) -> Result<(), String> {
        let mut carried = HashSet::new();
        for (_, task) in self.tasks.iter() {
            if !self.labels.holds(&task.labels) {
                return Err(format!(
                    "task {}: labels are not the book's shared copy",
                    task.key()
                ));
            }
            carried.insert(Arc::as_ptr(&task.labels));
        }
        // A set no pod carries stays only while something else (a clone of the model) holds it.
        let orphans = self.labels.orphans(&carried);
        if orphans > 0 {
            return Err(format!(
                "the label book holds {orphans} sets no pod carries and nothing else holds"
            ));
        }
        Ok(())
    }

    /// Claim use per claim and per node recomputed from the placed pods and compared, with the
    /// consistency of the volume choices.
    fn check_volume_counts(&self) -> Result<(), String> {
        let mut placed_users: HashMap<ClaimKey, u32> = HashMap::new();
        let mut on_node: HashMap<NodeId, HashMap<ClaimKey, u32>> = HashMap::new();
        for (_, task) in self.tasks.iter() {
            let Some(node) = task.node else { continue };
            if !(task.status.holds_node() || task.status == TaskStatus::Pipelined) {
                continue;
            }
            for c in task.claims.iter() {
                let key = ClaimKey {
                    namespace: task.namespace.clone(),
                    name: c.name.clone(),
                };
                *placed_users.entry(key.clone()).or_default() += 1;
                *on_node.entry(node).or_default().entry(key).or_default() += 1;
            }
        }
        self.volumes.check_counts(&placed_users, &on_node)
    }

    /// Pod-rule counts and host ports recomputed from the placed pods and compared.
    fn check_rule_counts(&self) -> Result<(), String> {
        let mut fresh = self.clone();
        fresh.recount_rules();
        for (id, term) in self.rules.live_terms() {
            let want = fresh.rules.term(id);
            for (what, have, want) in [
                ("selected", &term.selected, &want.selected),
                ("carriers", &term.carriers, &want.carriers),
            ] {
                if have.per_node != want.per_node
                    || have.per_domain != want.per_domain
                    || have.in_domains != want.in_domains
                {
                    return Err(format!(
                        "term {:?} {what} counts {:?}, pods say {:?}",
                        term.term, have.per_domain, want.per_domain
                    ));
                }
            }
        }
        for (i, node) in self.nodes.iter() {
            let mut have: Vec<_> = node
                .host_ports
                .iter()
                .map(|p| (p.task, p.port.clone(), p.releasing))
                .collect();
            let mut want: Vec<_> = node
                .tasks
                .iter()
                .flat_map(|t| {
                    let task = self.task(*t);
                    let releasing = task.status == TaskStatus::Releasing;
                    self.rules
                        .rules(task.rules)
                        .host_ports
                        .iter()
                        .map(move |p| (*t, p.clone(), releasing))
                })
                .collect();
            have.sort();
            want.sort();
            if have != want {
                return Err(format!(
                    "node {} host ports {have:?}, pods say {want:?}",
                    NodeId(i).0
                ));
            }
        }
        Ok(())
    }
}

/// An empty node to recount shared devices on.
fn scratch_node() -> Node {
    Node::new("scratch", Resources::ZERO)
}
