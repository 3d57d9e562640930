//! Policies: the rules a session applies when it chooses. Which node a pod goes to (`placement`, with
//! `topology` domains and `pod_rules`: affinity, anti-affinity, spread and host ports), which gang is tried next (`ordering`), and what queues may take and must give
//! back (`fairness`, over `crate::fairshare`).

pub mod fairness;
pub mod ordering;
pub mod placement;
pub mod pod_rules;
pub mod topology;
