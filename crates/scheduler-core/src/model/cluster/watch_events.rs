//! Upserts and removals: the model follows the watch events of nodes, pods, gangs, queues, priority
//! classes and topologies, bumping [`Epochs`](super::Epochs) for whatever a cycle could decide
//! differently on.

use std::sync::Arc;

use super::Cluster;
use crate::model::constraints::{Constraints, ConstraintsId, Taint};
use crate::model::group::{Group, GroupKey};
use crate::model::ids::{Arena, GroupId, NodeId, QueueId, TaskId};
use crate::model::node::Node;
use crate::model::pod_rules::{Labels, PodFacts, PodRulesId, RulesSpec, TermId};
use crate::model::queue::Queue;
use crate::model::resources::Resources;
use crate::model::task::{ApiView, Assumed, GpuRequest, Task, TaskStatus};
use crate::model::time::Millis;
use crate::model::volumes::PodClaim;

/// What of a task a cycle reads; a pod update that leaves it equal changes nothing.
#[derive(PartialEq)]
struct TaskInputs {
    status: TaskStatus,
    node: Option<NodeId>,
    gpu_groups: Vec<Arc<str>>,
    request: Resources,
    gpu: GpuRequest,
    constraints: ConstraintsId,
    rules: PodRulesId,
    labels: Arc<Labels>,
    group_key: Option<GroupKey>,
    subgroup: Option<Arc<str>>,
    task_order: i32,
    never_preempts: bool,
    ours: bool,
    problem: Option<Arc<str>>,
    reservation_for: Option<Arc<str>>,
    gpu_device: Option<Arc<str>>,
    /// Minimum runtimes count from it.
    bound_at: Option<Millis>,
}

fn task_inputs(t: &Task) -> TaskInputs {
    TaskInputs {
        status: t.status,
        node: t.node,
        gpu_groups: t.gpu_groups.clone(),
        request: t.request,
        gpu: t.gpu,
        constraints: t.constraints,
        rules: t.rules,
        labels: t.labels.clone(),
        group_key: t.group_key.clone(),
        subgroup: t.subgroup.clone(),
        task_order: t.task_order,
        never_preempts: t.never_preempts,
        ours: t.ours,
        problem: t.problem.clone(),
        reservation_for: t.reservation_for.clone(),
        gpu_device: t.gpu_device.clone(),
        bound_at: t.api.bound_at,
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
    /// Labels.
    pub labels: Labels,
    /// Rules about other pods (affinity, spread, host ports).
    pub rules: RulesSpec,
    /// Placement per the API.
    pub api: ApiView,
    /// `runai-gpu-group` labels.
    pub gpu_groups: Vec<Arc<str>>,
    /// Order in the gang.
    pub task_order: i32,
    /// `spec.preemptionPolicy: Never`.
    pub never_preempts: bool,
    /// Creation time.
    pub created: Millis,
    /// A problem with the pod's own definition.
    pub problem: Option<Arc<str>>,
    /// PersistentVolumeClaims it uses (`persistentVolumeClaim` and generic `ephemeral` volumes).
    pub claims: Vec<PodClaim>,
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
    pub taints: Vec<Taint>,
    /// Ready.
    pub ready: bool,
    /// Cordoned.
    pub unschedulable: bool,
    /// Allocatable.
    pub allocatable: Resources,
    /// GPU memory per device in MiB.
    pub gpu_memory_mib: Option<u32>,
}

impl NodeUpdate {
    /// The update that leaves a node as it is (to change a field of, in tests and simulations).
    #[must_use]
    pub fn of(node: &Node) -> Self {
        Self {
            name: node.name.clone(),
            labels: node.labels.clone(),
            taints: node.taints.clone(),
            ready: node.ready,
            unschedulable: node.unschedulable,
            allocatable: node.allocatable,
            gpu_memory_mib: node.gpu_memory_mib,
        }
    }
}

impl Cluster {
    /// Adds or updates a node.
    pub fn apply_node(&mut self, update: NodeUpdate) {
        self.epochs.capacity_changed();
        self.capacity_version += 1;
        if let Some(id) = self.node_id(&update.name) {
            let node = self
                .nodes
                .get_mut(id.0)
                .expect("invariant: indexed nodes are live");
            // gpu-memory shares depend on the per-device memory, and pod-rule domains on the labels:
            // the pods here are taken out and put back around such a change.
            let replace = node.gpu_memory_mib != update.gpu_memory_mib || node.labels != update.labels;
            let tasks = if replace { node.tasks.clone() } else { Vec::new() };
            for t in &tasks {
                self.contribute(*t, -1);
            }
            let node = self
                .nodes
                .get_mut(id.0)
                .expect("invariant: indexed nodes are live");
            let facts_changed = node.labels != update.labels
                || node.taints != update.taints
                || node.ready != update.ready
                || node.unschedulable != update.unschedulable;
            node.labels = update.labels;
            node.taints = update.taints;
            node.ready = update.ready;
            node.unschedulable = update.unschedulable;
            node.allocatable = update.allocatable;
            node.gpu_memory_mib = update.gpu_memory_mib;
            for t in &tasks {
                self.contribute(*t, 1);
            }
            if facts_changed {
                self.node_facts_version += 1;
            }
            return;
        }
        self.node_facts_version += 1;
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
        self.capacity_version += 1;
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
        self.node_facts_version += 1;
        self.epochs.capacity_changed();
    }

    /// Adds or updates a pod.
    pub fn apply_pod(&mut self, mut update: PodUpdate) {
        // A pod that names no gang joins the one made for it alone, if there is one.
        let names_a_gang = update.group_key.is_some();
        if !names_a_gang {
            update.group_key = self.group_made_for(&update.uid);
        }
        let by_owner = !names_a_gang && update.group_key.is_some();
        let constraints = self.constraints.intern(update.constraints);
        let (rules, new_terms) = self.rules.acquire(update.rules);
        self.count_into_new_terms(&new_terms);
        let labels = self.labels.intern(update.labels);
        if !update.ours || self.task_id(&update.uid).is_some_and(|id| !self.task(id).ours) {
            self.capacity_version += 1;
        }
        if let Some(id) = self.task_id(&update.uid) {
            let before = task_inputs(self.task(id));
            self.contribute(id, -1);
            let old_rules = self.task(id).rules;
            self.rules.release(old_rules);
            let old_group_key = self.task(id).group_key.clone();
            let task = self
                .tasks
                .get_mut(id.0)
                .expect("invariant: indexed tasks are live");
            task.subgroup = update.subgroup;
            task.request = update.request;
            task.gpu = update.gpu;
            task.constraints = constraints;
            task.rules = rules;
            let old_labels = std::mem::replace(&mut task.labels, labels);
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
            if task.api.status.holds_node() {
                task.bind_failure = None;
            }
            if !update.gpu_groups.is_empty() || task.api.status.holds_node() {
                task.gpu_groups = update.gpu_groups;
            }
            task.task_order = update.task_order;
            task.never_preempts = update.never_preempts;
            task.spec_problem = update.problem;
            if task.claims != update.claims {
                // Pod volumes are immutable: only a recreated pod under the same UID could get here.
                let old = task.claims.clone();
                let namespace = task.namespace.clone();
                task.claims = update.claims;
                self.volumes.link(id, &namespace, &old, -1);
                let task = self.task(id);
                let (namespace, claims) = (task.namespace.clone(), task.claims.clone());
                self.volumes.link(id, &namespace, &claims, 1);
            }
            self.labels.release(old_labels);
            self.refresh_problem(id);
            let task = self.tasks.get_mut(id.0).expect("invariant");
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
            self.tasks.get_mut(id.0).expect("invariant").group_by_owner = by_owner;
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
            group_by_owner: by_owner,
            group: None,
            subgroup: update.subgroup,
            request: update.request,
            gpu: update.gpu,
            constraints,
            rules,
            labels,
            status: TaskStatus::Pending,
            node: None,
            api: update.api,
            assumed: Assumed::None,
            gpu_groups: update.gpu_groups,
            task_order: update.task_order,
            never_preempts: update.never_preempts,
            created: update.created,
            problem: None,
            spec_problem: update.problem,
            claims: update.claims,
            bind_failure: None,
            condition_fingerprint: 0,
            reservation_for: update.reservation_for,
            gpu_device: update.gpu_device,
        };
        if task.ours {
            self.shapes.observe_pod(task.request.cpu(), task.gpu, constraints);
        }
        let id = TaskId(self.tasks.insert(task));
        self.task_index.insert(update.uid, id);
        let task = self.task(id);
        let (namespace, claims) = (task.namespace.clone(), task.claims.clone());
        self.volumes.link(id, &namespace, &claims, 1);
        self.refresh_problem(id);
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
        if !self.task(id).ours {
            self.capacity_version += 1;
        }
        self.contribute(id, -1);
        self.rules.release(self.task(id).rules);
        let task = self.task(id);
        let (namespace, claims) = (task.namespace.clone(), task.claims.clone());
        self.volumes.link(id, &namespace, &claims, -1);
        self.unlink_group(id);
        if let Some(n) = self.task(id).api.node_name.clone()
            && let Some(list) = self.unattached.get_mut(&n)
        {
            list.retain(|t| *t != id);
        }
        if let Some(task) = self.tasks.remove(id.0) {
            self.labels.release(task.labels);
        }
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

    /// The PodGroup a podgrouper made for pod `uid` alone, if any (the first by key).
    fn group_made_for(&self, uid: &str) -> Option<GroupKey> {
        self.owned_groups.get(uid).and_then(|s| s.first()).cloned()
    }

    /// Records (`add`) or forgets that the group `key` was made for pod `uid`, and moves that pod if it
    /// names no gang itself.
    fn note_made_for(&mut self, uid: Arc<str>, key: &GroupKey, add: bool) {
        if add {
            self.owned_groups
                .entry(uid.clone())
                .or_default()
                .insert(key.clone());
        } else if let Some(set) = self.owned_groups.get_mut(&uid) {
            set.remove(key);
            if set.is_empty() {
                self.owned_groups.remove(&uid);
            }
        }
        let Some(id) = self.task_id(&uid) else {
            return;
        };
        let task = self.task(id);
        if task.group_key.is_some() && !task.group_by_owner {
            return;
        }
        let made_for = self.group_made_for(&uid);
        if made_for == task.group_key {
            return;
        }
        self.unlink_group(id);
        let task = self
            .tasks
            .get_mut(id.0)
            .expect("invariant: indexed tasks are live");
        task.group_by_owner = made_for.is_some();
        task.group_key = made_for;
        self.link_group(id);
        self.epochs.changed();
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
            // Not stamped (`Arena::stamp`): what changes here is read by no gang a session carries,
            // and the status report's stamps compare these fields themselves
            // (`report::status::ReportStamp`). A stamp here would rebuild every gang after our own
            // status writes echo back.
            let old = self
                .groups
                .get_mut_unstamped(id.0)
                .expect("invariant: indexed groups are live");
            let stale_since = kept_stale_since(old, &group);
            if old.same_definition(&group) {
                // Only status or scheduler-owned annotations changed (often our own write echoing back):
                // nothing that could change a decision.
                // Our own echo leaves these equal; anything else (someone else's status, a start or
                // stale time we did not write) can change a decision.
                let changed = old.observed.fingerprint != group.observed.fingerprint
                    || old.last_start != group.last_start
                    || old.stale_since != stale_since;
                let event_fingerprint = old.observed.event_fingerprint;
                old.observed = group.observed;
                old.observed.event_fingerprint = event_fingerprint;
                old.last_start = group.last_start;
                old.stale_since = stale_since;
                old.stale_annotation = group.stale_annotation;
                if changed {
                    self.epochs.changed();
                    let limit = self.groups.capacity();
                    self.echoed.note(id, limit);
                }
                return;
            }
            self.epochs.capacity_changed();
            let old = self.group_mut(id);
            let old_owner = old.owner_pod.clone();
            let new_owner = group.owner_pod.clone();
            group.tasks = std::mem::take(&mut old.tasks);
            group.observed.event_fingerprint = old.observed.event_fingerprint;
            group.waiting_since = old.waiting_since;
            group.status_written = old.status_written;
            group.timed_out = old.timed_out;
            group.stale_since = stale_since;
            group.version = old.version + 1;
            let key = group.key.clone();
            *old = group;
            self.resolve_group(id);
            if old_owner != new_owner {
                if let Some(uid) = old_owner {
                    self.note_made_for(uid, &key, false);
                }
                if let Some(uid) = new_owner {
                    self.note_made_for(uid, &key, true);
                }
            }
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
        if let Some(uid) = self.group(id).owner_pod.clone() {
            self.note_made_for(uid, &key, true);
        }
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
        let owner = self.group(id).owner_pod.clone();
        self.groups.remove(id.0);
        self.no_fit_memo.forget(id);
        self.epochs.capacity_changed();
        if let Some(uid) = owner {
            self.note_made_for(uid, key, false);
        }
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

    /// Records a namespace's labels (`None`: the namespace is gone), for namespace selectors.
    pub fn apply_namespace(&mut self, name: &str, labels: Option<Labels>) {
        if self.rules.set_namespace_labels(name, labels) {
            self.recount_rules();
            self.epochs.capacity_changed();
        }
    }

    /// Fills the counts of terms just interned from the pods already placed.
    fn count_into_new_terms(&mut self, terms: &[TermId]) {
        if terms.is_empty() {
            return;
        }
        for (facts, node, labels, releasing) in placed(&self.tasks, &self.nodes) {
            self.rules.count_into(terms, facts, node, labels, releasing);
        }
    }

    /// Rebuilds every pod-rule count from the placed pods.
    pub(super) fn recount_rules(&mut self) {
        self.rules.clear_counts();
        for (facts, node, labels, releasing) in placed(&self.tasks, &self.nodes) {
            self.rules.contribute(facts, node, labels, releasing, 1);
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
}

/// The pods holding or reserving room on a node, as the pod-rule counts see them: the pod, its node, the
/// node's labels and whether it is terminating.
fn placed<'a>(
    tasks: &'a Arena<Task>,
    nodes: &'a Arena<Node>,
) -> impl Iterator<Item = (PodFacts<'a>, NodeId, &'a Labels, bool)> + 'a {
    tasks.iter().filter_map(|(_, task)| {
        let node = task
            .node
            .filter(|_| task.status.holds_node() || task.status == TaskStatus::Pipelined)?;
        let labels = &nodes.get(node.0).expect("invariant: task nodes are live").labels;
        let facts = PodFacts {
            namespace: &task.namespace,
            labels: &task.labels,
            rules: task.rules,
        };
        Some((facts, node, labels, task.status == TaskStatus::Releasing))
    })
}

/// A group's stale time across an update: the model's own (stale-gang eviction keeps it in memory),
/// unless the update's `stale-podgroup-timestamp` annotation differs from the one last seen (KAI, or a
/// person, wrote it), which then holds. Taking the annotation on every update would restart the grace
/// period at each status echo, since this scheduler never writes it.
fn kept_stale_since(old: &Group, update: &Group) -> Option<Millis> {
    if old.stale_annotation == update.stale_annotation {
        old.stale_since
    } else {
        update.stale_annotation
    }
}
