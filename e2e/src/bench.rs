//! End-to-end binding throughput against a real API server (`cargo xtask bench`).
//!
//! Three contenders bind the same pre-created pods to the same kind of fake nodes, each in a fresh test
//! namespace of its own (so runs never see each other's pods):
//! - **raw**: this process binds every pod through `pods/binding` itself, with the scheduler's default
//!   client rate limit (1000 QPS, burst 2000) and a few concurrencies; the best is the reference rate;
//! - **kube-scheduler** v1.20.2 (the local control plane's build) with client QPS and burst 5000;
//! - **kai-scheduler**: this project's release binary with its defaults, serving the namespace's pool.
//!
//! Workload A is single-pod groups, workload B gangs of 8 (kube-scheduler has no gangs, so it runs only
//! A). Pods ask for CPU and memory only: 3,000 whole-GPU pods would not fit on 100 nodes x 8 GPUs.
//!
//! The clock starts when the contender starts (process start included) and a pod counts as bound when
//! this process's watch sees `spec.nodeName` set. Reported: time to the last bind, the rate between the
//! first and last bind, both as ratios to the raw rate, and the scheduler's peak RSS (`VmHWM`).
//!
//! Must not: run in the project's tests (it is slow and its figures depend on the machine).
//!
//! [`pipeline`] is the other mode: no PodGroups made in advance, the podgrouper and the scheduler as the
//! chart runs them, the API writes per bound pod counted from the audit log ([`audit`]). [`memory`] runs the
//! scheduler alone on a generated cluster of thousands of nodes served by a fake API server, for its peak
//! memory.

pub mod audit;
pub mod memory;
pub mod pipeline;
pub mod server_load;
pub mod write_cost;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use api::keys;
use futures::{StreamExt as _, TryStreamExt as _, stream};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use crate::component::Component;
use crate::kube_scheduler::KubeScheduler;
use crate::{FakeNodes, TestEnv};

/// The scheduler's default client rate limit (`crates/scheduler/src/main.rs`), which the raw binder
/// keeps to so the reference is what the API server allows such a client.
pub const SCHEDULER_QPS: f64 = 1000.0;
/// The scheduler's default client burst.
pub const SCHEDULER_BURST: u32 = 2000;
/// kube-scheduler's client QPS and burst in this benchmark.
pub const KUBE_SCHEDULER_QPS: u32 = 5000;

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Pods per workload.
    pub pods: usize,
    /// Fake nodes per run (8 GPUs, 64 CPUs, 110 pod slots each).
    pub nodes: usize,
    /// Concurrencies tried for the raw binder (the best one is the reference).
    pub raw_concurrency: Vec<usize>,
    /// The kai-scheduler binary (a release build).
    pub scheduler: PathBuf,
    /// The kube-scheduler binary; `None` skips it.
    pub kube_scheduler: Option<PathBuf>,
}

/// Pods bound as single-pod groups or in gangs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// A: one pod per PodGroup.
    Singles,
    /// B: gangs of 8 (minMember 8).
    Gangs8,
}

impl Workload {
    /// Pods per group.
    #[must_use]
    pub fn group_size(self) -> usize {
        match self {
            Self::Singles => 1,
            Self::Gangs8 => 8,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Singles => "A (1-pod groups)",
            Self::Gangs8 => "B (gangs of 8)",
        }
    }
}

/// Who binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Contender {
    /// This process through `pods/binding`, with this many binds in flight.
    Raw {
        /// Binds in flight.
        concurrency: usize,
    },
    /// kube-scheduler v1.20.2.
    KubeScheduler,
    /// This project's scheduler.
    KaiScheduler,
}

impl Contender {
    fn label(&self) -> String {
        match self {
            Self::Raw { concurrency } => format!("raw pods/binding (x{concurrency})"),
            Self::KubeScheduler => format!("kube-scheduler v1.20.2 (qps {KUBE_SCHEDULER_QPS})"),
            Self::KaiScheduler => "kai-scheduler (release, defaults)".to_owned(),
        }
    }

    fn slug(&self) -> &'static str {
        match self {
            Self::Raw { .. } => "raw",
            Self::KubeScheduler => "kube",
            Self::KaiScheduler => "kai",
        }
    }
}

/// One run's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// Who bound.
    pub contender: Contender,
    /// What.
    pub workload: Workload,
    /// Pods bound.
    pub pods: usize,
    /// From the contender's start to the first bind seen.
    pub first_bind: Duration,
    /// From the contender's start to the last bind seen.
    pub last_bind: Duration,
    /// Peak resident memory of the contender's process in KiB (`VmHWM`), when it is a process.
    pub peak_rss_kib: Option<u64>,
    /// Who was busy from the contender's start to the last bind.
    pub load: Option<server_load::Load>,
}

impl Measurement {
    /// Binds per second between the first and the last bind.
    #[must_use]
    pub fn rate(&self) -> f64 {
        let span = self.last_bind.saturating_sub(self.first_bind).as_secs_f64();
        if span <= 0.0 {
            return self.pods as f64 / self.last_bind.as_secs_f64().max(1e-3);
        }
        // The first bind opens the span, so it does not count in the rate.
        self.pods.saturating_sub(1) as f64 / span
    }

    /// Pods per second counted from the contender's start.
    #[must_use]
    pub fn overall_rate(&self) -> f64 {
        self.pods as f64 / self.last_bind.as_secs_f64().max(1e-3)
    }
}

/// Runs every contender on both workloads, raw first, and returns the measurements in run order and
/// the runs that failed (a contender that did not bind every pod in time, a rejected object), each
/// named with its error, so one failure does not lose the other figures.
pub async fn run(options: &Options) -> (Vec<Measurement>, Vec<String>) {
    let mut plan: Vec<(Contender, Workload)> = options
        .raw_concurrency
        .iter()
        .map(|c| (Contender::Raw { concurrency: *c }, Workload::Singles))
        .collect();
    if options.kube_scheduler.is_some() {
        plan.push((Contender::KubeScheduler, Workload::Singles));
    }
    plan.push((Contender::KaiScheduler, Workload::Singles));
    plan.push((Contender::KaiScheduler, Workload::Gangs8));
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for (contender, workload) in plan {
        eprintln!("bench: {} on {} ...", contender.label(), workload.label());
        let m = match measure(options, &contender, workload).await {
            Ok(m) => m,
            Err(err) => {
                let failure = format!("{} on {}: {err:#}", contender.label(), workload.label());
                eprintln!("bench:   failed: {failure}");
                failures.push(failure);
                continue;
            }
        };
        eprintln!(
            "bench:   {} pods, last bind after {:.2} s, {:.0} pods/s{}",
            m.pods,
            m.last_bind.as_secs_f64(),
            m.rate(),
            m.peak_rss_kib
                .map(|k| format!(", peak RSS {:.1} MiB", k as f64 / 1024.0))
                .unwrap_or_default()
        );
        results.push(m);
    }
    (results, failures)
}

/// One contender on one workload in a fresh namespace, removed afterwards.
async fn measure(
    options: &Options,
    contender: &Contender,
    workload: Workload,
) -> anyhow::Result<Measurement> {
    let t = TestEnv::start(&format!("bench-{}-{}", contender.slug(), workload.group_size())).await?;
    let result = measure_in(&t, options, contender, workload).await;
    let (client, namespace) = (t.client().clone(), t.namespace().to_owned());
    // A busy shared server may fail the cleanup; the figures stand (`cargo xtask e2e-clean` removes
    // what is left once no other test runs).
    if let Err(err) = t.finish().await {
        eprintln!("bench:   cleanup failed: {err:#}");
    }
    // The namespace controller deletes the rest (PodGroups, events) in the background: the next
    // contender starts once it is done, on an API server no busier than this one found it.
    let namespaces: Api<Namespace> = Api::all(client);
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline && namespaces.get_opt(&namespace).await.ok().flatten().is_some() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    result
}

async fn measure_in(
    t: &TestEnv,
    options: &Options,
    contender: &Contender,
    workload: Workload,
) -> anyhow::Result<Measurement> {
    let nodes = t
        .create_nodes(
            FakeNodes::new("b")
                .count(options.nodes)
                .gpus(8)
                .label(keys::NODE_POOL, t.namespace()),
        )
        .await?;
    let scheduler_name = match contender {
        Contender::Raw { .. } => format!("nobody-{}", t.namespace()),
        Contender::KubeScheduler => format!("kube-{}", t.namespace()),
        Contender::KaiScheduler => keys::SCHEDULER_NAME.to_owned(),
    };
    let pods = pod_names(options.pods);
    if *contender == Contender::KaiScheduler {
        let groups: Vec<Value> = pods
            .chunks(workload.group_size())
            .map(|members| pod_group(t, &group_of(&members[0]), members.len()))
            .collect();
        create_all::<api::PodGroup>(t, groups)
            .await
            .context("creating PodGroups")?;
    }
    let objects = pods
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let group = group_of(&pods[i - i % workload.group_size()]);
            pod(t, name, &scheduler_name, &group)
        })
        .collect();
    create_all::<Pod>(t, objects).await.context("creating pods")?;

    let tracker = BindTracker::start(t, pods.len()).await?;
    let started = Instant::now();
    let deadline = Duration::from_secs(120).max(Duration::from_millis(100) * u32::try_from(pods.len())?);
    let mut process: Option<Component> = None;
    let mut kube_scheduler: Option<KubeScheduler> = None;
    match contender {
        Contender::Raw { concurrency } => {
            let binder = raw_binder().await?;
            let namespace = t.namespace().to_owned();
            let work: Vec<(String, String)> = pods
                .iter()
                .enumerate()
                .map(|(i, p)| (p.clone(), nodes[i % nodes.len()].clone()))
                .collect();
            let concurrency = *concurrency;
            tokio::spawn(async move { bind_all(binder, &namespace, work, concurrency).await });
        }
        Contender::KubeScheduler => {
            let binary = options
                .kube_scheduler
                .as_ref()
                .context("no kube-scheduler binary")?;
            let kubeconfig = PathBuf::from(t.kubeconfig_env());
            kube_scheduler = Some(KubeScheduler::start_binary(
                binary,
                &kubeconfig,
                &scheduler_name,
                KUBE_SCHEDULER_QPS,
                &log_dir(t),
            )?);
        }
        Contender::KaiScheduler => {
            // Alone on its pool: no Lease (the binary elects by default).
            let args = [
                "--node-pool",
                t.namespace(),
                "--admin-address",
                "127.0.0.1:0",
                "--log-level",
                "info",
                "--leader-elect=false",
            ];
            // The chart's ServiceAccount, as every e2e run of the scheduler.
            let kubeconfig = t.component_kubeconfig("kai-scheduler")?;
            process = Some(Component::start_binary(
                "kai-scheduler",
                &options.scheduler,
                args,
                kubeconfig.as_os_str(),
                &log_dir(t),
            )?);
        }
    }
    let pid = process
        .as_ref()
        .map(Component::pid)
        .or_else(|| kube_scheduler.as_ref().map(KubeScheduler::pid));
    let mut processes = server_load::control_plane();
    processes.push(match pid {
        Some(pid) => (contender.slug().to_owned(), pid),
        None => ("bench (raw binder)".to_owned(), std::process::id()),
    });
    let start = server_load::probe(t.client(), &processes).await;
    let binds = tracker.wait(deadline).await;
    let end = server_load::probe(t.client(), &processes).await;
    let peak_rss_kib = pid.and_then(peak_rss_kib);
    drop(process);
    drop(kube_scheduler);
    let binds = binds.with_context(|| format!("{} on {}", contender.label(), workload.label()))?;
    let first = binds.iter().min().copied().context("no bind")?;
    let last = binds.iter().max().copied().context("no bind")?;
    Ok(Measurement {
        contender: contender.clone(),
        workload,
        pods: binds.len(),
        first_bind: first.saturating_duration_since(started),
        last_bind: last.saturating_duration_since(started),
        peak_rss_kib,
        load: Some(server_load::Load::between(&start, &end)),
    })
}

fn log_dir(t: &TestEnv) -> PathBuf {
    crate::paths::target_dir().join("e2e-logs").join(t.namespace())
}

fn pod_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("p-{i:06}")).collect()
}

/// The PodGroup of the group whose first pod is `first`.
fn group_of(first: &str) -> String {
    format!("g-{first}")
}

fn pod_group(t: &TestEnv, name: &str, min_member: usize) -> Value {
    json!({
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "PodGroup",
        "metadata": { "name": name, "namespace": t.namespace(),
                      "labels": { keys::NODE_POOL: t.namespace() } },
        "spec": { "minMember": min_member, "queue": keys::DEFAULT_QUEUE },
    })
}

/// A pod of `scheduler`, limited to the run's nodes by their owner label (kube-scheduler sees every node
/// of the shared cluster) and joined to `group` (read only by kai-scheduler).
fn pod(t: &TestEnv, name: &str, scheduler: &str, group: &str) -> Value {
    let (owner_key, owner) = t.node_label();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": t.namespace(),
                      "labels": { keys::NODE_POOL: t.namespace() },
                      "annotations": { keys::POD_GROUP_NAME: group } },
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": { owner_key: owner },
            "containers": [{ "name": "c", "image": "example.com/c:1",
                             "resources": { "requests": { "cpu": "100m", "memory": "128Mi" } } }],
        },
    })
}

/// Creates namespaced objects of one kind (pods or PodGroups) with a few requests in flight.
async fn create_all<K>(t: &TestEnv, objects: Vec<Value>) -> anyhow::Result<()>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let api: Api<K> = t.api();
    stream::iter(objects)
        .map(|o| {
            let api = &api;
            async move {
                let object: K = serde_json::from_value(o)?;
                api.create(&PostParams::default(), &object).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
}

/// A client like the scheduler's: same user-agent shape and rate limit.
async fn raw_binder() -> anyhow::Result<kube::Client> {
    let target = crate::Target::resolve().await?;
    Ok(runtime::client::from_config(
        target.config,
        "kai-bench-binder/0",
        runtime::client::RateLimit {
            qps: SCHEDULER_QPS,
            burst: SCHEDULER_BURST,
        },
    )?)
}

/// Binds every (pod, node) with `concurrency` binds in flight; failures are logged (the tracker then
/// times out naming the shortfall).
async fn bind_all(client: kube::Client, namespace: &str, work: Vec<(String, String)>, concurrency: usize) {
    let api: Api<Pod> = Api::namespaced(client, namespace);
    stream::iter(work)
        .for_each_concurrent(concurrency, |(pod, node)| {
            let api = api.clone();
            async move {
                let binding = json!({
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": { "name": pod, "namespace": namespace },
                    "target": { "apiVersion": "v1", "kind": "Node", "name": node },
                });
                // An overloaded server answers 5xx or times out: try again (a 409 means the earlier
                // attempt went through after all).
                for attempt in 1..=5 {
                    let bound: Result<Status, _> = api
                        .create_subresource("binding", &pod, &PostParams::default(), &binding)
                        .await;
                    match bound {
                        Ok(_) => break,
                        Err(kube::Error::Api(s)) if s.code == 409 => break,
                        Err(err) => {
                            tracing::warn!(%pod, %err, attempt, "bind failed");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
            }
        })
        .await;
}

/// `VmHWM` of a live process in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    parse_vm_hwm(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// The `VmHWM:` line of a `/proc/<pid>/status` text, in KiB.
#[must_use]
pub fn parse_vm_hwm(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Watches the namespace's pods and notes when each is first seen bound.
struct BindTracker {
    task: tokio::task::JoinHandle<anyhow::Result<Vec<Instant>>>,
}

impl BindTracker {
    /// Starts the watch and returns once its initial list is done, so no bind goes unseen.
    async fn start(t: &TestEnv, expected: usize) -> anyhow::Result<Self> {
        let api: Api<Pod> = t.api();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut bound: HashMap<String, Instant> = HashMap::new();
            let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = events.try_next().await? {
                let pod = match event {
                    watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => pod,
                    watcher::Event::InitDone => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    watcher::Event::Init | watcher::Event::Delete(_) => continue,
                };
                let node = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
                if let (Some(_), Some(name)) = (node, pod.metadata.name) {
                    bound.entry(name).or_insert_with(Instant::now);
                    if bound.len() >= expected {
                        return Ok(bound.into_values().collect());
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

    /// The bind instants once all expected pods are bound.
    async fn wait(self, deadline: Duration) -> anyhow::Result<Vec<Instant>> {
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

/// The results as a Markdown table: absolute figures and ratios to the best raw run.
#[must_use]
pub fn table(results: &[Measurement]) -> String {
    let raw = results
        .iter()
        .filter(|m| matches!(m.contender, Contender::Raw { .. }))
        .max_by(|a, b| a.rate().total_cmp(&b.rate()));
    let mut out = String::new();
    out.push_str(
        "| contender | workload | pods | first bind s | last bind s | pods/s | pods/s vs raw | time to last bind vs raw | peak RSS MiB |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for m in results {
        let (rate_ratio, time_ratio) = raw.map_or((f64::NAN, f64::NAN), |r| {
            (
                m.rate() / r.rate(),
                r.last_bind.as_secs_f64() / m.last_bind.as_secs_f64().max(1e-3),
            )
        });
        out.push_str(&format!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.0} | {:.0}% | {:.0}% | {} |\n",
            m.contender.label(),
            m.workload.label(),
            m.pods,
            m.first_bind.as_secs_f64(),
            m.last_bind.as_secs_f64(),
            m.rate(),
            rate_ratio * 100.0,
            time_ratio * 100.0,
            m.peak_rss_kib
                .map_or_else(|| "-".to_owned(), |k| format!("{:.1}", k as f64 / 1024.0)),
        ));
    }
    let loads: Vec<(String, &server_load::Load)> = results
        .iter()
        .filter_map(|m| {
            Some((
                format!("{} on {}", m.contender.label(), m.workload.label()),
                m.load.as_ref()?,
            ))
        })
        .collect();
    if !loads.is_empty() {
        let cores = std::thread::available_parallelism().map_or(0, usize::from);
        out.push_str(&server_load::table(&loads, cores));
    }
    let kube = results
        .iter()
        .find(|m| m.contender == Contender::KubeScheduler && m.workload == Workload::Singles);
    let kai = results
        .iter()
        .find(|m| m.contender == Contender::KaiScheduler && m.workload == Workload::Singles);
    if let (Some(kube), Some(kai)) = (kube, kai) {
        out.push_str(&format!(
            "\nkai-scheduler vs kube-scheduler on A: {:.2}x the rate, {:.2}x faster to the last bind\n",
            kai.rate() / kube.rate(),
            kube.last_bind.as_secs_f64() / kai.last_bind.as_secs_f64().max(1e-3)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(contender: Contender, workload: Workload, first_ms: u64, last_ms: u64) -> Measurement {
        Measurement {
            contender,
            workload,
            pods: 1001,
            first_bind: Duration::from_millis(first_ms),
            last_bind: Duration::from_millis(last_ms),
            peak_rss_kib: Some(20 * 1024),
            load: None,
        }
    }

    #[test]
    fn rate_counts_binds_after_the_first() {
        let x = m(Contender::KaiScheduler, Workload::Singles, 500, 2500);
        assert!((x.rate() - 500.0).abs() < 1e-9, "{}", x.rate());
        assert!((x.overall_rate() - 400.4).abs() < 1e-9);
    }

    #[test]
    fn table_compares_with_the_fastest_raw_run() {
        let results = [
            m(Contender::Raw { concurrency: 16 }, Workload::Singles, 0, 4000),
            m(Contender::Raw { concurrency: 64 }, Workload::Singles, 0, 2000),
            m(Contender::KubeScheduler, Workload::Singles, 1000, 9000),
            m(Contender::KaiScheduler, Workload::Singles, 500, 2500),
        ];
        let table = table(&results);
        // Raw x64 is the reference: 500 binds/s; kai is as fast between binds, 80% to the last one.
        assert!(
            table.contains("| 0.50 | 2.50 | 500 | 100% | 80% | 20.0 |"),
            "{table}"
        );
        assert!(table.contains("| 4.00 | 250 | 50% | 50% |"), "{table}");
        assert!(table.contains("4.00x the rate, 3.60x faster"), "{table}");
    }

    #[test]
    fn vm_hwm_is_read_in_kib() {
        let status = "Name:\tx\nVmPeak:\t  9999 kB\nVmHWM:\t   12345 kB\nVmRSS:\t 100 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(12345));
        assert_eq!(parse_vm_hwm("Name: x\n"), None);
    }
}
