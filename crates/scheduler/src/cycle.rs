//! One scheduling cycle, pure: model + configuration + time in, decisions out.

use crate::actions;
use crate::config::Config;
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
}

/// Runs the configured actions over the model and returns the decisions. The model keeps the assumed
/// placements (binds in flight, reservations, evictions in flight) the decisions imply.
pub fn run(cluster: &mut Cluster, config: &Config, now: Millis) -> CycleResult {
    let mut ssn = Session::open(cluster, config, now);
    for action in &config.actions {
        actions::run(&mut ssn, *action);
    }
    crate::framework::status::timeouts(&mut ssn);
    let (decisions, stats) = ssn.close();
    CycleResult { decisions, stats }
}
