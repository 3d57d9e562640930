//! Capacity gates (`capacity_policy`): limits and the non-preemptible quota rule.
//!
//! - *OverLimit*: on the path leaf → root, a queue would exceed its limit on a slot the job
//!   requests (`allocated + request > limit`).
//! - *NonPreemptibleOverQuota*: a non-preemptible job would push some queue on the path over its
//!   deserved quota (`allocated non-preemptible + request > deserved`).
//!
//! Both return a [`Shortfall`] naming the queue, the slot and the amounts, from which the scheduler
//! writes explanations such as "queue team-a at its nvidia.com/gpu limit 4: allocated 4, gang
//! needs 2". Semi-preemptible jobs: the caller passes only the part of the request that must fit
//! in quota (KAI charges nothing once such a job has reached its minimum).

use std::fmt;
use std::sync::Arc;

use super::tree::{Preemptibility, QueueId, QueueTree};
use super::units::{UNLIMITED, le_tol, to_raw, to_share};
use crate::model::resources::{ResourceNames, Resources};

/// Which bound a [`Shortfall`] is about.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Bound {
    /// The queue's limit; `used` is allocated.
    Limit,
    /// The queue's deserved quota; `used` is allocated by non-preemptible jobs.
    DeservedNonPreemptible,
    /// The queue's fair share; `used` is allocated.
    FairShare,
}

/// A queue that a request does not fit into, on one slot. Amounts in fair-share units.
#[derive(Clone, Debug, PartialEq)]
pub struct Shortfall {
    /// The queue whose bound is exceeded.
    pub queue: QueueId,
    /// The queue's name, for messages (shared with the queue: compared by identity first).
    pub queue_name: Arc<str>,
    /// The resource slot.
    pub slot: usize,
    /// What the bound is.
    pub bound_kind: Bound,
    /// The bound's value.
    pub bound: f64,
    /// What the queue already uses against the bound.
    pub used: f64,
    /// What the job asks for.
    pub requested: f64,
}

impl Shortfall {
    /// Human explanation, amounts in the resource's usual notation.
    #[must_use]
    pub fn explain(&self, names: &ResourceNames) -> String {
        let amount = |v: f64| names.format_amount(self.slot, to_raw(self.slot, v));
        let resource = names.name(self.slot);
        let (what, used) = match self.bound_kind {
            Bound::Limit => ("limit", "allocated"),
            Bound::DeservedNonPreemptible => ("deserved quota", "allocated to non-preemptible jobs"),
            Bound::FairShare => ("fair share", "allocated"),
        };
        format!(
            "queue {} at its {resource} {what} {}: {used} {}, gang needs {}",
            self.queue_name,
            amount(self.bound),
            amount(self.used),
            amount(self.requested)
        )
    }
}

/// Why a job may not be allocated in its queue right now.
#[derive(Clone, Debug, PartialEq)]
pub enum CapacityViolation {
    /// KAI reason `OverLimit`.
    OverLimit(Shortfall),
    /// KAI reason `NonPreemptibleOverQuota`.
    NonPreemptibleOverQuota(Shortfall),
}

impl CapacityViolation {
    /// The shortfall behind the violation.
    #[must_use]
    pub fn shortfall(&self) -> &Shortfall {
        match self {
            Self::OverLimit(s) | Self::NonPreemptibleOverQuota(s) => s,
        }
    }

    /// KAI's reason code, as written into PodGroup scheduling conditions.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::OverLimit(_) => "OverLimit",
            Self::NonPreemptibleOverQuota(_) => "NonPreemptibleOverQuota",
        }
    }
}

impl fmt::Display for CapacityViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.shortfall();
        write!(
            f,
            "{}: queue {} slot {}: bound {}, used {}, requested {}",
            self.reason(),
            s.queue_name,
            s.slot,
            s.bound,
            s.used,
            s.requested
        )
    }
}

impl QueueTree {
    /// The first queue on the path leaf → root whose limit `request` would exceed, on a tracked
    /// slot the request uses.
    #[must_use]
    pub fn over_limit(&self, leaf: QueueId, request: &Resources) -> Option<Shortfall> {
        for q in self.path_to_root(leaf) {
            let node = &self.nodes[q.index()];
            let allocated = &self.accounting.get(q).allocated;
            for slot in self.mask.iter() {
                let (limit, requested) = (node.limit.0[slot], to_share(slot, request.0[slot]));
                if limit == UNLIMITED || requested == 0.0 {
                    continue;
                }
                let used = to_share(slot, allocated.0[slot]);
                if !le_tol(used + requested, limit) {
                    return Some(self.shortfall(q, slot, Bound::Limit, limit, used, requested));
                }
            }
        }
        None
    }

    /// The first queue on the path leaf → root whose deserved quota a non-preemptible `request`
    /// would exceed (allocated non-preemptible + request > deserved).
    #[must_use]
    pub fn non_preemptible_over_quota(&self, leaf: QueueId, request: &Resources) -> Option<Shortfall> {
        for q in self.path_to_root(leaf) {
            let node = &self.nodes[q.index()];
            let allocated = &self.accounting.get(q).allocated_non_preemptible;
            for slot in self.mask.iter() {
                let (deserved, requested) = (node.deserved.0[slot], to_share(slot, request.0[slot]));
                if deserved == UNLIMITED || requested == 0.0 {
                    continue;
                }
                let used = to_share(slot, allocated.0[slot]);
                if !le_tol(used + requested, deserved) {
                    return Some(self.shortfall(
                        q,
                        slot,
                        Bound::DeservedNonPreemptible,
                        deserved,
                        used,
                        requested,
                    ));
                }
            }
        }
        None
    }

    /// KAI `IsJobOverQueueCapacity`: the limit check, then (non-preemptible jobs only) the quota
    /// check.
    pub fn check_capacity(
        &self,
        leaf: QueueId,
        request: &Resources,
        preemptibility: Preemptibility,
    ) -> Result<(), CapacityViolation> {
        if let Some(s) = self.over_limit(leaf, request) {
            return Err(CapacityViolation::OverLimit(s));
        }
        if preemptibility == Preemptibility::NonPreemptible
            && let Some(s) = self.non_preemptible_over_quota(leaf, request)
        {
            return Err(CapacityViolation::NonPreemptibleOverQuota(s));
        }
        Ok(())
    }

    pub(crate) fn shortfall(
        &self,
        q: QueueId,
        slot: usize,
        bound_kind: Bound,
        bound: f64,
        used: f64,
        requested: f64,
    ) -> Shortfall {
        Shortfall {
            queue: q,
            queue_name: Arc::clone(&self.nodes[q.index()].name),
            slot,
            bound_kind,
            bound,
            used,
            requested,
        }
    }
}
