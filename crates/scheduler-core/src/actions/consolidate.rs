//! consolidation: defragmentation. A waiting preemptible gang that fits nowhere as the cluster stands,
//! although the cluster has enough free room in total, gets room by moving other preemptible gangs:
//! a scenario is accepted only if every moved pod has somewhere else to go, so nothing is killed for
//! good.

use super::victims::{self, NoVictims, Request, Unit};
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
    for g in super::preempt::waiting_for_room(ssn) {
        ssn.attempt(g);
        if ssn.outcomes.get(&g).is_some_and(|o| o.placed()) || !ssn.gangs[g].preemptible {
            continue;
        }
        // Only worth it when the cluster has the room in total.
        let mut need = Resources::ZERO;
        for t in ssn.gangs[g].pending(ssn.cluster) {
            need.add(&ssn.cluster.task(t).request);
        }
        // Free room once releasing pods are gone, over ready schedulable nodes (kept by the index: a
        // scan of every node per waiting gang made an unchanged cycle quadratic).
        let mut free = ssn.index.free_totals().1;
        free.0[GPU] += fragments;
        if !need.fits_in(&free) {
            continue;
        }
        let mut victim_gangs: Vec<usize> = (0..ssn.gangs.len())
            .filter(|v| {
                let h = &ssn.gangs[*v];
                *v != g && h.preemptible && h.tasks().any(|t| ssn.cluster.task(t).status.is_allocated())
            })
            .collect();
        victim_gangs.sort_by_key(|v| (ssn.gangs[*v].priority, -ssn.gangs[*v].created));
        let mut candidates: Vec<Unit> = Vec::new();
        for v in victim_gangs {
            candidates.extend(victims::units_of(ssn, v, true));
        }
        let target = ssn.cluster.group(ssn.gangs[g].root).key.to_string();
        let message = |_: &Session<'_>, _: &Unit| {
            format!("moved to make room for {target} (consolidation); it is recreated elsewhere")
        };
        // A plan whose victims cannot all move is searched again without those victims: the first
        // victims in order are not always the ones that can go elsewhere (a newer 2-GPU job that fits
        // nowhere else, beside an older 1-GPU job that does). Each retry drops at least one unit.
        for _ in 0..=MAX_REPLANS {
            let request = Request::new(g, candidates.clone(), EvictionCause::Consolidation, &message)
                .victims_must_move()
                .max_victim_gangs(max);
            match victims::solve(ssn, &request) {
                Ok(_) => {
                    ssn.mark_placed(g, ActionKind::Consolidation);
                    ssn.explain(g, Why::Pipelined);
                    break;
                }
                Err(NoVictims::VictimsCannotMove(stuck)) => {
                    let before = candidates.len();
                    candidates.retain(|u| !stuck.contains(u));
                    if candidates.len() == before || candidates.is_empty() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    }
}

/// Searches after the first for one waiting gang, each without the victims that could not move.
const MAX_REPLANS: usize = 4;
