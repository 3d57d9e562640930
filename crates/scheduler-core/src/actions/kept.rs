//! The backlog's kept gangs in consolidation and preempt (reclaim orders them among its queues' gangs
//! itself: `ordering::JobQueues::with_kept`).
//!
//! A kept gang (`framework::backlog`) waits behind a gang of its class that is in the session: the last
//! one allocate took in, which failed, comes before every kept one in job order. These actions try
//! gangs in one job order across queues and ask each gang of a class the same of the same candidates
//! (same queue, priority, shape and preemption policy), and a search that finds nothing leaves the
//! session as it found it; so while nothing is evicted, a kept gang's turn would end as its class's
//! last one did, and it needs none. Once something is evicted (the session's checkpoint moves), the
//! first kept gang of each class after the action's place is taken in, answered as allocate answered
//! its class, and has its turn in its place; each further eviction does the same.

use crate::framework::Session;
use crate::framework::backlog::{ClassKey, JobPlace};
use crate::framework::report::explain::Why;
use crate::model::QueueId;

/// The kept gangs' classes a victim action may have to take gangs in from.
pub(super) struct Kept {
    /// The session's checkpoint at the last look.
    at: usize,
    /// Classes allocate told the kept gangs of that their pods found no place (the only answer a
    /// victim action acts on), with that answer.
    classes: Vec<(ClassKey, Why)>,
}

impl Kept {
    /// The kept gangs as the action starts.
    pub(super) fn new(ssn: &Session<'_>) -> Self {
        Self {
            at: ssn.checkpoint(),
            classes: ssn
                .backlog_classes()
                .into_iter()
                .filter(|(_, why)| matches!(why, Why::NoFit(_)))
                .collect(),
        }
    }

    /// Whether no gang can come in.
    pub(super) fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// After a gang's turn: if something was evicted since the last look, takes in, for each class,
    /// its first kept gang after `place(queue)` (the action's place among that queue's gangs; `None`:
    /// none of them had its turn yet, and the class's gang in the session comes first), answered as
    /// allocate answered the class. Returns the gangs taken in, to be given their turns in their places.
    pub(super) fn take_in(
        &mut self,
        ssn: &mut Session<'_>,
        place: &dyn Fn(&Session<'_>, QueueId) -> Option<JobPlace>,
    ) -> Vec<usize> {
        if self.classes.is_empty() || ssn.checkpoint() == self.at {
            return Vec::new();
        }
        self.at = ssn.checkpoint();
        let mut taken = Vec::new();
        for (key, why) in &self.classes {
            let Some(after) = place(ssn, key.queue) else {
                continue;
            };
            if let Some(g) = ssn.take_from_backlog_after(key, &after) {
                super::allocate::answer_as_class(ssn, g, key.clone(), why);
                taken.push(g);
            }
        }
        taken
    }
}

/// Gang `g`'s place in job order (`ordering::job_key`).
pub(super) fn place_of(ssn: &Session<'_>, g: usize) -> JobPlace {
    crate::framework::policy::ordering::job_place(ssn, g)
}
