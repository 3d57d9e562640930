//! `kai explain pg NAME`: why a gang waits, and what would let it run.
//!
//! Two parts. First what the scheduler wrote on the PodGroup (phase, conditions, reasons). Then a fresh
//! analysis of a snapshot with the scheduler's own decision code: the configured actions run once over
//! the snapshot's model (a simulated cycle, nothing is written) and their reasons are read as values;
//! the per-node verdicts for one pod come from the scheduler's placement predicate, the queue verdict
//! from its capacity gates, and the smallest set of victims from its victim search.
//!
//! The report's values (`report`), the analysis that builds them (`analyze`) and their text
//! (`text`) are kept apart.
//!
//! Must not: do I/O, or decide anything the scheduler's code does not decide.

mod analyze;
mod report;
mod text;

pub use analyze::{ExplainError, explain, explain_for};
pub use report::{
    Amounts, Analysis, Explanation, FitKind, GangRequest, NodeCount, NodeFit, PodStates, QueueResourceState,
    QueueState, Reason, ToFit, Verdict, Victim, WrittenCondition, WrittenStatus,
};
pub use text::render;
