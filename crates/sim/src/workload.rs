//! The native workload format of `kai sim replay`: nodes, queues and jobs (arrival, duration, pods,
//! priority, GPUs or a GPU share, gang minimum), in YAML or JSON (JSON is YAML). Strict: an unknown
//! field, a missing queue, a job in a non-leaf queue or a nonsensical number is an error naming the
//! entry. Times are seconds from the start of the replay.
//!
//! ```yaml
//! nodes:
//!   - {name: dgx, count: 4, cpu: 64, memoryGiB: 512, gpus: 8, labels: {pool: a}}
//! queues:
//!   - {name: research, quota: 32}                        # a department (inner queue)
//!   - {name: vision, parent: research, quota: 16, limit: 32, overQuotaWeight: 2}
//!   - {name: nlp, parent: research, quota: 16}           # limit absent: unlimited
//! jobs:
//!   - {name: train-a, queue: vision, arrival: 0, duration: 3600, pods: {count: 2, gpus: 8}}
//!   - {queue: nlp, arrival: 30, duration: 600, priority: 100, pods: {count: 4, gpus: 1, cpu: 4}, minMember: 2}
//!   - {queue: nlp, arrival: 60, duration: 120, pods: {gpuShare: 0.5}}
//! ```

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Why a workload could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The file could not be read.
    #[error("cannot read workload {path}: {source}")]
    Read {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The text is not the format (syntax, unknown field, wrong type).
    #[error("invalid workload: {0}")]
    Parse(String),
    /// An entry is individually well-formed but wrong.
    #[error("invalid workload: {what}: {why}")]
    Invalid {
        /// The entry (`jobs[3] (train-a)`).
        what: String,
        /// What is wrong with it.
        why: String,
    },
}

/// A workload: the cluster, its queue tree and the jobs that arrive.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Workload {
    /// Nodes (each entry may stand for several identical ones).
    pub nodes: Vec<NodeSpec>,
    /// Queues; jobs go to leaves.
    pub queues: Vec<QueueSpec>,
    /// Jobs, in any order.
    pub jobs: Vec<JobSpec>,
}

/// Identical nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeSpec {
    /// Name, or name prefix when `count` > 1 (`<name>-0`, `<name>-1`, ...).
    pub name: String,
    /// How many (default 1).
    #[serde(default = "one_u32")]
    pub count: u32,
    /// CPU cores.
    pub cpu: f64,
    /// Memory in GiB.
    #[serde(rename = "memoryGiB")]
    pub memory_gib: u32,
    /// Whole GPUs.
    #[serde(default)]
    pub gpus: u32,
    /// Node labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// A queue and its GPU share (KAI's `spec.resources.gpu`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QueueSpec {
    /// Name.
    pub name: String,
    /// Parent queue (absent: top level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Queue priority (default 100, KAI's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Deserved GPUs (default 0: everything it gets is over quota).
    #[serde(default)]
    pub quota: f64,
    /// Most GPUs it may hold (absent: unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<f64>,
    /// Weight in the division of GPUs beyond the quotas (default 1).
    #[serde(default = "one_f64")]
    pub over_quota_weight: f64,
}

/// A job: a gang of identical pods.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JobSpec {
    /// Name (default `job-<index>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Leaf queue.
    pub queue: String,
    /// Arrival, seconds from the start.
    pub arrival: f64,
    /// Run time in seconds once every pod it needs runs (the gang's start).
    pub duration: f64,
    /// Priority (absent: KAI's default, 50, preemptible).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Preemptible (absent: by priority, below 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptible: Option<bool>,
    /// The pods.
    pub pods: PodsSpec,
    /// Pods needed to start (default: all of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<u32>,
}

/// The pods of a job, all alike.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PodsSpec {
    /// How many (default 1).
    #[serde(default = "one_u32")]
    pub count: u32,
    /// CPU cores per pod (default 1).
    #[serde(default = "one_f64")]
    pub cpu: f64,
    /// Memory per pod in GiB (default 1).
    #[serde(default = "one_u32", rename = "memoryGiB")]
    pub memory_gib: u32,
    /// Whole GPUs per pod (default 0).
    #[serde(default)]
    pub gpus: u32,
    /// A share of one GPU per pod, in (0, 1) (KAI's `gpu-fraction`); excludes `gpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_share: Option<f64>,
}

fn one_u32() -> u32 {
    1
}

fn one_f64() -> f64 {
    1.0
}

/// Milliseconds.
pub type Millis = i64;

/// A job as the replay uses it: validated, times in milliseconds, GPUs in thousandths.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// Name.
    pub name: String,
    /// Index of its queue in [`Workload::queues`].
    pub queue: usize,
    /// Arrival.
    pub arrival: Millis,
    /// Run time.
    pub duration: Millis,
    /// Explicit priority.
    pub priority: Option<i32>,
    /// Explicit preemptibility.
    pub preemptible: Option<bool>,
    /// Pods.
    pub pods: u32,
    /// Pods needed to start.
    pub min_member: u32,
    /// CPU millicores per pod.
    pub cpu_milli: i64,
    /// Memory GiB per pod.
    pub memory_gib: i64,
    /// GPU thousandths per pod.
    pub gpu_milli: i64,
    /// Whether `gpu_milli` is a share of one device rather than whole GPUs.
    pub shared: bool,
}

impl Job {
    /// GPU thousandths of all its pods.
    #[must_use]
    pub fn total_gpu_milli(&self) -> i64 {
        self.gpu_milli.saturating_mul(i64::from(self.pods))
    }
}

/// A validated workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    /// As written.
    pub workload: Workload,
    /// Jobs in arrival order (ties in the order written).
    pub jobs: Vec<Job>,
    /// Whole GPUs of all nodes.
    pub gpus: i64,
    /// Queues that take jobs (no child), by index.
    pub leaves: Vec<usize>,
}

/// Seconds to milliseconds, rejecting what is not a finite non-negative time.
fn millis(seconds: f64) -> Option<Millis> {
    let ms = (seconds * 1000.0).round();
    (seconds.is_finite() && seconds >= 0.0 && ms < 9.0e15).then_some(ms as Millis)
}

impl Workload {
    /// Parses YAML or JSON text.
    ///
    /// # Errors
    /// Syntax, unknown fields, wrong types (with the position serde reports).
    pub fn parse(text: &str) -> Result<Self, WorkloadError> {
        serde_yaml::from_str(text).map_err(|e| WorkloadError::Parse(e.to_string()))
    }

    /// Reads and parses a file.
    ///
    /// # Errors
    /// The file cannot be read, or [`Self::parse`] fails.
    pub fn load(path: &std::path::Path) -> Result<Self, WorkloadError> {
        let text = std::fs::read_to_string(path).map_err(|source| WorkloadError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Checks every entry and converts the jobs for the replay.
    ///
    /// # Errors
    /// The first entry that is wrong, named.
    pub fn check(self) -> Result<Checked, WorkloadError> {
        let invalid = |what: String, why: &str| WorkloadError::Invalid {
            what,
            why: why.to_owned(),
        };
        let mut node_names = BTreeSet::new();
        let mut gpus: i64 = 0;
        for (i, n) in self.nodes.iter().enumerate() {
            let what = format!("nodes[{i}] ({})", n.name);
            if n.name.is_empty() || !node_names.insert(n.name.as_str()) {
                return Err(invalid(what, "names must be non-empty and unique"));
            }
            if n.count == 0 {
                return Err(invalid(what, "count must be at least 1"));
            }
            if !(n.cpu.is_finite() && n.cpu > 0.0 && n.cpu < 1.0e6) {
                return Err(invalid(what, "cpu must be a positive number of cores"));
            }
            if n.memory_gib == 0 {
                return Err(invalid(what, "memoryGiB must be at least 1"));
            }
            gpus = i64::from(n.gpus)
                .checked_mul(i64::from(n.count))
                .and_then(|g| gpus.checked_add(g))
                .ok_or_else(|| invalid(what, "too many GPUs"))?;
        }
        if self.nodes.is_empty() {
            return Err(invalid("nodes".into(), "at least one node is needed"));
        }
        let index: BTreeMap<&str, usize> = self
            .queues
            .iter()
            .enumerate()
            .map(|(i, q)| (q.name.as_str(), i))
            .collect();
        if index.len() != self.queues.len() {
            return Err(invalid("queues".into(), "queue names must be unique"));
        }
        let mut has_child = vec![false; self.queues.len()];
        for (i, q) in self.queues.iter().enumerate() {
            let what = format!("queues[{i}] ({})", q.name);
            if q.name.is_empty() {
                return Err(invalid(what, "a queue needs a name"));
            }
            if let Some(parent) = &q.parent {
                let Some(&p) = index.get(parent.as_str()) else {
                    return Err(invalid(what, &format!("parent {parent:?} is not a queue")));
                };
                has_child[p] = true;
                // Walk up: a cycle comes back to this queue within as many steps as there are queues.
                let mut at = Some(p);
                for _ in 0..self.queues.len() {
                    let Some(a) = at else { break };
                    if a == i {
                        return Err(invalid(what, "the parent chain loops back to this queue"));
                    }
                    at = self.queues[a]
                        .parent
                        .as_deref()
                        .and_then(|n| index.get(n).copied());
                }
            }
            let finite_non_negative = |x: f64| x.is_finite() && x >= 0.0;
            if !finite_non_negative(q.quota) {
                return Err(invalid(what, "quota must be a non-negative number of GPUs"));
            }
            if let Some(limit) = q.limit
                && !(finite_non_negative(limit) && limit >= q.quota)
            {
                return Err(invalid(what, "limit must be a number of GPUs at least the quota"));
            }
            if !finite_non_negative(q.over_quota_weight) {
                return Err(invalid(what, "overQuotaWeight must be a non-negative number"));
            }
        }
        let leaves: Vec<usize> = (0..self.queues.len()).filter(|i| !has_child[*i]).collect();
        let mut job_names = BTreeSet::new();
        let mut jobs = Vec::with_capacity(self.jobs.len());
        for (i, j) in self.jobs.iter().enumerate() {
            let name = j.name.clone().unwrap_or_else(|| format!("job-{i}"));
            let what = format!("jobs[{i}] ({name})");
            if !job_names.insert(name.clone()) {
                return Err(invalid(what, "job names must be unique"));
            }
            let Some(&queue) = index.get(j.queue.as_str()) else {
                return Err(invalid(what, &format!("queue {:?} is not a queue", j.queue)));
            };
            if has_child[queue] {
                return Err(invalid(what, "jobs go to leaf queues, this one has children"));
            }
            let arrival = millis(j.arrival)
                .ok_or_else(|| invalid(what.clone(), "arrival must be a non-negative number of seconds"))?;
            let duration = millis(j.duration)
                .filter(|d| *d > 0)
                .ok_or_else(|| invalid(what.clone(), "duration must be a positive number of seconds"))?;
            let p = &j.pods;
            if p.count == 0 {
                return Err(invalid(what, "pods.count must be at least 1"));
            }
            let min_member = j.min_member.unwrap_or(p.count);
            if min_member == 0 || min_member > p.count {
                return Err(invalid(what, "minMember must be between 1 and pods.count"));
            }
            if !(p.cpu.is_finite() && p.cpu >= 0.0 && p.cpu < 1.0e6) {
                return Err(invalid(what, "pods.cpu must be a non-negative number of cores"));
            }
            let (gpu_milli, shared) = match (p.gpus, p.gpu_share) {
                (0, Some(share)) if share > 0.0 && share < 1.0 => ((share * 1000.0).round() as i64, true),
                (_, Some(_)) => {
                    return Err(invalid(
                        what,
                        "pods.gpuShare must be in (0, 1) and excludes pods.gpus",
                    ));
                }
                (n, None) => (i64::from(n) * 1000, false),
            };
            if shared && gpu_milli == 0 {
                return Err(invalid(what, "pods.gpuShare is below a thousandth of a GPU"));
            }
            jobs.push(Job {
                name,
                queue,
                arrival,
                duration,
                priority: j.priority,
                preemptible: j.preemptible,
                pods: p.count,
                min_member,
                cpu_milli: (p.cpu * 1000.0).round() as i64,
                memory_gib: i64::from(p.memory_gib),
                gpu_milli,
                shared,
            });
        }
        // Stable: equal arrivals keep the order written.
        jobs.sort_by_key(|j| j.arrival);
        Ok(Checked {
            workload: self,
            jobs,
            gpus,
            leaves,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first YAML example of docs/sim.md, the format's documentation.
    fn documented_example() -> &'static str {
        let doc = include_str!("../../../docs/sim.md");
        let start = doc.find("```yaml\n").expect("docs/sim.md has a YAML example") + "```yaml\n".len();
        let len = doc[start..].find("```").expect("the example ends");
        &doc[start..start + len]
    }

    #[test]
    fn the_documented_example_parses_and_checks() {
        let c = Workload::parse(documented_example())
            .expect("parses")
            .check()
            .expect("valid");
        assert_eq!(c.gpus, 32);
        assert_eq!(c.leaves, vec![1, 2]);
        assert_eq!(c.jobs.len(), 3);
        let a = &c.jobs[0];
        assert_eq!(
            (a.name.as_str(), a.queue, a.pods, a.min_member),
            ("train-a", 1, 2, 2)
        );
        assert_eq!(
            (a.duration, a.gpu_milli, a.total_gpu_milli()),
            (3_600_000, 8000, 16_000)
        );
        let b = &c.jobs[1];
        assert_eq!(
            (b.name.as_str(), b.arrival, b.priority, b.min_member),
            ("job-1", 30_000, Some(100), 2)
        );
        assert_eq!(b.cpu_milli, 4000);
        let s = &c.jobs[2];
        assert!(s.shared);
        assert_eq!(s.gpu_milli, 500);
        assert_eq!(c.workload.queues[2].limit, None);
        assert!((c.workload.queues[1].over_quota_weight - 2.0).abs() < f64::EPSILON);
    }

    #[test]
    fn json_is_accepted_too() {
        let text = r#"{"nodes":[{"name":"n","cpu":8,"memoryGiB":32,"gpus":1}],
            "queues":[{"name":"q","quota":1}],
            "jobs":[{"queue":"q","arrival":0,"duration":1,"pods":{"gpus":1}}]}"#;
        let c = Workload::parse(text).expect("parses").check().expect("valid");
        assert_eq!(c.jobs[0].gpu_milli, 1000);
    }

    #[test]
    fn jobs_come_out_in_arrival_order_ties_as_written() {
        let text = r"
nodes: [{name: n, cpu: 8, memoryGiB: 32}]
queues: [{name: q}]
jobs:
  - {name: late, queue: q, arrival: 9, duration: 1, pods: {}}
  - {name: tie-1, queue: q, arrival: 1, duration: 1, pods: {}}
  - {name: tie-2, queue: q, arrival: 1, duration: 1, pods: {}}
";
        let c = Workload::parse(text).expect("parses").check().expect("valid");
        let names: Vec<&str> = c.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["tie-1", "tie-2", "late"]);
    }

    fn error(text: &str) -> String {
        match Workload::parse(text).and_then(Workload::check) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn mistakes_are_named() {
        let base = "nodes: [{name: n, cpu: 8, memoryGiB: 32, gpus: 8}]\nqueues: [{name: top}, {name: q, parent: top}]\n";
        let cases = [
            (
                "jobs: [{queue: q, arrival: 0, duration: 1, pods: {}, colour: red}]",
                "unknown field `colour`",
            ),
            (
                "jobs: [{queue: nope, arrival: 0, duration: 1, pods: {}}]",
                "jobs[0] (job-0): queue \"nope\"",
            ),
            (
                "jobs: [{queue: top, arrival: 0, duration: 1, pods: {}}]",
                "leaf queues",
            ),
            (
                "jobs: [{queue: q, arrival: -1, duration: 1, pods: {}}]",
                "arrival",
            ),
            (
                "jobs: [{queue: q, arrival: 0, duration: 0, pods: {}}]",
                "duration must be a positive",
            ),
            (
                "jobs: [{queue: q, arrival: 0, duration: 1, pods: {count: 2}, minMember: 3}]",
                "minMember",
            ),
            (
                "jobs: [{queue: q, arrival: 0, duration: 1, pods: {gpus: 1, gpuShare: 0.5}}]",
                "gpuShare",
            ),
            (
                "jobs: [{queue: q, arrival: 0, duration: 1, pods: {gpuShare: 1.5}}]",
                "gpuShare",
            ),
            (
                "jobs: [{name: a, queue: q, arrival: 0, duration: 1, pods: {}}, {name: a, queue: q, arrival: 0, duration: 1, pods: {}}]",
                "jobs[1] (a): job names must be unique",
            ),
        ];
        for (jobs, expected) in cases {
            let e = error(&format!("{base}{jobs}"));
            assert!(e.contains(expected), "{jobs}: {e} lacks {expected:?}");
        }
        let e = error("nodes: []\nqueues: []\njobs: []");
        assert!(e.contains("at least one node"), "{e}");
        let e = error(
            "nodes: [{name: n, cpu: 8, memoryGiB: 32}]\nqueues: [{name: a, parent: b}, {name: b, parent: a}]\njobs: []",
        );
        assert!(e.contains("loops back"), "{e}");
        let e = error(
            "nodes: [{name: n, cpu: 8, memoryGiB: 32}]\nqueues: [{name: a, quota: 4, limit: 2}]\njobs: []",
        );
        assert!(e.contains("queues[0] (a): limit"), "{e}");
    }
}
