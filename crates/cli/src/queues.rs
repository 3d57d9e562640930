//! `kai queues`: the queue tree with quota, limit, fair share, allocated and requested per resource.
//!
//! Allocated and requested come from the Queue's status when the scheduler wrote one, else from the
//! scheduler's own queue accounting over the snapshot. Fair share comes from the status only.
//!
//! Must not: do I/O.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use scheduler_core::config::Config;
use scheduler_core::framework::Session;
use scheduler_core::model::resources::{CPU, GPU, MEMORY};
use scheduler_core::model::{Cluster, Millis, QueueId};
use serde::Serialize;

use crate::render::{Column, Group, bytes, num, spec_units, table};
use crate::snapshot::Snapshot;

/// One resource of a queue, in the Queue spec's units: GPU devices, CPU millicores, memory megabytes
/// (10^6 bytes).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueResource {
    /// Deserved amount; -1 unlimited.
    pub quota: f64,
    /// Hard cap; -1 none.
    pub limit: f64,
    /// Weight for the surplus.
    pub over_quota_weight: f64,
    /// Fair share: from the status (`None` when the scheduler wrote none), else as the scheduler's
    /// division computes it over the snapshot.
    pub fair_share: Option<f64>,
    /// Allocated to running work of the queue and its children.
    pub allocated: f64,
    /// Requested by running and waiting work.
    pub requested: f64,
}

/// Where allocated and requested come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageSource {
    /// The Queue's status, as the scheduler wrote it.
    Status,
    /// Computed from the snapshot (no status written yet).
    Snapshot,
}

/// One queue.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueRow {
    /// Name.
    pub name: String,
    /// Parent queue, as written.
    pub parent: Option<String>,
    /// Depth in the tree (0 for top-level queues and queues outside a valid tree).
    pub depth: usize,
    /// Priority.
    pub priority: i32,
    /// GPUs, in devices.
    pub gpu: QueueResource,
    /// CPU, in millicores.
    pub cpu: QueueResource,
    /// Memory, in megabytes.
    pub memory: QueueResource,
    /// Source of allocated, requested and fair share.
    pub usage_source: UsageSource,
    /// What is wrong with the queue's definition.
    pub problems: Vec<String>,
}

/// The whole tree, parents before children, siblings by name.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuesReport {
    /// Queues in tree order.
    pub queues: Vec<QueueRow>,
}

/// Builds the report from a snapshot and its model.
#[must_use]
pub fn report(snapshot: &Snapshot, model: &Cluster, now: Millis) -> QueuesReport {
    let mut cluster = model.clone();
    let config = Config::default();
    let ssn = Session::open(&mut cluster, &config, now);
    let cluster = &*ssn.cluster;
    let mut order: Vec<(QueueId, usize)> = Vec::new();
    let mut roots: Vec<QueueId> = cluster
        .queues
        .iter()
        .filter(|(_, q)| q.parent.is_none() && q.problems.is_empty())
        .map(|(i, _)| QueueId(i))
        .collect();
    let by_name =
        |ids: &mut Vec<QueueId>| ids.sort_by(|a, b| cluster.queue(*a).name.cmp(&cluster.queue(*b).name));
    by_name(&mut roots);
    let mut stack: Vec<(QueueId, usize)> = roots.into_iter().rev().map(|q| (q, 0)).collect();
    while let Some((q, depth)) = stack.pop() {
        order.push((q, depth));
        let mut children = cluster.queue(q).children.clone();
        by_name(&mut children);
        stack.extend(children.into_iter().rev().map(|c| (c, depth + 1)));
    }
    // Queues outside the valid tree (missing parent, cycles) last, flat.
    let mut rest: Vec<QueueId> = cluster
        .queues
        .iter()
        .map(|(i, _)| QueueId(i))
        .filter(|q| !order.iter().any(|(o, _)| o == q))
        .collect();
    by_name(&mut rest);
    order.extend(rest.into_iter().map(|q| (q, 0)));

    let queues = order
        .into_iter()
        .map(|(id, depth)| {
            let q = cluster.queue(id);
            let status = snapshot.queue_status(&q.name);
            let allocated = ssn.fairness.allocated(id);
            let requested = ssn.fairness.requested(id);
            let fair_share = ssn.fairness.report(id).map(|r| r.fair_share.to_resources());
            let resource = |slot: usize, name: &str| {
                let spec = q.resources[slot];
                let (alloc, req, fair) = match status {
                    Some(s) => (
                        share_of(&s.allocated, slot, name),
                        share_of(&s.requested, slot, name),
                        s.fair_share
                            .contains_key(name)
                            .then(|| share_of(&s.fair_share, slot, name)),
                    ),
                    None => (
                        spec_units(slot, allocated.0[slot]),
                        spec_units(slot, requested.0[slot]),
                        fair_share.map(|f| spec_units(slot, f.0[slot])),
                    ),
                };
                QueueResource {
                    quota: spec.quota,
                    limit: spec.limit,
                    over_quota_weight: spec.weight,
                    fair_share: fair,
                    allocated: alloc,
                    requested: req,
                }
            };
            QueueRow {
                name: q.name.to_string(),
                parent: q.parent_name.as_deref().map(str::to_owned),
                depth,
                priority: q.priority,
                gpu: resource(GPU, api::keys::GPU_RESOURCE),
                cpu: resource(CPU, "cpu"),
                memory: resource(MEMORY, "memory"),
                usage_source: if status.is_some() {
                    UsageSource::Status
                } else {
                    UsageSource::Snapshot
                },
                problems: q.problems.iter().map(ToString::to_string).collect(),
            }
        })
        .collect();
    QueuesReport { queues }
}

/// A status quantity in the Queue spec's units (GPU devices, CPU millicores, memory MB); 0 when absent
/// or unreadable.
fn share_of(map: &BTreeMap<String, Quantity>, slot: usize, name: &str) -> f64 {
    let Some(q) = map.get(name) else { return 0.0 };
    let model = match slot {
        CPU | GPU => api::quantity::milli_value(&q.0),
        _ => api::quantity::value(&q.0),
    };
    model.map_or(0.0, |v| spec_units(slot, v))
}

fn limit_cell(v: f64, scale: f64, fmt: fn(f64) -> String) -> String {
    if v < 0.0 { "-".to_owned() } else { fmt(v * scale) }
}

/// The table: one row per queue, names indented by depth.
#[must_use]
pub fn render(report: &QueuesReport) -> String {
    if report.queues.is_empty() {
        return "No queues. Create one (kind: Queue, apiVersion: scheduling.run.ai/v2) or install the default queues.\n"
            .to_owned();
    }
    let cores = |v: f64| num(v / 1000.0);
    let mem = |v: f64| bytes(v * 1e6);
    let gpu = |v: f64| num(v);
    let groups = [
        Group {
            title: "",
            columns: vec![Column::left("QUEUE"), Column::right("PRIO")],
        },
        Group {
            title: "GPU (devices)",
            columns: vec![
                Column::right("QUOTA"),
                Column::right("LIMIT"),
                Column::right("FAIR"),
                Column::right("ALLOC"),
                Column::right("REQ"),
            ],
        },
        Group {
            title: "CPU (cores)",
            columns: vec![
                Column::right("QUOTA"),
                Column::right("LIMIT"),
                Column::right("ALLOC"),
                Column::right("REQ"),
            ],
        },
        Group {
            title: "MEMORY",
            columns: vec![
                Column::right("QUOTA"),
                Column::right("LIMIT"),
                Column::right("ALLOC"),
                Column::right("REQ"),
            ],
        },
    ];
    let rows: Vec<Vec<String>> = report
        .queues
        .iter()
        .map(|q| {
            let mut name = format!("{}{}", "  ".repeat(q.depth), q.name);
            if !q.problems.is_empty() {
                name.push_str(" (!)");
            }
            vec![
                name,
                q.priority.to_string(),
                limit_cell(q.gpu.quota, 1.0, gpu),
                limit_cell(q.gpu.limit, 1.0, gpu),
                q.gpu.fair_share.map_or_else(|| "-".to_owned(), gpu),
                gpu(q.gpu.allocated),
                gpu(q.gpu.requested),
                limit_cell(q.cpu.quota, 1.0, cores),
                limit_cell(q.cpu.limit, 1.0, cores),
                cores(q.cpu.allocated),
                cores(q.cpu.requested),
                limit_cell(q.memory.quota, 1.0, mem),
                limit_cell(q.memory.limit, 1.0, mem),
                mem(q.memory.allocated),
                mem(q.memory.requested),
            ]
        })
        .collect();
    let mut out = table(&groups, &rows);
    let problems: Vec<String> = report
        .queues
        .iter()
        .flat_map(|q| q.problems.iter().map(move |p| format!("(!) {}: {p}", q.name)))
        .collect();
    for p in problems {
        out.push_str(&p);
        out.push('\n');
    }
    out.push_str("\"-\": unlimited (quota, limit) or not reported (fair share).\n");
    if report
        .queues
        .iter()
        .any(|q| q.usage_source == UsageSource::Snapshot)
    {
        out.push_str("Queues without a status: usage and fair share computed from the snapshot.\n");
    }
    out
}
