//! Each queue's fair-share figures at the end of a cycle, as plain numbers: the scheduler exports them
//! as metrics under KAI's queue metric names. Nothing here decides anything.

use std::sync::Arc;

use crate::fairshare::ShareVec;
use crate::framework::Session;
use crate::model::QueueId;

/// One queue's figures, in fair-share units: GPUs in devices (fractions allowed), CPU in millicores,
/// memory in bytes, extended resources in their own units. In `deserved` and `limit`,
/// [`crate::fairshare::UNLIMITED`] (-1) means no quota and no limit.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueFigures {
    /// The queue's name.
    pub name: Arc<str>,
    /// Allocated to its pods (rolled up over its children), after this cycle's decisions.
    pub allocated: ShareVec,
    /// Deserved quota, from its spec.
    pub deserved: ShareVec,
    /// Fair share from this cycle's division.
    pub fair_share: ShareVec,
    /// Limit, from its spec.
    pub limit: ShareVec,
}

/// The figures of every queue of the fair-share tree, in the model's queue order.
#[must_use]
pub fn figures(ssn: &Session<'_>) -> Vec<QueueFigures> {
    ssn.cluster
        .queues
        .iter()
        .filter_map(|(i, q)| {
            let report = ssn.fairness.report(QueueId(i))?;
            Some(QueueFigures {
                name: q.name.clone(),
                allocated: ShareVec::from_resources(&report.allocated),
                deserved: report.deserved,
                fair_share: report.fair_share,
                limit: report.limit,
            })
        })
        .collect()
}
