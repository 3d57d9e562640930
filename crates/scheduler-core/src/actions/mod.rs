//! The actions of a cycle, run in the configured order over one session.

pub mod allocate;
pub mod consolidate;
mod kept;
pub mod preempt;
pub mod reclaim;
pub mod stale;
pub mod victims;

use crate::config::ActionKind;
use crate::framework::Session;

/// Runs one action.
pub fn run(ssn: &mut Session<'_>, action: ActionKind) {
    match action {
        ActionKind::Allocate => allocate::allocate(ssn),
        ActionKind::Consolidation => consolidate::consolidate(ssn),
        ActionKind::Reclaim => reclaim::reclaim(ssn),
        ActionKind::Preempt => preempt::preempt(ssn),
        ActionKind::StaleGangEviction => stale::stale_gangs(ssn),
    }
}
