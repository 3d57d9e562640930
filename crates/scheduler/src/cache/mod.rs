//! The I/O edge that feeds the model: watches pods, nodes, PodGroups (KAI's and Volcano's), queues,
//! priority classes and topologies, and converts each event into a model update.
//!
//! `convert` is pure (unit-tested); the watch tasks only forward converted updates to the scheduling
//! loop, which owns the model and applies them between cycles.

pub mod convert;
