//! Reporting: why a gang waits as values (`explain`), and the statuses, conditions and events users read,
//! decided from a session's outcomes (`status`), and each queue's fair-share figures for metrics (`queues`).

pub mod explain;
pub mod queues;
pub mod status;
