//! Workloads and queries the scheduler's e2e tests share: a scheduler process serving the test's own node
//! pool (its nodes, PodGroups and pods carry `kai.scheduler/node-pool=<namespace>`, so tests run side by
//! side on one cluster), PodGroups, Jobs and Queues of that pool, and the reads tests assert on.
//!
//! Queues are cluster-scoped: name them with [`queue_name`] so parallel tests never share one, and delete
//! them with a [`QueuesCleanup`].

use api::{PodGroup, keys};
use k8s_openapi::api::core::v1::{Event, Pod, ServiceAccount};
use kube::api::{Api, ListParams, ObjectMeta};
use serde_json::{Value, json};

use crate::component::Component;
use crate::{FakeNodes, TestEnv};

static BUILT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
static PODGROUPER_BUILT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// A test namespace, built binaries, and the scheduler serving the test's node pool.
///
/// # Errors
/// When the build, the namespace or the process fails.
pub async fn start(test: &str, extra_args: &[&str]) -> anyhow::Result<TestEnv> {
    build().await?;
    let t = TestEnv::start(test).await?;
    start_scheduler(&t, "scheduler", extra_args)?;
    Ok(t)
}

/// A test namespace, built binaries, the scheduler serving the test's node pool and the podgrouper
/// grouping the namespace's pods: workloads go in as users write them (Deployments, Jobs, bare pods) and
/// get their PodGroups from the podgrouper, as in a cluster the chart installed.
///
/// # Errors
/// When a build, the namespace or a process fails.
pub async fn start_with_podgrouper(test: &str, extra_args: &[&str]) -> anyhow::Result<TestEnv> {
    build().await?;
    PODGROUPER_BUILT
        .get_or_try_init(|| async {
            tokio::task::spawn_blocking(|| Component::build("kai-podgrouper")).await?
        })
        .await?;
    let t = TestEnv::start(test).await?;
    start_podgrouper(&t, "podgrouper")?;
    start_scheduler(&t, "scheduler", extra_args)?;
    Ok(t)
}

/// Starts a podgrouper process named `name` grouping the pods of the test's namespace, alone on it (no
/// Lease: the binary elects a leader by default).
///
/// # Errors
/// When the process cannot start.
pub fn start_podgrouper(t: &TestEnv, name: &str) -> anyhow::Result<()> {
    t.start_component(
        name,
        "kai-podgrouper",
        [
            "--namespace",
            t.namespace(),
            "--admin-address",
            "127.0.0.1:0",
            "--leader-elect=false",
        ],
    )
}

/// Builds the scheduler binary once per test process.
///
/// # Errors
/// When cargo fails.
pub async fn build() -> anyhow::Result<()> {
    BUILT
        .get_or_try_init(|| async {
            tokio::task::spawn_blocking(|| Component::build("kai-scheduler")).await?
        })
        .await?;
    Ok(())
}

/// Starts a scheduler process named `name` serving the test's node pool, with `extra_args` after the
/// defaults (a 500 ms period, debug logs, no leader election unless `extra_args` ask for it).
///
/// # Errors
/// When the process cannot start.
pub fn start_scheduler(t: &TestEnv, name: &str, extra_args: &[&str]) -> anyhow::Result<()> {
    let mut args = vec![
        "--node-pool",
        t.namespace(),
        "--admin-address",
        "127.0.0.1:0",
        "--schedule-period",
        "500ms",
        "--log-level",
        "info,kai_scheduler=debug",
    ];
    // The binary elects a leader by default; a test's scheduler has its pool to itself and runs without
    // a Lease (which would outlive the test) unless the test is about election.
    if !extra_args.iter().any(|a| a.starts_with("--leader-elect")) {
        args.push("--leader-elect=false");
    }
    args.extend_from_slice(extra_args);
    t.start_component(name, "kai-scheduler", args)
}

/// Nodes of the test's pool.
#[must_use]
pub fn pool_nodes(t: &TestEnv, prefix: &str) -> FakeNodes {
    FakeNodes::new(prefix).label(keys::NODE_POOL, t.namespace())
}

/// The labels that put an object in the test's pool.
#[must_use]
pub fn pool_labels(t: &TestEnv) -> Value {
    json!({ keys::NODE_POOL: t.namespace() })
}

/// A PodGroup of the test's pool.
#[must_use]
pub fn pod_group(t: &TestEnv, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "PodGroup",
        "metadata": { "name": name, "namespace": t.namespace(), "labels": pool_labels(t) },
        "spec": spec,
    })
}

/// A batch Job of `n` pods of this scheduler in the test's pool, each asking for `gpus` GPUs, joined to
/// PodGroup `group` through the seeds' annotation.
#[must_use]
pub fn job(t: &TestEnv, name: &str, group: &str, n: u32, gpus: u32, extra_annotations: Value) -> Value {
    let mut annotations = json!({ keys::POD_GROUP_SEED: group });
    if let (Some(a), Some(extra)) = (annotations.as_object_mut(), extra_annotations.as_object()) {
        a.extend(extra.clone());
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": name, "namespace": t.namespace() },
        "spec": {
            "parallelism": n,
            "completions": n,
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": pool_labels(t), "annotations": annotations },
                "spec": {
                    "schedulerName": keys::SCHEDULER_NAME,
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "trainer",
                        "image": "example.com/trainer:1",
                        // Quantities as strings: server-side apply on 1.20 fails on numbers there.
                        "resources": { "limits": { "nvidia.com/gpu": gpus.to_string() } },
                    }],
                },
            },
        },
    })
}

/// Server-side applies each object into the test's namespace.
///
/// # Errors
/// When one is rejected.
pub async fn apply(t: &TestEnv, objects: &[Value]) -> anyhow::Result<()> {
    for o in objects {
        t.apply_yaml(&serde_json::to_string(o)?).await?;
    }
    Ok(())
}

/// The test namespace's pods matching a label selector.
///
/// # Errors
/// When the list fails.
pub async fn pods(t: &TestEnv, selector: &str) -> anyhow::Result<Vec<Pod>> {
    Ok(t.api::<Pod>()
        .list(&ListParams::default().labels(selector))
        .await?
        .items)
}

/// How many of the pods are bound to a node.
#[must_use]
pub fn bound(pods: &[Pod]) -> usize {
    pods.iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count()
}

/// A PodGroup of the test's namespace.
///
/// # Errors
/// When it cannot be read.
pub async fn podgroup(t: &TestEnv, name: &str) -> anyhow::Result<PodGroup> {
    Ok(t.api::<PodGroup>().get(name).await?)
}

/// The message of a PodGroup condition of `type_` whose status is True, once it is there.
///
/// # Errors
/// When the PodGroup cannot be read.
pub async fn condition(t: &TestEnv, group: &str, type_: &str) -> anyhow::Result<Option<String>> {
    let pg = podgroup(t, group).await?;
    Ok(pg
        .status
        .and_then(|s| {
            s.conditions
                .into_iter()
                .find(|c| c.type_ == type_ && c.status == "True")
        })
        .map(|c| c.message.unwrap_or_default()))
}

/// The test namespace's events with this reason.
///
/// # Errors
/// When the list fails.
pub async fn events_with_reason(t: &TestEnv, reason: &str) -> anyhow::Result<Vec<Event>> {
    let events: Api<Event> = t.api();
    Ok(events
        .list(&ListParams::default().fields(&format!("reason={reason}")))
        .await?
        .items)
}

/// A cluster-wide unique queue name for this test (queues are cluster-scoped).
#[must_use]
pub fn queue_name(t: &TestEnv, name: &str) -> String {
    format!("{}-{name}", t.namespace())
}

/// A Queue with the same GPU `quota`, `limit` and over-quota `weight` on every resource kind the seeds use
/// (cpu and memory unlimited), under `parent` when given. Names come from [`queue_name`].
#[must_use]
pub fn queue(name: &str, parent: Option<&str>, gpu: (i64, i64, i64)) -> Value {
    let (quota, limit, weight) = gpu;
    let unlimited = json!({ "quota": -1, "limit": -1, "overQuotaWeight": 1 });
    let mut spec = json!({ "resources": {
        "gpu": { "quota": quota, "limit": limit, "overQuotaWeight": weight },
        "cpu": unlimited, "memory": unlimited,
    }});
    if let Some(parent) = parent {
        spec["parentQueue"] = json!(parent);
    }
    json!({ "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": { "name": name }, "spec": spec })
}

/// Deletes the test's queues when dropped, pass or fail (best effort: a leftover queue only costs a
/// name). Synchronous through the project's kubectl, as a drop may run while the runtime unwinds.
#[derive(Debug)]
pub struct QueuesCleanup {
    kubectl: std::path::PathBuf,
    kubeconfig: std::ffi::OsString,
    names: Vec<String>,
}

impl QueuesCleanup {
    /// Deletes `names` when dropped.
    ///
    /// # Errors
    /// When the project's kubectl was not built.
    pub fn new(t: &TestEnv, names: &[&str]) -> anyhow::Result<Self> {
        Ok(Self {
            kubectl: t.kubectl()?.path().to_owned(),
            kubeconfig: t.kubeconfig_env(),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        })
    }
}

impl Drop for QueuesCleanup {
    fn drop(&mut self) {
        let mut args = vec!["delete".to_owned(), "queues.scheduling.run.ai".to_owned()];
        args.extend(self.names.iter().cloned());
        args.extend(["--ignore-not-found".to_owned(), "--wait=false".to_owned()]);
        let result = std::process::Command::new(&self.kubectl)
            .args(&args)
            .env("KUBECONFIG", &self.kubeconfig)
            .output();
        match result {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "queues {:?} not deleted: {}",
                self.names,
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(err) => eprintln!("queues {:?} not deleted: {err}", self.names),
        }
    }
}

/// Waits until PodGroup `name` of the test's namespace reaches `phase`.
///
/// # Errors
/// On timeout (with the namespace's report) or when it cannot be read.
pub async fn wait_for_phase(
    t: &TestEnv,
    name: &str,
    phase: api::PodGroupPhase,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    t.wait_until(
        &format!("PodGroup {name} {}", phase.as_str()),
        timeout,
        async || {
            let pg = podgroup(t, name).await?;
            Ok(pg.status.and_then(|s| s.phase).filter(|p| *p == phase).map(drop))
        },
    )
    .await
}

/// Makes the ServiceAccount GPU reservation pods run as (the chart creates it; a bare cluster lacks it).
///
/// # Errors
/// When the server rejects it.
pub async fn reservation_account(t: &TestEnv) -> anyhow::Result<()> {
    reservation_service_account(t.client()).await
}

/// The ServiceAccount GPU reservation pods run as (the chart makes it), made when missing.
///
/// # Errors
/// When the server refuses it.
pub async fn reservation_service_account(client: &kube::Client) -> anyhow::Result<()> {
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(keys::RESERVATION_APP.to_owned()),
            namespace: Some(keys::RESERVATION_NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    crate::apply::apply_typed(client, &account).await?;
    Ok(())
}

/// Deletes cluster-scoped objects a test made (PersistentVolumes, StorageClasses, ...) when dropped,
/// pass or fail (best effort, not waiting: a PersistentVolume goes once its claim is gone). Name them
/// after the test's namespace so parallel tests never share one. Synchronous through the project's
/// kubectl, as a drop may run while the runtime unwinds.
#[derive(Debug)]
pub struct ClusterObjectsCleanup {
    kubectl: std::path::PathBuf,
    kubeconfig: std::ffi::OsString,
    /// (resource, name), in the order added.
    objects: Vec<(String, String)>,
}

impl ClusterObjectsCleanup {
    /// Deletes nothing yet; [`ClusterObjectsCleanup::add`] names what to delete.
    ///
    /// # Errors
    /// When the project's kubectl was not built.
    pub fn new(t: &TestEnv) -> anyhow::Result<Self> {
        Ok(Self {
            kubectl: t.kubectl()?.path().to_owned(),
            kubeconfig: t.kubeconfig_env(),
            objects: Vec::new(),
        })
    }

    /// Deletes `name` of `resource` (`persistentvolumes`, `storageclasses.storage.k8s.io`) when dropped.
    pub fn add(&mut self, resource: &str, name: &str) {
        self.objects.push((resource.to_owned(), name.to_owned()));
    }
}

impl Drop for ClusterObjectsCleanup {
    fn drop(&mut self) {
        for (resource, name) in &self.objects {
            let result = std::process::Command::new(&self.kubectl)
                .args(["delete", resource, name, "--ignore-not-found", "--wait=false"])
                .env("KUBECONFIG", &self.kubeconfig)
                .output();
            match result {
                Ok(out) if out.status.success() => {}
                Ok(out) => eprintln!(
                    "{resource} {name} not deleted: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
                Err(err) => eprintln!("{resource} {name} not deleted: {err}"),
            }
        }
    }
}
