//! preempt: inside a queue, a waiting gang evicts strictly lower-priority preemptible work, the fewest
//! victims needed, whole gangs or surplus elastic members only. The freed room is reserved for it and it
//! is bound in a later cycle, once the victims are gone.

use super::victims::{self, Request, Unit};
use crate::config::ActionKind;
use crate::framework::Session;
use crate::framework::decisions::EvictionCause;
use crate::framework::report::explain::Why;
use crate::model::QueueId;

/// Gangs that allocate could not place because no node had room (the only ones eviction can help), and
/// that may evict others for it: not a gang with a pod of `preemptionPolicy: Never` waiting, which
/// kube-scheduler never lets preempt (here it neither preempts, reclaims nor consolidates).
pub(crate) fn waiting_for_room(ssn: &Session<'_>) -> Vec<usize> {
    let mut gangs: Vec<usize> = ssn
        .outcomes
        .iter()
        .filter(|(_, o)| !o.placed() && matches!(o.why.first(), Some(Why::NoFit(_))))
        .map(|(g, _)| *g)
        .filter(|g| {
            !ssn.gangs[*g].tasks().any(|t| {
                let task = ssn.cluster.task(t);
                task.never_preempts && task.status.is_pending()
            })
        })
        .collect();
    gangs.sort_by_cached_key(|g| crate::framework::policy::ordering::job_key(ssn, *g));
    gangs
}

/// Runs preempt.
pub fn preempt(ssn: &mut Session<'_>) {
    let mut victims_by_queue = VictimsByQueue::default();
    for g in waiting_for_room(ssn) {
        ssn.attempt(g);
        if ssn.outcomes.get(&g).is_some_and(|o| o.placed()) {
            continue;
        }
        let (queue, priority) = (ssn.gangs[g].queue, ssn.gangs[g].priority);
        // Lowest priority first, then the newest; only those below the preemptor's priority.
        let victim_gangs: Vec<usize> = victims_by_queue
            .of(ssn, queue)
            .iter()
            .copied()
            .take_while(|v| ssn.gangs[*v].priority < priority)
            .filter(|v| *v != g)
            .collect();
        if victim_gangs.is_empty() {
            continue;
        }
        let mut candidates: Vec<Unit> = Vec::new();
        for v in victim_gangs {
            let protected = victims::protected_by_min_runtime(ssn, v, false);
            candidates.extend(victims::units_of(ssn, v, !protected));
        }
        let preemptor = ssn.cluster.group(ssn.gangs[g].root).key.to_string();
        let message =
            |_: &Session<'_>, _: &Unit| format!("preempted by higher priority workload {preemptor}");
        let request = Request::new(g, candidates, EvictionCause::Preempt, &message);
        if victims::solve(ssn, &request).is_ok() {
            ssn.mark_placed(g, ActionKind::Preempt);
            ssn.explain(g, Why::Pipelined);
            // Evictions and a reservation were made: who holds what changed.
            victims_by_queue = VictimsByQueue::default();
        }
    }
}

/// Each queue's preemptible gangs with a placed pod, lowest priority first, then the newest (ties in
/// gang order): the victims any preemptor of the queue may choose from, cut at its own priority. Listed
/// once per queue and kept while nothing was evicted, since a preemptor that fails leaves the model as
/// it found it; one list per waiting gang made preempt quadratic in the gangs of a queue.
#[derive(Default)]
struct VictimsByQueue {
    by_queue: crate::model::IdMap<QueueId, Vec<usize>>,
    no_queue: Option<Vec<usize>>,
}

impl VictimsByQueue {
    fn of(&mut self, ssn: &Session<'_>, queue: Option<QueueId>) -> &[usize] {
        let list = |gangs: &mut dyn Iterator<Item = usize>| -> Vec<usize> {
            let mut list: Vec<usize> = gangs
                .filter(|v| {
                    let h = &ssn.gangs[*v];
                    h.queue == queue
                        && h.preemptible
                        && h.tasks().any(|t| ssn.cluster.task(t).status.is_allocated())
                })
                .collect();
            list.sort_by_key(|v| (ssn.gangs[*v].priority, -ssn.gangs[*v].created));
            list
        };
        match queue {
            // Victims share the preemptor's queue: list that queue's gangs, not every gang.
            Some(q) => self
                .by_queue
                .entry(q)
                .or_insert_with(|| list(&mut ssn.gangs_in_queue(q).iter().copied())),
            None => self
                .no_queue
                .get_or_insert_with(|| list(&mut (0..ssn.gangs.len()))),
        }
    }
}
