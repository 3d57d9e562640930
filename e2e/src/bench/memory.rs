//! Peak memory of the scheduler binary at scale (`cargo xtask bench --mode memory`): the release binary,
//! unchanged, reads a generated cluster through its real watch path from a fake API server
//! ([`crate::fakeapi`]), schedules it, and its resident memory is read from `/proc/<pid>/status` along
//! the way.
//!
//! The cluster is the decision core's memory benchmark written as API objects: N nodes x 8 GPUs (64 CPUs,
//! 512 GiB), a queue tree of 10 departments x 10 leaf queues (GPU quotas summing to the cluster), and
//! 10 x N pending one-GPU pods in gangs of 8 (one PodGroup each, a Job's pods as the API server stores
//! them: owner reference, managed fields, a token volume, default tolerations) spread over the leaves with
//! mixed priorities. Steps:
//! 1. the scheduler starts while the fake server reports its Lease held by another replica: it lists and
//!    watches everything into its model and schedules nothing (a warm follower);
//! 2. the Lease is released: it leads, runs its cycles and binds; each bind comes back as two watch
//!    events (bound, then started as a kubelet would);
//! 3. the run ends once no write has arrived for [`QUIET`] (statuses, conditions and events deferred
//!    behind binds included).
//!
//! Must not: run in the project's tests (minutes, and its figures depend on the machine).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use api::keys;
use serde_json::{Value, json};

use crate::component::{Component, free_port, http_status};
use crate::fakeapi::{self, FakeApi};

/// GPUs per node.
pub const GPUS_PER_NODE: usize = 8;
/// Pods per gang.
pub const GANG: usize = 8;
/// The binds are over once none has arrived for this long.
pub const BINDS_DONE: Duration = Duration::from_secs(10);
/// The run ends once no write has arrived for this long.
pub const QUIET: Duration = Duration::from_secs(15);
const DEPARTMENTS: usize = 10;
const LEAVES_PER_DEPARTMENT: usize = 10;
const ZONES: usize = 10;
/// Priority classes of the gangs, picked per gang (as the core's synthetic cluster mixes them).
const CLASSES: [&str; 5] = ["train", "train", "train", "build-preemptible", "build"];
/// The Lease the scheduler campaigns for (its defaults: `--lease-namespace`, the scheduler name).
const LEASE: (&str, &str) = (keys::SYSTEM_NAMESPACE, keys::SCHEDULER_NAME);

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Nodes (8 GPUs each).
    pub nodes: usize,
    /// Pending pods (rounded down to whole gangs of 8).
    pub pods: usize,
    /// The kai-scheduler binary (a release build).
    pub scheduler: PathBuf,
    /// Longest the whole run may take.
    pub timeout: Duration,
}

/// Memory at one step of the run.
#[derive(Clone, Debug)]
pub struct Step {
    /// What had happened.
    pub name: String,
    /// Since the process started.
    pub at: Duration,
    /// `VmRSS` in KiB.
    pub rss_kib: u64,
    /// `VmHWM` (peak so far) in KiB.
    pub hwm_kib: u64,
}

/// What one run measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// Nodes served.
    pub nodes: usize,
    /// Pods served.
    pub pods: usize,
    /// PodGroups served.
    pub groups: usize,
    /// Serialized size of everything listed, in bytes.
    pub listed_bytes: usize,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Highest `VmRSS` sampled (every 50 ms), KiB, and when.
    pub sampled_peak: (u64, Duration),
    /// Binds the fake server accepted.
    pub binds: u64,
    /// Requests by `METHOD resource[/sub]`.
    pub requests: BTreeMap<String, u64>,
    /// The scheduler's log.
    pub log: PathBuf,
}

/// Runs the scheduler against a fake API server holding the generated cluster.
///
/// # Errors
/// When the server or the scheduler cannot start, the scheduler exits, or a step is not reached in time.
pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let fake = FakeApi::new();
    eprintln!(
        "bench: generating {} nodes and {} pods ...",
        options.nodes, options.pods
    );
    let (groups, listed_bytes) = populate(&fake, options.nodes, options.pods)?;
    let pods = fake.count(fakeapi::PODS);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(fake.clone().serve(listener, async move {
        let _ = stopped.await;
    }));
    let dir = crate::paths::target_dir().join("bench-memory");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, kubeconfig_text(&format!("http://{address}")))
        .with_context(|| format!("writing {}", kubeconfig.display()))?;
    let admin = free_port()?;
    let admin_address = format!("127.0.0.1:{admin}");
    let mut process = Component::start_binary(
        "kai-scheduler",
        &options.scheduler,
        ["--admin-address", &admin_address, "--log-level", "info"],
        kubeconfig.as_os_str(),
        &dir,
    )?;
    let started = Instant::now();
    let pid = process.pid();
    let sampler = Sampler::start(pid, started);
    let result = measure(&fake, &mut process, admin, started, options).await;
    let sampled_peak = sampler.stop();
    let log = process.log_path().to_path_buf();
    let tail = process.log_tail(20);
    let _ = process.terminate(Duration::from_secs(10));
    let _ = stop.send(());
    let _ = server.await;
    let steps = result.with_context(|| format!("the scheduler's log ends:\n{tail}"))?;
    Ok(Report {
        nodes: options.nodes,
        pods,
        groups,
        listed_bytes,
        steps,
        sampled_peak,
        binds: fake.binds(),
        requests: fake.requests(),
        log,
    })
}

async fn measure(
    fake: &FakeApi,
    process: &mut Component,
    admin: u16,
    started: Instant,
    options: &Options,
) -> anyhow::Result<Vec<Step>> {
    let deadline = started + options.timeout;
    let pid = process.pid();
    let mut steps = Vec::new();
    let mut step = |name: &str| -> anyhow::Result<()> {
        let (rss_kib, hwm_kib) = memory_kib(pid).context("reading /proc/<pid>/status")?;
        let s = Step {
            name: name.to_owned(),
            at: started.elapsed(),
            rss_kib,
            hwm_kib,
        };
        eprintln!(
            "bench:   {:>6.1} s  {name}: VmRSS {:.1} MiB, VmHWM {:.1} MiB",
            s.at.as_secs_f64(),
            mib(rss_kib),
            mib(hwm_kib)
        );
        steps.push(s);
        Ok(())
    };
    // 1. A follower: everything listed and watched, no cycle.
    wait_until(process, deadline, "/readyz answering 200", || {
        http_status(admin, "/readyz") == Some(200)
    })
    .await?;
    step("caches synced (following: model built, no cycle)")?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    step("3 s later (following)")?;
    // 2. Leading: cycles, binds, their watch events.
    fake.remove(fakeapi::LEASES, Some(LEASE.0), LEASE.1);
    wait_until(process, deadline, "the first bind", || fake.binds() > 0).await?;
    step("first bind arrived (first cycle decided)")?;
    // The binds end when none has come for a while (gangs over their queue's quota stay pending).
    wait_until(process, deadline, "the binds to stop", || {
        fake.last_bind().is_some_and(|t| t.elapsed() >= BINDS_DONE)
    })
    .await?;
    let last_bind = fake
        .last_bind()
        .map_or(Duration::ZERO, |t| t.saturating_duration_since(started));
    step(&format!(
        "{} binds made (the last at {:.1} s; {} s without one)",
        fake.binds(),
        last_bind.as_secs_f64(),
        BINDS_DONE.as_secs()
    ))?;
    // 3. Writes deferred behind the binds, then quiet.
    wait_until(process, deadline, "no write for the quiet period", || {
        fake.last_write().is_some_and(|t| t.elapsed() >= QUIET)
    })
    .await?;
    step(&format!("settled (no write for {} s)", QUIET.as_secs()))?;
    Ok(steps)
}

/// Polls `done` every 50 ms until it holds; fails when the process exits or `deadline` passes.
async fn wait_until(
    process: &mut Component,
    deadline: Instant,
    what: &str,
    mut done: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    loop {
        if done() {
            return Ok(());
        }
        if let Some(status) = process.exit_status()? {
            bail!("the scheduler exited ({status}) waiting for {what}");
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads `VmRSS` every 50 ms and keeps the highest, with when it was seen.
struct Sampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    peak_at_ms: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    fn start(pid: u32, started: Instant) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let peak_at_ms = Arc::new(AtomicU64::new(0));
        let thread = std::thread::spawn({
            let (stop, peak, peak_at_ms) = (stop.clone(), peak.clone(), peak_at_ms.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some((rss, _)) = memory_kib(pid)
                        && rss > peak.load(Ordering::Relaxed)
                    {
                        peak.store(rss, Ordering::Relaxed);
                        let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                        peak_at_ms.store(ms, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
        Self {
            stop,
            peak,
            peak_at_ms,
            thread,
        }
    }

    fn stop(self) -> (u64, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        (
            self.peak.load(Ordering::Relaxed),
            Duration::from_millis(self.peak_at_ms.load(Ordering::Relaxed)),
        )
    }
}

/// `VmRSS` and `VmHWM` of a live process, KiB.
fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn kubeconfig_text(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {server}\n\
         users:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n\
         current-context: fake\n"
    )
}

/// A small deterministic generator (splitmix64).
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        usize::try_from(z % n as u64).unwrap_or(0)
    }
}

/// Fills the server with the cluster; returns the number of PodGroups and the serialized size of it all.
fn populate(fake: &FakeApi, nodes: usize, pods: usize) -> anyhow::Result<(usize, usize)> {
    let mut bytes = 0usize;
    let mut insert = |kind: fakeapi::Kind, object: Value| -> anyhow::Result<()> {
        bytes += fake.insert(kind, object)?;
        Ok(())
    };
    for file in api::crds() {
        let mut crd = serde_json::to_value(&file.crd)?;
        crd["status"] = json!({"conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}]});
        // Volcano's is installed only where Volcano is absent; a KAI install has it not.
        if file.path.starts_with("volcano/") {
            continue;
        }
        insert(fakeapi::CRDS, crd)?;
    }
    let departments: Vec<String> = (0..DEPARTMENTS).map(|d| format!("dept-{d}")).collect();
    for ns in departments
        .iter()
        .map(String::as_str)
        .chain(["default", "kube-system", keys::SYSTEM_NAMESPACE])
    {
        insert(
            fakeapi::NAMESPACES,
            json!({"metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                   "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
        )?;
    }
    for (name, value) in keys::PRIORITY_CLASSES.iter().copied().chain([
        ("system-cluster-critical", 2_000_000_000),
        ("system-node-critical", 2_000_001_000),
    ]) {
        insert(
            fakeapi::PRIORITY_CLASSES,
            json!({"metadata": {"name": name}, "value": value, "preemptionPolicy": "PreemptLowerPriority"}),
        )?;
    }
    let gpus = (nodes * GPUS_PER_NODE) as f64;
    for d in &departments {
        insert(fakeapi::QUEUES, queue(d, None, gpus / DEPARTMENTS as f64))?;
        for q in 0..LEAVES_PER_DEPARTMENT {
            let leaf = format!("{d}-q{q}");
            let quota = gpus / (DEPARTMENTS * LEAVES_PER_DEPARTMENT) as f64;
            insert(fakeapi::QUEUES, queue(&leaf, Some(d), quota))?;
        }
    }
    // Another replica holds the lease until the run releases it.
    insert(
        fakeapi::LEASES,
        json!({"metadata": {"name": LEASE.1, "namespace": LEASE.0},
               "spec": {"holderIdentity": "bench-other-replica", "leaseDurationSeconds": 86_400,
                        "acquireTime": crate::now(), "renewTime": crate::now(),
                        "leaseTransitions": 0}}),
    )?;
    for i in 0..nodes {
        insert(fakeapi::NODES, node(i))?;
    }
    let gangs = pods / GANG;
    let mut rng = SplitMix(1);
    for serial in 0..gangs {
        let leaf = serial % (DEPARTMENTS * LEAVES_PER_DEPARTMENT);
        let (dept, queue) = (
            leaf / LEAVES_PER_DEPARTMENT,
            format!(
                "dept-{}-q{}",
                leaf / LEAVES_PER_DEPARTMENT,
                leaf % LEAVES_PER_DEPARTMENT
            ),
        );
        let class = CLASSES[rng.below(CLASSES.len())];
        let job = Job {
            namespace: format!("dept-{dept}"),
            name: format!("job-{serial}"),
            uid: format!("7b5e0c1a-{serial:04x}-4c2e-9d7a-{serial:012x}"),
            queue,
            class,
        };
        insert(fakeapi::POD_GROUPS, job.pod_group())?;
        for rank in 0..GANG {
            insert(fakeapi::PODS, job.pod(rank))?;
        }
    }
    Ok((gangs, bytes))
}

fn queue(name: &str, parent: Option<&str>, gpu_quota: f64) -> Value {
    let mut spec = json!({"resources": {
        "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}});
    if let Some(parent) = parent {
        spec["parentQueue"] = json!(parent);
    }
    json!({"metadata": {"name": name}, "spec": spec})
}

/// A GPU node as a kubelet and the GPU operator's feature discovery report it.
fn node(i: usize) -> Value {
    let name = format!("node-{i}");
    let now = crate::now();
    let resources = json!({"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": GPUS_PER_NODE.to_string(),
        "pods": "110", "ephemeral-storage": "1Ti", "hugepages-1Gi": "0", "hugepages-2Mi": "0"});
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": status, "lastHeartbeatTime": now, "lastTransitionTime": now,
               "reason": reason, "message": message})
    };
    let images: Vec<Value> = (0..10)
        .map(|k| {
            json!({"names": [format!("registry.example.com/team-{k}/image@sha256:{:064x}", k + 1),
                             format!("registry.example.com/team-{k}/image:v{k}")],
                   "sizeBytes": 1_000_000_000 + k * 17_000_000})
        })
        .collect();
    json!({
        "metadata": {"name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                "topology.kubernetes.io/zone": format!("zone-{}", i % ZONES),
                "topology.kubernetes.io/region": "region-1",
                "node.kubernetes.io/instance-type": "gpu-8x80g",
                "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": GPUS_PER_NODE.to_string(),
                "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": {"podCIDR": format!("10.{}.{}.0/24", i / 256, i % 256),
                 "podCIDRs": [format!("10.{}.{}.0/24", i / 256, i % 256)],
                 "providerID": format!("fake://{name}")},
        "status": {
            "capacity": resources, "allocatable": resources,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": format!("10.250.{}.{}", i / 256, i % 256)},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": format!("{i:032x}"), "systemUUID": format!("{i:032x}"),
                "bootID": format!("{i:032x}"), "kernelVersion": "5.15.0-105-generic",
                "osImage": "Ubuntu 22.04.4 LTS", "containerRuntimeVersion": "containerd://1.7.13",
                "kubeletVersion": "v1.20.2", "kubeProxyVersion": "v1.20.2",
                "operatingSystem": "linux", "architecture": "amd64"},
            "images": images,
        },
    })
}

/// One batch Job of [`GANG`] pods and its PodGroup.
struct Job {
    namespace: String,
    name: String,
    uid: String,
    queue: String,
    class: &'static str,
}

impl Job {
    fn owner(&self) -> Value {
        json!([{"apiVersion": "batch/v1", "kind": "Job", "name": self.name, "uid": self.uid,
                "controller": true, "blockOwnerDeletion": true}])
    }

    fn pod_group(&self) -> Value {
        json!({
            "metadata": {"name": self.name, "namespace": self.namespace,
                "labels": {keys::QUEUE_LABEL: self.queue}, "ownerReferences": self.owner()},
            "spec": {"minMember": GANG, "queue": self.queue, "priorityClassName": self.class},
        })
    }

    /// A pod as the Job controller makes it and the API server stores it (defaults filled in).
    fn pod(&self, rank: usize) -> Value {
        let priority = keys::PRIORITY_CLASSES
            .iter()
            .find(|(n, _)| *n == self.class)
            .map_or(0, |(_, v)| *v);
        let token = "default-token-x7k2p";
        let now = crate::now();
        json!({
            "metadata": {
                "name": format!("{}-{rank}", self.name), "generateName": format!("{}-", self.name),
                "namespace": self.namespace,
                "labels": {"controller-uid": self.uid, "job-name": self.name, "app": "trainer",
                           keys::QUEUE_LABEL: self.queue},
                "annotations": {keys::POD_GROUP_NAME: self.name},
                "ownerReferences": self.owner(),
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                    "apiVersion": "v1", "time": now, "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:annotations": {".": {}, "f:pod-group-name": {}},
                            "f:generateName": {},
                            "f:labels": {".": {}, "f:app": {}, "f:controller-uid": {}, "f:job-name": {},
                                         "f:kai.scheduler/queue": {}},
                            "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{}\"}}", self.uid): {
                                ".": {}, "f:apiVersion": {}, "f:blockOwnerDeletion": {}, "f:controller": {},
                                "f:kind": {}, "f:name": {}, "f:uid": {}}}},
                        "f:spec": {"f:containers": {"k:{\"name\":\"trainer\"}": {".": {}, "f:args": {},
                                "f:command": {}, "f:env": {".": {}, "k:{\"name\":\"RANK\"}": {".": {},
                                "f:name": {}, "f:value": {}}, "k:{\"name\":\"WORLD_SIZE\"}": {".": {},
                                "f:name": {}, "f:value": {}}, "k:{\"name\":\"MASTER_ADDR\"}": {".": {},
                                "f:name": {}, "f:value": {}}}, "f:image": {}, "f:imagePullPolicy": {},
                                "f:name": {}, "f:resources": {".": {}, "f:limits": {".": {},
                                "f:nvidia.com/gpu": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {},
                                "f:nvidia.com/gpu": {}}}, "f:terminationMessagePath": {},
                                "f:terminationMessagePolicy": {}}},
                            "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:priorityClassName": {},
                            "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {},
                            "f:terminationGracePeriodSeconds": {}, "f:tolerations": {}}}}],
            },
            "spec": {
                "volumes": [{"name": token, "secret": {"secretName": token, "defaultMode": 420}}],
                "containers": [{
                    "name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                    "command": ["torchrun"],
                    "args": ["--nproc_per_node=1", "train.py", "--epochs=10"],
                    "env": [{"name": "MASTER_ADDR", "value": format!("{}-0", self.name)},
                            {"name": "WORLD_SIZE", "value": GANG.to_string()},
                            {"name": "RANK", "value": rank.to_string()}],
                    "resources": {"limits": {"nvidia.com/gpu": "1"},
                                  "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"}},
                    "volumeMounts": [{"name": token, "readOnly": true,
                                      "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
                "schedulerName": keys::SCHEDULER_NAME,
                "tolerations": [
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                     "tolerationSeconds": 300},
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                     "tolerationSeconds": 300},
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "priorityClassName": self.class, "priority": priority,
                "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
            },
            "status": {"phase": "Pending", "qosClass": "Burstable"},
        })
    }
}

/// The report as Markdown: the cluster, the memory at each step, and the requests the server saw.
#[must_use]
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} nodes x {GPUS_PER_NODE} GPUs, {} pods in {} gangs of {GANG}; {:.0} MiB of JSON listed\n",
        report.nodes,
        report.pods,
        report.groups,
        report.listed_bytes as f64 / 1024.0 / 1024.0
    );
    out.push_str("| step | at s | VmRSS MiB | VmHWM (peak) MiB |\n| --- | ---: | ---: | ---: |\n");
    for s in &report.steps {
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.1} | {:.1} |",
            s.name,
            s.at.as_secs_f64(),
            mib(s.rss_kib),
            mib(s.hwm_kib)
        );
    }
    let _ = writeln!(
        out,
        "\nhighest VmRSS sampled: {:.1} MiB at {:.1} s; binds accepted: {}\n",
        mib(report.sampled_peak.0),
        report.sampled_peak.1.as_secs_f64(),
        report.binds
    );
    out.push_str("| requests | count |\n| --- | ---: |\n");
    for (what, n) in &report.requests {
        let _ = writeln!(out, "| {what} | {n} |");
    }
    let _ = writeln!(out, "\nscheduler log: {}", report.log.display());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_objects_read_as_their_types() {
        let job = Job {
            namespace: "dept-0".to_owned(),
            name: "job-0".to_owned(),
            uid: "u".to_owned(),
            queue: "dept-0-q0".to_owned(),
            class: "train",
        };
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(job.pod(3)).expect("pod");
        let spec = pod.spec.expect("spec");
        assert_eq!(spec.scheduler_name.as_deref(), Some(keys::SCHEDULER_NAME));
        assert_eq!(spec.priority, Some(50));
        let group: api::PodGroup = serde_json::from_value(job.pod_group()).expect("PodGroup");
        assert_eq!(group.spec.min_member, Some(8));
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(node(7)).expect("node");
        assert_eq!(
            node.status
                .and_then(|s| s.allocatable)
                .and_then(|a| a.get("nvidia.com/gpu").cloned()),
            Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                "8".to_owned()
            ))
        );
        let q: api::Queue = serde_json::from_value(queue("a-q0", Some("a"), 4.0)).expect("queue");
        assert_eq!(q.spec.parent_queue.as_deref(), Some("a"));
    }

    #[test]
    fn a_small_cluster_is_populated() -> anyhow::Result<()> {
        let fake = FakeApi::new();
        let (groups, bytes) = populate(&fake, 3, 20)?;
        assert_eq!(
            (groups, fake.count(fakeapi::PODS), fake.count(fakeapi::NODES)),
            (2, 16, 3)
        );
        assert_eq!(fake.count(fakeapi::QUEUES), 110);
        assert!(bytes > 16 * 2000, "{bytes}");
        Ok(())
    }
}
