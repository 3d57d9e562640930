//! Golden and unit tests of fair share.
//!
//! Golden numbers come from KAI's own tests (`resource_division_test.go`, `proportion_test.go`,
//! `queue_order_test.go`, `reclaimable_test.go`) and from the worked examples and acceptance
//! scenarios of the reference; each test names the example it reproduces.

use super::*;
use crate::model::resources::{GPU, Resources};

mod accounting;
mod capacity;
mod division;
mod order;
mod reclaim;

/// `n` GPUs in model units (milli-GPUs).
fn gpus(n: f64) -> Resources {
    Resources::ZERO.with(GPU, (n * 1000.0).round() as i64)
}

/// A queue with a GPU quota, weight and limit; CPU and memory quota 0 (the scenarios only request
/// GPUs).
fn gpu_queue(name: &str, parent: Option<&str>, deserved: f64, weight: f64) -> QueueSpec {
    let spec = QueueSpec::new(name).with_resource(GPU, deserved, UNLIMITED, weight);
    match parent {
        Some(p) => spec.with_parent(p),
        None => spec,
    }
}

/// Builds a tree; queues listed earlier are older (creation time = position).
fn build(specs: Vec<QueueSpec>) -> QueueTree {
    build_with(specs, FairShareConfig::default())
}

fn build_with(specs: Vec<QueueSpec>, config: FairShareConfig) -> QueueTree {
    let specs = specs
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let uid = s.name.to_string();
            s.with_created(i as i64, uid)
        })
        .collect();
    QueueTree::new(specs, config)
}

/// The id of a queue that must exist.
fn id(tree: &QueueTree, name: &str) -> QueueId {
    tree.id(name).unwrap_or_else(|| panic!("queue {name} exists"))
}

/// GPU fair share of a queue.
fn gpu_share(tree: &QueueTree, name: &str) -> f64 {
    tree.fair_share(id(tree, name)).get(GPU)
}
