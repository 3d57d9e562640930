//! The podgrouper: makes the PodGroup every `kai-scheduler` pod belongs to, from the pod's owner chain.
//!
//! Owns: [`grouping`] (pure rules per workload family: pod + owner chain -> PodGroup) and
//! [`controller`] (watches, caches, server-side apply, events, metrics around it).
//!
//! Must not: decide placement, or keep state another component needs (everything it knows is in the
//! API server: the PodGroup and the pod's annotation and label).

pub mod controller;
pub mod grouping;
pub mod metrics;
