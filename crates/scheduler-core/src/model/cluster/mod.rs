//! The cluster model: arenas of nodes, tasks, gangs and queues with their indexes, kept up to date
//! incrementally from watch events, and the one placement primitive that keeps node accounting exact.
//!
//! Invariants (checked by [`Cluster::check_invariants`] in tests):
//! - a node's `used`, `releasing` and `nominated` are exactly the sums over the tasks placed on it, with
//!   each shared GPU device counted once as 1000 milli-GPUs;
//! - a task's effective status and node are its API view with its assumed placement on top;
//! - every task naming a gang that exists is listed in that gang's `tasks`.
//!
//! One `Cluster`, its `impl` split by concern:
//! - this file: the store (the struct, its change counters, lookups by id and by name);
//! - `watch_events`: upserts and removals of nodes, pods, gangs, queues, priority classes, topologies;
//! - `placement`: a task's effective placement and its contribution to its node;
//! - `shared_gpus`: fractional-GPU accounting per shared device;
//! - `volumes`: claims, volumes, classes and attach limits, and the pods' wait reasons they decide;
//! - `resolution`: resolving gangs' and queues' references (queue, parent, priority class, topology);
//! - `invariants`: recomputing the accounting from scratch to check it.

mod crash;
mod invariants;
mod placement;
mod resolution;
mod shared_gpus;
mod volumes;
mod watch_events;

use std::collections::HashMap;
use std::sync::Arc;

use super::constraints::ConstraintsTable;
use super::group::{Group, GroupKey};
use super::ids::{Arena, GroupId, NodeId, QueueId, TaskId, TrackedSlots};
use super::no_fit_memo::NoFitMemo;
use super::node::Node;
use super::pod_rules::{LabelBook, RuleBook};
use super::queue::Queue;
use super::resources::ResourceNames;
use super::task::{Assumed, Task, TaskStatus};
use super::time::Millis;
use super::volumes::VolumeBook;

pub use placement::PlacementUndo;
pub use watch_events::{NodeUpdate, PodUpdate};

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
    /// Interned pod rules (affinity, spread, host ports) and the counts that answer them.
    pub rules: RuleBook,
    /// Pods' labels, one copy per distinct set.
    pub labels: LabelBook,
    /// Claims, volumes, storage classes and attach limits, and the placed pods' use of them.
    pub volumes: VolumeBook,
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
    /// PodGroups a podgrouper made for one pod alone, by that pod's UID (a set: nothing stops a second
    /// one, and the first by key is the one used, on every replica alike).
    owned_groups: HashMap<Arc<str>, std::collections::BTreeSet<GroupKey>>,
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
    /// Bumped whenever a node comes or goes or changes what static predicates read (labels, taints,
    /// readiness, cordon): work derived from the nodes' static facts holds while it stays the same.
    pub node_facts_version: u64,
    /// Bumped whenever what fair share divides may change: any node update or removal, and any change
    /// to a pod another scheduler places (`framework::policy::fairness::capacity`).
    pub capacity_version: u64,
    /// Reservation pods requested and not yet seen, by shared-GPU group, with when they were asked for.
    pub reservations_pending: HashMap<Arc<str>, Millis>,
    /// Which queues' statuses this scheduler writes. Queues are cluster-wide; a scheduler serving one node
    /// pool writes only those its pool's gangs use, so schedulers of different pools do not overwrite each
    /// other's view of a queue.
    pub queue_reports: QueueReports,
    /// The node pool this scheduler serves (its `--node-pool`), or `None` for what carries no pool
    /// label: named on the gangs' `schedulingConditions` and compared by `schedulingBackoff`.
    pub node_pool: Option<Arc<str>>,
    /// Queues' normalised historical usage for usage-based fair share (empty when it is off). Set
    /// with [`Cluster::set_historical_usage`], which makes a cycle due when it changes.
    pub historical_usage: super::HistoricalUsage,
    /// Gangs that did not fit, remembered across cycles so an unchanged cluster costs nothing to
    /// schedule again (by root PodGroup). Written and read by allocate; forgotten here when a gang goes
    /// or every assumption is dropped.
    pub no_fit_memo: NoFitMemo,
    /// Set by a cycle that decided nothing to place, evict or reserve (see [`Quiet`]).
    pub quiet: Option<Quiet>,
    /// How often each request shape arrived (our pods, counted when first seen), for the
    /// `fragmentation` placement strategy.
    pub shapes: super::shapes::ShapeBook,
    /// The root PodGroup of the gang the running cycle works on, so a cycle that panics can name it
    /// (see `crash.rs`).
    pub attempting: Option<GroupId>,
    /// Placements from before the running cycle first changed each task, for undoing a cycle that
    /// panicked.
    crash_undo: Vec<PlacementUndo>,
    /// What the last scheduling session left for the next (the framework's `session::Carry`: gangs as
    /// built, what they count against their queues, when each status was reported), opaque here.
    /// Each entry holds only while the arena stamps of what it came from are unchanged; dropping it
    /// costs the next cycle time, never a different decision.
    pub session_carry: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// PodGroups whose status, start or stale time an update changed without a stamp (someone else's
    /// status, or a time we did not write: see [`Cluster::apply_group`]) since the last status report
    /// took them; that report looks at them even where no stamp says they changed.
    pub echoed: Echoed,
    /// Sessions keep no backlog (`framework::backlog`): tests and `kai sim --without-backlog` compare
    /// their decisions with those of sessions that do.
    pub without_backlog: bool,
    /// Tasks holding a reservation ([`Cluster::pipelined_tasks`]).
    pipelined: TrackedSlots,
    /// Our pending pods scheduling cannot take up on a gang's account ([`Cluster::pending_without_gang`]).
    without_gang: TrackedSlots,
}

/// PodGroups changed without a stamp (see [`Cluster::echoed`]), or, once more were noted than there
/// are PodGroups (a replica that follows and runs no cycle), the mark that any may have.
#[derive(Clone, Debug, Default)]
pub struct Echoed {
    groups: Vec<GroupId>,
    overflowed: bool,
}

impl Echoed {
    /// Notes a group (bounded: past `limit` entries only the overflow is remembered).
    pub fn note(&mut self, id: GroupId, limit: usize) {
        if self.overflowed {
            return;
        }
        if self.groups.len() >= limit.max(1024) {
            self.groups = Vec::new();
            self.overflowed = true;
        } else {
            self.groups.push(id);
        }
    }

    /// The groups noted since the last take, without taking them, or `None` when there were too many
    /// to list.
    #[must_use]
    pub fn peek(&self) -> Option<&[GroupId]> {
        (!self.overflowed).then_some(self.groups.as_slice())
    }

    /// The groups noted since the last take, or `None` when there were too many to list.
    pub fn take(&mut self) -> Option<Vec<GroupId>> {
        let overflowed = std::mem::take(&mut self.overflowed);
        let groups = std::mem::take(&mut self.groups);
        (!overflowed).then_some(groups)
    }
}

impl Cluster {
    /// The tasks holding a reservation (`Assumed::Pipelined`) and when each lapses, in slot order:
    /// found from the tasks changed since the last call, not by a look at every task (every session
    /// opens and closes with them).
    pub fn pipelined_tasks(&mut self) -> Vec<(TaskId, Millis)> {
        let pipelined = |t: &Task| match t.assumed {
            Assumed::Pipelined { until, .. } => Some(until),
            _ => None,
        };
        let slots = self.pipelined.sync(&self.tasks, |t| pipelined(t).is_some());
        let found: Vec<(TaskId, Millis)> = slots
            .iter()
            .filter_map(|&i| Some((TaskId(i), pipelined(self.tasks.get(i)?)?)))
            .collect();
        debug_assert_eq!(
            found,
            self.tasks
                .iter()
                .filter_map(|(i, t)| Some((TaskId(i), pipelined(t)?)))
                .collect::<Vec<_>>(),
            "tracked reservations differ from the tasks'"
        );
        found
    }

    /// Our pending pods that scheduling cannot take up on a gang's account: those without a gang and
    /// those with a problem of their own (a bad annotation), in slot order (found as
    /// [`Self::pipelined_tasks`] are).
    pub fn pending_without_gang(&mut self) -> Vec<TaskId> {
        let without = |t: &Task| {
            t.ours && t.status == TaskStatus::Pending && (t.problem.is_some() || t.group.is_none())
        };
        let found: Vec<TaskId> = self
            .without_gang
            .sync(&self.tasks, without)
            .iter()
            .map(|&i| TaskId(i))
            .collect();
        debug_assert_eq!(
            found,
            self.tasks
                .iter()
                .filter(|(_, t)| without(t))
                .map(|(i, _)| TaskId(i))
                .collect::<Vec<_>>(),
            "tracked pods without a gang differ from the tasks'"
        );
        found
    }

    /// The served node pool's name as KAI writes it: the pool label's value, `default` without one.
    #[must_use]
    pub fn node_pool_name(&self) -> &str {
        self.node_pool.as_deref().unwrap_or(api::keys::DEFAULT_NODE_POOL)
    }

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

    /// Replaces the queues' historical usage; a change is a change a cycle reads (fair shares move).
    pub fn set_historical_usage(&mut self, usage: super::HistoricalUsage) {
        if usage != self.historical_usage {
            self.historical_usage = usage;
            self.epochs.changed();
        }
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
}
