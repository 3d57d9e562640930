//! Reclaim decisions between queues (`reclaimable`, `strategies`).
//!
//! - [`QueueTree::can_reclaim`]: the pre-filter on the reclaimer's leaf queue: allocated + request
//!   within its fair share on every tracked slot, and for a non-preemptible job allocated
//!   non-preemptible + request within deserved. A queue never reclaims past its own fair share.
//! - [`QueueTree::may_reclaim_from`]: KAI's cheap victim-queue filter (added to KAI after the
//!   reference snapshot): drops victim queues no strategy could ever accept.
//! - [`QueueTree::validate_reclaim`]: the scenario validator. Victim resources are grouped per
//!   queue (elastic tasks one by one, the core of a gang as one lump, moved victims not at all:
//!   see [`push_victim_chunks`]). For each victim queue the *levelled* pair (the siblings under the
//!   lowest common ancestor of reclaimer and victim) must satisfy, before each chunk is subtracted:
//!   - *maintain fair share*: the reclaimee-level queue's remaining allocation exceeds its
//!     allocatable share on some slot; or
//!   - *guarantee deserved quota*: the reclaimer-level queue's allocation + request fits its
//!     deserved quota on every slot, and the reclaimee-level queue is above deserved on some slot;
//!   - (opt-in `queue_priority_in_quota_reclaim`) the reclaimer level has strictly higher priority
//!     and fits its deserved quota.
//!
//!   The chunk is then subtracted from the victim queue and all its ancestors. Finally, for the
//!   reclaimer's queue and each ancestor, against every touched sibling, on the slots involved:
//!   the reclaimer may end above its fair share only if it stays strictly less saturated
//!   (`allocated / fair share`, times the saturation multiplier) than the sibling; and a
//!   non-preemptible reclaimer must stay within deserved at every level.
//!
//! The validator reads an explicit baseline [`Accounting`] (KAI's `jobSimulationQueues`, the queue
//! state when the job's solution search started), not the simulation's current state.

use std::fmt;

use super::capacity::{Bound, Shortfall};
use super::tree::{Accounting, Preemptibility, QueueId, QueueTree};
use super::units::{SlotMask, UNLIMITED, cmp_quantity, to_share};
use crate::model::resources::{ResourceNames, Resources};

/// The job that wants resources back.
#[derive(Clone, Copy, Debug)]
pub struct Reclaimer<'a> {
    /// Its leaf queue.
    pub queue: QueueId,
    /// Resources of the tasks it needs now (KAI: the init request of the tasks to allocate).
    pub request: &'a Resources,
    /// Whether the reclaimer itself is preemptible.
    pub preemptibility: Preemptibility,
}

/// Resources given back by one victim queue in one step of the validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VictimChunk {
    /// The victim's leaf queue.
    pub queue: QueueId,
    /// Accepted resources of the tasks in this chunk.
    pub resources: Resources,
}

/// One task of a victim job in a scenario.
#[derive(Clone, Copy, Debug)]
pub struct VictimTask {
    /// The task's accepted resources.
    pub resources: Resources,
    /// The simulation re-placed (pipelined) the task elsewhere instead of evicting it.
    pub moved: bool,
}

/// The victim tasks of one pod set, in eviction order, with the pod set's `minAvailable`.
#[derive(Clone, Copy, Debug)]
pub struct VictimPodSet<'a> {
    /// The pod set's `minAvailable`.
    pub min_available: usize,
    /// The victim tasks of this pod set in the scenario.
    pub tasks: &'a [VictimTask],
}

/// Appends the chunks of one victim job as KAI counts them: every task beyond `minAvailable` of its
/// pod set on its own (elastic), then all remaining tasks as one lump (the gang's core). With
/// `ignore_moved` (KAI's `--allow-consolidating-reclaim`, default on) moved tasks count nothing; a
/// chunk with nothing left is omitted.
pub fn push_victim_chunks(
    queue: QueueId,
    pod_sets: &[VictimPodSet<'_>],
    ignore_moved: bool,
    out: &mut Vec<VictimChunk>,
) {
    let counted = |t: &&VictimTask| !(ignore_moved && t.moved);
    for set in pod_sets {
        let core = set.min_available.min(set.tasks.len());
        for task in set.tasks[core..].iter().filter(counted) {
            out.push(VictimChunk {
                queue,
                resources: task.resources,
            });
        }
    }
    let mut core = Resources::ZERO;
    let mut any = false;
    for set in pod_sets {
        let n = set.min_available.min(set.tasks.len());
        for task in set.tasks[..n].iter().filter(counted) {
            core.add(&task.resources);
            any = true;
        }
    }
    if any {
        out.push(VictimChunk {
            queue,
            resources: core,
        });
    }
}

/// Why a reclaim was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum ReclaimRejection {
    /// Pre-filter: the reclaimer's queue would exceed its fair share.
    ReclaimerOverFairShare(Shortfall),
    /// A non-preemptible reclaimer would exceed deserved quota (leaf in the pre-filter, any level in
    /// the validator).
    ReclaimerNonPreemptibleOverQuota(Shortfall),
    /// No strategy allows taking this chunk from the victim's side of the tree.
    NoStrategy {
        /// The victim's leaf queue.
        victim_queue: QueueId,
        /// The reclaimer's ancestor under the lowest common ancestor.
        reclaimer_level: QueueId,
        /// The victim's ancestor under the lowest common ancestor.
        reclaimee_level: QueueId,
    },
    /// After the reclaim the reclaimer (at some level) would be above its fair share and not
    /// strictly less saturated than a sibling it takes from.
    SaturationNotLower {
        /// The reclaimer's queue at this level.
        queue: QueueId,
        /// The sibling taken from.
        sibling: QueueId,
        /// The slot.
        slot: usize,
        /// `allocated / fair share` of the reclaimer's queue after the reclaim.
        queue_ratio: f64,
        /// The same for the sibling.
        sibling_ratio: f64,
    },
}

impl ReclaimRejection {
    /// Human explanation.
    #[must_use]
    pub fn explain(&self, tree: &QueueTree, names: &ResourceNames) -> String {
        match self {
            Self::ReclaimerOverFairShare(s) | Self::ReclaimerNonPreemptibleOverQuota(s) => s.explain(names),
            Self::NoStrategy {
                victim_queue,
                reclaimer_level,
                reclaimee_level,
            } => format!(
                "queue {} may not take resources from queue {}: {} is within its fair share and {} is not starved \
                 below its deserved quota",
                tree.name(*reclaimer_level),
                tree.name(*victim_queue),
                tree.name(*reclaimee_level),
                tree.name(*reclaimer_level),
            ),
            Self::SaturationNotLower {
                queue,
                sibling,
                slot,
                queue_ratio,
                sibling_ratio,
            } => format!(
                "queue {} would use {:.2}x its fair share of {}, not less than queue {} at {:.2}x",
                tree.name(*queue),
                queue_ratio,
                names.name(*slot),
                tree.name(*sibling),
                sibling_ratio
            ),
        }
    }
}

impl fmt::Display for ReclaimRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ReclaimerOverFairShare(s) => {
                write!(f, "reclaimer over fair share in queue {}", s.queue_name)
            }
            Self::ReclaimerNonPreemptibleOverQuota(s) => {
                write!(
                    f,
                    "non-preemptible reclaimer over deserved quota in queue {}",
                    s.queue_name
                )
            }
            Self::NoStrategy { victim_queue, .. } => {
                write!(f, "no reclaim strategy allows victim queue {victim_queue:?}")
            }
            Self::SaturationNotLower { queue, sibling, .. } => {
                write!(
                    f,
                    "queue {queue:?} would not stay less saturated than sibling {sibling:?}"
                )
            }
        }
    }
}

/// Reusable buffers for [`QueueTree::validate_reclaim`].
#[derive(Clone, Debug, Default)]
pub struct ReclaimScratch {
    remaining: Vec<Option<Remaining>>,
    touched: Vec<QueueId>,
    victim_queues: Vec<QueueId>,
}

#[derive(Clone, Copy, Debug)]
struct Remaining {
    allocated: Resources,
    involved: SlotMask,
}

impl ReclaimScratch {
    fn reset(&mut self, queues: usize) {
        for q in self.touched.drain(..) {
            self.remaining[q.index()] = None;
        }
        self.remaining.resize(queues, None);
        self.victim_queues.clear();
    }

    fn entry(&mut self, q: QueueId, baseline: &Accounting) -> &mut Remaining {
        let slot = &mut self.remaining[q.index()];
        if slot.is_none() {
            *slot = Some(Remaining {
                allocated: baseline.get(q).allocated,
                involved: SlotMask::EMPTY,
            });
            self.touched.push(q);
        }
        slot.as_mut().expect("invariant: entry was just filled")
    }
}

/// KAI `fairShareSaturationRatio`.
fn saturation(allocated: f64, fair_share: f64) -> f64 {
    if fair_share == 0.0 {
        if allocated > 0.0 { f64::INFINITY } else { 0.0 }
    } else if fair_share == UNLIMITED {
        0.0
    } else {
        allocated / fair_share
    }
}

impl QueueTree {
    /// The reclaim pre-filter on the reclaimer's leaf queue, against current accounting.
    pub fn can_reclaim(&self, reclaimer: &Reclaimer<'_>) -> Result<(), ReclaimRejection> {
        let q = reclaimer.queue;
        let node = &self.nodes[q.index()];
        let usage = self.accounting.get(q);
        for slot in self.mask.iter() {
            let (used, requested) = (
                to_share(slot, usage.allocated.0[slot]),
                to_share(slot, reclaimer.request.0[slot]),
            );
            let fair_share = node.fair_share.0[slot];
            if cmp_quantity(used + requested, fair_share).is_gt() {
                return Err(ReclaimRejection::ReclaimerOverFairShare(self.shortfall(
                    q,
                    slot,
                    Bound::FairShare,
                    fair_share,
                    used,
                    requested,
                )));
            }
        }
        if reclaimer.preemptibility == Preemptibility::NonPreemptible {
            self.reclaimer_within_deserved(q, &usage.allocated_non_preemptible, reclaimer.request)?;
        }
        Ok(())
    }

    fn reclaimer_within_deserved(
        &self,
        q: QueueId,
        allocated_np: &Resources,
        request: &Resources,
    ) -> Result<(), ReclaimRejection> {
        let deserved = &self.nodes[q.index()].deserved;
        for slot in self.mask.iter() {
            let (used, requested) = (
                to_share(slot, allocated_np.0[slot]),
                to_share(slot, request.0[slot]),
            );
            if cmp_quantity(used + requested, deserved.0[slot]).is_gt() {
                return Err(ReclaimRejection::ReclaimerNonPreemptibleOverQuota(
                    self.shortfall(
                        q,
                        slot,
                        Bound::DeservedNonPreemptible,
                        deserved.0[slot],
                        used,
                        requested,
                    ),
                ));
            }
        }
        Ok(())
    }

    /// KAI `FilterVictim`, against current accounting: false when no strategy could accept taking
    /// anything from `victim_queue` for this reclaimer, so its jobs need not be tried as victims.
    #[must_use]
    pub fn may_reclaim_from(&self, reclaimer: &Reclaimer<'_>, victim_queue: QueueId) -> bool {
        let (reclaimer_level, reclaimee_level) = self.levelled(reclaimer.queue, victim_queue);
        let reclaimee_allocated = &self.accounting.get(reclaimee_level).allocated;
        if !self.within_deserved_with(reclaimer_level, reclaimer.request) {
            return self.exceeds_allocatable(reclaimee_level, reclaimee_allocated);
        }
        if self.config.queue_priority_in_quota_reclaim
            && self.priority(reclaimer_level) > self.priority(reclaimee_level)
        {
            return true;
        }
        let deserved = &self.nodes[reclaimee_level.index()].deserved;
        let mut under_deserved = false;
        for slot in self.mask.iter() {
            if to_share(slot, reclaimer.request.0[slot]) <= 0.0 || deserved.0[slot] == UNLIMITED {
                continue;
            }
            let allocated = to_share(slot, reclaimee_allocated.0[slot]);
            if allocated > deserved.0[slot] {
                return true;
            }
            if allocated < deserved.0[slot] {
                under_deserved = true;
            }
        }
        !under_deserved
    }

    /// The scenario validator. `baseline` is the accounting when the search for this reclaimer's
    /// solution started; `victims` are the chunks (see [`push_victim_chunks`]) in scenario order.
    pub fn validate_reclaim(
        &self,
        baseline: &Accounting,
        reclaimer: &Reclaimer<'_>,
        victims: &[VictimChunk],
        scratch: &mut ReclaimScratch,
    ) -> Result<(), ReclaimRejection> {
        scratch.reset(self.nodes.len());
        for chunk in victims {
            if !scratch.victim_queues.contains(&chunk.queue) {
                scratch.victim_queues.push(chunk.queue);
            }
        }
        for vi in 0..scratch.victim_queues.len() {
            let victim_queue = scratch.victim_queues[vi];
            let (reclaimer_level, reclaimee_level) = self.levelled(reclaimer.queue, victim_queue);
            let mut involved = SlotMask::EMPTY;
            for chunk in victims.iter().filter(|c| c.queue == victim_queue) {
                involved = involved.union(SlotMask::positive_in(self.mask, &chunk.resources));
            }
            for chunk in victims.iter().filter(|c| c.queue == victim_queue) {
                let remaining = scratch.entry(reclaimee_level, baseline).allocated;
                if !self.fits_a_strategy(baseline, reclaimer, reclaimer_level, reclaimee_level, &remaining) {
                    return Err(ReclaimRejection::NoStrategy {
                        victim_queue,
                        reclaimer_level,
                        reclaimee_level,
                    });
                }
                let mut current = Some(victim_queue);
                while let Some(q) = current {
                    let entry = scratch.entry(q, baseline);
                    entry.allocated.sub(&chunk.resources);
                    entry.involved = entry.involved.union(involved);
                    current = self.parent(q);
                }
            }
        }
        self.within_boundaries(baseline, reclaimer, scratch)
    }

    fn fits_a_strategy(
        &self,
        baseline: &Accounting,
        reclaimer: &Reclaimer<'_>,
        reclaimer_level: QueueId,
        reclaimee_level: QueueId,
        reclaimee_remaining: &Resources,
    ) -> bool {
        // Maintain fair share: the reclaimee side is above its allocatable share somewhere.
        if self.exceeds_allocatable(reclaimee_level, reclaimee_remaining) {
            return true;
        }
        let reclaimer_fits_deserved = self.fits_deserved(
            reclaimer_level,
            &baseline.get(reclaimer_level).allocated,
            reclaimer.request,
        );
        // Guarantee deserved quota: the reclaimer side is starved and the reclaimee side is above
        // its deserved quota somewhere.
        if reclaimer_fits_deserved {
            let deserved = &self.nodes[reclaimee_level.index()].deserved;
            let above_deserved = self.mask.iter().any(|slot| {
                cmp_quantity(to_share(slot, reclaimee_remaining.0[slot]), deserved.0[slot]).is_gt()
            });
            if above_deserved {
                return true;
            }
        }
        // In-quota queue priority (opt-in).
        self.config.queue_priority_in_quota_reclaim
            && self.priority(reclaimer_level) > self.priority(reclaimee_level)
            && reclaimer_fits_deserved
    }

    /// `allocated` is not within the allocatable share of `q` on every tracked slot.
    fn exceeds_allocatable(&self, q: QueueId, allocated: &Resources) -> bool {
        self.mask.iter().any(|slot| {
            cmp_quantity(to_share(slot, allocated.0[slot]), self.allocatable_share(q, slot)).is_gt()
        })
    }

    fn within_boundaries(
        &self,
        baseline: &Accounting,
        reclaimer: &Reclaimer<'_>,
        scratch: &ReclaimScratch,
    ) -> Result<(), ReclaimRejection> {
        let multiplier = self.config.reclaimer_saturation_multiplier;
        let reclaimer_involved = SlotMask::positive_in(self.mask, reclaimer.request);
        for q in self.path_to_root(reclaimer.queue) {
            let mut after = scratch.remaining[q.index()].map_or(baseline.get(q).allocated, |r| r.allocated);
            after.add(reclaimer.request);
            let fair_share = &self.nodes[q.index()].fair_share;
            for &sibling in &scratch.touched {
                if sibling == q || self.parent(sibling) != self.parent(q) {
                    continue;
                }
                let sibling_state =
                    scratch.remaining[sibling.index()].expect("invariant: touched queues have entries");
                let sibling_share = &self.nodes[sibling.index()].fair_share;
                for slot in sibling_state.involved.union(reclaimer_involved).iter() {
                    let (own_fair, sibling_fair) = (fair_share.0[slot], sibling_share.0[slot]);
                    if own_fair == UNLIMITED && sibling_fair == UNLIMITED {
                        continue;
                    }
                    let queue_ratio = saturation(to_share(slot, after.0[slot]), own_fair);
                    let sibling_ratio =
                        saturation(to_share(slot, sibling_state.allocated.0[slot]), sibling_fair);
                    if queue_ratio > 1.0 && sibling_fair > 0.0 && queue_ratio * multiplier >= sibling_ratio {
                        return Err(ReclaimRejection::SaturationNotLower {
                            queue: q,
                            sibling,
                            slot,
                            queue_ratio,
                            sibling_ratio,
                        });
                    }
                }
            }
            if reclaimer.preemptibility == Preemptibility::NonPreemptible {
                self.reclaimer_within_deserved(
                    q,
                    &baseline.get(q).allocated_non_preemptible,
                    reclaimer.request,
                )?;
            }
        }
        Ok(())
    }
}
