//! `kai` (also `kubectl kai`): a command line that explains the gang scheduler's decisions.
//!
//! Owns: `kai explain pg NAME` ([`explain`]), `kai queues` ([`queues`]), `kai top nodes` ([`top`]),
//! `kai sim` ([`sim`]: trace replays through the decision core, by `kai-sim`), the
//! snapshot of cluster objects they read ([`snapshot`]), their text ([`render`]) and the command line
//! with its client ([`app`]). The reports run the scheduler's own model and decision code over the
//! snapshot, so what they say is what the scheduler would decide.
//!
//! Must not: write to the cluster, or carry scheduling rules of its own. Only `app` does I/O.

pub mod app;
pub mod explain;
pub mod queues;
pub mod render;
pub mod sim;
pub mod snapshot;
pub mod top;
