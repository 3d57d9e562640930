//! The cluster model: arenas of nodes, tasks, gangs and queues with their indexes, kept up to date
//! incrementally from watch events, and the one placement primitive that keeps node accounting exact.
//!
//! Invariants (checked by [`Cluster::check_invariants`] in tests):
//! - a node's `used`, `releasing` and `nominated` are exactly the sums over the tasks placed on it, with
//!   each shared GPU device counted once as 1000 milli-GPUs;
//! - a task's effective status and node are its API view with its assumed placement on top;
//! - every task naming a gang that exists is listed in that gang's `tasks`.

use std::collections::HashMap;
use std::sync::Arc;

use super::constraints::{Constraints, ConstraintsTable};
use super::group::{Group, GroupKey, GroupProblem, TopologyRequirement};
use super::ids::{Arena, GroupId, NodeId, QueueId, TaskId};
use super::node::{Node, SharedGpu};
use super::queue::{Queue, QueueProblem};
use super::resources::{GPU, ResourceNames, Resources};
use super::task::{ApiView, Assumed, GpuRequest, Task, TaskStatus};
use super::time::Millis;

/// Counters that tell whether anything that could change a scheduling outcome happened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Epochs {
    /// Bumped when capacity may have grown or rules changed: a task released resources, a node or
    /// queue or priority class changed, a gang changed.
    pub capacity: u64,
    /// Bumped on every change that could alter any decision: each capacity change, a pod added or
    /// changed in what scheduling reads, a gang's start or stale time or observed status changed, a
    /// write that failed, and a cycle that placed, evicted or reserved. Equal values mean the model
    /// is the same as far as a cycle is concerned.
    pub changes: u64,
}

impl Epochs {
    fn capacity_changed(&mut self) {
        self.capacity += 1;
        self.changes += 1;
    }

    /// Something a cycle reads changed.
    pub fn changed(&mut self) {
        self.changes += 1;
    }
}

/// A cycle that decided nothing to place, evict or reserve: until the model changes or `until` (the
/// earliest time a time-based rule could decide otherwise), the next cycle would decide the same
/// nothing, so it is skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quiet {
    /// [`Epochs::changes`] at the end of that cycle.
    pub changes: u64,
    /// The earliest time-based deadline it saw (a timeout, a grace period, a reservation lapsing).
    pub until: Millis,
}

/// What of a task a cycle reads; a pod update that leaves it equal changes nothing.
#[derive(PartialEq)]
struct TaskInputs {
    status: TaskStatus,
    node: Option<NodeId>,
    gpu_groups: Vec<Arc<str>>,
    request: Resources,
    gpu: GpuRequest,
    constraints: super::constraints::ConstraintsId,
    group_key: Option<GroupKey>,
    subgroup: Option<Arc<str>>,
    task_order: i32,
    ours: bool,
    problem: Option<Arc<str>>,
    reservation_for: Option<Arc<str>>,
    gpu_device: Option<Arc<str>>,
}

fn task_inputs(t: &Task) -> TaskInputs {
    TaskInputs {
        status: t.status,
        node: t.node,
        gpu_groups: t.gpu_groups.clone(),
        request: t.request,
        gpu: t.gpu,
        constraints: t.constraints,
        group_key: t.group_key.clone(),
        subgroup: t.subgroup.clone(),
        task_order: t.task_order,
        ours: t.ours,
        problem: t.problem.clone(),
        reservation_for: t.reservation_for.clone(),
        gpu_device: t.gpu_device.clone(),
    }
}

/// A pod as converted from the API, before it is linked into the model.
#[derive(Clone, Debug)]
pub struct PodUpdate {
    /// UID.
    pub uid: Arc<str>,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
    /// Scheduled by this scheduler.
    pub ours: bool,
    /// Gang named by its annotations.
    pub group_key: Option<GroupKey>,
    /// Sub-group label.
    pub subgroup: Option<Arc<str>>,
    /// Node-level request.
    pub request: Resources,
    /// GPU request.
    pub gpu: GpuRequest,
    /// Placement constraints.
    pub constraints: Constraints,
    /// Placement per the API.
    pub api: ApiView,
    /// `runai-gpu-group` labels.
    pub gpu_groups: Vec<Arc<str>>,
    /// Order in the gang.
    pub task_order: i32,
    /// Creation time.
    pub created: Millis,
    /// A problem with the pod's own definition.
    pub problem: Option<Arc<str>>,
    /// For a GPU reservation pod: the group it holds the device for.
    pub reservation_for: Option<Arc<str>>,
    /// For a GPU reservation pod: the device it reported.
    pub gpu_device: Option<Arc<str>>,
}

/// A node as converted from the API.
#[derive(Clone, Debug)]
pub struct NodeUpdate {
    /// Name.
    pub name: Arc<str>,
    /// Labels.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<super::constraints::Taint>,
    /// Ready.
    pub ready: bool,
    /// Cordoned.
    pub unschedulable: bool,
    /// Allocatable.
    pub allocatable: Resources,
    /// GPU memory per device in MiB.
    pub gpu_memory_mib: Option<u32>,
}

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

/// Which queues' statuses a scheduler writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueReports {
    /// Every queue (the scheduler serves the whole cluster).
    #[default]
    All,
    /// Queues that gangs of the served node pool name, and their ancestors.
    UsedByPool,
}

/// The model.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Resource name interning.
    pub names: ResourceNames,
    /// Interned placement constraints.
    pub constraints: ConstraintsTable,
    /// Nodes.
    pub nodes: Arena<Node>,
    node_index: HashMap<Arc<str>, NodeId>,
    /// Tasks (pods), ours and others'.
    pub tasks: Arena<Task>,
    task_index: HashMap<Arc<str>, TaskId>,
    /// Tasks bound to a node name the model does not know (yet).
    unattached: HashMap<Arc<str>, Vec<TaskId>>,
    /// Gangs.
    pub groups: Arena<Group>,
    group_index: HashMap<GroupKey, GroupId>,
    /// Tasks naming a gang that does not exist (yet).
    orphans: HashMap<GroupKey, Vec<TaskId>>,
    /// Queues.
    pub queues: Arena<Queue>,
    queue_index: HashMap<Arc<str>, QueueId>,
    /// Priority classes by name.
    priority_classes: HashMap<String, i32>,
    /// Value of the PriorityClass marked `globalDefault`, if any.
    global_default_priority: Option<(String, i32)>,
    /// Topology objects: name -> level label keys, widest first.
    topologies: HashMap<String, Vec<String>>,
    /// Change counters.
    pub epochs: Epochs,
    /// Reservation pods requested and not yet seen, by shared-GPU group, with when they were asked for.
    pub reservations_pending: HashMap<Arc<str>, Millis>,
    /// Which queues' statuses this scheduler writes. Queues are cluster-wide; a scheduler serving one node
    /// pool writes only those its pool's gangs use, so schedulers of different pools do not overwrite each
    /// other's view of a queue.
    pub queue_reports: QueueReports,
    /// Gangs that did not fit, remembered across cycles so an unchanged cluster costs nothing to
    /// schedule again (by root PodGroup).
    pub memo: HashMap<GroupId, crate::actions::allocate::Memo>,
    /// Set by a cycle that decided nothing to place, evict or reserve (see [`Quiet`]).
    pub quiet: Option<Quiet>,
}

impl Cluster {
    // -----------------------------------------------------------------------------------------
    // Lookups
    // -----------------------------------------------------------------------------------------

    /// A node by id.
    #[must_use]
    pub fn node(&self, id: NodeId) -> &Node {
        self.nodes
            .get(id.0)
            .expect("invariant: node ids in the model are live")
    }

    /// A task by id.
    #[must_use]
    pub fn task(&self, id: TaskId) -> &Task {
        self.tasks
            .get(id.0)
            .expect("invariant: task ids in the model are live")
    }

    /// A gang by id.
    #[must_use]
    pub fn group(&self, id: GroupId) -> &Group {
        self.groups
            .get(id.0)
            .expect("invariant: group ids in the model are live")
    }

    /// A gang by id, mutably.
    pub fn group_mut(&mut self, id: GroupId) -> &mut Group {
        self.groups
            .get_mut(id.0)
            .expect("invariant: group ids in the model are live")
    }

    /// A queue by id.
    #[must_use]
    pub fn queue(&self, id: QueueId) -> &Queue {
        self.queues
            .get(id.0)
            .expect("invariant: queue ids in the model are live")
    }

    /// A node id by name.
    #[must_use]
    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.node_index.get(name).copied()
    }

    /// A task id by pod UID.
    #[must_use]
    pub fn task_id(&self, uid: &str) -> Option<TaskId> {
        self.task_index.get(uid).copied()
    }

    /// A gang id by key.
    #[must_use]
    pub fn group_id(&self, key: &GroupKey) -> Option<GroupId> {
        self.group_index.get(key).copied()
    }

    /// A queue id by name.
    #[must_use]
    pub fn queue_id(&self, name: &str) -> Option<QueueId> {
        self.queue_index.get(name).copied()
    }

    /// Tasks naming a gang that does not exist, by gang.
    pub fn orphans(&self) -> impl Iterator<Item = (&GroupKey, &Vec<TaskId>)> {
        self.orphans.iter()
    }

    /// Topology levels by name.
    #[must_use]
    pub fn topology(&self, name: &str) -> Option<&[String]> {
        self.topologies.get(name).map(Vec::as_slice)
    }

    /// Names of known priority classes.
    #[must_use]
    pub fn priority_class_names(&self) -> Vec<String> {
        self.priority_classes.keys().cloned().collect()
    }

    /// Names of known topologies.
    #[must_use]
    pub fn topology_names(&self) -> Vec<String> {
        self.topologies.keys().cloned().collect()
    }

    /// The value of a priority class.
    #[must_use]
    pub fn priority_class(&self, name: &str) -> Option<i32> {
        self.priority_classes.get(name).copied()
    }

    /// The thousandths of one device a shared request takes on a node.
    #[must_use]
    pub fn share_milli(gpu: GpuRequest, node: &Node) -> u32 {
        match gpu {
            GpuRequest::Fraction { milli, .. } => milli,
            GpuRequest::Memory { mib, .. } => match node.gpu_memory_mib {
                Some(per_device) if per_device > 0 => {
                    u32::try_from((u64::from(mib) * 1000).div_ceil(u64::from(per_device)).min(1000))
                        .expect("invariant: at most 1000")
                }
                _ => 1000,
            },
            GpuRequest::None | GpuRequest::Whole(_) => 0,
        }
    }

    // -----------------------------------------------------------------------------------------
    // The placement primitive
    // -----------------------------------------------------------------------------------------

    /// The effective status and node of a task from its API view and assumption.
    fn effective(&self, task: &Task) -> (TaskStatus, Option<NodeId>) {
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
    fn contribute(&mut self, id: TaskId, sign: i64) {
        let task = self.tasks.get(id.0).expect("invariant: live task");
        let (Some(node_id), status) = (task.node, task.status) else {
            return;
        };
        let request = task.request.times(sign);
        let gpu = task.gpu;
        let groups = Self::device_groups(task);
        let reservation = task.reservation_for.clone();
        let (uid, device) = (task.uid.clone(), task.gpu_device.clone());
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
        if gpu.is_shared() {
            let milli = Self::share_milli(gpu, node);
            for group in &groups {
                Self::contribute_shared(node, group, milli, status, sign);
            }
        }
        if let Some(group) = reservation {
            Self::contribute_reservation(node, &group, uid, device, status.holds_node() && sign > 0);
        }
    }

    /// A reservation pod takes over (or gives back) the accounting of its shared device.
    fn contribute_reservation(
        node: &mut Node,
        group: &Arc<str>,
        uid: Arc<str>,
        device: Option<Arc<str>>,
        present: bool,
    ) {
        let index = match node.shared_gpu(group) {
            Some(i) => i,
            None if present => {
                node.shared_gpus.push(SharedGpu {
                    group: group.clone(),
                    used_milli: 0,
                    releasing_milli: 0,
                    nominated_milli: 0,
                    holders: 0,
                    nominated_holders: 0,
                    releasing_holders: 0,
                    reservation: None,
                    device: None,
                });
                node.shared_gpus.len() - 1
            }
            None => return,
        };
        let d = &mut node.shared_gpus[index];
        let before = d.device_contribution();
        if present {
            d.reservation = Some(uid);
            d.device = device;
        } else if d.reservation.as_ref() == Some(&uid) {
            d.reservation = None;
            d.device = None;
        }
        let after = d.device_contribution();
        let remove = d.holders == 0 && d.reservation.is_none();
        node.used.0[GPU] += after.0 - before.0;
        node.releasing.0[GPU] += after.1 - before.1;
        node.nominated.0[GPU] += after.2 - before.2;
        if remove {
            node.shared_gpus.swap_remove(index);
        }
    }

    /// The shared devices a task holds. A fractional pod placed without a group label (placed by
    /// someone else, or its labels lost) counts on a device of its own rather than on none.
    fn device_groups(task: &Task) -> Vec<Arc<str>> {
        if task.gpu.is_shared() && task.gpu_groups.is_empty() && task.status != TaskStatus::Pipelined {
            vec![format!("unlabelled-{}", task.uid).into()]
        } else {
            task.gpu_groups.clone()
        }
    }

    fn contribute_shared(node: &mut Node, group: &Arc<str>, milli: u32, status: TaskStatus, sign: i64) {
        let index = match node.shared_gpu(group) {
            Some(i) => i,
            None if sign > 0 => {
                node.shared_gpus.push(SharedGpu {
                    group: group.clone(),
                    used_milli: 0,
                    releasing_milli: 0,
                    nominated_milli: 0,
                    holders: 0,
                    nominated_holders: 0,
                    releasing_holders: 0,
                    reservation: None,
                    device: None,
                });
                node.shared_gpus.len() - 1
            }
            None => return,
        };
        let device = &mut node.shared_gpus[index];
        let before = device.device_contribution();
        let apply = |v: &mut u32, d: u32| {
            *v = if sign > 0 { *v + d } else { v.saturating_sub(d) };
        };
        apply(&mut device.holders, 1);
        match status {
            TaskStatus::Pipelined => {
                apply(&mut device.nominated_milli, milli);
                apply(&mut device.nominated_holders, 1);
            }
            TaskStatus::Releasing => {
                apply(&mut device.used_milli, milli);
                apply(&mut device.releasing_milli, milli);
                apply(&mut device.releasing_holders, 1);
            }
            _ => apply(&mut device.used_milli, milli),
        }
        let after = device.device_contribution();
        let remove = device.holders == 0 && device.reservation.is_none();
        node.used.0[GPU] += after.0 - before.0;
        node.releasing.0[GPU] += after.1 - before.1;
        node.nominated.0[GPU] += after.2 - before.2;
        if remove {
            node.shared_gpus.swap_remove(index);
        }
    }

    /// Recomputes a task's effective placement after its API view or assumption changed.
    fn refresh(&mut self, id: TaskId) {
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
        self.memo.clear();
        self.quiet = None;
    }

    // -----------------------------------------------------------------------------------------
    // Watch events
    // -----------------------------------------------------------------------------------------

    /// Adds or updates a node.
    pub fn apply_node(&mut self, update: NodeUpdate) {
        self.epochs.capacity_changed();
        if let Some(id) = self.node_id(&update.name) {
            let node = self
                .nodes
                .get_mut(id.0)
                .expect("invariant: indexed nodes are live");
            let memory_changed = node.gpu_memory_mib != update.gpu_memory_mib;
            node.labels = update.labels;
            node.taints = update.taints;
            node.ready = update.ready;
            node.unschedulable = update.unschedulable;
            node.allocatable = update.allocatable;
            if memory_changed {
                // gpu-memory shares depend on the per-device memory: re-place the sharers.
                let tasks = node.tasks.clone();
                for t in &tasks {
                    self.contribute(*t, -1);
                }
                self.nodes.get_mut(id.0).expect("invariant").gpu_memory_mib = update.gpu_memory_mib;
                for t in &tasks {
                    self.contribute(*t, 1);
                }
            }
            return;
        }
        let mut node = Node::new(&update.name, update.allocatable);
        node.labels = update.labels;
        node.taints = update.taints;
        node.ready = update.ready;
        node.unschedulable = update.unschedulable;
        node.gpu_memory_mib = update.gpu_memory_mib;
        let id = NodeId(self.nodes.insert(node));
        self.node_index.insert(update.name.clone(), id);
        for task in self.unattached.remove(&update.name).unwrap_or_default() {
            if self.tasks.get(task.0).is_some() {
                self.refresh(task);
            }
        }
    }

    /// Removes a node; tasks on it stay, unattached, until they go too.
    pub fn remove_node(&mut self, name: &str) {
        let Some(id) = self.node_index.remove(name) else {
            return;
        };
        let tasks = self.node(id).tasks.clone();
        for t in &tasks {
            self.contribute(*t, -1);
            let task = self.tasks.get_mut(t.0).expect("invariant: node tasks are live");
            task.node = None;
            if matches!(task.assumed, Assumed::Binding { node } | Assumed::Pipelined { node, .. } if node == id)
            {
                task.assumed = Assumed::None;
            }
            let (status, _) = self.effective(self.task(*t));
            let task = self.tasks.get_mut(t.0).expect("invariant");
            task.status = status;
            if let Some(n) = task.api.node_name.clone() {
                self.unattached.entry(n).or_default().push(*t);
            }
        }
        self.nodes.remove(id.0);
        self.epochs.capacity_changed();
    }

    /// Adds or updates a pod.
    pub fn apply_pod(&mut self, update: PodUpdate) {
        let constraints = self.constraints.intern(update.constraints);
        if let Some(id) = self.task_id(&update.uid) {
            let before = task_inputs(self.task(id));
            self.contribute(id, -1);
            let old_group_key = self.task(id).group_key.clone();
            let task = self
                .tasks
                .get_mut(id.0)
                .expect("invariant: indexed tasks are live");
            task.subgroup = update.subgroup;
            task.request = update.request;
            task.gpu = update.gpu;
            task.constraints = constraints;
            task.api = update.api;
            // Drop an assumption once the API shows its outcome (or overtook it).
            let caught_up = match (&task.assumed, task.api.status) {
                (Assumed::None, _) => false,
                (Assumed::Binding { .. } | Assumed::Pipelined { .. }, s) => !s.is_pending(),
                (Assumed::Evicting, s) => !matches!(s, TaskStatus::Bound | TaskStatus::Running),
            };
            if caught_up {
                task.assumed = Assumed::None;
            }
            if !update.gpu_groups.is_empty() || task.api.status.holds_node() {
                task.gpu_groups = update.gpu_groups;
            }
            task.task_order = update.task_order;
            task.problem = update.problem;
            task.reservation_for = update.reservation_for;
            task.gpu_device = update.gpu_device;
            task.ours = update.ours;
            let (status, node) = self.effective(self.task(id));
            let task = self.tasks.get_mut(id.0).expect("invariant");
            let released = task.status.holds_node() && !status.holds_node();
            task.status = status;
            task.node = node;
            self.contribute(id, 1);
            self.track_unattached(id);
            if released {
                self.epochs.capacity_changed();
            }
            if before != task_inputs(self.task(id)) || old_group_key != update.group_key {
                self.epochs.changed();
            }
            if old_group_key != update.group_key {
                self.unlink_group(id);
                self.tasks.get_mut(id.0).expect("invariant").group_key = update.group_key;
                self.link_group(id);
            } else if let Some(g) = self.task(id).group {
                self.group_mut(g).version += 1;
            }
            return;
        }
        let task = Task {
            uid: update.uid.clone(),
            namespace: update.namespace,
            name: update.name,
            ours: update.ours,
            group_key: update.group_key,
            group: None,
            subgroup: update.subgroup,
            request: update.request,
            gpu: update.gpu,
            constraints,
            status: TaskStatus::Pending,
            node: None,
            api: update.api,
            assumed: Assumed::None,
            gpu_groups: update.gpu_groups,
            task_order: update.task_order,
            created: update.created,
            problem: update.problem,
            condition_fingerprint: 0,
            reservation_for: update.reservation_for,
            gpu_device: update.gpu_device,
        };
        let id = TaskId(self.tasks.insert(task));
        self.task_index.insert(update.uid, id);
        self.epochs.changed();
        let (status, node) = self.effective(self.task(id));
        let task = self.tasks.get_mut(id.0).expect("invariant");
        task.status = status;
        task.node = node;
        self.contribute(id, 1);
        self.track_unattached(id);
        self.link_group(id);
    }

    fn track_unattached(&mut self, id: TaskId) {
        let task = self.task(id);
        if task.node.is_none()
            && task.api.status.holds_node()
            && let Some(n) = task.api.node_name.clone()
        {
            let list = self.unattached.entry(n).or_default();
            if !list.contains(&id) {
                list.push(id);
            }
        }
    }

    /// Removes a pod.
    pub fn remove_pod(&mut self, uid: &str) {
        let Some(id) = self.task_index.remove(uid) else {
            return;
        };
        self.contribute(id, -1);
        self.unlink_group(id);
        if let Some(n) = self.task(id).api.node_name.clone()
            && let Some(list) = self.unattached.get_mut(&n)
        {
            list.retain(|t| *t != id);
        }
        self.tasks.remove(id.0);
        self.epochs.capacity_changed();
    }

    fn link_group(&mut self, id: TaskId) {
        let Some(key) = self.task(id).group_key.clone() else {
            return;
        };
        if let Some(g) = self.group_id(&key) {
            let group = self.group_mut(g);
            group.tasks.push(id);
            group.version += 1;
            self.tasks.get_mut(id.0).expect("invariant").group = Some(g);
        } else {
            self.orphans.entry(key).or_default().push(id);
        }
    }

    fn unlink_group(&mut self, id: TaskId) {
        let task = self.tasks.get_mut(id.0).expect("invariant: live task");
        let group = task.group.take();
        let key = task.group_key.clone();
        if let Some(g) = group {
            let group = self.group_mut(g);
            group.tasks.retain(|t| *t != id);
            group.version += 1;
        } else if let Some(key) = key
            && let Some(list) = self.orphans.get_mut(&key)
        {
            list.retain(|t| *t != id);
            if list.is_empty() {
                self.orphans.remove(&key);
            }
        }
    }

    /// Adds or updates a gang. Fields the scheduler keeps across updates (members, waiting time, timeout
    /// state) are preserved; everything declared is replaced.
    pub fn apply_group(&mut self, mut group: Group) {
        if let Some(id) = self.group_id(&group.key) {
            let old = self.group_mut(id);
            if old.same_definition(&group) {
                // Only status or scheduler-owned annotations changed (often our own write echoing back):
                // nothing that could change a decision.
                // Our own echo leaves these equal; anything else (someone else's status, a start or
                // stale time we did not write) can change a decision.
                let changed = old.observed.fingerprint != group.observed.fingerprint
                    || old.last_start != group.last_start
                    || old.stale_since != group.stale_since;
                let event_fingerprint = old.observed.event_fingerprint;
                old.observed = group.observed;
                old.observed.event_fingerprint = event_fingerprint;
                old.last_start = group.last_start;
                old.stale_since = group.stale_since;
                if changed {
                    self.epochs.changed();
                }
                return;
            }
            self.epochs.capacity_changed();
            let old = self.group_mut(id);
            group.tasks = std::mem::take(&mut old.tasks);
            group.observed.event_fingerprint = old.observed.event_fingerprint;
            group.waiting_since = old.waiting_since;
            group.timed_out = old.timed_out;
            group.version = old.version + 1;
            *old = group;
            self.resolve_group(id);
            return;
        }
        self.epochs.capacity_changed();
        let key = group.key.clone();
        let id = GroupId(self.groups.insert(group));
        self.group_index.insert(key.clone(), id);
        for task in self.orphans.remove(&key).unwrap_or_default() {
            self.tasks
                .get_mut(task.0)
                .expect("invariant: orphans are live")
                .group = Some(id);
            self.group_mut(id).tasks.push(task);
        }
        self.resolve_group(id);
    }

    /// Removes a gang; its pods become orphans waiting for it to come back.
    pub fn remove_group(&mut self, key: &GroupKey) {
        let Some(id) = self.group_index.remove(key) else {
            return;
        };
        let tasks = std::mem::take(&mut self.group_mut(id).tasks);
        for t in &tasks {
            self.tasks
                .get_mut(t.0)
                .expect("invariant: members are live")
                .group = None;
        }
        if !tasks.is_empty() {
            self.orphans.insert(key.clone(), tasks);
        }
        self.groups.remove(id.0);
        self.memo.remove(&id);
        self.epochs.capacity_changed();
    }

    /// Adds or updates a queue and re-resolves the tree.
    pub fn apply_queue(&mut self, queue: Queue) {
        if let Some(id) = self.queue_id(&queue.name) {
            let old = self
                .queues
                .get_mut(id.0)
                .expect("invariant: indexed queues are live");
            let fingerprint = old.observed_fingerprint;
            *old = queue;
            old.observed_fingerprint = fingerprint;
        } else {
            let name = queue.name.clone();
            let id = QueueId(self.queues.insert(queue));
            self.queue_index.insert(name, id);
        }
        self.resolve_queues();
    }

    /// Removes a queue and re-resolves the tree (gangs in it now wait with `QueueDoesNotExist`).
    pub fn remove_queue(&mut self, name: &str) {
        if let Some(id) = self.queue_index.remove(name) {
            self.queues.remove(id.0);
            self.resolve_queues();
        }
    }

    /// Adds or updates a priority class.
    pub fn apply_priority_class(&mut self, name: &str, value: i32, global_default: bool) {
        self.priority_classes.insert(name.to_owned(), value);
        if global_default {
            self.global_default_priority = Some((name.to_owned(), value));
        } else if self
            .global_default_priority
            .as_ref()
            .is_some_and(|(n, _)| n == name)
        {
            self.global_default_priority = None;
        }
        self.resolve_all_groups();
    }

    /// Removes a priority class.
    pub fn remove_priority_class(&mut self, name: &str) {
        self.priority_classes.remove(name);
        if self
            .global_default_priority
            .as_ref()
            .is_some_and(|(n, _)| n == name)
        {
            self.global_default_priority = None;
        }
        self.resolve_all_groups();
    }

    /// Adds or updates a topology.
    pub fn apply_topology(&mut self, name: &str, levels: Vec<String>) {
        self.topologies.insert(name.to_owned(), levels);
        self.resolve_all_groups();
    }

    /// Removes a topology.
    pub fn remove_topology(&mut self, name: &str) {
        self.topologies.remove(name);
        self.resolve_all_groups();
    }

    // -----------------------------------------------------------------------------------------
    // Resolution of references
    // -----------------------------------------------------------------------------------------

    fn resolve_queues(&mut self) {
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

    fn resolve_all_groups(&mut self) {
        self.epochs.capacity_changed();
        let ids: Vec<GroupId> = self.groups.iter().map(|(i, _)| GroupId(i)).collect();
        for id in ids {
            self.resolve_group(id);
        }
    }

    /// Resolves a gang's queue, priority and topology against the current objects, recording problems.
    fn resolve_group(&mut self, id: GroupId) {
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
    fn resolve_topology(&self, spec: &super::group::TopologySpec) -> Result<TopologyRequirement, String> {
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

    // -----------------------------------------------------------------------------------------
    // Invariants (tests)
    // -----------------------------------------------------------------------------------------

    /// Recomputes node accounting from the tasks and compares. Used by tests and debug checks.
    ///
    /// # Errors
    /// A description of the first mismatch.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut expected: HashMap<NodeId, (Resources, Resources, Resources)> = HashMap::new();
        let mut devices: HashMap<(NodeId, Arc<str>), SharedGpu> = HashMap::new();
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
                for g in &Self::device_groups(task) {
                    let mut scratch = Node::new("scratch", Resources::ZERO);
                    if let Some(d) = devices.remove(&(node, g.clone())) {
                        scratch.shared_gpus.push(d);
                    }
                    Self::contribute_shared(&mut scratch, g, milli, status, 1);
                    if let Some(d) = scratch.shared_gpus.pop() {
                        devices.insert((node, g.clone()), d);
                    }
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
            let mut scratch = Node::new("scratch", Resources::ZERO);
            if let Some(d) = devices.remove(&(node, group.clone())) {
                scratch.shared_gpus.push(d);
            }
            Self::contribute_reservation(
                &mut scratch,
                &group,
                task.uid.clone(),
                task.gpu_device.clone(),
                true,
            );
            if let Some(d) = scratch.shared_gpus.pop() {
                devices.insert((node, group), d);
            }
        }
        for ((node, _), d) in &devices {
            let (u, r, n) = d.device_contribution();
            let e = expected.entry(*node).or_default();
            e.0.0[GPU] += u;
            e.1.0[GPU] += r;
            e.2.0[GPU] += n;
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
