//! The session's view of queue accounting and fair share: per queue allocated and requested resources,
//! the capacity gates, and the order between sibling queues.
//!
//! DEVELOPMENT SCAFFOLD: limits and a simple order only, until `crate::fairshare` (KAI's division)
//! is wired in.

use std::cmp::Ordering;

use super::explain::QueueGate;
use super::gang::Gang;
use crate::config::ProportionArgs;
use crate::model::resources::{GPU, MAX_RESOURCES, MEMORY, PODS};
use crate::model::{Cluster, QueueId, Resources};

/// Converts a model amount to share units (GPU devices, CPU millicores, memory MB, others as is).
#[must_use]
pub fn to_share_units(slot: usize, amount: i64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let a = amount as f64;
    match slot {
        GPU => a / 1000.0,
        MEMORY => a / 1e6,
        _ => a,
    }
}

/// Queue accounting for one session.
#[derive(Clone, Debug, Default)]
pub struct Fairness {
    allocated: Vec<Resources>,
    allocated_non_preemptible: Vec<Resources>,
    requested: Vec<Resources>,
}

impl Fairness {
    /// Accounting from the model.
    #[must_use]
    pub fn open(cluster: &Cluster, gangs: &[Gang], _args: &ProportionArgs) -> Self {
        let n = cluster.queues.capacity();
        let mut f = Self {
            allocated: vec![Resources::ZERO; n],
            allocated_non_preemptible: vec![Resources::ZERO; n],
            requested: vec![Resources::ZERO; n],
        };
        for gang in gangs {
            let Some(q) = gang.queue else { continue };
            for t in gang.tasks() {
                let task = cluster.task(t);
                if task.status.is_allocated() {
                    f.roll(cluster, q, &task.request, gang.preemptible, 1);
                }
                if task.status.is_allocated() || task.status.is_pending() {
                    f.roll_requested(cluster, q, &task.request);
                }
            }
        }
        f
    }

    fn roll(&mut self, cluster: &Cluster, queue: QueueId, r: &Resources, preemptible: bool, sign: i64) {
        let r = r.times(sign);
        let mut cur = Some(queue);
        while let Some(q) = cur {
            self.allocated[q.index()].add(&r);
            if !preemptible {
                self.allocated_non_preemptible[q.index()].add(&r);
            }
            cur = cluster.queue(q).parent;
        }
    }

    fn roll_requested(&mut self, cluster: &Cluster, queue: QueueId, r: &Resources) {
        let mut cur = Some(queue);
        while let Some(q) = cur {
            self.requested[q.index()].add(r);
            cur = cluster.queue(q).parent;
        }
    }

    /// Applies an allocation change.
    pub fn change(
        &mut self,
        cluster: &Cluster,
        queue: QueueId,
        share: &Resources,
        preemptible: bool,
        sign: i64,
    ) {
        self.roll(cluster, queue, share, preemptible, sign);
    }

    /// KAI's capacity gates for a gang asking `request` more.
    ///
    /// # Errors
    /// The first queue rule it would break.
    pub fn gate(
        &self,
        cluster: &Cluster,
        queue: QueueId,
        request: &Resources,
        preemptible: bool,
    ) -> Result<(), QueueGate> {
        let mut cur = Some(queue);
        while let Some(q) = cur {
            let spec = cluster.queue(q);
            for slot in 0..MAX_RESOURCES {
                if slot == PODS || request.0[slot] == 0 {
                    continue;
                }
                let limit = spec.resources[slot].limit;
                let allocated = to_share_units(slot, self.allocated[q.index()].0[slot]);
                let requested = to_share_units(slot, request.0[slot]);
                if limit >= 0.0 && allocated + requested > limit + 1e-9 {
                    return Err(QueueGate::OverLimit {
                        queue: spec.name.to_string(),
                        slot,
                        limit,
                        allocated,
                        requested,
                    });
                }
                let quota = spec.resources[slot].quota;
                let np = to_share_units(slot, self.allocated_non_preemptible[q.index()].0[slot]);
                if !preemptible && quota >= 0.0 && np + requested > quota + 1e-9 {
                    return Err(QueueGate::NonPreemptibleOverQuota {
                        queue: spec.name.to_string(),
                        slot,
                        quota,
                        allocated: np,
                        requested,
                    });
                }
            }
            cur = spec.parent;
        }
        Ok(())
    }

    /// Order between two sibling queues for their best gangs' requests (less = served first).
    #[must_use]
    pub fn compare(
        &self,
        cluster: &Cluster,
        a: QueueId,
        _a_req: &Resources,
        b: QueueId,
        _b_req: &Resources,
    ) -> Ordering {
        let (qa, qb) = (cluster.queue(a), cluster.queue(b));
        qb.priority
            .cmp(&qa.priority)
            .then(
                self.allocated[a.index()]
                    .gpu()
                    .cmp(&self.allocated[b.index()].gpu()),
            )
            .then(qa.created.cmp(&qb.created))
            .then(qa.name.cmp(&qb.name))
    }

    /// Allocated resources of a queue (rolled up).
    #[must_use]
    pub fn allocated(&self, queue: QueueId) -> Resources {
        self.allocated[queue.index()]
    }

    /// Requested resources of a queue (rolled up).
    #[must_use]
    pub fn requested(&self, queue: QueueId) -> Resources {
        self.requested[queue.index()]
    }
}
