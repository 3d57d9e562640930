//! The cluster model the scheduling core reads and writes: pure data, no I/O.
//!
//! `cache` feeds it from watch events; a session (`framework`) reads it and changes placements only
//! through [`cluster::Cluster::set_assumed`], journaled so that a gang is placed all or nothing.

pub mod cluster;
pub mod constraints;
pub mod group;
pub mod group_status;
pub mod ids;
pub mod no_fit_memo;
pub mod node;
pub mod pod_rules;
pub mod queue;
pub mod resources;
pub mod shapes;
pub mod task;
pub mod time;
pub mod usage;
pub mod volumes;

pub use cluster::{Cluster, Epochs, NodeUpdate, PlacementUndo, PodUpdate, QueueReports, Quiet};
pub use group::{Group, GroupKey, GroupKind, GroupProblem, StatusWritten};
pub use ids::{DenseMap, GroupId, IdMap, NodeId, QueueId, SlotBits, TaskId};
pub use no_fit_memo::NoFitMemo;
pub use node::Node;
pub use queue::Queue;
pub use resources::Resources;
pub use task::{ApiView, Assumed, GpuRequest, PodName, Task, TaskStatus};
pub use time::Millis;
pub use usage::{HistoricalUsage, UsageShares};
