//! What each kind of write the pipeline makes costs the API server (`cargo xtask bench --mode write-cost`).
//!
//! The pipeline benchmark shows kai's pipeline bound by the API server's CPU; this one says why, write by
//! write. In one fresh namespace it makes `writes` writes of each kind, `concurrency` in flight, nothing
//! else of the run's running (no scheduler, no podgrouper, no node agent for the node the pods are bound
//! to), and reads the CPU time kube-apiserver and etcd spent on each kind ([`super::server_load`]):
//!
//! - what kube-scheduler's path writes per pod: the pod's create (the user's), its binding, a `Scheduled`
//!   event;
//! - what kai's pipeline adds per one-pod group: the podgrouper's PodGroup (server-side apply, owned by
//!   the pod) and the scheduler's PodGroup status (server-side apply on `status`);
//! - alternatives, for comparison: the PodGroup created by POST, the status written by a merge patch, and
//!   the same status applied again (a write that changes nothing).
//!
//! The control plane's controllers watch everything (the garbage collector follows owner references),
//! so their share of each write is in the figures, as it is in a real run. The server is shared with
//! other tests: read the figures beside the load average printed with them.

use std::time::Duration;

use anyhow::Context as _;
use api::keys;
use futures::{StreamExt as _, stream};
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::server_load::{self, Load};
use crate::{FakeNodes, TestEnv};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Writes of each kind.
    pub writes: usize,
    /// Writes in flight.
    pub concurrency: usize,
}

/// One kind of write, in the order they are made (each may need the objects of those before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// `POST pods`: the user's pod (kube-scheduler's path and kai's).
    PodCreate,
    /// The podgrouper's PodGroup: server-side apply, a one-pod group owned by its pod.
    PodGroupApply,
    /// The same PodGroup made by `POST` (another name): for comparison.
    PodGroupCreate,
    /// The scheduler's status of a running one-pod group: server-side apply on `status`.
    PodGroupStatusApply,
    /// The same status applied again: a write that changes nothing.
    PodGroupStatusUnchanged,
    /// The same status by a JSON merge patch on the POSTed groups: for comparison.
    PodGroupStatusMerge,
    /// `POST events`: the `Scheduled` event of a bind (kube-scheduler's path and kai's).
    Event,
    /// `POST pods/binding` (kube-scheduler's path and kai's).
    Binding,
}

impl Write {
    /// Every kind, in the order they are made.
    pub const ALL: [Self; 8] = [
        Self::PodCreate,
        Self::PodGroupApply,
        Self::PodGroupCreate,
        Self::PodGroupStatusApply,
        Self::PodGroupStatusUnchanged,
        Self::PodGroupStatusMerge,
        Self::Event,
        Self::Binding,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::PodCreate => "pod create (POST)",
            Self::PodGroupApply => "PodGroup create (server-side apply, the podgrouper's)",
            Self::PodGroupCreate => "PodGroup create (POST)",
            Self::PodGroupStatusApply => "PodGroup status (server-side apply, the scheduler's)",
            Self::PodGroupStatusUnchanged => "PodGroup status applied again, unchanged",
            Self::PodGroupStatusMerge => "PodGroup status (merge patch)",
            Self::Event => "event (POST)",
            Self::Binding => "binding (POST pods/binding)",
        }
    }

    /// Whether kube-scheduler's path makes it for each pod.
    fn kube_scheduler_path(self) -> bool {
        matches!(self, Self::PodCreate | Self::Event | Self::Binding)
    }

    /// Whether kai's pipeline makes it for each plain pod.
    fn kai_path(self) -> bool {
        self.kube_scheduler_path() || matches!(self, Self::PodGroupApply | Self::PodGroupStatusApply)
    }
}

/// What one kind of write cost.
#[derive(Clone, Debug)]
pub struct Cost {
    /// Which.
    pub write: Write,
    /// Writes that succeeded.
    pub done: usize,
    /// Writes the server refused or that failed.
    pub failed: usize,
    /// Who was busy meanwhile.
    pub load: Load,
}

impl Cost {
    /// CPU milliseconds of process `name` per successful write.
    fn ms_per_write(&self, name: &str) -> Option<f64> {
        let seconds: f64 = self
            .load
            .cpu_seconds
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, s)| *s)
            .sum();
        (self.done > 0).then(|| seconds * 1e3 / self.done as f64)
    }
}

/// Makes the writes and measures them.
///
/// # Errors
/// When the cluster is not reachable, the namespace cannot be made or a kind of write fails entirely.
pub async fn run(options: &Options) -> anyhow::Result<Vec<Cost>> {
    let t = TestEnv::start("bench-write-cost").await?;
    let result = measure_all(&t, options).await;
    if let Err(err) = t.finish().await {
        eprintln!("bench:   cleanup failed: {err:#}");
    }
    result
}

async fn measure_all(t: &TestEnv, options: &Options) -> anyhow::Result<Vec<Cost>> {
    // A node no agent plays: its bound pods stay as bound, with no kubelet status writes in the figures.
    let owner = format!("{}-unplayed", t.namespace());
    let node = crate::nodes::create(t.client(), &FakeNodes::new(owner.clone()).owned_by(&owner))
        .await?
        .into_iter()
        .next()
        .context("no node was made")?;
    let result = measure_kinds(t, options, &node).await;
    if let Err(err) = crate::nodes::delete(t.client(), &crate::nodes::owner_selector(&owner)).await {
        eprintln!("bench:   deleting node {node} failed: {err:#}");
    }
    result
}

async fn measure_kinds(t: &TestEnv, options: &Options, node: &str) -> anyhow::Result<Vec<Cost>> {
    let processes = server_load::control_plane();
    let names: Vec<String> = (0..options.writes).map(|i| format!("p-{i:06}")).collect();
    let mut uids = vec![String::new(); names.len()];
    let mut costs = Vec::new();
    for write in Write::ALL {
        eprintln!("bench: {} x {} ...", write.label(), options.writes);
        let start = server_load::probe(t.client(), &processes).await;
        let outcomes: Vec<anyhow::Result<Option<String>>> = stream::iter(names.iter().enumerate())
            .map(|(i, name)| one(t, write, name, &uids[i], node))
            .buffered(options.concurrency.max(1))
            .collect()
            .await;
        let end = server_load::probe(t.client(), &processes).await;
        let mut failed = 0;
        let mut first_error = None;
        for (i, outcome) in outcomes.into_iter().enumerate() {
            match outcome {
                Ok(Some(uid)) => uids[i] = uid,
                Ok(None) => {}
                Err(err) => {
                    failed += 1;
                    first_error.get_or_insert(err);
                }
            }
        }
        if let Some(err) = &first_error {
            eprintln!("bench:   {failed} failed, the first: {err:#}");
        }
        if let Some(err) = first_error.filter(|_| failed == names.len()) {
            return Err(err.context(format!("every {} failed", write.label())));
        }
        costs.push(Cost {
            write,
            done: names.len() - failed,
            failed,
            load: Load::between(&start, &end),
        });
        // Let the controllers' reactions to this kind settle before the next is measured.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Ok(costs)
}

/// Makes one write; a pod's create returns its uid (the PodGroup's owner reference names it).
async fn one(t: &TestEnv, write: Write, pod: &str, uid: &str, node: &str) -> anyhow::Result<Option<String>> {
    let group = format!("g-{pod}");
    let posted = format!("c-{pod}");
    let apply = |manager: &str| PatchParams::apply(manager).force();
    let result: Result<Option<String>, kube::Error> = match write {
        Write::PodCreate => {
            let pod: Pod = serde_json::from_value(pod_body(t, pod))?;
            t.api::<Pod>()
                .create(&PostParams::default(), &pod)
                .await
                .map(|p| p.metadata.uid)
        }
        Write::PodGroupApply => t
            .api::<api::PodGroup>()
            .patch(
                &group,
                &apply(keys::FIELD_MANAGER_PODGROUPER),
                &Patch::Apply(pod_group(t, &group, pod, uid)),
            )
            .await
            .map(|_| None),
        Write::PodGroupCreate => {
            let body: api::PodGroup = serde_json::from_value(pod_group(t, &posted, pod, uid))?;
            let params = PostParams {
                field_manager: Some(keys::FIELD_MANAGER_PODGROUPER.to_owned()),
                ..PostParams::default()
            };
            t.api::<api::PodGroup>()
                .create(&params, &body)
                .await
                .map(|_| None)
        }
        Write::PodGroupStatusApply | Write::PodGroupStatusUnchanged => t
            .api::<api::PodGroup>()
            .patch_status(
                &group,
                &apply(keys::FIELD_MANAGER_SCHEDULER),
                &Patch::Apply(running_status()),
            )
            .await
            .map(|_| None),
        Write::PodGroupStatusMerge => t
            .api::<api::PodGroup>()
            .patch_status(&posted, &PatchParams::default(), &Patch::Merge(running_status()))
            .await
            .map(|_| None),
        Write::Event => {
            let event: Event = serde_json::from_value(scheduled_event(t, pod, uid, node))?;
            t.api::<Event>()
                .create(&PostParams::default(), &event)
                .await
                .map(|_| None)
        }
        Write::Binding => {
            let binding = json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": { "name": pod, "namespace": t.namespace() },
                "target": { "apiVersion": "v1", "kind": "Node", "name": node },
            });
            let bound: Result<Status, _> = t
                .api::<Pod>()
                .create_subresource("binding", pod, &PostParams::default(), &binding)
                .await;
            bound.map(|_| None)
        }
    };
    Ok(result?)
}

/// A plain pod no scheduler takes (only this benchmark binds it).
fn pod_body(t: &TestEnv, name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": t.namespace() },
        "spec": {
            "schedulerName": format!("nobody-{}", t.namespace()),
            "containers": [{ "name": "c", "image": "example.com/c:1",
                             "resources": { "requests": { "cpu": "100m", "memory": "128Mi" } } }],
        },
    })
}

/// A one-pod group as the podgrouper makes it for a bare pod: owned by the pod, its queue and priority
/// class, the top owner's metadata.
fn pod_group(t: &TestEnv, name: &str, pod: &str, uid: &str) -> Value {
    json!({
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": t.namespace(),
            "labels": { keys::QUEUE_LABEL: keys::DEFAULT_QUEUE },
            "annotations": {
                keys::TOP_OWNER_METADATA: format!("name: {pod}\nuid: {uid}\ngroup: \"\"\nversion: v1\nkind: Pod\n"),
            },
            "ownerReferences": [{ "apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid,
                                  "controller": false, "blockOwnerDeletion": false }],
        },
        "spec": { "minMember": 1, "queue": keys::DEFAULT_QUEUE, "priorityClassName": "train" },
    })
}

/// The status of a running one-pod group, as the scheduler writes it.
fn running_status() -> Value {
    json!({
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "status": {
            "phase": "Running",
            "conditions": [{ "type": "Scheduled", "status": "True", "reason": "Scheduled",
                             "message": "1 of 1 pods placed", "lastTransitionTime": "2026-11-29T12:00:00Z" }],
            "running": 1,
            "pending": 0,
            "resourcesStatus": {
                "allocated": { "cpu": "100m", "memory": "128Mi" },
                "requested": { "cpu": "100m", "memory": "128Mi" },
            },
        },
    })
}

/// A bind's `Scheduled` event, as the scheduler reports it.
fn scheduled_event(t: &TestEnv, pod: &str, uid: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": { "name": format!("{pod}.scheduled"), "namespace": t.namespace() },
        "involvedObject": { "apiVersion": "v1", "kind": "Pod", "namespace": t.namespace(), "name": pod, "uid": uid },
        "reason": "Scheduled",
        "message": format!("Successfully assigned {}/{pod} to {node}", t.namespace()),
        "type": "Normal",
        "source": { "component": keys::SCHEDULER_NAME },
        "firstTimestamp": "2026-11-29T12:00:00Z",
        "lastTimestamp": "2026-11-29T12:00:00Z",
        "count": 1,
    })
}

/// A Markdown table of the costs, then what the paths of kube-scheduler and kai cost the API server per
/// pod.
#[must_use]
pub fn table(costs: &[Cost], options: &Options) -> String {
    let mut out = format!(
        "\nAPI server CPU per write ({} writes of each kind, {} in flight; CPU ms per write = the process's CPU \
         time while the kind was written / writes):\n\n\
         | write | done | failed | writes/s | kube-apiserver ms | etcd ms |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
        options.writes, options.concurrency
    );
    let f = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
    for c in costs {
        out.push_str(&format!(
            "| {} | {} | {} | {:.0} | {} | {} |\n",
            c.write.label(),
            c.done,
            c.failed,
            c.done as f64 / c.load.wall.as_secs_f64().max(1e-3),
            f(c.ms_per_write("kube-apiserver")),
            f(c.ms_per_write("etcd")),
        ));
    }
    let path = |on: fn(Write) -> bool| -> Option<f64> {
        costs
            .iter()
            .filter(|c| on(c.write))
            .map(|c| c.ms_per_write("kube-apiserver"))
            .sum()
    };
    if let (Some(kube), Some(kai)) = (path(Write::kube_scheduler_path), path(Write::kai_path)) {
        out.push_str(&format!(
            "\nkube-apiserver CPU per plain pod: kube-scheduler's path (create, binding, event) {kube:.2} ms; \
             kai's pipeline (those, the PodGroup apply and its status) {kai:.2} ms. Where the API server's CPU \
             bounds both, kai's pipeline is at best {:.2} of kube-scheduler's speed.\n",
            kube / kai.max(1e-9)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(write: Write, apiserver_seconds: f64) -> Cost {
        Cost {
            write,
            done: 1000,
            failed: 0,
            load: Load {
                wall: Duration::from_secs(4),
                cpu_seconds: vec![
                    ("kube-apiserver".to_owned(), apiserver_seconds),
                    ("etcd".to_owned(), 1.0),
                ],
                machine_busy: None,
                server: None,
            },
        }
    }

    #[test]
    fn the_table_adds_up_each_path_from_its_own_writes() {
        // 2, 5, 4, 7, 6, 8, 1 and 3 ms per write.
        let costs: Vec<Cost> = Write::ALL
            .into_iter()
            .zip([2.0, 5.0, 4.0, 7.0, 6.0, 8.0, 1.0, 3.0])
            .map(|(w, s)| cost(w, s))
            .collect();
        let table = table(
            &costs,
            &Options {
                writes: 1000,
                concurrency: 16,
            },
        );
        assert!(
            table.contains("| pod create (POST) | 1000 | 0 | 250 | 2.00 | 1.00 |"),
            "{table}"
        );
        // kube-scheduler: create 2 + event 1 + binding 3; kai adds the apply 5 and the status 7.
        assert!(table.contains("path (create, binding, event) 6.00 ms"), "{table}");
        assert!(table.contains("and its status) 18.00 ms"), "{table}");
        assert!(
            table.contains("at best 0.33 of kube-scheduler's speed"),
            "{table}"
        );
    }

    #[test]
    fn the_paths_hold_the_writes_each_makes_per_pod() {
        let kube: Vec<Write> = Write::ALL
            .into_iter()
            .filter(|w| w.kube_scheduler_path())
            .collect();
        assert_eq!(kube, [Write::PodCreate, Write::Event, Write::Binding]);
        let kai: Vec<Write> = Write::ALL.into_iter().filter(|w| w.kai_path()).collect();
        assert_eq!(
            kai,
            [
                Write::PodCreate,
                Write::PodGroupApply,
                Write::PodGroupStatusApply,
                Write::Event,
                Write::Binding
            ]
        );
    }
}
