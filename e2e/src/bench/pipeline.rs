//! The default pipeline end to end (`cargo xtask bench --mode pipeline`): workloads go in as users write
//! them, with no PodGroups, and the podgrouper and the scheduler run exactly as the chart configures
//! them (`helm template` of `deploy/chart/kai-scheduler`, release binaries), beside kube-scheduler on the
//! same plain pods and the raw `pods/binding` rate.
//!
//! Each run has a fresh namespace and its own nodes. The contender starts first and is waited for (kai:
//! both components answer `/readyz`; kube-scheduler: a fixed settle time); the clock starts when the
//! first pod (or Deployment, or Job) is sent and stops at the last bind this process's watch sees.
//! Workloads:
//! - **plain pods**: bare pods, one PodGroup each (kube-scheduler runs these too);
//! - **Deployments** of [`DEPLOYMENT_REPLICAS`] replicas (the ReplicaSet controller makes the pods; one
//!   PodGroup per pod), in a queue of the run with unlimited CPU and memory (the podgrouper gives them
//!   the non-preemptible `inference` priority, which the default queue's zero quota would refuse);
//! - **Jobs of 8** with `scheduling.run.ai/gang-scheduling: "true"` (the Job controller makes the pods;
//!   one gang of 8 per Job).
//!
//! Deployments and Jobs are made by kube-controller-manager, whose client the local control plane
//! limits to 200 QPS: their pods cannot appear faster, so the table also shows when the last pod was seen.
//! API writes per bound pod come from the audit log ([`super::audit`]), counted until the components
//! stop, 12 s after the last bind (writes deferred behind binds included).
//!
//! With `backlog` > 0, each run first makes that many bare pods that can never fit (each asks for more
//! CPU than a node has), waits until each is reported unschedulable and the writes deferred behind
//! that have landed, and only then starts the clock: the run then shows what a standing backlog of
//! waiting gangs costs the pipeline, in speed and in writes (the backlog's own writes during the run
//! are counted apart, [`audit::BACKLOG_PREFIX`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use api::keys;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::Api;
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::audit::{self, Requests};
use super::{Contender as PreContender, Measurement, Options as PreOptions, Workload as PreWorkload};
use crate::component::{Component, free_port, http_status};
use crate::kube_scheduler::KubeScheduler;
use crate::{FakeNodes, TestEnv};

/// Replicas per Deployment.
pub const DEPLOYMENT_REPLICAS: usize = 100;
/// Pods per Job (one gang each).
pub const JOB_SIZE: usize = 8;
/// How long kai's components keep running after the last bind, so the writes deferred behind binds
/// (`apply::MAX_WRITE_DEFERRAL`, 10 s) are made and counted.
const WRITE_DRAIN: Duration = Duration::from_secs(12);
/// CPU each backlog pod asks for: more than a fake node has (64), so it never fits anywhere.
const BACKLOG_CPU: &str = "65";
/// How long kube-scheduler is given after `/healthz` to list and watch before the pods are created.
const KUBE_SCHEDULER_SETTLE: Duration = Duration::from_secs(2);

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Pods per workload (a multiple of [`JOB_SIZE`] and of [`DEPLOYMENT_REPLICAS`] is best).
    pub pods: usize,
    /// Fake nodes per run.
    pub nodes: usize,
    /// Concurrencies tried for the raw binder.
    pub raw_concurrency: Vec<usize>,
    /// The kai-scheduler binary (release build).
    pub scheduler: PathBuf,
    /// The kai-podgrouper binary (release build).
    pub podgrouper: PathBuf,
    /// kube-scheduler; `None` skips it.
    pub kube_scheduler: Option<PathBuf>,
    /// Workloads to run for kai (all three by default).
    pub workloads: Vec<Workload>,
    /// Bare pods that never fit, made and reported unschedulable before each run's clock starts.
    pub backlog: usize,
}

/// How users write the pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Bare pods.
    Plain,
    /// Deployments of [`DEPLOYMENT_REPLICAS`].
    Deployments,
    /// Batch Jobs of [`JOB_SIZE`] with the gang annotation.
    Jobs,
}

impl Workload {
    fn label(self) -> &'static str {
        match self {
            Self::Plain => "plain pods",
            Self::Deployments => "Deployments x100",
            Self::Jobs => "Jobs of 8 (gang)",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Self::Plain => "pods",
            Self::Deployments => "deploy",
            Self::Jobs => "jobs",
        }
    }

    /// Parses `plain`, `deployments`, `jobs`.
    ///
    /// # Errors
    /// On any other name.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        Ok(match s {
            "plain" | "pods" => Self::Plain,
            "deployments" | "deploy" => Self::Deployments,
            "jobs" => Self::Jobs,
            _ => bail!("unknown workload {s:?} (plain, deployments, jobs)"),
        })
    }
}

/// Who schedules a pipeline run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contender {
    /// kube-scheduler v1.20.2 on plain pods.
    KubeScheduler,
    /// The podgrouper and the scheduler as the chart runs them.
    Kai,
}

impl Contender {
    fn label(self) -> String {
        match self {
            Self::KubeScheduler => format!("kube-scheduler v1.20.2 (qps {})", super::KUBE_SCHEDULER_QPS),
            Self::Kai => "kai podgrouper + scheduler (chart defaults)".to_owned(),
        }
    }
}

/// One pipeline run's figures.
#[derive(Clone, Debug)]
pub struct Run {
    /// Who scheduled.
    pub contender: Contender,
    /// What.
    pub workload: Workload,
    /// Pods waiting throughout (never fitting), made before the clock started.
    pub backlog: usize,
    /// Pods bound.
    pub pods: usize,
    /// From the first create to the last pod seen.
    pub last_created: Duration,
    /// From the first create to the first bind seen.
    pub first_bind: Duration,
    /// From the first create to the last bind seen.
    pub last_bind: Duration,
    /// Requests of the components in the run's namespace (kai only).
    pub requests: Option<Requests>,
    /// Peak RSS (`VmHWM`) in KiB per process.
    pub peak_rss_kib: Vec<(String, u64)>,
    /// Who was busy from the first create to the last bind.
    pub load: Option<super::server_load::Load>,
}

impl Run {
    /// The workload, with the backlog it ran beside.
    #[must_use]
    pub fn workload_label(&self) -> String {
        match self.backlog {
            0 => self.workload.label().to_owned(),
            n => format!("{}, {n} waiting", self.workload.label()),
        }
    }

    /// Pods per second from the first create to the last bind.
    #[must_use]
    pub fn rate(&self) -> f64 {
        self.pods as f64 / self.last_bind.as_secs_f64().max(1e-3)
    }
}

/// Everything one `--mode pipeline` run measured.
#[derive(Clone, Debug, Default)]
pub struct Results {
    /// The raw reference runs (pre-created pods).
    pub raw: Vec<Measurement>,
    /// The pipeline runs.
    pub runs: Vec<Run>,
}

/// Runs raw, kube-scheduler on plain pods, then kai on each workload; returns the figures and the runs
/// that failed.
pub async fn run(options: &Options) -> (Results, Vec<String>) {
    let mut results = Results::default();
    let mut failures = Vec::new();
    let pre = PreOptions {
        pods: options.pods,
        nodes: options.nodes,
        raw_concurrency: options.raw_concurrency.clone(),
        scheduler: options.scheduler.clone(),
        kube_scheduler: None,
    };
    for c in &options.raw_concurrency {
        let contender = PreContender::Raw { concurrency: *c };
        eprintln!("bench: {} ...", contender.label());
        match super::measure(&pre, &contender, PreWorkload::Singles).await {
            Ok(m) => {
                eprintln!("bench:   {:.0} pods/s", m.rate());
                results.raw.push(m);
            }
            Err(err) => failures.push(format!("{}: {err:#}", contender.label())),
        }
    }
    let mut plan = Vec::new();
    if options.kube_scheduler.is_some() {
        plan.push((Contender::KubeScheduler, Workload::Plain));
    }
    plan.extend(options.workloads.iter().map(|w| (Contender::Kai, *w)));
    for (contender, workload) in plan {
        eprintln!("bench: {} on {} ...", contender.label(), workload.label());
        match measure(options, contender, workload).await {
            Ok(r) => {
                eprintln!(
                    "bench:   {} pods, last created {:.2} s, last bind {:.2} s, {:.0} pods/s",
                    r.pods,
                    r.last_created.as_secs_f64(),
                    r.last_bind.as_secs_f64(),
                    r.rate()
                );
                results.runs.push(r);
            }
            Err(err) => {
                let failure = format!("{} on {}: {err:#}", contender.label(), workload.label());
                eprintln!("bench:   failed: {failure}");
                failures.push(failure);
            }
        }
    }
    (results, failures)
}

async fn measure(options: &Options, contender: Contender, workload: Workload) -> anyhow::Result<Run> {
    let slug = match contender {
        Contender::KubeScheduler => "kube",
        Contender::Kai => "kai",
    };
    let t = TestEnv::start(&format!("pipe-{slug}-{}", workload.slug())).await?;
    let result = measure_in(&t, options, contender, workload).await;
    let (client, namespace) = (t.client().clone(), t.namespace().to_owned());
    if let Err(err) = t.finish().await {
        eprintln!("bench:   cleanup failed: {err:#}");
    }
    let namespaces: Api<Namespace> = Api::all(client);
    let deadline = Instant::now() + Duration::from_secs(180);
    while Instant::now() < deadline && namespaces.get_opt(&namespace).await.ok().flatten().is_some() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    result
}

/// The running contender's processes (killed when dropped).
enum Running {
    Kube(KubeScheduler),
    Kai(Vec<Component>),
}

impl Running {
    fn pids(&self) -> Vec<(String, u32)> {
        match self {
            Self::Kube(k) => vec![("kube-scheduler".to_owned(), k.pid())],
            Self::Kai(cs) => cs.iter().map(|c| (c.name().to_owned(), c.pid())).collect(),
        }
    }

    fn peak_rss(&self) -> Vec<(String, u64)> {
        self.pids()
            .into_iter()
            .filter_map(|(n, pid)| Some((n, super::peak_rss_kib(pid)?)))
            .collect()
    }
}

async fn measure_in(
    t: &TestEnv,
    options: &Options,
    contender: Contender,
    workload: Workload,
) -> anyhow::Result<Run> {
    t.create_nodes(
        FakeNodes::new("p")
            .count(options.nodes)
            .gpus(8)
            .label(keys::NODE_POOL, t.namespace()),
    )
    .await?;
    let scheduler_name = match contender {
        Contender::KubeScheduler => format!("kube-{}", t.namespace()),
        Contender::Kai => keys::SCHEDULER_NAME.to_owned(),
    };
    let log_dir = crate::paths::target_dir().join("e2e-logs").join(t.namespace());
    let running = match contender {
        Contender::KubeScheduler => {
            let binary = options
                .kube_scheduler
                .as_ref()
                .context("no kube-scheduler binary")?;
            let kubeconfig = PathBuf::from(t.kubeconfig_env());
            let k = KubeScheduler::start_binary(
                binary,
                &kubeconfig,
                &scheduler_name,
                super::KUBE_SCHEDULER_QPS,
                &log_dir,
            )?;
            k.wait_healthy(Duration::from_secs(60)).await?;
            // Healthy is not yet synced: give its informers a moment to list.
            tokio::time::sleep(KUBE_SCHEDULER_SETTLE).await;
            Running::Kube(k)
        }
        Contender::Kai => Running::Kai(start_chart_components(t, options, &log_dir).await?),
    };

    // Deployments are serving workloads: the podgrouper gives them the non-preemptible `inference`
    // priority, which may use only its queue's deserved quota, and the default queue's is 0. They go to a
    // queue of the run with unlimited CPU and memory, as an operator would set one up for them.
    let run_queue = if workload == Workload::Deployments {
        let name = crate::workloads::queue_name(t, "serving");
        crate::workloads::apply(t, &[crate::workloads::queue(&name, None, (0, -1, 1))]).await?;
        Some((crate::workloads::QueuesCleanup::new(t, &[&name])?, name))
    } else {
        None
    };
    let queue = run_queue.as_ref().map(|(_, name)| name.as_str());
    if options.backlog > 0 {
        make_backlog(t, options.backlog, &scheduler_name).await?;
        if matches!(running, Running::Kai(_)) {
            // What the backlog's first report deferred behind other writes lands before the clock.
            tokio::time::sleep(WRITE_DRAIN).await;
        }
    }
    let objects = workload_objects(t, workload, options.pods, &scheduler_name, queue);
    let tracker = PodTracker::start(t, options.pods).await?;
    let mut processes = super::server_load::control_plane();
    processes.extend(running.pids());
    let start = super::server_load::probe(t.client(), &processes).await;
    let audit_since = SystemTime::now();
    let started = Instant::now();
    create_objects(t, workload, objects).await?;
    let deadline = Duration::from_secs(180).max(Duration::from_millis(100) * u32::try_from(options.pods)?);
    let seen = tracker.wait(deadline).await;
    let end = super::server_load::probe(t.client(), &processes).await;
    if matches!(running, Running::Kai(_)) && seen.is_ok() {
        // Statuses, annotations and events wait behind binds (at most 10 s): let them land, so the
        // writes counted are all the run costs, not only those made before the last bind.
        tokio::time::sleep(WRITE_DRAIN).await;
    }
    let peak_rss_kib = running.peak_rss();
    drop(running);
    let seen = seen.with_context(|| format!("{} on {}", contender.label(), workload.label()))?;
    let requests = match contender {
        Contender::Kai => {
            // The audit log is written as requests complete; give the last lines a moment.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let dir = crate::DevPaths::from_env()
                .audit_log()
                .parent()
                .map(Path::to_path_buf)
                .context("audit log directory")?;
            Some(audit::count(&dir, t.namespace(), audit_since)?)
        }
        Contender::KubeScheduler => None,
    };
    let since = |i: Instant| i.saturating_duration_since(started);
    Ok(Run {
        contender,
        workload,
        backlog: options.backlog,
        pods: seen.bound.len(),
        last_created: since(seen.created.iter().copied().max().context("no pod")?),
        first_bind: since(seen.bound.iter().copied().min().context("no bind")?),
        last_bind: since(seen.bound.iter().copied().max().context("no bind")?),
        requests,
        peak_rss_kib,
        load: Some(super::server_load::Load::between(&start, &end)),
    })
}

/// Starts the podgrouper and the scheduler with the arguments and files the chart renders (release
/// binaries, the chart's ServiceAccounts), confined to the run: the scheduler to the run's node pool
/// (`scheduler.nodePool`), the podgrouper to its namespace (`--namespace`); no leader election (a Lease
/// would outlive the run). Returns once both answer `/readyz`.
async fn start_chart_components(
    t: &TestEnv,
    options: &Options,
    log_dir: &Path,
) -> anyhow::Result<Vec<Component>> {
    let values = [
        ("global.logFormat", "plain"),
        ("scheduler.nodePool", t.namespace()),
    ];
    let specs = tokio::task::spawn_blocking({
        let values: Vec<(String, String)> = values
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move || {
            let values: Vec<(&str, &str)> = values.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            crate::chart::rendered_components(&values)
        }
    })
    .await??;
    let mut running = Vec::new();
    for spec in specs {
        let port = free_port()?;
        let address = format!("127.0.0.1:{port}");
        let mut overrides = vec![("admin-address", address.as_str()), ("leader-elect", "false")];
        let binary = match spec.component.as_str() {
            "podgrouper" => {
                overrides.push(("namespace", t.namespace()));
                &options.podgrouper
            }
            "scheduler" => &options.scheduler,
            other => bail!("the chart renders an unknown component {other}"),
        };
        let args = spec.local_args(&log_dir.join(&spec.component), &overrides)?;
        let kubeconfig = t.component_kubeconfig(&spec.binary)?;
        let component =
            Component::start_binary(&spec.component, binary, &args, kubeconfig.as_os_str(), log_dir)?;
        let deadline = Instant::now() + Duration::from_secs(90);
        while http_status(port, "/readyz") != Some(200) {
            if Instant::now() > deadline {
                bail!(
                    "{} not ready after 90 s:\n{}",
                    spec.component,
                    component.log_tail(20)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        running.push(component);
    }
    Ok(running)
}

/// The pod spec every workload uses: this run's scheduler, the run's nodes, 100m CPU and 128Mi.
fn pod_spec(t: &TestEnv, scheduler: &str, restart: &str) -> Value {
    let (owner_key, owner) = t.node_label();
    json!({
        "schedulerName": scheduler,
        "restartPolicy": restart,
        "nodeSelector": { owner_key: owner },
        "containers": [{ "name": "c", "image": "example.com/c:1",
                         "resources": { "requests": { "cpu": "100m", "memory": "128Mi" } } }],
    })
}

/// `count` bare pods that never fit (each asks for [`BACKLOG_CPU`]), each named with [`audit::BACKLOG_PREFIX`] and a number.
fn backlog_objects(t: &TestEnv, count: usize, scheduler: &str) -> Vec<Value> {
    let labels = json!({ keys::NODE_POOL: t.namespace() });
    let mut spec = pod_spec(t, scheduler, "Always");
    spec["containers"][0]["resources"]["requests"]["cpu"] = json!(BACKLOG_CPU);
    (0..count)
        .map(|i| {
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": { "name": format!("{}{i:05}", audit::BACKLOG_PREFIX),
                              "namespace": t.namespace(), "labels": labels },
                "spec": spec,
            })
        })
        .collect()
}

/// Makes the backlog and waits until its scheduler has marked every one of its pods unschedulable
/// (`PodScheduled` false), which both kube-scheduler and kai write.
async fn make_backlog(t: &TestEnv, count: usize, scheduler: &str) -> anyhow::Result<()> {
    super::create_all::<Pod>(t, backlog_objects(t, count, scheduler))
        .await
        .context("creating the backlog")?;
    let pods: Api<Pod> = t.api();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let marked = pods
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|p| is_backlog(p) && unschedulable(p))
            .count();
        if marked >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{marked} of {count} backlog pods marked unschedulable after 300 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Whether a pod is one of the backlog's.
fn is_backlog(pod: &Pod) -> bool {
    pod.metadata.name.as_deref().is_some_and(audit::is_backlog)
}

/// Whether a pod's `PodScheduled` condition is false.
fn unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "PodScheduled" && c.status == "False")
        })
}

/// The objects users would write for `pods` pods of `workload`.
fn workload_objects(
    t: &TestEnv,
    workload: Workload,
    pods: usize,
    scheduler: &str,
    queue: Option<&str>,
) -> Vec<Value> {
    let mut labels = json!({ keys::NODE_POOL: t.namespace() });
    if let Some(queue) = queue {
        labels[keys::QUEUE_LABEL] = json!(queue);
    }
    match workload {
        Workload::Plain => (0..pods)
            .map(|i| {
                json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": { "name": format!("p-{i:06}"), "namespace": t.namespace(), "labels": labels },
                    "spec": pod_spec(t, scheduler, "Always"),
                })
            })
            .collect(),
        Workload::Deployments => (0..pods.div_ceil(DEPLOYMENT_REPLICAS))
            .map(|i| {
                let replicas = DEPLOYMENT_REPLICAS.min(pods - i * DEPLOYMENT_REPLICAS);
                let name = format!("d-{i:04}");
                let mut pod_labels = labels.clone();
                pod_labels["app"] = json!(name);
                json!({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": { "name": name, "namespace": t.namespace() },
                    "spec": {
                        "replicas": replicas,
                        "selector": { "matchLabels": { "app": name } },
                        "template": { "metadata": { "labels": pod_labels },
                                      "spec": pod_spec(t, scheduler, "Always") },
                    },
                })
            })
            .collect(),
        Workload::Jobs => (0..pods / JOB_SIZE)
            .map(|i| {
                json!({
                    "apiVersion": "batch/v1", "kind": "Job",
                    "metadata": { "name": format!("j-{i:05}"), "namespace": t.namespace(),
                                  "annotations": { keys::GANG_SCHEDULING: "true" } },
                    "spec": {
                        "parallelism": JOB_SIZE, "completions": JOB_SIZE, "backoffLimit": 0,
                        "template": { "metadata": { "labels": labels },
                                      "spec": pod_spec(t, scheduler, "Never") },
                    },
                })
            })
            .collect(),
    }
}

async fn create_objects(t: &TestEnv, workload: Workload, objects: Vec<Value>) -> anyhow::Result<()> {
    match workload {
        Workload::Plain => super::create_all::<Pod>(t, objects).await,
        Workload::Deployments => super::create_all::<Deployment>(t, objects).await,
        Workload::Jobs => super::create_all::<Job>(t, objects).await,
    }
    .context("creating the workload")
}

/// When each pod was first seen and first seen bound.
struct Seen {
    created: Vec<Instant>,
    bound: Vec<Instant>,
}

/// Watches the namespace's pods: when each appears and when it is first seen bound.
struct PodTracker {
    task: tokio::task::JoinHandle<anyhow::Result<Seen>>,
}

impl PodTracker {
    async fn start(t: &TestEnv, expected: usize) -> anyhow::Result<Self> {
        let api: Api<Pod> = t.api();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut created: HashMap<String, Instant> = HashMap::new();
            let mut bound: HashMap<String, Instant> = HashMap::new();
            let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = events.try_next().await? {
                let pod = match event {
                    // The backlog never binds and was made before the clock started.
                    watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) if is_backlog(&pod) => {
                        continue;
                    }
                    watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => pod,
                    watcher::Event::InitDone => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    watcher::Event::Init | watcher::Event::Delete(_) => continue,
                };
                let Some(name) = pod.metadata.name.clone() else {
                    continue;
                };
                let now = Instant::now();
                created.entry(name.clone()).or_insert(now);
                if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                    bound.entry(name).or_insert(now);
                    if bound.len() >= expected {
                        return Ok(Seen {
                            created: created.into_values().collect(),
                            bound: bound.into_values().collect(),
                        });
                    }
                }
            }
            bail!("the pod watch ended with {} of {expected} bound", bound.len())
        });
        tokio::time::timeout(Duration::from_secs(60), ready_rx)
            .await
            .context("the pod watch did not list within 60 s")?
            .context("the pod watch failed before listing")?;
        Ok(Self { task })
    }

    async fn wait(self, deadline: Duration) -> anyhow::Result<Seen> {
        let abort = self.task.abort_handle();
        match tokio::time::timeout(deadline, self.task).await {
            Ok(joined) => joined?,
            Err(_) => {
                abort.abort();
                bail!("not every pod was bound within {deadline:?}")
            }
        }
    }
}

/// The results as Markdown: the runs with ratios to kube-scheduler (time) and to raw (rate), then the
/// API writes per bound pod of each kai run.
#[must_use]
pub fn table(results: &Results) -> String {
    let raw = results.raw.iter().max_by(|a, b| a.rate().total_cmp(&b.rate()));
    let kube = results
        .runs
        .iter()
        .find(|r| r.contender == Contender::KubeScheduler && r.workload == Workload::Plain);
    // Each run is compared with kube-scheduler beside the same backlog (one backlog per invocation).
    let mut out = String::new();
    out.push_str(
        "| contender | workload | pods | last pod created s | first bind s | last bind s | pods/s | \
         kube-scheduler's time / this time | pods/s vs raw | peak RSS MiB |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n",
    );
    for m in &results.raw {
        out.push_str(&format!(
            "| {} (pre-created) | plain pods | {} | - | {:.2} | {:.2} | {:.0} | - | {:.0}% | - |\n",
            m.contender.label(),
            m.pods,
            m.first_bind.as_secs_f64(),
            m.last_bind.as_secs_f64(),
            m.rate(),
            raw.map_or(f64::NAN, |r| m.rate() / r.rate() * 100.0),
        ));
    }
    for r in &results.runs {
        let vs_kube = kube.map_or_else(
            || "-".to_owned(),
            |k| {
                format!(
                    "{:.2}",
                    k.last_bind.as_secs_f64() / r.last_bind.as_secs_f64().max(1e-3)
                )
            },
        );
        let rss: Vec<String> = r
            .peak_rss_kib
            .iter()
            .map(|(n, k)| format!("{n} {:.0}", *k as f64 / 1024.0))
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.0} | {} | {} | {} |\n",
            r.contender.label(),
            r.workload_label(),
            r.pods,
            r.last_created.as_secs_f64(),
            r.first_bind.as_secs_f64(),
            r.last_bind.as_secs_f64(),
            r.rate(),
            vs_kube,
            raw.map_or_else(
                || "-".to_owned(),
                |m| format!("{:.0}%", r.rate() / m.rate() * 100.0)
            ),
            rss.join(", "),
        ));
    }
    let loads: Vec<(String, &super::server_load::Load)> = results
        .raw
        .iter()
        .filter_map(|m| Some((format!("{} (pre-created)", m.contender.label()), m.load.as_ref()?)))
        .chain(results.runs.iter().filter_map(|r| {
            Some((
                format!("{} on {}", r.contender.label(), r.workload_label()),
                r.load.as_ref()?,
            ))
        }))
        .collect();
    if !loads.is_empty() {
        let cores = std::thread::available_parallelism().map_or(0, usize::from);
        out.push_str(&super::server_load::table(&loads, cores));
    }
    let with_requests: Vec<&Run> = results.runs.iter().filter(|r| r.requests.is_some()).collect();
    if !with_requests.is_empty() {
        let mut kinds: Vec<String> = with_requests
            .iter()
            .flat_map(|r| r.requests.iter().flat_map(|q| q.writes.keys().cloned()))
            .collect();
        kinds.sort();
        kinds.dedup();
        out.push_str("\nAPI writes per bound pod (audit log, the run's namespace):\n\n| workload |");
        for k in &kinds {
            out.push_str(&format!(" {k} |"));
        }
        out.push_str(" all writes | podgrouper reads |\n| --- |");
        for _ in 0..kinds.len() + 2 {
            out.push_str(" ---: |");
        }
        out.push('\n');
        for r in with_requests {
            let Some(q) = &r.requests else { continue };
            let per = |n: usize| n as f64 / r.pods.max(1) as f64;
            out.push_str(&format!("| {} |", r.workload_label()));
            for k in &kinds {
                out.push_str(&format!(" {:.3} |", per(q.writes.get(k).copied().unwrap_or(0))));
            }
            let reads = q
                .reads
                .iter()
                .filter(|(who, _)| who.contains("podgrouper"))
                .map(|(_, n)| *n)
                .sum();
            out.push_str(&format!(" {:.3} | {:.3} |\n", per(q.total_writes()), per(reads)));
        }
    }
    out
}
