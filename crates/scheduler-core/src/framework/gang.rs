//! A gang as one scheduling unit: a root PodGroup, the PodGroups below it (`parentPodGroup`), and the
//! sub-groups inside each, flattened into one tree of [`GangNode`]s.
//!
//! A leaf is satisfied when at least `min` of its pods are active (pipelined, binding, bound, running); an
//! inner node when at least `min` of its children are satisfied. The gang is placed when its root is
//! satisfied, all of it or none of it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::group::TopologyRequirement;
use crate::model::{
    Cluster, GroupId, GroupKey, GroupKind, GroupProblem, QueueId, Resources, SlotBits, TaskId, TaskStatus,
};

/// A node of the gang tree.
#[derive(Clone, Debug)]
pub struct GangNode {
    /// Name (PodGroup name, sub-group name, or `default`).
    pub name: Arc<str>,
    /// Leaf: active pods needed. Inner: satisfied children needed.
    pub min: u32,
    /// Leaf: most pods to place (elastic maximum).
    pub max: Option<u32>,
    /// Children (inner nodes).
    pub children: Vec<usize>,
    /// Pods (leaves).
    pub tasks: Vec<TaskId>,
    /// Placement constraint of this node's pods.
    pub topology: Option<TopologyRequirement>,
    /// PodGroup this node comes from.
    pub group: GroupId,
}

impl GangNode {
    fn is_leaf(&self) -> bool {
        self.children.is_empty()
    }
}

/// A scheduling unit.
#[derive(Clone, Debug)]
pub struct Gang {
    /// The root PodGroup.
    pub root: GroupId,
    /// Every PodGroup of the unit, root first.
    pub groups: Vec<GroupId>,
    /// The tree; `nodes[0]` is the root.
    pub nodes: Vec<GangNode>,
    /// Queue (of the root).
    pub queue: Option<QueueId>,
    /// Priority (of the root).
    pub priority: i32,
    /// Preemptible (root).
    pub preemptible: bool,
    /// Creation time of the root.
    pub created: i64,
    /// The sum of its PodGroups' versions when built (the same while it is carried: a version changes
    /// only with its PodGroup, which then is built again).
    pub version: u64,
    /// What its next attempt asks for when built ([`Self::next_request`]; the same until a pod of it
    /// changes, in the model or in a session).
    pub next_request_at_build: Resources,
    /// Whether it was satisfied when built (the same until a pod of it changes: see
    /// `Session::gang_satisfied`).
    pub satisfied_at_build: bool,
    /// The one shape its pods shared when built, if it was one PodGroup without sub-groups or topology
    /// whose pods were all plain then ([`PlainPod::of`]); allocate answers like gangs by it. Found at
    /// the first ask while its pods are as built ([`Self::plain_pod_as_built`]): most gangs are
    /// never asked.
    plain_pod_at_build: std::sync::OnceLock<Option<PlainPod>>,
    /// Its pods (the tree's leaves' lists, which a built gang keeps).
    pub pod_count: usize,
    /// Whether a pod of its own waited when built ([`Self::pending`]; the same until a pod of it
    /// changes).
    pub pending_at_build: bool,
    /// Whether a pod of it held a node (bound, running or assumed) when built; the same until a pod of
    /// it changes (see `Session::gang_has_placed_pod`).
    pub placed_at_build: bool,
    /// Whether enough of its pods could be placed when built ([`Self::ready`]; the same until a pod of it
    /// changes). Found at the first ask while its pods are as built ([`Self::coverable_as_built`]).
    coverable_at_build: std::sync::OnceLock<bool>,
    /// Whether a pod of it had a failed bind (set only as a pod changes, which builds it again).
    pub bind_failure_at_build: bool,
    /// Whether a pod of it has rules about other pods (set only with the pod).
    pub pod_rules_at_build: bool,
}

/// What a plain pod asks for and where it may go, with a fingerprint of the three: a backlog's like
/// gangs are looked up by it every cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlainPod {
    /// Folded from the rest (compared first: unlike pods differ here almost always).
    pub fingerprint: u64,
    /// Its request.
    pub request: Resources,
    /// Its GPU request.
    pub gpu: crate::model::GpuRequest,
    /// Its node constraints.
    pub constraints: crate::model::constraints::ConstraintsId,
}

impl std::hash::Hash for PlainPod {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.fingerprint);
    }
}

impl PlainPod {
    /// Whether a pod is plain (see [`Self::of`]).
    fn is_plain(task: &crate::model::Task) -> bool {
        task.ours
            && task.status == TaskStatus::Pending
            && task.problem.is_none()
            && task.bind_failure.is_none()
            && task.claims.is_empty()
            && task.reservation_for.is_none()
            && task.gpu_device.is_none()
    }

    /// The shape of task `t` if it is plain: ours, pending, without a problem, a failed bind, claims, a
    /// reservation or a chosen device, so that where it goes depends on the nodes alone (rules about
    /// other pods, which change with them, are checked apart).
    #[must_use]
    pub fn of(cluster: &Cluster, t: TaskId) -> Option<Self> {
        let task = cluster.task(t);
        if !Self::is_plain(task) {
            return None;
        }
        let folded = u64::from(task.constraints.0) ^ task.request.folded();
        let gpu = match task.gpu {
            crate::model::GpuRequest::None => 0,
            crate::model::GpuRequest::Whole(n) => 1 | (u64::from(n) << 8),
            crate::model::GpuRequest::Fraction { milli, devices } => {
                2 | (u64::from(milli) << 8) | (u64::from(devices) << 32)
            }
            crate::model::GpuRequest::Memory { mib, devices } => {
                3 | (u64::from(mib) << 8) | (u64::from(devices) << 40)
            }
        };
        Some(Self {
            fingerprint: folded ^ gpu.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            request: task.request,
            gpu: task.gpu,
            constraints: task.constraints,
        })
    }
}

/// Why a gang is not ready to be tried.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NotReady {
    /// Fewer pods exist than the gang needs, or some that exist cannot be placed.
    MissingPods {
        /// Pods the gang needs (sum of leaf minimums on the required path).
        needed: u32,
        /// Pods that exist and are not finished.
        existing: u32,
        /// Of those, gated.
        gated: u32,
        /// Of those, waiting pods with a problem of their own (the pod's `problem`): never placed.
        refused: u32,
        /// The first of those by name, and its problem (`namespace/name: problem`).
        refusal: Option<String>,
    },
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::MissingPods {
                needed,
                existing,
                gated,
                refused,
                refusal,
            } => {
                let mut unusable = Vec::new();
                if *gated > 0 {
                    unusable.push(format!("{gated} of them have scheduling gates"));
                }
                if *refused > 0 {
                    let first = refusal.as_deref().unwrap_or("see their PodScheduled condition");
                    unusable.push(format!("{refused} of them cannot be scheduled ({first})"));
                }
                if unusable.is_empty() {
                    write!(
                        f,
                        "waiting for pods: the gang needs {needed}, {existing} exist so far"
                    )
                } else {
                    write!(
                        f,
                        "waiting for pods: the gang needs {needed}, {existing} exist and {}",
                        unusable.join(" and ")
                    )
                }
            }
        }
    }
}

/// Index of PodGroups by (kind, namespace, parentPodGroup), built once per session.
pub type ChildIndex = HashMap<GroupKey, Vec<GroupId>>;

/// A problem of a group's place in the hierarchy (set by [`index_hierarchy`] alone).
fn hierarchy_problem(p: &GroupProblem) -> bool {
    matches!(p, GroupProblem::ParentNotFound(_) | GroupProblem::Cycle(_))
}

/// Whether a group names a parent.
fn names_parent(group: &crate::model::Group) -> bool {
    group.parent_name.as_ref().is_some_and(|p| !p.is_empty())
}

/// The order of the roots: older first, then by key.
fn root_order(cluster: &Cluster, a: GroupId, b: GroupId) -> std::cmp::Ordering {
    let (a, b) = (cluster.group(a), cluster.group(b));
    a.created.cmp(&b.created).then_with(|| a.key.cmp(&b.key))
}

/// Builds the child index and records `ParentNotFound`/`Cycle` problems on groups whose
/// `parentPodGroup` chain is broken. Returns the index, the root gangs' ids and whether the hierarchy
/// is flat (no group names a parent: every group is a root, none has a hierarchy problem).
pub fn index_hierarchy(cluster: &mut Cluster) -> (ChildIndex, Vec<GroupId>, bool) {
    let mut children: ChildIndex = HashMap::new();
    let mut roots = Vec::new();
    let ids: Vec<GroupId> = cluster.groups.iter().map(|(i, _)| GroupId(i)).collect();
    let mut flat = true;
    for id in &ids {
        // Only groups that carry one are written: a write marks the group changed (`Arena::stamp`),
        // and the next session would build its gang again.
        if cluster.group(*id).problems.iter().any(hierarchy_problem) {
            cluster.group_mut(*id).problems.retain(|p| !hierarchy_problem(p));
        }
    }
    for id in &ids {
        let group = cluster.group(*id);
        let Some(parent) = group.parent_name.clone().filter(|p| !p.is_empty()) else {
            roots.push(*id);
            continue;
        };
        flat = false;
        let parent_key = GroupKey {
            kind: GroupKind::Kai,
            namespace: group.key.namespace.clone(),
            name: parent.clone(),
        };
        if cluster.group_id(&parent_key).is_none() {
            cluster
                .group_mut(*id)
                .problems
                .push(GroupProblem::ParentNotFound(parent.to_string()));
            roots.push(*id);
            continue;
        }
        // Walk up to detect a cycle.
        let mut seen = vec![*id];
        let mut cur = cluster.group_id(&parent_key);
        let mut cycle = None;
        while let Some(g) = cur {
            if seen.contains(&g) {
                let names: Vec<String> = seen
                    .iter()
                    .map(|s| cluster.group(*s).key.name.to_string())
                    .collect();
                cycle = Some(format!(
                    "parentPodGroup {} -> {}",
                    names.join(" -> "),
                    cluster.group(g).key.name
                ));
                break;
            }
            seen.push(g);
            let next = cluster.group(g).parent_name.clone().filter(|p| !p.is_empty());
            cur = next.and_then(|n| {
                cluster.group_id(&GroupKey {
                    kind: GroupKind::Kai,
                    namespace: parent_key.namespace.clone(),
                    name: n,
                })
            });
        }
        if let Some(cycle) = cycle {
            cluster.group_mut(*id).problems.push(GroupProblem::Cycle(cycle));
            roots.push(*id);
            continue;
        }
        children.entry(parent_key).or_default().push(*id);
    }
    // Compared in place: a key cloned per comparison was most of a session's opening with thousands
    // of groups.
    for list in children.values_mut() {
        list.sort_by(|a, b| cluster.group(*a).key.name.cmp(&cluster.group(*b).key.name));
    }
    roots.sort_by(|a, b| root_order(cluster, *a, *b));
    (children, roots, flat)
}

/// The roots [`index_hierarchy`] would find in a flat hierarchy, from those of the last session, which
/// found it flat (`last`, in root order), and the group arena's change log since that session's clock
/// `since`: an unchanged group keeps its place, a changed one is placed again (a churn cycle sorts its
/// new groups, not every group). `None` (index it all) when the log no longer reaches back, or a
/// changed group names a parent or carries a hierarchy problem.
#[must_use]
pub fn roots_of_flat(cluster: &Cluster, last: &[GroupId], since: u64) -> Option<Vec<GroupId>> {
    let changed = cluster.groups.changed_since(since)?;
    let mut seen = SlotBits::with_slots(cluster.groups.capacity());
    let mut fresh = Vec::new();
    for &slot in changed {
        // Seen already, or beyond the arena.
        if !seen.insert(slot as usize) {
            continue;
        }
        if let Some(group) = cluster.groups.get(slot) {
            if names_parent(group) || group.problems.iter().any(hierarchy_problem) {
                return None;
            }
            fresh.push(GroupId(slot));
        }
    }
    fresh.sort_by(|a, b| root_order(cluster, *a, *b));
    let kept = |id: GroupId| !seen.get(id.index()).unwrap_or(true);
    // Each changed group's place among the kept ones by bisection over the last roots, the few changed
    // ones among them stepped over: new groups are mostly the newest, and walking to the end compared
    // (and read) every kept group; nor is the list of kept roots copied out first.
    let mut places = Vec::with_capacity(fresh.len());
    let mut from = 0;
    for &id in &fresh {
        // Kept roots in `from..lo` come before `id`, kept roots in `hi..` after it.
        let (mut lo, mut hi) = (from, last.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let next_kept = (mid..hi).find(|&j| kept(last[j]));
            match next_kept {
                Some(j) if root_order(cluster, last[j], id).is_lt() => lo = j + 1,
                _ => hi = mid,
            }
        }
        places.push(lo);
        from = lo;
    }
    let mut roots = Vec::with_capacity(last.len() + fresh.len());
    let mut fresh = fresh.iter().zip(places).peekable();
    for (i, &id) in last.iter().enumerate() {
        while let Some((&f, _)) = fresh.next_if(|(_, at)| *at == i) {
            roots.push(f);
        }
        if kept(id) {
            roots.push(id);
        }
    }
    roots.extend(fresh.map(|(&f, _)| f));
    Some(roots)
}

/// The roots in order (`roots`, the order `roots_of_flat` keeps) with the groups the backlog let go
/// (`released`) placed among them: those that still exist, are not `held` again and are not there
/// yet. A session's carried roots leave the kept gangs out, so that opening does not step over the
/// thousands a long queue keeps; each gang let go is placed by bisection.
#[must_use]
pub fn with_released(
    cluster: &Cluster,
    roots: Vec<GroupId>,
    mut released: Vec<GroupId>,
    held: impl Fn(GroupId) -> bool,
) -> Vec<GroupId> {
    released.retain(|&g| cluster.groups.get(g.0).is_some() && !held(g));
    if released.is_empty() {
        return roots;
    }
    released.sort_by(|a, b| root_order(cluster, *a, *b));
    released.dedup();
    // Each new group's place; one already among the roots (changed, so placed by `roots_of_flat`) is
    // found there and left out.
    let mut places = Vec::with_capacity(released.len());
    for &id in &released {
        match roots.binary_search_by(|r| root_order(cluster, *r, id)) {
            Ok(_) => {}
            Err(at) => places.push((at, id)),
        }
    }
    if places.is_empty() {
        return roots;
    }
    let mut merged = Vec::with_capacity(roots.len() + places.len());
    let mut from = 0;
    for (at, id) in places {
        merged.extend_from_slice(roots.get(from..at).unwrap_or_default());
        merged.push(id);
        from = at;
    }
    merged.extend_from_slice(roots.get(from..).unwrap_or_default());
    merged
}

impl Gang {
    /// Builds the unit rooted at `root` with every PodGroup below it.
    #[must_use]
    pub fn build(cluster: &Cluster, children: &ChildIndex, root: GroupId) -> Self {
        let group = cluster.group(root);
        let mut gang = Self {
            root,
            // Most gangs are one PodGroup: room for it without a grow.
            groups: Vec::with_capacity(1),
            nodes: Vec::with_capacity(1),
            queue: group.queue,
            priority: group.priority,
            preemptible: group.preemptible,
            created: group.created,
            version: 0,
            next_request_at_build: Resources::ZERO,
            satisfied_at_build: false,
            plain_pod_at_build: std::sync::OnceLock::new(),
            pod_count: 0,
            pending_at_build: false,
            placed_at_build: false,
            coverable_at_build: std::sync::OnceLock::new(),
            bind_failure_at_build: false,
            pod_rules_at_build: false,
        };
        gang.add_group(cluster, children, root, 0);
        gang.version = gang.live_version(cluster);
        // One pass over its pods for what is read of each alone.
        let (mut pods, mut pending, mut any_pending) = (0, false, false);
        let (mut bind_failure, mut pod_rules, mut placed) = (false, false, false);
        for t in gang.tasks() {
            let task = cluster.task(t);
            pods += 1;
            placed |= task.status.is_allocated();
            any_pending |= task.status == TaskStatus::Pending;
            pending |= task.status == TaskStatus::Pending && task.ours;
            bind_failure |= task.bind_failure.is_some();
            pod_rules |= task.rules != crate::model::pod_rules::PodRulesId(0);
        }
        gang.pod_count = pods;
        gang.pending_at_build = pending;
        gang.placed_at_build = placed;
        gang.bind_failure_at_build = bind_failure;
        gang.pod_rules_at_build = pod_rules;
        // Without a waiting pod (its own or another scheduler's) it asks for nothing.
        if any_pending {
            gang.next_request_at_build = gang.next_request(cluster);
        }
        gang.satisfied_at_build = gang.is_satisfied(cluster);
        gang
    }

    /// [`Self::plain_pod`] as the gang was built. Only while its pods are as built (the caller knows:
    /// `Session::gang_touched`): the first answer is kept.
    pub fn plain_pod_as_built(&self, cluster: &Cluster) -> Option<PlainPod> {
        let kept = *self.plain_pod_at_build.get_or_init(|| self.plain_pod(cluster));
        debug_assert_eq!(kept, self.plain_pod(cluster), "pods changed since built");
        kept
    }

    /// Whether enough of its pods could be placed ([`Self::ready`]) as the gang was built. Only while
    /// its pods are as built (the caller knows: `Session::gang_touched`): the first answer is kept.
    pub fn coverable_as_built(&self, cluster: &Cluster) -> bool {
        let kept = *self.coverable_at_build.get_or_init(|| self.coverable(cluster, 0));
        debug_assert_eq!(kept, self.coverable(cluster, 0), "pods changed since built");
        kept
    }

    /// The one shape its pods share, if it is one PodGroup without sub-groups or topology whose pods
    /// are all plain ([`PlainPod::of`]).
    #[must_use]
    pub fn plain_pod(&self, cluster: &Cluster) -> Option<PlainPod> {
        if self.nodes.len() != 1 || self.nodes[0].topology.is_some() {
            return None;
        }
        let mut tasks = self.tasks();
        let shared = PlainPod::of(cluster, tasks.next()?)?;
        // The others are compared with the first as they are, not fingerprinted each.
        tasks
            .all(|t| {
                let task = cluster.task(t);
                PlainPod::is_plain(task)
                    && task.request == shared.request
                    && task.gpu == shared.gpu
                    && task.constraints == shared.constraints
            })
            .then_some(shared)
    }

    /// The sum of its PodGroups' versions in the model now (the no-fit memo's key: any change of a
    /// PodGroup may change its gang's answer).
    #[must_use]
    pub fn live_version(&self, cluster: &Cluster) -> u64 {
        self.groups.iter().map(|id| cluster.group(*id).version).sum()
    }

    /// What its next attempt asks for (compared across queues by fair share): its pending pods up to
    /// its minimum, at least one.
    #[must_use]
    pub fn next_request(&self, cluster: &Cluster) -> Resources {
        let active = self
            .tasks()
            .filter(|t| cluster.task(*t).status.is_active_allocated())
            .count();
        let missing = (self.required_pods(0) as usize).saturating_sub(active).max(1);
        let mut total = Resources::ZERO;
        for t in self
            .tasks()
            .filter(|t| cluster.task(*t).status == TaskStatus::Pending)
            .take(missing)
        {
            total.add(&crate::framework::policy::fairness::share_request(cluster, t));
        }
        total
    }

    /// Adds a PodGroup (and its children) as a node; returns its index.
    fn add_group(&mut self, cluster: &Cluster, children: &ChildIndex, id: GroupId, depth: usize) -> usize {
        let group = cluster.group(id);
        self.groups.push(id);
        let index = self.nodes.len();
        self.nodes.push(GangNode {
            name: group.key.name.clone(),
            min: group.min_member,
            max: group.max_member,
            children: Vec::new(),
            tasks: Vec::new(),
            topology: group.topology.clone(),
            group: id,
        });
        let child_groups = if depth < 16 {
            children.get(&group.key).cloned().unwrap_or_default()
        } else {
            Vec::new()
        };
        if !child_groups.is_empty() {
            // A parent of other PodGroups: minMember counts satisfied children (seed 000, step 5).
            let mut kids = Vec::new();
            for c in child_groups {
                kids.push(self.add_group(cluster, children, c, depth + 1));
            }
            let own = self.leaf_for_members(cluster, id, "own-pods", 0, &group.tasks);
            kids.extend(own);
            let n = u32::try_from(kids.len()).unwrap_or(u32::MAX);
            let min = if group.min_member == 0 || group.min_member > n {
                n
            } else {
                group.min_member
            };
            self.nodes[index].min = min;
            self.nodes[index].max = None;
            self.nodes[index].children = kids;
        } else if !group.subgroups.is_empty() {
            self.add_subgroups(cluster, id, index);
        } else {
            self.nodes[index].tasks = self.live_tasks(cluster, &group.tasks);
        }
        index
    }

    /// KAI sub-groups: a node per declared sub-group under the PodGroup's node; pods by label.
    fn add_subgroups(&mut self, cluster: &Cluster, id: GroupId, index: usize) {
        let group = cluster.group(id);
        let base = self.nodes.len();
        for sub in &group.subgroups {
            self.nodes.push(GangNode {
                name: sub.name.clone(),
                min: sub.min_member,
                max: None,
                children: Vec::new(),
                tasks: Vec::new(),
                topology: sub.topology.clone(),
                group: id,
            });
        }
        let mut top = Vec::new();
        for (i, sub) in group.subgroups.iter().enumerate() {
            match sub.parent {
                Some(p) => self.nodes[base + p].children.push(base + i),
                None => top.push(base + i),
            }
        }
        let mut unlabelled = Vec::new();
        for t in &group.tasks {
            let task = cluster.task(*t);
            if task.status.is_finished() {
                continue;
            }
            let target = task
                .subgroup
                .as_ref()
                .and_then(|s| group.subgroups.iter().position(|d| d.name == *s))
                .filter(|i| self.nodes[base + i].children.is_empty());
            match target {
                Some(i) => self.nodes[base + i].tasks.push(*t),
                None => unlabelled.push(*t),
            }
        }
        // Pods without a (leaf) sub-group label are extra members with no minimum of their own.
        if let Some(extra) = self.leaf_for_members(cluster, id, "default", 0, &unlabelled) {
            top.push(extra);
        }
        // An inner sub-group's minMember counts satisfied children; unset, zero or too large means all.
        for i in base..base + group.subgroups.len() {
            let n = u32::try_from(self.nodes[i].children.len()).unwrap_or(u32::MAX);
            if n > 0 && (self.nodes[i].min == 0 || self.nodes[i].min > n) {
                self.nodes[i].min = n;
            }
        }
        let required = top
            .iter()
            .filter(|c| self.nodes[**c].min > 0 || !self.nodes[**c].is_leaf())
            .count();
        self.nodes[index].children = top;
        self.nodes[index].min = u32::try_from(required).unwrap_or(u32::MAX);
        self.nodes[index].max = None;
    }

    fn leaf_for_members(
        &mut self,
        cluster: &Cluster,
        id: GroupId,
        name: &str,
        min: u32,
        members: &[TaskId],
    ) -> Option<usize> {
        let tasks = self.live_tasks(cluster, members);
        if tasks.is_empty() {
            return None;
        }
        self.nodes.push(GangNode {
            name: name.into(),
            min,
            max: None,
            children: Vec::new(),
            tasks,
            topology: None,
            group: id,
        });
        Some(self.nodes.len() - 1)
    }

    fn live_tasks(&self, cluster: &Cluster, members: &[TaskId]) -> Vec<TaskId> {
        members
            .iter()
            .copied()
            .filter(|t| !cluster.task(*t).status.is_finished())
            .collect()
    }

    /// Active pods of a node's subtree.
    #[must_use]
    pub fn active(&self, cluster: &Cluster, node: usize) -> u32 {
        let n = &self.nodes[node];
        let own = n
            .tasks
            .iter()
            .filter(|t| cluster.task(**t).status.is_active_allocated())
            .count();
        let own = u32::try_from(own).unwrap_or(u32::MAX);
        n.children.iter().map(|c| self.active(cluster, *c)).sum::<u32>() + own
    }

    /// Whether a node (subtree) is satisfied.
    #[must_use]
    pub fn satisfied(&self, cluster: &Cluster, node: usize) -> bool {
        let n = &self.nodes[node];
        if n.is_leaf() {
            self.active(cluster, node) >= n.min
        } else {
            let ok = n.children.iter().filter(|c| self.satisfied(cluster, **c)).count();
            u32::try_from(ok).unwrap_or(u32::MAX) >= n.min
        }
    }

    /// Whether the gang has pods to place (pending, or reserved and waiting to be bound), or waits whole
    /// on pods it cannot place (gated, or with a problem of their own): then it is not tried but says
    /// why. Nothing a session does gives a gang work it had not at open (actions place and evict;
    /// neither makes a pod pending), so a session asks this once per gang at open.
    #[must_use]
    pub fn has_work(&self, cluster: &Cluster) -> bool {
        let placeable = self.tasks().any(|t| {
            let task = cluster.task(t);
            task.ours
                && matches!(task.status, TaskStatus::Pending | TaskStatus::Pipelined)
                && task.problem.is_none()
        });
        placeable
            || (self.tasks().any(|t| {
                let task = cluster.task(t);
                task.ours
                    && (task.status == TaskStatus::Gated
                        || (task.status == TaskStatus::Pending && task.problem.is_some()))
            }) && !self.is_satisfied(cluster))
    }

    /// Whether the whole unit is satisfied.
    #[must_use]
    pub fn is_satisfied(&self, cluster: &Cluster) -> bool {
        self.satisfied(cluster, 0)
    }

    /// Every member task, leaves in order.
    pub fn tasks(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.nodes.iter().flat_map(|n| n.tasks.iter().copied())
    }

    /// Pending members.
    pub fn pending<'a>(&'a self, cluster: &'a Cluster) -> impl Iterator<Item = TaskId> + 'a {
        self.tasks()
            .filter(|t| cluster.task(*t).status == TaskStatus::Pending && cluster.task(*t).ours)
    }

    /// Whether enough pods exist for the gang to be tried (KAI's readiness: alive non-gated pods cover
    /// every required minimum). Pods being deleted or finished are not alive: counting them would let a
    /// controller's first replacement pod of an evicted gang be bound alone.
    ///
    /// # Errors
    /// How many pods are missing.
    pub fn ready(&self, cluster: &Cluster) -> Result<(), NotReady> {
        if self.coverable(cluster, 0) {
            return Ok(());
        }
        let needed = self.required_pods(0);
        let mut existing = 0;
        let mut gated = 0;
        let mut refused = 0;
        let mut refusal: Option<(String, &str)> = None;
        for t in self.tasks() {
            let task = cluster.task(t);
            if is_alive(task.status) {
                existing += 1;
            }
            if task.status == TaskStatus::Gated {
                gated += 1;
            }
            if let Some(problem) = refused_for(cluster, t) {
                refused += 1;
                let key = task.key();
                if refusal.as_ref().is_none_or(|(first, _)| key < *first) {
                    refusal = Some((key, problem));
                }
            }
        }
        Err(NotReady::MissingPods {
            needed,
            existing,
            gated,
            refused,
            refusal: refusal.map(|(key, problem)| format!("{key}: {problem}")),
        })
    }

    /// Whether the subtree has enough non-gated pods to be satisfied.
    fn coverable(&self, cluster: &Cluster, node: usize) -> bool {
        let n = &self.nodes[node];
        if n.is_leaf() {
            let usable = n
                .tasks
                .iter()
                .filter(|t| {
                    let status = cluster.task(**t).status;
                    is_alive(status) && status != TaskStatus::Gated && refused_for(cluster, **t).is_none()
                })
                .count();
            u32::try_from(usable).unwrap_or(u32::MAX) >= n.min
        } else {
            let ok = n.children.iter().filter(|c| self.coverable(cluster, **c)).count();
            u32::try_from(ok).unwrap_or(u32::MAX) >= n.min
        }
    }

    /// Pods needed to satisfy a subtree (the cheapest children for inner nodes). Saturating: the
    /// minimums are the user's, and a sum past `u32::MAX` is as unreachable as the maximum itself.
    #[must_use]
    pub fn required_pods(&self, node: usize) -> u32 {
        let n = &self.nodes[node];
        if n.is_leaf() {
            n.min
        } else {
            let mut costs: Vec<u32> = n.children.iter().map(|c| self.required_pods(*c)).collect();
            costs.sort_unstable();
            costs
                .iter()
                .take(n.min as usize)
                .fold(0, |sum, c| sum.saturating_add(*c))
        }
    }

    /// The pods to try to place now (KAI's `GetTasksToAllocate`): for an unsatisfied unit, exactly the
    /// shortfall of each unsatisfied part; for a satisfied (elastic) unit, one more pod from the least
    /// filled leaf below its maximum. Pods come in `order` (task order) within a leaf.
    #[must_use]
    pub fn tasks_to_allocate(
        &self,
        cluster: &Cluster,
        order: &dyn Fn(TaskId, TaskId) -> std::cmp::Ordering,
    ) -> Vec<TaskId> {
        let mut out = Vec::new();
        if self.is_satisfied(cluster) {
            // Elastic growth: one pod from the leaf with the lowest fill ratio that may still grow.
            let mut best: Option<(u64, usize)> = None;
            for (i, n) in self.nodes.iter().enumerate() {
                if !n.is_leaf() {
                    continue;
                }
                let active = self.active(cluster, i);
                if n.max.is_some_and(|m| active >= m)
                    || !n.tasks.iter().any(|t| self.is_candidate(cluster, *t))
                {
                    continue;
                }
                // Ratio active/min scaled; a leaf with min 0 counts as very full so minimums go first.
                let ratio = if n.min == 0 {
                    u64::MAX / 2 + u64::from(active)
                } else {
                    u64::from(active) * 1000 / u64::from(n.min)
                };
                if best.is_none_or(|(r, _)| ratio < r) {
                    best = Some((ratio, i));
                }
            }
            if let Some((_, leaf)) = best {
                let mut pending: Vec<TaskId> = self.nodes[leaf]
                    .tasks
                    .iter()
                    .copied()
                    .filter(|t| self.is_candidate(cluster, *t))
                    .collect();
                pending.sort_by(|a, b| order(*a, *b));
                out.extend(pending.first());
            }
            return out;
        }
        self.collect_shortfall(cluster, 0, order, &mut out);
        out
    }

    fn is_candidate(&self, cluster: &Cluster, t: TaskId) -> bool {
        let task = cluster.task(t);
        task.ours && task.status == TaskStatus::Pending && task.problem.is_none()
    }

    fn collect_shortfall(
        &self,
        cluster: &Cluster,
        node: usize,
        order: &dyn Fn(TaskId, TaskId) -> std::cmp::Ordering,
        out: &mut Vec<TaskId>,
    ) {
        let n = &self.nodes[node];
        if self.satisfied(cluster, node) {
            return;
        }
        if n.is_leaf() {
            let missing = n.min.saturating_sub(self.active(cluster, node)) as usize;
            let mut pending: Vec<TaskId> = n
                .tasks
                .iter()
                .copied()
                .filter(|t| self.is_candidate(cluster, *t))
                .collect();
            pending.sort_by(|a, b| order(*a, *b));
            out.extend(pending.into_iter().take(missing));
            return;
        }
        let satisfied = n.children.iter().filter(|c| self.satisfied(cluster, **c)).count();
        let mut needed = (n.min as usize).saturating_sub(satisfied);
        // Unsatisfied children, the closest to satisfied first, then by name for determinism.
        let mut candidates: Vec<usize> = n
            .children
            .iter()
            .copied()
            .filter(|c| !self.satisfied(cluster, *c))
            .collect();
        candidates.sort_by_key(|c| {
            let missing = self.required_pods(*c).saturating_sub(self.active(cluster, *c));
            (missing, self.nodes[*c].name.clone())
        });
        for c in candidates {
            if needed == 0 {
                break;
            }
            self.collect_shortfall(cluster, c, order, out);
            needed -= 1;
        }
    }

    /// The pods to evict when this unit is a victim (KAI's `GetTasksToEvict`): one surplus pod of an
    /// elastic leaf above its minimum if there is one, else every active pod (the whole gang goes).
    #[must_use]
    pub fn tasks_to_evict(
        &self,
        cluster: &Cluster,
        order: &dyn Fn(TaskId, TaskId) -> std::cmp::Ordering,
    ) -> Vec<TaskId> {
        for (i, n) in self.nodes.iter().enumerate() {
            if n.is_leaf() && self.active(cluster, i) > n.min {
                let mut active: Vec<TaskId> = n
                    .tasks
                    .iter()
                    .copied()
                    .filter(|t| cluster.task(*t).status.is_allocated() && cluster.task(*t).ours)
                    .collect();
                // The last in task order goes first.
                active.sort_by(|a, b| order(*b, *a));
                if let Some(t) = active.first() {
                    return vec![*t];
                }
            }
        }
        self.tasks()
            .filter(|t| cluster.task(*t).status.is_allocated())
            .collect()
    }
}

/// The problem of a waiting pod that can never be placed as it is (bad annotation, resources that cannot
/// be counted, resource claims): it counts as missing from its gang, which so waits whole instead of
/// starting without it.
fn refused_for(cluster: &Cluster, t: TaskId) -> Option<&str> {
    let task = cluster.task(t);
    task.problem
        .as_deref()
        .filter(|_| task.status == TaskStatus::Pending)
}

/// KAI's *alive* pods: waiting, gated or placed; not being deleted and not finished.
fn is_alive(status: TaskStatus) -> bool {
    status == TaskStatus::Pending || status == TaskStatus::Gated || status.is_active_allocated()
}

#[cfg(test)]
mod tests {
    use super::PlainPod;
    use crate::framework::Session;
    use crate::model::Resources;
    use crate::sim::{GangSpec, Sim};

    /// The shape each gang's pods shared when built, by gang name.
    fn plain_pods(sim: &mut Sim) -> std::collections::BTreeMap<String, Option<PlainPod>> {
        let config = sim.config.clone();
        let ssn = Session::open(&mut sim.cluster, &config, 1_000_000);
        ssn.gangs
            .iter()
            .map(|g| (g.nodes[0].name.to_string(), g.plain_pod_as_built(ssn.cluster)))
            .collect()
    }

    #[test]
    fn like_pods_share_a_plain_shape_and_unlike_ones_do_not() {
        let mut sim = Sim::new();
        sim.node("n1", 64_000, 256, 8)
            .gang(GangSpec::new("a", "default", 2).gpus(2))
            .gang(GangSpec::new("b", "default", 1).gpus(2))
            .gang(GangSpec::new("c", "default", 1).gpus(4))
            .gang(GangSpec::new("d", "default", 1).gpus(2).selector("zone", "z1"))
            .gang(GangSpec::new("running", "default", 1).gpus(2).running_on(&["n1"]));
        let pods = plain_pods(&mut sim);
        let (a, b, c, d) = (
            pods["a"].unwrap(),
            pods["b"].unwrap(),
            pods["c"].unwrap(),
            pods["d"].unwrap(),
        );
        assert_eq!(a, b, "two gangs of the same pods");
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_ne!(a, c, "another GPU count");
        assert_ne!(a.fingerprint, c.fingerprint);
        assert_ne!(a, d, "a node selector");
        assert_ne!(a.fingerprint, d.fingerprint);
        assert_eq!(pods["running"], None, "a placed pod is not plain");
    }

    /// The groups' names in the order given.
    fn names(sim: &Sim, ids: &[crate::model::GroupId]) -> Vec<String> {
        ids.iter()
            .map(|id| sim.cluster.group(*id).key.name.to_string())
            .collect()
    }

    #[test]
    fn a_flat_hierarchy_s_roots_are_kept_and_only_changed_groups_placed_again() {
        let mut sim = Sim::new();
        sim.node("n1", 64_000, 256, 8)
            .gang(GangSpec::new("a", "default", 1).created(10))
            .gang(GangSpec::new("b", "default", 1).created(30))
            .gang(GangSpec::new("c", "default", 1).created(20));
        let (children, roots, flat) = super::index_hierarchy(&mut sim.cluster);
        assert!(children.is_empty() && flat);
        assert_eq!(names(&sim, &roots), ["a", "c", "b"], "older first");
        let since = sim.cluster.groups.clock();
        // A group older than two kept ones arrives, and one goes.
        sim.gang(GangSpec::new("d", "default", 1).created(15));
        let b = sim.cluster.group(roots[2]).key.clone();
        sim.cluster.remove_group(&b);
        let kept = super::roots_of_flat(&sim.cluster, &roots, since).expect("the log reaches back");
        assert_eq!(names(&sim, &kept), ["a", "d", "c"]);
        let (_, full, flat) = super::index_hierarchy(&mut sim.cluster);
        assert_eq!(kept, full);
        assert!(flat);
        // A changed group that names a parent: the hierarchy is indexed in full.
        let since = sim.cluster.groups.clock();
        sim.cluster.group_mut(full[1]).parent_name = Some("a".into());
        assert_eq!(super::roots_of_flat(&sim.cluster, &full, since), None);
        let (children, roots, flat) = super::index_hierarchy(&mut sim.cluster);
        assert!(!flat);
        assert_eq!(children.values().map(Vec::len).sum::<usize>(), 1);
        assert_eq!(names(&sim, &roots), ["a", "c"]);
    }

    #[test]
    fn gangs_the_backlog_lets_go_take_their_places_among_the_carried_roots() {
        let mut sim = Sim::new();
        sim.node("n1", 64_000, 256, 8);
        for (name, created) in [("a", 10), ("b", 20), ("c", 30), ("d", 40), ("e", 50), ("f", 60)] {
            sim.gang(GangSpec::new(name, "default", 1).created(created));
        }
        let (_, full, _) = super::index_hierarchy(&mut sim.cluster);
        let by_name = names(&sim, &full);
        let id = |name: &str| full[by_name.iter().position(|n| n == name).unwrap()];
        // Carried without the kept b, d and f; then b and d are let go, d kept again, and e (never
        // kept, already placed) and a deleted one listed too.
        let carried: Vec<crate::model::GroupId> = ["a", "c", "e"].iter().map(|n| id(n)).collect();
        let gone = sim.cluster.group(id("f")).key.clone();
        sim.cluster.remove_group(&gone);
        let released = vec![id("d"), id("e"), id("f"), id("b"), id("b")];
        let held = id("d");
        let roots = super::with_released(&sim.cluster, carried.clone(), released, |g| g == held);
        assert_eq!(names(&sim, &roots), ["a", "b", "c", "e"]);
        // Nothing to place: the roots as they were.
        assert_eq!(
            super::with_released(&sim.cluster, carried.clone(), vec![id("a")], |_| false),
            carried
        );
        // Let go before the first and after the last.
        let ends = super::with_released(&sim.cluster, vec![id("c")], vec![id("e"), id("a")], |_| false);
        assert_eq!(names(&sim, &ends), ["a", "c", "e"]);
    }

    #[test]
    fn kept_roots_match_a_full_index_after_runs_of_changes_anywhere() {
        // Rounds of arrivals (oldest, newest, in between), removals and rewrites of existing groups
        // (a run of neighbours, the first, the last): the changed ones are stepped over in the
        // bisection and placed again.
        let mut sim = Sim::new();
        sim.node("n1", 64_000, 256, 8);
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for i in 0..40 {
            sim.gang(
                GangSpec::new(&format!("g{i}"), "default", 1).created(i64::try_from(next(1000)).unwrap()),
            );
        }
        let (_, mut roots, _) = super::index_hierarchy(&mut sim.cluster);
        let mut made = 40;
        for round in 0..30 {
            let since = sim.cluster.groups.clock();
            for _ in 0..next(4) {
                let created = [0, 2000, i64::try_from(next(1000)).unwrap()][round % 3];
                sim.gang(GangSpec::new(&format!("g{made}"), "default", 1).created(created));
                made += 1;
            }
            if roots.len() > 8 && next(2) == 0 {
                let key = sim
                    .cluster
                    .group(roots[usize::try_from(next(roots.len() as u64)).unwrap()])
                    .key
                    .clone();
                sim.cluster.remove_group(&key);
            }
            // A run of neighbours written (a place in root order they keep), then one moved.
            let start = usize::try_from(next(roots.len() as u64)).unwrap();
            for &id in roots.iter().skip(start).take(usize::try_from(next(5)).unwrap()) {
                if sim.cluster.groups.get(id.0).is_some() {
                    sim.cluster.group_mut(id).priority += 1;
                }
            }
            for &id in [roots[0], roots[roots.len() - 1]].iter() {
                if sim.cluster.groups.get(id.0).is_some() && next(2) == 0 {
                    sim.cluster.group_mut(id).created = i64::try_from(next(1000)).unwrap();
                }
            }
            let kept = super::roots_of_flat(&sim.cluster, &roots, since).expect("the log reaches back");
            let (_, full, flat) = super::index_hierarchy(&mut sim.cluster);
            assert!(flat);
            assert_eq!(kept, full, "round {round}");
            roots = full;
        }
        assert!(roots.len() > 40, "{}", roots.len());
    }

    #[test]
    fn a_fingerprint_collision_still_tells_shapes_apart() {
        let one = PlainPod {
            fingerprint: 7,
            request: Resources::new(1000, 0, 1),
            gpu: crate::model::GpuRequest::Whole(1),
            constraints: crate::model::constraints::ConstraintsId(0),
        };
        let other = PlainPod {
            request: Resources::new(2000, 0, 1),
            ..one
        };
        assert_ne!(one, other);
        let mut shapes = std::collections::HashSet::new();
        shapes.insert(one);
        assert!(!shapes.contains(&other));
        assert!(shapes.contains(&one));
    }
}
