//! reclaim: across queues, a gang whose queue is below its fair share takes resources back from queues
//! above theirs. KAI's rules decide who may take from whom: the reclaimer's queue must stay within its
//! fair share, victims come from the most over-served queues first, and the chosen victims are
//! validated against the fair-share strategies and saturation boundaries of the queue tree.

use std::collections::{BTreeMap, VecDeque};

use super::victims::{self, Request, Unit};
use crate::config::ActionKind;
use crate::fairshare::ReclaimRejection;
use crate::framework::Session;
use crate::framework::decisions::EvictionCause;
use crate::framework::policy::ordering::JobQueues;
use crate::framework::report::explain::Why;
use crate::model::{QueueId, Resources, TaskId};

/// Runs reclaim.
pub fn reclaim(ssn: &mut Session<'_>) {
    // Ordered only when some queue may reclaim (the usual answer on a cluster at its fair shares is no).
    let mut waiting = super::preempt::waiting_for_room(ssn);
    if !some_queue_may_reclaim(ssn, &waiting) {
        // Debug builds (every test) check the bound against each gang's own request.
        #[cfg(debug_assertions)]
        for &g in &waiting {
            if let Some(queue) = ssn.gangs[g].queue
                && !ssn.outcomes.get(&g).is_some_and(|o| o.placed())
            {
                let request = pending_request(ssn, g);
                assert!(
                    ssn.fairness
                        .can_reclaim(queue, &request, ssn.gangs[g].preemptible)
                        .is_err(),
                    "gang {g} could reclaim though its queue's bound could not"
                );
            }
        }
        return;
    }
    super::preempt::in_job_order(ssn, &mut waiting);
    let mut order = JobQueues::new(ssn, waiting.into_iter(), false);
    while let Some(g) = order.pop(ssn) {
        ssn.attempt(g);
        if ssn.outcomes.get(&g).is_some_and(|o| o.placed()) {
            continue;
        }
        let Some(queue) = ssn.gangs[g].queue else { continue };
        let preemptible = ssn.gangs[g].preemptible;
        let request = pending_request(ssn, g);
        if ssn.fairness.can_reclaim(queue, &request, preemptible).is_err() {
            continue;
        }
        let candidates = candidates(ssn, g, queue, &request, preemptible);
        if candidates.is_empty() {
            continue;
        }
        let baseline = ssn.fairness.snapshot();
        let reclaimer = ssn.cluster.group(ssn.gangs[g].root).key.to_string();
        let reclaimed_by = reclaim_message(ssn, queue, &reclaimer);
        let validate = |ssn: &Session<'_>, units: &[Unit]| -> Result<(), ReclaimRejection> {
            let chunks = chunks(ssn, units);
            ssn.fairness
                .validate_reclaim(&baseline, queue, &request, preemptible, &chunks)
        };
        let message = |ssn: &Session<'_>, u: &Unit| victim_message(ssn, u, &reclaimed_by);
        let request = Request::new(g, candidates, EvictionCause::Reclaim, &message).validated_by(&validate);
        if victims::solve(ssn, &request).is_ok() {
            ssn.mark_placed(g, ActionKind::Reclaim);
            ssn.explain(g, Why::Pipelined);
        }
    }
}

/// Whether some waiting gang could pass its queue's `can_reclaim` check, judged per queue with a lower
/// bound of every request its gangs could make: the smallest share, slot by slot, of a pod any of them
/// could place (nothing, for a gang with no such pod). The check only fails more as a request grows
/// (allocated + request against the fair share, and for non-preemptible work against the quota too, on
/// every slot), and reads only the reclaimer's queue, whose accounting nothing changes until some
/// gang passes it. So when no queue passes with its bound, every gang of the pass below would be
/// refused, and the pass is skipped: on a cluster where every queue holds its fair share, a backlog
/// costs one look per pod instead of an ordered pass that works out each gang's request.
fn some_queue_may_reclaim(ssn: &Session<'_>, waiting: &[usize]) -> bool {
    let cluster = &*ssn.cluster;
    let mut least: BTreeMap<QueueId, Resources> = BTreeMap::new();
    for &g in waiting {
        let gang = &ssn.gangs[g];
        let Some(queue) = gang.queue else { continue };
        if ssn.outcomes.get(&g).is_some_and(|o| o.placed()) {
            continue;
        }
        let mut bound: Option<Resources> = None;
        for t in gang.tasks() {
            let task = cluster.task(t);
            if task.ours && task.status == crate::model::TaskStatus::Pending && task.problem.is_none() {
                let share = ssn.share_request(t);
                bound = Some(bound.map_or(share, |b| b.least(&share)));
            }
        }
        let bound = bound.unwrap_or(Resources::ZERO);
        least
            .entry(queue)
            .and_modify(|b| *b = b.least(&bound))
            .or_insert(bound);
    }
    least
        .iter()
        .any(|(queue, bound)| ssn.fairness.can_reclaim(*queue, bound, true).is_ok())
}

/// What the gang asks for in this attempt (its shortfall), in queue-share terms.
fn pending_request(ssn: &Session<'_>, g: usize) -> Resources {
    let cluster = &*ssn.cluster;
    let tasks = ssn.gangs[g].tasks_to_allocate(cluster, &|a, b| super::allocate::task_order(cluster, a, b));
    let mut r = Resources::ZERO;
    for t in tasks {
        r.add(&ssn.share_request(t));
    }
    r
}

/// Victim units from other queues, the most over-served queue first; inside a queue the lowest
/// priority and newest gang first.
fn candidates(
    ssn: &Session<'_>,
    g: usize,
    queue: QueueId,
    request: &Resources,
    preemptible: bool,
) -> Vec<Unit> {
    let mut by_queue: BTreeMap<QueueId, Vec<usize>> = BTreeMap::new();
    for v in 0..ssn.gangs.len() {
        let h = &ssn.gangs[v];
        let Some(vq) = h.queue else { continue };
        if v == g || vq == queue || !h.preemptible || !super::preempt::has_placed_pod(ssn, v) {
            continue;
        }
        if !ssn.fairness.may_reclaim_from(queue, request, preemptible, vq) {
            continue;
        }
        by_queue.entry(vq).or_default().push(v);
    }
    // Per queue: its units, lowest priority and newest gang first.
    let mut lists: Vec<(QueueId, VecDeque<Unit>, Resources)> = Vec::new();
    for (q, mut gangs) in by_queue {
        gangs.sort_by_key(|v| (ssn.gangs[*v].priority, -ssn.gangs[*v].created));
        let mut units = VecDeque::new();
        for v in gangs {
            let protected = victims::protected_by_min_runtime(ssn, v, true);
            units.extend(victims::units_of(ssn, v, !protected));
        }
        lists.push((q, units, Resources::ZERO));
    }
    // Interleave queues as KAI's victim order does: the most over-served queue gives next, with
    // what it already gave (and its next unit) taken off its allocation before comparing.
    let mut out = Vec::new();
    loop {
        let mut best: Option<(usize, Resources)> = None;
        for (i, (q, units, given)) in lists.iter().enumerate() {
            let Some(next) = units.front() else { continue };
            let with_next = given.plus(&unit_share(ssn, next));
            best = match best {
                None => Some((i, with_next)),
                Some((j, other)) => {
                    let (oq, _, _) = &lists[j];
                    if ssn.fairness.compare_victims(*q, &with_next, *oq, &other) == std::cmp::Ordering::Less {
                        Some((i, with_next))
                    } else {
                        Some((j, other))
                    }
                }
            };
        }
        let Some((i, with_next)) = best else { break };
        let (_, units, given) = &mut lists[i];
        if let Some(u) = units.pop_front() {
            *given = with_next;
            out.push(u);
        }
    }
    out
}

fn unit_share(ssn: &Session<'_>, u: &Unit) -> Resources {
    let mut r = Resources::ZERO;
    for t in &u.tasks {
        r.add(&ssn.share_request(*t));
    }
    r
}

/// KAI's chunking of the chosen victims: each unit's resources once (a surplus pod, or a gang's core),
/// per victim queue.
fn chunks(ssn: &Session<'_>, units: &[Unit]) -> Vec<(QueueId, Resources)> {
    let mut counted: Vec<TaskId> = Vec::new();
    let mut out = Vec::new();
    for u in units {
        let Some(q) = ssn.gangs[u.gang].queue else {
            continue;
        };
        let mut r = Resources::ZERO;
        for t in &u.tasks {
            if !counted.contains(t) {
                counted.push(*t);
                r.add(&ssn.share_request(*t));
            }
        }
        if !r.is_zero() {
            out.push((q, r));
        }
    }
    out
}

fn queue_line(ssn: &Session<'_>, q: QueueId) -> String {
    let names = &ssn.cluster.names;
    let queue = ssn.cluster.queue(q);
    match ssn.fairness.report(q) {
        Some(r) => format!(
            "{} uses {} with a quota of {}, fair share of {} and queue priority of {}",
            queue.name,
            names.format(&r.allocated),
            names.format(&r.deserved.to_resources().max(&Resources::ZERO)),
            names.format(&r.fair_share.to_resources()),
            queue.priority
        ),
        None => format!("{} (not in the fair-share tree)", queue.name),
    }
}

fn reclaim_message(ssn: &Session<'_>, queue: QueueId, reclaimer: &str) -> String {
    format!(
        "reclaimed by workload {reclaimer} of queue {}",
        queue_line(ssn, queue)
    )
}

fn victim_message(ssn: &Session<'_>, u: &Unit, base: &str) -> String {
    match ssn.gangs[u.gang].queue {
        Some(q) => format!("{base}; victim queue {}", queue_line(ssn, q)),
        None => base.to_owned(),
    }
}
