//! The machinery of one scheduling cycle, in three parts:
//!
//! - **session**: the cycle's working state and its transactional journal ([`session`]), the gangs it
//!   schedules ([`gang`]), its output ([`decisions`]) and the GPU reservation pods it keeps
//!   ([`reservations`]);
//! - **policies** ([`policy`]): placement and topology, gang order, queue fairness;
//! - **reporting** ([`report`]): explanations and the statuses, conditions and events users read.

pub mod backlog;
pub mod decisions;
pub mod gang;
pub mod policy;
pub mod report;
pub mod reservations;
pub mod session;

pub use session::{GangOutcome, Session, SessionStats};
