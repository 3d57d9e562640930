//! The queue tree: configuration, computed fair shares and the session's accounting state.
//!
//! The tree owns everything fair share needs: the queues (arena-indexed by [`QueueId`]), their
//! quota/limit/weight, the fair shares computed by [`QueueTree::divide`], and the one mutable part,
//! the [`Accounting`] (allocated, allocated non-preemptible and requested per queue, rolled up to
//! every ancestor). Accounting is kept in exact integer model units so that `allocate` and
//! `deallocate` are exact inverses and a rollback by replaying inverses restores the state bit for
//! bit; it is converted to fair-share units only when compared.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use super::FairShareConfig;
use super::units::{BYTES_PER_MEGABYTE, ShareVec, SlotMask, UNLIMITED};
use crate::model::IdMap;
use crate::model::resources::{CPU, GPU, MEMORY, PODS, ResourceNames, Resources};

/// KAI's default queue priority.
pub const DEFAULT_QUEUE_PRIORITY: i32 = 100;

/// Index of a queue in its [`QueueTree`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct QueueId(u32);

impl QueueId {
    /// The arena index.
    #[must_use]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Whether a job may be evicted by other queues' reclaims (KAI: priority < 100 means preemptible).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Preemptibility {
    /// May be preempted or reclaimed; may run over quota.
    Preemptible,
    /// Never evicted by fairness; must fit within deserved quota at every level.
    NonPreemptible,
}

/// One queue as the caller hands it in, already normalised to fair-share units (see
/// [`super::units`]): quota `-1` unlimited, limit `-1` none, weight 0 takes no surplus.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueSpec {
    /// Queue name (unique; jobs refer to queues by name). Shared with the cluster model's queue, so a
    /// reason naming the queue compares by identity from one cycle to the next.
    pub name: Arc<str>,
    /// Parent queue name; `None` for a top-level queue.
    pub parent: Option<String>,
    /// Higher priority is served surplus first and ordered first. Default 100.
    pub priority: i32,
    /// Creation time (any monotone key, e.g. Unix seconds); older queues win ties.
    pub created: i64,
    /// Tie-break after creation time (KAI uses the UID).
    pub uid: String,
    /// Deserved quota per slot; [`UNLIMITED`] means the whole parent share.
    pub deserved: ShareVec,
    /// Hard limit per slot; [`UNLIMITED`] means none.
    pub limit: ShareVec,
    /// Over-quota weight per slot.
    pub over_quota_weight: ShareVec,
}

impl QueueSpec {
    /// A top-level queue with the project's API defaults: priority 100, quota 0, no limit, weight 1.
    #[must_use]
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Self {
            name: name.into(),
            parent: None,
            priority: DEFAULT_QUEUE_PRIORITY,
            created: 0,
            uid: String::new(),
            deserved: ShareVec::ZERO,
            limit: ShareVec::UNLIMITED,
            over_quota_weight: ShareVec::splat(1.0),
        }
    }

    /// Sets the parent queue.
    #[must_use]
    pub fn with_parent(mut self, parent: impl Into<String>) -> Self {
        self.parent = Some(parent.into());
        self
    }

    /// Sets the priority.
    #[must_use]
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Sets creation time and UID (the age tie-break).
    #[must_use]
    pub fn with_created(mut self, created: i64, uid: impl Into<String>) -> Self {
        self.created = created;
        self.uid = uid.into();
        self
    }

    /// Sets quota, limit and weight of one slot, in fair-share units.
    #[must_use]
    pub fn with_resource(mut self, slot: usize, deserved: f64, limit: f64, weight: f64) -> Self {
        self.deserved.0[slot] = deserved;
        self.limit.0[slot] = limit;
        self.over_quota_weight.0[slot] = weight;
        self
    }

    /// Builds a spec from the Queue CRD with the project's API semantics: quota unset = 0, any
    /// negative quota = unlimited; limit unset or negative = none, 0 = nothing; weight unset = 1.
    /// Memory quotas are in MB (10^6 bytes) and become bytes. Extended resources are interned in
    /// `names`; their names are returned when they cannot be tracked (no free slot, or a name that
    /// maps to pods or to a slot with its own typed field).
    pub fn from_api(
        name: impl Into<Arc<str>>,
        created: i64,
        uid: impl Into<String>,
        spec: &api::queue::QueueSpec,
        names: &mut ResourceNames,
    ) -> (Self, Vec<String>) {
        let mut out = Self::new(name).with_created(created, uid);
        out.parent.clone_from(&spec.parent_queue);
        out.priority = spec.priority.unwrap_or(DEFAULT_QUEUE_PRIORITY);
        let mut ignored = Vec::new();
        let Some(resources) = &spec.resources else {
            return (out, ignored);
        };
        let typed = [
            (CPU, &resources.cpu, 1.0),
            (MEMORY, &resources.memory, BYTES_PER_MEGABYTE),
            (GPU, &resources.gpu, 1.0),
        ];
        for (slot, quota, scale) in typed {
            if let Some(q) = quota {
                out.set_from_api(slot, q, scale);
            }
        }
        for (resource, quota) in &resources.extended {
            match names.slot(resource) {
                Some(slot) if slot > PODS => out.set_from_api(slot, quota, 1.0),
                _ => ignored.push(resource.clone()),
            }
        }
        (out, ignored)
    }

    /// Builds a spec from the scheduler model's queue ([`crate::model::queue::Queue`]), whose
    /// memory quota and limit are in MB (10^6 bytes): they become bytes. Negative quotas and limits
    /// mean unlimited; negative weights become 0. The creation time orders ties; the name breaks
    /// equal creation times.
    #[must_use]
    pub fn from_model(queue: &crate::model::queue::Queue) -> Self {
        let mut spec = Self::new(Arc::clone(&queue.name)).with_created(queue.created, String::new());
        spec.parent = queue.parent_name.as_deref().map(str::to_owned);
        spec.priority = queue.priority;
        for (slot, r) in queue.resources.iter().enumerate() {
            let scale = if slot == MEMORY { BYTES_PER_MEGABYTE } else { 1.0 };
            let amount = |v: f64| if v < 0.0 { UNLIMITED } else { v * scale };
            spec.deserved.0[slot] = amount(r.quota);
            spec.limit.0[slot] = amount(r.limit);
            spec.over_quota_weight.0[slot] = r.weight.max(0.0);
        }
        spec
    }

    fn set_from_api(&mut self, slot: usize, q: &api::queue::ResourceQuota, scale: f64) {
        let amount = |v: f64| if v < 0.0 { UNLIMITED } else { v * scale };
        self.deserved.0[slot] = q.quota.map_or(0.0, amount);
        self.limit.0[slot] = q.limit.map_or(UNLIMITED, amount);
        self.over_quota_weight.0[slot] = q.over_quota_weight.map_or(1.0, |w| w.max(0.0));
    }
}

/// A queue that could not be placed in the tree. Detached queues stay addressable (their jobs are
/// accounted) but get no fair share and are not schedulable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeProblem {
    /// A second queue with an existing name; ignored.
    DuplicateName(String),
    /// The parent does not exist; the queue and its subtree are detached.
    UnknownParent {
        /// The queue.
        queue: String,
        /// The missing parent.
        parent: String,
    },
    /// The queue is on a parent cycle; the cycle is cut and its subtree detached.
    Cycle(String),
}

/// Accounting of one queue, in model units, including all descendants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueUsage {
    /// Accepted resources of allocated, bound, binding and running tasks.
    pub allocated: Resources,
    /// The part of `allocated` held by non-preemptible jobs.
    pub allocated_non_preemptible: Resources,
    /// Allocated plus the requests of pending tasks, as of session open.
    pub requested: Resources,
}

/// The mutable accounting state of a tree: one [`QueueUsage`] per queue. Cloning it is the
/// checkpoint; [`QueueTree::restore`] copies it back without allocating. Reclaim validation reads
/// an explicit baseline copy of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accounting {
    queues: Vec<QueueUsage>,
}

impl Accounting {
    /// The accounting of one queue.
    #[must_use]
    pub fn get(&self, q: QueueId) -> &QueueUsage {
        &self.queues[q.index()]
    }
}

#[derive(Clone, Debug)]
pub(crate) struct QueueNode {
    pub(crate) name: Arc<str>,
    pub(crate) parent: Option<QueueId>,
    pub(crate) children: Vec<QueueId>,
    pub(crate) attached: bool,
    /// Number of ancestors (0 for a top-level or detached queue).
    pub(crate) depth: u32,
    pub(crate) priority: i32,
    /// Position in age order (created, uid, name): smaller is older.
    pub(crate) rank: u32,
    pub(crate) deserved: ShareVec,
    pub(crate) limit: ShareVec,
    pub(crate) weight: ShareVec,
    pub(crate) usage: ShareVec,
    pub(crate) fair_share: ShareVec,
}

/// The queue hierarchy with fair shares and accounting. See the module documentation.
#[derive(Clone, Debug)]
pub struct QueueTree {
    pub(crate) nodes: Vec<QueueNode>,
    by_name: HashMap<Arc<str>, QueueId>,
    pub(crate) roots: Vec<QueueId>,
    problems: Vec<TreeProblem>,
    pub(crate) config: FairShareConfig,
    pub(crate) total: ShareVec,
    pub(crate) mask: SlotMask,
    pub(crate) accounting: Accounting,
    /// Step 7 of the queue order per ordered pair (fixed once the fair shares are divided), filled
    /// as pairs are compared through order keys; cleared when fair shares change.
    pub(crate) allocatable_order: RefCell<IdMap<(QueueId, QueueId), std::cmp::Ordering>>,
}

/// Equal bit for bit (a quota that is not a number equals itself).
fn same_bits(a: &ShareVec, b: &ShareVec) -> bool {
    a.0.iter().zip(&b.0).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Numbers for a queue's status and metrics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QueueReport {
    /// Allocated, model units.
    pub allocated: Resources,
    /// Allocated to non-preemptible jobs, model units.
    pub allocated_non_preemptible: Resources,
    /// Requested (allocated + pending), model units.
    pub requested: Resources,
    /// Deserved quota, fair-share units ([`UNLIMITED`] kept).
    pub deserved: ShareVec,
    /// Fair share from the last division, fair-share units.
    pub fair_share: ShareVec,
    /// Limit, fair-share units ([`UNLIMITED`] kept).
    pub limit: ShareVec,
}

impl QueueTree {
    /// Builds the tree. Problems (duplicates, unknown parents, cycles) do not fail the build; the
    /// affected queues are detached and listed by [`Self::problems`].
    #[must_use]
    pub fn new(specs: Vec<QueueSpec>, config: FairShareConfig) -> Self {
        let mut problems = Vec::new();
        let mut by_name = HashMap::with_capacity(specs.len());
        let mut kept: Vec<QueueSpec> = Vec::with_capacity(specs.len());
        for spec in specs {
            if by_name.contains_key(&*spec.name) {
                problems.push(TreeProblem::DuplicateName(spec.name.to_string()));
                continue;
            }
            let id = QueueId(u32::try_from(kept.len()).expect("invariant: fewer than 2^32 queues"));
            by_name.insert(Arc::clone(&spec.name), id);
            kept.push(spec);
        }

        let mut age: Vec<usize> = (0..kept.len()).collect();
        age.sort_by(|&a, &b| {
            let (a, b) = (&kept[a], &kept[b]);
            (a.created, &a.uid, &a.name).cmp(&(b.created, &b.uid, &b.name))
        });
        let mut rank = vec![0u32; kept.len()];
        for (position, &index) in age.iter().enumerate() {
            rank[index] = u32::try_from(position).expect("invariant: fewer than 2^32 queues");
        }

        let mut nodes: Vec<QueueNode> = kept
            .iter()
            .enumerate()
            .map(|(i, spec)| QueueNode {
                name: Arc::clone(&spec.name),
                parent: None,
                children: Vec::new(),
                attached: false,
                depth: 0,
                priority: spec.priority,
                rank: rank[i],
                deserved: spec.deserved,
                limit: spec.limit,
                weight: spec.over_quota_weight,
                usage: ShareVec::ZERO,
                fair_share: ShareVec::ZERO,
            })
            .collect();
        for (i, spec) in kept.iter().enumerate() {
            let Some(parent) = &spec.parent else { continue };
            match by_name.get(parent.as_str()) {
                Some(&p) => nodes[i].parent = Some(p),
                None => problems.push(TreeProblem::UnknownParent {
                    queue: spec.name.to_string(),
                    parent: parent.clone(),
                }),
            }
        }
        cut_cycles(&mut nodes, &mut problems);
        for i in 0..nodes.len() {
            if let Some(p) = nodes[i].parent {
                nodes[p.index()].children.push(QueueId(i as u32));
            }
        }
        for node in &mut nodes {
            node.children.sort_by_key(|c| rank[c.index()]);
        }
        let mut roots: Vec<QueueId> = kept
            .iter()
            .enumerate()
            .filter(|(i, spec)| spec.parent.is_none() && nodes[*i].parent.is_none())
            .map(|(i, _)| QueueId(i as u32))
            .collect();
        roots.sort_by_key(|r| rank[r.index()]);
        let mut stack = roots.clone();
        while let Some(q) = stack.pop() {
            nodes[q.index()].attached = true;
            stack.extend(nodes[q.index()].children.iter().copied());
        }
        for i in 0..nodes.len() {
            let mut depth = 0;
            let mut current = nodes[i].parent;
            while let Some(p) = current {
                depth += 1;
                current = nodes[p.index()].parent;
            }
            nodes[i].depth = depth;
        }

        let accounting = Accounting {
            queues: vec![QueueUsage::default(); nodes.len()],
        };
        Self {
            nodes,
            by_name,
            roots,
            problems,
            config: config.normalized(),
            total: ShareVec::ZERO,
            mask: SlotMask::CORE,
            accounting,
            allocatable_order: RefCell::default(),
        }
    }

    /// Takes the tree back to how [`Self::new`] left it: no historical usage, accounting, total or
    /// fair shares. What `new` made from the specs (names, hierarchy, ranks, quotas, problems) stays,
    /// so that a tree built from queues that did not change is used again without rebuilding it.
    pub fn clear_for_reuse(&mut self) {
        for node in &mut self.nodes {
            node.usage = ShareVec::ZERO;
            node.fair_share = ShareVec::ZERO;
        }
        self.accounting.queues.fill(QueueUsage::default());
        self.total = ShareVec::ZERO;
        self.mask = SlotMask::CORE;
        self.allocatable_order.get_mut().clear();
    }

    /// Whether two trees hold the same queues, hierarchy, settings, accounting and fair shares (the
    /// comparison order cache aside, which only ever holds what comparing would give). For checks of
    /// a reused tree against one built afresh.
    #[must_use]
    pub fn same_as(&self, other: &Self) -> bool {
        self.nodes.len() == other.nodes.len()
            && self.nodes.iter().zip(&other.nodes).all(|(a, b)| {
                a.name == b.name
                    && a.parent == b.parent
                    && a.children == b.children
                    && a.attached == b.attached
                    && a.depth == b.depth
                    && a.priority == b.priority
                    && a.rank == b.rank
                    && same_bits(&a.deserved, &b.deserved)
                    && same_bits(&a.limit, &b.limit)
                    && same_bits(&a.weight, &b.weight)
                    && same_bits(&a.usage, &b.usage)
                    && same_bits(&a.fair_share, &b.fair_share)
            })
            && self.by_name == other.by_name
            && self.roots == other.roots
            && self.problems == other.problems
            && self.config == other.config
            && same_bits(&self.total, &other.total)
            && self.mask == other.mask
            && self.accounting == other.accounting
    }

    /// Queues that could not be placed.
    #[must_use]
    pub fn problems(&self) -> &[TreeProblem] {
        &self.problems
    }

    /// The effective configuration (clamped as KAI clamps it).
    #[must_use]
    pub fn config(&self) -> &FairShareConfig {
        &self.config
    }

    /// Number of queues.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the tree has no queue.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// All queue ids, in arena order.
    pub fn ids(&self) -> impl Iterator<Item = QueueId> + '_ {
        (0..self.nodes.len()).map(|i| QueueId(i as u32))
    }

    /// The id of a queue by name.
    #[must_use]
    pub fn id(&self, name: &str) -> Option<QueueId> {
        self.by_name.get(name).copied()
    }

    /// The name of a queue.
    #[must_use]
    pub fn name(&self, q: QueueId) -> &str {
        &self.nodes[q.index()].name
    }

    /// The parent of a queue.
    #[must_use]
    pub fn parent(&self, q: QueueId) -> Option<QueueId> {
        self.nodes[q.index()].parent
    }

    /// Children of a queue, oldest first.
    #[must_use]
    pub fn children(&self, q: QueueId) -> &[QueueId] {
        &self.nodes[q.index()].children
    }

    /// Top-level queues, oldest first.
    #[must_use]
    pub fn roots(&self) -> &[QueueId] {
        &self.roots
    }

    /// True when the queue hangs under a top-level queue (not detached by a [`TreeProblem`]).
    #[must_use]
    pub fn is_attached(&self, q: QueueId) -> bool {
        self.nodes[q.index()].attached
    }

    /// True when jobs of this queue may be scheduled: attached and without children (KAI only
    /// schedules jobs of leaf queues).
    #[must_use]
    pub fn is_schedulable_leaf(&self, q: QueueId) -> bool {
        let node = &self.nodes[q.index()];
        node.attached && node.children.is_empty()
    }

    /// The queue's priority.
    #[must_use]
    pub fn priority(&self, q: QueueId) -> i32 {
        self.nodes[q.index()].priority
    }

    /// The ancestor of `q` that is `up` levels higher (`q` itself for 0).
    pub(crate) fn ancestor(&self, q: QueueId, up: u32) -> QueueId {
        let mut current = q;
        for _ in 0..up {
            current = self.nodes[current.index()]
                .parent
                .expect("invariant: up <= depth");
        }
        current
    }

    /// KAI's "levelled" queues: the ancestors of `a` and `b` at the first level where their root
    /// paths differ (the siblings under their lowest common ancestor), or the deepest common level
    /// when one path is a prefix of the other.
    #[must_use]
    pub fn levelled(&self, a: QueueId, b: QueueId) -> (QueueId, QueueId) {
        let (da, db) = (self.nodes[a.index()].depth, self.nodes[b.index()].depth);
        let common = da.min(db);
        let (mut x, mut y) = (self.ancestor(a, da - common), self.ancestor(b, db - common));
        if x == y {
            return (x, y);
        }
        // Once ancestors differ at a level they differ below it: climb while the parents differ.
        while let (Some(px), Some(py)) = (self.parent(x), self.parent(y)) {
            if px == py {
                break;
            }
            (x, y) = (px, py);
        }
        (x, y)
    }

    /// `q` and its ancestors, leaf first.
    pub fn path_to_root(&self, q: QueueId) -> impl Iterator<Item = QueueId> + '_ {
        std::iter::successors(Some(q), |&id| self.nodes[id.index()].parent)
    }

    /// Deserved quota, fair-share units.
    #[must_use]
    pub fn deserved(&self, q: QueueId) -> &ShareVec {
        &self.nodes[q.index()].deserved
    }

    /// Limit, fair-share units.
    #[must_use]
    pub fn limit(&self, q: QueueId) -> &ShareVec {
        &self.nodes[q.index()].limit
    }

    /// Fair share from the last [`Self::divide`].
    #[must_use]
    pub fn fair_share(&self, q: QueueId) -> &ShareVec {
        &self.nodes[q.index()].fair_share
    }

    /// Cluster total of the last division, fair-share units.
    #[must_use]
    pub fn total(&self) -> &ShareVec {
        &self.total
    }

    /// Slots that take part in fair share (computed by the last division; CPU, memory and GPU
    /// before that).
    #[must_use]
    pub fn mask(&self) -> SlotMask {
        self.mask
    }

    /// Sets normalised historical usage (usage / cluster capacity over the window) of a queue.
    /// Only the over-quota phase of the next division reads it.
    pub fn set_usage(&mut self, q: QueueId, usage: ShareVec) {
        self.nodes[q.index()].usage = usage;
    }

    /// Current accounting.
    #[must_use]
    pub fn accounting(&self) -> &Accounting {
        &self.accounting
    }

    /// Accounting of one queue.
    #[must_use]
    pub fn usage_of(&self, q: QueueId) -> &QueueUsage {
        self.accounting.get(q)
    }

    /// A checkpoint of the accounting (the only state a session mutates).
    #[must_use]
    pub fn snapshot(&self) -> Accounting {
        self.accounting.clone()
    }

    /// Restores a checkpoint taken from this tree; does not allocate.
    pub fn restore(&mut self, snapshot: &Accounting) {
        assert_eq!(
            snapshot.queues.len(),
            self.accounting.queues.len(),
            "invariant: a snapshot is restored into the tree it was taken from"
        );
        self.accounting.queues.copy_from_slice(&snapshot.queues);
    }

    /// Session open: a task in an allocated state (allocated, bound, binding, running) counts
    /// towards allocated and requested of its queue and every ancestor.
    pub fn record_running(&mut self, q: QueueId, resources: &Resources, preemptibility: Preemptibility) {
        self.walk_up(q, |u| {
            u.allocated.add(resources);
            u.requested.add(resources);
            if preemptibility == Preemptibility::NonPreemptible {
                u.allocated_non_preemptible.add(resources);
            }
        });
    }

    /// Session open: a pending task counts towards requested of its queue and every ancestor.
    pub fn record_pending(&mut self, q: QueueId, resources: &Resources) {
        self.walk_up(q, |u| u.requested.add(resources));
    }

    /// Session: a task was (virtually) allocated. Updates allocated (and allocated
    /// non-preemptible) of the queue and every ancestor; requested is unchanged, as in KAI.
    /// Exact inverse of [`Self::deallocate`].
    pub fn allocate(&mut self, q: QueueId, resources: &Resources, preemptibility: Preemptibility) {
        self.walk_up(q, |u| {
            u.allocated.add(resources);
            if preemptibility == Preemptibility::NonPreemptible {
                u.allocated_non_preemptible.add(resources);
            }
        });
    }

    /// Session: a task was (virtually) evicted or its allocation undone. Exact inverse of
    /// [`Self::allocate`].
    pub fn deallocate(&mut self, q: QueueId, resources: &Resources, preemptibility: Preemptibility) {
        self.walk_up(q, |u| {
            u.allocated.sub(resources);
            if preemptibility == Preemptibility::NonPreemptible {
                u.allocated_non_preemptible.sub(resources);
            }
        });
    }

    fn walk_up(&mut self, q: QueueId, mut f: impl FnMut(&mut QueueUsage)) {
        let mut current = Some(q);
        while let Some(id) = current {
            f(&mut self.accounting.queues[id.index()]);
            current = self.nodes[id.index()].parent;
        }
    }

    /// Status numbers of one queue.
    #[must_use]
    pub fn report(&self, q: QueueId) -> QueueReport {
        let node = &self.nodes[q.index()];
        let usage = self.accounting.get(q);
        QueueReport {
            allocated: usage.allocated,
            allocated_non_preemptible: usage.allocated_non_preemptible,
            requested: usage.requested,
            deserved: node.deserved,
            fair_share: node.fair_share,
            limit: node.limit,
        }
    }

    /// Test hook: overwrite a computed fair share (KAI's unit tests set fair shares by hand).
    #[cfg(test)]
    pub(crate) fn set_fair_share(&mut self, q: QueueId, fair_share: ShareVec) {
        self.nodes[q.index()].fair_share = fair_share;
        self.allocatable_order.get_mut().clear();
    }

    /// Test hook: overwrite one queue's accounting without rolling it up.
    #[cfg(test)]
    pub(crate) fn set_usage_of(&mut self, q: QueueId, usage: QueueUsage) {
        self.accounting.queues[q.index()] = usage;
    }
}

/// Finds parent cycles and cuts them: every queue on a cycle loses its parent and is reported.
fn cut_cycles(nodes: &mut [QueueNode], problems: &mut Vec<TreeProblem>) {
    // 0 = unvisited, 1 = on the current walk, 2 = done.
    let mut state = vec![0u8; nodes.len()];
    let mut walk: Vec<usize> = Vec::new();
    for start in 0..nodes.len() {
        walk.clear();
        let mut current = Some(start);
        while let Some(i) = current {
            match state[i] {
                2 => break,
                1 => {
                    let from = walk
                        .iter()
                        .position(|&w| w == i)
                        .expect("invariant: node is on the walk");
                    for &member in &walk[from..] {
                        problems.push(TreeProblem::Cycle(nodes[member].name.to_string()));
                        nodes[member].parent = None;
                    }
                    break;
                }
                _ => {
                    state[i] = 1;
                    walk.push(i);
                    current = nodes[i].parent.map(QueueId::index);
                }
            }
        }
        for &i in &walk {
            state[i] = 2;
        }
    }
}
