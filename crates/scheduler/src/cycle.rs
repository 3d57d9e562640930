//! One scheduling cycle, pure: model + configuration + time in, decisions out.

use std::time::{Duration, Instant};

use crate::actions;
use crate::config::{ActionKind, Config};
use crate::framework::decisions::Decisions;
use crate::framework::{Session, SessionStats};
use crate::model::{Cluster, Millis};

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
}

/// Runs the configured actions over the model and returns the decisions. The model keeps the assumed
/// placements (binds in flight, reservations, evictions in flight) the decisions imply.
pub fn run(cluster: &mut Cluster, config: &Config, now: Millis) -> CycleResult {
    let started = Instant::now();
    let mut ssn = Session::open(cluster, config, now);
    let open = started.elapsed();
    let mut timings = Vec::with_capacity(config.actions.len());
    for action in &config.actions {
        let t = Instant::now();
        actions::run(&mut ssn, *action);
        timings.push((*action, t.elapsed()));
    }
    crate::framework::status::timeouts(&mut ssn);
    let (decisions, stats) = ssn.close();
    CycleResult {
        decisions,
        stats,
        open,
        actions: timings,
    }
}
