//! The I/O edge that feeds the model: watches pods, nodes, PodGroups (KAI's and Volcano's), queues,
//! priority classes, topologies, namespaces and storage (claims, volumes, storage classes, CSINodes),
//! and converts each event into a model update.
//!
//! `convert` and `volumes` are pure (unit-tested); `watch` only forwards raw changes over a bounded
//! channel; `ingest` applies them inside the scheduling loop, which owns the model, between cycles.

pub mod convert;
pub mod ingest;
pub mod pod_rules;
pub mod volumes;
pub mod watch;
