//! preempt: inside a queue, a waiting gang evicts strictly lower-priority preemptible work, the fewest
//! victims needed, whole gangs or surplus elastic members only. The freed room is reserved for it and it
//! is bound in a later cycle, once the victims are gone.

use super::kept::Kept;
use super::victims::{self, Pool, Request, Unit};
use crate::config::ActionKind;
use crate::framework::Session;
use crate::framework::decisions::EvictionCause;
use crate::framework::report::explain::Why;
use crate::model::QueueId;

/// Gangs that allocate could not place because no node had room (the only ones eviction can help), and
/// that may evict others for it: not a gang with a pod of `preemptionPolicy: Never` waiting, which
/// kube-scheduler never lets preempt (here it neither preempts, reclaims nor consolidates). In no
/// particular order: ordering them ([`in_job_order`]) costs most, and an action with nothing to do for
/// any of them need not pay it.
pub(crate) fn waiting_for_room(ssn: &Session<'_>) -> Vec<usize> {
    ssn.outcomes
        .iter()
        .filter(|(_, o)| !o.placed() && matches!(o.why.first(), Some(Why::NoFit(_))))
        .map(|(g, _)| g)
        .filter(|g| {
            !ssn.gangs[*g].tasks().any(|t| {
                let task = ssn.cluster.task(t);
                task.never_preempts && task.status.is_pending()
            })
        })
        .collect()
}

/// Sorts gangs in job order (`ordering::job_key`): the order the victim actions try them in.
pub(crate) fn in_job_order(ssn: &Session<'_>, gangs: &mut [usize]) {
    gangs.sort_by_cached_key(|g| crate::framework::policy::ordering::job_key(ssn, *g));
}

/// Runs preempt.
pub fn preempt(ssn: &mut Session<'_>) {
    let mut pools = VictimPools::default();
    // A waiting gang whose queue holds no possible victim below its priority has nothing to search,
    // and none appears during preempt (a preemptor a later one could evict would come after it), so
    // it is left out before the ordering: a backlog of like jobs costs a pass, not a sort.
    let mut lowest: std::collections::HashMap<QueueId, Option<i32>> = std::collections::HashMap::new();
    let mut preemptors = waiting_for_room(ssn);
    preemptors.retain(|g| {
        let Some(queue) = ssn.gangs[*g].queue else {
            return true;
        };
        let lowest = *lowest
            .entry(queue)
            .or_insert_with(|| lowest_victim_priority(ssn, queue));
        lowest.is_some_and(|p| p < ssn.gangs[*g].priority)
    });
    in_job_order(ssn, &mut preemptors);
    let mut kept = Kept::new(ssn);
    let mut next = 0;
    while let Some(&g) = preemptors.get(next) {
        next += 1;
        // Its place in the order, before its turn (a gang that gets room is no longer below its
        // minimum, which moves it in job order).
        let place = (!kept.is_empty()).then(|| super::kept::place_of(ssn, g));
        turn(ssn, &mut pools, g);
        // The backlog's gangs of a class after this one, if an eviction may change their answer.
        let Some(place) = place else {
            continue;
        };
        for t in kept.take_in(ssn, &|_, _| Some(place.clone())) {
            let may = ssn.gangs[t].queue.is_none_or(|queue| {
                let lowest = *lowest
                    .entry(queue)
                    .or_insert_with(|| lowest_victim_priority(ssn, queue));
                lowest.is_some_and(|p| p < ssn.gangs[t].priority)
            });
            if may {
                let key = crate::framework::policy::ordering::job_key(ssn, t);
                let at = next
                    + preemptors[next..]
                        .partition_point(|x| crate::framework::policy::ordering::job_key(ssn, *x) < key);
                preemptors.insert(at, t);
            }
        }
    }
}

/// Preemptor `g`'s turn.
fn turn(ssn: &mut Session<'_>, pools: &mut VictimPools, g: usize) {
    ssn.attempt(g);
    if ssn.outcomes.get(&g).is_some_and(|o| o.placed()) {
        pools.placed_without_victims(ssn, g);
        return;
    }
    let (queue, priority) = (ssn.gangs[g].queue, ssn.gangs[g].priority);
    let pool = pools.of(ssn, queue);
    // Lowest priority first, then the newest; only those below the preemptor's priority.
    let slots = pool.below(ssn, priority);
    pool.wake_protected(ssn, slots, g);
    if !pool.any_victim(ssn, slots, g) {
        return;
    }
    pool.pool.fill_to(ssn, slots);
    let preemptor = ssn.cluster.group(ssn.gangs[g].root).key.to_string();
    let message = |_: &Session<'_>, _: &Unit| format!("preempted by higher priority workload {preemptor}");
    let request = Request::among(g, pool.pool.candidates(), EvictionCause::Preempt, &message)
        .first_slots(slots)
        .excluding_gang(g);
    if let Ok(chosen) = victims::solve(ssn, &request) {
        ssn.mark_placed(g, ActionKind::Preempt);
        ssn.explain(g, Why::Pipelined);
        pools.after_evictions(ssn, queue, g, &chosen);
    }
}

/// Each queue's possible victims, kept across the queue's preemptors: its preemptible gangs with a
/// placed pod, lowest priority first, then the newest (ties in gang order), with their victim units.
/// A preemptor takes those below its own priority. Only what a search changed is refreshed: the
/// gangs it evicted from and the preemptor itself (its placed pods change its surplus); a gang placed
/// by the allocate step of a later preemptor, newly a possible victim, rebuilds the lists after the
/// next eviction, as a list rebuilt after every eviction would see it. Listing every victim for every
/// preemptor made preempt quadratic in a queue's gangs.
#[derive(Default)]
struct VictimPools {
    by_queue: std::collections::HashMap<Option<QueueId>, VictimPool>,
    /// A gang with no victim slot was placed: the lists miss it.
    missing_a_gang: bool,
}

impl VictimPools {
    fn of(&mut self, ssn: &Session<'_>, queue: Option<QueueId>) -> &mut VictimPool {
        self.by_queue
            .entry(queue)
            .or_insert_with(|| VictimPool::build(ssn, queue))
    }

    /// Gang `g` was placed without evictions: its slot (if it has one) is refilled now; a gang without
    /// one joins the lists after the next eviction.
    fn placed_without_victims(&mut self, ssn: &Session<'_>, g: usize) {
        let Some(pool) = self.by_queue.get_mut(&ssn.gangs[g].queue) else {
            return;
        };
        if !pool.pool.refill(ssn, g) {
            self.missing_a_gang = true;
        }
    }

    /// Gang `g` evicted `chosen` and holds reservations now.
    fn after_evictions(&mut self, ssn: &Session<'_>, queue: Option<QueueId>, g: usize, chosen: &[Unit]) {
        if std::mem::take(&mut self.missing_a_gang) {
            self.by_queue.clear();
            return;
        }
        if let Some(pool) = self.by_queue.get_mut(&queue) {
            pool.pool.refill_after(ssn, g, chosen);
        }
    }
}

/// One queue's possible victims (see [`VictimPools`]).
struct VictimPool {
    pool: Pool,
    /// Slots before this one were offered to a preemptor (and woke the session if protected).
    offered: usize,
    /// Slots passed over because their gang was the preemptor (offered to the next one that may take them).
    passed_over: Vec<usize>,
}

impl VictimPool {
    fn build(ssn: &Session<'_>, queue: Option<QueueId>) -> Self {
        let listed = |gangs: &mut dyn Iterator<Item = usize>| -> Vec<usize> {
            let mut list: Vec<usize> = gangs
                .filter(|v| {
                    let h = &ssn.gangs[*v];
                    h.queue == queue && h.preemptible && has_placed_pod(ssn, *v)
                })
                .collect();
            list.sort_by_key(|v| (ssn.gangs[*v].priority, -ssn.gangs[*v].created));
            list
        };
        // Victims share the preemptor's queue: list that queue's gangs, not every gang.
        let gangs = match queue {
            Some(q) => listed(&mut ssn.gangs_in_queue(q).iter().copied()),
            None => listed(&mut (0..ssn.gangs.len())),
        };
        Self {
            pool: Pool::new(gangs, |ssn, v| victims::min_runtime_end(ssn, v, false).is_none()),
            offered: 0,
            passed_over: Vec::new(),
        }
    }

    /// The number of slots whose gangs' priority is below `priority`.
    fn below(&self, ssn: &Session<'_>, priority: i32) -> usize {
        self.pool
            .gangs()
            .partition_point(|v| ssn.gangs[*v].priority < priority)
    }

    /// A protected gang offered to a preemptor wakes the session when its protection ends (once is
    /// enough: the earliest wake wins).
    fn wake_protected(&mut self, ssn: &Session<'_>, slots: usize, g: usize) {
        let gangs = self.pool.gangs();
        let offer = |slot: usize, passed_over: &mut Vec<usize>| {
            let v = gangs[slot];
            if v == g {
                passed_over.push(slot);
            } else if has_placed_pod(ssn, v)
                && let Some(end) = victims::min_runtime_end(ssn, v, false)
            {
                ssn.wake_at(end);
            }
        };
        let mut passed_over = Vec::new();
        for slot in std::mem::take(&mut self.passed_over) {
            if slot < slots {
                offer(slot, &mut passed_over);
            } else {
                passed_over.push(slot);
            }
        }
        for slot in self.offered..slots {
            offer(slot, &mut passed_over);
        }
        self.offered = self.offered.max(slots);
        self.passed_over = passed_over;
    }

    /// Whether a gang other than `g` among the first `slots` still has a placed pod.
    fn any_victim(&self, ssn: &Session<'_>, slots: usize, g: usize) -> bool {
        self.pool.gangs()[..slots]
            .iter()
            .any(|v| *v != g && has_placed_pod(ssn, *v))
    }
}

/// The lowest priority among `queue`'s possible victims (preemptible gangs with a placed pod), if it has
/// any: what [`VictimPool::build`] would list, at its head. A gang no lower than the lowest found so far
/// cannot change the answer, so its pods are not looked at (a queue of like priorities reads one
/// gang's pods, not every gang's).
fn lowest_victim_priority(ssn: &Session<'_>, queue: QueueId) -> Option<i32> {
    let mut lowest: Option<i32> = None;
    for &v in ssn.gangs_in_queue(queue) {
        let gang = &ssn.gangs[v];
        if !gang.preemptible || lowest.is_some_and(|l| gang.priority >= l) {
            continue;
        }
        if has_placed_pod(ssn, v) {
            lowest = Some(gang.priority);
        }
    }
    debug_assert_eq!(
        lowest,
        ssn.gangs_in_queue(queue)
            .iter()
            .filter(|v| ssn.gangs[**v].preemptible && has_placed_pod(ssn, **v))
            .map(|v| ssn.gangs[*v].priority)
            .min()
    );
    lowest
}

/// Whether a pod of the gang holds a node: only such a gang can be a victim.
pub(crate) fn has_placed_pod(ssn: &Session<'_>, gang: usize) -> bool {
    ssn.gang_has_placed_pod(gang)
}
