//! The I/O edge that feeds the model: watches pods, nodes, PodGroups (KAI's and Volcano's), queues,
//! priority classes and topologies, and converts each event into a model update.
//!
//! `convert` is pure (unit-tested); `watch` only forwards raw changes over a bounded channel; `ingest`
//! applies them inside the scheduling loop, which owns the model, between cycles.

pub mod convert;
pub mod ingest;
pub mod pod_rules;
pub mod watch;
