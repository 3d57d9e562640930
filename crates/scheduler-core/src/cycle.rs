//! One scheduling cycle, pure: model + configuration + time in, decisions out.

use std::time::{Duration, Instant};

use crate::actions;
use crate::config::{ActionKind, Config};
use crate::framework::decisions::Decisions;
use crate::framework::{Session, SessionStats};
use crate::model::{Cluster, Millis, Quiet};

/// What one cycle produced.
#[derive(Debug)]
pub struct CycleResult {
    /// What to do.
    pub decisions: Decisions,
    /// What it took.
    pub stats: SessionStats,
    /// Time spent opening the session (gangs, indexes, fair share).
    pub open: Duration,
    /// Time spent per action, in order (observability only; decisions never depend on it).
    pub actions: Vec<(ActionKind, Duration)>,
    /// Nothing changed since a cycle that decided nothing to place, evict or reserve, and no time-based
    /// rule fell due: the cycle was not run (its decisions are empty).
    pub skipped: bool,
}

/// Runs the configured actions over the model and returns the decisions. The model keeps the assumed
/// placements (binds in flight, reservations, evictions in flight) the decisions imply.
///
/// A cycle is a pure function of the model and the time, and the time matters only through deadlines
/// the cycle records. So after a cycle that placed, evicted and reserved nothing, the next one is
/// skipped until the model changes ([`crate::model::Epochs::changes`]) or the earliest deadline passes:
/// it would decide the same nothing, and an idle cluster costs nothing to schedule.
pub fn run(cluster: &mut Cluster, config: &Config, now: Millis) -> CycleResult {
    if let Some(quiet) = cluster.quiet
        && quiet.changes == cluster.epochs.changes
        && now < quiet.until
    {
        return CycleResult {
            decisions: Decisions::default(),
            stats: SessionStats::default(),
            open: Duration::ZERO,
            actions: Vec::new(),
            skipped: true,
        };
    }
    let started = Instant::now();
    let mut ssn = Session::open(cluster, config, now);
    let open = started.elapsed();
    let mut timings = Vec::with_capacity(config.actions.len());
    for action in &config.actions {
        let t = Instant::now();
        actions::run(&mut ssn, *action);
        timings.push((*action, t.elapsed()));
    }
    crate::framework::report::status::timeouts(&mut ssn);
    let (decisions, stats) = ssn.close();
    let settled = !stats.placement_changed
        && decisions.binds.is_empty()
        && decisions.evictions.is_empty()
        && decisions.reservations.is_empty()
        && !stats.attempt_budget_exhausted;
    if settled {
        cluster.quiet = Some(Quiet {
            changes: cluster.epochs.changes,
            until: stats.next_deadline.unwrap_or(Millis::MAX),
        });
    } else {
        cluster.epochs.changed();
        cluster.quiet = None;
    }
    CycleResult {
        decisions,
        stats,
        open,
        actions: timings,
        skipped: false,
    }
}
