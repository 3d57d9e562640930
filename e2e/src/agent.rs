//! The node agent: plays the kubelet for a set of fake nodes.
//!
//! Pods bound to those nodes (`spec.nodeName` set, phase Pending) become Running and Ready. Pods with
//! [`RUN_SECONDS_ANNOTATION`] finish after that many seconds: Succeeded, or Failed when
//! [`EXIT_CODE_ANNOTATION`] is non-zero. Pods with a deletion timestamp are deleted with grace period 0,
//! confirming the deletion as a kubelet would. Works for pods created by the real Job and ReplicaSet
//! controllers.
//!
//! GPU reservation pods (namespace `kai-resource-reservation`, label `app=kai-resource-reservation`)
//! are also given the device a device plugin would have handed them: when the agent starts one it sets
//! `run.ai/reserve_for_gpu_index` to the UUID ([`fake_gpu_uuid`]) of the lowest GPU index of the node no
//! other live reservation pod holds, as `kai-gpu-reservation` reports it on a real node. The scheduler
//! waits for that annotation before it binds the pods sharing the device.
//!
//! Like a kubelet, the agent starts a container only once the ConfigMap keys its environment takes
//! (`valueFrom.configMapKeyRef`, `envFrom.configMapRef`, unless optional) exist; until then the pod stays
//! Pending with the kubelet's `CreateContainerConfigError`. What those variables were at the start is
//! written on the pod ([`CONTAINER_ENV_ANNOTATION`]), as `kubectl exec <pod> -- env` shows it on a node.
//!
//! Must not: touch pods on nodes it does not own (nodes are cluster-wide, tests run in parallel).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt as _, reflector as reflect};
use kube::{Client, ResourceExt as _};
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

/// Pod annotation: seconds after start at which the pod finishes.
pub const RUN_SECONDS_ANNOTATION: &str = "e2e.kai.dev/run-seconds";
/// Pod annotation: exit code of the finished pod (non-zero means Failed). Without
/// [`RUN_SECONDS_ANNOTATION`] the pod finishes right after it starts.
pub const EXIT_CODE_ANNOTATION: &str = "e2e.kai.dev/exit-code";

/// Pod annotation the agent writes when it starts a pod whose containers take variables from
/// ConfigMaps: those variables as each container got them, as JSON (`{container: {name: value}}`).
pub const CONTAINER_ENV_ANNOTATION: &str = "e2e.kai.dev/container-env";

/// What a device plugin would give a reservation pod: the lowest GPU index of its node (`gpus` devices)
/// that no other live reservation pod holds, or `None` when all are held.
fn free_device_index(gpus: u32, held: &HashSet<u32>) -> Option<u32> {
    (0..gpus).find(|i| !held.contains(i))
}

/// The UUID of GPU `index` of fake node `node`, shaped as NVIDIA's (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-
/// xxxxxxxxxxxx`): distinct per node and index, and the same every time.
#[must_use]
pub fn fake_gpu_uuid(node: &str, index: u32) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in node.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("GPU-{hash:08x}-0000-4000-8000-{index:012x}")
}

/// The index of a device as a reservation pod reported it: a [`fake_gpu_uuid`], or a bare index.
fn device_index(reported: &str) -> Option<u32> {
    reported.parse::<u32>().ok().or_else(|| {
        reported
            .strip_prefix("GPU-")
            .and_then(|u| u.rsplit('-').next())
            .and_then(|i| u32::from_str_radix(i, 16).ok())
    })
}

/// The ConfigMaps a pod's containers take variables from, each with whether the pod may start without
/// it (`optional: true`).
fn referenced_configmaps(pod: &Pod) -> BTreeMap<String, bool> {
    let mut out: BTreeMap<String, bool> = BTreeMap::new();
    let mut note = |name: &str, optional: Option<bool>| {
        let optional = optional.unwrap_or(false);
        let entry = out.entry(name.to_owned()).or_insert(optional);
        *entry &= optional;
    };
    let spec = pod.spec.as_ref();
    for c in spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
    {
        for e in c.env.iter().flatten() {
            if let Some(r) = e.value_from.as_ref().and_then(|v| v.config_map_key_ref.as_ref()) {
                note(&r.name, r.optional);
            }
        }
        for f in c.env_from.iter().flatten() {
            if let Some(r) = f.config_map_ref.as_ref() {
                note(&r.name, r.optional);
            }
        }
    }
    out
}

/// What each container (init containers too) takes from ConfigMaps, as a kubelet resolves it when it
/// starts the container, given the ConfigMaps' data (`None`: the ConfigMap does not exist); a missing
/// ConfigMap or key that is not optional stops the start with the kubelet's message.
fn config_env(
    pod: &Pod,
    maps: &BTreeMap<String, Option<BTreeMap<String, String>>>,
) -> Result<BTreeMap<String, BTreeMap<String, String>>, String> {
    let namespace = pod.namespace().unwrap_or_default();
    let mut out = BTreeMap::new();
    let spec = pod.spec.as_ref();
    for c in spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
    {
        let mut vars = BTreeMap::new();
        for f in c.env_from.iter().flatten() {
            let Some(r) = f.config_map_ref.as_ref() else {
                continue;
            };
            match maps.get(&r.name).cloned().flatten() {
                Some(data) => {
                    let prefix = f.prefix.clone().unwrap_or_default();
                    vars.extend(data.into_iter().map(|(k, v)| (format!("{prefix}{k}"), v)));
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("configmap \"{}\" not found", r.name)),
            }
        }
        for e in c.env.iter().flatten() {
            let Some(r) = e.value_from.as_ref().and_then(|v| v.config_map_key_ref.as_ref()) else {
                continue;
            };
            let value = maps
                .get(&r.name)
                .cloned()
                .flatten()
                .ok_or_else(|| format!("configmap \"{}\" not found", r.name))
                .and_then(|data| {
                    data.get(&r.key).cloned().ok_or_else(|| {
                        format!("couldn't find key {} in ConfigMap {namespace}/{}", r.key, r.name)
                    })
                });
            match value {
                Ok(v) => {
                    vars.insert(e.name.clone(), v);
                }
                Err(_) if r.optional == Some(true) => {}
                Err(why) => return Err(why),
            }
        }
        if !vars.is_empty() {
            out.insert(c.name.clone(), vars);
        }
    }
    Ok(out)
}

/// The status of a pod whose containers cannot be made yet, as a kubelet reports it.
fn config_error_status(pod: &Pod, message: &str) -> serde_json::Value {
    let spec = pod.spec.clone().unwrap_or_default();
    let waiting = |c: &k8s_openapi::api::core::v1::Container| {
        json!({
            "name": c.name, "ready": false, "restartCount": 0,
            "image": c.image.clone().unwrap_or_default(), "imageID": "",
            "state": {"waiting": {"reason": "CreateContainerConfigError", "message": message}},
        })
    };
    json!({
        "status": {
            "phase": "Pending",
            "containerStatuses": spec.containers.iter().map(waiting).collect::<Vec<_>>(),
        }
    })
}

/// Whether the scheduler created this pod to hold a shared GPU.
fn is_reservation_pod(pod: &Pod) -> bool {
    pod.namespace().as_deref() == Some(api::keys::RESERVATION_NAMESPACE)
        && pod.labels().get("app").map(String::as_str) == Some(api::keys::RESERVATION_APP)
}

/// Concurrent writes to the API server.
const MAX_IN_FLIGHT: usize = 32;
/// How often every known pod is looked at again (a write that failed is retried then).
const RESYNC: Duration = Duration::from_secs(3);

/// A running node agent. Stops when dropped.
#[derive(Debug)]
pub struct NodeAgent {
    task: JoinHandle<()>,
    selector: String,
}

impl NodeAgent {
    /// Starts the agent for the nodes matching `node_selector` (a label selector) on the current runtime.
    #[must_use]
    pub fn start(client: Client, node_selector: &str) -> Self {
        let selector = node_selector.to_owned();
        let task = tokio::spawn(run(client, selector.clone()));
        Self { task, selector }
    }

    /// The label selector of the nodes it plays the kubelet for.
    #[must_use]
    pub fn selector(&self) -> &str {
        &self.selector
    }

    /// Whether the agent's task ended (it only ends on a panic or when stopped).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the agent and waits for it.
    pub async fn stop(self) {
        self.task.abort();
        let mut this = self;
        // The task was aborted; its JoinError says only that.
        let _ = (&mut this.task).await;
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the agent last did to a pod, so watch echoes of its own writes are not acted on twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Starting,
    Running,
    Finishing,
    Deleting,
}

/// The agent's decision for one pod; pure, so it is unit-tested.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Action {
    Start,
    ScheduleFinish { after: Duration, exit_code: i32 },
    Delete,
    Nothing,
}

fn decide(pod: &Pod, stage: Option<Stage>, now: jiff::Timestamp) -> Action {
    if pod.metadata.deletion_timestamp.is_some() {
        return if stage == Some(Stage::Deleting) {
            Action::Nothing
        } else {
            Action::Delete
        };
    }
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    match phase {
        "Pending" if stage.is_none() => Action::Start,
        "Running" if matches!(stage, None | Some(Stage::Starting)) => match finish_plan(pod) {
            Some((run_for, exit_code)) => {
                let started = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .map_or(now, |t| t.0);
                let elapsed = now.duration_since(started).unsigned_abs();
                Action::ScheduleFinish {
                    after: run_for.saturating_sub(elapsed),
                    exit_code,
                }
            }
            None => Action::Nothing,
        },
        _ => Action::Nothing,
    }
}

/// How long the pod runs and with which exit code, when it finishes at all.
fn finish_plan(pod: &Pod) -> Option<(Duration, i32)> {
    let annotations = pod.annotations();
    let seconds = annotations
        .get(RUN_SECONDS_ANNOTATION)
        .and_then(|v| v.trim().parse::<f64>().ok());
    let exit_code = annotations
        .get(EXIT_CODE_ANNOTATION)
        .and_then(|v| v.trim().parse::<i32>().ok());
    match (seconds, exit_code) {
        (None, None) => None,
        (seconds, exit_code) => {
            let seconds = seconds.filter(|s| s.is_finite() && *s >= 0.0).unwrap_or(0.0);
            Some((Duration::from_secs_f64(seconds), exit_code.unwrap_or(0)))
        }
    }
}

/// The Running status of a pod.
fn running_status(pod: &Pod, host_ip: &str, pod_ip: &str, now: &str) -> serde_json::Value {
    let spec = pod.spec.clone().unwrap_or_default();
    let condition = |type_: &str| json!({"type": type_, "status": "True", "lastTransitionTime": now});
    // As a kubelet does, the binding's `PodScheduled` time is kept (minimum runtimes count from it).
    let scheduled = scheduled_since(pod).map_or_else(
        || condition("PodScheduled"),
        |t| json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": t}),
    );
    let containers: Vec<serde_json::Value> = spec
        .containers
        .iter()
        .map(|c| {
            json!({
                "name": c.name, "ready": true, "started": true, "restartCount": 0,
                "image": c.image.clone().unwrap_or_default(), "imageID": "",
                "containerID": format!("fake://{}/{}", pod.uid().unwrap_or_default(), c.name),
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    let init_containers: Vec<serde_json::Value> = spec
        .init_containers
        .unwrap_or_default()
        .iter()
        .map(|c| {
            json!({
                "name": c.name, "ready": true, "restartCount": 0,
                "image": c.image.clone().unwrap_or_default(), "imageID": "",
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}},
            })
        })
        .collect();
    json!({
        "status": {
            "phase": "Running",
            "hostIP": host_ip,
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": now,
            "conditions": [
                condition("Initialized"), condition("Ready"), condition("ContainersReady"), scheduled,
            ],
            "containerStatuses": containers,
            "initContainerStatuses": init_containers,
        }
    })
}

/// When the pod's binding set `PodScheduled=True`, as the API server wrote it.
fn scheduled_since(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled" && c.status == "True"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.to_string())
}

/// The finished status of a pod.
fn finished_status(pod: &Pod, exit_code: i32, now: &str) -> serde_json::Value {
    let spec = pod.spec.clone().unwrap_or_default();
    let (phase, reason) = if exit_code == 0 {
        ("Succeeded", "Completed")
    } else {
        ("Failed", "Error")
    };
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or_else(|| now.to_owned(), |t| t.0.to_string());
    let not_ready = |type_: &str| json!({"type": type_, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now});
    let containers: Vec<serde_json::Value> = spec
        .containers
        .iter()
        .map(|c| {
            json!({
                "name": c.name, "ready": false, "started": false, "restartCount": 0,
                "image": c.image.clone().unwrap_or_default(), "imageID": "",
                "containerID": format!("fake://{}/{}", pod.uid().unwrap_or_default(), c.name),
                "state": {"terminated": {
                    "exitCode": exit_code, "reason": reason, "startedAt": started, "finishedAt": now,
                }},
            })
        })
        .collect();
    json!({
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "Initialized", "status": "True", "reason": "PodCompleted", "lastTransitionTime": started},
                not_ready("Ready"), not_ready("ContainersReady"),
                {"type": "PodScheduled", "status": "True",
                 "lastTransitionTime": scheduled_since(pod).unwrap_or_else(|| started.clone())},
            ],
            "containerStatuses": containers,
        }
    })
}

/// Outcome of one write, fed back to the loop.
enum Done {
    /// The write failed; forget the stage so the next look retries.
    Failed(String),
    /// The pod's finish timer fired.
    Finish(String, i32),
}

struct Agent {
    client: Client,
    pods: Store<Pod>,
    /// Owned node name -> its InternalIP and GPU count.
    nodes: HashMap<String, (String, u32)>,
    stages: HashMap<String, Stage>,
    /// Reservation pod key -> (node, GPU index) given by this agent; the store may not show the
    /// annotation yet when the next reservation pod on the node starts.
    devices: HashMap<String, (String, u32)>,
    writes: Arc<Semaphore>,
    done: mpsc::UnboundedSender<Done>,
    pod_ips: Arc<AtomicU32>,
}

async fn run(client: Client, selector: String) {
    let (pods, writer) = reflector::store::<Pod>();
    let pod_events = reflect(
        writer,
        watcher::watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .boxed();
    let node_events = watcher::watcher(
        Api::<Node>::all(client.clone()),
        watcher::Config::default().labels(&selector),
    )
    .default_backoff()
    .boxed();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let mut agent = Agent {
        client,
        pods,
        nodes: HashMap::new(),
        stages: HashMap::new(),
        devices: HashMap::new(),
        writes: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        done: done_tx,
        pod_ips: Arc::new(AtomicU32::new(0)),
    };
    let mut pod_events = pod_events;
    let mut node_events = node_events;
    let mut resync = tokio::time::interval(RESYNC);
    loop {
        tokio::select! {
            Some(event) = node_events.next() => match event {
                Ok(event) => agent.on_node_event(event),
                Err(err) => warn!(%err, "node watch failed; retrying"),
            },
            Some(event) = pod_events.next() => match event {
                Ok(event) => agent.on_pod_event(event),
                Err(err) => warn!(%err, "pod watch failed; retrying"),
            },
            Some(done) = done_rx.recv() => agent.on_done(done),
            _ = resync.tick() => agent.resync(),
            else => break,
        }
    }
}

fn key_of(pod: &Pod) -> String {
    pod.uid()
        .unwrap_or_else(|| format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()))
}

impl Agent {
    fn on_node_event(&mut self, event: Event<Node>) {
        match event {
            Event::Apply(node) | Event::InitApply(node) => {
                let name = node.name_any();
                let ip = node
                    .status
                    .as_ref()
                    .and_then(|s| s.addresses.as_ref())
                    .and_then(|a| {
                        a.iter()
                            .find(|a| a.type_ == "InternalIP")
                            .map(|a| a.address.clone())
                    })
                    .unwrap_or_default();
                let gpus = node
                    .status
                    .as_ref()
                    .and_then(|s| s.allocatable.as_ref())
                    .and_then(|a| a.get(api::keys::GPU_RESOURCE))
                    .and_then(|q| q.0.parse::<u32>().ok())
                    .unwrap_or(0);
                let new = self.nodes.insert(name.clone(), (ip, gpus)).is_none();
                if new {
                    debug!(node = %name, "owning node");
                    for pod in self.pods.state() {
                        if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str()) {
                            self.handle(&pod);
                        }
                    }
                }
            }
            Event::Delete(node) => {
                self.nodes.remove(&node.name_any());
            }
            Event::Init | Event::InitDone => {}
        }
    }

    fn on_pod_event(&mut self, event: Event<Pod>) {
        match event {
            Event::Apply(pod) | Event::InitApply(pod) => self.handle(&pod),
            Event::Delete(pod) => {
                self.stages.remove(&key_of(&pod));
                self.devices.remove(&key_of(&pod));
            }
            Event::Init | Event::InitDone => {}
        }
    }

    fn on_done(&mut self, done: Done) {
        match done {
            Done::Failed(key) => {
                self.stages.remove(&key);
            }
            Done::Finish(key, exit_code) => {
                let pod = self.pods.state().into_iter().find(|p| key_of(p) == key);
                if let Some(pod) = pod
                    && pod.metadata.deletion_timestamp.is_none()
                    && self.stages.get(&key) == Some(&Stage::Running)
                {
                    self.stages.insert(key.clone(), Stage::Finishing);
                    let patch = finished_status(&pod, exit_code, &crate::now());
                    self.write_status(&pod, key, None, patch);
                }
            }
        }
    }

    fn resync(&mut self) {
        let live: HashSet<String> = self.pods.state().iter().map(|p| key_of(p)).collect();
        self.stages.retain(|key, _| live.contains(key));
        self.devices.retain(|key, _| live.contains(key));
        for pod in self.pods.state() {
            self.handle(&pod);
        }
    }

    fn handle(&mut self, pod: &Pod) {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            return;
        };
        let Some((host_ip, gpus)) = self.nodes.get(&node).cloned() else {
            return;
        };
        let key = key_of(pod);
        match decide(pod, self.stages.get(&key).copied(), jiff::Timestamp::now()) {
            Action::Nothing => {}
            Action::Delete => {
                self.stages.insert(key.clone(), Stage::Deleting);
                self.delete(pod, key);
            }
            Action::Start => {
                self.stages.insert(key.clone(), Stage::Starting);
                let n = self.pod_ips.fetch_add(1, Ordering::Relaxed);
                let pod_ip = format!("198.19.{}.{}", (n / 250) % 250, n % 250 + 1);
                let patch = running_status(pod, &host_ip, &pod_ip, &crate::now());
                let device = if is_reservation_pod(pod) {
                    self.give_device(pod, &key, &node, gpus)
                } else {
                    None
                };
                self.write_status(pod, key, device, patch);
            }
            Action::ScheduleFinish { after, exit_code } => {
                self.stages.insert(key.clone(), Stage::Running);
                let done = self.done.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    let _ = done.send(Done::Finish(key, exit_code));
                });
            }
        }
    }

    /// The GPU index a starting reservation pod gets (its own if it already has one).
    fn give_device(&mut self, pod: &Pod, key: &str, node: &str, gpus: u32) -> Option<u32> {
        let annotated = |p: &Pod| {
            p.annotations()
                .get(api::keys::RESERVED_GPU_INDEX)
                .and_then(|v| device_index(v))
        };
        if let Some(own) = annotated(pod).or_else(|| self.devices.get(key).map(|(_, i)| *i)) {
            return Some(own);
        }
        let mut held: HashSet<u32> = self
            .devices
            .values()
            .filter(|(n, _)| n == node)
            .map(|(_, i)| *i)
            .collect();
        for other in self.pods.state() {
            let live = other.metadata.deletion_timestamp.is_none()
                && !matches!(
                    other.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                );
            if live
                && is_reservation_pod(&other)
                && other.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
            {
                held.extend(annotated(&other));
            }
        }
        let index = free_device_index(gpus, &held);
        match index {
            Some(i) => {
                self.devices.insert(key.to_owned(), (node.to_owned(), i));
            }
            None => warn!(pod = %pod.name_any(), %node, "no free GPU for the reservation pod"),
        }
        index
    }

    /// Writes a status patch; first, for a reservation pod, the annotation naming its GPU, and for a pod
    /// starting with variables from ConfigMaps, those variables (or, while one is missing, the kubelet's
    /// waiting status instead of the patch).
    fn write_status(&self, pod: &Pod, key: String, device: Option<u32>, patch: serde_json::Value) {
        let namespace = pod.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &namespace);
        let name = pod.name_any();
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let starting = patch.pointer("/status/phase").and_then(serde_json::Value::as_str) == Some("Running");
        let pod = pod.clone();
        let writes = Arc::clone(&self.writes);
        let done = self.done.clone();
        tokio::spawn(async move {
            let _permit = writes.acquire_owned().await;
            let referenced = if starting {
                referenced_configmaps(&pod)
            } else {
                BTreeMap::new()
            };
            if !referenced.is_empty() {
                let mut data = BTreeMap::new();
                for configmap in referenced.keys() {
                    match maps.get_opt(configmap).await {
                        Ok(found) => {
                            data.insert(configmap.clone(), found.map(|m| m.data.unwrap_or_default()));
                        }
                        Err(err) => {
                            warn!(pod = %name, %err, "reading ConfigMap {configmap} failed; will retry");
                            let _ = done.send(Done::Failed(key));
                            return;
                        }
                    }
                }
                let env = match config_env(&pod, &data) {
                    Ok(env) => env,
                    Err(why) => {
                        debug!(pod = %name, %why, "container configuration not ready; will retry");
                        let waiting = config_error_status(&pod, &why);
                        let _ = api
                            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&waiting))
                            .await;
                        let _ = done.send(Done::Failed(key));
                        return;
                    }
                };
                let annotation = json!({ "metadata": { "annotations": {
                    CONTAINER_ENV_ANNOTATION: serde_json::to_string(&env).unwrap_or_default(),
                } } });
                if let Err(err) = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&annotation))
                    .await
                {
                    warn!(pod = %name, %err, "container env annotation failed; will retry");
                    let _ = done.send(Done::Failed(key));
                    return;
                }
            }
            if let Some(index) = device {
                let annotation = json!({ "metadata": { "annotations": {
                    api::keys::RESERVED_GPU_INDEX: fake_gpu_uuid(&node, index),
                } } });
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&annotation))
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => return,
                    Err(err) => {
                        warn!(pod = %name, %err, "device annotation failed; will retry");
                        let _ = done.send(Done::Failed(key));
                        return;
                    }
                }
            }
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => {
                    warn!(pod = %name, %err, "status write failed; will retry");
                    let _ = done.send(Done::Failed(key));
                }
            }
        });
    }

    fn delete(&self, pod: &Pod, key: String) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let name = pod.name_any();
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let writes = Arc::clone(&self.writes);
        let done = self.done.clone();
        tokio::spawn(async move {
            let _permit = writes.acquire_owned().await;
            match api.delete(&name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
                Err(err) => {
                    warn!(pod = %name, %err, "delete failed; will retry");
                    let _ = done.send(Done::Failed(key));
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{Container, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;

    use super::*;

    fn pod(phase: &str, annotations: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                uid: Some("u1".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n".into()),
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("img".into()),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..PodStatus::default()
            }),
        }
    }

    #[test]
    fn pending_pods_start_once() {
        let now = jiff::Timestamp::now();
        assert_eq!(decide(&pod("Pending", &[]), None, now), Action::Start);
        assert_eq!(
            decide(&pod("Pending", &[]), Some(Stage::Starting), now),
            Action::Nothing
        );
        assert_eq!(
            decide(&pod("Running", &[]), Some(Stage::Starting), now),
            Action::Nothing
        );
    }

    #[test]
    fn annotated_pods_finish_after_their_run_time() {
        let now = jiff::Timestamp::now();
        let mut running = pod(
            "Running",
            &[(RUN_SECONDS_ANNOTATION, "5"), (EXIT_CODE_ANNOTATION, "3")],
        );
        running.status.as_mut().expect("status").start_time =
            Some(Time(now - jiff::SignedDuration::from_secs(2)));
        match decide(&running, Some(Stage::Starting), now) {
            Action::ScheduleFinish { after, exit_code } => {
                assert_eq!(exit_code, 3);
                assert!(
                    after <= Duration::from_secs(3) && after >= Duration::from_millis(2900),
                    "{after:?}"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(decide(&running, Some(Stage::Running), now), Action::Nothing);
        assert_eq!(
            decide(
                &pod("Succeeded", &[(RUN_SECONDS_ANNOTATION, "1")]),
                Some(Stage::Finishing),
                now
            ),
            Action::Nothing
        );
    }

    #[test]
    fn reservation_pods_get_the_lowest_free_gpu_index() {
        assert_eq!(free_device_index(2, &HashSet::new()), Some(0));
        assert_eq!(free_device_index(2, &HashSet::from([0])), Some(1));
        assert_eq!(free_device_index(2, &HashSet::from([0, 1])), None);
        assert_eq!(free_device_index(0, &HashSet::new()), None);
        let mut reservation = pod("Pending", &[]);
        reservation.metadata.namespace = Some(api::keys::RESERVATION_NAMESPACE.into());
        assert!(!is_reservation_pod(&reservation), "needs the app label too");
        reservation.metadata.labels = Some(BTreeMap::from([(
            "app".to_owned(),
            api::keys::RESERVATION_APP.to_owned(),
        )]));
        assert!(is_reservation_pod(&reservation));
    }

    #[test]
    fn fake_devices_have_uuids_that_name_their_index() {
        let a0 = fake_gpu_uuid("node-a", 0);
        assert!(a0.starts_with("GPU-") && a0.len() == 40, "{a0}");
        assert_ne!(a0, fake_gpu_uuid("node-b", 0));
        assert_ne!(a0, fake_gpu_uuid("node-a", 1));
        assert_eq!(device_index(&fake_gpu_uuid("node-a", 7)), Some(7));
        assert_eq!(device_index("3"), Some(3), "a bare index, as tests write it");
        assert_eq!(device_index("all"), None);
    }

    #[test]
    fn containers_start_only_with_the_configmap_keys_they_take() {
        let mut p = pod("Pending", &[]);
        p.metadata.namespace = Some("ns".into());
        let spec = p.spec.as_mut().expect("spec");
        spec.containers[0].env = Some(vec![
            serde_json::from_value(json!({ "name": "NVIDIA_VISIBLE_DEVICES",
                "valueFrom": { "configMapKeyRef": { "name": "gpu", "key": "NVIDIA_VISIBLE_DEVICES", "optional": false } } }))
            .expect("env"),
            serde_json::from_value(json!({ "name": "PLAIN", "value": "x" })).expect("env"),
            serde_json::from_value(json!({ "name": "MAYBE",
                "valueFrom": { "configMapKeyRef": { "name": "other", "key": "k", "optional": true } } }))
            .expect("env"),
        ]);
        spec.containers[0].env_from = Some(vec![
            serde_json::from_value(json!({ "configMapRef": { "name": "gpu-evar" } })).expect("envFrom"),
        ]);
        let refs = referenced_configmaps(&p);
        assert_eq!(
            refs,
            BTreeMap::from([
                ("gpu".to_owned(), false),
                ("gpu-evar".to_owned(), false),
                ("other".to_owned(), true)
            ])
        );
        let data = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        let mut maps = BTreeMap::from([("gpu".to_owned(), None), ("other".to_owned(), None)]);
        maps.insert("gpu-evar".to_owned(), data(&[]));
        assert_eq!(
            config_env(&p, &maps),
            Err("configmap \"gpu\" not found".to_owned())
        );
        maps.insert("gpu".to_owned(), data(&[]));
        assert_eq!(
            config_env(&p, &maps),
            Err("couldn't find key NVIDIA_VISIBLE_DEVICES in ConfigMap ns/gpu".to_owned())
        );
        maps.insert("gpu".to_owned(), data(&[("NVIDIA_VISIBLE_DEVICES", "GPU-1")]));
        maps.insert("gpu-evar".to_owned(), data(&[("EXTRA", "1")]));
        let env = config_env(&p, &maps).expect("resolved");
        assert_eq!(
            env["c"],
            BTreeMap::from([
                ("EXTRA".to_owned(), "1".to_owned()),
                ("NVIDIA_VISIBLE_DEVICES".to_owned(), "GPU-1".to_owned())
            ]),
            "optional and plain values are not the ConfigMaps' part"
        );
        let waiting = config_error_status(&p, "configmap \"gpu\" not found");
        assert_eq!(
            waiting["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
            "CreateContainerConfigError"
        );
    }

    #[test]
    fn terminating_pods_are_deleted_once() {
        let now = jiff::Timestamp::now();
        let mut terminating = pod("Running", &[]);
        terminating.metadata.deletion_timestamp = Some(Time(now));
        assert_eq!(decide(&terminating, Some(Stage::Running), now), Action::Delete);
        assert_eq!(decide(&terminating, Some(Stage::Deleting), now), Action::Nothing);
    }

    #[test]
    fn statuses_look_like_a_kubelets() {
        let p = pod("Pending", &[]);
        let running = running_status(&p, "198.18.0.1", "198.19.0.1", "2026-01-01T00:00:00Z");
        assert_eq!(running["status"]["phase"], "Running");
        assert_eq!(running["status"]["containerStatuses"][0]["ready"], true);
        let failed = finished_status(&p, 2, "2026-01-01T00:00:01Z");
        assert_eq!(failed["status"]["phase"], "Failed");
        assert_eq!(
            failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            2
        );
        assert_eq!(finished_status(&p, 0, "x")["status"]["phase"], "Succeeded");
    }

    /// The binding's `PodScheduled` time survives the kubelet's status writes, as with a real kubelet.
    #[test]
    fn the_bindings_scheduled_time_is_kept() {
        let scheduled = |status: &serde_json::Value| {
            status["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "PodScheduled"))
                .map(|c| c["lastTransitionTime"].clone())
        };
        let mut p = pod("Pending", &[]);
        let bound: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("a time");
        p.status.as_mut().expect("a status").conditions = Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            last_transition_time: Some(Time(bound)),
            ..PodCondition::default()
        }]);
        let running = running_status(&p, "198.18.0.1", "198.19.0.1", "2026-01-01T00:00:09Z");
        assert_eq!(scheduled(&running), Some(json!("2026-01-01T00:00:00Z")));
        let finished = finished_status(&p, 0, "2026-01-01T00:00:19Z");
        assert_eq!(scheduled(&finished), Some(json!("2026-01-01T00:00:00Z")));
        // Without one (bound by name), the kubelet's own time.
        let unbound = running_status(&pod("Pending", &[]), "a", "b", "2026-01-01T00:00:09Z");
        assert_eq!(scheduled(&unbound), Some(json!("2026-01-01T00:00:09Z")));
    }
}
