//! The actions of a cycle, run in the configured order over one session.

pub mod allocate;

use crate::config::ActionKind;
use crate::framework::Session;

/// Runs one action.
pub fn run(ssn: &mut Session<'_>, action: ActionKind) {
    match action {
        ActionKind::Allocate => allocate::allocate(ssn),
        ActionKind::Consolidation
        | ActionKind::Reclaim
        | ActionKind::Preempt
        | ActionKind::StaleGangEviction => {}
    }
}
