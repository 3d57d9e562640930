//! `kai top nodes`: GPU allocation per node as the scheduler's model accounts it: whole devices used
//! and free, shared devices and how full each is, and pods of this scheduler and of others.
//!
//! Must not: do I/O.

use scheduler_core::model::{Cluster, TaskStatus};
use serde::Serialize;

use crate::render::{Column, Group, binary_bytes, num, table};

/// A GPU device split among fractional pods.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SharedDevice {
    /// The `runai-gpu-group` id.
    pub group: String,
    /// Part of the device held by its sharers, 0 to 1.
    pub fill: f64,
    /// Pods sharing it.
    pub pods: u32,
}

/// One node.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    /// Name.
    pub name: String,
    /// Ready condition is True.
    pub ready: bool,
    /// Cordoned.
    pub unschedulable: bool,
    /// Allocatable GPU devices.
    pub gpus: f64,
    /// Devices held by pods (a shared device counts whole).
    pub gpus_used: f64,
    /// Of those, held by pods being deleted.
    pub gpus_releasing: f64,
    /// Devices reserved for gangs waiting on evictions.
    pub gpus_reserved: f64,
    /// Whole devices neither used nor reserved.
    pub gpus_free: f64,
    /// Shared devices.
    pub shared: Vec<SharedDevice>,
    /// Pods of this scheduler holding resources here.
    pub pods_kai: usize,
    /// Pods of other schedulers holding resources here.
    pub pods_other: usize,
    /// Allocatable CPU, millicores.
    pub cpu_millicores: i64,
    /// Used CPU, millicores.
    pub cpu_used_millicores: i64,
    /// Allocatable memory, bytes.
    pub memory_bytes: i64,
    /// Used memory, bytes.
    pub memory_used_bytes: i64,
}

/// Every node, by name, with totals.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TopReport {
    /// Nodes.
    pub nodes: Vec<NodeRow>,
    /// Sums over the nodes (name `TOTAL`; ready when every node is).
    pub total: NodeRow,
}

fn devices(milli: i64) -> f64 {
    milli as f64 / 1000.0
}

/// Builds the report from the model.
#[must_use]
pub fn report(model: &Cluster) -> TopReport {
    let mut nodes: Vec<NodeRow> = model
        .nodes
        .iter()
        .map(|(_, n)| {
            let (mut kai, mut other) = (0, 0);
            for t in &n.tasks {
                let task = model.task(*t);
                if !task.status.holds_node() || task.status == TaskStatus::Pipelined {
                    continue;
                }
                if task.ours {
                    kai += 1;
                } else {
                    other += 1;
                }
            }
            let mut shared: Vec<SharedDevice> = n
                .shared_gpus
                .iter()
                .filter(|d| d.holders > d.nominated_holders)
                .map(|d| SharedDevice {
                    group: d.group.to_string(),
                    fill: f64::from(d.used_milli.min(1000)) / 1000.0,
                    pods: d.holders - d.nominated_holders,
                })
                .collect();
            shared.sort_by(|a, b| a.group.cmp(&b.group));
            NodeRow {
                name: n.name.to_string(),
                ready: n.ready,
                unschedulable: n.unschedulable,
                gpus: devices(n.allocatable.gpu()),
                gpus_used: devices(n.used.gpu()),
                gpus_releasing: devices(n.releasing.gpu()),
                gpus_reserved: devices(n.nominated.gpu()),
                gpus_free: n.idle_gpus() as f64,
                shared,
                pods_kai: kai,
                pods_other: other,
                cpu_millicores: n.allocatable.cpu(),
                cpu_used_millicores: n.used.cpu(),
                memory_bytes: n.allocatable.memory(),
                memory_used_bytes: n.used.memory(),
            }
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut total = NodeRow {
        name: "TOTAL".to_owned(),
        ready: nodes.iter().all(|n| n.ready),
        unschedulable: false,
        gpus: 0.0,
        gpus_used: 0.0,
        gpus_releasing: 0.0,
        gpus_reserved: 0.0,
        gpus_free: 0.0,
        shared: Vec::new(),
        pods_kai: 0,
        pods_other: 0,
        cpu_millicores: 0,
        cpu_used_millicores: 0,
        memory_bytes: 0,
        memory_used_bytes: 0,
    };
    for n in &nodes {
        total.gpus += n.gpus;
        total.gpus_used += n.gpus_used;
        total.gpus_releasing += n.gpus_releasing;
        total.gpus_reserved += n.gpus_reserved;
        total.gpus_free += n.gpus_free;
        total.shared.extend(n.shared.iter().cloned());
        total.pods_kai += n.pods_kai;
        total.pods_other += n.pods_other;
        total.cpu_millicores += n.cpu_millicores;
        total.cpu_used_millicores += n.cpu_used_millicores;
        total.memory_bytes += n.memory_bytes;
        total.memory_used_bytes += n.memory_used_bytes;
    }
    TopReport { nodes, total }
}

fn status(n: &NodeRow) -> String {
    let mut s = if n.ready { "Ready" } else { "NotReady" }.to_owned();
    if n.unschedulable {
        s.push_str(",Cordoned");
    }
    s
}

fn shared_cell(shared: &[SharedDevice], limit: usize) -> String {
    if shared.is_empty() {
        return "-".to_owned();
    }
    let mut fills: Vec<String> = shared
        .iter()
        .take(limit)
        .map(|d| format!("{}%", (d.fill * 100.0).round()))
        .collect();
    if shared.len() > limit {
        fills.push(format!("+{}", shared.len() - limit));
    }
    format!("{}: {}", shared.len(), fills.join(" "))
}

/// The table: one row per node and a total.
#[must_use]
pub fn render(report: &TopReport) -> String {
    if report.nodes.is_empty() {
        return "No nodes.\n".to_owned();
    }
    let groups = [
        Group {
            title: "",
            columns: vec![Column::left("NODE"), Column::left("STATUS")],
        },
        Group {
            title: "GPU (devices)",
            columns: vec![
                Column::right("ALLOC"),
                Column::right("USED"),
                Column::right("FREE"),
                Column::left("SHARED (FILL)"),
            ],
        },
        Group {
            title: "PODS",
            columns: vec![Column::right("KAI"), Column::right("OTHER")],
        },
        Group {
            title: "CPU (cores)",
            columns: vec![Column::right("USED"), Column::right("ALLOC")],
        },
        Group {
            title: "MEMORY",
            columns: vec![Column::right("USED"), Column::right("ALLOC")],
        },
    ];
    let row = |n: &NodeRow, status: String, shared: String| {
        vec![
            n.name.clone(),
            status,
            num(n.gpus),
            num(n.gpus_used),
            num(n.gpus_free),
            shared,
            n.pods_kai.to_string(),
            n.pods_other.to_string(),
            num(n.cpu_used_millicores as f64 / 1000.0),
            num(n.cpu_millicores as f64 / 1000.0),
            binary_bytes(n.memory_used_bytes as f64),
            binary_bytes(n.memory_bytes as f64),
        ]
    };
    let mut rows: Vec<Vec<String>> = report
        .nodes
        .iter()
        .map(|n| row(n, status(n), shared_cell(&n.shared, 4)))
        .collect();
    if report.nodes.len() > 1 {
        let t = &report.total;
        let shared = if t.shared.is_empty() {
            "-".to_owned()
        } else {
            format!("{}", t.shared.len())
        };
        rows.push(row(t, String::new(), shared));
    }
    let mut out = table(&groups, &rows);
    let pending: Vec<String> = report
        .nodes
        .iter()
        .filter(|n| n.gpus_releasing > 0.0 || n.gpus_reserved > 0.0)
        .map(|n| {
            format!(
                "{}: {} GPU releasing, {} reserved for gangs waiting on evictions",
                n.name,
                num(n.gpus_releasing),
                num(n.gpus_reserved)
            )
        })
        .collect();
    for p in pending {
        out.push_str(&p);
        out.push('\n');
    }
    out
}
