//! Reporting: why a gang waits as values (`explain`), and the statuses, conditions and events users read,
//! decided from a session's outcomes (`status`).

pub mod explain;
pub mod status;
