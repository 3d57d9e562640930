//! stalegangeviction: a gang that runs below its minimum (a member died, a bind failed, a node went
//! away) for longer than the grace period is evicted whole, so its resources are not held by a gang that
//! cannot make progress. Its controller recreates the pods, and allocate places them as a gang again.

use crate::framework::Session;
use crate::framework::decisions::EvictionCause;
use crate::model::{TaskId, TaskStatus};

/// Runs stale-gang eviction.
pub fn stale_gangs(ssn: &mut Session<'_>) {
    let grace =
        i64::try_from(ssn.config.plugins.stalegangeviction.grace_period.as_millis()).unwrap_or(i64::MAX);
    // A gang as the last session saw it, then found not stale (no stale time recorded), is not stale
    // now: every input is the same.
    let unchanged = ssn.unchanged_gangs();
    for (g, unchanged) in unchanged.into_iter().enumerate() {
        if unchanged && ssn.cluster.group(ssn.gangs[g].root).stale_since.is_none() {
            debug_assert!(!running_below_minimum(ssn, g).0, "gang {g} skipped but stale");
            continue;
        }
        ssn.attempt(g);
        let (stale, active) = running_below_minimum(ssn, g);
        let gang = &ssn.gangs[g];
        let cluster = &*ssn.cluster;
        let root = gang.root;
        let since = cluster.group(root).stale_since;
        match (stale, since) {
            (false, Some(_)) => ssn.set_stale_since(root, None),
            (false, None) => {}
            (true, None) => {
                ssn.set_stale_since(root, Some(ssn.now));
                ssn.wake_at(ssn.now.saturating_add(grace));
            }
            (true, Some(t)) if ssn.now - t >= grace => {
                let running = u32::try_from(active).unwrap_or(u32::MAX);
                let needed = gang.required_pods(0);
                let name = cluster.group(root).key.to_string();
                let victims: Vec<TaskId> = gang
                    .tasks()
                    .filter(|t| cluster.task(*t).status.is_allocated() && cluster.task(*t).ours)
                    .collect();
                for t in victims {
                    ssn.evict(
                        t,
                        EvictionCause::StaleGang,
                        None,
                        format!(
                            "gang {name} ran below its minimum ({running} of {needed} pods active) for longer than the {}s grace period; evicting it whole so it can start again as a gang",
                            grace / 1000
                        ),
                    );
                }
                ssn.set_stale_since(root, None);
            }
            (true, Some(t)) => ssn.wake_at(t.saturating_add(grace)),
        }
    }
}

/// Whether gang `g` runs below its minimum (some pod active, none succeeded, not satisfied), and how
/// many of its pods are active.
fn running_below_minimum(ssn: &Session<'_>, g: usize) -> (bool, usize) {
    let gang = &ssn.gangs[g];
    let cluster = &*ssn.cluster;
    let any_succeeded = gang.groups.iter().any(|id| {
        cluster
            .group(*id)
            .tasks
            .iter()
            .any(|t| cluster.task(*t).status == TaskStatus::Succeeded)
    });
    // Counted, not listed: this runs over every gang each cycle.
    let active = gang
        .tasks()
        .filter(|t| {
            let s = cluster.task(*t).status;
            s.is_active_allocated() || s == TaskStatus::Releasing
        })
        .count();
    (
        !any_succeeded && active > 0 && !gang.is_satisfied(cluster),
        active,
    )
}
