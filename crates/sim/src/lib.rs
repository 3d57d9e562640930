//! Scheduling quality on workload traces (`kai sim`): replays public production traces (Alibaba's
//! openb, Microsoft's Philly) or a cluster's own workload through the scheduler's decision core on a
//! simulated clock, and reports allocation, waiting, fragmentation and fairness as tables, CSV/JSON and
//! SVG charts.
//!
//! Must not: copy trace data into the project (traces are read from a path the user gives, by default
//! `../shared/traces/`), or decide placement itself: every decision comes from `scheduler-core`.

pub mod fgd;
pub mod metrics;
pub mod openb;
pub mod philly;
pub mod plot;
pub mod replay;
pub mod report;
pub mod workload;
