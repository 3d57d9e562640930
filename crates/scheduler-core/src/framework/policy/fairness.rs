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
use crate::model::resources::{CPU, GPU, MAX_RESOURCES, MEMORY};
use crate::model::{Cluster, QueueId, Resources};

use crate::framework::gang::Gang;

/// One victim queue's order keys for one amount of victims, at the levels of the tree it was
/// compared at (its leaf against a sibling, an ancestor against a cousin's): see
/// [`Fairness::compare_victims_keyed`].
#[derive(Clone, Debug, Default)]
pub struct VictimKeys(smallvec::SmallVec<[OrderKey; 2]>);

impl VictimKeys {
    fn at(&mut self, level: fairshare::QueueId, make: impl FnOnce() -> OrderKey) -> OrderKey {
        if let Some(key) = self.0.iter().find(|k| QueueTree::key_queue(k) == level) {
            return *key;
        }
        let key = make();
        self.0.push(key);
        key
    }
}

/// Fairness state of one session.
#[derive(Clone, Debug)]
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
    /// Per model queue, the last [`Self::gate`] answer: a backlog of like gangs asks the same question
    /// of the same queue thousands of times between two allocation changes.
    last_gate: RefCell<Vec<Option<GateAnswer>>>,
}

/// One [`Fairness::gate`] answer and what it depended on: the tree's accounting, which changes only
/// through [`Fairness::change`] (counted by `changes`), and the question.
#[derive(Clone, Debug)]
struct GateAnswer {
    changes: u64,
    request: Resources,
    preemptible: bool,
    answer: Result<(), CapacityViolation>,
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

impl GangUsage {
    /// What the gang's waiting pods ask, if it has no placed pod and no amount with a negative part
    /// (what a backlog keeps for it).
    #[must_use]
    pub fn waiting_only(&self) -> Option<Resources> {
        (self.running.is_none() && self.unsummable.is_empty())
            .then_some(self.pending)
            .flatten()
    }
}

/// One queue's gangs' usage at session open, summed before it is recorded up the tree.
#[derive(Default)]
struct QueueSums {
    running_preemptible: Option<NonNegativeSum>,
    running_non_preemptible: Option<NonNegativeSum>,
    pending: Option<NonNegativeSum>,
}

/// A sum of amounts with no negative part, as [`Resources::add`] would saturate it, but added as plain
/// unsigned words (a few vector instructions per amount instead of a saturating step per slot): 50,000
/// gangs are summed at every session open. The words are exact while the largest bit any amount sets,
/// plus the bits of the number of amounts, stays within 64; past that, [`Self::total`] says so and the
/// caller sums again saturating.
#[derive(Clone, Copy)]
struct NonNegativeSum {
    words: [u64; MAX_RESOURCES],
    /// Every bit any amount set, per slot (a negative amount sets the top bit: never exact).
    bits: [u64; MAX_RESOURCES],
    amounts: u32,
}

impl NonNegativeSum {
    const ZERO: Self = Self {
        words: [0; MAX_RESOURCES],
        bits: [0; MAX_RESOURCES],
        amounts: 0,
    };

    #[inline]
    fn add(&mut self, r: &Resources) {
        // Indexed over fixed-size arrays, so the compiler adds whole vectors of slots at once.
        for i in 0..MAX_RESOURCES {
            let v = r.0[i].cast_unsigned();
            self.words[i] = self.words[i].wrapping_add(v);
            self.bits[i] |= v;
        }
        self.amounts = self.amounts.saturating_add(1);
    }

    /// The saturating sum, or `None` when the words may have wrapped.
    fn total(&self) -> Option<Resources> {
        let any = self.bits.iter().fold(0, |a, b| a | b);
        let amount_bits = u64::BITS - any.leading_zeros();
        let count_bits = u32::BITS - self.amounts.leading_zeros();
        if self.amounts == u32::MAX || amount_bits + count_bits > u64::BITS {
            return None;
        }
        let mut total = Resources::ZERO;
        for (t, w) in total.0.iter_mut().zip(self.words) {
            *t = i64::try_from(w).unwrap_or(i64::MAX);
        }
        Some(total)
    }
}

/// Records every gang's usage on its queue, one gang at a time in gang order (amounts with a
/// negative part first, as [`GangUsage::unsummable`] keeps them).
fn record_per_gang(
    tree: &mut QueueTree,
    ids: &[Option<fairshare::QueueId>],
    gangs: &[std::sync::Arc<Gang>],
    usage: &[std::sync::Arc<GangUsage>],
    backlog: &[(QueueId, Resources)],
) {
    for (gang, usage) in gangs.iter().zip(usage) {
        let Some(q) = gang.queue.and_then(|q| ids[q.index()]) else {
            continue;
        };
        let pre = preemptibility(gang.preemptible);
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
    }
    for (queue, pending) in backlog {
        if let Some(q) = ids.get(queue.index()).copied().flatten() {
            tree.record_pending(q, pending);
        }
    }
}

/// Records the gangs' usage summed per queue first, then up the tree once per queue: the same totals
/// as [`record_per_gang`], since saturating sums of amounts that are never negative do not depend on
/// their order or grouping. False, with nothing recorded, when a sum is too large to be exact
/// ([`NonNegativeSum::total`]).
fn record_summed(
    tree: &mut QueueTree,
    ids: &[Option<fairshare::QueueId>],
    gangs: &[std::sync::Arc<Gang>],
    usage: &[std::sync::Arc<GangUsage>],
    backlog: &[(QueueId, Resources)],
) -> bool {
    // By the tree's queue index (recorded below in index order, as a map ordered by id would).
    let mut by_queue: Vec<(Option<fairshare::QueueId>, QueueSums)> = Vec::new();
    by_queue.resize_with(tree.len(), || (None, QueueSums::default()));
    for (gang, usage) in gangs.iter().zip(usage) {
        let Some(q) = gang.queue.and_then(|q| ids[q.index()]) else {
            continue;
        };
        let Some((id, sums)) = by_queue.get_mut(q.index()) else {
            continue;
        };
        *id = Some(q);
        if let Some(running) = &usage.running {
            let sum = if gang.preemptible {
                &mut sums.running_preemptible
            } else {
                &mut sums.running_non_preemptible
            };
            sum.get_or_insert(NonNegativeSum::ZERO).add(running);
        }
        if let Some(pending) = &usage.pending {
            sums.pending.get_or_insert(NonNegativeSum::ZERO).add(pending);
        }
    }
    // A backlog class's amount is its gangs' saturating sum already: one more amount to the sum.
    for (queue, pending) in backlog {
        let Some(q) = ids.get(queue.index()).copied().flatten() else {
            continue;
        };
        let Some((id, sums)) = by_queue.get_mut(q.index()) else {
            continue;
        };
        *id = Some(q);
        sums.pending.get_or_insert(NonNegativeSum::ZERO).add(pending);
    }
    let mut totals = Vec::with_capacity(by_queue.len());
    for (q, sums) in by_queue {
        let Some(q) = q else { continue };
        // Outer `None`: not exact; inner: no amount.
        let total = |s: Option<NonNegativeSum>| match s {
            None => Some(None),
            Some(s) => s.total().map(Some),
        };
        let (Some(pre), Some(non), Some(pending)) = (
            total(sums.running_preemptible),
            total(sums.running_non_preemptible),
            total(sums.pending),
        ) else {
            return false;
        };
        totals.push((q, pre, non, pending));
    }
    for (q, pre, non, pending) in totals {
        if let Some(r) = &pre {
            tree.record_running(q, r, Preemptibility::Preemptible);
        }
        if let Some(r) = &non {
            tree.record_running(q, r, Preemptibility::NonPreemptible);
        }
        if let Some(p) = &pending {
            tree.record_pending(q, p);
        }
    }
    true
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
    /// (`usage`, one per gang, from [`GangUsage::of`]) and what the backlog's gangs ask per queue
    /// (`backlog`: `framework::backlog`, outside the session but waiting all the same), and divides the cluster's capacity (Ready nodes,
    /// minus what other schedulers' pods use).
    #[must_use]
    pub fn open(
        cluster: &Cluster,
        gangs: &[std::sync::Arc<Gang>],
        usage: &[std::sync::Arc<GangUsage>],
        backlog: &[(QueueId, Resources)],
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
        let tree = QueueTree::new(specs, config);
        let mut ids = vec![None; cluster.queues.capacity()];
        for (i, q) in cluster.queues.iter() {
            ids[i as usize] = tree.id(&q.name);
        }
        let mut fairness = Self {
            tree,
            versions: vec![0; ids.len()],
            changes: 0,
            last_gate: RefCell::new(Vec::new()),
            ids,
            scratch: RefCell::new(ReclaimScratch::default()),
        };
        fairness.record(cluster, gangs, usage, backlog, capacity);
        fairness
    }

    /// [`Self::open`] for a new session, reusing the tree of the last one, built from queues (and
    /// settings) that did not change since: only what a session records and divides is done again.
    /// The caller answers for the queues; debug builds compare with a tree built afresh.
    #[must_use]
    pub fn reopen(
        mut self,
        cluster: &Cluster,
        gangs: &[std::sync::Arc<Gang>],
        usage: &[std::sync::Arc<GangUsage>],
        backlog: &[(QueueId, Resources)],
        capacity: &Resources,
    ) -> Self {
        self.tree.clear_for_reuse();
        self.versions.fill(0);
        self.changes = 0;
        self.last_gate.get_mut().clear();
        self.record(cluster, gangs, usage, backlog, capacity);
        self
    }

    /// No queues: what a closing session leaves in place of the state it hands to the next one
    /// (cheap, nothing allocated).
    #[must_use]
    pub fn empty() -> Self {
        Self {
            tree: QueueTree::new(Vec::new(), FairShareConfig::default()),
            ids: Vec::new(),
            versions: Vec::new(),
            changes: 0,
            scratch: RefCell::new(ReclaimScratch::default()),
            last_gate: RefCell::new(Vec::new()),
        }
    }

    /// Whether this and `other` hold the same tree, accounting and fair shares (for debug checks of a
    /// reused tree).
    #[must_use]
    pub fn same_as(&self, other: &Self) -> bool {
        self.tree.same_as(&other.tree) && self.ids == other.ids
    }

    /// Sets the queues' historical usage, records the gangs' and the backlog's usage and divides.
    fn record(
        &mut self,
        cluster: &Cluster,
        gangs: &[std::sync::Arc<Gang>],
        usage: &[std::sync::Arc<GangUsage>],
        backlog: &[(QueueId, Resources)],
        capacity: &Resources,
    ) {
        let tree = &mut self.tree;
        let ids = &self.ids;
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
        if per_gang || !record_summed(tree, ids, gangs, usage, backlog) {
            record_per_gang(tree, ids, gangs, usage, backlog);
        }
        tree.divide(capacity);
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
        let mut last = self.last_gate.borrow_mut();
        if let Some(Some(last)) = last.get(queue.index())
            && last.changes == self.changes
            && last.preemptible == preemptible
            && last.request == *request
        {
            debug_assert_eq!(
                last.answer,
                self.tree.check_capacity(q, request, preemptibility(preemptible)),
                "a kept gate answer differs from the tree's"
            );
            return last.answer.clone();
        }
        let answer = self.tree.check_capacity(q, request, preemptibility(preemptible));
        if last.len() <= queue.index() {
            last.resize_with(queue.index() + 1, || None);
        }
        last[queue.index()] = Some(GateAnswer {
            changes: self.changes,
            request: *request,
            preemptible,
            answer: answer.clone(),
        });
        answer
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

    /// [`Self::compare_victims`] with each side's keys kept in `a_keys` and `b_keys`: a side compared
    /// again with the same victims (the interleaving of victim queues compares every queue's next
    /// victim with the best so far, for every victim it hands out) reuses its key at that level.
    /// The caller makes a side new keys when its victims change.
    #[must_use]
    pub fn compare_victims_keyed(
        &self,
        (a, a_victims, a_keys): (QueueId, &Resources, &mut VictimKeys),
        (b, b_victims, b_keys): (QueueId, &Resources, &mut VictimKeys),
    ) -> Ordering {
        let ordering = match (self.id(a), self.id(b)) {
            (Some(x), Some(y)) => {
                let (lx, ly) = self.tree.levelled(x, y);
                let ka = a_keys.at(lx, || self.tree.victim_key(lx, a_victims));
                let kb = b_keys.at(ly, || self.tree.victim_key(ly, b_victims));
                self.tree.compare_keys(&ka, &kb).reverse()
            }
            _ => a.cmp(&b),
        };
        debug_assert_eq!(
            ordering,
            self.compare_victims(a, a_victims, b, b_victims),
            "keyed victim order differs from the chain"
        );
        ordering
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What the fast sum must equal: saturating adds, one amount at a time.
    fn saturating(amounts: &[Resources]) -> Resources {
        let mut total = Resources::ZERO;
        for a in amounts {
            total.add(a);
        }
        total
    }

    fn fast(amounts: &[Resources]) -> Option<Resources> {
        let mut sum = NonNegativeSum::ZERO;
        for a in amounts {
            sum.add(a);
        }
        sum.total()
    }

    #[test]
    fn a_non_negative_sum_is_the_saturating_sum_or_says_it_is_not_exact() {
        // A fixed xorshift stream: amounts of every size, from a few bits to the top of i64.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut exact = 0;
        let mut refused = 0;
        for round in 0..400 {
            // Amounts below 2^bits, bits from 1 to 63.
            let bits = 1 + round % 63;
            let count = 1 + usize::try_from(next() % 300).expect("small");
            let amounts: Vec<Resources> = (0..count)
                .map(|_| {
                    let mut r = Resources::ZERO;
                    for slot in r.0.iter_mut() {
                        *slot = i64::try_from(next() >> (64 - bits)).expect("63 bits");
                    }
                    r
                })
                .collect();
            match fast(&amounts) {
                Some(total) => {
                    assert_eq!(total, saturating(&amounts), "round {round}");
                    exact += 1;
                }
                None => refused += 1,
            }
        }
        // Small amounts are summed fast; amounts near the top are left to the saturating sum.
        assert!(exact > 200 && refused > 20, "exact {exact}, refused {refused}");
        // Amounts that reach i64::MAX together are refused, never wrapped.
        let big = Resources([i64::MAX / 2 + 1; MAX_RESOURCES]);
        assert_eq!(fast(&[big, big]), None);
        assert_eq!(fast(&[]), Some(Resources::ZERO));
        // A negative amount (none reaches it: `GangUsage` keeps them apart) is refused too.
        let mut negative = Resources::ZERO;
        negative.0[0] = -1;
        assert_eq!(fast(&[negative]), None);
    }
}
