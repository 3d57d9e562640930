//! The session's fairness policy: one owner for queue accounting, fair share, capacity gates, queue
//! order and reclaim rules, backed by [`crate::fairshare::QueueTree`] (KAI's proportion mathematics).
//!
//! Model queues are mapped onto the tree by name once per session; the journal mirrors every
//! placement change into the tree's accounting with exact inverses, so rollback stays exact.

use std::cell::RefCell;
use std::cmp::Ordering;

use crate::config::ProportionArgs;
use crate::fairshare::ShareVec;
use crate::fairshare::units::to_share;
use crate::fairshare::usage::UsageSample;
use crate::fairshare::{
    self, Accounting, CapacityViolation, FairShareConfig, OrderKey, Preemptibility, QueueCandidate,
    QueueReport, QueueSpec, QueueTree, ReclaimRejection, ReclaimScratch, Reclaimer, VictimChunk,
};
use crate::model::resources::{CPU, GPU, MEMORY};
use crate::model::{Cluster, QueueId, Resources};

use crate::framework::gang::Gang;

/// Fairness state of one session.
#[derive(Debug)]
pub struct Fairness {
    tree: QueueTree,
    /// Tree id of each model queue (by model index).
    ids: Vec<Option<fairshare::QueueId>>,
    /// Per model queue, bumped whenever the accounting of the queue or a queue under it changes, so
    /// orderings computed from a subtree can be reused while it stays the same.
    versions: Vec<u64>,
    /// Allocation changes so far in this session, in any queue.
    changes: u64,
    scratch: RefCell<ReclaimScratch>,
}

/// What one gang's pods count against its queue when a session opens: placed and waiting pods' share
/// requests, each kind summed over the gang (recorded up the tree once: the same totals, since
/// saturating sums of amounts that are never negative do not depend on their order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GangUsage {
    /// Placed pods' sum, if any pod is placed.
    running: Option<Resources>,
    /// Waiting (and pipelined) pods' sum, if any pod waits.
    pending: Option<Resources>,
    /// Amounts with a negative part (no request has one), recorded one by one in pod order, before
    /// the sums: (placed, amount).
    unsummable: Vec<(bool, Resources)>,
}

impl GangUsage {
    /// Reads a gang's pods.
    #[must_use]
    pub fn of(cluster: &Cluster, gang: &Gang) -> Self {
        let mut usage = Self::default();
        for t in gang.tasks() {
            let status = cluster.task(t).status;
            let running = status.is_allocated();
            if !running && !status.is_pending() && status != crate::model::TaskStatus::Pipelined {
                continue;
            }
            let share = share_request(cluster, t);
            if share.0.iter().any(|v| *v < 0) {
                usage.unsummable.push((running, share));
                continue;
            }
            let sum = if running {
                &mut usage.running
            } else {
                &mut usage.pending
            };
            sum.get_or_insert(Resources::ZERO).add(&share);
        }
        usage
    }
}

/// One queue's gangs' usage at session open, summed before it is recorded up the tree.
#[derive(Default)]
struct QueueSums {
    running_preemptible: Option<Resources>,
    running_non_preemptible: Option<Resources>,
    pending: Option<Resources>,
}

fn preemptibility(preemptible: bool) -> Preemptibility {
    if preemptible {
        Preemptibility::Preemptible
    } else {
        Preemptibility::NonPreemptible
    }
}

impl Fairness {
    /// Builds the tree from the model's queues, records every gang's allocated and pending pods
    /// (`usage`, one per gang, from [`GangUsage::of`]), and divides the cluster's capacity (Ready nodes,
    /// minus what other schedulers' pods use).
    #[must_use]
    pub fn open(
        cluster: &Cluster,
        gangs: &[std::sync::Arc<Gang>],
        usage: &[std::sync::Arc<GangUsage>],
        args: &ProportionArgs,
        capacity: &Resources,
    ) -> Self {
        let config = FairShareConfig {
            k_value: args.k_value,
            reclaimer_saturation_multiplier: args.reclaimer_saturation_multiplier,
            ..FairShareConfig::default()
        };
        let specs: Vec<QueueSpec> = cluster
            .queues
            .iter()
            .map(|(_, q)| QueueSpec::from_model(q))
            .collect();
        let mut tree = QueueTree::new(specs, config);
        let mut ids = vec![None; cluster.queues.capacity()];
        for (i, q) in cluster.queues.iter() {
            ids[i as usize] = tree.id(&q.name);
        }
        // Usage-based fair share: empty (every usage 0, today's division) unless it is on.
        for (name, u) in cluster.historical_usage.iter() {
            if let Some(id) = tree.id(name) {
                let usage = ShareVec::ZERO
                    .with(GPU, u.gpu)
                    .with(CPU, u.cpu)
                    .with(MEMORY, u.memory);
                tree.set_usage(id, usage);
            }
        }
        // Summed per queue first, then recorded up the tree once per queue: the same totals, since
        // saturating sums of amounts that are never negative do not depend on their order or grouping.
        // An amount with a negative part (no request has one) is recorded on its own, in gang order,
        // and then so is everything else.
        let per_gang = usage.iter().any(|u| !u.unsummable.is_empty());
        // By the tree's queue index (recorded below in index order, as a map ordered by id would).
        let mut by_queue: Vec<(Option<fairshare::QueueId>, QueueSums)> = Vec::new();
        by_queue.resize_with(tree.len(), || (None, QueueSums::default()));
        for (gang, usage) in gangs.iter().zip(usage) {
            let Some(q) = gang.queue.and_then(|q| ids[q.index()]) else {
                continue;
            };
            let pre = preemptibility(gang.preemptible);
            if per_gang {
                for (running, share) in &usage.unsummable {
                    if *running {
                        tree.record_running(q, share, pre);
                    } else {
                        tree.record_pending(q, share);
                    }
                }
                if let Some(running) = &usage.running {
                    tree.record_running(q, running, pre);
                }
                if let Some(pending) = &usage.pending {
                    tree.record_pending(q, pending);
                }
                continue;
            }
            let Some((id, sums)) = by_queue.get_mut(q.index()) else {
                continue;
            };
            *id = Some(q);
            if let Some(running) = &usage.running {
                let sum = match pre {
                    Preemptibility::Preemptible => &mut sums.running_preemptible,
                    Preemptibility::NonPreemptible => &mut sums.running_non_preemptible,
                };
                sum.get_or_insert(Resources::ZERO).add(running);
            }
            if let Some(pending) = &usage.pending {
                sums.pending.get_or_insert(Resources::ZERO).add(pending);
            }
        }
        for (q, sums) in by_queue {
            let Some(q) = q else { continue };
            if let Some(r) = &sums.running_preemptible {
                tree.record_running(q, r, Preemptibility::Preemptible);
            }
            if let Some(r) = &sums.running_non_preemptible {
                tree.record_running(q, r, Preemptibility::NonPreemptible);
            }
            if let Some(p) = &sums.pending {
                tree.record_pending(q, p);
            }
        }
        tree.divide(capacity);
        Self {
            tree,
            versions: vec![0; ids.len()],
            changes: 0,
            ids,
            scratch: RefCell::new(ReclaimScratch::default()),
        }
    }

    /// What every queue holds now and the capacity fair share divided, for the usage record
    /// (GPU in devices, CPU in millicores, memory in bytes; parents include their children).
    #[must_use]
    pub fn usage_sample(&self, cluster: &Cluster) -> UsageSample {
        let total = self.tree.total();
        let amounts = |r: &Resources| {
            [
                to_share(GPU, r.0[GPU]),
                to_share(CPU, r.0[CPU]),
                to_share(MEMORY, r.0[MEMORY]),
            ]
        };
        UsageSample {
            capacity: [total.0[GPU], total.0[CPU], total.0[MEMORY]],
            queues: cluster
                .queues
                .iter()
                .filter_map(|(i, q)| {
                    let id = self.ids.get(i as usize).copied().flatten()?;
                    Some((q.name.clone(), amounts(&self.tree.usage_of(id).allocated)))
                })
                .collect(),
        }
    }

    fn id(&self, q: QueueId) -> Option<fairshare::QueueId> {
        self.ids.get(q.index()).copied().flatten()
    }

    /// The underlying tree.
    #[must_use]
    pub fn tree(&self) -> &QueueTree {
        &self.tree
    }

    /// Mirrors an allocation change (`sign` +1 allocated, -1 released).
    pub fn change(
        &mut self,
        cluster: &Cluster,
        queue: QueueId,
        share: &Resources,
        preemptible: bool,
        sign: i64,
    ) {
        let Some(q) = self.id(queue) else { return };
        self.changes += 1;
        if sign > 0 {
            self.tree.allocate(q, share, preemptibility(preemptible));
        } else {
            self.tree.deallocate(q, share, preemptibility(preemptible));
        }
        // The queue and its ancestors (bounded: a parent cycle is a reported queue problem).
        let mut next = Some(queue);
        for _ in 0..=self.versions.len() {
            let Some(id) = next else { break };
            if let Some(v) = self.versions.get_mut(id.index()) {
                *v += 1;
            }
            next = cluster.queues.get(id.0).and_then(|q| q.parent);
        }
    }

    /// Allocation changes so far in this session, in any queue: while it stays, every queue's order
    /// is as it was.
    #[must_use]
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Changes under `queue` so far in this session (see `versions`).
    #[must_use]
    pub fn version(&self, queue: QueueId) -> u64 {
        self.versions.get(queue.index()).copied().unwrap_or(0)
    }

    /// KAI's capacity gates for a gang asking `request` more: limits up the tree, and quota for
    /// non-preemptible work.
    ///
    /// # Errors
    /// The queue rule it would break.
    pub fn gate(
        &self,
        _cluster: &Cluster,
        queue: QueueId,
        request: &Resources,
        preemptible: bool,
    ) -> Result<(), CapacityViolation> {
        let Some(q) = self.id(queue) else { return Ok(()) };
        self.tree.check_capacity(q, request, preemptibility(preemptible))
    }

    /// Order between two sibling queues given their best gangs' requests (less = served first).
    #[must_use]
    pub fn compare(
        &self,
        _cluster: &Cluster,
        a: QueueId,
        a_req: &Resources,
        b: QueueId,
        b_req: &Resources,
    ) -> Ordering {
        match (self.id(a), self.id(b)) {
            (Some(x), Some(y)) => self.tree.compare_queues(
                &QueueCandidate::pending(x, a_req),
                &QueueCandidate::pending(y, b_req),
            ),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => a.cmp(&b),
        }
    }

    /// One side of [`Self::compare`], evaluated once (`None` for a queue outside the tree). Valid while
    /// the queue's [`Self::version`] and the request stay the same.
    #[must_use]
    pub fn order_key(&self, queue: QueueId, request: &Resources) -> Option<OrderKey> {
        self.id(queue).map(|q| self.tree.order_key(q, request))
    }

    /// [`Self::compare`] over two keys from [`Self::order_key`].
    #[must_use]
    pub fn compare_keys(
        &self,
        a: QueueId,
        a_key: Option<&OrderKey>,
        b: QueueId,
        b_key: Option<&OrderKey>,
    ) -> Ordering {
        match (a_key, b_key) {
            (Some(x), Some(y)) => self.tree.compare_keys(x, y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => a.cmp(&b),
        }
    }

    /// Order between two victim queues (the most over-served first), compared where their paths to
    /// the root diverge, with what each has already given up plus its next victim subtracted.
    #[must_use]
    pub fn compare_victims(
        &self,
        a: QueueId,
        a_victims: &Resources,
        b: QueueId,
        b_victims: &Resources,
    ) -> Ordering {
        match (self.id(a), self.id(b)) {
            (Some(x), Some(y)) => {
                let (lx, ly) = self.tree.levelled(x, y);
                self.tree.compare_victim_queues(
                    &QueueCandidate::victims(lx, a_victims),
                    &QueueCandidate::victims(ly, b_victims),
                )
            }
            _ => a.cmp(&b),
        }
    }

    /// Whether a gang may reclaim at all (its queue stays within fair share, and within quota when
    /// non-preemptible).
    ///
    /// # Errors
    /// Why not.
    pub fn can_reclaim(
        &self,
        queue: QueueId,
        request: &Resources,
        preemptible: bool,
    ) -> Result<(), ReclaimRejection> {
        let Some(q) = self.id(queue) else {
            return Ok(());
        };
        self.tree.can_reclaim(&Reclaimer {
            queue: q,
            request,
            preemptibility: preemptibility(preemptible),
        })
    }

    /// Whether anything may be taken from `victim` for this reclaimer (a cheap victim filter).
    #[must_use]
    pub fn may_reclaim_from(
        &self,
        queue: QueueId,
        request: &Resources,
        preemptible: bool,
        victim: QueueId,
    ) -> bool {
        match (self.id(queue), self.id(victim)) {
            (Some(q), Some(v)) => self.tree.may_reclaim_from(
                &Reclaimer {
                    queue: q,
                    request,
                    preemptibility: preemptibility(preemptible),
                },
                v,
            ),
            _ => false,
        }
    }

    /// The accounting now (the baseline a reclaim scenario is validated against).
    #[must_use]
    pub fn snapshot(&self) -> Accounting {
        self.tree.snapshot()
    }

    /// Validates a reclaim scenario: `chunks` are the victims' resources per victim queue in KAI's
    /// chunking (elastic pods one by one, the gang's core as one lump).
    ///
    /// # Errors
    /// Why the scenario breaks fairness.
    pub fn validate_reclaim(
        &self,
        baseline: &Accounting,
        queue: QueueId,
        request: &Resources,
        preemptible: bool,
        chunks: &[(QueueId, Resources)],
    ) -> Result<(), ReclaimRejection> {
        let Some(q) = self.id(queue) else { return Ok(()) };
        let chunks: Vec<VictimChunk> = chunks
            .iter()
            .filter_map(|(v, r)| {
                self.id(*v).map(|v| VictimChunk {
                    queue: v,
                    resources: *r,
                })
            })
            .collect();
        let reclaimer = Reclaimer {
            queue: q,
            request,
            preemptibility: preemptibility(preemptible),
        };
        self.tree
            .validate_reclaim(baseline, &reclaimer, &chunks, &mut self.scratch.borrow_mut())
    }

    /// Numbers for a queue's status.
    #[must_use]
    pub fn report(&self, queue: QueueId) -> Option<QueueReport> {
        self.id(queue).map(|q| self.tree.report(q))
    }

    /// Allocated resources of a queue (rolled up).
    #[must_use]
    pub fn allocated(&self, queue: QueueId) -> Resources {
        self.report(queue).map_or(Resources::ZERO, |r| r.allocated)
    }

    /// Requested resources of a queue (rolled up).
    #[must_use]
    pub fn requested(&self, queue: QueueId) -> Resources {
        self.report(queue).map_or(Resources::ZERO, |r| r.requested)
    }

    /// Explains a reclaim rejection.
    #[must_use]
    pub fn explain_rejection(&self, r: &ReclaimRejection, cluster: &Cluster) -> String {
        r.explain(&self.tree, &cluster.names)
    }
}

/// What a task counts against its queue: its request with fractions as milli-GPUs and MIG profiles as
/// their compute slices ([`crate::model::resources::ResourceNames::with_mig_as_gpus`]).
#[must_use]
pub fn share_request(cluster: &Cluster, t: crate::model::TaskId) -> Resources {
    let task = cluster.task(t);
    let mut r = task.request;
    match task.gpu {
        crate::model::GpuRequest::Fraction { milli, devices } => {
            r.0[crate::model::resources::GPU] = i64::from(milli * devices);
        }
        crate::model::GpuRequest::Memory { devices, .. } => {
            let milli = task
                .node
                .map_or(1000, |n| Cluster::share_milli(task.gpu, cluster.node(n)));
            r.0[crate::model::resources::GPU] = i64::from(milli * devices);
        }
        crate::model::GpuRequest::None | crate::model::GpuRequest::Whole(_) => {}
    }
    cluster.names.with_mig_as_gpus(r)
}

/// What the queues share: allocatable resources of Ready nodes, minus what other schedulers' pods hold
/// on those nodes, with MIG profiles counted as GPUs as tasks count them. A foreign pod on a node
/// outside the model (another node pool's, or one not yet seen) takes nothing from this scheduler's
/// nodes, so it is not subtracted.
#[must_use]
pub fn capacity(cluster: &Cluster) -> Resources {
    let mut total = Resources::ZERO;
    for (_, n) in cluster.nodes.iter() {
        if n.ready {
            total.add(&n.allocatable);
        }
    }
    for (_, t) in cluster.tasks.iter() {
        let on_counted_node = t
            .node
            .and_then(|n| cluster.nodes.get(n.0))
            .is_some_and(|n| n.ready);
        if !t.ours && on_counted_node && t.status.holds_node() && t.reservation_for.is_none() {
            total.sub(&t.request);
        }
    }
    cluster.names.with_mig_as_gpus(total.max(&Resources::ZERO))
}
