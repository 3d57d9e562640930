//! `cargo xtask demo`: the main job. Brings up the local control plane, installs the chart as seed 002
//! does (`global.gpuSharing=true`), runs both components as local processes with exactly the arguments,
//! files and ServiceAccounts (their tokens) the chart renders (no container runtime here), plays the
//! kubelet for fake GPU nodes, and walks through what the scheduler is for, printing what happened:
//!
//! 1. seed 003: an 8-GPU gang on 6 free GPUs waits whole and says why, while kube-scheduler, beside it on
//!    identical nodes, starts 6 of 8 pods that can never run together;
//! 2. two more GPUs join and the whole gang is bound in one cycle;
//! 3. an `inference` gang preempts the `train` gang;
//! 4. two pods of half a GPU each share one GPU (seed 002's verification command), and both start with
//!    that GPU, and only it, in `NVIDIA_VISIBLE_DEVICES`.
//!
//! Everything keeps running afterwards for the user's own `kubectl apply`; `cargo xtask demo down` stops
//! the components and removes the demo's objects, `cargo xtask cluster down` the cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use api::keys;
use e2e::chart::{self, Rendered};
use e2e::component::{Component, free_port, http_status};
use e2e::helm::Helm;
use e2e::kube_scheduler::KubeScheduler;
use e2e::{DevPaths, FakeNodes, Kubectl, Placement};
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};

use crate::cluster;

/// Where the demo's workloads run.
const NAMESPACE: &str = "kai-demo";
/// Owner of the demo's fake nodes (`cargo xtask nodes agent --prefix demo` plays their kubelet).
const NODE_PREFIX: &str = "demo";
/// kube-scheduler's name in the comparison.
const KUBE_SCHEDULER: &str = "demo-kube-scheduler";
/// Label and taint that keep kube-scheduler's comparison nodes apart from ours.
const KUBE_NODES: &str = "kai.demo/kube-scheduler";
const WAIT: Duration = Duration::from_secs(90);
/// The demo's queue: 8 GPUs of quota, so the non-preemptible inference gang may run (non-preemptible work
/// stays within quota) while the preemptible train gang may use whatever is free.
const QUEUE: &str = "kai-demo";

/// The demo's processes: `(name, what it runs)`.
const PROCESSES: [&str; 3] = ["scheduler", "podgrouper", "node-agent"];

fn demo_dir() -> PathBuf {
    DevPaths::from_env().home().join("demo")
}

fn pid_file(name: &str) -> PathBuf {
    demo_dir().join(format!("{name}.pid"))
}

fn log_file(name: &str) -> PathBuf {
    demo_dir().join(format!("{name}.log"))
}

/// `cargo xtask demo`.
pub(crate) fn up() -> anyhow::Result<()> {
    cluster::up()?;
    println!("\n==> building the components");
    // xtask too: the node agent runs as `xtask nodes agent`, and this process's own file may have been
    // replaced by a later build (a running binary's path then no longer exists).
    for bin in ["kai-scheduler", "kai-podgrouper", "xtask"] {
        Component::build(bin)?;
    }
    stop_processes();
    let kubeconfig = DevPaths::from_env().kubeconfig();
    // The chart's GPU-sharing webhook is called at the local scheduler's address.
    let webhook_port = free_port()?;
    install_chart(&kubeconfig, webhook_port)?;
    crate::async_runtime()?.block_on(async {
        let client = cluster::connect().await?;
        reset(&client).await?;
        start_processes(&client, &kubeconfig, webhook_port).await?;
        walkthrough(&client, &kubeconfig).await
    })?;
    print_epilogue(&kubeconfig);
    Ok(())
}

/// `cargo xtask demo down`: stops the demo's processes and deletes its namespace and nodes; the cluster and
/// the chart's objects stay, but for the GPU-sharing webhook's configuration: it calls the stopped local
/// scheduler (`cargo xtask demo` installs it again).
pub(crate) fn down() -> anyhow::Result<()> {
    stop_processes();
    crate::async_runtime()?.block_on(async {
        let client = cluster::connect().await?;
        let webhooks: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
            Api::all(client.clone());
        let _ = webhooks
            .delete(WEBHOOK_CONFIGURATION, &DeleteParams::default())
            .await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let _ = namespaces.delete(NAMESPACE, &DeleteParams::background()).await;
        let queues: Api<api::Queue> = Api::all(client.clone());
        let _ = queues.delete(QUEUE, &DeleteParams::default()).await;
        let removed = e2e::nodes::delete(&client, &e2e::nodes::owner_selector(&node_owner())).await?;
        println!(
            "demo stopped: processes ended, namespace {NAMESPACE} deleted, {removed} fake nodes removed"
        );
        println!("the cluster keeps running: `cargo xtask cluster down` stops it");
        Ok(())
    })
}

fn node_owner() -> String {
    format!("xtask-{NODE_PREFIX}")
}

/// Seed 002's install command, on a cluster that already has the CRDs, priority classes and default
/// queues (`cluster up` made them), with plain-text logs for the log files.
fn install_chart(kubeconfig: &Path, webhook_port: u16) -> anyhow::Result<()> {
    println!(
        "==> helm upgrade -i kai-scheduler deploy/chart/kai-scheduler -n kai-scheduler --create-namespace --set global.gpuSharing=true"
    );
    let helm = Helm::find_or_fetch()?;
    chart::install(
        &helm,
        kubeconfig,
        chart::RELEASE,
        chart::NAMESPACE,
        &values(&chart_values(webhook_port)),
        true,
    )?;
    Ok(())
}

/// The GPU-sharing webhook configuration the chart makes for the release `kai-scheduler`.
const WEBHOOK_CONFIGURATION: &str = "kai-scheduler-gpu-sharing";

/// Seed 002's values, with the GPU-sharing webhook called at the local scheduler (`webhook_port`).
fn chart_values(webhook_port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("global.gpuSharing", "true".to_owned()),
        ("global.logFormat", "plain".to_owned()),
        ("priorityClasses.create", "false".to_owned()),
        ("defaultQueues.create", "false".to_owned()),
        (
            "gpuSharingWebhook.url",
            format!("https://127.0.0.1:{webhook_port}/mutate-pods"),
        ),
    ]
}

fn values<'a>(owned: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    owned.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// Starts the chart's two components, each with the token of its ServiceAccount, and the node agent (as
/// the admin: it plays the kubelet) as background processes that outlive this command, and waits for both
/// components to be ready.
async fn start_processes(client: &Client, kubeconfig: &Path, webhook_port: u16) -> anyhow::Result<()> {
    println!("==> starting the podgrouper and the scheduler with the chart's arguments, and the node agent");
    let dir = demo_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let helm = Helm::find_or_fetch()?;
    let components = Rendered::render(
        &helm,
        chart::RELEASE,
        chart::NAMESPACE,
        &values(&chart_values(webhook_port)),
    )?
    .components()?;
    let admin =
        std::fs::read_to_string(kubeconfig).with_context(|| format!("reading {}", kubeconfig.display()))?;
    for spec in &components {
        let token = e2e::serviceaccount::token(
            client,
            &spec.namespace,
            &spec.service_account,
            Duration::from_secs(60),
        )
        .await?;
        let user = format!(
            "system:serviceaccount:{}:{}",
            spec.namespace, spec.service_account
        );
        let credentials = dir.join(format!("{}.kubeconfig", spec.service_account));
        e2e::serviceaccount::write_private(
            &credentials,
            &e2e::serviceaccount::kubeconfig_with_token(&admin, &user, &token)?,
        )?;
        let port = free_port()?;
        let mut overrides = vec![("admin-address", format!("127.0.0.1:{port}"))];
        if spec.flag("webhook-address").is_some() {
            overrides.push(("webhook-address", format!("127.0.0.1:{webhook_port}")));
        }
        let overrides: Vec<(&str, &str)> = overrides.iter().map(|(f, v)| (*f, v.as_str())).collect();
        let args = spec.local_args(&dir.join(&spec.component), &overrides)?;
        let mut command = Command::new(Component::binary_path(&spec.binary));
        command
            .args(&args)
            .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env_remove("RUST_LOG");
        spawn_detached(&spec.component, command, &credentials)?;
        wait_ready(&spec.component, port)?;
        println!(
            "    {} ready (admin on 127.0.0.1:{port}, log {})",
            spec.component,
            log_file(&spec.component).display()
        );
    }
    let mut agent = Command::new(Component::binary_path("xtask"));
    agent.args(["nodes", "agent", "--prefix", NODE_PREFIX]);
    spawn_detached("node-agent", agent, kubeconfig)?;
    Ok(())
}

fn spawn_detached(name: &str, mut command: Command, kubeconfig: &Path) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt as _;
    let log = log_file(name);
    let out = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let child = command
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        // A process group of its own: it outlives this command and ignores its Ctrl-C.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    std::fs::write(pid_file(name), child.id().to_string())?;
    Ok(())
}

fn wait_ready(name: &str, port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if http_status(port, "/readyz") == Some(200) {
            return Ok(());
        }
        if !running(name) {
            bail!("{name} exited:\n{}", e2e::component::tail(&log_file(name), 30));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    bail!(
        "{name} not ready after {WAIT:?}:\n{}",
        e2e::component::tail(&log_file(name), 30)
    )
}

fn pid_of(name: &str) -> Option<u32> {
    std::fs::read_to_string(pid_file(name)).ok()?.trim().parse().ok()
}

fn running(name: &str) -> bool {
    pid_of(name).is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
}

/// Ends the demo's processes (SIGTERM, then SIGKILL after 5 s).
fn stop_processes() {
    for name in PROCESSES {
        let Some(pid) = pid_of(name) else { continue };
        let signal = |sig: &str| {
            Command::new("kill")
                .args([sig, &pid.to_string()])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if signal("-TERM") {
            let deadline = Instant::now() + Duration::from_secs(5);
            while running(name) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            if running(name) {
                signal("-KILL");
            }
        }
        let _ = std::fs::remove_file(pid_file(name));
    }
}

/// A fresh demo namespace and no demo nodes.
async fn reset(client: &Client) -> anyhow::Result<()> {
    e2e::nodes::delete(client, &e2e::nodes::owner_selector(&node_owner())).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(NAMESPACE).await?.is_some() {
        println!("==> removing the previous run's namespace {NAMESPACE}");
        let _ = namespaces.delete(NAMESPACE, &DeleteParams::background()).await;
        wait_for("the old namespace to go", Duration::from_secs(120), || async {
            Ok(namespaces.get_opt(NAMESPACE).await?.is_none().then_some(()))
        })
        .await?;
    }
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": NAMESPACE } }))?;
    namespaces.create(&Default::default(), &ns).await?;
    let unlimited = json!({ "quota": -1, "limit": -1, "overQuotaWeight": 1 });
    apply(
        client,
        &[json!({
            "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": { "name": QUEUE },
            "spec": { "resources": { "gpu": { "quota": 8, "limit": -1, "overQuotaWeight": 1 },
                                     "cpu": unlimited, "memory": unlimited } },
        })],
    )
    .await?;
    Ok(())
}

async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        if Instant::now() > deadline {
            let logs = ["scheduler", "podgrouper"]
                .map(|n| {
                    format!(
                        "-- {n} log (last 20 lines)\n{}",
                        e2e::component::tail(&log_file(n), 20)
                    )
                })
                .join("\n");
            bail!("timed out after {timeout:?} waiting for {what}\n{logs}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn apply(client: &Client, objects: &[Value]) -> anyhow::Result<()> {
    let mut applier = e2e::Applier::new(client.clone());
    for object in objects {
        applier
            .apply_value(object.clone(), Placement::DefaultTo(NAMESPACE))
            .await?;
    }
    Ok(())
}

async fn pods(client: &Client, selector: &str) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    Ok(api.list(&ListParams::default().labels(selector)).await?.items)
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn bound(pods: &[Pod]) -> usize {
    pods.iter().filter(|p| node_of(p).is_some()).count()
}

fn gang(name: &str, min_member: u32, priority_class: &str) -> Value {
    json!({
        "apiVersion": "scheduling.run.ai/v2", "kind": "PodGroup",
        "metadata": { "name": name, "namespace": NAMESPACE },
        "spec": { "minMember": min_member, "queue": QUEUE, "priorityClassName": priority_class },
    })
}

/// A Job of `n` one-GPU pods in PodGroup `group` (the seeds' annotation), for `scheduler`.
fn gpu_job(name: &str, group: Option<&str>, n: u32, scheduler: &str) -> Value {
    let annotations = group.map_or_else(|| json!({}), |g| json!({ keys::POD_GROUP_SEED: g }));
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": name, "namespace": NAMESPACE },
        "spec": {
            "parallelism": n, "completions": n, "backoffLimit": 6,
            "template": {
                "metadata": { "annotations": annotations },
                "spec": {
                    "schedulerName": scheduler,
                    "restartPolicy": "Never",
                    "containers": [{ "name": "worker", "image": "example.com/worker:1",
                                     "resources": { "limits": { keys::GPU_RESOURCE: "1" } } }],
                },
            },
        },
    })
}

async fn unschedulable_message(client: &Client, group: &str) -> anyhow::Result<Option<String>> {
    let api: Api<api::PodGroup> = Api::namespaced(client.clone(), NAMESPACE);
    let Some(pg) = api.get_opt(group).await? else {
        return Ok(None);
    };
    Ok(pg
        .status
        .and_then(|s| {
            s.conditions
                .into_iter()
                .find(|c| c.type_ == "Unschedulable" && c.status == "True")
        })
        .and_then(|c| c.message))
}

async fn events(client: &Client, reason: &str) -> anyhow::Result<Vec<Event>> {
    let api: Api<Event> = Api::namespaced(client.clone(), NAMESPACE);
    Ok(api
        .list(&ListParams::default().fields(&format!("reason={reason}")))
        .await?
        .items)
}

fn scene(title: &str) {
    println!("\n==== {title}");
}

async fn walkthrough(client: &Client, kubeconfig: &Path) -> anyhow::Result<()> {
    let nodes = |prefix: &str, count: usize| {
        FakeNodes::new(format!("{NODE_PREFIX}-{prefix}"))
            .owned_by(node_owner())
            .count(count)
            .gpus(2)
    };
    e2e::nodes::create(client, &nodes("gpu", 3)).await?;

    scene("1. Seed 003: an 8-pod, one-GPU-each training job on 3 nodes x 2 GPUs");
    // kube-scheduler, from the same Kubernetes build, on three identical nodes of its own.
    let kube_nodes = nodes("kube", 3)
        .label(KUBE_NODES, "true")
        .taint(KUBE_NODES, "true", "NoSchedule");
    e2e::nodes::create(client, &kube_nodes).await?;
    let kube_scheduler =
        KubeScheduler::start(kubeconfig, KUBE_SCHEDULER, 50, &demo_dir().join("kube-scheduler"))?;
    let mut kube_job = gpu_job("train-kube-scheduler", None, 8, KUBE_SCHEDULER);
    kube_job["spec"]["template"]["spec"]["nodeSelector"] = json!({ KUBE_NODES: "true" });
    kube_job["spec"]["template"]["spec"]["tolerations"] =
        json!([{ "key": KUBE_NODES, "operator": "Exists" }]);
    apply(
        client,
        &[
            gang("train", 8, "train"),
            gpu_job("train", Some("train"), 8, keys::SCHEDULER_NAME),
            kube_job,
        ],
    )
    .await?;
    let waiting = wait_for("the gang's explanation", WAIT, || async {
        Ok(unschedulable_message(client, "train")
            .await?
            .filter(|m| !m.starts_with("waiting for pods")))
    })
    .await?;
    wait_for("kube-scheduler to bind what fits", WAIT, || async {
        let p = pods(client, "job-name=train-kube-scheduler").await?;
        Ok((p.len() == 8 && bound(&p) >= 6).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let kube = pods(client, "job-name=train-kube-scheduler").await?;
    let ours = pods(client, "job-name=train").await?;
    println!(
        "  kube-scheduler: {} of 8 pods bound, {} pending: {} GPUs held by a job that cannot start",
        bound(&kube),
        kube.len() - bound(&kube),
        bound(&kube)
    );
    println!(
        "  kai-scheduler:  {} of 8 pods bound; `kubectl describe pg train -n {NAMESPACE}` says:",
        bound(&ours)
    );
    println!("                  {waiting}");
    drop(kube_scheduler);
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), NAMESPACE);
    jobs.delete("train-kube-scheduler", &DeleteParams::background())
        .await?;
    e2e::nodes::delete_by_prefix(client, &format!("{NODE_PREFIX}-kube")).await?;

    scene("2. A fourth node with 2 GPUs joins");
    let joined = Instant::now();
    e2e::nodes::create(
        client,
        &FakeNodes::new(format!("{NODE_PREFIX}-gpu-extra"))
            .owned_by(node_owner())
            .gpus(2),
    )
    .await?;
    let placed = wait_for("all 8 pods bound", WAIT, || async {
        let p = pods(client, "job-name=train").await?;
        Ok((bound(&p) == 8).then_some(p))
    })
    .await?;
    let mut per_node = std::collections::BTreeMap::<&str, usize>::new();
    for p in &placed {
        *per_node.entry(node_of(p).unwrap_or("-")).or_default() += 1;
    }
    println!(
        "  all 8 pods bound together {:.1}s after the node joined: {per_node:?}",
        joined.elapsed().as_secs_f64()
    );
    if let Some(e) = events(client, keys::EVENT_POD_GROUP_SCHEDULED).await?.first() {
        println!(
            "  event {}: {}",
            keys::EVENT_POD_GROUP_SCHEDULED,
            e.message.clone().unwrap_or_default()
        );
    }

    scene(
        "3. An inference gang (priority 125) arrives on the full cluster; the train gang (50) is preemptible",
    );
    apply(
        client,
        &[
            gang("serve", 2, "inference"),
            gpu_job("serve", Some("serve"), 2, keys::SCHEDULER_NAME),
        ],
    )
    .await?;
    let serving = wait_for("the inference gang bound", WAIT, || async {
        let p = pods(client, "job-name=serve").await?;
        Ok((p.len() == 2 && bound(&p) == 2).then_some(p))
    })
    .await?;
    let evicted: Vec<String> = events(client, keys::EVENT_EVICT)
        .await?
        .into_iter()
        .filter_map(|e| e.message)
        .collect();
    println!(
        "  inference pods bound on {:?}",
        serving.iter().filter_map(node_of).collect::<Vec<_>>()
    );
    println!(
        "  {} eviction events, e.g.: {}",
        evicted.len(),
        evicted.first().map_or("-", String::as_str)
    );
    println!("  the train Job makes new pods; its gang waits whole again until 8 GPUs are free");

    scene("4. GPU sharing: two pods of half a GPU each");
    let half = |name: &str| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "namespace": NAMESPACE, "labels": { keys::QUEUE_LABEL: QUEUE },
                          "annotations": { keys::GPU_FRACTION: "0.5" } },
            "spec": { "schedulerName": keys::SCHEDULER_NAME,
                      "containers": [{ "name": "notebook", "image": "example.com/notebook:1" }] },
        })
    };
    // The API server calls the scheduler's GPU-sharing webhook once it trusts its certificate.
    e2e::webhook::wait_until_serving(client, NAMESPACE, WAIT).await?;
    apply(client, &[half("notebook-a"), half("notebook-b")]).await?;
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    wait_for("both half-GPU pods bound", WAIT, || async {
        let a = api.get("notebook-a").await?;
        let b = api.get("notebook-b").await?;
        Ok((node_of(&a).is_some() && node_of(&b).is_some()).then_some(()))
    })
    .await?;
    // What each container got, as the node agent (playing the kubelet) started it.
    let seen = wait_for("both half-GPU pods started", WAIT, || async {
        let mut seen = Vec::new();
        for name in ["notebook-a", "notebook-b"] {
            let p = api.get(name).await?;
            let Some(env) = p.annotations().get(e2e::agent::CONTAINER_ENV_ANNOTATION).cloned() else {
                return Ok(None);
            };
            let env: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> =
                serde_json::from_str(&env)?;
            let got = env.get("notebook").cloned().unwrap_or_default();
            seen.push((
                name,
                got.get(keys::NVIDIA_VISIBLE_DEVICES).cloned().unwrap_or_default(),
                got.get(keys::GPU_PORTION).cloned().unwrap_or_default(),
            ));
        }
        Ok(Some(seen))
    })
    .await?;
    for (name, devices, portion) in &seen {
        println!("  {name} starts with NVIDIA_VISIBLE_DEVICES={devices} GPU_PORTION={portion}");
    }
    if seen[0].1.is_empty() || seen[0].1 != seen[1].1 {
        bail!("the two half-GPU pods do not see the same single GPU: {seen:?}");
    }
    let kubectl = Kubectl::new(kubeconfig.as_os_str().to_owned())?;
    let columns = "custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,GPU-FRACTION:.metadata.annotations.gpu-fraction,GPU-GROUP:.metadata.labels.runai-gpu-group";
    println!("  kubectl get pods -o {columns}");
    let table = kubectl
        .run_ok(
            &[
                "get",
                "pods",
                "-n",
                NAMESPACE,
                "notebook-a",
                "notebook-b",
                "-o",
                columns,
            ],
            None,
        )
        .await?;
    for line in table.lines() {
        println!("    {line}");
    }
    let shared: Vec<_> = [api.get("notebook-a").await?, api.get("notebook-b").await?]
        .iter()
        .map(|p| {
            (
                node_of(p).map(str::to_owned),
                p.labels().get(keys::GPU_GROUP).cloned(),
            )
        })
        .collect();
    if shared[0] != shared[1] {
        bail!("the two half-GPU pods do not share a GPU: {shared:?}");
    }
    Ok(())
}

fn print_epilogue(kubeconfig: &Path) {
    let kubectl = DevPaths::from_env().kubectl();
    println!("\n==== Done. Everything keeps running:");
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!("  alias kubectl={}", kubectl.display());
    println!("  kubectl get pg -n {NAMESPACE}; kubectl describe pg train -n {NAMESPACE}; kubectl get queues");
    println!(
        "  cargo run -q --bin kai -- queues     # the queue tree; `kai explain pg train -n {NAMESPACE}`"
    );
    println!("  logs: {}", demo_dir().display());
    println!(
        "  more GPU nodes: cargo xtask nodes create --prefix gpu --count 2 --gpus 8, and `cargo xtask nodes agent --prefix gpu` to run their pods"
    );
    println!("Stop the components: cargo xtask demo down. Stop the cluster: cargo xtask cluster down.");
}
