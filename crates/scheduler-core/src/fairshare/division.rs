//! KAI's fair-share division (`resource_division.SetResourcesShare`), per resource and per level.
//!
//! For one resource and one group of sibling queues sharing `total`:
//! 1. **Deserved phase**: every queue gets `min(deserved, requestable)` (deserved [`UNLIMITED`] =
//!    `total`; requestable = `min(limit, request)`, or the request without a limit), even when the
//!    sum exceeds `total` (intentional over-subscription).
//! 2. **Over-quota phase**, only if something remains: priority buckets, highest first, each fully
//!    served before the next. Per round, unsatisfied queues with weight > 0 are offered
//!    `round_amount * shareWeight / sum`, where `nWeight = w / Σw` and
//!    `shareWeight = max(0, nWeight + k (nWeight - usage))`. A queue needing no more than its offer
//!    gets exactly what it needs; otherwise it gets `floor(offer)` and the fraction is recorded.
//!    Another round runs only if someone needed less than offered.
//! 3. **Remainder pass** per bucket: each queue with a recorded fraction, largest fraction first
//!    (ties: older queue, then smaller UID/name), receives `min(1, remaining)` once. Like KAI, this
//!    does not look at what the queue still needs, so a fair share may end up to one unit above
//!    the request; kept for golden compatibility.
//! 4. The tree recurses into children with `total = parent fair share`.
//!
//! The float operations are done in KAI's order so results match bit for bit. Deviations, none of
//! which changes a terminating KAI run: queues are visited in age order instead of Go's random map
//! order (only the last float bits of sums could depend on it in KAI); a round cap of
//! `bucket size + 2` guards against a float fixed point where KAI would loop forever (in exact
//! arithmetic every extra round satisfies at least one queue).

use super::tree::{QueueId, QueueTree};
use super::units::{ShareVec, SlotMask, UNLIMITED, to_share};
use crate::model::resources::{FIRST_EXTENDED, MAX_RESOURCES, Resources};

/// One queue's inputs and output for one resource, in fair-share units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DivisionEntry {
    /// Deserved quota; [`UNLIMITED`] means `total`.
    pub deserved: f64,
    /// Limit; [`UNLIMITED`] means none.
    pub limit: f64,
    /// Over-quota weight.
    pub weight: f64,
    /// Requested (allocated + pending), rolled up.
    pub request: f64,
    /// Normalised historical usage (0 without a usage DB).
    pub usage: f64,
    /// Queue priority: buckets for the over-quota phase.
    pub priority: i32,
    /// Age rank (smaller is older): order of visits and remainder tie-break.
    pub rank: u32,
    /// Output (and, for [`divide_over_quota`], input): the fair share.
    pub fair_share: f64,
}

impl DivisionEntry {
    /// An entry with no limit, weight 1, no usage, priority 100 and fair share 0.
    #[must_use]
    pub fn new(deserved: f64, request: f64, rank: u32) -> Self {
        Self {
            deserved,
            limit: UNLIMITED,
            weight: 1.0,
            request,
            usage: 0.0,
            priority: super::tree::DEFAULT_QUEUE_PRIORITY,
            rank,
            fair_share: 0.0,
        }
    }

    fn requestable(&self) -> f64 {
        if self.limit == UNLIMITED {
            self.request
        } else {
            self.limit.min(self.request)
        }
    }

    fn remaining_requested(&self) -> f64 {
        let requestable = self.requestable();
        if requestable < self.fair_share {
            0.0
        } else {
            requestable - self.fair_share
        }
    }

    fn is_satisfied(&self) -> bool {
        self.request <= self.fair_share || (self.limit != UNLIMITED && self.limit <= self.fair_share)
    }
}

/// Reusable buffers so a division allocates only while they grow.
#[derive(Debug, Default)]
pub struct DivisionScratch {
    order: Vec<usize>,
    share_weights: Vec<f64>,
    fractions: Vec<Option<f64>>,
    candidates: Vec<usize>,
}

/// Divides `total` of one resource among sibling `entries` (deserved phase, then over quota).
/// Returns what remains undivided (0 when over-subscribed). Fair shares are added to
/// `entries[i].fair_share`, which callers start at 0.
pub fn divide_resource(
    total: f64,
    k_value: f64,
    entries: &mut [DivisionEntry],
    scratch: &mut DivisionScratch,
) -> f64 {
    let mut remaining = total;
    for entry in entries.iter_mut() {
        let deserved = if entry.deserved == UNLIMITED {
            total
        } else {
            entry.deserved
        };
        let amount = deserved.min(entry.requestable());
        entry.fair_share += amount;
        remaining -= amount;
    }
    if remaining > 0.0 {
        divide_over_quota(remaining, k_value, entries, scratch)
    } else {
        0.0
    }
}

/// The over-quota phase alone: divides `total` on top of the entries' current fair shares, by
/// priority bucket. Returns what remains undivided.
pub fn divide_over_quota(
    total: f64,
    k_value: f64,
    entries: &mut [DivisionEntry],
    scratch: &mut DivisionScratch,
) -> f64 {
    let mut order = std::mem::take(&mut scratch.order);
    order.clear();
    order.extend(0..entries.len());
    order.sort_by(|&a, &b| {
        entries[b]
            .priority
            .cmp(&entries[a].priority)
            .then(entries[a].rank.cmp(&entries[b].rank))
    });
    scratch.share_weights.clear();
    scratch.share_weights.resize(entries.len(), 0.0);
    scratch.fractions.clear();
    scratch.fractions.resize(entries.len(), None);

    let mut remaining = total;
    let mut start = 0;
    while start < order.len() {
        let priority = entries[order[start]].priority;
        let end = order[start..]
            .iter()
            .position(|&i| entries[i].priority != priority)
            .map_or(order.len(), |p| start + p);
        if remaining <= 0.0 {
            break;
        }
        let bucket = &order[start..end];
        remaining = divide_up_to_fair_share(remaining, k_value, entries, bucket, scratch);
        let any_fraction = bucket.iter().any(|&i| scratch.fractions[i].is_some());
        if remaining > 0.0 && any_fraction {
            remaining = divide_remainder(remaining, entries, bucket, scratch);
        }
        start = end;
    }
    scratch.order = order;
    remaining
}

/// Weighted rounds within one priority bucket (KAI `divideUpToFairShare`).
fn divide_up_to_fair_share(
    mut total: f64,
    k_value: f64,
    entries: &mut [DivisionEntry],
    bucket: &[usize],
    scratch: &mut DivisionScratch,
) -> f64 {
    for round in 0.. {
        if round > bucket.len() + 1 {
            break;
        }
        let mut run_another_round = false;
        let round_amount = total;
        let share_weight_sum = share_weights(entries, bucket, k_value, &mut scratch.share_weights);
        if share_weight_sum == 0.0 {
            break;
        }
        for &i in bucket {
            if total == 0.0 {
                break;
            }
            if entries[i].is_satisfied() {
                continue;
            }
            let requested = entries[i].remaining_requested();
            if entries[i].weight == 0.0 {
                continue;
            }
            let offer = round_amount * (scratch.share_weights[i] / share_weight_sum);
            let give = if requested <= offer {
                scratch.fractions[i] = None;
                requested
            } else {
                // Whole units only, "for better usability"; the fraction waits for the remainder pass.
                let floored = offer.floor();
                let give = if floored > 0.0 { floored } else { 0.0 };
                if offer - give > 0.0 {
                    scratch.fractions[i] = Some(offer - give);
                }
                give
            };
            if give == 0.0 {
                continue;
            }
            entries[i].fair_share += give;
            total -= give;
            run_another_round = run_another_round || requested < offer;
        }
        if !run_another_round || total == 0.0 {
            break;
        }
    }
    total
}

/// Fills `out[i]` for unsatisfied queues of the bucket and returns their sum (KAI `calcShareWeights`).
fn share_weights(entries: &[DivisionEntry], bucket: &[usize], k_value: f64, out: &mut [f64]) -> f64 {
    let total_weight: f64 = bucket
        .iter()
        .filter(|&&i| entries[i].remaining_requested() > 0.0)
        .map(|&i| entries[i].weight)
        .sum();
    if total_weight == 0.0 {
        return 0.0;
    }
    let mut sum = 0.0;
    for &i in bucket {
        if entries[i].is_satisfied() {
            continue;
        }
        let normalized = entries[i].weight / total_weight;
        let share_weight = (normalized + k_value * (normalized - entries[i].usage)).max(0.0);
        out[i] = share_weight;
        sum += share_weight;
    }
    sum
}

/// Hands the floored-away remainder out, one unit (or what is left) per recorded queue, largest
/// fraction first, then older queue (KAI `divideRemainingResource`).
fn divide_remainder(
    mut total: f64,
    entries: &mut [DivisionEntry],
    bucket: &[usize],
    scratch: &mut DivisionScratch,
) -> f64 {
    let fractions = &scratch.fractions;
    scratch.candidates.clear();
    scratch
        .candidates
        .extend(bucket.iter().copied().filter(|&i| fractions[i].is_some()));
    scratch.candidates.sort_by(|&a, &b| {
        let (fa, fb) = (fractions[a].unwrap_or(0.0), fractions[b].unwrap_or(0.0));
        fb.total_cmp(&fa).then(entries[a].rank.cmp(&entries[b].rank))
    });
    for &i in &scratch.candidates {
        if total == 0.0 {
            break;
        }
        let give = total.min(1.0);
        entries[i].fair_share += give;
        total -= give;
    }
    total
}

impl QueueTree {
    /// Computes every queue's fair share from the cluster capacity (model units: the allocatable
    /// resources of ready nodes minus what other schedulers' pods use) and the requests recorded
    /// with [`QueueTree::record_running`] / [`QueueTree::record_pending`].
    pub fn divide(&mut self, capacity: &Resources) {
        self.divide_total(ShareVec::from_resources(capacity));
    }

    /// [`Self::divide`] with the total already in fair-share units.
    pub fn divide_total(&mut self, total: ShareVec) {
        self.total = total;
        self.mask = self.tracked_slots();
        self.allocatable_order.get_mut().clear();
        for node in &mut self.nodes {
            node.fair_share = ShareVec::ZERO;
        }
        let mut scratch = DivisionScratch::default();
        let mut entries = Vec::new();
        let mut group: Vec<QueueId> = self.roots.clone();
        self.divide_group(&group, &total, &mut entries, &mut scratch);
        // Parents before children: a parent's fair share is final before its children share it.
        let mut frontier = std::mem::take(&mut group);
        while let Some(parent) = frontier.pop() {
            group.clear();
            group.extend_from_slice(&self.nodes[parent.index()].children);
            if group.is_empty() {
                continue;
            }
            let parent_share = self.nodes[parent.index()].fair_share;
            self.divide_group(&group, &parent_share, &mut entries, &mut scratch);
            frontier.extend_from_slice(&group);
        }
    }

    fn divide_group(
        &mut self,
        group: &[QueueId],
        total: &ShareVec,
        entries: &mut Vec<DivisionEntry>,
        scratch: &mut DivisionScratch,
    ) {
        let k_value = self.config.k_value;
        for slot in self.mask.iter() {
            entries.clear();
            entries.extend(group.iter().map(|q| {
                let node = &self.nodes[q.index()];
                DivisionEntry {
                    deserved: node.deserved.0[slot],
                    limit: node.limit.0[slot],
                    weight: node.weight.0[slot],
                    request: to_share(slot, self.accounting.get(*q).requested.0[slot]),
                    usage: node.usage.0[slot],
                    priority: node.priority,
                    rank: node.rank,
                    fair_share: 0.0,
                }
            }));
            divide_resource(total.0[slot], k_value, entries, scratch);
            for (q, entry) in group.iter().zip(entries.iter()) {
                self.nodes[q.index()].fair_share.0[slot] = entry.fair_share;
            }
        }
    }

    /// CPU, memory and GPU, plus every extended slot some queue gives a quota or a limit. Extended
    /// resources nobody configures stay invisible to fairness, as in KAI, so that e.g. a hugepages
    /// request never makes a non-preemptible job "over quota".
    fn tracked_slots(&self) -> SlotMask {
        let mut mask = SlotMask::CORE;
        for slot in FIRST_EXTENDED..MAX_RESOURCES {
            if self
                .nodes
                .iter()
                .any(|n| n.deserved.0[slot] != 0.0 || n.limit.0[slot] != UNLIMITED)
            {
                mask.insert(slot);
            }
        }
        mask
    }
}
