//! KAI's queue order (`queue_order.GetQueueOrderResult`), usable at every level of the tree.
//!
//! The scheduler walks root → leaf comparing sibling queues, each represented by the best job at
//! the top of its subtree (allocate) or by the victims popped so far from it (victim mode). The
//! chain, first difference wins ([`OrderStep`] names the step that decided):
//! 0. (only with `queue_priority_in_quota_reclaim`) both queues stay within deserved with their
//!    job: higher priority first;
//! 1. not over-utilised before over-utilised (see [`OverUtilizedRule`]);
//! 2. starved (`allocated + job <= deserved` on every tracked slot) first;
//! 3. higher queue priority first;
//! 4. a queue that would hold something on a slot whose allocatable share is 0 goes last;
//! 5. smaller dominant share including the job (and minus the victims in victim mode), where
//!    `share = allocated / allocatable`, `allocatable = min(limit, max(deserved, fair share))`,
//!    deserved unlimited → the limit, unlimited → the cluster total, and `allocated × 1000` when
//!    the allocatable share is 0;
//! 6. smaller dominant share without the job;
//! 7. smaller allocatable share (≤ on every slot, < on one);
//! 8. older queue (creation time, then UID, then name: a total order, so distinct queues never
//!    compare equal; KAI prefers the right-hand queue on equal timestamps).
//!
//! The victim order is the exact reverse, as KAI negates the comparison.

use std::cmp::Ordering;

use super::tree::{QueueId, QueueTree};
use super::units::{UNLIMITED, cmp_quantity, to_share};
use crate::model::resources::Resources;

/// When a queue counts as over-utilised (step 1).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum OverUtilizedRule {
    /// KAI: fair share < allocated on **every** tracked slot (CPU, memory, GPU and configured
    /// extended slots). A queue under its share on any one slot (for instance CPU, or a GPU-less
    /// cluster's GPU slot at 0 ≥ 0) is never over-utilised.
    #[default]
    AllTracked,
    /// Fair share < allocated on every tracked slot the queue holds (allocated > 0), and it holds
    /// something. Unused slots no longer mask over-use of the ones it uses.
    AllHeld,
    /// Fair share < allocated on any tracked slot.
    Any,
}

/// One side of a queue comparison.
#[derive(Clone, Copy, Debug)]
pub struct QueueCandidate<'a> {
    /// The queue at this level.
    pub queue: QueueId,
    /// Init request of the best job of the subtree (zero when none or in victim mode).
    pub job: &'a Resources,
    /// Allocated resources of the victims popped so far from the subtree's best leaf plus the next
    /// one (victim mode only; zero otherwise).
    pub victims: &'a Resources,
}

impl<'a> QueueCandidate<'a> {
    /// Allocate mode: the queue with its best pending job's request.
    #[must_use]
    pub fn pending(queue: QueueId, job: &'a Resources) -> Self {
        Self {
            queue,
            job,
            victims: &Resources::ZERO,
        }
    }

    /// Victim mode: the queue with its victims' allocated resources.
    #[must_use]
    pub fn victims(queue: QueueId, victims: &'a Resources) -> Self {
        Self {
            queue,
            job: &Resources::ZERO,
            victims,
        }
    }
}

/// The step of the chain that decided a comparison.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OrderStep {
    /// Step 0 (opt-in): both in quota, priority decided.
    InQuotaPriority,
    /// Step 1.
    UnderUtilized,
    /// Step 2.
    Starved,
    /// Step 3.
    Priority,
    /// Step 4.
    ZeroSharePenalty,
    /// Step 5.
    DominantShareWithJob,
    /// Step 6.
    DominantShare,
    /// Step 7.
    AllocatableShare,
    /// Step 8 (or the same queue on both sides).
    Age,
}

/// KAI's penalty factor for holding a resource with no allocatable share.
const NO_SHARE_PENALTY: f64 = 1000.0;

/// One slot's share of a dominant share: held over allocatable, or held times the penalty where the
/// allocatable share is 0.
fn weighted_share(held: f64, allocatable: f64) -> f64 {
    if allocatable == 0.0 {
        held * NO_SHARE_PENALTY
    } else {
        held / allocatable
    }
}

/// `Less` when the left side was preferred by a boolean test that holds on the left only.
fn prefer(left: bool, right: bool) -> Ordering {
    match (left, right) {
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        _ => Ordering::Equal,
    }
}

/// One side of an allocate-mode comparison (a queue with its best pending job), evaluated once: every
/// step of the chain reads one side at a time, so comparing two keys with [`QueueTree::compare_keys`]
/// decides exactly as [`QueueTree::compare_queues`] on the two candidates, without recomputing shares
/// for each pair. Valid while the queue's accounting and job stay the same.
#[derive(Clone, Copy, Debug)]
pub struct OrderKey {
    queue: QueueId,
    over_utilized: bool,
    starved: bool,
    zero_share: bool,
    share_with_job: f64,
    share: f64,
}

#[cfg(test)]
impl OrderKey {
    /// Starved, zero share, dominant share with the job and without, for tests.
    pub(crate) fn parts(&self) -> (bool, bool, f64, f64) {
        (self.starved, self.zero_share, self.share_with_job, self.share)
    }
}

impl QueueTree {
    /// KAI's queue order: `Less` means `l` is served first.
    #[must_use]
    pub fn compare_queues(&self, l: &QueueCandidate<'_>, r: &QueueCandidate<'_>) -> Ordering {
        self.explain_order(l, r).0
    }

    /// The reversed order for victim queues: `Less` means `l` gives up resources first.
    #[must_use]
    pub fn compare_victim_queues(&self, l: &QueueCandidate<'_>, r: &QueueCandidate<'_>) -> Ordering {
        self.compare_queues(l, r).reverse()
    }

    /// [`Self::compare_queues`] with the step that decided.
    #[must_use]
    pub fn explain_order(&self, l: &QueueCandidate<'_>, r: &QueueCandidate<'_>) -> (Ordering, OrderStep) {
        let (lq, rq) = (l.queue, r.queue);
        if self.config.queue_priority_in_quota_reclaim
            && self.within_deserved_with(lq, l.job)
            && self.within_deserved_with(rq, r.job)
        {
            let by_priority = self.priority(rq).cmp(&self.priority(lq));
            if by_priority.is_ne() {
                return (by_priority, OrderStep::InQuotaPriority);
            }
        }
        let steps: [(OrderStep, &dyn Fn() -> Ordering); 8] = [
            (OrderStep::UnderUtilized, &|| {
                prefer(!self.is_over_utilized(lq), !self.is_over_utilized(rq))
            }),
            (OrderStep::Starved, &|| {
                prefer(
                    self.within_deserved_with(lq, l.job),
                    self.within_deserved_with(rq, r.job),
                )
            }),
            (OrderStep::Priority, &|| self.priority(rq).cmp(&self.priority(lq))),
            (OrderStep::ZeroSharePenalty, &|| {
                prefer(!self.uses_zero_share(lq, l.job), !self.uses_zero_share(rq, r.job))
            }),
            (OrderStep::DominantShareWithJob, &|| {
                let ls = self.dominant_share(lq, l.job, l.victims);
                let rs = self.dominant_share(rq, r.job, r.victims);
                ls.partial_cmp(&rs).unwrap_or(Ordering::Equal)
            }),
            (OrderStep::DominantShare, &|| {
                let zero = Resources::ZERO;
                let ls = self.dominant_share(lq, &zero, &zero);
                let rs = self.dominant_share(rq, &zero, &zero);
                ls.partial_cmp(&rs).unwrap_or(Ordering::Equal)
            }),
            (OrderStep::AllocatableShare, &|| {
                prefer(
                    self.allocatable_strictly_smaller(lq, rq),
                    self.allocatable_strictly_smaller(rq, lq),
                )
            }),
            (OrderStep::Age, &|| {
                self.nodes[lq.index()].rank.cmp(&self.nodes[rq.index()].rank)
            }),
        ];
        for (step, decide) in steps {
            let ordering = decide();
            if ordering.is_ne() {
                return (ordering, step);
            }
        }
        (Ordering::Equal, OrderStep::Age)
    }

    /// The key of a queue with its best pending job (allocate mode, no victims). One pass over the
    /// tracked slots computes what [`Self::within_deserved_with`], [`Self::uses_zero_share`] and
    /// [`Self::dominant_share`] (with and without the job) compute, with the same arithmetic in the
    /// same order (`order_key_is_the_steps_it_stands_for` checks it); a pop computes keys by the
    /// thousand.
    #[must_use]
    pub fn order_key(&self, q: QueueId, job: &Resources) -> OrderKey {
        let node = &self.nodes[q.index()];
        let allocated = &self.accounting.get(q).allocated;
        let (mut starved, mut zero_share) = (true, false);
        let (mut share_with_job, mut share) = (0.0f64, 0.0f64);
        for slot in self.mask.iter() {
            let allocatable = self.allocatable_share(q, slot);
            let held = to_share(slot, allocated.0[slot]);
            let held_with_job = to_share(slot, allocated.0[slot] + job.0[slot]);
            starved &= cmp_quantity(held_with_job, node.deserved.0[slot]).is_le();
            zero_share |= allocatable == 0.0 && held_with_job > 0.0;
            let divisor = if allocatable == UNLIMITED {
                self.total.0[slot]
            } else {
                allocatable
            };
            share_with_job = share_with_job.max(weighted_share(held_with_job, divisor));
            share = share.max(weighted_share(held, divisor));
        }
        OrderKey {
            queue: q,
            over_utilized: self.is_over_utilized(q),
            starved,
            zero_share,
            share_with_job,
            share,
        }
    }

    /// The key of a queue giving up `victims` (victim mode): [`Self::compare_keys`] over two such keys,
    /// reversed, decides as [`Self::compare_victim_queues`] on the two candidates. Victim mode has no
    /// job, so every step but the dominant share with the victims taken off is the allocate key's with
    /// a zero job. Valid while the queue's accounting stays the same.
    #[must_use]
    pub fn victim_key(&self, q: QueueId, victims: &Resources) -> OrderKey {
        let zero = Resources::ZERO;
        let mut key = self.order_key(q, &zero);
        key.share_with_job = self.dominant_share(q, &zero, victims);
        key
    }

    /// The queue a key was made for.
    #[must_use]
    pub fn key_queue(key: &OrderKey) -> QueueId {
        key.queue
    }

    /// [`Self::compare_queues`] over two keys from [`Self::order_key`]: the same chain, step by step.
    #[must_use]
    pub fn compare_keys(&self, l: &OrderKey, r: &OrderKey) -> Ordering {
        let (lq, rq) = (l.queue, r.queue);
        if self.config.queue_priority_in_quota_reclaim && l.starved && r.starved {
            let by_priority = self.priority(rq).cmp(&self.priority(lq));
            if by_priority.is_ne() {
                return by_priority;
            }
        }
        prefer(!l.over_utilized, !r.over_utilized)
            .then_with(|| prefer(l.starved, r.starved))
            .then_with(|| self.priority(rq).cmp(&self.priority(lq)))
            .then_with(|| prefer(!l.zero_share, !r.zero_share))
            .then_with(|| {
                l.share_with_job
                    .partial_cmp(&r.share_with_job)
                    .unwrap_or(Ordering::Equal)
            })
            .then_with(|| l.share.partial_cmp(&r.share).unwrap_or(Ordering::Equal))
            .then_with(|| {
                *self
                    .allocatable_order
                    .borrow_mut()
                    .entry((lq, rq))
                    .or_insert_with(|| {
                        prefer(
                            self.allocatable_strictly_smaller(lq, rq),
                            self.allocatable_strictly_smaller(rq, lq),
                        )
                    })
            })
            .then_with(|| self.nodes[lq.index()].rank.cmp(&self.nodes[rq.index()].rank))
    }

    /// Step 1: over-utilised under the configured [`OverUtilizedRule`].
    #[must_use]
    pub fn is_over_utilized(&self, q: QueueId) -> bool {
        let node = &self.nodes[q.index()];
        let allocated = &self.accounting.get(q).allocated;
        let over = |slot: usize| node.fair_share.0[slot] < to_share(slot, allocated.0[slot]);
        match self.config.over_utilized {
            OverUtilizedRule::AllTracked => self.mask.iter().all(over),
            OverUtilizedRule::AllHeld => {
                let mut held = self.mask.iter().filter(|&slot| allocated.0[slot] > 0).peekable();
                held.peek().is_some() && held.all(over)
            }
            OverUtilizedRule::Any => self.mask.iter().any(over),
        }
    }

    /// `allocated + extra <= deserved` on every tracked slot (KAI's "starved" test, also the
    /// reclaimer side of the guarantee-deserved strategy).
    #[must_use]
    pub fn within_deserved_with(&self, q: QueueId, extra: &Resources) -> bool {
        self.fits_deserved(q, &self.accounting.get(q).allocated, extra)
    }

    /// `allocated + extra <= deserved(q)` on every tracked slot, for a given allocation.
    pub(crate) fn fits_deserved(&self, q: QueueId, allocated: &Resources, extra: &Resources) -> bool {
        let node = &self.nodes[q.index()];
        self.mask.iter().all(|slot| {
            let with = to_share(slot, allocated.0[slot] + extra.0[slot]);
            cmp_quantity(with, node.deserved.0[slot]).is_le()
        })
    }

    /// KAI `GetAllocatableShare` for one slot: `min(limit, max(deserved, fair share))`; deserved
    /// unlimited gives the limit (possibly [`UNLIMITED`]).
    #[must_use]
    pub fn allocatable_share(&self, q: QueueId, slot: usize) -> f64 {
        let node = &self.nodes[q.index()];
        let (deserved, limit) = (node.deserved.0[slot], node.limit.0[slot]);
        if deserved == UNLIMITED {
            return limit;
        }
        let allocatable = deserved.max(node.fair_share.0[slot]);
        if limit == UNLIMITED {
            allocatable
        } else {
            limit.min(allocatable)
        }
    }

    /// Step 4: holds (with the job) something on a slot whose allocatable share is 0.
    pub(crate) fn uses_zero_share(&self, q: QueueId, job: &Resources) -> bool {
        let allocated = &self.accounting.get(q).allocated;
        self.mask.iter().any(|slot| {
            self.allocatable_share(q, slot) == 0.0 && to_share(slot, allocated.0[slot] + job.0[slot]) > 0.0
        })
    }

    /// KAI `GetDominantResourceShare` of `allocated + plus - minus`.
    #[must_use]
    pub fn dominant_share(&self, q: QueueId, plus: &Resources, minus: &Resources) -> f64 {
        let allocated = &self.accounting.get(q).allocated;
        let mut dominant = 0.0f64;
        for slot in self.mask.iter() {
            let mut allocatable = self.allocatable_share(q, slot);
            if allocatable == UNLIMITED {
                allocatable = self.total.0[slot];
            }
            let held = to_share(slot, allocated.0[slot] + plus.0[slot] - minus.0[slot]);
            dominant = dominant.max(weighted_share(held, allocatable));
        }
        dominant
    }

    /// Step 7: `a`'s allocatable share is ≤ `b`'s on every slot and < on one.
    fn allocatable_strictly_smaller(&self, a: QueueId, b: QueueId) -> bool {
        let le = |x: QueueId, y: QueueId| {
            self.mask.iter().all(|slot| {
                cmp_quantity(self.allocatable_share(x, slot), self.allocatable_share(y, slot)).is_le()
            })
        };
        le(a, b) && !le(b, a)
    }
}
