//! consolidation: defragmentation. A waiting preemptible gang that fits nowhere as the cluster stands,
//! although the cluster has enough free room in total, gets room by moving other preemptible gangs:
//! a scenario is accepted only if every moved pod has somewhere else to go, so nothing is killed for
//! good.

use super::kept::Kept;
use super::victims::{self, NoVictims, Pool, Request, Unit};
use crate::config::{ActionKind, PlacementStrategy};
use crate::framework::Session;
use crate::framework::decisions::EvictionCause;
use crate::framework::report::explain::Why;
use crate::model::Resources;
use crate::model::resources::GPU;

/// Runs consolidation.
pub fn consolidate(ssn: &mut Session<'_>) {
    let placement = ssn.config.plugins.nodeplacement;
    // Spreading on purpose leaves fragments; moving pods to undo that would fight the policy (as KAI).
    if placement.gpu == PlacementStrategy::Spread || placement.cpu == PlacementStrategy::Spread {
        return;
    }
    let max = ssn.config.plugins.consolidation.max_preemptees as usize;
    if max == 0 {
        return;
    }
    // Room inside shared devices counts too: moving fractions together frees whole devices.
    let fragments = ssn.index.shared_fragments_milli(ssn.cluster);
    // Every preemptible gang with a placed pod, lowest priority first, then the newest; kept from one
    // waiting gang to the next (see `Pool`), rebuilt when allocate places a gang that has no slot.
    let mut pool: Option<Pool> = None;
    // Only a preemptible gang whose pods fit the free room in total is worth a search, and while no
    // search succeeds the free room stays as it is: when none passes now, none would in the ordered
    // pass either, which is skipped (a full cluster's backlog costs a look per gang, not a sort).
    let free_now = {
        let mut free = ssn.index.free_totals().1;
        free.0[GPU] += fragments;
        free
    };
    let mut waiting = super::preempt::waiting_for_room(ssn);
    if !waiting
        .iter()
        .any(|g| ssn.gangs[*g].preemptible && pending_need(ssn, *g).fits_in(&free_now))
    {
        return;
    }
    super::preempt::in_job_order(ssn, &mut waiting);
    let mut kept = Kept::new(ssn);
    let mut next = 0;
    while let Some(&g) = waiting.get(next) {
        next += 1;
        // Its place in the order, before its turn (a gang that gets room is no longer below its
        // minimum, which moves it in job order).
        let place = (!kept.is_empty()).then(|| super::kept::place_of(ssn, g));
        turn(ssn, &mut pool, fragments, max, g);
        // The backlog's gangs of a class after this one, if an eviction may change their answer.
        let Some(place) = place else {
            continue;
        };
        for t in kept.take_in(ssn, &|_, _| Some(place.clone())) {
            let key = crate::framework::policy::ordering::job_key(ssn, t);
            let at = next
                + waiting[next..]
                    .partition_point(|x| crate::framework::policy::ordering::job_key(ssn, *x) < key);
            waiting.insert(at, t);
        }
    }
}

/// Waiting gang `g`'s turn.
fn turn(ssn: &mut Session<'_>, pool: &mut Option<Pool>, fragments: i64, max: usize, g: usize) {
    ssn.attempt(g);
    if ssn.outcomes.get(&g).is_some_and(|o| o.placed()) {
        if pool.as_mut().is_some_and(|p| !p.refill(ssn, g)) {
            *pool = None;
        }
        return;
    }
    if !ssn.gangs[g].preemptible {
        return;
    }
    // Only worth it when the cluster has the room in total.
    let need = pending_need(ssn, g);
    // Free room once releasing pods are gone, over ready schedulable nodes (kept by the index: a
    // scan of every node per waiting gang made an unchanged cycle quadratic).
    let mut free = ssn.index.free_totals().1;
    free.0[GPU] += fragments;
    if !need.fits_in(&free) {
        return;
    }
    let pool = pool.get_or_insert_with(|| victims_of_every_queue(ssn));
    let target = ssn.cluster.group(ssn.gangs[g].root).key.to_string();
    let message = |_: &Session<'_>, _: &Unit| {
        format!("moved to make room for {target} (consolidation); it is recreated elsewhere")
    };
    // A plan whose victims cannot all move is searched again without those victims: the first
    // victims in order are not always the ones that can go elsewhere (a newer 2-GPU job that fits
    // nowhere else, beside an older 1-GPU job that does). Each retry drops at least one unit.
    let mut cannot_move: Vec<Unit> = Vec::new();
    for _ in 0..=MAX_REPLANS {
        let request = Request::among(g, pool.candidates(), EvictionCause::Consolidation, &message)
            .excluding_gang(g)
            .excluding_units(&cannot_move)
            .victims_must_move()
            .max_victim_gangs(max);
        match victims::solve(ssn, &request) {
            Ok(chosen) => {
                ssn.mark_placed(g, ActionKind::Consolidation);
                ssn.explain(g, Why::Pipelined);
                pool.refill_after(ssn, g, &chosen);
                break;
            }
            Err(NoVictims::VictimsCannotMove(stuck)) => {
                let left = request.allowed_units();
                let dropped = stuck.iter().filter(|u| !cannot_move.contains(u)).count();
                cannot_move.extend(stuck);
                if dropped == 0 || dropped >= left {
                    break;
                }
            }
            Err(_) => break,
        }
    }
}

/// What gang `g`'s pending pods ask for in all.
fn pending_need(ssn: &Session<'_>, g: usize) -> Resources {
    let mut need = Resources::ZERO;
    for t in ssn.gangs[g].pending(ssn.cluster) {
        need.add(&ssn.cluster.task(t).request);
    }
    need
}

/// Consolidation's victims: every preemptible gang with a placed pod, lowest priority first, then the
/// newest (ties in gang order), each of which may move whole.
fn victims_of_every_queue(ssn: &Session<'_>) -> Pool {
    let mut gangs: Vec<usize> = (0..ssn.gangs.len())
        .filter(|v| ssn.gangs[*v].preemptible && super::preempt::has_placed_pod(ssn, *v))
        .collect();
    gangs.sort_by_key(|v| (ssn.gangs[*v].priority, -ssn.gangs[*v].created));
    let count = gangs.len();
    let mut pool = Pool::new(gangs, |_, _| true);
    pool.fill_to(ssn, count);
    pool
}

/// Searches after the first for one waiting gang, each without the victims that could not move.
const MAX_REPLANS: usize = 4;
